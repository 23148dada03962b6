"""EmbeddingBagCollection (issue 2): parity with nn.EmbeddingBag in float64 and with TorchRec's
EmbeddingBagCollection, gradients to plain torch optimizers, storage lifetime, and bad input."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from recgo.errors import InvalidInputError
from recgo.modules import _outputs


def random_batch(cfgs: list[EmbeddingBagConfig], batch: int, max_len: int, gen: torch.Generator,
                 weighted: bool, key_order: list[str] | None = None) -> KeyedJaggedTensor:
    """A KJT over every feature (in key_order), IDs drawn with many duplicates."""
    rows: dict[str, int] = {}
    for c in cfgs:  # a feature several tables read must fit the smallest
        for f in c.feature_names:
            rows[f] = min(rows.get(f, c.num_embeddings), c.num_embeddings)
    rows["extra"] = 1000  # a key no table reads (ignored, as by TorchRec), when key_order names it
    keys = key_order or [k for k in rows if k != "extra"]
    vals, lens = [], []
    for k in keys:
        ln = torch.randint(0, max_len + 1, (batch,), generator=gen)
        lens.append(ln)
        lo = 1000 if k == "extra" else 0  # IDs of the ignored key fit no table
        vals.append(torch.randint(lo, lo + max(1, min(rows[k], 7)), (int(ln.sum()),), generator=gen))
    values = torch.cat(vals)
    weights = torch.rand(values.numel(), generator=gen) + 0.5 if weighted else None
    return KeyedJaggedTensor(keys, values, lengths=torch.cat(lens), weights=weights)


def reference(ebc: EmbeddingBagCollection, kjt: KeyedJaggedTensor, weighted: bool,
              grad_out: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Pooled output and per-table weight gradients from nn.EmbeddingBag in float64."""
    per_key = kjt.to_dict()
    b = kjt.stride()
    offsets = {k: 0 for k in kjt.keys()}
    start = 0
    wts = kjt.weights_or_none()
    for k, n in zip(kjt.keys(), kjt.length_per_key()):
        offsets[k] = start
        start += n
    outs, grads, col = [], {}, 0
    leaves = {c.name: ebc.embedding_bags[c.name].weight.detach().double().clone().requires_grad_(True)
              for c in ebc.embedding_bag_configs()}
    for cfg in ebc.embedding_bag_configs():
        for f in cfg.feature_names:
            mode = "sum" if cfg.pooling_code() == 0 else "mean"
            values, lengths = per_key[f].values(), per_key[f].lengths()
            psw = None
            if weighted:
                psw = wts[offsets[f]:offsets[f] + values.numel()].double()
            if mode == "mean" and weighted:
                # nn.EmbeddingBag has no weighted mean: scale weights by 1/len and sum.
                psw = psw / torch.repeat_interleave(lengths.clamp(min=1), lengths).double()
                mode = "sum"
            bag_offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
            out = nn.functional.embedding_bag(values, leaves[cfg.name], bag_offsets, mode=mode,
                                              per_sample_weights=psw)
            outs.append(out)
            col += cfg.embedding_dim
    pooled = torch.cat(outs, 1) if outs else torch.empty(b, 0)
    (pooled * grad_out.double()).sum().backward()
    for name, leaf in leaves.items():
        grads[name] = leaf.grad
    return pooled, grads


@st.composite
def collections(draw: st.DrawFn) -> tuple[list[EmbeddingBagConfig], bool, int, int, int]:
    ntables = draw(st.integers(1, 3))
    cfgs, fid = [], 0
    for t in range(ntables):
        nfeat = draw(st.integers(1, 2))  # shared tables
        names = [f"f{fid + i}" for i in range(nfeat)]
        if t and draw(st.booleans()):  # a feature the previous table reads too (shared feature)
            names[-1] = cfgs[-1].feature_names[0]
        cfgs.append(EmbeddingBagConfig(
            num_embeddings=draw(st.integers(1, 40)), embedding_dim=draw(st.sampled_from([1, 3, 8, 16, 19, 64])),
            name=f"t{t}", feature_names=names, pooling=draw(st.sampled_from(["sum", "mean"]))))
        fid += nfeat
    return cfgs, draw(st.booleans()), draw(st.integers(1, 6)), draw(st.integers(0, 5)), draw(st.integers(0, 2**31))


@settings(max_examples=30, deadline=None)
@given(collections())
def test_matches_embedding_bag_float64(case: tuple) -> None:
    cfgs, weighted, batch, max_len, seed = case
    gen = torch.Generator().manual_seed(seed)
    ebc = EmbeddingBagCollection(cfgs, is_weighted=weighted, seed=seed)
    feats = list(dict.fromkeys(f for c in cfgs for f in c.feature_names)) + ["extra"]
    order = [feats[i] for i in torch.randperm(len(feats), generator=gen).tolist()]
    kjt = random_batch(cfgs, batch, max_len, gen, weighted, order)
    out = ebc(kjt)
    uses = [f for c in cfgs for f in c.feature_names]
    assert out.keys() == [f if uses.count(f) == 1 else f"{f}@{c.name}" for c in cfgs for f in c.feature_names]
    grad_out = torch.randn(out.values().shape, generator=gen)
    ref, ref_grads = reference(ebc, kjt, weighted, grad_out)
    torch.testing.assert_close(out.values().double(), ref, rtol=1e-5, atol=1e-6)
    (out.values() * grad_out).sum().backward()
    for c in cfgs:
        got = ebc.embedding_bags[c.name].weight.grad
        torch.testing.assert_close(got.double(), ref_grads[c.name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("weighted", [False, True])
def test_widths_with_a_masked_block_match_float64(weighted: bool) -> None:
    """Widths that are a multiple of 4 but not of 16 (one pass over each row on AVX-512, a masked
    last block; long bags with the in-loop prefetching kernel) equal nn.EmbeddingBag in float64, in
    short bags and long ones, summed and averaged."""
    cfgs = [EmbeddingBagConfig(60, d, f"t{d}", [f"f{d}"], pooling=("sum", "mean")[i % 2])
            for i, d in enumerate((8, 20, 24, 40, 72))]
    ebc = EmbeddingBagCollection(cfgs, is_weighted=weighted, seed=3)
    for max_len in (4, 90):
        gen = torch.Generator().manual_seed(max_len)
        kjt = random_batch(cfgs, 6, max_len, gen, weighted)
        grad_out = torch.randn(6, sum(c.embedding_dim for c in cfgs), generator=gen)
        ref, _ = reference(ebc, kjt, weighted, grad_out)
        torch.testing.assert_close(ebc(kjt).values().double(), ref, rtol=1e-5, atol=1e-6)


def test_empty_bags_pool_to_zero_and_to_dict() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"], pooling="mean")], seed=0)
    kt = ebc(KeyedJaggedTensor(["a"], torch.tensor([2]), lengths=torch.tensor([0, 1, 0])))
    v = kt.values()
    assert v.shape == (3, 4)
    assert torch.equal(v[0], torch.zeros(4)) and torch.equal(v[2], torch.zeros(4))
    torch.testing.assert_close(kt.to_dict()["a"][1], ebc.embedding_bags["t"].weight[2].detach())


@pytest.fixture(scope="module")
def torchrec_mod():
    return pytest.importorskip("torchrec")


@pytest.mark.parametrize("weighted", [False, True])
def test_matches_torchrec_ebc(torchrec_mod, weighted: bool) -> None:
    from torchrec.modules.embedding_configs import PoolingType

    tcfgs = [
        torchrec_mod.EmbeddingBagConfig(num_embeddings=50, embedding_dim=16, name="t0", feature_names=["a", "b"]),
        torchrec_mod.EmbeddingBagConfig(num_embeddings=30, embedding_dim=8, name="t1", feature_names=["c"],
                                        pooling=PoolingType.MEAN if not weighted else PoolingType.SUM),
    ]
    ref = torchrec_mod.EmbeddingBagCollection(tables=tcfgs, is_weighted=weighted, device=torch.device("cpu"))
    ebc = EmbeddingBagCollection(tcfgs, is_weighted=weighted, seed=3)
    assert set(ebc.state_dict()) == set(ref.state_dict())
    ref.load_state_dict(ebc.state_dict())
    gen = torch.Generator().manual_seed(4)
    cfgs = ebc.embedding_bag_configs()
    kjt = random_batch(cfgs, 8, 6, gen, weighted, ["c", "a", "b"]).to_torchrec()
    want, got = ref(kjt), ebc(kjt)
    assert got.keys() == want.keys()
    torch.testing.assert_close(got.values(), want.values(), rtol=1e-5, atol=1e-6)
    g = torch.randn(got.values().shape, generator=gen)
    (want.values() * g).sum().backward()
    (got.values() * g).sum().backward()
    for name in ("t0", "t1"):
        torch.testing.assert_close(ebc.embedding_bags[name].weight.grad,
                                   ref.embedding_bags[name].weight.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sparse", [False, True])
def test_torch_optimizer_step(sparse: bool) -> None:
    cfgs = [EmbeddingBagConfig(20, 8, "t", ["a", "b"])]
    ebc = EmbeddingBagCollection(cfgs, sparse_grad=sparse, seed=0)
    ref = ebc.embedding_bags["t"].weight.detach().double().clone().requires_grad_(True)
    opt = torch.optim.SGD(ebc.parameters(), lr=0.5)
    ropt = torch.optim.SGD([ref], lr=0.5)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        kjt = random_batch(cfgs, 4, 4, gen, False)
        opt.zero_grad()
        out = ebc(kjt).values()
        (out ** 2).sum().backward()
        assert ebc.embedding_bags["t"].weight.grad.is_sparse == sparse
        opt.step()
        ropt.zero_grad()
        pooled = [nn.functional.embedding_bag(v, ref, torch.cat([torch.zeros(1, dtype=torch.int64),
                                                                   ln.cumsum(0)[:-1]]), mode="sum")
                  for v, ln in ((jt.values(), jt.lengths()) for jt in kjt.to_dict().values())]
        (torch.cat(pooled, 1) ** 2).sum().backward()
        ropt.step()
    torch.testing.assert_close(ebc.embedding_bags["t"].weight.detach().double(), ref.detach(), rtol=1e-5, atol=1e-6)


def test_storage_is_zero_copy_and_outlives_module() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(1000, 16, "t", ["a"])], seed=0)
    w = ebc.embedding_bags["t"].weight
    with torch.no_grad():
        w[7] = torch.arange(16.0)
    out = ebc(KeyedJaggedTensor(["a"], torch.tensor([7]), lengths=torch.tensor([1]))).values()
    assert torch.equal(out[0], torch.arange(16.0))  # the engine read what Python wrote
    handle = weakref.ref(ebc._handle)
    kept = w.detach()
    del ebc, w, out
    gc.collect()
    assert handle() is not None, "a live tensor must keep the engine memory alive"
    assert torch.equal(kept[7], torch.arange(16.0))
    del kept
    gc.collect()
    assert handle() is None, "the engine object is freed once no tensor uses it"


def test_output_memory_is_reused_only_when_unreferenced() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(50, 8, "t", ["a"])], seed=0)
    k1 = KeyedJaggedTensor(["a"], torch.tensor([1, 2, 3]), lengths=torch.tensor([1, 2]))
    k2 = KeyedJaggedTensor(["a"], torch.tensor([7, 8, 9]), lengths=torch.tensor([2, 1]))
    kept = ebc(k1).values()
    expected = kept.clone()
    other = ebc(k2).values()  # must not overwrite `kept`
    assert torch.equal(kept, expected)
    assert other.data_ptr() != kept.data_ptr()
    # an output saved by autograd (and otherwise dropped) is not overwritten either
    w = torch.ones(8, requires_grad=True)
    loss = (ebc(k1).values() * w).sum()
    ebc(k2)
    ebc(k2)
    loss.backward()
    torch.testing.assert_close(w.grad, expected.sum(0))
    if _outputs.storage_use_count is not _outputs._no_use_count:
        del kept, other, loss
        first = ebc(k1).values().data_ptr()
        assert ebc(k1).values().data_ptr() == first, "an unreferenced output's memory is reused"


def test_assign_load_copies_back_into_engine() -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["a"])], seed=0)
    new = {"embedding_bags.t.weight": torch.full((10, 4), 2.0)}
    ebc.load_state_dict(new, assign=True)
    out = ebc(KeyedJaggedTensor(["a"], torch.tensor([3]), lengths=torch.tensor([1]))).values()
    assert torch.equal(out, torch.full((1, 4), 2.0))
    assert ebc.embedding_bags["t"].weight.data_ptr() == ebc._storage[0][0].data_ptr()


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("fused", [False, True])
def test_torch_compile_full_graph(fused: bool, fullgraph: bool, compile_failures: list[str]) -> None:
    """The lookup is a torch.library custom op with fake kernels and an autograd formula: a model
    around it compiles as one graph (aot_eager runs the traced forward and backward graphs), and
    training through the compiled graph matches eager. torch.compile's default (fullgraph=False)
    compiles it too, with no backend failure (dense gradients have static shapes)."""
    from recgo.modules import optim

    cfgs = [EmbeddingBagConfig(10, 16, "t", ["a", "b"]), EmbeddingBagConfig(7, 16, "u", ["c"], pooling="mean")]
    opt = optim.SGD(lr=0.1) if fused else None
    compiled_ebc = EmbeddingBagCollection(cfgs, optimizer=opt, seed=0)
    eager_ebc = EmbeddingBagCollection(cfgs, optimizer=opt, seed=0)
    head = nn.Linear(48, 1)

    def loss(ebc: EmbeddingBagCollection, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return head(ebc(kjt).values()).square().sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=fullgraph)
    gen = torch.Generator().manual_seed(5)
    for _ in range(3):
        kjt = random_batch(cfgs, 4, 3, gen, False)
        a, b = compiled(compiled_ebc, kjt), loss(eager_ebc, kjt)
        torch.testing.assert_close(a, b)
        a.backward()
        b.backward()
    for name in ("t", "u"):
        w_c, w_e = compiled_ebc.embedding_bags[name].weight, eager_ebc.embedding_bags[name].weight
        torch.testing.assert_close(w_c, w_e)
        if fused:
            assert not torch.equal(w_c, EmbeddingBagCollection(cfgs, seed=0).embedding_bags[name].weight), "rows moved"
        else:
            torch.testing.assert_close(w_c.grad, w_e.grad)
    assert compile_failures == []


def test_backward_twice_with_retain_graph_accumulates() -> None:
    """optimizer=None: a graph kept by retain_graph=True runs backward again (gradients add up, as in
    torch); without retain_graph the second backward is torch's own error. A fused collection's graph
    runs backward once (it updated the rows) and says so."""
    from recgo.modules import optim

    ebc = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["a"])], seed=0)
    out = ebc(KeyedJaggedTensor(["a"], torch.tensor([3, 3]), lengths=torch.tensor([1, 1]))).values()
    out.sum().backward(retain_graph=True)
    (2 * out).sum().backward()
    want = torch.zeros(10, 4)
    want[3] = 6.0  # two lookups of row 3, gradients 1 then 2
    assert torch.equal(ebc.embedding_bags.t.weight.grad, want)
    with pytest.raises(RuntimeError, match="second time"):
        out.sum().backward()
    assert len(ebc._contexts) == 0
    fused = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["a"])], seed=0, optimizer=optim.SGD(lr=0.1))
    loss = fused(KeyedJaggedTensor(["a"], torch.tensor([3]), lengths=torch.tensor([1]))).values().sum()
    loss.backward(retain_graph=True)
    with pytest.raises(InvalidInputError, match="retain_graph=True.*not supported"):
        loss.backward()


# -- bad input --------------------------------------------------------------------------------------

@pytest.fixture()
def small() -> EmbeddingBagCollection:
    return EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "users", ["u"]),
                                   EmbeddingBagConfig(5, 2, "products", ["i"])], seed=0)


@pytest.mark.parametrize("values,lengths,err,msg", [
    ([1, 10], [1, 0, 1, 0], InvalidInputError, r'table "products": id 10 out of range \[0, 5\)'),
    ([1, -3], [2, 0, 0, 0], InvalidInputError, r'table "users": id -3 out of range'),
    ([1, 2, 3], [1, 1, 0, 0], InvalidInputError, "lengths sum to 2 but there are 3 values"),
    ([1], [1, 1, 0, 0], InvalidInputError, "lengths sum past"),
    ([1], [-1, 2, 0, 0], InvalidInputError, r"lengths\[0\] = -1 is negative"),
    ([1], [1, 0, 0], InvalidInputError, "not a multiple"),
])
def test_bad_batches(small: EmbeddingBagCollection, values, lengths, err, msg) -> None:
    with pytest.raises(err, match=msg):
        small(KeyedJaggedTensor(["u", "i"], torch.tensor(values), lengths=torch.tensor(lengths)))
    # the collection still works afterwards
    small(KeyedJaggedTensor(["u", "i"], torch.tensor([1, 2]), lengths=torch.tensor([1, 0, 1, 0])))


def test_bad_features_dtypes_devices(small: EmbeddingBagCollection) -> None:
    with pytest.raises(InvalidInputError, match=r"lacks features \['i'\]"):
        small(KeyedJaggedTensor(["u"], torch.tensor([1]), lengths=torch.tensor([1])))
    with pytest.raises(InvalidInputError, match="dtype float32 is not supported"):
        small(KeyedJaggedTensor(["u", "i"], torch.tensor([1.0]), lengths=torch.tensor([1, 0])))
    with pytest.raises(InvalidInputError, match="on meta was passed to recgo.s engine"):
        small(KeyedJaggedTensor(["u", "i"], torch.tensor([1], device="meta"), lengths=torch.tensor([1, 0])))
    with pytest.raises(InvalidInputError, match="expected a recgo or torchrec"):
        small({"u": torch.tensor([1])})
    # non-contiguous values just work
    vals = torch.tensor([[1, 9], [2, 9]])[:, 0]
    out = small(KeyedJaggedTensor(["u", "i"], vals, lengths=torch.tensor([1, 0, 1, 0]))).values()
    assert out.shape == (2, 6)
    weighted = EmbeddingBagCollection([EmbeddingBagConfig(10, 4, "t", ["a"])], is_weighted=True)
    with pytest.raises(InvalidInputError, match="has no weights"):
        weighted(KeyedJaggedTensor(["a"], torch.tensor([1]), lengths=torch.tensor([1])))


@pytest.mark.parametrize("cfgs,msg", [
    ([], "at least one table"),
    ([EmbeddingBagConfig(0, 4, "t", ["a"])], "num_embeddings must be a positive int"),
    ([EmbeddingBagConfig(5, -1, "t", ["a"])], "embedding_dim must be a positive int"),
    ([EmbeddingBagConfig(5, 4, "", ["a"])], "must be non-empty"),
    ([EmbeddingBagConfig(5, 4, "t", ["a", "a"])], "lists a feature twice"),
    ([EmbeddingBagConfig(5, 4, "t", ["a@b"])], "no '@'"),
    ([EmbeddingBagConfig(5, 4, "t", ["a"]), EmbeddingBagConfig(5, 4, "t", ["b"])], "duplicate table"),
    ([EmbeddingBagConfig(2**63, 4, "t", ["a"])], r"num_embeddings=9223372036854775808 does not fit in int64"),
    ([EmbeddingBagConfig(5, 2**64, "t", ["a"])], "embedding_dim=18446744073709551616 does not fit in int64"),
    ([EmbeddingBagConfig(5, 4, "t", ["a"], data_type="fp16")], "data_type fp16 is not supported"),
    ([EmbeddingBagConfig(5, 4, "t", ["a"], init_fn=3)], "init_fn must be callable"),
    ([EmbeddingBagConfig(5, 4, "t", ["a"], pooling="max")], "pooling 'max' is not supported"),
    ([EmbeddingBagConfig(5, 4, "items", ["a"])], "reserved"),
])
def test_bad_configs(cfgs, msg) -> None:
    with pytest.raises(InvalidInputError, match=msg):
        EmbeddingBagCollection(cfgs)


def test_table_too_large_is_a_capacity_error() -> None:
    with pytest.raises(recgo.CapacityError, match="too large"):
        EmbeddingBagCollection([EmbeddingBagConfig(10**12, 64, "huge", ["a"])])


def test_unsupported_device() -> None:
    with pytest.raises(InvalidInputError, match="runs on CPU"):
        EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])], device="cuda")


def test_torchrec_kjt_on_other_device_is_named(torchrec_mod) -> None:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(5, 4, "t", ["a"])])
    kjt = torchrec_mod.KeyedJaggedTensor(keys=["a"], values=torch.tensor([1], device="meta"),
                                         lengths=torch.tensor([1], device="meta"))
    with pytest.raises(InvalidInputError, match="meta"):
        ebc(kjt)
