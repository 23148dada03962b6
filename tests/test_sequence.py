"""Sequence embeddings (issue 11): recgo.EmbeddingCollection against float64
torch.nn.functional.embedding (outputs, gradients, every fused optimizer over several steps), tables
shared with an EmbeddingBagCollection, TorchRec's EmbeddingCollection, the padded view, torch.compile."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from recgo.errors import InvalidInputError, NotFoundError
from recgo.modules import optim
from test_embedding_optim import OPTIMIZERS, Reference

F64 = torch.float64


def seq_batch(feats: dict[str, int], B: int, max_len: int, gen: torch.Generator, id_range: int | None = None,
              keys: list[str] | None = None) -> KeyedJaggedTensor:
    """Random sequences (empty ones included) over features {name: table rows}; small ID ranges repeat IDs."""
    keys = keys or list(feats)
    vals, lens = [], []
    for k in keys:
        ln = torch.randint(0, max_len + 1, (B,), generator=gen)
        hi = feats[k] if id_range is None else min(feats[k], id_range)
        vals.append(torch.randint(0, hi, (int(ln.sum()),), generator=gen))
        lens.append(ln)
    return KeyedJaggedTensor(keys, torch.cat(vals), lengths=torch.cat(lens))


def ref_lookup(weights: dict[str, torch.Tensor], kjt: KeyedJaggedTensor, f2t: dict[str, str]) -> dict[str, torch.Tensor]:
    """float64 nn.functional.embedding per feature."""
    return {k: nn.functional.embedding(v, weights[f2t[k]]) for k, v in ((k, jt.values()) for k, jt in kjt.to_dict().items())}


CFGS = [EmbeddingConfig(30, 8, "t0", ["a", "b"]), EmbeddingConfig(20, 4, "t1", ["c"])]
F2T = {f: c.name for c in CFGS for f in c.feature_names}
ROWS = {f: c.num_embeddings for c in CFGS for f in c.feature_names}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), B=st.integers(0, 6), max_len=st.integers(0, 7), id_range=st.integers(1, 8),
       sparse=st.booleans())
def test_matches_float64_embedding(seed: int, B: int, max_len: int, id_range: int, sparse: bool) -> None:
    gen = torch.Generator().manual_seed(seed)
    ec = EmbeddingCollection(CFGS, seed=seed, sparse_grad=sparse)
    keys = [["a", "b", "c"], ["c", "a", "b"], ["b", "z", "c", "a"]][seed % 3]  # "z": no table uses it
    kjt = seq_batch({**ROWS, "z": 50}, B, max_len, gen, id_range, keys)
    leaves = {c.name: ec.embeddings[c.name].weight.detach().double().requires_grad_(True) for c in CFGS}
    out = ec(kjt)
    ref = ref_lookup(leaves, kjt.permute([keys.index(f) for f in F2T]), F2T)
    assert list(out) == ec.feature_names() == ["a", "b", "c"]  # config order, as TorchRec
    loss, ref_loss = torch.zeros((), dtype=F64), torch.zeros((), dtype=F64)
    for k in ec.feature_names():
        jt = out[k]
        assert torch.equal(jt.lengths(), kjt.to_dict()[k].lengths())
        torch.testing.assert_close(jt.values().double(), ref[k], rtol=0, atol=0)
        g = torch.randn(jt.values().shape, generator=gen, dtype=F64)
        loss = loss + (jt.values().double() * g).sum()
        ref_loss = ref_loss + (ref[k] * g).sum()
    loss.backward()
    ref_loss.backward()
    for c in CFGS:
        grad = ec.embeddings[c.name].weight.grad
        if grad is None:
            assert kjt.values().numel() == 0 or leaves[c.name].grad is None or not leaves[c.name].grad.any()
            continue
        grad = grad.to_dense() if grad.is_sparse else grad
        torch.testing.assert_close(grad.double(), leaves[c.name].grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: f"{type(o).__name__}-wd{o.weight_decay}")
def test_fused_matches_float64_reference(opt: optim.FusedOptimizer) -> None:
    """Every fused optimizer over several duplicate-heavy steps vs the float64 torch-formula reference
    (one update per distinct row of the merged gradient)."""
    ec = EmbeddingCollection(CFGS, optimizer=opt, seed=1)
    ref = Reference(opt, {c.name: ec.embeddings[c.name].weight.detach().double() for c in CFGS})
    gen = torch.Generator().manual_seed(2)
    for _ in range(4):
        kjt = seq_batch(ROWS, 5, 6, gen, id_range=6)
        out = ec(kjt)
        ref.step += 1
        leaves = {k: v.clone().requires_grad_(True) for k, v in ref.w.items()}
        r = ref_lookup(leaves, kjt, F2T)
        loss = torch.zeros(())
        ref_loss = torch.zeros((), dtype=F64)
        for k, jt in out.items():
            torch.testing.assert_close(jt.values().double(), r[k].detach(), rtol=1e-5, atol=1e-6)
            g = torch.randn(jt.values().shape, generator=gen)
            loss = loss + (jt.values() * g).sum()
            ref_loss = ref_loss + (r[k] * g.double()).sum()
        loss.backward()
        ref_loss.backward()
        for c in CFGS:
            rows = torch.unique(torch.cat([kjt.to_dict()[f].values() for f in c.feature_names]))
            ref.update(c.name, rows, leaves[c.name].grad[rows])
    for c in CFGS:
        torch.testing.assert_close(ec.embeddings[c.name].weight.detach().double(), ref.w[c.name], rtol=1e-5, atol=1e-5)
        assert int(ec.embeddings[c.name].optimizer_step) == 4


@pytest.mark.parametrize("opt", [optim.SGD(lr=0.2), optim.Adagrad(lr=0.2, eps=1e-8)], ids=["sgd", "adagrad"])
def test_torch_optimizer_matches_fused(opt: optim.FusedOptimizer) -> None:
    """optimizer=None hands sparse gradients to a torch optimizer: torch.optim.SGD / Adagrad over them
    equal the fused SGD / Adagrad (both update only the touched rows)."""
    fused = EmbeddingCollection(CFGS, optimizer=opt, seed=3)
    plain = EmbeddingCollection(CFGS, seed=3, sparse_grad=True)
    params = [plain.embeddings[c.name].weight for c in CFGS]
    topt = torch.optim.SGD(params, lr=opt.lr) if isinstance(opt, optim.SGD) else torch.optim.Adagrad(
        params, lr=opt.lr, eps=opt.eps)
    gen = torch.Generator().manual_seed(4)
    for _ in range(3):
        kjt = seq_batch(ROWS, 4, 5, gen, id_range=5)
        for m in (fused, plain):
            sum(jt.values().square().sum() for jt in m(kjt).values()).backward()
        topt.step()
        topt.zero_grad()
    for c in CFGS:
        torch.testing.assert_close(fused.embeddings[c.name].weight, plain.embeddings[c.name].weight,
                                   rtol=1e-5, atol=1e-6)


def test_shared_tables_pooled_and_sequence() -> None:
    """item_id pooled for the candidate, hist_item_ids as a sequence over the same rows: one weight, one
    optimizer state; torch-optimizer gradients of both uses accumulate into the one parameter."""
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(40, 8, "item", ["item_id"]),
                                  EmbeddingBagConfig(10, 8, "user", ["user_id"])], seed=5)
    ec = EmbeddingCollection([EmbeddingConfig(40, 8, "item", ["hist_item_ids"])], share=ebc)
    w = ebc.embedding_bags["item"].weight
    assert ec.embeddings["item"].weight is w
    assert list(ec.state_dict()) == ["embeddings.item.weight"]
    gen = torch.Generator().manual_seed(6)
    pooled = KeyedJaggedTensor(["item_id", "user_id"], torch.tensor([3, 7, 3, 1, 2, 0]), torch.tensor([1, 2, 1, 1, 1, 0]))
    hist = seq_batch({"hist_item_ids": 40}, 3, 6, gen, id_range=8)
    leaf = w.detach().double().requires_grad_(True)
    out_p = ebc(pooled).values()
    out_s = ec(hist)["hist_item_ids"].values()
    g_p, g_s = torch.randn(out_p.shape, generator=gen), torch.randn(out_s.shape, generator=gen)
    ((out_p * g_p).sum() + (out_s * g_s).sum()).backward()
    ref_p = nn.functional.embedding_bag(torch.tensor([3, 7, 3, 1]), leaf, torch.tensor([0, 1, 3]), mode="sum")
    ref_s = nn.functional.embedding(hist.values(), leaf)
    ((ref_p * g_p[:, :8].double()).sum() + (ref_s * g_s.double()).sum()).backward()
    torch.testing.assert_close(w.grad.double(), leaf.grad, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotFoundError, match="not in the shared collection"):
        EmbeddingCollection([EmbeddingConfig(40, 8, "nope", ["x"])], share=ebc)
    with pytest.raises(InvalidInputError, match="embedding_dim"):
        EmbeddingCollection([EmbeddingConfig(40, 4, "item", ["x"])], share=ebc)
    with pytest.raises(InvalidInputError, match="come from the shared"):
        EmbeddingCollection([EmbeddingConfig(40, 8, "item", ["x"])], share=ebc, optimizer=optim.SGD(lr=1))


@pytest.mark.parametrize("opt", [optim.SGD(lr=0.3), optim.RowWiseAdagrad(lr=0.3)], ids=["sgd", "rowwise_adagrad"])
def test_shared_tables_fused(opt: optim.FusedOptimizer) -> None:
    """Fused, shared: each collection's backward merges its duplicates and updates the one row/state
    set (SGD: the merged update; row-wise Adagrad: two updates in backward order, one shared state)."""
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "item", ["item_id"])], optimizer=opt, seed=7)
    ec = EmbeddingCollection([EmbeddingConfig(20, 4, "item", ["hist"])], share=ebc)
    ref = Reference(opt, {"item": ebc.embedding_bags["item"].weight.detach().double()})
    pooled = KeyedJaggedTensor(["item_id"], torch.tensor([1, 2, 2]), torch.tensor([2, 1]))
    hist = KeyedJaggedTensor(["hist"], torch.tensor([2, 2, 5, 1]), torch.tensor([3, 0, 1]))
    out_s = ec(hist)["hist"].values()
    out_s.square().sum().backward()  # the sequence update first
    leaf = ref.w["item"].clone().requires_grad_(True)
    nn.functional.embedding(hist.values(), leaf).square().sum().backward()
    rows = torch.tensor([1, 2, 5])
    ref.step += 1
    ref.update("item", rows, leaf.grad[rows])
    out_p = ebc(pooled).values()
    out_p.square().sum().backward()
    leaf = ref.w["item"].clone().requires_grad_(True)
    nn.functional.embedding_bag(pooled.values(), leaf, torch.tensor([0, 2]), mode="sum").square().sum().backward()
    rows = torch.tensor([1, 2])
    ref.step += 1
    ref.update("item", rows, leaf.grad[rows])
    torch.testing.assert_close(ebc.embedding_bags["item"].weight.double(), ref.w["item"], rtol=1e-5, atol=1e-6)
    assert int(ebc.embedding_bags["item"].optimizer_step) == 2
    if isinstance(opt, optim.RowWiseAdagrad):
        torch.testing.assert_close(ebc.embedding_bags["item"].optimizer_state.double().reshape(-1), ref.rs["item"],
                                   rtol=1e-5, atol=1e-7)


def test_padded_view_matches_python_reference() -> None:
    gen = torch.Generator().manual_seed(8)
    ec = EmbeddingCollection([EmbeddingConfig(50, 6, "t", ["hist"])], seed=8)
    kjt = seq_batch({"hist": 50}, 7, 9, gen)
    jt = ec(kjt)["hist"]
    w = ec.embeddings["t"].weight.detach()
    for L in (0, 1, 4, 12):
        for keep in ("first", "last"):
            padded, mask = jt.to_padded(L, keep=keep)
            ref = torch.zeros(7, L, 6)
            ref_mask = torch.ones(7, L, dtype=torch.bool)
            start = 0
            for b, n in enumerate(kjt.lengths().tolist()):
                ids = kjt.values()[start:start + n].tolist()
                start += n
                kept = ids[:L] if keep == "first" else ids[max(0, n - L):]
                for j, i in enumerate(kept):
                    ref[b, j] = w[i]
                    ref_mask[b, j] = False
            assert torch.equal(padded, ref), (L, keep)
            assert torch.equal(mask, ref_mask), (L, keep)
    # ready for attention: the mask is key_padding_mask
    padded, mask = jt.to_padded(4)
    attn = nn.MultiheadAttention(6, 2, batch_first=True)
    y, _ = attn(padded, padded, padded, key_padding_mask=mask | (mask.all(1, keepdim=True) & False))
    assert y.shape == (7, 4, 6)


@pytest.fixture(scope="module")
def torchrec_mod():
    return pytest.importorskip("torchrec")


def test_matches_torchrec_embedding_collection(torchrec_mod) -> None:
    tcfgs = [torchrec_mod.EmbeddingConfig(num_embeddings=30, embedding_dim=8, name="t0", feature_names=["a", "b"]),
             torchrec_mod.EmbeddingConfig(num_embeddings=20, embedding_dim=8, name="t1", feature_names=["c"])]
    ref = torchrec_mod.EmbeddingCollection(tables=tcfgs, device=torch.device("cpu"))
    ec = EmbeddingCollection(tcfgs, seed=0)
    assert set(ec.state_dict()) == set(ref.state_dict())
    ec.load_state_dict(ref.state_dict())
    gen = torch.Generator().manual_seed(9)
    kjt = seq_batch({"a": 30, "b": 30, "c": 20}, 5, 6, gen, keys=["c", "a", "b"]).to_torchrec()
    want = ref(kjt)
    got = ec(kjt)
    assert set(got) == set(want)
    for k in want:
        assert type(got[k]).__name__ == "JaggedTensor" and type(got[k]).__module__.startswith("torchrec")
        torch.testing.assert_close(got[k].values(), want[k].values())
        assert torch.equal(got[k].lengths(), want[k].lengths())
        assert torch.equal(got[k].offsets(), want[k].offsets())


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_torchrec_batches_keep_their_dtypes(torchrec_mod, dtype: torch.dtype) -> None:
    """An int32 TorchRec batch gets int32 lengths and ``need_indices`` IDs back, as from TorchRec's
    collection (they came back int64)."""
    tcfgs = [torchrec_mod.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="t", feature_names=["a", "b"])]
    ref = torchrec_mod.EmbeddingCollection(tables=tcfgs, need_indices=True)
    ec = recgo.from_torchrec(ref)
    kjt = torchrec_mod.KeyedJaggedTensor(keys=["a", "b"], values=torch.tensor([1, 2, 3, 4], dtype=dtype),
                                         lengths=torch.tensor([1, 1, 2, 0], dtype=dtype))
    want, got = ref(kjt), ec(kjt)
    for k in want:
        for part in ("lengths", "offsets", "weights"):
            w, g = getattr(want[k], part)(), getattr(got[k], part)()
            assert g.dtype == w.dtype == dtype and torch.equal(g, w), (k, part)
        torch.testing.assert_close(got[k].values(), want[k].values(), rtol=0, atol=0)


def test_dynamic_table() -> None:
    ec = EmbeddingCollection([EmbeddingConfig(100, 4, "d", ["hist"], dynamic=recgo.DynamicConfig(min_count=1, seed=3))],
                             optimizer=optim.SGD(lr=0.5))
    kjt = KeyedJaggedTensor(["hist"], torch.tensor([10**12, 5, 10**12]), torch.tensor([2, 1]))
    out = ec(kjt)["hist"].values()
    assert torch.equal(out[0], out[2]) and out.abs().sum() > 0
    rows = recgo.dynamic.lookup(ec.ebc, "d", torch.tensor([10**12, 5]))
    assert (rows >= 0).all()
    w = ec.embeddings["d"].weight
    before = w[rows].detach().clone()
    out.sum().backward()
    torch.testing.assert_close(w[rows].detach(), before - 0.5 * torch.tensor([[2.0], [1.0]]).expand(2, 4))
    ec.eval()
    unseen = ec(KeyedJaggedTensor(["hist"], torch.tensor([77]), torch.tensor([1])))["hist"].values()
    assert torch.equal(unseen, torch.zeros(1, 4))
    assert any(k.endswith("dynamic_ids") for k in ec.state_dict())


def test_planner_remap_applies_to_sequences() -> None:
    """Sharing a PlannedEmbeddingBagCollection: sequence IDs are remapped hot-first like pooled ones, so
    the lookup equals the original table's."""
    from recgo import planner as P
    from test_planner import TABLES, _batches, small_topo

    prof = P.profile(_batches(), TABLES, sample_rate=1.0, steps=8)
    plan = P.plan(prof, small_topo(), "row_greedy")
    cfgs = [EmbeddingBagConfig(num_embeddings=t.rows, embedding_dim=t.dim, name=t.name, feature_names=[t.name])
            for t in TABLES]
    ref = EmbeddingBagCollection(cfgs, seed=0)
    planned = P.PlannedEmbeddingBagCollection.from_ebc(ref, plan, optimizer=optim.SGD(lr=0.5))
    ec = EmbeddingCollection([EmbeddingConfig(2000, 16, "b", ["hist_b"])], share=planned)
    gen = torch.Generator().manual_seed(2)
    kjt = seq_batch({"hist_b": 2000}, 6, 8, gen)
    want = nn.functional.embedding(kjt.values(), ref.embedding_bags["b"].weight.detach())
    got = ec(kjt)["hist_b"].values()
    torch.testing.assert_close(got, want)
    got.sum().backward()  # fused SGD on the planned rows: the original-order view moves by -lr·count
    count = torch.bincount(kjt.values(), minlength=2000).float().unsqueeze(1)
    torch.testing.assert_close(planned.original_weight("b"), ref.embedding_bags["b"].weight.detach() - 0.5 * count)


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("fused", [False, True])
def test_torch_compile_full_graph(fused: bool, fullgraph: bool, compile_failures: list[str]) -> None:
    """A sequence model (lookup, padded view with its mask, a dense layer) compiles as one graph with
    aot_eager, and training through it matches eager; also under torch.compile's default
    fullgraph=False, with no backend failure."""
    cfgs = [EmbeddingConfig(40, 8, "t", ["hist"])]
    opt = optim.SGD(lr=0.1) if fused else None
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    mods = [EmbeddingCollection(cfgs, optimizer=opt, seed=0) for _ in range(2)]

    def loss(ec: EmbeddingCollection, kjt: KeyedJaggedTensor) -> torch.Tensor:
        jt = ec(kjt)["hist"]
        x, mask = jt.to_padded(5)
        y = lin(x).masked_fill(mask.unsqueeze(-1), 0.0)
        return y.square().sum() + jt.values().sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=fullgraph, dynamic=True)
    gen = torch.Generator().manual_seed(5)
    for _ in range(3):
        kjt = seq_batch({"hist": 40}, 4, 6, gen)
        a, b = compiled(mods[0], kjt), loss(mods[1], kjt)
        torch.testing.assert_close(a, b)
        a.backward()
        b.backward()
    w_c, w_e = mods[0].embeddings["t"].weight, mods[1].embeddings["t"].weight
    torch.testing.assert_close(w_c, w_e)
    if not fused:
        torch.testing.assert_close(w_c.grad, w_e.grad)
    assert compile_failures == []


@pytest.mark.parametrize("fullgraph", [True, False])
def test_compile_multi_key(fullgraph: bool, compile_failures: list[str]) -> None:
    """Several keys: each key's row count is a data-dependent size in the traced graph (without
    fullgraph=True, torch.compile runs the lookup between graphs; no backend fails either way)."""
    ec = EmbeddingCollection(CFGS, seed=0)
    eager = EmbeddingCollection(CFGS, seed=0)

    def loss(m: EmbeddingCollection, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return sum(jt.values().square().sum() for jt in m(kjt).values())

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=fullgraph, dynamic=True)
    gen = torch.Generator().manual_seed(3)
    for _ in range(2):
        kjt = seq_batch(ROWS, 3, 4, gen)
        a, b = compiled(ec, kjt), loss(eager, kjt)
        torch.testing.assert_close(a, b)
        a.backward()
        b.backward()
    for c in CFGS:
        torch.testing.assert_close(ec.embeddings[c.name].weight.grad, eager.embeddings[c.name].weight.grad)
    assert compile_failures == []


def test_bad_input_is_named() -> None:
    ec = EmbeddingCollection(CFGS, seed=0)
    with pytest.raises(InvalidInputError, match="out of range"):
        ec(KeyedJaggedTensor(["a", "b", "c"], torch.tensor([99]), torch.tensor([1, 0, 0])))
    with pytest.raises(InvalidInputError, match="lacks features"):
        ec(KeyedJaggedTensor(["a"], torch.tensor([1]), torch.tensor([1])))
    # lengths that size the per-key outputs are checked before anything is allocated by them
    with pytest.raises(InvalidInputError, match=r"lengths\[1\] is -1, a negative length"):
        ec(KeyedJaggedTensor(["a", "b", "c"], torch.tensor([1, 2]), lengths=torch.tensor([3, -1, 0])))
    with pytest.raises(InvalidInputError, match=r"lengths\[2\] is 3999999999998, more than the batch's 2 values"):
        ec(KeyedJaggedTensor(["a", "b", "c"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1, 4 * 10**12 - 2])))
    # lengths whose sum wraps int64 were named by the wrapped sum ("add up to -18446744073709551613")
    with pytest.raises(InvalidInputError, match=rf"lengths\[0\] is {2**62}, more than the batch's 2 values"):
        ec(KeyedJaggedTensor(["a", "b", "c"], torch.tensor([1, 2]), lengths=torch.tensor([2**62] * 3)))
    with pytest.raises(InvalidInputError, match="add up to 3, the batch has 2 values"):
        ec(KeyedJaggedTensor(["a", "b", "c"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1, 1])))
    extra = ec(KeyedJaggedTensor(["z", "a", "b", "c"], torch.tensor([7, 1]), lengths=torch.tensor([1, 1, 0, 0])))
    assert list(extra) == ["a", "b", "c"]  # a key no table uses is ignored (as TorchRec and the EBC do)
    torch.testing.assert_close(extra["a"].values(), ec.embeddings.t0.weight[1:2].detach(), rtol=0, atol=0)
    with pytest.raises(InvalidInputError, match="at least one table"):
        EmbeddingCollection([])
    out = ec(KeyedJaggedTensor(["a", "b", "c"], torch.tensor([1]), torch.tensor([1, 0, 0])))["a"].values().sum()
    out.backward(retain_graph=True)
    out.backward()  # optimizer=None: a retained graph's second backward adds its gradient
    assert float(ec.embeddings.t0.weight.grad[1].sum()) == 2 * 8
    fused = EmbeddingCollection(CFGS, seed=0, optimizer=optim.SGD(lr=0.1))
    out = fused(KeyedJaggedTensor(["a", "b", "c"], torch.tensor([1]), lengths=torch.tensor([1, 0, 0])))["a"]
    out.values().sum().backward(retain_graph=True)
    with pytest.raises(InvalidInputError, match="no saved forward.*retain_graph"):
        out.values().sum().backward()


def test_checkpoint_roundtrip(tmp_path) -> None:
    ec = EmbeddingCollection(CFGS, optimizer=optim.Adam(lr=0.1), seed=0)
    kjt = seq_batch(ROWS, 3, 4, torch.Generator().manual_seed(1))
    sum(jt.values().sum() for jt in ec(kjt).values()).backward()
    torch.save(ec.state_dict(), tmp_path / "ec.pt")
    other = EmbeddingCollection(CFGS, optimizer=optim.Adam(lr=0.1), seed=9)
    other.load_state_dict(torch.load(tmp_path / "ec.pt", weights_only=True))
    for k, v in ec.state_dict().items():
        assert torch.equal(other.state_dict()[k], v), k
    assert sorted(ec.state_dict()) == ["embeddings.t0.optimizer_state", "embeddings.t0.optimizer_step",
                                       "embeddings.t0.weight", "embeddings.t1.optimizer_state",
                                       "embeddings.t1.optimizer_step", "embeddings.t1.weight"]


@pytest.mark.parametrize("optimizer", [None, "sgd"])
def test_a_feature_several_tables_look_up(optimizer: str | None) -> None:
    """A feature in two tables is looked up in each, under TorchRec's output names (``f@x``, ``f@y``),
    beside a feature of its own; rows and gradients equal plain torch's (float64), indices included.
    (It was refused.)"""
    from recgo.modules import optim

    cfgs = [EmbeddingConfig(5, 2, "x", ["f"]), EmbeddingConfig(6, 3, "y", ["f", "g"])]
    ec = EmbeddingCollection(cfgs, need_indices=True, seed=4,
                             optimizer=optim.SGD(lr=0.5) if optimizer else None)
    assert ec.embedding_names() == ["f@x", "f@y", "g"] and ec.feature_names() == ["f", "f", "g"]
    w = {t: ec.embeddings[t].weight.detach().double().clone().requires_grad_(True) for t in ("x", "y")}
    kjt = KeyedJaggedTensor(["g", "zz", "f"], torch.tensor([5, 0, 7, 1, 4, 4]), lengths=torch.tensor([1, 0, 1, 1, 0, 3]))
    out = ec(kjt)
    assert list(out) == ["f@x", "f@y", "g"]
    f_ids, g_ids = torch.tensor([1, 4, 4]), torch.tensor([5])
    want = {"f@x": w["x"][f_ids], "f@y": w["y"][f_ids], "g": w["y"][g_ids]}
    for k, jt in out.items():
        torch.testing.assert_close(jt.values().double(), want[k].detach(), rtol=0, atol=1e-7)
        assert torch.equal(jt.weights(), f_ids if k.startswith("f") else g_ids)
        assert torch.equal(jt.lengths(), torch.tensor([0, 3]) if k.startswith("f") else torch.tensor([1, 0]))
    loss = sum((jt.values() * (i + 1)).sum() for i, jt in enumerate(out.values()))
    loss.backward()
    sum((v * (i + 1)).sum() for i, v in enumerate(want.values())).backward()
    for t in ("x", "y"):
        grad = w[t].grad.float()
        if optimizer:  # one SGD step of lr 0.5
            torch.testing.assert_close(ec.embeddings[t].weight.detach(), (w[t].detach() - 0.5 * w[t].grad).float())
        else:
            torch.testing.assert_close(ec.embeddings[t].weight.grad.to_dense(), grad)


@pytest.mark.parametrize("opt", [optim.Adam(lr=0.1), optim.SGD(lr=0.1, weight_decay=0.3), None])
def test_a_table_whose_outputs_the_loss_leaves_out_takes_no_step(opt: Any) -> None:
    """torch's optimizers skip a parameter without a gradient, and TorchRec's in-backward ones a table
    none of whose outputs reach the loss; recgo stepped it with zeros (Adam's momentum moved its rows,
    weight decay shrank them, its step counter advanced) and, unfused, gave it a zero .grad."""
    cfgs = [EmbeddingConfig(4, 2, "t0", ["a"]), EmbeddingConfig(4, 2, "t1", ["c"])]
    kjt = KeyedJaggedTensor(["a", "c"], torch.tensor([0, 1, 2]), lengths=torch.tensor([1, 2]))
    ec = EmbeddingCollection(cfgs, optimizer=opt, seed=0)
    ec(kjt)["c"].values().sum().backward()
    before = {n: t.weight.detach().clone() for n, t in ec.embeddings.items()}
    if opt is None:
        for t in ec.embeddings.values():
            t.weight.grad = None
    ec(kjt)["a"].values().sum().backward()  # t1's output is left out
    if opt is None:
        assert ec.embeddings["t1"].weight.grad is None and ec.embeddings["t0"].weight.grad is not None
        return
    assert torch.equal(ec.embeddings["t1"].weight.detach(), before["t1"])
    assert ec.embeddings["t1"].optimizer_step.tolist() == [1] and ec.embeddings["t0"].optimizer_step.tolist() == [1]
    assert not torch.equal(ec.embeddings["t0"].weight.detach(), before["t0"])
