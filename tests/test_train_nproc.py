"""``recgo train --nproc N``: two gloo ranks train what one process trains on the same global batches.

The spawned worlds are small (world 2, 26 tiny tables, a few steps) and each runs several backends,
so the suite pays the process start-up twice: once for the equality run, once for the failing rank.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from recgo.errors import InvalidInputError
from recgo.sparse import KeyedJaggedTensor
from recgo.train import TrainConfig, Trainer, auc, log_loss, make_source
from recgo.train.distributed import TrainingProcessError, env_world, eval_slice, launch, take
from spawned import ok, one_rank, spawn

# B_RANK: every evaluation scores the whole held-out split in batches of it, on every backend
STEPS, B_RANK = 4, 256


def _cfg(**kw) -> TrainConfig:
    base = dict(model="dlrm", steps=STEPS, batch_size=B_RANK, dim=4, max_rows=200, eval_every=2, seed=1)
    base.update(kw)
    return TrainConfig(**base)


def _kjt(lists: dict[str, list[list[int]]]) -> KeyedJaggedTensor:
    keys = list(lists)
    vals = [i for k in keys for bag in lists[k] for i in bag]
    lens = [len(bag) for k in keys for bag in lists[k]]
    return KeyedJaggedTensor(keys, torch.tensor(vals, dtype=torch.int64), lengths=torch.tensor(lens))


@pytest.mark.parametrize("size,world", [(7, 2), (8, 2), (1, 2), (5, 3), (2, 3)])
def test_eval_slices_cover_every_sample_once(size: int, world: int) -> None:
    parts = [eval_slice(size, r, world) for r in range(world)]
    assert len({len(idx) for idx, _ in parts}) == 1  # equal local batches on every rank
    counted = torch.cat([idx[:real] for idx, real in parts])
    assert torch.equal(counted, torch.arange(size))


def test_take_selects_samples_of_every_feature() -> None:
    bags = {"a": [[1], [2, 3], [], [4]], "b": [[5, 6], [7], [8], []]}
    got = take(_kjt(bags), torch.tensor([3, 1, 1]))
    assert got.keys() == ["a", "b"]
    want = _kjt({k: [v[3], v[1], v[1]] for k, v in bags.items()})
    assert torch.equal(got.values(), want.values()) and torch.equal(got.lengths(), want.lengths())


def test_gathered_metrics_equal_the_single_process_ones() -> None:
    """AUC and log loss of the concatenated per-rank scores are those of the whole split."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(1001, generator=g).round(decimals=1)  # ties across the rank boundary
    labels = (torch.rand(1001, generator=g) < torch.sigmoid(scores)).float()
    parts = [eval_slice(scores.numel(), r, 2) for r in range(2)]
    cat_s = torch.cat([scores[idx][:real] for idx, real in parts])
    cat_l = torch.cat([labels[idx][:real] for idx, real in parts])
    assert auc(cat_s, cat_l) == auc(scores, labels)
    assert log_loss(cat_s, cat_l) == pytest.approx(log_loss(scores, labels), rel=1e-12)


def test_torchrun_environment_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert env_world() is None
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert env_world() == (1, 2)
    with pytest.raises(InvalidInputError, match="torchrun started a world of 2"):
        launch(_cfg(nproc=3), ["recgo"], 3)


def test_nproc_refuses_what_it_cannot_do() -> None:
    with pytest.raises(InvalidInputError, match="sharding"):
        _cfg(nproc=2, sharding="diagonal").validate()


def _close_tables(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], lr: float) -> None:
    # Adagrad's first step on an element moves it by lr·g/(|g| + eps): where g is near zero, float
    # summation order can flip it, so a few elements may differ by up to 2·lr; the rest agree closely.
    diff = torch.cat([(got[n] - want[n]).abs().flatten() for n in want])
    assert float((diff > 1e-5).float().mean()) < 1e-3 and float(diff.max()) <= 2 * lr


def test_two_ranks_train_like_one_process_on_the_global_batch(tmp_path: Path) -> None:
    pytest.importorskip("torchrec")
    cfg = _cfg(nproc=2)
    report = launch(cfg, ["recgo", "torchrec", "torch"], 2, out=tmp_path / "rep", progress=False,
                    weights_dir=str(tmp_path / "w"), threads=1, one_world=True)
    single_cfg = _cfg(batch_size=2 * B_RANK)  # the same global batches in one process
    source = make_source(single_cfg)
    ref = Trainer(single_cfg, source, "recgo")
    ref.run()
    ref_tables = {k.split(".")[1]: v for k, v in ref.model.sparse.module.state_dict().items() if k.endswith("weight")}
    ref_dense = ref.model.dense.state_dict()
    assert report["summary"]["nproc"] == 2 and report["summary"]["global_batch"] == 2 * B_RANK
    for backend in ("recgo", "torchrec", "torch"):
        got = report["backends"][backend]
        assert got["train_loss"] == pytest.approx(ref.history.train_loss, rel=2e-5)
        assert [e["step"] for e in got["evals"]] == [2, 4]
        assert got["final_auc"] == pytest.approx(ref.history.evals[-1]["auc"], abs=1e-4)
        assert got["samples_per_second"] > 0
        saved = torch.load(tmp_path / "w" / f"{backend}.pt", weights_only=False)
        _close_tables(saved["tables"], ref_tables, cfg.sparse_lr)
        for k, v in ref_dense.items():
            torch.testing.assert_close(saved["dense"][k], v, rtol=1e-4, atol=1e-6)
    assert abs(report["backends"]["recgo"]["final_auc"] - report["backends"]["torchrec"]["final_auc"]) < 1e-3
    assert set(report["placement"]["recgo"].values()) == {"hash"}
    assert all(k.split("@")[0] in ("table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise")
               for k in report["placement"]["torchrec"].values())
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"on 2 gloo ranks (global batch {2 * B_RANK}" in md and "| torchrec |" in md


def test_a_failing_rank_stops_the_job_with_its_error() -> None:
    t0 = time.monotonic()
    with pytest.raises(TrainingProcessError, match=r"rank 1 failed: RuntimeError: injected failure on rank 1 at step 2"):
        launch(_cfg(nproc=2, sharding="table_wise", dist_timeout=30.0), ["recgo"], 2, progress=False, fail_at=(1, 2),
               threads=1)
    assert time.monotonic() - t0 < 60  # the peer waiting in a collective is stopped, not left to hang


def test_a_crashing_rank_names_its_signal_and_python_stack() -> None:
    """A rank stopped by a fatal signal leaves no Python error: the launcher's error names the signal
    and carries the Python stack faulthandler wrote as the rank died."""
    with pytest.raises(TrainingProcessError, match=r"(?s)rank 1 exited .*SIGABRT.*its Python threads when it "
                                                   r"stopped:.*in failing.*train_ranks"):
        launch(_cfg(nproc=2, sharding="table_wise", dist_timeout=30.0), ["recgo"], 2, progress=False,
               fail_at=(1, 2, "abort"), threads=1)


def _sparse_group_rank(rank: int, world: int) -> dict:
    import torch.distributed as dist

    from datetime import timedelta

    from recgo.distributed import sparse_ddp_group

    groups = [sparse_ddp_group(30.0), sparse_ddp_group(timedelta(seconds=30))]  # a second one: keys of its own
    out = {"threads": [g._get_backend(torch.device("cpu")).options._threads for g in groups]}
    for k, g in enumerate(groups):
        t = torch.sparse_coo_tensor([[rank, 2]], [1.0, float(rank + k + 1)], (4,))
        dist.all_reduce(t, group=g)
        out[f"sum{k}"] = t.to_dense().tolist()
    return out


def test_the_torch_backends_ddp_group_sums_sparse_gradients_on_one_gloo_thread(tmp_path: Path) -> None:
    """The torch backend's DDP group (``recgo.distributed.sparse_ddp_group``): one gloo worker thread (two sparse
    all-reduces at once corrupt the heap in torch 2.14: benchmarks/sparse_ddp_crash.py), and it sums
    sparse tensors over the ranks as the default group does."""
    results = spawn(_sparse_group_rank, 2, tmp_path)
    ok(results)
    for res in results:
        assert res["threads"] == [1, 1]
        assert res["sum0"] == [1.0, 1.0, 3.0, 0.0] and res["sum1"] == [1.0, 1.0, 5.0, 0.0]


def test_sparse_ddp_group_refuses_bad_calls(tmp_path: Path) -> None:
    from recgo.distributed import sparse_ddp_group

    with pytest.raises(InvalidInputError, match="init_process_group first"):
        sparse_ddp_group()
    with one_rank(tmp_path):
        for bad in (0, -1.0, float("nan"), float("inf"), True, "5"):
            with pytest.raises(InvalidInputError, match="timeout must be"):
                sparse_ddp_group(bad)


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def test_a_terminated_launcher_stops_its_ranks(tmp_path: Path) -> None:
    """SIGTERM (a scheduler stopping the job) to ``recgo train --nproc 2``: the launcher stops its ranks
    and exits (its ranks trained on as orphans before), with Ctrl-C's one-line message."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "python")}
    proc = subprocess.Popen([sys.executable, "-m", "recgo", "train", "--nproc", "2", "--steps", "100000",
                             "--batch-size", "32", "--backend", "torch", "--no-progress", "--out", str(tmp_path)],
                            env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(ranks := _children(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(ranks) >= 2, "the ranks did not start"
    time.sleep(3)  # let them reach training
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted; no report was written to"), err
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{r}").exists() for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [r for r in ranks if Path(f"/proc/{r}").exists()]
    for r in alive:  # do not leave them running if the test fails
        os.kill(r, signal.SIGKILL)
    assert not alive, "ranks outlived their launcher"


def test_a_terminated_single_process_run_cleans_up_as_ctrl_c_does(tmp_path: Path) -> None:
    """SIGTERM to ``recgo train`` in one process, checkpointing every step: it ends with Ctrl-C's
    message and status, and leaves no half-written checkpoint (it died at once before, a temporary
    file of tens of MB left beside the checkpoint each time), so --resume takes the last one."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "python")}
    ck = tmp_path / "ck"
    proc = subprocess.Popen([sys.executable, "-m", "recgo", "train", "--steps", "100000", "--batch-size", "32",
                             "--backend", "recgo", "--no-progress", "--out", str(tmp_path / "out"),
                             "--checkpoint", str(ck), "--checkpoint-every", "1"],
                            env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("ck*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1)  # a few checkpoints in
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted; no report was written to" in err and "; --resume continues" in err, err
    assert not [p.name for p in tmp_path.glob("*.tmp")] + [p.name for p in tmp_path.glob(".*tmp")], \
        list(tmp_path.iterdir())
