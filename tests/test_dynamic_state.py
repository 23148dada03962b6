"""Dynamic-ID tables' state moved in and out: checkpoints that round-trip bit for bit and resume
identically, refused loads that keep the table, rows imported with their optimizer state, and loads
through torch.distributed.checkpoint (the tables and helpers of test_dynamic.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor, dynamic
from recgo.dynamic import DynamicConfig
from recgo.errors import InvalidInputError
from recgo.modules import Adagrad, Adam
from test_dynamic import assert_state_dicts_equal, kjt, make, train_batches
from test_dynamic_sketch_layout import old_sketch


def test_import_rows_refuses_optimizer_state_of_the_wrong_shape_and_defaults_it_to_zeros() -> None:
    """A [2, 5] state for two rows of Adagrad's width 2 was read as a flat [4] (ID 2 got ID 1's values);
    without a state a stateful optimizer's rows start from zeros (a fresh optimizer's)."""
    e = make(dim=2, bound=4, optimizer=Adagrad(lr=0.1))
    ids, w = torch.tensor([1, 2]), torch.ones(2, 2)
    for bad in (torch.arange(10.0).reshape(2, 5), torch.zeros(4, 1), torch.zeros(1, 2)):
        with pytest.raises(recgo.InvalidInputError, match=r"optimizer_state of shape .* \(expected \[2, 2\]\)"):
            dynamic.import_rows(e, "t", ids, w, bad)
    with pytest.raises(recgo.InvalidInputError, match=r"weight of shape \(2, 3\) for 2 IDs of dim 2 \(expected \[2, 2\]\)"):
        dynamic.import_rows(e, "t", ids, torch.ones(2, 3))  # torch's bare reshape RuntimeError before
    dynamic.import_rows(e, "t", ids, w, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert e.state_dict()["embedding_bags.t.optimizer_state"].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    dynamic.import_rows(e, "t", ids, w)
    assert e.state_dict()["embedding_bags.t.optimizer_state"].tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_import_rows_keeps_the_admitted_count_and_refuses_per_id_arrays_of_another_length() -> None:
    """import_rows set the admitted count to the IDs imported (20 became 2), though documented to keep
    the table's, and took counts/last_seen longer than the IDs, cutting them. Found by an adversarial pass."""
    e = make(dim=2, bound=4, optimizer=Adagrad(lr=0.1))
    dynamic.import_rows(e, "t", torch.tensor([1, 2]), torch.ones(2, 2), admitted=20)
    dynamic.import_rows(e, "t", torch.tensor([3, 4]), torch.ones(2, 2))
    assert dynamic.stats(e, "t").admitted == 20
    for what in ("counts", "last_seen"):
        with pytest.raises(recgo.InvalidInputError, match=rf"{what} of shape \(5,\) for 2 IDs \(one per ID\)"):
            dynamic.import_rows(e, "t", torch.tensor([5, 6]), torch.ones(2, 2), **{what: torch.arange(5)})
    assert dynamic.lookup(e, "t", torch.tensor([3, 4, 5])).tolist() == [0, 1, -1]  # unchanged


def test_dcp_loads_dynamic_tables_with_the_planner(tmp_path: Path) -> None:
    """torch.distributed.checkpoint loads into the state dict's current shapes, which a dynamic table's
    entries outgrow as it trains (DCP raised a size mismatch); DCPLoadPlanner resizes them to the
    checkpoint's, and the loaded model trains on as the saved one does."""
    import torch.distributed.checkpoint as dcp

    def model(seed: int) -> EmbeddingBagCollection:
        return EmbeddingBagCollection([
            EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=64, feature_names=["f"],
                               dynamic=DynamicConfig(min_count=2)),
            EmbeddingBagConfig(name="u", embedding_dim=4, num_embeddings=10, feature_names=["g"])],
            optimizer=Adagrad(lr=0.1), seed=seed)

    a, b = model(1), model(2)
    batch = KeyedJaggedTensor(["f", "g"], torch.tensor([1, 2, 3, 1, 2, 5, 1, 2]), lengths=torch.tensor([3, 3, 1, 1]))
    for _ in range(3):
        a(batch).values().sum().backward()
    dcp.save({"model": a.state_dict()}, checkpoint_id=tmp_path)
    sd = {"model": b.state_dict()}
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

    with pytest.raises(CheckpointException, match="Size mismatch"):  # DCP's own planner
        dcp.load({"model": model(3).state_dict()}, checkpoint_id=tmp_path)
    dcp.load(sd, checkpoint_id=tmp_path, planner=dynamic.DCPLoadPlanner())
    b.load_state_dict(sd["model"])
    for _ in range(2):
        a(batch).values().sum().backward()
        b(batch).values().sum().backward()
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def _seeded(seed: int, min_count: int = 3) -> EmbeddingBagCollection:
    return EmbeddingBagCollection([EmbeddingBagConfig(name="t", embedding_dim=2, num_embeddings=200, feature_names=["f"],
                                                      dynamic=DynamicConfig(min_count=min_count, seed=seed))],
                                  optimizer=Adagrad(lr=0.1))


_IDS = torch.arange(100, 160)
_BATCH = KeyedJaggedTensor(["f"], _IDS, lengths=torch.tensor([60]))


def _admitted_at_third_sighting(coll: torch.nn.Module) -> int:
    coll(_BATCH).values().sum().backward()
    return int((dynamic.lookup(coll, "t", _IDS) >= 0).sum())


@pytest.mark.parametrize("how", ["file", "state_dict", "sharded"])
def test_a_checkpoint_of_another_seed_is_refused(tmp_path: Path, how: str) -> None:
    """The admission sketch's counters sit where the saved table's seed hashed the pending IDs: a
    min_count=3 table of seed 1 loaded into one of seed 12345 silently, and its 60 IDs seen twice were
    then not admitted at their third sighting (0 of 60). Such a checkpoint is refused by name, the table
    left as it was, through every loading path (dynamic.load's file, load_state_dict, a sharded
    collection's merge of the saved sketches); the same seed resumes as the saved table does (its third
    sighting admits all 60), a checkpoint of a table without a sketch loads whatever the seed, and one
    saved before the meta held the seed (10 values) loads as before."""
    if how == "sharded":
        import torch.distributed as dist
        from recgo.distributed import ShardedEmbeddingBagCollection
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        def build(seed: int, min_count: int = 3) -> torch.nn.Module:
            coll = _seeded(seed, min_count)
            return ShardedEmbeddingBagCollection.from_ebc(coll) if how == "sharded" else coll

        def load(src: EmbeddingBagCollection, dst: torch.nn.Module, old_meta: bool = False) -> None:
            if how == "file":
                path = tmp_path / "t.ck"
                dynamic.save(src, "t", path)
                dynamic.load(dst, "t", path)
                return
            sd = src.state_dict()
            if old_meta:  # as saved then: no seed, and the sketch placed by the indexing of its time
                meta = sd["embedding_bags.t.dynamic_meta"]
                sd["embedding_bags.t.dynamic_sketch"], sd["embedding_bags.t.dynamic_sketch_adds"] = old_sketch(
                    _IDS.tolist(), 2, 1, int(meta[dynamic._M_SKETCHW]))  # saved's sightings and seed
                sd["embedding_bags.t.dynamic_meta"] = meta[:10].clone()
            dst.load_state_dict(sd)

        saved = _seeded(1)
        for _ in range(2):
            saved(_BATCH).values().sum().backward()
        other = build(12345)
        before = dynamic.stats(other, "t")
        with pytest.raises(recgo.InvalidInputError, match=r"seed 1, the table's seed is 12345"):
            load(saved, other)
        assert dynamic.stats(other, "t") == before
        assert _admitted_at_third_sighting(other) == 0  # its own first sighting
        same = build(1)
        load(saved, same)
        reference = _seeded(1)
        for _ in range(2):
            reference(_BATCH).values().sum().backward()
        assert _admitted_at_third_sighting(reference) == _admitted_at_third_sighting(same) == 60
        plain = _seeded(1, min_count=1)  # no sketch: nothing depends on the seed
        plain(_BATCH).values().sum().backward()
        loaded = build(12345, min_count=1)
        load(plain, loaded)
        assert bool((dynamic.lookup(loaded, "t", _IDS) >= 0).all())
        if how != "file":  # a state dict saved before the meta held the seed
            old = build(1)
            load(saved, old, old_meta=True)
            assert _admitted_at_third_sighting(old) == 60
            build_other = build(12345)
            load(saved, build_other, old_meta=True)  # seed unknown: accepted, as before
    finally:
        if how == "sharded":
            dist.destroy_process_group()


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("sequence", [False, True])
def test_activation_checkpointing_counts_each_batch_once(reentrant: bool, sequence: bool) -> None:
    """torch.utils.checkpoint runs the forward again inside backward; that recomputation used to count
    as a second training forward (the clock ran twice as fast and an ID seen once passed min_count=2).
    Now a checkpointed model trains exactly as the plain one: the same rows, state and statistics."""
    from torch.utils.checkpoint import checkpoint

    def build() -> torch.nn.Module:
        cfg = [EmbeddingBagConfig(50, 4, "t", ["f"], dynamic=DynamicConfig(min_count=2, eviction="lru"))]
        ebc = EmbeddingBagCollection(cfg, optimizer=Adagrad(lr=0.1), seed=0)
        return recgo.EmbeddingCollection([recgo.EmbeddingConfig(50, 4, "t", ["f"])], share=ebc) if sequence else ebc

    def out(m: torch.nn.Module, kjt: KeyedJaggedTensor) -> torch.Tensor:
        res = m(kjt)
        return res["f"].values() if sequence else res.values()

    plain, ckpt = build(), build()
    for step in range(4):
        ids = torch.tensor([1000 + step, 7, 7, 2000 + (step // 2)])
        kjt = KeyedJaggedTensor(["f"], ids, lengths=torch.tensor([2, 2]))
        scale = torch.linspace(0.5, 1.5, 4 * (2 if not sequence else 4)).view(-1, 4)
        (out(plain, kjt) * scale).sum().backward()
        one = torch.ones(1, requires_grad=True)  # the reentrant variant needs an input that requires grad
        checkpoint(lambda k, x: (out(ckpt, k) * scale * x).sum(), kjt, one, use_reentrant=reentrant).backward()
    owner = (lambda m: m._owner) if sequence else (lambda m: m)
    a, b = dynamic.stats(owner(plain), "t"), dynamic.stats(owner(ckpt), "t")
    assert (a.step, a.admitted, a.rows) == (b.step, b.admitted, b.rows) == (4, 3, 3)  # 7, 2000, 2001
    sa, sb = owner(plain).state_dict(), owner(ckpt).state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_activation_checkpointing_counts_each_batch_once_when_sharded(tmp_path: Path) -> None:
    """The same for a sharded collection (one rank): its engine took the module's mode alone, so the
    recomputation in backward counted the batch again (step 8, 7 IDs admitted for 4 steps)."""
    import torch.distributed as dist
    from torch.utils.checkpoint import checkpoint

    from recgo.distributed import ShardedEmbeddingBagCollection

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        def build() -> ShardedEmbeddingBagCollection:
            cfg = [EmbeddingBagConfig(50, 4, "t", ["f"], dynamic=DynamicConfig(min_count=2, eviction="lru"))]
            return ShardedEmbeddingBagCollection.from_ebc(EmbeddingBagCollection(cfg, optimizer=Adagrad(lr=0.1), seed=0))
        plain, ckpt = build(), build()
        for step in range(4):
            kjt = KeyedJaggedTensor(["f"], torch.tensor([1000 + step, 7, 7, 2000 + (step // 2)]),
                                    lengths=torch.tensor([2, 2]))
            plain(kjt).values().sum().backward()
            one = torch.ones(1, requires_grad=True)
            checkpoint(lambda k, x: (ckpt(k).values() * x).sum(), kjt, one, use_reentrant=False).backward()
        a, b = dynamic.stats(plain, "t"), dynamic.stats(ckpt, "t")
        assert (a.step, a.admitted, a.rows) == (b.step, b.admitted, b.rows) == (4, 3, 3)
    finally:
        dist.destroy_process_group()


def _pooled_reference(m: torch.nn.Module, ids: list[int], sequence: bool) -> torch.Tensor:
    """The float64 output of a 2-sample batch ``ids`` (two IDs per sample) as ``m``'s training forward of
    it, just run, pooled it: an ID without a row (pending, not yet admitted) reads zeros, never ``default``."""
    owner = getattr(m, "_owner", m)
    rows = dynamic.lookup(owner, "t", torch.tensor(ids)).tolist()
    w = owner.embedding_bags["t"].weight.detach().double()
    vecs = torch.stack([w[r] if r >= 0 else torch.zeros(w.shape[1], dtype=torch.float64) for r in rows])
    return vecs if sequence else vecs.view(2, 2, -1).sum(1)


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("sequence, sharded", [(False, False), (True, False), (False, True)])  # (sharded: pooled)
def test_activation_checkpointing_recomputes_pending_ids_as_zeros_not_the_default(
        tmp_path: Path, reentrant: bool, sequence: bool, sharded: bool) -> None:
    """With a default vector, the recomputation in backward looked rows up as an eval forward does: a
    pending ID (seen, not yet admitted) pooled zeros in the forward but the default in the recomputation,
    so the dense gradients were those of values the forward never produced ([10, 10] for [0, 0]). The
    recomputation reads the rows the forward read: the dense gradient is the float64 pooled output of a
    training forward, and the model trains as the plain one does."""
    from torch.utils.checkpoint import checkpoint

    if sharded:
        import torch.distributed as dist
        from recgo.distributed import ShardedEmbeddingBagCollection
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)

    def build() -> torch.nn.Module:
        cfg = [EmbeddingBagConfig(50, 2, "t", ["f"], dynamic=DynamicConfig(min_count=2, default=[5.0, 5.0]))]
        ebc = EmbeddingBagCollection(cfg, optimizer=Adagrad(lr=0.1), seed=0)
        if sharded:
            return ShardedEmbeddingBagCollection.from_ebc(ebc)
        return recgo.EmbeddingCollection([recgo.EmbeddingConfig(50, 2, "t", ["f"])], share=ebc) if sequence else ebc

    def out(m: torch.nn.Module, kjt: KeyedJaggedTensor) -> torch.Tensor:
        res = m(kjt)
        return res["f"].values() if sequence else res.values()

    try:
        plain, ckpt = build(), build()
        for step in range(4):
            ids = [1000 + step, 7, 7, 2000 + (step // 2)]
            kjt = KeyedJaggedTensor(["f"], torch.tensor(ids), lengths=torch.tensor([2, 2]))
            xp, xc = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
            loss = (out(plain, kjt) * xp).sum()
            ref = _pooled_reference(plain, ids, sequence)  # what its training forward pooled
            loss.backward()
            checkpoint(lambda k, x: (out(ckpt, k) * x).sum(), kjt, xc, use_reentrant=reentrant).backward()
            assert torch.allclose(xc.grad.double(), ref.sum(0), atol=1e-6), (step, xc.grad, ref.sum(0))
            assert torch.equal(xc.grad, xp.grad), step
        assert dynamic.stats(plain, "t") == dynamic.stats(ckpt, "t")
        sa, sb = plain.state_dict(), ckpt.state_dict()
        assert list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
    finally:
        if sharded:
            dist.destroy_process_group()


def test_a_training_lookup_counts_a_repeated_id_once_as_a_forward_does() -> None:
    """lookup(train=True) of [5, 5] with min_count=2 returned [-1, 0] (two answers for one ID, admitted
    after one step): each occurrence counted as a sighting. It now deduplicates, in order of first
    appearance, as a forward does; a refused batch leaves the table as it was."""
    looked, fwd = make(dim=2, bound=8, min_count=2), make(dim=2, bound=8, min_count=2)
    assert dynamic.lookup(looked, "t", torch.tensor([5, 5]), train=True).tolist() == [-1, -1]
    fwd(kjt({"f": [[5, 5]]}))
    assert dynamic.stats(looked, "t") == dynamic.stats(fwd, "t")
    assert dynamic.lookup(looked, "t", torch.tensor([7, 5, 7, 5, 9]), train=True).tolist() == [-1, 0, -1, 0, -1]
    assert dynamic.lookup(looked, "t", torch.tensor([9, 7, 9]), train=True).tolist() == [1, 2, 1]  # first seen first
    full = make(dim=2, bound=2)
    dynamic.lookup(full, "t", torch.tensor([1, 2]), train=True)
    before = dynamic.stats(full, "t")
    with pytest.raises(recgo.CapacityError, match=r'^dynamic table "t": this batch needs 3 rows.*nothing was changed'):
        full(kjt({"f": [[3, 4, 5]]}))
    assert dynamic.stats(full, "t") == before
    assert dynamic.lookup(full, "t", torch.tensor([1, 2])).tolist() == [0, 1]


@pytest.mark.parametrize("dyn", [dict(min_count=2, eviction="lru"), dict(eviction="lfu", max_age=6)])
def test_checkpoint_round_trip_is_bit_exact_and_training_resumes_identically(tmp_path: Path, dyn) -> None:
    kw = dict(dim=3, bound=16, optimizer=Adam(lr=0.05), evict_fraction=0.25, seed=2, **dyn)
    a = make(**kw)
    train_batches(a, 30, seed=1)
    assert dynamic.stats(a, "t").evicted > 0
    path = tmp_path / "ckpt.pt"
    a.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"], "atomic save leaves no temporary file"

    b = make(**kw)
    train_batches(b, 5, seed=9)  # state to be overwritten
    b.load(path)
    assert_state_dicts_equal(a.state_dict(), b.state_dict())
    assert dynamic.stats(a, "t") == dynamic.stats(b, "t")

    outs_a, outs_b = train_batches(a, 15, seed=4), train_batches(b, 15, seed=4)
    for x, y in zip(outs_a, outs_b):
        assert torch.equal(x, y)
    assert_state_dicts_equal(a.state_dict(), b.state_dict())


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_a_tables_clock_passes_two_to_the_32(tmp_path: Path, eviction: str) -> None:
    """A table whose clock starts 10 steps short of 2^32 trains as one starting at 0 (the same rows,
    evictions and outputs; last-seen steps 2^32 − 10 later), and its checkpoint then loads. The
    clock was 32 bits: it wrapped to 0, evicted by wrapped ages and its checkpoints (rows last seen
    "after" the step) were refused."""
    start = 2**32 - 10
    kw = dict(dim=3, bound=16, optimizer=Adam(lr=0.05), evict_fraction=0.25, seed=2, eviction=eviction, max_age=8)
    zero, late = make(**kw), make(**kw)
    dynamic.import_rows(late, "t", torch.zeros(0, dtype=torch.int64), torch.zeros(0, 3), step=start)
    for x, y in zip(train_batches(zero, 30, seed=4), train_batches(late, 30, seed=4)):
        assert torch.equal(x, y)
    a, b = zero.state_dict(), late.state_dict()
    assert int(b["embedding_bags.t.dynamic_meta"][dynamic._M_STEP]) == start + 30 and dynamic.stats(late, "t").evicted > 0
    used = a["embedding_bags.t.dynamic_counts"] > 0
    assert torch.equal(b["embedding_bags.t.dynamic_last_seen"][used], a["embedding_bags.t.dynamic_last_seen"][used] + start)
    for k in ("weight", "optimizer_state", "dynamic_ids", "dynamic_counts", "dynamic_free"):
        assert torch.equal(a[f"embedding_bags.t.{k}"], b[f"embedding_bags.t.{k}"]), k
    late.save(tmp_path / "late.pt")
    again = make(**kw)
    again.load(tmp_path / "late.pt")
    assert_state_dicts_equal(late.state_dict(), again.state_dict())


def test_loading_another_shape_or_a_bad_id_map_raises_and_keeps_the_table() -> None:
    a = make(dim=3, bound=16, optimizer=Adagrad(lr=0.1), min_count=2)
    train_batches(a, 10, seed=1)
    sd = a.state_dict()
    for other in (make(dim=4, bound=16, optimizer=Adagrad(lr=0.1), min_count=2),
                  make(dim=3, bound=32, optimizer=Adagrad(lr=0.1), min_count=2),
                  make(dim=3, bound=16, optimizer=Adagrad(lr=0.1))):  # no sketch: other admission shape
        with pytest.raises(InvalidInputError):
            other.load_state_dict(sd)

    fixed = EmbeddingBagCollection([EmbeddingBagConfig(name="t", embedding_dim=3, num_embeddings=16,
                                                       feature_names=["f"])], optimizer=Adagrad(lr=0.1))
    b = make(dim=3, bound=16, optimizer=Adagrad(lr=0.1), min_count=2)
    with pytest.raises(InvalidInputError, match="lacks the dynamic-table entries"):
        b.load_state_dict(fixed.state_dict())

    before = b.state_dict()
    bad = {k: v.clone() for k, v in sd.items()}
    hw = int(bad["embedding_bags.t.dynamic_meta"][7])
    live = [r for r in range(hw) if bad["embedding_bags.t.dynamic_counts"][r] > 0]
    bad["embedding_bags.t.dynamic_ids"][live[1]] = bad["embedding_bags.t.dynamic_ids"][live[0]]
    with pytest.raises(InvalidInputError, match="more than one row"):
        b.load_state_dict(bad)
    assert_state_dicts_equal(before, b.state_dict())


@pytest.mark.parametrize("edit, match", [
    (lambda sd: sd.__setitem__("embedding_bags.t.dynamic_ids", sd["embedding_bags.t.dynamic_ids"].double()),
     "dtype float64"),
    (lambda sd: sd.__setitem__("embedding_bags.t.dynamic_meta", sd["embedding_bags.t.dynamic_meta"][:5]),
     "dynamic_meta"),
    (lambda sd: sd["embedding_bags.t.dynamic_meta"].__setitem__(7, 10_000), "fewer than"),
    (lambda sd: sd["embedding_bags.t.dynamic_meta"].__setitem__(4, -1), "step"),
    (lambda sd: sd["embedding_bags.t.dynamic_counts"].__setitem__(0, -5), "count"),
    (lambda sd: (sd["embedding_bags.t.dynamic_meta"].__setitem__(8, 1),
                 sd.__setitem__("embedding_bags.t.dynamic_free", torch.tensor([0]))), "free row 0"),
])
def test_malformed_id_map_entries_raise(edit, match) -> None:
    a = make(dim=2, bound=64, min_count=2)
    train_batches(a, 6, seed=2)
    sd = {k: v.clone() for k, v in a.state_dict().items()}
    assert sd["embedding_bags.t.dynamic_counts"][0] > 0
    edit(sd)
    b = make(dim=2, bound=64, min_count=2)
    before = b.state_dict()
    with pytest.raises(InvalidInputError, match=match):
        b.load_state_dict(sd)
    assert_state_dicts_equal(before, b.state_dict())


def test_failed_save_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ebc = make(dim=2, bound=64)
    train_batches(ebc, 3, seed=1)
    path = tmp_path / "c.pt"
    ebc.save(path)
    good = path.read_bytes()
    train_batches(ebc, 3, seed=2)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        ebc.save(path)
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_recomputation_after_another_forward_moved_the_rows_is_refused(reentrant: bool) -> None:
    """Gradient accumulation over a checkpointed forward: a second training forward evicted the first's ID
    (its row given to another) before the first's backward recomputed it, and the recomputation read the
    new ID's row: the dense gradient was [0, 0] for the pooled [0.25, -0.13], and (reentrant) the new ID's
    row took the old ID's gradient. It is refused by name; with no admission or eviction in between the
    recomputation runs (the forward's rows are the table's). Found by an adversarial pass."""
    from torch.utils.checkpoint import checkpoint

    def kj(ids: list[int]) -> KeyedJaggedTensor:
        return KeyedJaggedTensor(["f"], torch.tensor(ids), lengths=torch.tensor([len(ids)]))

    ebc = EmbeddingBagCollection([EmbeddingBagConfig(1, 2, "t", ["f"], dynamic=DynamicConfig())],
                                 optimizer=recgo.modules.optim.SGD(lr=1.0))
    x = torch.ones(1, 2, requires_grad=True)
    first = checkpoint(lambda x: ebc(kj([1])).values() * x, x, use_reentrant=reentrant)
    ebc(kj([1]))  # a training forward of the same ID: rows unchanged, the recomputation may run
    first.sum().backward()
    torch.testing.assert_close(x.grad, first.detach() / x.detach())
    x.grad = None
    first = checkpoint(lambda x: ebc(kj([1])).values() * x, x, use_reentrant=reentrant)
    ebc(kj([2])).values().sum()  # evicts ID 1: row 0 is ID 2's now
    with pytest.raises(InvalidInputError, match=r"activation checkpointing: dynamic table\(s\) \['t'\] admitted or "
                                                "evicted IDs, or loaded a checkpoint, between this forward and its "
                                                "recomputation"):
        first.sum().backward()


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_recomputation_after_a_load_moved_the_rows_is_refused(reentrant: bool) -> None:
    """A checkpoint loaded between a checkpointed forward and its recomputation gave the forward's row to
    another ID and restored the admitted and evicted counts the guard compared, so the recomputation read
    the loaded ID's row in silence (session 44). It is refused by name."""
    from torch.utils.checkpoint import checkpoint

    def kj(ids: list[int]) -> KeyedJaggedTensor:
        return KeyedJaggedTensor(["f"], torch.tensor(ids), lengths=torch.tensor([len(ids)]))

    def table() -> EmbeddingBagCollection:
        return EmbeddingBagCollection([EmbeddingBagConfig(1, 2, "t", ["f"], dynamic=DynamicConfig())], seed=0,
                                      optimizer=recgo.modules.optim.SGD(lr=1.0))

    other = table()
    other(kj([2]))  # its row 0 holds ID 2; admitted 1, evicted 0
    ebc, x = table(), torch.ones(1, 2, requires_grad=True)
    first = checkpoint(lambda x: ebc(kj([1])).values() * x, x, use_reentrant=reentrant)  # admitted 1, evicted 0
    ebc.load_state_dict(other.state_dict())  # row 0 is ID 2's now; the same admitted and evicted counts
    assert recgo.dynamic.stats(ebc, "t").admitted == 1 and recgo.dynamic.stats(ebc, "t").evicted == 0
    with pytest.raises(InvalidInputError, match=r"\['t'\] admitted or evicted IDs, or loaded a checkpoint"):
        first.sum().backward()
