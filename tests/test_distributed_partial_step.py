"""A backward exchange that fails on one rank after its last op (gloo; flat, world 2, and hierarchical,
world 4 as 2 nodes × 2 ranks): the peers that finished the exchange applied the step, this rank did not. A rank's update is all or nothing (the engine's
last stage, after every op), but the ranks are not atomic with each other, so the world's shards
hold two steps. Before session 35 every rank could then ``save()`` that state (ranks at steps 2 and
1), and ``load()`` took the set without a word. Now the rank whose backward raised refuses to step,
save or give its ``state_dict`` (``PartialStepError``) until ``load()``, and ``load()`` refuses a set
whose files hold a table at different steps (docs/sharding.md, failures)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist

import recgo
from recgo.distributed import PartialStepError, PeerFailureError, ShardedEmbeddingBagCollection
from recgo.modules import optim
from recgo.modules.embedding import load_checkpoint, save_checkpoint
from sharded_batches import configs, global_batch, local_batch
from spawned import ok, one_rank, spawn

TIMEOUT = 10.0  # a peer that refuses closes the connection as it exits; a loaded machine needs the slack
SHARDING = {"th": "hash", "tt": "table_wise", "tr": "row_wise", "td": "hash", "tp": "hash"}
# A backward's ops without data-parallel tables: flat, the header then the gradients (world group);
# hierarchical, the node group's header and gradients, then the rail group's (every rank's last op is
# on its rail, so a rank applies only once its node and its rail both finished: probed, session 35).
BACKWARD_OPS = {"flat": 2, "hierarchical": 4}
MODES: dict[str, dict[str, Any]] = {"flat": {"mode": "flat"},
                                    "hierarchical": {"mode": "hierarchical", "nodes": 2, "ranks_per_node": 2}}


def _steps(m: ShardedEmbeddingBagCollection) -> list[int]:
    return [int(s.optimizer_step) for s in m.embedding_bags.values()]


def _outcome(fn: Callable[[], Any]) -> str:
    """"ok" or the name of what ``fn`` raised."""
    try:
        fn()
    except (PartialStepError, PeerFailureError, recgo.RecgoError) as exc:
        return type(exc).__name__
    return "ok"


def _weights(m: ShardedEmbeddingBagCollection) -> list[torch.Tensor]:
    return [s.weight.detach().clone() for s in m.embedding_bags.values()]


def _make(mode: str) -> ShardedEmbeddingBagCollection:
    return ShardedEmbeddingBagCollection(configs(), SHARDING, optimizer=optim.SGD(lr=0.1), seed=1, timeout=TIMEOUT,
                                         **MODES[mode])


def _step(m: ShardedEmbeddingBagCollection, rank: int, world: int, n: int, interrupt: bool = False) -> str:
    """Train step ``n``; with ``interrupt`` the last rank is interrupted (KeyboardInterrupt) right after its
    backward exchange's last op, before its update: its peers have every gradient and apply the step."""
    out = m(local_batch(global_batch(n, world), rank)).values()
    real, ops = dist.all_to_all_single, [0]

    def last_op_then_interrupt(*args: Any, **kwargs: Any) -> Any:
        ops[0] += 1
        got = real(*args, **kwargs)
        if ops[0] == BACKWARD_OPS[m._mode]:  # noqa: SLF001
            raise KeyboardInterrupt
        return got

    if interrupt and rank == world - 1:
        dist.all_to_all_single = last_op_then_interrupt
    try:
        out.sum().backward()
    except KeyboardInterrupt:
        return "KeyboardInterrupt"
    except PeerFailureError:
        return "PeerFailureError"
    finally:
        dist.all_to_all_single = real
    return "ok"


def _interrupted_backward(rank: int, world: int, good: str, torn: str, mode: str) -> dict[str, Any]:
    m = _make(mode)
    _step(m, rank, world, 0)
    m.save(good)
    got: dict[str, Any] = {"step": _step(m, rank, world, 1, interrupt=True), "steps": _steps(m)}
    if rank == world - 1:  # refusals on this rank alone: no collective
        got["refused"] = [_outcome(lambda: m(local_batch(global_batch(2, world), rank))), _outcome(m.state_dict)]
    m.load(good)  # every rank: the last checkpoint clears the mark
    got["reloaded"] = _steps(m)
    got["after_load"] = _step(m, rank, world, 2)
    ref = _make(mode)  # the uninterrupted run: steps 0 and 2
    _step(ref, rank, world, 0)
    _step(ref, rank, world, 2)
    got["resumed_equal"] = all(torch.equal(a, b) for a, b in zip(_weights(m), _weights(ref)))
    got["interrupted_again"] = _step(m, rank, world, 3, interrupt=True)
    got["save"] = _outcome(lambda: m.save(torn))
    return got


def _spawn(tmp: Path, mode: str, world: int) -> tuple[list[dict], Path]:
    """The ranks' outcomes, and the folder holding the good checkpoint ("good") and the refused save's ("torn")."""
    return spawn(_interrupted_backward, world, tmp, str(tmp / "good"), str(tmp / "torn"), mode, wait=90), tmp


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path]:
    """Flat, world 2."""
    return _spawn(tmp_path_factory.mktemp("partial-step"), "flat", 2)


@pytest.fixture(scope="module")
def hierarchical(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path]:
    """Hierarchical, world 4 as 2 nodes × 2 ranks (rank 3, interrupted, is node 1's second rank)."""
    return _spawn(tmp_path_factory.mktemp("partial-step-hier"), "hierarchical", 4)


def test_a_backward_applied_by_one_rank_alone_cannot_be_saved(world: tuple[list[dict], Path]) -> None:
    (r0, r1), tmp = world
    for r, res in enumerate((r0, r1)):
        assert "error" not in res, f"rank {r}: {res['error']}"
    # rank 0 finished the exchange and applied step 2; rank 1 was interrupted before its update
    assert (r0["step"], r1["step"]) == ("ok", "KeyboardInterrupt")
    assert r0["steps"] == [2] * 5 and r1["steps"] == [1] * 5
    assert r1["refused"] == ["PartialStepError", "PartialStepError"]
    assert r0["reloaded"] == r1["reloaded"] == [1] * 5
    assert r0["after_load"] == r1["after_load"] == "ok"  # load() cleared the mark
    assert r0["resumed_equal"] and r1["resumed_equal"]
    assert (r0["interrupted_again"], r1["interrupted_again"]) == ("ok", "KeyboardInterrupt")
    # the marked rank refuses before the save's first collective; its peer gets PeerFailureError there
    assert (r0["save"], r1["save"]) == ("PeerFailureError", "PartialStepError")
    assert len(list((tmp / "torn").glob("shard-*.pt"))) < 2  # never a complete set mixing steps 3 and 2


def test_a_hierarchical_backward_applied_by_three_ranks_cannot_be_saved(
        hierarchical: tuple[list[dict], Path]) -> None:
    """Rank 3 interrupted after its last op (on its rail, with rank 1): ranks 0 to 2 finished their node
    and rail ops and applied the step, every table of theirs at step 2; rank 3 holds step 1, is marked,
    and refuses; no complete set of 4 files is written; load() clears the mark and training resumes
    equal to an uninterrupted run."""
    ranks, tmp = hierarchical
    ok(ranks)
    *done, r3 = ranks
    assert [r["step"] for r in ranks] == ["ok"] * 3 + ["KeyboardInterrupt"]
    assert all(r["steps"] == [2] * 5 for r in done) and r3["steps"] == [1] * 5
    assert r3["refused"] == ["PartialStepError", "PartialStepError"]
    assert all(r["reloaded"] == [1] * 5 and r["after_load"] == "ok" and r["resumed_equal"] for r in ranks)
    assert [r["interrupted_again"] for r in ranks] == ["ok"] * 3 + ["KeyboardInterrupt"]
    assert [r["save"] for r in ranks] == ["PeerFailureError"] * 3 + ["PartialStepError"]
    assert len(list((tmp / "torn").glob("shard-*.pt"))) < 4


def test_load_refuses_a_set_whose_files_hold_a_table_at_different_steps(world: tuple[list[dict], Path],
                                                                        tmp_path: Path) -> None:
    """A set saved before session 35 after such a step: rank 1's file a step behind, one save id."""
    torn = tmp_path / "torn"
    shutil.copytree(world[1] / "good", torn)
    doc = load_checkpoint(torn / "shard-1-of-2.pt")
    save_checkpoint({k: (v - 1 if k.endswith(".step") else v) for k, v in doc.items()}, torn / "shard-1-of-2.pt")
    with one_rank(tmp_path):
        m = _make("flat")
        before = _weights(m)
        with pytest.raises(recgo.RecgoIOError, match="different optimizer steps"):
            m.load(torn)
        assert all(torch.equal(b, s.weight) for b, s in zip(before, m.embedding_bags.values()))


@pytest.mark.parametrize("second_interrupt", [False, True])
def test_a_backward_drive_that_raises_marks_even_if_interrupted_again(monkeypatch: pytest.MonkeyPatch,
                                                                      second_interrupt: bool) -> None:
    """Session 46: the handler marks the collection before any Python call, so a Ctrl-C inside it
    (while :func:`mark` records the failure) still leaves the collection marked; before, a second
    interrupt there left a failed step unmarked."""
    from types import SimpleNamespace

    from recgo.distributed import _failed

    def failing_drive(*args: Any) -> None:
        raise KeyboardInterrupt

    def interrupted_mark(coll: Any, exc: BaseException) -> None:
        raise KeyboardInterrupt  # the second Ctrl-C, as the handler starts

    coll = SimpleNamespace(_partial_step=None, _groups=SimpleNamespace(rank=0), _wire=None)
    monkeypatch.setattr(_failed, "drive", failing_drive)
    if second_interrupt:
        monkeypatch.setattr(_failed, "mark", interrupted_mark)
    with pytest.raises(KeyboardInterrupt):
        _failed.drive_backward(coll, None, {})
    with pytest.raises(PartialStepError, match="rank 0: forward: this collection's backward exchange failed"):
        _failed.refuse(coll, "forward")
    monkeypatch.setattr(_failed, "drive", lambda *args: None)  # a drive that completes leaves no mark
    coll._partial_step = None
    _failed.drive_backward(coll, None, {})
    assert coll._partial_step is None


def test_a_state_dict_read_during_a_backward_drive_is_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The threads contract: another thread's ``state_dict()`` while the training thread drives its
    backward sees no mark (a mark set from before the drive did: session 46's first fix)."""
    from types import SimpleNamespace

    from recgo.distributed import _failed

    coll = SimpleNamespace(_partial_step=None, _groups=SimpleNamespace(rank=0), _wire=None)
    seen: list[object] = []
    monkeypatch.setattr(_failed, "drive", lambda *args: seen.append(_failed.refuse(coll, "state_dict()")))
    _failed.drive_backward(coll, None, {})
    assert seen == [None] and coll._partial_step is None
