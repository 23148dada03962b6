"""Collections on the meta device: shapes without memory, materialised by ``to_empty`` or
``load_state_dict``, copied as meta, and the chunked initial draw a sharded rank uses to take only its
rows of an unsharded table's weights (recgo.modules._init)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from hypothesis import given, settings, strategies as st

from recgo import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from recgo.errors import CapacityError, InvalidInputError
from recgo.modules import _init, optim


def configs() -> list[EmbeddingConfig]:
    return [EmbeddingConfig(100, 8, "t0", ["a", "b"]), EmbeddingConfig(50, 4, "t1", ["c"])]


def batch() -> KeyedJaggedTensor:
    return KeyedJaggedTensor(["a", "b", "c"], torch.tensor([1, 2, 3, 4, 5, 6]), lengths=torch.tensor([1, 1, 2, 0, 1, 1]))


def states_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_ec_on_meta_has_shapes_and_no_memory() -> None:
    ec = EmbeddingCollection(configs(), device="meta", optimizer=optim.Adagrad(lr=0.1), seed=3)
    assert ec.device == torch.device("meta")
    sd = ec.state_dict()
    assert all(t.is_meta for t in sd.values())
    assert sd["embeddings.t0.weight"].shape == (100, 8) and sd["embeddings.t1.optimizer_state"].shape == (50, 4)
    out = ec(batch())
    assert list(out) == ["a", "b", "c"]
    assert [tuple(out[k].values().shape) for k in out] == [(2, 8), (2, 8), (2, 4)]
    assert all(out[k].values().is_meta for k in out)
    assert out["b"].lengths().tolist() == [2, 0]
    ec.reset_parameters()  # a no-op on meta
    for call in (lambda: ec.lookup_stats(batch()), lambda: ec.merged_update().__enter__()):
        with pytest.raises(InvalidInputError, match="meta device; materialise it first"):
            call()


def test_ec_built_under_the_meta_device_context_is_on_meta() -> None:
    with torch.device("meta"):
        ec = EmbeddingCollection(configs())
    assert ec.device == torch.device("meta") and ec.ebc.device == torch.device("meta")


def test_to_empty_and_reset_parameters_give_the_seeded_cpu_collection() -> None:
    ref = EmbeddingCollection(configs(), optimizer=optim.Adagrad(lr=0.1), seed=3)
    ec = EmbeddingCollection(configs(), device="meta", optimizer=optim.Adagrad(lr=0.1), seed=3)
    ec.to_empty(device="cpu")
    assert ec.device == torch.device("cpu")
    ec.reset_parameters()
    assert states_equal(ec, ref)
    got, want = ec(batch()), ref(batch())
    for k in want:
        assert torch.equal(got[k].values(), want[k].values())
    # and it trains as the CPU one does
    for m, out in ((ec, got), (ref, want)):
        sum((jt.values() ** 2).sum() for jt in out.values()).backward()
    assert states_equal(ec, ref)


def test_load_state_dict_materialises_a_meta_ec() -> None:
    ref = EmbeddingCollection(configs(), seed=5)
    ec = EmbeddingCollection(configs(), device="meta")
    ec.load_state_dict(ref.state_dict())
    assert ec.device == torch.device("cpu") and states_equal(ec, ref)
    assert torch.equal(ec(batch())["c"].values(), ref(batch())["c"].values())


def test_to_on_meta_and_other_devices() -> None:
    ec = EmbeddingCollection(configs(), device="meta")
    assert ec.to("meta") is ec and ec.device == torch.device("meta")
    with pytest.raises(InvalidInputError, match="CPU memory"):
        EmbeddingCollection(configs(), device="cuda")


def test_share_a_meta_ebc_materialised_with_the_model() -> None:
    """The TorchRec-style flow: a model holding a pooled collection and a sequence collection over its
    tables, built on meta, then ``to_empty`` and ``reset_parameters`` on the model's modules."""
    bags = [EmbeddingBagConfig(100, 8, "t0", ["item"]), EmbeddingBagConfig(50, 4, "t1", ["cat"])]
    for ec_first in (False, True):
        with torch.device("meta"):
            ebc = EmbeddingBagCollection(bags, seed=4)
            ec = EmbeddingCollection(configs(), share=ebc)
        model = torch.nn.ModuleDict({"ec": ec, "ebc": ebc} if ec_first else {"ebc": ebc, "ec": ec})
        model.to_empty(device="cpu")
        ebc.reset_parameters()
        assert ec.device == torch.device("cpu")
        assert ec.embeddings.t0 is ebc.embedding_bags.t0
        ref = EmbeddingBagCollection(bags, seed=4)
        assert states_equal(ebc, ref)
        rows = ec(batch())["a"].values()
        assert torch.equal(rows, ref.embedding_bags.t0.weight.detach()[torch.tensor([1, 2])])


@pytest.mark.parametrize("shared", [False, True])
def test_a_nested_meta_collection_takes_a_models_assigned_state_dict(shared: bool) -> None:
    """torch's meta-initialisation pattern, model.load_state_dict(sd, assign=True), materialises nested
    recgo collections with the checkpoint's weights and optimizer state (they stayed on meta, and their
    forward returned meta tensors); training then goes on as from the source model."""
    bags = [EmbeddingBagConfig(100, 8, "t0", ["item"]), EmbeddingBagConfig(50, 4, "t1", ["cat"])]

    def model() -> torch.nn.ModuleDict:
        ebc = EmbeddingBagCollection(bags, seed=4, optimizer=optim.Adagrad(lr=0.1))
        ec = (EmbeddingCollection(configs(), share=ebc) if shared else
              EmbeddingCollection(configs(), seed=5, optimizer=optim.Adagrad(lr=0.1)))
        return torch.nn.ModuleDict({"ebc": ebc, "ec": ec})

    def step(m: torch.nn.ModuleDict) -> torch.Tensor:
        rows = m["ec"](batch())["a"].values()
        pooled = m["ebc"](KeyedJaggedTensor(["item", "cat"], torch.tensor([3, 7, 9]),
                                            lengths=torch.tensor([2, 1]))).values()
        (rows.sum() + pooled.pow(2).sum()).backward()
        return rows.detach()

    src = model()
    step(src)  # optimizer state and step counters that are not the initial ones
    with torch.device("meta"):
        dst = model()
    dst.load_state_dict(src.state_dict(), assign=True)
    assert dst["ebc"].device == dst["ec"].device == torch.device("cpu")
    assert states_equal(dst, src)
    assert torch.equal(step(dst), step(src))
    assert states_equal(dst, src)


def test_a_shared_collection_materialised_on_its_own_is_picked_up_at_forward() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(100, 8, "t0", ["item"]), EmbeddingBagConfig(50, 4, "t1", ["cat"])],
                                 device="meta", seed=4)
    ec = EmbeddingCollection(configs(), share=ebc)
    ebc.to_empty(device="cpu")
    ebc.reset_parameters()
    out = ec(batch())
    assert ec.device == torch.device("cpu") and not out["a"].values().is_meta
    assert torch.equal(out["c"].values(), ebc.embedding_bags.t1.weight.detach()[torch.tensor([5, 6])])


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_of_meta_collections_stay_meta_with_the_seed(how: str) -> None:
    cp = copy.deepcopy if how == "deepcopy" else (lambda m: pickle.loads(pickle.dumps(m)))
    ebc = EmbeddingBagCollection([c.bag_config() for c in configs()], device="meta", seed=3)
    ebc.note = "user attribute"
    for orig, ref in ((ebc, EmbeddingBagCollection([c.bag_config() for c in configs()], seed=3)),
                      (EmbeddingCollection(configs(), device="meta", seed=3), EmbeddingCollection(configs(), seed=3))):
        new = cp(orig)
        assert new.device == torch.device("meta")
        new.to_empty(device="cpu")
        new.reset_parameters()
        assert states_equal(new, ref)
    assert cp(ebc).note == "user attribute"


def test_a_copy_keeps_the_original_seed_for_reset_parameters() -> None:
    ebc = EmbeddingBagCollection([c.bag_config() for c in configs()], seed=11)
    new = copy.deepcopy(ebc)
    with torch.no_grad():
        new.embedding_bags.t0.weight.zero_()
    new.reset_parameters()
    assert states_equal(new, ebc)


def test_a_meta_collection_with_a_dynamic_table_materialises_as_built_on_cpu() -> None:
    """A dynamic-ID table on meta holds its config (as a model built for sharding needs); to_empty and
    reset_parameters, or an assigned load, give the collection built on the CPU."""
    from recgo import DynamicConfig
    cfgs = [EmbeddingBagConfig(100, 4, "u", ["a"], dynamic=DynamicConfig(min_count=2, seed=1)),
            EmbeddingBagConfig(50, 4, "c", ["c"])]
    kjt = KeyedJaggedTensor(["a", "c"], torch.tensor([10**12, -5, 10**12, 3]), lengths=torch.tensor([2, 1, 1, 0]))
    meta = EmbeddingBagCollection(cfgs, optimizer=optim.Adagrad(lr=0.1), seed=0, device="meta")
    assert meta.embedding_bags["u"].weight.is_meta
    meta.to_empty(device="cpu")
    meta.reset_parameters()
    cpu = EmbeddingBagCollection(cfgs, optimizer=optim.Adagrad(lr=0.1), seed=0)
    for _ in range(3):  # the second sighting admits
        a, b = meta(kjt).values(), cpu(kjt).values()
        assert torch.equal(a, b)
        a.sum().backward()
        b.sum().backward()
    assert states_equal(meta, cpu) and "embedding_bags.u.dynamic_ids" in cpu.state_dict()
    assigned = EmbeddingBagCollection(cfgs, optimizer=optim.Adagrad(lr=0.1), seed=0, device="meta")
    assigned.load_state_dict(cpu.state_dict(), assign=True)
    assert torch.equal(assigned(kjt).values(), cpu(kjt).values())


def test_a_meta_table_past_the_engines_bound_may_be_declared_but_not_past_a_tensors() -> None:
    """On meta a table larger than one engine holds is fine (a sharded collection takes only its rows);
    one whose size overflows a tensor's byte count is a CapacityError naming it, not torch's RuntimeError."""
    big = EmbeddingBagCollection([EmbeddingBagConfig(2**41, 4, "t", ["a"])], device="meta")
    assert big.embedding_bags["t"].weight.shape == (2**41, 4)
    for make in (lambda: EmbeddingBagCollection([EmbeddingBagConfig(2**62, 4, "huge", ["a"])], device="meta"),
                 lambda: EmbeddingCollection([EmbeddingConfig(2**62, 4, "huge", ["a"])], device="meta")):
        with pytest.raises(CapacityError, match="table 'huge'.*too many for a tensor"):
            make()


def test_a_meta_torchrec_kjt_is_a_named_error() -> None:
    torchrec = pytest.importorskip("torchrec")
    ec = EmbeddingCollection(configs(), device="meta")
    kjt = torchrec.KeyedJaggedTensor(keys=["a", "b", "c"], values=torch.tensor([1, 2, 3], device="meta"),
                                     lengths=torch.tensor([1, 0, 1, 0, 1, 0], device="meta"))
    with pytest.raises(InvalidInputError, match="meta"):
        ec(kjt)


# -- the chunked initial draw -------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 300), dim=st.integers(1, 9), chunk=st.integers(1, 64), seed=st.integers(0, 2**31),
       data=st.data())
def test_a_ranks_rows_equal_the_unsharded_draw(rows: int, dim: int, chunk: int, seed: int, data: st.DataObject) -> None:
    """draw_uniform_rows keeps exactly the rows ids[i] of draw_uniform's table, whatever the chunking
    and the subset (unsorted, empty, all rows) — also into a strided weight, as the engine's are."""
    ids = torch.tensor(data.draw(st.lists(st.integers(0, max(0, rows - 1)), unique=True, max_size=rows)) if rows else [],
                       dtype=torch.int64)
    old = _init.CHUNK_VALUES
    _init.CHUNK_VALUES = chunk * dim  # several chunks even for small tables
    try:
        full = torch.empty(rows, dim)
        _init.draw_uniform(full, -0.5, 0.25, torch.Generator().manual_seed(seed))
        strided = torch.full((len(ids), dim + 3), 7.0)
        mine = strided[:, :dim]
        _init.draw_uniform_rows(mine, ids, rows, -0.5, 0.25, torch.Generator().manual_seed(seed))
    finally:
        _init.CHUNK_VALUES = old
    assert torch.equal(mine, full[ids])
    assert bool((strided[:, dim:] == 7.0).all())  # nothing written past the row


def test_the_chunked_draw_is_torchs_whole_table_draw() -> None:
    """On this torch, drawing in chunks consumes the generator as one uniform_ over the table does: the
    seeded weights did not change when the draw became chunked."""
    old = _init.CHUNK_VALUES
    _init.CHUNK_VALUES = 1000
    try:
        chunked = torch.empty(1001, 7)
        _init.draw_uniform(chunked, -1.0, 1.0, torch.Generator().manual_seed(2))
    finally:
        _init.CHUNK_VALUES = old
    whole = torch.empty(1001, 7).uniform_(-1.0, 1.0, generator=torch.Generator().manual_seed(2))
    assert torch.equal(chunked, whole)



def test_meta_forward_checks_a_cpu_batch_as_a_built_collection_does() -> None:
    """A meta collection given a CPU batch refuses what the built one refuses (it returned a shape
    for lengths past the values, and an EmbeddingBagCollection also for a weighted collection given
    no weights), and a pooled collection refuses a sequence table's config by name."""
    torchrec = pytest.importorskip("torchrec")
    cfgs = [EmbeddingBagConfig(10, 4, "t1", ["a"]), EmbeddingBagConfig(10, 4, "t2", ["b"])]
    ebc = EmbeddingBagCollection(cfgs, device="meta", is_weighted=True)
    ec = EmbeddingCollection([EmbeddingConfig(10, 4, "t1", ["a"])], device="meta")
    past = dict(values=torch.tensor([1, 2]), lengths=torch.tensor([2, 2]))
    for module, keys in ((ebc, ["a", "b"]), (ec, ["a"])):
        with pytest.raises(InvalidInputError, match="lengths (sum|add up) to 4"):
            module(torchrec.KeyedJaggedTensor(keys=keys, weights=torch.ones(2), **past))
    with pytest.raises(InvalidInputError, match="has no weights"):
        ebc(KeyedJaggedTensor(["a", "b"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1])))
    ok = KeyedJaggedTensor(["a", "b"], torch.tensor([1, 2]), torch.ones(2), lengths=torch.tensor([1, 1]))
    assert ebc(ok).values().shape == (1, 8) and ebc(ok).values().is_meta
    for seq in (EmbeddingConfig(4, 2, "s", ["a"]), torchrec.EmbeddingConfig(num_embeddings=4, embedding_dim=2,
                                                                               name="s", feature_names=["a"])):
        with pytest.raises(InvalidInputError, match="sequence \\(unpooled\\) table's config"):
            EmbeddingBagCollection([seq])


@pytest.mark.parametrize("assign", [False, True])
def test_a_models_load_state_dict_materialises_nested_meta_collections(assign: bool) -> None:
    """model.load_state_dict on a model built on meta: the collections inside take the weights (their
    own load_state_dict materialised, a nested one left them on meta and the next forward failed)."""
    def build(seed: int | None) -> torch.nn.ModuleDict:
        return torch.nn.ModuleDict({
            "e": EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["f"])], optimizer=optim.Adagrad(lr=0.1), seed=seed),
            "s": EmbeddingCollection([EmbeddingConfig(10, 4, "u", ["g"])], seed=seed)})

    src = build(1)
    with torch.device("meta"):
        model = build(None)
    model.load_state_dict(src.state_dict(), assign=assign)
    assert states_equal(model, src)
    kjt = KeyedJaggedTensor(["f", "g"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    assert torch.equal(model["e"](kjt).values(), src["e"](kjt).values())
    assert torch.equal(model["s"](kjt)["g"].values(), src["s"](kjt)["g"].values())


@pytest.mark.parametrize("nested", [False, True], ids=["own", "nested"])
@pytest.mark.parametrize("sequence", [False, True], ids=["pooled", "sequence"])
def test_a_refused_load_leaves_a_meta_collection_on_meta(nested: bool, sequence: bool) -> None:
    """A load refused for a bad entry (an optimizer step of -1) left the collection materialised, its
    tables all zeros, and forwards then ran on them; it stays on meta, and the good load then loads."""
    def build(device: str | None = None) -> torch.nn.Module:
        kind, cfg = (EmbeddingCollection, EmbeddingConfig) if sequence else (EmbeddingBagCollection, EmbeddingBagConfig)
        c = kind([cfg(10, 4, "t", ["f"])], optimizer=optim.Adagrad(lr=0.1), seed=1, device=device)
        return torch.nn.ModuleDict({"c": c}) if nested else c

    src, model = build(), build("meta")
    good = src.state_dict()
    bad = {k: torch.tensor([-1]) if k.endswith("optimizer_step") else v for k, v in good.items()}
    with pytest.raises(InvalidInputError, match="is not an optimizer step"):
        model.load_state_dict(bad)
    coll = model["c"] if nested else model
    assert coll.device == torch.device("meta") and all(t.is_meta for t in model.state_dict().values())
    model.load_state_dict(good)
    assert coll.device == torch.device("cpu") and states_equal(model, src)


@pytest.mark.parametrize("how", ["to_empty", "load_state_dict", "load_state_dict_assign", "model_load_state_dict"])
@pytest.mark.parametrize("sequence", [False, True])
def test_a_table_frozen_on_meta_stays_frozen_when_materialised(how: str, sequence: bool) -> None:
    """A collection built on meta and frozen (wholly or one table) came back with every table trainable
    from to_empty / load_state_dict (each table was rebuilt with requires_grad=True), so a torch optimizer
    built over the parameters that require grad trained a frozen, pretrained table; torch's modules keep
    the flag."""
    def build() -> torch.nn.Module:
        if sequence:
            return EmbeddingCollection(configs(), device="meta")
        return EmbeddingBagCollection([EmbeddingBagConfig(100, 8, "t0", ["a", "b"]),
                                       EmbeddingBagConfig(50, 4, "t1", ["c"])], device="meta")

    src = build().to_empty(device="cpu")
    prefix = "embeddings" if sequence else "embedding_bags"
    coll = build()
    getattr(coll, prefix)["t0"].weight.requires_grad_(False)
    model = torch.nn.ModuleDict({"c": coll})
    if how == "to_empty":
        model.to_empty(device="cpu")
    elif how == "model_load_state_dict":
        model.load_state_dict({f"c.{k}": v for k, v in src.state_dict().items()})
    else:
        coll.load_state_dict(src.state_dict(), assign=how.endswith("assign"))
    coll = model["c"]
    assert {t: m.weight.requires_grad for t, m in getattr(coll, prefix).items()} == {"t0": False, "t1": True}
    assert not getattr(coll, prefix)["t0"].weight.is_meta
    before = getattr(coll, prefix)["t0"].weight.detach().clone()
    opt = torch.optim.SGD([p for p in coll.parameters() if p.requires_grad], lr=0.5)
    out = coll(batch())
    (sum(v.values().sum() for v in out.values()) if sequence else out.values().sum()).backward()
    opt.step()
    assert torch.equal(getattr(coll, prefix)["t0"].weight, before)
    whole = build()
    whole.requires_grad_(False)
    whole.to_empty(device="cpu")
    assert not any(p.requires_grad for p in whole.parameters())
