"""The other ways back from a backward that failed part-way (docs/sharding.md, "A backward that fails
part-way"), world 2 (gloo) and one rank:

* ``load_state_dict`` of every rank's entries (one world's complete set, as
  ``torch.distributed.checkpoint`` reads them through ``DCPLoadPlanner``) refuses a set whose ranks'
  entries of a table are at different optimizer steps, fixed and dynamic-ID tables alike, and leaves
  the collection as it was; before session 35 it loaded such a torn set without a word;
* a ``load_state_dict`` that gives every table its rows, optimizer state and step clears the mark of a
  rank whose backward raised (a partial one leaves it); before, only ``load()`` did;
* an all-to-all that raises on this rank for a reason of its own gives that error, not
  ``PeerFailureError`` ("a peer died, raised or exceeded the timeout"), and gloo's closed connection
  or timeout says which it was."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import recgo
from recgo.distributed import DCPLoadPlanner, PartialStepError, PeerFailureError, ShardedEmbeddingBagCollection
from recgo.modules import optim
from spawned import one_rank, ok, spawn
import test_distributed_dynamic as dyn
from test_distributed_partial_step import _step

TIMEOUT = 3.0
SHARDING = {"user": "hash", "item": "table_wise", "cat": "row_wise"}  # two dynamic-ID tables, a fixed one


def _make() -> ShardedEmbeddingBagCollection:
    return ShardedEmbeddingBagCollection(dyn.configs(), SHARDING, optimizer=optim.Adam(lr=0.05), seed=5, timeout=TIMEOUT)


def _train(m: ShardedEmbeddingBagCollection, rank: int, world: int, step: int) -> None:
    m(dyn.rank_slice(dyn.global_batch(step, world), rank)).values().sum().backward()


def _torn_set(rank: int, world: int, ck: str) -> dict[str, Any]:
    """Two steps, then this rank's state dict, and a DCP checkpoint of it in which rank 1's entries are
    one step behind (as a save after a step rank 1 did not apply wrote them before session 35)."""
    m = _make()
    for s in range(2):
        _train(m, rank, world, s)
    sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    torn = {k: (v - 1 if rank == 1 and k.endswith(".optimizer_step") else v) for k, v in sd.items()}
    dcp.save({"model": torn}, checkpoint_id=ck)
    return {"sd": sd}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], str]:
    tmp = tmp_path_factory.mktemp("torn-set")
    res = spawn(_torn_set, 2, tmp, str(tmp / "dcp"), wait=90)
    ok(res)
    return res, str(tmp / "dcp")


def _state(m: ShardedEmbeddingBagCollection) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("table", ["user", "cat"])  # a dynamic-ID table's step, a fixed one's
def test_load_state_dict_refuses_a_set_of_ranks_at_different_steps(saved: tuple[list[dict], str], tmp_path: Path,
                                                                   table: str) -> None:
    (r0, r1), _ = saved
    both = r0["sd"] | r1["sd"]  # one world's complete set, as a gather or dcp.load(all_shards=True) holds it
    torn = {k: (v - 1 if k == f"embedding_bags.{table}.rank1_of_2.optimizer_step" else v) for k, v in both.items()}
    with one_rank(tmp_path):
        m = _make()
        m.load_state_dict(both)  # the whole set at one step loads onto one rank
        before = _state(m)
        with pytest.raises(recgo.InvalidInputError, match=rf"table '{table}' is at different optimizer steps in the "
                                                          r"ranks' entries \(\{'rank0_of_2': 2, 'rank1_of_2': 1\}\)"):
            m.load_state_dict(torn)
        after = _state(m)
        assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


def test_dcp_load_refuses_a_torn_set(saved: tuple[list[dict], str], tmp_path: Path) -> None:
    _, ck = saved
    with one_rank(tmp_path):
        m = _make()
        before = _state(m)
        sd = {"model": m.state_dict()}
        dcp.load(sd, checkpoint_id=ck, planner=DCPLoadPlanner())  # every saved rank's entries (another world)
        with pytest.raises(recgo.InvalidInputError, match="different optimizer steps"):
            m.load_state_dict(sd["model"])
        with pytest.raises(recgo.InvalidInputError, match="different optimizer steps"):
            dcp.load({"model": m}, checkpoint_id=ck, planner=DCPLoadPlanner())  # loaded in place
        after = _state(m)
        assert all(torch.equal(after[k], before[k]) for k in before)


def _state_dict_clears(rank: int, world: int) -> dict[str, Any]:
    from sharded_batches import configs
    from test_distributed_partial_step import SHARDING as FIXED

    m = ShardedEmbeddingBagCollection(configs(), FIXED, optimizer=optim.SGD(lr=0.1), seed=1, timeout=TIMEOUT)
    _step(m, rank, world, 0)
    good = {k: v.detach().clone() for k, v in m.state_dict().items()}
    got: dict[str, Any] = {"step": _step(m, rank, world, 1, interrupt=True)}
    if rank == world - 1:  # refusals on this rank alone
        partial = {k: v for k, v in good.items() if not k.startswith("embedding_bags.th.")}
        m.load_state_dict(partial, strict=False)  # one table short: the mark stays
        got["partial"] = type(pytest.raises(PartialStepError, m.state_dict).value).__name__
        m.load_state_dict({k: v for k, v in good.items() if not k.endswith("optimizer_step")}, strict=False)
        got["no_steps"] = type(pytest.raises(PartialStepError, m.state_dict).value).__name__
    m.load_state_dict(good)  # every rank: the whole state clears the mark
    got["steps"] = [int(s.optimizer_step) for s in m.embedding_bags.values()]
    got["after"] = _step(m, rank, world, 2)
    return got


def test_a_complete_load_state_dict_clears_the_mark(tmp_path: Path) -> None:
    r0, r1 = spawn(_state_dict_clears, 2, tmp_path, wait=90)
    ok([r0, r1])
    assert (r0["step"], r1["step"]) == ("ok", "KeyboardInterrupt")
    assert (r1["partial"], r1["no_steps"]) == ("PartialStepError", "PartialStepError")
    assert r0["steps"] == r1["steps"] == [1] * 5
    assert r0["after"] == r1["after"] == "ok"


def _local_error(rank: int, world: int) -> dict[str, Any]:
    """Rank 1's all-to-all raises a ValueError of its own in the backward exchange."""
    from sharded_batches import configs, global_batch, local_batch
    from test_distributed_partial_step import SHARDING as FIXED

    m = ShardedEmbeddingBagCollection(configs(), FIXED, optimizer=optim.SGD(lr=0.1), seed=1, timeout=TIMEOUT)
    out = m(local_batch(global_batch(0, world), rank)).values()
    real = dist.all_to_all_single

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("a local mistake")

    if rank == 1:
        dist.all_to_all_single = broken
    try:
        out.sum().backward()
    except Exception as exc:
        return {"type": type(exc).__name__, "msg": str(exc)}
    finally:
        dist.all_to_all_single = real
    return {"type": None}


def test_a_local_error_in_the_exchange_is_not_called_a_peer_failure(tmp_path: Path) -> None:
    r0, r1 = spawn(_local_error, 2, tmp_path, wait=60)
    assert (r1["type"], r1["msg"]) == ("ValueError", "a local mistake")
    assert r0["type"] == "PeerFailureError", r0  # rank 1 left the exchange: closed, or no answer in time
    assert "a peer closed the connection" in r0["msg"] or "no peer answer within the 3 s timeout" in r0["msg"]


def test_gloo_errors_say_what_failed() -> None:
    from recgo.distributed._exchange import Groups, peer_error

    g = Groups(None, None, None, 0, 2, 1, 2, timedelta(seconds=3))
    closed = RuntimeError("[/x/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:3")
    late = RuntimeError("[/x/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 3000ms "
                        "for send operation to complete")
    what = "the all-to-all on the world group failed"
    assert "rank 0: the all-to-all on the world group failed: a peer closed the connection" in str(
        peer_error(g, what, closed))
    assert "no peer answer within the 3 s timeout" in str(peer_error(g, what, late))
    assert "gloo failed" in str(peer_error(g, what, dist.DistBackendError("NCCL? no: gloo abort")))
    assert peer_error(g, what, RuntimeError("a local shape mismatch")) is None
    assert peer_error(g, what, ValueError("bad split sizes")) is None
