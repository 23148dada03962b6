"""recgo's parallel loops on torch's OpenMP team: same results as on Go's threads, from any thread."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch

import recgo
from recgo import _threads
from recgo.modules import optim


def _train(steps: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    cfgs = [recgo.EmbeddingBagConfig(num_embeddings=5000, embedding_dim=32, name=f"t{i}", feature_names=[f"f{i}"])
            for i in range(4)]
    ebc = recgo.EmbeddingBagCollection(cfgs, optimizer=optim.Adagrad(lr=0.1), seed=3)
    g = torch.Generator().manual_seed(0)
    out = None
    for _ in range(steps):
        lengths = torch.randint(0, 20, (4 * 512,), generator=g)
        values = torch.randint(0, 5000, (int(lengths.sum()),), generator=g)
        kjt = recgo.KeyedJaggedTensor([f"f{i}" for i in range(4)], values, lengths=lengths)
        out = ebc(kjt).values()
        (out * torch.arange(out.shape[1])).sum().backward()
    return out.detach().clone(), ebc.state_dict()["embedding_bags.t2.weight"].clone()


def test_openmp_team_gives_the_same_results_as_go_threads() -> None:
    torch.ones(1 << 16).add_(1)  # make sure torch's OpenMP runtime is loaded
    assert _threads.openmp_runtime() is not None
    assert _threads.use_openmp(True)
    try:
        on = _train()
        results: list[tuple[torch.Tensor, torch.Tensor]] = []
        t = threading.Thread(target=lambda: results.append(_train()))  # off the main thread: Go's threads
        t.start()
        t.join()
    finally:
        _threads.use_openmp(False)
    off = _train()
    for a, b, c in zip(on, off, results[0]):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_environment_switch_turns_it_off() -> None:
    code = ("import torch, recgo._threads as t; torch.ones(4).add_(1); "
            "print(t.configure_default())")
    for value, want in (("0", "False"), ("1", "True")):
        env = os.environ | {"RECGO_OPENMP": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == want


def test_one_torch_thread_gives_a_one_thread_team_and_the_same_results() -> None:
    """torch.set_num_threads(1) caps the team recgo borrows: the kernels run on the main thread alone."""
    torch.ones(1 << 16).add_(1)
    assert _threads.use_openmp(True)
    before = torch.get_num_threads()
    try:
        wide = _train()
        torch.set_num_threads(1)
        narrow = _train()
    finally:
        torch.set_num_threads(before)
        _threads.use_openmp(False)
    for a, b in zip(wide, narrow):
        assert torch.equal(a, b)


def test_share_of_cores_follows_torchrun_unless_gomaxprocs_is_set() -> None:
    cores = len(os.sched_getaffinity(0))
    assert _threads.share_of_cores({}) is None
    assert _threads.share_of_cores({"LOCAL_WORLD_SIZE": "1"}) is None
    assert _threads.share_of_cores({"LOCAL_WORLD_SIZE": "2"}) == max(1, cores // 2)
    assert _threads.share_of_cores({"LOCAL_WORLD_SIZE": str(4 * cores)}) == 1
    assert _threads.share_of_cores({"LOCAL_WORLD_SIZE": "2", "GOMAXPROCS": "3"}) is None
    assert _threads.share_of_cores({"LOCAL_WORLD_SIZE": "two"}) is None


@pytest.mark.parametrize("ranks", [1, 2, 3, 1000])
def test_share_cores_sizes_torch_and_recgo_to_the_ranks_share(ranks: int) -> None:
    before_torch, before_go = torch.get_num_threads(), recgo.num_threads()
    try:
        n = recgo.share_cores(ranks)
        assert n == max(1, len(os.sched_getaffinity(0)) // ranks)
        assert (torch.get_num_threads(), recgo.num_threads()) == (n, n)
    finally:
        torch.set_num_threads(before_torch)
        recgo.set_num_threads(before_go)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_share_cores_refuses_a_rank_count_that_is_not_a_positive_integer(bad: object) -> None:
    with pytest.raises(recgo.InvalidInputError, match="share_cores"):
        recgo.share_cores(bad)  # type: ignore[arg-type]


def _fresh_python(code: str, drop: tuple[str, ...], env: dict[str, str]) -> str:
    """The last line a fresh Python prints running ``code``, with the variables ``drop`` removed from
    this process's environment and ``env`` added (how the library reads its environment at load)."""
    base = {k: v for k, v in os.environ.items() if k not in drop}
    out = subprocess.run([sys.executable, "-c", code], env=base | env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_import_under_torchrun_takes_the_ranks_share() -> None:
    """A rank started by torchrun (LOCAL_WORLD_SIZE in its environment) sizes Go's workers to its
    share at import; GOMAXPROCS in the environment still wins."""
    code = "import recgo; print(recgo.num_threads())"
    cores = len(os.sched_getaffinity(0))
    assert int(_fresh_python(code, ("GOMAXPROCS",), {"LOCAL_WORLD_SIZE": str(2 * cores)})) == 1
    assert int(_fresh_python(code, ("GOMAXPROCS",), {"LOCAL_WORLD_SIZE": "2", "GOMAXPROCS": "3"})) == 3


@pytest.mark.parametrize("env, paced", [({}, True), ({"GOGC": "50"}, False), ({"RECGO_GC_HEADROOM": "0"}, False),
                                        ({"RECGO_GC_HEADROOM": "64"}, True)])
def test_gc_pacing_follows_the_environment(env: dict[str, str], paced: bool) -> None:
    """The library paces Go's collector from load unless the process set GOGC or RECGO_GC_HEADROOM=0
    (the pacer's own behaviour is tested in internal/gcpace)."""
    code = "import recgo, recgo._lib as l; print(l.gc_percent())"
    percent = int(_fresh_python(code, ("GOGC", "RECGO_GC_HEADROOM"), env))
    if paced:
        assert 10 <= percent <= 100, percent
    else:
        assert percent == -1


_POLICY_FIELD = 38  # sched policy in /proc/<pid>/task/<tid>/stat, counted after the ")" of the name


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_BATCH and /proc are Linux's")
@pytest.mark.parametrize("env, batched", [({}, True), ({"RECGO_SYSMON_BATCH": "0"}, False)])
def test_sysmon_is_set_to_batch_at_load_unless_turned_off(env: dict[str, str], batched: bool) -> None:
    """At load the library sets Go's sysmon thread, and only it, to SCHED_BATCH (how it is found is
    tested in internal/sysmon); RECGO_SYSMON_BATCH=0 leaves every thread as it was."""
    code = (
        "import os, recgo, recgo._lib as l\n"
        "recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(8, 4, 't', ['f'])])  # the library at work\n"
        "t = l.sysmon_thread()\n"
        "pol = {int(x): open(f'/proc/self/task/{x}/stat').read().rsplit(')', 1)[1].split()"
        f"[{_POLICY_FIELD}] for x in os.listdir('/proc/self/task')}}\n"
        "print(t, os.getpid(), sorted(x for x, p in pol.items() if p == '3'))\n"
    )
    for _ in range(3):  # the search is bounded (250 ms): on a loaded machine it may give up, setting nothing
        out = _fresh_python(code, ("RECGO_SYSMON_BATCH",), env)
        tid, pid, batch = out.split(" ", 2)
        if tid != "0" or not batched:
            break
        assert batch == "[]", out
    if batched:
        assert int(tid) > 0 and tid != pid  # a thread of its own, not Python's
        assert batch == f"[{tid}]", out
    else:
        assert (int(tid), batch) == (0, "[]")
