"""The admission sketch's indexing travels with a checkpoint (``dynamic_meta[11]``; engine/dynamic's
SketchIndexing). Until session 43 the sketch placed an ID's 4 counters by one mix of its hash
(indexing 1), since then by two independent ones (2); a checkpoint saved before then has a shorter meta
and its counters where indexing 1 put them. Such a checkpoint loaded by indexing 2 counted its pending
IDs on other counters (they started from about zero again); now a table keeps indexing 1 for it, so an
old run continues exactly, and saves it back marked 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recgo import EmbeddingBagCollection, EmbeddingBagConfig, dynamic
from recgo.dynamic import _M_INDEXING, _M_SEED, _M_SKETCHW, _META_LEN, DynamicConfig
from recgo.errors import InvalidInputError
from recgo.modules import Adagrad

_M64 = (1 << 64) - 1
_SHARDS, _DEPTH = 64, 4
SEED, MIN_COUNT = 5, 4
IDS = torch.arange(100, 160)


def _mix64(x: int) -> int:
    """kernels.Mix64 (SplitMix64's finaliser)."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def old_sketch(ids: list[int], sightings: int, seed: int, sketch_width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sketch (counters, additions per shard) of a table of ``seed`` and ``sketch_width`` that saw
    each of ``ids`` in ``sightings`` batches, by the indexing until session 43 (engine/dynamic's
    SketchV1, written out: counter d of a shard's sketch is lo + d·hi of one mix of the ID's hash),
    with conservative update and the halving after 10 × the shard width additions."""
    w = sketch_width // _SHARDS
    cells = [[0] * (_DEPTH * w) for _ in range(_SHARDS)]
    adds = [0] * _SHARDS
    for _ in range(sightings):
        for i in ids:
            h = _mix64((i & _M64) ^ seed)
            shard, g = h >> 58, _mix64(h ^ 0x9E3779B97F4A7C15)
            lo, hi = g & 0xFFFFFFFF, (g >> 32) | 1
            idx = [d * w + ((lo + d * hi) & (w - 1)) for d in range(_DEPTH)]
            c = cells[shard]
            m = min(c[j] for j in idx)
            if m == 255:
                continue
            for j in idx:
                if c[j] == m:
                    c[j] = m + 1
            adds[shard] += 1
            if adds[shard] >= 10 * w:
                cells[shard] = [v // 2 for v in c]
                adds[shard] //= 2
    return (torch.tensor([v for c in cells for v in c], dtype=torch.uint8), torch.tensor(adds, dtype=torch.int64))


def _table(min_count: int = MIN_COUNT) -> EmbeddingBagCollection:
    config = EmbeddingBagConfig(name="t", embedding_dim=2, num_embeddings=200, feature_names=["f"],
                                dynamic=DynamicConfig(min_count=min_count, seed=SEED))
    return EmbeddingBagCollection([config], optimizer=Adagrad(lr=0.1))


def old_state_dict(meta_len: int, sightings: int = 2, ids: torch.Tensor = IDS) -> dict[str, torch.Tensor]:
    """A state dict as recgo before session 43 saved it (``meta_len`` values of meta: 10 before the seed,
    11 with it) of a table that saw ``ids`` in ``sightings`` batches, none admitted yet."""
    sd = _table().state_dict()
    meta = sd["embedding_bags.t.dynamic_meta"]
    sketch, adds = old_sketch(ids.tolist(), sightings, SEED, int(meta[_M_SKETCHW]))
    sd["embedding_bags.t.dynamic_sketch"], sd["embedding_bags.t.dynamic_sketch_adds"] = sketch, adds
    sd["embedding_bags.t.dynamic_meta"] = meta[:meta_len].clone()
    return sd


def _admitted(ebc: torch.nn.Module, ids: torch.Tensor = IDS) -> int:
    """One training sighting of ``ids``; how many of them hold a row after it."""
    return int((dynamic.lookup(ebc, "t", ids, train=True) >= 0).sum())


def test_the_meta_lengths() -> None:
    assert (_M_SEED, _M_INDEXING, _META_LEN) == (10, 11, 12)
    assert int(dynamic.export_state(_table(), "t")["dynamic_meta"][_M_INDEXING]) == 2, "a new table"


@pytest.mark.parametrize("meta_len", [10, 11])
def test_an_old_state_dict_admits_its_pending_ids_at_min_count(meta_len: int) -> None:
    """60 IDs seen twice before the save are admitted at their 4th sighting (min_count 4), all of them
    and none earlier, as the saving run would have. Before the indexing was saved, the counts were read
    where indexing 2 puts them: 0 of 60 were admitted at the 4th sighting (they were at the 6th). The
    table saves its sketch back marked 1, and a load of that continues the same."""
    ebc = _table()
    ebc.load_state_dict(old_state_dict(meta_len))
    meta = dynamic.export_state(ebc, "t")["dynamic_meta"]
    assert meta.numel() == _META_LEN and int(meta[_M_INDEXING]) == 1
    again = _table()
    again.load_state_dict(ebc.state_dict())  # marked 1 now
    for e in (ebc, again):
        assert _admitted(e) == 0  # 3rd sighting
        assert _admitted(e) == len(IDS)  # 4th: min_count
    sa, sb = ebc.state_dict(), again.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_an_old_file_continues_through_save_and_load(tmp_path: Path) -> None:
    """dynamic.save of a table restored from an old state dict writes its sketch marked 1 (engine file
    version 3), and dynamic.load continues it exactly."""
    ebc = _table()
    ebc.load_state_dict(old_state_dict(11))
    dynamic.save(ebc, "t", tmp_path / "t.ck")
    loaded = _table()
    dynamic.load(loaded, "t", tmp_path / "t.ck")
    assert int(dynamic.export_state(loaded, "t")["dynamic_meta"][_M_INDEXING]) == 1
    assert torch.equal(dynamic.export_state(loaded, "t")["dynamic_sketch"],
                       dynamic.export_state(ebc, "t")["dynamic_sketch"])
    assert [_admitted(loaded), _admitted(loaded)] == [0, len(IDS)]


def test_a_table_takes_the_indexing_of_the_sketch_it_loads() -> None:
    """A table of indexing 1 loading a current checkpoint takes indexing 2 (and vice versa, above); a
    checkpoint whose sketch holds no count, or a table without a sketch, takes 2 whatever its meta says
    (nothing in it depends on the indexing). An indexing the engine does not know is refused by name."""
    saved = _table()
    for _ in range(2):
        _admitted(saved)
    ebc = _table()
    ebc.load_state_dict(old_state_dict(11))
    forged = saved.state_dict()
    forged["embedding_bags.t.dynamic_meta"][_M_INDEXING] = 7
    with pytest.raises(InvalidInputError, match=r"sketch indexing 7, expected 1 or 2"):
        ebc.load_state_dict(forged)
    assert int(dynamic.export_state(ebc, "t")["dynamic_meta"][_M_INDEXING]) == 1, "unchanged"
    ebc.load_state_dict(saved.state_dict())
    assert int(dynamic.export_state(ebc, "t")["dynamic_meta"][_M_INDEXING]) == 2
    assert [_admitted(ebc), _admitted(ebc)] == [0, len(IDS)]
    no_sketch = _table(min_count=1).state_dict()
    no_sketch["embedding_bags.t.dynamic_meta"] = no_sketch["embedding_bags.t.dynamic_meta"][:11].clone()
    for min_count, sd in ((MIN_COUNT, old_state_dict(11, sightings=0)), (1, no_sketch)):
        fresh = _table(min_count)
        fresh.load_state_dict(sd)
        assert int(dynamic.export_state(fresh, "t")["dynamic_meta"][_M_INDEXING]) == 2


def test_a_sharded_load_merges_sketches_of_one_indexing(tmp_path: Path) -> None:
    """A re-distributing load merges the saved shards' sketches by their largest counters. Counters of
    two indexings cannot merge: where parts with counts differ, the current indexing's are kept and the
    others' pending sightings dropped, with a warning (their IDs are counted anew); parts of the old
    indexing alone merge under it, so their IDs are admitted at min_count."""
    import torch.distributed as dist

    from recgo.distributed import ShardedEmbeddingBagCollection
    from recgo.distributed import _dynamic

    def part(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k.removeprefix("embedding_bags.t."): v for k, v in sd.items()}

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        others = torch.arange(500, 530)
        current = _table()
        for _ in range(2):
            _admitted(current, others)
        old_a, old_b = part(old_state_dict(11)), part(old_state_dict(10, ids=others))
        both = ShardedEmbeddingBagCollection.from_ebc(_table())
        _dynamic.restore(both, "t", [old_a, old_b], None, "test")
        assert int(dynamic.export_state(both, "t")["dynamic_meta"][_M_INDEXING]) == 1
        assert [_admitted(both), _admitted(both)] == [0, len(IDS)]
        assert [_admitted(both, others), _admitted(both, others)] == [0, len(others)]

        mixed = ShardedEmbeddingBagCollection.from_ebc(_table())
        with pytest.warns(RuntimeWarning, match=r"saved parts \[0\] hold admission sketches of indexing \[1\]"):
            _dynamic.restore(mixed, "t", [old_a, part(current.state_dict())], None, "test")
        state = dynamic.export_state(mixed, "t")
        assert int(state["dynamic_meta"][_M_INDEXING]) == 2
        assert torch.equal(state["dynamic_sketch"], dynamic.export_state(current, "t")["dynamic_sketch"])
        assert [_admitted(mixed, others), _admitted(mixed, others)] == [0, len(others)]
        assert [_admitted(mixed) for _ in range(MIN_COUNT)] == [0, 0, 0, len(IDS)], "counted anew"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("sharded", [False, True])
def test_an_old_dcp_checkpoint_loads_through_the_planner(tmp_path: Path, sharded: bool) -> None:
    """A ``torch.distributed.checkpoint`` written before session 43 holds an 11-value meta: the planner
    resizes the entry to the saved shape, and the unsharded collection (or a sharded one, which
    re-distributes the unsharded table by ID) keeps indexing 1, so its pending IDs are admitted at
    min_count as the saving run would have admitted them."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from recgo.distributed import DCPLoadPlanner, ShardedEmbeddingBagCollection

    dcp.save({"model": old_state_dict(11)}, checkpoint_id=str(tmp_path / "ck"), no_dist=True)
    if sharded:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ebc = ShardedEmbeddingBagCollection.from_ebc(_table()) if sharded else _table()
        sd = {"model": ebc.state_dict()}
        assert int(dynamic.export_state(ebc, "t")["dynamic_meta"][_M_INDEXING]) == 2
        dcp.load(sd, checkpoint_id=str(tmp_path / "ck"), planner=DCPLoadPlanner(), no_dist=not sharded)
        ebc.load_state_dict(sd["model"])
        meta = dynamic.export_state(ebc, "t")["dynamic_meta"]
        assert meta.numel() == _META_LEN and int(meta[_M_INDEXING]) == 1
        assert [_admitted(ebc), _admitted(ebc)] == [0, len(IDS)], "3rd sighting, then the 4th: min_count"
    finally:
        if sharded:
            dist.destroy_process_group()
