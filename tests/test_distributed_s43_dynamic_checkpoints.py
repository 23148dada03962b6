"""Session 43: a sharded dynamic-ID table's checkpoints against one unsharded table seeing the same
stream.

* ``torch.distributed.checkpoint`` without ``all_shards``, reloaded with the table on another rank of
  the same world: the pending sightings (IDs seen, not yet admitted: the admission sketch) stayed with
  the rank that no longer owns the table, and the new owner started from an empty sketch (the IDs
  were admitted ``min_count`` sightings later than one table admits them). They now move with the
  table; a move that would carry rows in use is refused on every rank naming ``all_shards=True``; the
  same layout still reloads each rank's own shard bit for bit.
* The re-distributing load: a saved table of another row bound loaded (each rank's shard under its own
  bound) where the unsharded table and the bit-exact load refuse it; a saved sketch of another width
  was named as "width 4096 ... the table's width 4096"; and every rank took the saved table's
  admitted and evicted totals, so the shards' stats added up to the world size times the table's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import recgo
from recgo import dynamic
from recgo.errors import InvalidInputError
from recgo.modules import optim
from spawned import ok, one_rank, spawn


def _cfg(rows: int = 100, min_count: int = 3, width: int = 0) -> list[recgo.EmbeddingBagConfig]:
    return [recgo.EmbeddingBagConfig(rows, 2, "t", ["f"], dynamic=recgo.DynamicConfig(
        min_count=min_count, sketch_width=width, seed=7, init_min=-0.5, init_max=0.5))]


def _sharded(sharding: str = "table_wise", on: int = 1, rows: int = 100, min_count: int = 3) -> Any:
    from recgo.distributed import ShardedEmbeddingBagCollection

    ranks = {"table_ranks": {"t": on}} if sharding == "table_wise" else {}
    return ShardedEmbeddingBagCollection(_cfg(rows, min_count), sharding, optimizer=optim.SGD(lr=0.5), timeout=60,
                                         **ranks)


def _unsharded(rows: int = 100, min_count: int = 3, width: int = 0) -> recgo.EmbeddingBagCollection:
    return recgo.EmbeddingBagCollection(_cfg(rows, min_count, width), optimizer=optim.SGD(lr=0.5))


# one bag per rank and step: rank r's IDs; the unsharded table sees both ranks' bags as one batch.
# Before the third step 5 and 7 are seen twice, 9 once (a batch counts an ID once)
STREAM = [([5], [7]), ([5, 7], [9]), ([5], [7, 9])]


def _step(m: Any, bags: list[list[int]], first: int = 0) -> torch.Tensor:
    """A training step on ``bags`` (bag ``first`` onwards of the global batch: each bag's gradient
    scale is its global index's, so the ranks' steps add up to the unsharded one's)."""
    kjt = recgo.KeyedJaggedTensor(["f"], torch.tensor([i for b in bags for i in b], dtype=torch.int64),
                                  lengths=torch.tensor([len(b) for b in bags]))
    out = m(kjt).values()
    scale = torch.tensor([[b + 1.0, -2.0 * (b + 1)] for b in range(first, first + len(bags))])
    (out * scale).sum().backward()
    return out.detach()


def _dcp_load(model: Any, path: str, **kw: Any) -> None:
    import torch.distributed.checkpoint as dcp

    from recgo.distributed import DCPLoadPlanner

    sd = {"model": model.state_dict()}
    dcp.load(sd, checkpoint_id=path, planner=DCPLoadPlanner(**kw))
    model.load_state_dict(sd["model"])


def _moved_pending(rank: int, world: int, folder: str) -> dict[str, Any]:
    """Two steps with the table on rank 1 (IDs 5, 7, 9 pending, none admitted: min_count 3), saved with
    DCP, reloaded with the table on rank 0 (no all_shards), the third step: 5 and 7 reach three
    sightings and are admitted, as by the unsharded table fed the same batches."""
    import torch.distributed.checkpoint as dcp

    ref, sh = _unsharded(), _sharded(on=1)
    for bags in STREAM[:2]:
        _step(ref, list(bags))
        _step(sh, [bags[rank]], rank)
    saved = dynamic.export_state(sh, "t")
    dcp.save({"model": sh.state_dict()}, checkpoint_id=f"{folder}/pending")
    moved = _sharded(on=0)
    _dcp_load(moved, f"{folder}/pending")
    now = dynamic.export_state(moved, "t")
    pooled = _step(moved, [STREAM[2][rank]], rank)
    want = _step(ref, list(STREAM[2]))
    ids = torch.tensor([5, 7, 9])
    return {"saved_sketch": saved["dynamic_sketch"], "saved_adds": saved["dynamic_sketch_adds"],
            "loaded_sketch": now["dynamic_sketch"], "loaded_adds": now["dynamic_sketch_adds"],
            "pooled": pooled, "want": want[rank:rank + 1], "rows": moved.locate("t", ids),
            "ref_rows": dynamic.lookup(ref, "t", ids),
            "weights": moved.embedding_bags["t"].weight.detach().clone(),
            "ref_weight": ref.embedding_bags["t"].weight.detach().clone(),
            "stats": dynamic.stats(moved, "t"), "ref_stats": dynamic.stats(ref, "t")}


def test_dcp_reload_moves_the_pending_sightings_with_the_table(tmp_path: Path) -> None:
    res = spawn(_moved_pending, 2, tmp_path, str(tmp_path), wait=180)
    ok(res)
    r0, r1 = res
    assert int(r1["saved_sketch"].sum()) > 0 and int(r0["saved_sketch"].sum()) == 0  # rank 1 saw every ID
    # rank 0 now holds the table's admission state as rank 1 saved it, counter for counter
    assert torch.equal(r0["loaded_sketch"], r1["saved_sketch"]) and torch.equal(r0["loaded_adds"], r1["saved_adds"])
    # the third step admits 5 and 7 (three sightings) on rank 0, as one table does; 9 stays pending
    assert r0["rows"][2] == -1 and r0["ref_rows"][2] == -1
    assert bool((r0["rows"][:2] >= 0).all()) and bool((r0["ref_rows"][:2] >= 0).all()), (r0["rows"], r0["ref_rows"])
    assert r1["rows"].tolist() == [-1, -1, -1]
    for r in res:  # pooled (the admitted rows' values) and the trained rows equal the unsharded table's
        torch.testing.assert_close(r["pooled"], r["want"], rtol=0, atol=1e-6)
    got = r0["weights"][r0["rows"][:2]]
    torch.testing.assert_close(got, r0["ref_weight"][r0["ref_rows"][:2]], rtol=0, atol=1e-6)
    s, ref = r0["stats"], r0["ref_stats"]
    assert (s.rows, s.admitted, s.evicted, s.step) == (ref.rows, ref.admitted, ref.evicted, ref.step) == (2, 2, 0, 3)
    assert (r1["stats"].rows, r1["stats"].admitted, r1["stats"].evicted) == (0, 0, 0)


def _layouts(rank: int, world: int, folder: str) -> dict[str, Any]:
    """A hash-sharded table with pending IDs on both ranks reloads on the same layout bit for bit (each
    rank's own sketch, not a merge of both); rows in use that would change rank without all_shards
    are refused on every rank by name, and a flat state dict refuses a moved layout by name."""
    import torch.distributed.checkpoint as dcp

    from recgo.distributed import DCPLoadPlanner

    out: dict[str, Any] = {}
    sh = _sharded("hash")
    cand = torch.arange(1, 200)
    mine = [cand[sh.owners("t", cand) == r][:2].tolist() for r in range(world)]  # two IDs each rank owns
    for s in range(2):  # each rank's bag sights an ID of each shard
        _step(sh, [[mine[0][s], mine[1][1 - s]]], rank)
    before = dynamic.export_state(sh, "t")
    dcp.save({"model": sh.state_dict()}, checkpoint_id=f"{folder}/hash")
    again = _sharded("hash")
    _dcp_load(again, f"{folder}/hash")
    after = dynamic.export_state(again, "t")
    out["exact"] = all(torch.equal(before[k], after[k]) for k in before)
    out["pending"] = int(before["dynamic_sketch"].sum())
    # rows in use (min_count 1): moving the table onto rank 0 needs rank 1's rows
    used = _sharded(on=1, min_count=1)
    _step(used, [STREAM[0][rank]])
    dcp.save({"model": used.state_dict()}, checkpoint_id=f"{folder}/rows")
    target = _sharded(on=0, min_count=1)
    try:
        _dcp_load(target, f"{folder}/rows")
        out["rows"] = "accepted"
    except InvalidInputError as exc:
        out["rows"] = str(exc)
    out["rows_left"] = dynamic.stats(target, "t").rows  # nothing loaded
    _dcp_load(target, f"{folder}/rows", all_shards=True)
    out["all_shards_rows"] = dynamic.stats(target, "t").rows
    # a flat state dict cannot take in the other rank's admission state: a moved layout is refused
    src = _sharded(on=1)
    _step(src, [STREAM[0][rank]])
    dcp.save(src.state_dict(), checkpoint_id=f"{folder}/flat")
    flat = _sharded(on=0)
    sd = flat.state_dict()
    dcp.load(sd, checkpoint_id=f"{folder}/flat", planner=DCPLoadPlanner())
    try:
        flat.load_state_dict(sd)
        out["flat"] = "accepted"
    except InvalidInputError as exc:
        out["flat"] = str(exc)
    dist.barrier()
    return out


def test_same_layout_reloads_exactly_and_moved_rows_are_refused_by_name(tmp_path: Path) -> None:
    res = spawn(_layouts, 2, tmp_path, str(tmp_path), wait=180)
    ok(res)
    for r, out in enumerate(res):
        assert out["exact"], r
        assert out["pending"] > 0, r  # each rank had pending sightings of its own
        assert "all_shards=True" in out["rows"] and "rows in use change rank" in out["rows"], out["rows"]
        assert out["rows_left"] == 0
        assert "not every rank's of one world" in out["flat"] and "all_shards=True" in out["flat"], out["flat"]
    assert res[0]["all_shards_rows"] == 2 and res[1]["all_shards_rows"] == 0, res


def _merge_checks(rank: int, world: int, folder: str) -> dict[str, Any]:
    """The re-distributing load (an unsharded table's state dict) on this world: another row bound or
    sketch width refused naming both, and the stats of a table that evicted split over the ranks."""

    out: dict[str, Any] = {}
    for what, src in (("bound", _unsharded(rows=50)), ("width", _unsharded(width=8192))):
        _step(src, [[1, 2], [3]])
        sh = _sharded("hash")
        try:
            sh.load_state_dict(src.state_dict())
            out[what] = ("accepted", dynamic.stats(sh, "t").num_embeddings)
        except InvalidInputError as exc:
            out[what] = ("refused", str(exc))
    # min_count 1, 6 rows: the stream evicts (LRU), so admitted > rows
    ref = _unsharded(rows=6, min_count=1)
    for s in range(5):
        _step(ref, [[10 * s + 1, 10 * s + 2], [10 * s + 3]])
    sh = _sharded("hash", rows=6, min_count=1)
    sh.load_state_dict(ref.state_dict())
    out["loaded"], out["ref"] = dynamic.stats(sh, "t"), dynamic.stats(ref, "t")
    # and on again: every rank's state dict, onto the table moved whole to rank 0 (the same world)
    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, {k: v.clone() for k, v in sh.state_dict().items()})
    whole = _sharded("table_wise", on=0, rows=6, min_count=1)
    whole.load_state_dict({k: v for p in parts for k, v in p.items()})
    out["moved"] = dynamic.stats(whole, "t")
    return out


@pytest.fixture(scope="module", params=[1, 2], ids=["world1", "world2"])
def merged(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """:func:`_merge_checks` on every rank of a world of 1 and of 2."""
    tmp = tmp_path_factory.mktemp(f"merge{request.param}")
    res = spawn(_merge_checks, request.param, tmp, str(tmp), wait=180)
    ok(res)
    return res


def test_redistributing_load_refuses_another_row_bound(merged: list[dict[str, Any]]) -> None:
    """As the unsharded table and the bit-exact load refuse it (before: loaded under this bound)."""
    for out in merged:
        kind, msg = out["bound"]
        assert kind == "refused" and "row bound (num_embeddings) is 50, this collection's 100" in msg, out["bound"]


def test_redistributing_load_names_both_sketch_widths(merged: list[dict[str, Any]]) -> None:
    """Before: 'sketch of width 4096 (32768 counters) does not match the table's width 4096'."""
    for out in merged:
        kind, msg = out["width"]
        assert kind == "refused" and "admission sketch is of width 8192 (32768 counters), this table's of width " \
            "4096 (16384 counters)" in msg, out["width"]


def test_redistributed_stats_add_up_to_the_one_tables(merged: list[dict[str, Any]]) -> None:
    """Before: every rank reported the saved table's admitted and evicted totals (2× over 2 ranks)."""
    ref = merged[0]["ref"]
    assert ref.evicted > 0 and ref.admitted == ref.rows + ref.evicted, ref
    for key in ("loaded", "moved"):
        stats = [out[key] for out in merged]
        assert sum(s.rows for s in stats) == ref.rows, (key, stats)
        assert sum(s.admitted for s in stats) == ref.admitted, (key, stats)
        assert sum(s.evicted for s in stats) == ref.evicted, (key, stats)
        assert all(s.admitted - s.evicted == s.rows and s.step == ref.step for s in stats), (key, stats)
    if len(merged) == 2:  # the table moved whole to rank 0: its history goes with its rows
        assert merged[1]["moved"].admitted == merged[1]["moved"].evicted == merged[1]["moved"].rows == 0


def test_the_unsharded_table_refuses_another_bound_and_width_too() -> None:
    """What the sharded loads now do, as the single-process table does."""
    for src in (_unsharded(rows=50), _unsharded(width=8192)):
        _step(src, [[1, 2], [3]])
        with pytest.raises(InvalidInputError):
            _unsharded().load_state_dict(src.state_dict())


def test_one_rank_refuses_another_bound_before_the_engine(tmp_path: Path) -> None:
    """In a one-rank world the re-distributing load took a 50-row table's state into the 100-row one."""
    src = _unsharded(rows=50)
    _step(src, [[1, 2], [3]])
    with one_rank(tmp_path):
        sh = _sharded("hash")
        with pytest.raises(InvalidInputError, match=r"row bound \(num_embeddings\) is 50"):
            sh.load_state_dict(src.state_dict())
        assert dynamic.stats(sh, "t").rows == 0
