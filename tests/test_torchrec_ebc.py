"""recgo.EmbeddingBagCollection against TorchRec's EmbeddingBagCollection semantics (issue 10), and the
errors of issue 14 that say what to do.

The first tests port TorchRec's ``torchrec/modules/tests/test_embedding_modules.py`` cases (written
afresh: same configs, inputs and expected keys/shapes); the others check the behaviours the issue
names (shared features, extra keys, empty ``feature_names``, meta-device construction, ``init_fn``,
``data_type``, TorchRec ``KeyedTensor`` outputs) against TorchRec's module on the same weights.
"""

from __future__ import annotations

import warnings
from functools import partial

import pytest
import torch

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, InvalidInputError
from recgo.modules import optim

tr = pytest.importorskip("torchrec")
from torchrec.modules.embedding_configs import DataType  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT, KeyedTensor as TKT  # noqa: E402


def _kjt3() -> TKJT:
    #     0       1        2  <-- batch
    # 0   [0,1] None    [2]
    # 1   [3]    [4]    [5,6,7]
    return TKJT.from_offsets_sync(keys=["f1", "f2"], values=torch.tensor([0, 1, 2, 3, 4, 5, 6, 7]),
                                  offsets=torch.tensor([0, 2, 2, 3, 4, 5, 8]))


def _weighted_kjt(device: str = "cpu") -> TKJT:
    return TKJT.from_offsets_sync(
        keys=["f1", "f3", "f2"], values=torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 1, 3, 4, 7], device=device),
        offsets=torch.tensor([0, 2, 4, 6, 8, 10, 12], device=device),
        weights=torch.tensor([0.1, 0.2, 0.4, 0.5, 0.4, 0.3, 0.2, 0.9, 0.1, 0.3, 0.4, 0.7], device=device))


def _same_as_torchrec(tables: list, kjt: TKJT, weighted: bool = False, **kw) -> TKT:
    """recgo's output on ``kjt``, checked against TorchRec's module loaded with recgo's weights
    (values, keys, offsets and weight gradients)."""
    ours = EmbeddingBagCollection(tables, is_weighted=weighted, seed=0, **kw)
    ref = tr.EmbeddingBagCollection(tables=tables, is_weighted=weighted)
    ref.load_state_dict(ours.state_dict())
    got, want = ours(kjt), ref(kjt)
    assert isinstance(got, TKT)
    assert got.keys() == want.keys()
    assert got.offset_per_key() == want.offset_per_key()
    torch.testing.assert_close(got.values(), want.values(), rtol=1e-5, atol=1e-6)
    g = torch.randn(got.values().shape, generator=torch.Generator().manual_seed(1))
    (got.values() * g).sum().backward()
    (want.values() * g).sum().backward()
    for t in tables:
        torch.testing.assert_close(ours.embedding_bags[t.name].weight.grad, ref.embedding_bags[t.name].weight.grad,
                                   rtol=1e-5, atol=1e-6)
    return got


# -- ports of TorchRec's EmbeddingBagCollectionTest --------------------------------------------------

def test_unweighted() -> None:
    t1 = tr.EmbeddingBagConfig(name="t1", embedding_dim=3, num_embeddings=10, feature_names=["f1"],
                               init_fn=partial(torch.nn.init.normal_, mean=0.0, std=1.5))
    t2 = tr.EmbeddingBagConfig(name="t2", embedding_dim=4, num_embeddings=10, feature_names=["f2"],
                               init_fn=partial(torch.nn.init.uniform_, a=-0.036, b=0.036))
    ebc = EmbeddingBagCollection(tables=[t1, t2])
    pooled = ebc(_kjt3())
    assert pooled.values().size() == (3, 7)
    assert pooled.keys() == ["f1", "f2"]
    assert pooled.offset_per_key() == [0, 3, 7]
    w2 = ebc.embedding_bags["t2"].weight.detach()
    assert float(w2.abs().max()) <= 0.036 and float(w2.std()) > 0  # t2's init_fn ran
    assert float(ebc.embedding_bags["t1"].weight.detach().abs().max()) > 0.4  # normal(1.5), not ±√(1/10)


def test_shared_tables() -> None:
    cfg = tr.EmbeddingBagConfig(name="t1", embedding_dim=3, num_embeddings=10, feature_names=["f1", "f2"])
    pooled = _same_as_torchrec([cfg], _kjt3())
    assert pooled.values().size() == (3, 6)
    assert pooled.keys() == ["f1", "f2"]
    assert pooled.offset_per_key() == [0, 3, 6]


def test_shared_features() -> None:
    t1 = tr.EmbeddingBagConfig(name="t1", embedding_dim=3, num_embeddings=10, feature_names=["f1"])
    t2 = tr.EmbeddingBagConfig(name="t2", embedding_dim=4, num_embeddings=10, feature_names=["f1"])
    kjt = TKJT.from_offsets_sync(keys=["f1"], values=torch.tensor([0, 1, 2, 3, 4, 5, 6, 7]),
                                 offsets=torch.tensor([0, 2, 2, 3, 4, 5, 8]))
    pooled = _same_as_torchrec([t1, t2], kjt)
    assert pooled.values().size() == (6, 7)
    assert pooled.keys() == ["f1@t1", "f1@t2"]
    assert pooled.offset_per_key() == [0, 3, 7]


@pytest.mark.parametrize("fused", [False, True])
def test_shared_features_mixed_with_others_weighted(fused: bool) -> None:
    """A feature read by three tables (one of them mean-pooled, one shared with another feature),
    keys in another order: outputs and gradients equal TorchRec's; with a fused optimizer (and
    weights) every table reading the feature is updated."""
    tables = [
        tr.EmbeddingBagConfig(name="a", embedding_dim=2, num_embeddings=10, feature_names=["f1", "f2"]),
        tr.EmbeddingBagConfig(name="b", embedding_dim=3, num_embeddings=10, feature_names=["f1"],
                              pooling=tr.PoolingType.MEAN),
        tr.EmbeddingBagConfig(name="c", embedding_dim=4, num_embeddings=10, feature_names=["f3", "f1"]),
    ]
    kjt = _weighted_kjt()
    if not fused:  # (TorchRec has no weighted mean pooling: compare unweighted)
        pooled = _same_as_torchrec(tables, kjt)
        assert pooled.keys() == ["f1@a", "f2", "f1@b", "f3", "f1@c"]
        return
    ebc = EmbeddingBagCollection(tables, is_weighted=True, seed=0, optimizer=optim.SGD(lr=0.5))
    before = {t.name: ebc.embedding_bags[t.name].weight.detach().clone() for t in tables}
    ebc(kjt).values().sum().backward()
    for t in tables:  # f1's IDs are 1 and 2 (both samples)
        moved = (ebc.embedding_bags[t.name].weight.detach() != before[t.name]).any(1)
        assert moved[1] and moved[2], t.name


def test_weighted() -> None:
    t1 = tr.EmbeddingBagConfig(name="t1", embedding_dim=3, num_embeddings=10, feature_names=["f1", "f3"])
    t2 = tr.EmbeddingBagConfig(name="t2", embedding_dim=4, num_embeddings=10, feature_names=["f2"])
    pooled = _same_as_torchrec([t1, t2], _weighted_kjt(), weighted=True)
    assert pooled.values().size() == (2, 10)
    assert pooled.keys() == ["f1", "f3", "f2"]
    assert pooled.offset_per_key() == [0, 3, 6, 10]


def test_forward_with_meta_device() -> None:
    t1 = tr.EmbeddingBagConfig(name="t1", embedding_dim=3, num_embeddings=10, feature_names=["f1", "f3"])
    t2 = tr.EmbeddingBagConfig(name="t2", embedding_dim=4, num_embeddings=10, feature_names=["f2"])
    ebc = EmbeddingBagCollection(tables=[t1, t2], is_weighted=True, device=torch.device("meta"))
    pooled = ebc(_weighted_kjt("meta"))
    assert pooled.values().size() == (2, 10)
    assert pooled.keys() == ["f1", "f3", "f2"]
    assert pooled.offset_per_key() == [0, 3, 6, 10]
    assert pooled.values().device == torch.device("meta")


def test_duplicate_config_name_fails() -> None:
    t1 = tr.EmbeddingBagConfig(name="t1", embedding_dim=3, num_embeddings=10, feature_names=["f1"])
    t2 = tr.EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=10, feature_names=["f2"])
    with pytest.raises(ValueError):
        EmbeddingBagCollection(tables=[t1, t2])


def test_device() -> None:
    cfg = tr.EmbeddingBagConfig(name="t1", embedding_dim=3, num_embeddings=10, feature_names=["f1"])
    ebc = EmbeddingBagCollection(tables=[cfg], device=torch.device("meta"))
    assert ebc.embedding_bags["t1"].weight.device == torch.device("meta") == ebc.device
    with torch.device("meta"):
        ebc = EmbeddingBagCollection(tables=[cfg])
    assert ebc.embedding_bags["t1"].weight.device == torch.device("meta") == ebc.device
    ebc = EmbeddingBagCollection(tables=[cfg])
    assert ebc.embedding_bags["t1"].weight.device == torch.device("cpu") == ebc.device


# -- the rest of TorchRec's semantics ----------------------------------------------------------------

def test_extra_keys_are_ignored() -> None:
    cfgs = [EmbeddingBagConfig(10, 4, "t", ["f1", "f2"])]
    ebc = EmbeddingBagCollection(cfgs, seed=0)
    plain = ebc(_kjt3()).values()
    # "x" and "y" hold IDs no table could look up; TorchRec's module ignores keys it has no table for
    extra = TKJT.from_lengths_sync(keys=["x", "f1", "y", "f2"],
                                   values=torch.tensor([99, 0, 1, 2, -4, 1000, 3, 4, 5, 6, 7]),
                                   lengths=torch.tensor([1, 0, 0, 2, 0, 1, 0, 2, 0, 1, 1, 3]))
    got = ebc(extra)
    assert got.keys() == ["f1", "f2"]
    torch.testing.assert_close(got.values(), plain)
    ref = tr.EmbeddingBagCollection(tables=[tr.EmbeddingBagConfig(num_embeddings=10, embedding_dim=4, name="t",
                                                                  feature_names=["f1", "f2"])])
    ref.load_state_dict(ebc.state_dict())
    torch.testing.assert_close(ref(extra).values(), got.values())
    with pytest.raises(InvalidInputError, match=r"lacks features \['f2'\]"):
        ebc(TKJT.from_lengths_sync(keys=["f1", "x"], values=torch.tensor([1]), lengths=torch.tensor([1, 0])))


def test_empty_feature_names_default_to_the_table_name() -> None:
    tcfg = tr.EmbeddingBagConfig(name="item", embedding_dim=4, num_embeddings=10, feature_names=[])
    ebc = EmbeddingBagCollection([tcfg, EmbeddingBagConfig(5, 2, "user")], seed=0)
    assert ebc.embedding_bag_configs()[0].feature_names == ["item"]
    assert ebc.embedding_bag_configs()[1].feature_names == ["user"]
    kjt = TKJT.from_lengths_sync(keys=["user", "item"], values=torch.tensor([1, 2, 3]),
                                 lengths=torch.tensor([1, 0, 1, 1]))
    ref = tr.EmbeddingBagCollection(tables=[
        tr.EmbeddingBagConfig(name="item", embedding_dim=4, num_embeddings=10, feature_names=[]),
        tr.EmbeddingBagConfig(name="user", embedding_dim=2, num_embeddings=5, feature_names=[])])
    ref.load_state_dict(ebc.state_dict())
    got, want = ebc(kjt), ref(kjt)
    assert got.keys() == want.keys() == ["item", "user"]
    torch.testing.assert_close(got.values(), want.values())


def test_meta_construction_then_materialisation() -> None:
    cfgs = [EmbeddingBagConfig(50, 8, "t", ["a", "b"]), EmbeddingBagConfig(30, 4, "u", ["c"], pooling="mean")]
    direct = EmbeddingBagCollection(cfgs, seed=7, optimizer=optim.Adagrad(lr=0.1))
    meta = EmbeddingBagCollection(cfgs, seed=7, optimizer=optim.Adagrad(lr=0.1), device="meta")
    assert {k: (v.shape, v.dtype) for k, v in meta.state_dict().items()} == \
        {k: (v.shape, v.dtype) for k, v in direct.state_dict().items()}
    meta.reset_parameters()  # a no-op on meta, as in TorchRec
    assert meta.to_empty(device="cpu") is meta and meta.device == torch.device("cpu")
    assert not meta.embedding_bags["t"].weight.is_meta
    meta.reset_parameters()
    for k, v in direct.state_dict().items():
        assert torch.equal(meta.state_dict()[k], v), k
    kjt = recgo.KeyedJaggedTensor(["a", "b", "c"], torch.tensor([1, 2, 3, 4, 5]),
                                  lengths=torch.tensor([2, 0, 1, 1, 0, 1]))
    for m in (meta, direct):
        m(kjt).values().square().sum().backward()
    for k, v in direct.state_dict().items():
        assert torch.equal(meta.state_dict()[k], v), k  # trained identically (the fused step ran)
    assert not torch.equal(direct.embedding_bags["t"].weight, EmbeddingBagCollection(cfgs, seed=7).embedding_bags["t"].weight)
    with pytest.raises(InvalidInputError, match="runs on CPU"):
        EmbeddingBagCollection(cfgs, device="meta").to_empty(device="cuda")


def test_to_empty_on_cpu_then_reset_parameters() -> None:
    """TorchRec's materialise-in-place flow on a module already on the CPU: to_empty replaces the
    parameters, reset_parameters puts them back in engine memory and draws the seeded init."""
    cfgs = [EmbeddingBagConfig(20, 4, "t", ["a"])]
    ebc, fresh = EmbeddingBagCollection(cfgs, seed=9), EmbeddingBagCollection(cfgs, seed=9)
    ebc.to_empty(device="cpu")
    ebc.reset_parameters()
    assert ebc.embedding_bags["t"].weight.data_ptr() == ebc._storage[0][0].data_ptr()
    kjt = recgo.KeyedJaggedTensor(["a"], torch.tensor([3, 4, 19]), lengths=torch.tensor([2, 1]))
    assert torch.equal(ebc(kjt).values(), fresh(kjt).values())


def test_variable_batch_torchrec_kjt_without_inverse_indices_is_refused() -> None:
    """A pooled output needs one batch size (with inverse_indices it is theirs: tests/test_vbe.py)."""
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["f1", "f2"])], seed=0)
    vbe = TKJT(keys=["f1", "f2"], values=torch.tensor([0, 1, 2, 3, 4, 5, 6, 7]),
               offsets=torch.tensor([0, 2, 2, 3, 4, 5, 8]), stride_per_key_per_rank=[[2], [4]])
    with pytest.raises(InvalidInputError, match=r"variable batch size per feature \(\{'f1': 2, 'f2': 4\}\) "
                                                r"without inverse_indices"):
        ebc(vbe)


def test_meta_load_state_dict_materialises() -> None:
    cfgs = [EmbeddingBagConfig(20, 4, "t", ["a"])]
    src = EmbeddingBagCollection(cfgs, seed=1)
    for assign in (False, True):
        meta = EmbeddingBagCollection(cfgs, device="meta")
        meta.load_state_dict(src.state_dict(), assign=assign)
        kjt = recgo.KeyedJaggedTensor(["a"], torch.tensor([3, 4]), lengths=torch.tensor([1, 1]))
        torch.testing.assert_close(meta(kjt).values(), src(kjt).values())


def test_reset_parameters_redraws_the_seeded_init() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "t", ["a"])], seed=3)
    first = ebc.embedding_bags["t"].weight.detach().clone()
    with torch.no_grad():
        ebc.embedding_bags["t"].weight.zero_()
    ebc.reset_parameters()
    assert torch.equal(ebc.embedding_bags["t"].weight, first)
    lo, hi = EmbeddingBagConfig(20, 4).init_bounds()
    assert float(first.min()) >= lo and float(first.max()) <= hi and lo == -hi == -(1 / 20) ** 0.5
    theirs = tr.EmbeddingBagConfig(num_embeddings=20, embedding_dim=4, name="t", feature_names=["a", "b"])
    mine = EmbeddingBagConfig(20, 4, "t", ["a", "b"])
    assert (mine.get_weight_init_min(), mine.get_weight_init_max(), mine.num_features()) == \
        (theirs.get_weight_init_min(), theirs.get_weight_init_max(), theirs.num_features())


def test_init_fn_is_honoured_and_the_default_is_recognised() -> None:
    const = tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=["a"],
                                  init_fn=partial(torch.nn.init.constant_, val=0.25))
    ebc = EmbeddingBagCollection([const])
    assert torch.equal(ebc.embedding_bags["t"].weight, torch.full((10, 4), 0.25))
    with torch.no_grad():
        ebc.embedding_bags["t"].weight.zero_()
    ebc.reset_parameters()
    assert torch.equal(ebc.embedding_bags["t"].weight, torch.full((10, 4), 0.25))
    ours = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["a"], init_fn=torch.nn.init.ones_)])
    assert torch.equal(ours.embedding_bags["t"].weight, torch.ones(10, 4))
    # TorchRec's default init_fn (uniform over the config's bounds) becomes recgo's seeded draw
    default = tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=["a"])
    assert EmbeddingBagConfig.from_torchrec(default).init_fn is None
    a, b = (EmbeddingBagCollection([default], seed=5).embedding_bags["t"].weight for _ in range(2))
    assert torch.equal(a, b)


def test_data_type_fp32_only() -> None:
    ok = tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=["a"],
                               data_type=DataType.FP32)
    EmbeddingBagCollection([ok])
    for dt in (DataType.FP16, DataType.INT8):
        cfg = tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=["a"], data_type=dt)
        with pytest.raises(InvalidInputError, match=f"data_type {dt.name} is not supported.*float32"):
            EmbeddingBagCollection([cfg])
    with pytest.raises(InvalidInputError, match="data_type bfloat16"):
        EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", data_type=torch.bfloat16)])
    EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", data_type=torch.float32)])


def test_virtual_table_is_refused_with_the_alternative() -> None:
    cfg = tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=["a"],
                                use_virtual_table=True)
    with pytest.raises(InvalidInputError, match="dynamic-ID tables"):
        EmbeddingBagCollection([cfg])


def test_settings_only_torchrecs_sharded_and_inference_modules_read_warn_that_they_are_not_kept() -> None:
    """need_pos and num_embeddings_post_pruning were dropped without a word (to_torchrec gave them back
    unset)."""
    cfg = tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10, feature_names=["a"], need_pos=True,
                                num_embeddings_post_pruning=5)
    with pytest.warns(UserWarning, match=r"table 't': \['need_pos', 'num_embeddings_post_pruning'\] not kept"):
        recgo.from_torchrec(tr.EmbeddingBagCollection(tables=[cfg]))


def test_a_quantized_collection_is_refused_as_such() -> None:
    """A quantized inference collection matched TorchRec's class name and failed on its weights' shape."""
    from torchrec.quant.embedding_modules import EmbeddingBagCollection as QuantEBC

    cfg = tr.EmbeddingBagConfig(name="t", embedding_dim=8, num_embeddings=10, feature_names=["a"])
    quant = QuantEBC([cfg], is_weighted=False, device=torch.device("cpu"))
    with pytest.raises(InvalidInputError, match="is a quantized inference module: recgo converts TorchRec's training"):
        recgo.from_torchrec(torch.nn.ModuleDict({"q": quant}))


def test_num_embeddings_past_int64_is_a_clear_error() -> None:
    cfg = tr.EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=2**63, feature_names=["a"])
    with pytest.raises(InvalidInputError, match=r"num_embeddings=9223372036854775808 does not fit in int64"):
        EmbeddingBagCollection([cfg])
    with pytest.raises(recgo.CapacityError, match="too large"):
        EmbeddingBagCollection([EmbeddingBagConfig(2**63 - 1, 4, "t", ["a"])])


def test_torchrec_output_wraps_the_same_values_and_regroups() -> None:
    """A TorchRec input gives a torchrec.KeyedTensor over the very output tensor: KeyedTensor.regroup
    and autograd work on it, with the gradients of the recgo.KeyedTensor path."""
    cfgs = [EmbeddingBagConfig(10, 3, "t1", ["f1"]), EmbeddingBagConfig(10, 4, "t2", ["f2"])]
    a, b = EmbeddingBagCollection(cfgs, seed=2), EmbeddingBagCollection(cfgs, seed=2)
    kt = a(_kjt3())
    assert isinstance(kt, TKT)
    g1, g2 = TKT.regroup([kt], [["f2", "f1"], ["f1"]])
    torch.testing.assert_close(g1, torch.cat([kt["f2"], kt["f1"]], 1))
    (g1.square().sum() + 3 * g2.sum()).backward()
    ours = b(recgo.KeyedJaggedTensor.from_torchrec(_kjt3()))
    assert isinstance(ours, recgo.KeyedTensor)
    h1, h2 = recgo.KeyedTensor.regroup([ours], [["f2", "f1"], ["f1"]])
    (h1.square().sum() + 3 * h2.sum()).backward()
    for t in ("t1", "t2"):
        torch.testing.assert_close(a.embedding_bags[t].weight.grad, b.embedding_bags[t].weight.grad)


# -- issue 14: errors that say what to do ------------------------------------------------------------

@pytest.mark.parametrize("given, ours", [
    (torch.optim.Adagrad, "Adagrad"),
    (torch.optim.SGD, "SGD"),
    (torch.optim.Adam, "Adam"),
    (torch.optim.AdamW, "AdamW"),
    (torch.optim.SparseAdam, "Adam"),
    (lambda: torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), "SGD"),
    (lambda: tr.optim.RowWiseAdagrad([torch.zeros(2, 2, requires_grad=True)], lr=0.1), "RowWiseAdagrad"),
    (lambda: __import__("fbgemm_gpu.split_embedding_configs", fromlist=["x"]).EmbOptimType.EXACT_ROWWISE_ADAGRAD,
     "RowWiseAdagrad"),
    (lambda: __import__("fbgemm_gpu.split_embedding_configs", fromlist=["x"]).EmbOptimType.EXACT_ADAGRAD,
     "Adagrad"),
])
def test_torch_optimizer_names_the_recgo_one(given, ours: str) -> None:
    if callable(given) and not isinstance(given, type):
        try:
            given = given()
        except ImportError:
            pytest.skip("fbgemm_gpu is not installed")
    with pytest.raises(InvalidInputError, match=rf"recgo\.modules\.optim\.{ours}\(lr=\.\.\.\)"):
        EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])], optimizer=given)


def test_recgo_optimizer_class_instead_of_instance() -> None:
    with pytest.raises(InvalidInputError, match=r"pass an instance, e\.g\. recgo\.modules\.optim\.Adagrad\(lr="):
        EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])], optimizer=optim.Adagrad)
    with pytest.raises(InvalidInputError, match="expected a recgo fused optimizer"):
        EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])], optimizer="adagrad")


def _train(ebc: EmbeddingBagCollection, steps: int, opt: torch.optim.Optimizer | None, every: int = 1) -> None:
    head = torch.nn.Linear(4, 1)
    head_opt = torch.optim.SGD(head.parameters(), lr=0.1)  # the usual mistake: only the dense part
    kjt = recgo.KeyedJaggedTensor(["a"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
    for i in range(steps):
        head(ebc(kjt).values()).square().sum().backward()
        head_opt.step()
        head_opt.zero_grad()
        if opt is not None and (i + 1) % every == 0:
            opt.step()
            opt.zero_grad()


def test_untrained_tables_warn_once() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])], seed=0)
    with pytest.warns(UserWarning, match="do not train") as record:
        _train(ebc, 40, None)
    assert sum("do not train" in str(w.message) for w in record) == 1


@pytest.mark.parametrize("how", ["fused_sgd", "fused_adam", "data"])
def test_updates_that_leave_the_version_alone_do_not_warn(how: str) -> None:
    """torch's fused=True optimizers and updates through .data do not bump the weight's version, which
    the check read alone: it warned that the tables do not train while they did."""
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])], seed=0)
    weight = ebc.embedding_bags["t"].weight
    if how == "data":
        class Manual(torch.optim.SGD):
            @torch.no_grad()
            def step(self, closure=None):  # type: ignore[no-untyped-def,override]
                weight.data.add_(weight.grad, alpha=-0.1)
        opt: torch.optim.Optimizer = Manual([weight], lr=0.1)
    else:
        opt = (torch.optim.SGD if how == "fused_sgd" else torch.optim.Adam)([weight], lr=0.1, fused=True)
    before = weight.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _train(ebc, 40, opt)
    assert not torch.equal(weight.detach(), before)


@pytest.mark.parametrize("every", [1, 16])
def test_trained_tables_do_not_warn(every: int) -> None:
    """A torch optimizer that steps the tables (every step, or after gradient accumulation) and a
    fused optimizer never trigger the warning."""
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])], seed=0)
    fused = EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])], seed=0, optimizer=optim.SGD(lr=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _train(ebc, 40, torch.optim.SGD(ebc.parameters(), lr=0.1), every=every)
        _train(fused, 40, None)
        with torch.no_grad():
            for _ in range(30):
                ebc(recgo.KeyedJaggedTensor(["a"], torch.tensor([1]), lengths=torch.tensor([1])))


def test_out_of_range_ids_suggest_mod_or_more_rows() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])], seed=0)
    with pytest.raises(InvalidInputError, match=r"id 7 out of range \[0, 5\).*\.mod\(5\).*larger num_embeddings"):
        ebc(recgo.KeyedJaggedTensor(["a"], torch.tensor([7]), lengths=torch.tensor([1])))


@pytest.mark.parametrize("table, feature", [("t", "a\x00b"), ("t", "a\tb"), ("t\x00", "a"), ("t\n", "a")])
def test_control_characters_in_names_are_refused(table: str, feature: str) -> None:
    with pytest.raises(recgo.InvalidInputError, match="control characters"):
        recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(num_embeddings=4, embedding_dim=2, name=table,
                                                               feature_names=[feature])])


def test_torch_manual_seed_builds_torchrecs_tables_and_the_layers_after_them() -> None:
    """TorchRec's constructors fill each table with ``normal_`` (``nn.EmbeddingBag``'s / ``nn.Embedding``'s
    own init) before the config's uniform init, the pooled collection creating all tables first, the
    sequence one initialising each as it goes. recgo drew only the uniform init, so after the same
    ``torch.manual_seed`` its tables, and the dense layers built after them, differed from TorchRec's."""
    from torchrec.models.deepfm import SimpleDeepFMNN
    from torchrec.models.dlrm import DLRM

    bags = [tr.EmbeddingBagConfig(name=f"t{i}", embedding_dim=8, num_embeddings=n, feature_names=[f"f{i}"])
            for i, n in enumerate([50, 3, 1001])]
    models = [lambda ebc: DLRM(embedding_bag_collection=ebc, dense_in_features=4, dense_arch_layer_sizes=[16, 8],
                               over_arch_layer_sizes=[16, 1]),
              lambda ebc: SimpleDeepFMNN(num_dense_features=4, embedding_bag_collection=ebc, hidden_layer_size=20,
                                         deep_fm_dimension=5)]
    for build in models:
        torch.manual_seed(0)
        want = build(tr.EmbeddingBagCollection(tables=bags)).state_dict()
        torch.manual_seed(0)
        got = build(EmbeddingBagCollection(bags)).state_dict()
        assert got.keys() == want.keys()
        for k, v in want.items():
            assert torch.equal(got[k], v), k
    seqs = [tr.EmbeddingConfig(name="e1", embedding_dim=4, num_embeddings=10, feature_names=["a", "b"]),
            tr.EmbeddingConfig(name="e2", embedding_dim=4, num_embeddings=7, feature_names=["c"])]
    torch.manual_seed(3)
    want_ec, want_next = tr.EmbeddingCollection(tables=seqs), torch.rand(4)
    torch.manual_seed(3)
    got_ec, got_next = recgo.EmbeddingCollection(seqs), torch.rand(4)
    for c in seqs:
        assert torch.equal(got_ec.embeddings[c.name].weight, want_ec.embeddings[c.name].weight), c.name
    assert torch.equal(got_next, want_next)
