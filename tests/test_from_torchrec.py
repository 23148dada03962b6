"""``recgo.from_torchrec``: a TorchRec model's embedding modules swapped for recgo's in one line, the
weights and the in-backward optimizer carried over, and the converted model training as the TorchRec
one does."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import recgo
from recgo.errors import InvalidInputError
from recgo.modules import optim

tr = pytest.importorskip("torchrec")
from torch.distributed.optim import _apply_optimizer_in_backward as apply_optimizer_in_backward  # noqa: E402
from torchrec.models.dlrm import DLRM  # noqa: E402
from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT  # noqa: E402

from managed_collision import managed_collection  # noqa: E402

# Converting an in-backward Adam warns that torch's dense Adam also steps rows a batch leaves out;
# here it is beside the point (test_module_fidelity checks it)
pytestmark = pytest.mark.filterwarnings("ignore:from_torchrec. the in-backward optimizer is Adam:UserWarning")

TABLES = [
    tr.EmbeddingBagConfig(name="t_user", embedding_dim=8, num_embeddings=40, feature_names=["user"]),
    tr.EmbeddingBagConfig(name="t_item", embedding_dim=8, num_embeddings=60, feature_names=["item", "hist"]),
]
KEYS, ROWS = ["user", "item", "hist", "other"], [40, 60, 60, 1000]


def _batch(gen: torch.Generator, b: int = 16) -> tuple[torch.Tensor, TKJT, torch.Tensor]:
    lengths = torch.randint(0, 4, (len(KEYS) * b,), generator=gen)
    vals = [torch.randint(0, n, (int(lengths[i * b:(i + 1) * b].sum()),), generator=gen) for i, n in enumerate(ROWS)]
    kjt = TKJT.from_lengths_sync(keys=KEYS, values=torch.cat(vals), lengths=lengths)
    return torch.randn(b, 5, generator=gen), kjt, torch.randint(0, 2, (b,), generator=gen).float()


def _dlrm(ebc: nn.Module) -> DLRM:
    torch.manual_seed(0)
    return DLRM(embedding_bag_collection=ebc, dense_in_features=5, dense_arch_layer_sizes=[16, 8],
                over_arch_layer_sizes=[16, 1])


def _train(model: nn.Module, batches: list, dense_params: list[nn.Parameter]) -> list[float]:
    opt = torch.optim.SGD(dense_params, lr=0.1)
    losses = []
    for dense, kjt, label in batches:
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(dense, kjt).squeeze(1), label)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def test_a_dlrm_with_an_in_backward_optimizer_trains_as_torchrecs() -> None:
    ref = _dlrm(tr.EmbeddingBagCollection(tables=TABLES))
    apply_optimizer_in_backward(torch.optim.Adagrad, ref.sparse_arch.embedding_bag_collection.parameters(),
                                {"lr": 0.1, "eps": 1e-8})
    model = copy.deepcopy(ref)  # the same weights (deepcopy drops the in-backward marks: mark the copy too)
    apply_optimizer_in_backward(torch.optim.Adagrad, model.sparse_arch.embedding_bag_collection.parameters(),
                                {"lr": 0.1, "eps": 1e-8})
    out = recgo.from_torchrec(model)
    assert out is model
    ebc = model.sparse_arch.embedding_bag_collection
    assert isinstance(ebc, recgo.EmbeddingBagCollection)
    assert ebc.fused_optimizer == optim.Adagrad(lr=0.1, eps=1e-8)
    for c in TABLES:
        assert torch.equal(ebc.embedding_bags[c.name].weight,
                           ref.sparse_arch.embedding_bag_collection.embedding_bags[c.name].weight)
    gen = torch.Generator().manual_seed(1)
    batches = [_batch(gen) for _ in range(4)]  # "other" is a key no table reads: both ignore it

    def dense(m: nn.Module) -> list[nn.Parameter]:
        return [p for n, p in m.named_parameters() if "embedding_bag_collection" not in n]
    ours, theirs = _train(model, batches, dense(model)), _train(ref, batches, dense(ref))
    assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-6)
    want = ref.state_dict()
    for k, v in model.state_dict().items():
        if "optimizer_" not in k:
            torch.testing.assert_close(v, want[k], rtol=1e-4, atol=1e-6, msg=k)


def test_a_fused_collection_keeps_its_optimizer_and_weights() -> None:
    fused = FusedEmbeddingBagCollection(tables=TABLES, optimizer_type=torch.optim.SGD,
                                        optimizer_kwargs={"lr": 0.05}, device=torch.device("cpu"))
    got = recgo.from_torchrec(fused)
    assert isinstance(got, recgo.EmbeddingBagCollection)
    assert got.fused_optimizer == optim.SGD(lr=0.05)
    for c in TABLES:
        assert torch.equal(got.embedding_bags[c.name].weight, fused.state_dict()[f"embedding_bags.{c.name}.weight"])
    # an explicit optimizer that disagrees with the collection's own is refused, not silently chosen
    fused2 = FusedEmbeddingBagCollection(tables=TABLES, optimizer_type=torch.optim.SGD,
                                         optimizer_kwargs={"lr": 0.05}, device=torch.device("cpu"))
    with pytest.raises(InvalidInputError, match="differs from"):
        recgo.from_torchrec(fused2, optimizer=optim.SGD(lr=0.5))


def _rows_batch(step: int, every_row: bool) -> TKJT:
    """A batch of both tables' features; with every_row, each row appears (a dense Adam then equals a
    lazy one, recgo's)."""
    g = torch.Generator().manual_seed(step)
    if every_row:
        vals = [torch.randperm(40, generator=g), torch.randperm(60, generator=g), torch.randint(0, 60, (5,), generator=g)]
        lengths = [torch.tensor([20, 20]), torch.tensor([30, 30]), torch.tensor([2, 3])]
    else:
        lengths = [torch.randint(0, 4, (2,), generator=g) for _ in range(3)]
        vals = [torch.randint(0, n, (int(ln.sum()),), generator=g) for n, ln in zip((40, 60, 60), lengths)]
    return TKJT.from_lengths_sync(keys=["user", "item", "hist"], values=torch.cat(vals), lengths=torch.cat(lengths))


@pytest.mark.parametrize("source, opt_class, every_row, decay", [
    ("in_backward", torch.optim.Adagrad, False, 0.0), ("in_backward", tr.optim.RowWiseAdagrad, False, 0.0),
    ("in_backward", torch.optim.Adam, True, 0.0), ("fused", torch.optim.Adagrad, False, 0.0),
    ("fused", tr.optim.RowWiseAdagrad, False, 0.0),
    # FBGEMM's CPU kernels ignore weight_decay: the converted tables must too (they applied it)
    ("fused", torch.optim.Adagrad, False, 0.3), ("fused", torch.optim.SGD, False, 0.3),
    # torch's decay on dense gradients moves every row; recgo's the rows a batch touches: equal when
    # every row is in every batch, and the conversion says they differ otherwise
    ("in_backward", torch.optim.Adagrad, True, 0.3)])
def test_torchrecs_optimizer_state_carries_over(source: str, opt_class: type, every_row: bool, decay: float) -> None:
    """Converted after some training, the collection goes on as TorchRec's does: the accumulators
    (and Adam's moments and step) came along, not zeros."""
    kw = {"lr": 0.1, "eps": 1e-8} if opt_class is not torch.optim.SGD else {"lr": 0.1}
    if decay:
        kw["weight_decay"] = decay

    def build() -> nn.Module:
        torch.manual_seed(5)
        if source == "fused":
            return FusedEmbeddingBagCollection(tables=TABLES, optimizer_type=opt_class, optimizer_kwargs=kw,
                                               device=torch.device("cpu"))
        m = tr.EmbeddingBagCollection(tables=TABLES)
        apply_optimizer_in_backward(opt_class, m.parameters(), kw)
        return m
    ref, model = build(), build()
    for m in (ref, model):
        for step in range(2):
            m(_rows_batch(step, every_row)).values().pow(2).sum().backward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = recgo.from_torchrec(model)
    said = [str(w.message) for w in caught if "weight_decay" in str(w.message)]
    assert len(said) == (1 if decay else 0), said
    assert model.fused_optimizer.weight_decay == (decay if source == "in_backward" else 0.0)
    assert int(model.embedding_bags["t_user"].optimizer_step) == (2 if source == "in_backward" else 0)
    if opt_class is not torch.optim.SGD:
        assert model.embedding_bags["t_user"].optimizer_state.abs().sum() > 0
    for step in range(2, 5):
        a, b = model(_rows_batch(step, every_row)).values(), ref(_rows_batch(step, every_row)).values()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"step {step}")
        a.pow(2).sum().backward()
        b.pow(2).sum().backward()


def _train_alike(model: nn.Module, ref: nn.Module, steps: int) -> None:
    """``steps`` steps of both on the same weighted batches: the pooled outputs, then the tables'
    weights after, equal."""
    for step in range(steps):
        a, b = model(_rows_batch(step, True)).values(), ref(_rows_batch(step, True)).values()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"step {step}")
        a.pow(2).sum().backward()
        b.pow(2).sum().backward()
    for t in ("t_user", "t_item"):
        torch.testing.assert_close(model.embedding_bags[t].weight, ref.embedding_bags[t].weight, rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("placeholder, torch_class", [
    (tr.optim.Adagrad, torch.optim.Adagrad), (tr.optim.Adam, torch.optim.Adam), (tr.optim.SGD, torch.optim.SGD)])
def test_torchrec_optims_placeholder_optimizers_convert(placeholder: type, torch_class: type) -> None:
    """torchrec.optim's Adagrad/Adam/SGD are placeholders that only DMP's FBGEMM kernels run (no
    ``state``; stepping one unsharded raises). Converted, the collection trains as the same update does
    in TorchRec (torch's class with FBGEMM's options), its state starting from zero."""
    kw = {"lr": 0.1} if torch_class is torch.optim.SGD else {"lr": 0.1, "eps": 1e-8}

    def build(opt_class: type) -> nn.Module:
        torch.manual_seed(5)
        m = tr.EmbeddingBagCollection(tables=TABLES)
        apply_optimizer_in_backward(opt_class, m.parameters(), kw)
        return m
    ref, model = build(torch_class), recgo.from_torchrec(build(placeholder))
    assert model.fused_optimizer == optim.from_torch(torch_class, kw)
    _train_alike(model, ref, 3)


@pytest.mark.parametrize("opt_class", [torch.optim.SGD, torch.optim.Adam, torch.optim.Adagrad, tr.optim.RowWiseAdagrad])
def test_options_left_out_take_the_optimizer_classes_defaults(opt_class: type) -> None:
    """An unsharded TorchRec collection runs apply_optimizer_in_backward's torch optimizer itself, so
    options left out are that class's defaults (torch's SGD: lr 1e-3, Adagrad: eps 1e-10), not the
    FBGEMM defaults DMP and shard_model use; converted, it trains as TorchRec's."""
    def build() -> nn.Module:
        torch.manual_seed(5)
        m = tr.EmbeddingBagCollection(tables=TABLES)
        apply_optimizer_in_backward(opt_class, m.parameters(), {})
        return m
    ref, model = build(), recgo.from_torchrec(build())
    torch_defaults = opt_class([torch.zeros(1, 1, requires_grad=True)]).defaults
    fused = model.fused_optimizer
    assert fused.lr == torch_defaults["lr"]
    if "eps" in torch_defaults:
        assert fused.eps == torch_defaults["eps"]
    assert optim.from_torch(opt_class, {}).lr == 0.01  # FBGEMM's, for the sharded path
    _train_alike(model, ref, 4)


@pytest.mark.parametrize("sequence", [False, True])
@pytest.mark.parametrize("return_remapped, hashed", [(False, False), (True, False), (True, True)])
def test_a_managed_collision_collection_becomes_dynamic_tables(return_remapped: bool, hashed: bool,
                                                               sequence: bool) -> None:
    """The MCH module's IDs, their rows and the Adagrad accumulators come along into a dynamic-ID table
    of the same bound and policy; the converted module is called as TorchRec's and goes on as it does,
    answering in TorchRec's types (an input hash function included)."""
    ids = torch.tensor([5, 10**12, 7, -3, 5, 9])

    def batch() -> TKJT:
        return TKJT.from_lengths_sync(keys=["f"], values=ids, lengths=torch.tensor([2, 1, 3]))

    def values(out: object) -> torch.Tensor:
        return out["f"].values() if sequence else out.values()  # type: ignore[index, attr-defined]
    ref, model = (managed_collection(return_remapped, sequence, hashed) for _ in range(2))
    for m in (ref, model):
        m.train()
        for _ in range(2):
            values(m(batch())[0]).pow(2).sum().backward()
    new = recgo.from_torchrec(nn.ModuleDict({"mc": model}))["mc"]
    coll = new.ec if sequence else new.ebc
    cfg = (coll.embedding_configs() if sequence else coll.embedding_bag_configs())[0]
    assert cfg.num_embeddings == 16 and cfg.dynamic.eviction == "lru"
    assert recgo.dynamic.stats(coll, "t").rows == 5  # the five distinct IDs the MCH module had mapped
    for step in range(3):
        (a, remapped), (b, ref_remapped) = new(batch()), ref(batch())
        torch.testing.assert_close(values(a), values(b), rtol=1e-5, atol=1e-6, msg=f"step {step}")
        assert type(a) is type(b) and type(values(a)) is type(values(b))
        assert (remapped is None) != return_remapped
        if sequence:
            assert type(a["f"]) is type(b["f"])
        if remapped is not None:
            assert type(remapped) is type(ref_remapped)
            assert torch.equal(remapped.lengths(), batch().lengths()) and bool((remapped.values() >= 0).all())
        values(a).pow(2).sum().backward()
        values(b).pow(2).sum().backward()


def test_a_sequence_collection_and_a_meta_model_convert() -> None:
    ec = tr.EmbeddingCollection(tables=[tr.EmbeddingConfig(name="hist", embedding_dim=4, num_embeddings=30,
                                                           feature_names=["h"])], need_indices=True)
    model = nn.ModuleDict({"seq": ec})
    recgo.from_torchrec(model, optimizer=optim.SGD(lr=0.1))
    new = model["seq"]
    assert isinstance(new, recgo.EmbeddingCollection) and new.need_indices()
    assert torch.equal(new.embeddings["hist"].weight, ec.embeddings["hist"].weight)
    kjt = TKJT.from_lengths_sync(keys=["h"], values=torch.tensor([3, 4, 3]), lengths=torch.tensor([2, 1]))
    torch.testing.assert_close(new(kjt)["h"].values(), ec(kjt)["h"].values())
    # built on meta, as models are for TorchRec: recgo's collection stays on meta until materialised
    with torch.device("meta"):
        meta_model = nn.ModuleDict({"ebc": tr.EmbeddingBagCollection(tables=TABLES, device=torch.device("meta"))})
    recgo.from_torchrec(meta_model, optimizer=optim.SGD(lr=0.1), seed=3)
    m = meta_model["ebc"]
    assert isinstance(m, recgo.EmbeddingBagCollection) and m.embedding_bags["t_user"].weight.is_meta
    m.to_empty(device="cpu")
    m.reset_parameters()
    seeded = recgo.EmbeddingBagCollection(TABLES, optimizer=optim.SGD(lr=0.1), seed=3)
    assert torch.equal(m.embedding_bags["t_item"].weight, seeded.embedding_bags["t_item"].weight)


def test_a_collection_used_at_two_places_stays_one() -> None:
    """A TorchRec collection the model holds at two paths (tied towers) becomes one recgo collection
    at both, still shared (it used to be converted at the first path only)."""
    shared = tr.EmbeddingBagCollection(tables=TABLES)
    m = nn.Module()
    m.query_tower, m.tower = shared, nn.ModuleDict({"doc": shared})
    recgo.from_torchrec(m)
    assert isinstance(m.query_tower, recgo.EmbeddingBagCollection)
    assert m.tower["doc"] is m.query_tower
    assert len(list(m.parameters())) == len(TABLES)


def test_a_sequence_feature_in_two_tables_converts() -> None:
    """TorchRec's EmbeddingCollection looks a feature two tables list up in both (``f@a``, ``f@b``);
    the converted collection answers with the same keys and rows (it refused such a model)."""
    tabs = [tr.EmbeddingConfig(name="a", embedding_dim=4, num_embeddings=10, feature_names=["f", "g"]),
            tr.EmbeddingConfig(name="b", embedding_dim=4, num_embeddings=10, feature_names=["f"])]
    kjt = TKJT.from_lengths_sync(keys=["g", "f"], values=torch.tensor([1, 2, 3, 4]), lengths=torch.tensor([1, 1, 2, 0]))
    ref = tr.EmbeddingCollection(tables=tabs)
    want, got = ref(kjt), recgo.from_torchrec(copy.deepcopy(ref))(kjt)
    assert list(got) == list(want) == ["f@a", "g", "f@b"]
    for k in want:
        torch.testing.assert_close(got[k].values(), want[k].values(), rtol=0, atol=0)
        assert torch.equal(got[k].lengths(), want[k].lengths())


def test_a_model_without_torchrec_modules_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="holds no TorchRec EmbeddingBagCollection"):
        recgo.from_torchrec(nn.Linear(2, 2))
    with pytest.raises(InvalidInputError, match="expected an nn.Module"):
        recgo.from_torchrec("model")  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", ["LRU", "LFU", "DistanceLFU"])
def test_managed_collision_policies_carry_their_counts_and_a_fresh_stateful_optimizer_converts(policy: str) -> None:
    """An LFU MCH module (no last-access buffer) raised AttributeError; LFU and DistanceLFU counts were
    dropped (every ID converted with count 1, so LFU then evicted the most frequent ID first); a model
    whose Adam had not stepped yet raised "the checkpoint lacks optimizer_state"; and recgo.dynamic's
    functions refused the converted module itself."""
    def batch(i: int) -> TKJT:
        return TKJT.from_lengths_sync(keys=["f"], values=torch.tensor([i]), lengths=torch.tensor([1]))

    model = managed_collection(False, policy=policy, zch_size=8)
    model.train()
    for i in (5, 5, 5, 9):
        model(batch(i))[0].values().pow(2).sum().backward()
    new = recgo.from_torchrec(nn.ModuleDict({"mc": model}))["mc"]
    assert new.ebc.embedding_bag_configs()[0].dynamic.eviction == ("lru" if policy == "LRU" else "lfu")
    st = recgo.dynamic.export_state(new, "t")  # the managed module itself (it used to raise AttributeError)
    counts = dict(zip(st["dynamic_ids"].tolist(), st["dynamic_counts"].tolist()))
    if policy != "LRU":
        assert counts[5] == 3 and counts[9] == 1, counts
    assert recgo.dynamic.stats(new, "t").rows == 2
    for i in range(100, 107):  # fills the 8 rows and evicts: LFU keeps the ID seen three times
        new(batch(i))[0].values().pow(2).sum().backward()
    if policy != "LRU":
        assert int(recgo.dynamic.lookup(new, "t", torch.tensor([5]))[0]) >= 0
    fresh = managed_collection(False, policy=policy, optimizer=torch.optim.Adam)  # never stepped
    new = recgo.from_torchrec(nn.ModuleDict({"mc": fresh}))["mc"]
    assert type(new.ebc.fused_optimizer).__name__ == "Adam"
    new(batch(3))[0].values().pow(2).sum().backward()
    assert recgo.dynamic.stats(new, "t").rows == 1


def test_frozen_position_weights_convert() -> None:
    """A FeatureProcessedEmbeddingBagCollection with frozen position weights pools as TorchRec's once
    converted (trained ones: ``tests/test_weight_grads.py``)."""
    from torchrec.modules.feature_processor_ import PositionWeightedModuleCollection
    from torchrec.modules.fp_embedding_modules import FeatureProcessedEmbeddingBagCollection

    def model() -> nn.Module:
        torch.manual_seed(0)
        ebc = tr.EmbeddingBagCollection(tables=[tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10,
                                                                      feature_names=["f"])], is_weighted=True)
        return nn.Sequential(FeatureProcessedEmbeddingBagCollection(ebc, PositionWeightedModuleCollection({"f": 5})))

    ref = model()
    with torch.no_grad():
        ref[0]._feature_processors.position_weights_dict["f"].uniform_(0.5, 1.5)
    ref.requires_grad_(False)
    ref[0]._feature_processors.requires_grad_(False)
    new = recgo.from_torchrec(copy.deepcopy(ref))
    kjt = TKJT.from_lengths_sync(keys=["f"], values=torch.tensor([1, 2, 3, 4, 5]), lengths=torch.tensor([3, 2]))
    torch.testing.assert_close(new(kjt).values(), ref(kjt).values())


@pytest.mark.parametrize("meta", [False, True])
def test_in_backward_optimizer_filter_leaves_the_converted_tables_out(meta: bool) -> None:
    """TorchRec's scripts build the dense optimizer from in_backward_optimizer_filter(named_parameters()):
    the converted tables lacked the _in_backward_optimizers mark, so the dense optimizer took them in
    (a table-sized Adagrad state; a checkpoint the unconverted script's optimizer could not load)."""
    from torchrec.optim.keyed import KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    def build(convert: bool) -> nn.Module:
        torch.manual_seed(0)
        dev = torch.device("meta") if meta and convert else torch.device("cpu")
        m = DLRM(embedding_bag_collection=tr.EmbeddingBagCollection(tables=TABLES, device=dev), dense_in_features=5,
                 dense_arch_layer_sizes=[16, 8], over_arch_layer_sizes=[16, 1], dense_device=torch.device("cpu"))
        apply_optimizer_in_backward(torch.optim.Adagrad, m.sparse_arch.embedding_bag_collection.parameters(),
                                    {"lr": 0.1})
        if not convert:
            return m
        m = recgo.from_torchrec(m)
        if meta:
            m.sparse_arch.embedding_bag_collection.to_empty(device="cpu")
        return m

    ref, new = build(False), build(True)
    opts = [KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(m.named_parameters())),
                                  lambda ps: torch.optim.Adagrad(ps, lr=0.1)) for m in (ref, new)]
    assert list(opts[1].params) == list(opts[0].params)
    assert not any("embedding" in n for n in opts[1].params)
    gen = torch.Generator().manual_seed(3)
    for m, o in zip((ref, new), opts):
        dense, kjt, label = _batch(gen)
        o.zero_grad()
        nn.functional.binary_cross_entropy_with_logits(m(dense, kjt).squeeze(1), label).backward()
        o.step()
    opts[1].load_state_dict(opts[0].state_dict())  # raised "Different parameter count"


def _two_tables(sequence: bool, device: str = "cpu") -> nn.Module:
    """A TorchRec collection of TABLES' two tables (pooled, or sequence), built on ``device``."""
    torch.manual_seed(0)
    if sequence:
        return tr.EmbeddingCollection(tables=[tr.EmbeddingConfig(name=c.name, embedding_dim=c.embedding_dim,
                                                                 num_embeddings=c.num_embeddings,
                                                                 feature_names=c.feature_names) for c in TABLES],
                                      device=torch.device(device))
    return tr.EmbeddingBagCollection(tables=TABLES, device=torch.device(device))


_SCALE = nn.Parameter(torch.tensor(1.5))  # a dense weight: a loss requires grad with every table frozen


def _loss(coll: nn.Module, kjt: TKJT) -> torch.Tensor:
    """A loss over every output of ``coll`` (pooled or sequence) that also trains a dense weight, so it
    requires grad when every table is frozen."""
    out = coll(kjt)
    vals = torch.cat([out[k].values().flatten() for k in out]) if isinstance(out, dict) else out.values().flatten()
    return (vals * _SCALE).pow(2).sum()


def test_a_managed_collision_collection_keeps_eval_mode_and_a_frozen_table() -> None:
    """A managed-collision collection converted in eval mode came back training: unseen IDs were admitted
    (given rows) during what was evaluation. Its frozen table came back trainable, and its fused Adagrad
    stepped it."""
    def batch(ids: list[int]) -> TKJT:
        return TKJT.from_lengths_sync(keys=["f"], values=torch.tensor(ids), lengths=torch.tensor([1, len(ids) - 1]))

    m = managed_collection(True)
    m.train()
    for ids in ([1, 2, 3], [4, 5, 6]):
        m(batch(ids))[0].values().pow(2).sum().backward()
    m.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the MCH module's own TorchRec hook is no user's: no warning
        new = recgo.from_torchrec(nn.ModuleDict({"mc": m}))["mc"]
    assert not new.training and not new.ebc.training
    assert recgo.dynamic.stats(new, "t").rows == 6
    _, remapped = new(batch([100, 101, 1]))
    assert remapped.values().tolist()[:2] == [-1, -1]  # not admitted
    assert recgo.dynamic.stats(new, "t").rows == 6
    frozen = managed_collection(False)
    frozen.train()
    frozen(batch([1, 2, 3]))[0].values().pow(2).sum().backward()
    frozen.requires_grad_(False)
    new = recgo.from_torchrec(nn.ModuleDict({"mc": frozen}))["mc"]
    assert new.training and not new.ebc.embedding_bags["t"].weight.requires_grad
    before = new.ebc.embedding_bags["t"].weight.detach().clone()
    (new(batch([1, 2, 3]))[0].values() * _SCALE).pow(2).sum().backward()
    assert torch.equal(new.ebc.embedding_bags["t"].weight, before)


@pytest.mark.parametrize("sequence", [False, True])
def test_training_flag_and_hooks_carry_over(sequence: bool) -> None:
    """from_torchrec left the new collections training in an eval model, and the hooks registered on
    TorchRec's collection (forward, forward-pre with kwargs, always_call, state-dict) stopped firing
    silently. They carry over, and their handles still remove them."""
    coll = _two_tables(sequence)
    calls: list[str] = []
    h_fwd = coll.register_forward_hook(lambda mod, inp, out: calls.append("forward"), always_call=True)
    coll.register_forward_pre_hook(lambda mod, args, kwargs: calls.append("pre") or None, with_kwargs=True)
    coll.register_forward_hook(lambda mod, args, kwargs, out: calls.append("kw"), with_kwargs=True)
    coll.register_state_dict_post_hook(lambda mod, sd, prefix, local: calls.append("state_dict"))
    model = nn.ModuleDict({"coll": coll})
    model.eval()
    recgo.from_torchrec(model)
    new = model["coll"]
    assert isinstance(new, recgo.EmbeddingCollection if sequence else recgo.EmbeddingBagCollection)
    assert not model.training and not any(m.training for m in new.modules())
    calls.clear()  # conversion read TorchRec's state_dict
    new(_rows_batch(0, every_row=False))
    assert calls == ["pre", "forward", "kw"]
    assert new._forward_hooks_always_called == {h_fwd.id: True}
    new.state_dict()
    assert calls[-1] == "state_dict"
    h_fwd.remove()
    calls.clear()
    new(_rows_batch(0, every_row=False))
    assert calls == ["pre", "kw"]
    model.train()
    assert new.training
    # a hook on a table's module has nothing to run on (the engine looks rows up): a warning names it
    coll = _two_tables(sequence)
    getattr(coll, "embeddings" if sequence else "embedding_bags")["t_user"].register_forward_hook(lambda *a: None)
    where = "embeddings" if sequence else "embedding_bags"
    with pytest.warns(UserWarning, match=f"not carried over to recgo's module: hooks of submodule '{where}.t_user'"):
        recgo.from_torchrec(coll)


@pytest.mark.parametrize("source", ["fused", "in_backward"])
def test_the_learning_rate_a_scheduler_reached_carries_over(source: str) -> None:
    """Converted in the middle of training, the tables went back to the rate they were built with
    (1.0), not the one TorchRec's scheduler had brought them to (0.01), so the next step moved them a
    hundred times too far."""
    tables = [tr.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name="t", feature_names=["f"])]
    kjt = TKJT.from_lengths_sync(keys=["f"], values=torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
    if source == "fused":
        module = FusedEmbeddingBagCollection(tables=tables, optimizer_type=torch.optim.SGD,
                                             optimizer_kwargs={"lr": 1.0}, device=torch.device("cpu"))
        opt = module.fused_optimizer()
    else:
        module = tr.EmbeddingBagCollection(tables=tables, device=torch.device("cpu"))
        apply_optimizer_in_backward(torch.optim.SGD, module.parameters(), {"lr": 1.0})
        opt = module.embedding_bags["t"].weight._in_backward_optimizers[0]
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.1)
    for _ in range(2):
        opt.zero_grad()
        module(kjt).values().sum().backward()
        opt.step()
        sched.step()
    before = module.state_dict()["embedding_bags.t.weight"].clone()
    got = recgo.from_torchrec(module)
    assert got.fused_optimizer.lr == pytest.approx(0.01)
    got(kjt).values().sum().backward()
    moved = got.embedding_bags["t"].weight.detach() - before
    assert torch.allclose(moved[1], torch.full((4,), -0.01), atol=1e-6)  # row 1: in bag 0 once, SUM


def test_a_fused_sequence_collection_on_meta_converts_with_its_optimizer(tmp_path) -> None:
    """TorchRec builds FusedEmbeddingCollection on meta (for DMP) or CUDA only; from_torchrec left it
    unconverted beside another collection, and alone said the model held no collection. It converts
    as a FusedEmbeddingBagCollection does, its fused optimizer carried over; shard_model takes it too."""
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingCollection

    from spawned import one_rank

    def model() -> nn.Module:
        cfg = [tr.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="t", feature_names=["f"])]
        return nn.ModuleDict({"ec": FusedEmbeddingCollection(cfg, torch.optim.Adagrad, {"lr": 0.05, "eps": 1e-6},
                                                             device=torch.device("meta"))})

    got = recgo.from_torchrec(model())
    assert isinstance(got["ec"], recgo.EmbeddingCollection)
    assert got["ec"].fused_optimizer == optim.Adagrad(lr=0.05, eps=1e-6)
    with one_rank(tmp_path):
        from recgo.distributed import ShardedEmbeddingCollection, shard_model

        sharded = shard_model(model(), "hash", ddp=False, timeout=30)
        assert isinstance(sharded["ec"], ShardedEmbeddingCollection)
        assert sharded["ec"].fused_optimizer == optim.Adagrad(lr=0.05, eps=1e-6)


def test_an_mch_threshold_filter_is_named_when_it_is_dropped() -> None:
    """An MCH eviction policy's threshold_filtering_func (per-batch count filters) was dropped in
    silence: the converted tables admit every ID at once."""
    from torchrec.modules.mc_modules import average_threshold_filter

    with pytest.warns(UserWarning, match=r"table 't': the MCH eviction policy's threshold_filtering_func"):
        recgo.from_torchrec(managed_collection(False, threshold=average_threshold_filter))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none without a filter
        recgo.from_torchrec(managed_collection(False))
