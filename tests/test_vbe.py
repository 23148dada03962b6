"""TorchRec's variable-batch KeyedJaggedTensors (VBE: ``stride_per_key_per_rank`` with a batch size
per feature, ``inverse_indices`` expanding deduplicated features to every sample) in recgo's
unsharded collections, against TorchRec's own modules on the same batch and weights, and against a
float64 reference computed on the explicitly expanded batch: the pooled collection's outputs,
gradients and fused optimizer steps must equal those of the expanded batch; the sequence
collection's outputs are each feature's own batch, as TorchRec's. Bad inverse indices raise
:class:`recgo.InvalidInputError` by name.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import recgo
from recgo import InvalidInputError
from recgo.modules import optim

tr = pytest.importorskip("torchrec")
from torch.distributed.optim import _apply_optimizer_in_backward as apply_optimizer_in_backward  # noqa: E402
from torchrec.modules.embedding_configs import (EmbeddingBagConfig, EmbeddingConfig,  # noqa: E402
                                                PoolingType)
from torchrec.modules.embedding_modules import (EmbeddingBagCollection as TEBC,  # noqa: E402
                                                EmbeddingCollection as TEC)
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TKJT, KeyedTensor as TKT  # noqa: E402

ROWS = 12
KEYS = ["f1", "f2", "f3", "extra"]  # "extra": a key no table reads (no inverse row needed for it)


Bags = dict[str, list[tuple[list[int], list[float]]]]  # per key its bags (ids, weights)


class Batch(NamedTuple):
    vbe: TKJT      # TorchRec's variable batch
    bags: Bags     # the explicitly expanded batch's bags
    batch: int
    own: Bags      # each key's own (deduplicated) bags


def _batch(gen: torch.Generator, batch: int, strides: list[int], ranks: int = 1, inverse: bool = True,
           uniform_inverse_keys: list[str] | None = None) -> Batch:
    """A VBE batch of ``KEYS`` with ``strides[i]`` samples of key i (split over ``ranks``), bags of 0-3
    IDs with weights, and inverse indices mapping ``batch`` samples to each key's samples."""
    values, weights, lengths, per_rank, inv = [], [], [], [], []
    own: Bags = {}
    for key, s in zip(KEYS, strides):
        bags = []
        for _ in range(s):
            n = int(torch.randint(0, 4, (1,), generator=gen))
            ids = torch.randint(0, ROWS, (n,), generator=gen).tolist()
            w = (torch.rand(n, generator=gen) + 0.5).tolist()
            bags.append((ids, w))
            values += ids
            weights += w
            lengths.append(n)
        own[key] = bags
        cut = sorted(torch.randint(0, s + 1, (ranks - 1,), generator=gen).tolist())
        per_rank.append([b - a for a, b in zip([0] + cut, cut + [s])])
        inv.append(torch.randint(0, max(s, 1), (batch,), generator=gen))  # (a key without samples: batch 0)
    table = torch.stack(inv)
    expanded = {k: [own[k][j] for j in row.tolist()] for k, row in zip(KEYS, table)}
    kw = {}
    if len(set(strides)) > 1 or ranks > 1:
        kw["stride_per_key_per_rank"] = per_rank
    if inverse:
        kw["inverse_indices"] = (KEYS[:3], table[:3])
    vbe = TKJT(keys=KEYS, values=torch.tensor(values, dtype=torch.int64), weights=torch.tensor(weights),
               lengths=torch.tensor(lengths, dtype=torch.int64), **kw)
    return Batch(vbe, expanded, batch, own)


def _parts(bags: Bags) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(values, weights, lengths) of ``bags``, key-major in ``KEYS`` order."""
    return (torch.tensor([i for k in KEYS for bag in bags[k] for i in bag[0]], dtype=torch.int64),
            torch.tensor([x for k in KEYS for bag in bags[k] for x in bag[1]]),
            torch.tensor([len(bag[0]) for k in KEYS for bag in bags[k]], dtype=torch.int64))


def _expanded_kjt(b: Batch) -> recgo.KeyedJaggedTensor:
    """The explicitly expanded batch: every key's ``b.batch`` samples."""
    values, weights, lengths = _parts(b.bags)
    return recgo.KeyedJaggedTensor(KEYS, values, weights, lengths=lengths, stride=b.batch)


def _merged(batches: list[Batch]) -> Batch:
    """The ranks' batches as one: each key's samples, rank after rank (the expanded ones and its own;
    ``vbe``: the own samples as a TorchRec variable batch without inverse indices)."""
    bags = {k: [bag for b in batches for bag in b.bags[k]] for k in KEYS}
    own = {k: [bag for b in batches for bag in b.own[k]] for k in KEYS}
    values, weights, lengths = _parts(own)
    vbe = TKJT(keys=KEYS, values=values, weights=weights, lengths=lengths,
               stride_per_key_per_rank=[[len(own[k])] for k in KEYS])
    return Batch(vbe, bags, sum(b.batch for b in batches), own)


def _tables(pooling: PoolingType) -> list[EmbeddingBagConfig]:
    # f2 is read by both tables: outputs f1, f2@t1, f2@t2, f3
    return [EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=ROWS, feature_names=["f1", "f2"],
                               pooling=pooling),
            EmbeddingBagConfig(name="t2", embedding_dim=3, num_embeddings=ROWS, feature_names=["f2", "f3"],
                               pooling=pooling)]


FEATURES = [("f1", "t1"), ("f2", "t1"), ("f2", "t2"), ("f3", "t2")]


def _reference64(b: Batch, weights: dict[str, torch.Tensor], mode: str, weighted: bool) -> torch.Tensor:
    """The expanded batch pooled in float64 (``weights``: float64 leaves, for their gradients)."""
    cols = []
    for key, table in FEATURES:
        bags = b.bags[key]
        ids = torch.tensor([i for bag in bags for i in bag[0]], dtype=torch.int64)
        w = torch.tensor([x for bag in bags for x in bag[1]], dtype=torch.float64)
        offsets = torch.tensor([0] + [len(bag[0]) for bag in bags[:-1]], dtype=torch.int64).cumsum(0)
        cols.append(F.embedding_bag(ids, weights[table], offsets, mode=mode,
                                    per_sample_weights=w if weighted else None))
    return torch.cat(cols, 1)


def _strides(gen: torch.Generator, batch: int) -> list[int]:
    return torch.randint(1, batch + 1, (len(KEYS),), generator=gen).tolist()


CASES = [(PoolingType.SUM, False), (PoolingType.SUM, True), (PoolingType.MEAN, False)]


# -- the pooled collection ---------------------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 9), ranks=st.integers(1, 3),
       case=st.sampled_from(CASES))
def test_pooled_output_matches_torchrecs_and_the_expanded_batch(seed: int, batch: int, ranks: int,
                                                                case: tuple[PoolingType, bool]) -> None:
    pooling, weighted = case
    gen = torch.Generator().manual_seed(seed)
    b = _batch(gen, batch, _strides(gen, batch), ranks)
    torch.manual_seed(seed)
    theirs = TEBC(tables=_tables(pooling), is_weighted=weighted)
    ours = recgo.from_torchrec(copy.deepcopy(theirs))
    want, got = theirs(b.vbe), ours(b.vbe)
    assert isinstance(got, TKT) and got.keys() == want.keys() == ["f1", "f2@t1", "f2@t2", "f3"]
    assert got.values().shape == (batch, 14)
    torch.testing.assert_close(got.values(), want.values(), rtol=1e-6, atol=1e-6)
    expanded = ours(_expanded_kjt(b))
    assert isinstance(expanded, recgo.KeyedTensor)
    assert torch.equal(got.values(), expanded.values())  # the same bags, pooled alike


@pytest.mark.parametrize("pooling,weighted", CASES)
@pytest.mark.parametrize("sparse_grad", [False, True])
def test_gradients_equal_the_expanded_batchs_in_float64(pooling: PoolingType, weighted: bool,
                                                        sparse_grad: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    b = _batch(gen, 7, [2, 7, 1, 3], ranks=2)
    ours = recgo.EmbeddingBagCollection(_tables(pooling), is_weighted=weighted, sparse_grad=sparse_grad, seed=5)
    w64 = {t: ours.embedding_bags[t].weight.detach().double().requires_grad_() for t in ("t1", "t2")}
    mode = "sum" if pooling == PoolingType.SUM else "mean"
    ref = _reference64(b, w64, mode, weighted)
    out = ours(b.vbe).values()
    torch.testing.assert_close(out.double(), ref.detach(), rtol=1e-6, atol=1e-6)
    r = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    (out * r.float()).sum().backward()
    (ref * r).sum().backward()
    for t in ("t1", "t2"):
        grad = ours.embedding_bags[t].weight.grad
        assert grad.is_sparse == sparse_grad
        torch.testing.assert_close(grad.to_dense().double(), w64[t].grad, rtol=1e-5, atol=1e-6)


def _adagrad64(w: dict[str, torch.Tensor], s: dict[str, torch.Tensor], g: dict[str, torch.Tensor], lr: float,
               eps: float) -> None:
    for t in w:
        s[t] += g[t] ** 2
        w[t] -= lr * g[t] / (s[t].sqrt() + eps)


@pytest.mark.parametrize("pooling,weighted", CASES)
def test_fused_adagrad_trains_as_the_expanded_batch_in_float64(pooling: PoolingType, weighted: bool) -> None:
    gen = torch.Generator().manual_seed(11)
    lr, eps = 0.3, 1e-10
    ours = recgo.EmbeddingBagCollection(_tables(pooling), is_weighted=weighted, seed=2,
                                        optimizer=optim.Adagrad(lr=lr, eps=eps))
    w = {t: ours.embedding_bags[t].weight.detach().double().clone() for t in ("t1", "t2")}
    s = {t: torch.zeros_like(v) for t, v in w.items()}
    mode = "sum" if pooling == PoolingType.SUM else "mean"
    for step in range(4):
        b = _batch(gen, 6, _strides(gen, 6), ranks=1 + step % 2)
        r = torch.randn(6, 14, generator=gen, dtype=torch.float64)
        (ours(b.vbe).values() * r.float()).sum().backward()
        w64 = {t: v.clone().requires_grad_() for t, v in w.items()}
        (_reference64(b, w64, mode, weighted) * r).sum().backward()
        _adagrad64(w, s, {t: w64[t].grad for t in w}, lr, eps)
        for t in w:
            torch.testing.assert_close(ours.embedding_bags[t].weight.detach().double(), w[t], rtol=1e-5, atol=1e-5)


def test_torchrecs_in_backward_optimizer_converted_trains_as_torchrecs_module() -> None:
    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    theirs = TEBC(tables=_tables(PoolingType.SUM), is_weighted=True)
    copied = copy.deepcopy(theirs)  # the same weights (deepcopy drops the in-backward marks: mark both)
    for m in (theirs, copied):
        apply_optimizer_in_backward(torch.optim.Adagrad, m.parameters(), {"lr": 0.2})
    ours = recgo.from_torchrec(copied)
    assert isinstance(ours.fused_optimizer, optim.Adagrad)
    start = theirs.embedding_bags["t1"].weight.detach().clone()
    for _ in range(3):
        b = _batch(gen, 5, _strides(gen, 5), ranks=2)
        r = torch.randn(5, 14, generator=gen)
        for m in (theirs, ours):
            (m(b.vbe).values() * r).sum().backward()
    assert not torch.equal(start, theirs.embedding_bags["t1"].weight)  # TorchRec's in-backward steps ran
    for t in ("t1", "t2"):
        torch.testing.assert_close(ours.embedding_bags[t].weight.detach(), theirs.embedding_bags[t].weight.detach(),
                                   rtol=1e-5, atol=1e-6)


def test_inverse_indices_with_one_batch_size_expand_too() -> None:
    """inverse_indices on a batch whose features share one batch size (no stride_per_key_per_rank)
    give the inverse indices' batch size, as TorchRec's collection does."""
    gen = torch.Generator().manual_seed(8)
    b = _batch(gen, 9, [4, 4, 4, 4])
    assert not b.vbe.variable_stride_per_key() and b.vbe.stride() == 4
    theirs = TEBC(tables=_tables(PoolingType.SUM))
    ours = recgo.from_torchrec(copy.deepcopy(theirs))
    got = ours(b.vbe).values()
    assert got.shape == (9, 14)
    torch.testing.assert_close(got, theirs(b.vbe).values())
    assert torch.equal(got, ours(_expanded_kjt(b)).values())


def test_meta_collection_and_lookup_stats_take_a_variable_batch() -> None:
    gen = torch.Generator().manual_seed(6)
    b = _batch(gen, 5, [2, 5, 1, 3])
    meta = recgo.EmbeddingBagCollection(_tables(PoolingType.SUM), device="meta")
    out = meta(b.vbe)
    assert out.values().is_meta and out.values().shape == (5, 14)
    ours = recgo.EmbeddingBagCollection(_tables(PoolingType.SUM))
    stats = ours.lookup_stats(b.vbe)
    own = {k: jt.values().tolist() for k, jt in b.vbe.to_dict().items()}  # each key's own batch's IDs
    ids = {"t1": own["f1"] + own["f2"], "t2": own["f2"] + own["f3"]}
    assert stats == {t: (len(set(v)), len(v)) for t, v in ids.items()}


# -- the sequence collection -------------------------------------------------------------------------


def _seq_tables() -> list[EmbeddingConfig]:
    return [EmbeddingConfig(name="t1", embedding_dim=4, num_embeddings=ROWS, feature_names=["f1", "f2"]),
            EmbeddingConfig(name="t2", embedding_dim=4, num_embeddings=ROWS, feature_names=["f2", "f3"])]


@pytest.mark.parametrize("inverse", [True, False])
@pytest.mark.parametrize("need_indices", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequence_outputs_and_gradients_match_torchrecs(inverse: bool, need_indices: bool, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    b = _batch(gen, 6, _strides(gen, 6), ranks=1 + seed % 2, inverse=inverse)
    torch.manual_seed(seed)
    theirs = TEC(tables=_seq_tables(), need_indices=need_indices)
    ours = recgo.from_torchrec(copy.deepcopy(theirs))
    want, got = theirs(b.vbe), ours(b.vbe)
    assert list(got) == list(want) == ["f1", "f2@t1", "f2@t2", "f3"]
    loss_t = loss_o = 0
    for name in want:
        key = name.split("@")[0]
        assert isinstance(got[name], tr.sparse.jagged_tensor.JaggedTensor)
        assert torch.equal(got[name].lengths(), want[name].lengths())
        assert got[name].lengths().numel() == b.vbe.stride_per_key()[KEYS.index(key)]
        torch.testing.assert_close(got[name].values(), want[name].values())
        if need_indices:
            assert torch.equal(got[name].weights(), want[name].weights())
        r = torch.randn(want[name].values().shape, generator=gen)
        loss_t = loss_t + (want[name].values() * r).sum()
        loss_o = loss_o + (got[name].values() * r).sum()
    loss_t.backward()
    loss_o.backward()
    for t in ("t1", "t2"):
        torch.testing.assert_close(ours.embeddings[t].weight.grad.to_dense(), theirs.embeddings[t].weight.grad,
                                   rtol=1e-5, atol=1e-6)


def test_sequence_meta_collection_gives_each_features_own_batch() -> None:
    gen = torch.Generator().manual_seed(9)
    b = _batch(gen, 5, [2, 5, 1, 3], inverse=False)
    out = recgo.EmbeddingCollection(_seq_tables(), device="meta")(b.vbe)
    assert [out[n].lengths().numel() for n in out] == [2, 5, 5, 1]
    assert all(out[n].values().is_meta for n in out)


# -- bad input ---------------------------------------------------------------------------------------


def _bad(inverse: object, strides: list[list[int]] | None = None) -> TKJT:
    strides = [[2], [3], [1], [1]] if strides is None else strides
    n = sum(s[0] for s in strides)
    return TKJT(keys=KEYS, values=torch.arange(n), lengths=torch.ones(n, dtype=torch.int64),
                stride_per_key_per_rank=strides, inverse_indices=inverse)  # type: ignore[arg-type]


GOOD = torch.tensor([[0, 1, 1], [0, 1, 2], [0, 0, 0]])


@pytest.mark.parametrize("inverse,match", [
    ((KEYS[:3], torch.tensor([[0, 1, 2], [0, 1, 2], [0, 0, 0]])), r"feature 'f1' has 2 samples but its inverse "
                                                                   r"index 2 is 2"),
    ((KEYS[:3], torch.tensor([[0, 1, 1], [0, -1, 2], [0, 0, 0]])), r"feature 'f2' has 3 samples but its inverse "
                                                                    r"index 1 is -1"),
    ((KEYS[:3], GOOD[0]), r"inverse_indices: shape \[3\] is not \[3, batch size\]"),
    ((KEYS[:3], GOOD[:2]), r"inverse_indices: shape \[2, 3\] is not \[3, batch size\]"),
    ((["f1", "f3", "zzz"], GOOD), r"inverse_indices: no row for the features \['f2'\]"),
    ((KEYS[:3], GOOD.float()), r"inverse_indices: expected an integer tensor, got torch.float32"),
    (GOOD, r"inverse_indices: expected \(keys, tensor"),
    (("f1", GOOD), r"inverse_indices: expected \(keys, tensor"),
])
def test_bad_inverse_indices_raise_by_name(inverse: object, match: str) -> None:
    ebc = recgo.EmbeddingBagCollection(_tables(PoolingType.SUM))
    with pytest.raises(InvalidInputError, match=match):
        ebc(_bad(inverse))


def test_out_of_range_inverse_indices_raise_before_a_fused_step() -> None:
    ebc = recgo.EmbeddingBagCollection(_tables(PoolingType.SUM), optimizer=optim.SGD(lr=1.0))
    before = {k: v.clone() for k, v in ebc.state_dict().items()}
    with pytest.raises(InvalidInputError, match="inverse index"):
        ebc(_bad((KEYS[:3], torch.tensor([[0, 1, 1], [0, 1, 3], [0, 0, 0]])))).values().sum().backward()
    assert all(torch.equal(before[k], v) for k, v in ebc.state_dict().items())


def test_a_variable_batch_without_inverse_indices_is_refused_by_the_pooled_collection_only() -> None:
    kjt = TKJT(keys=KEYS, values=torch.arange(7), lengths=torch.ones(7, dtype=torch.int64),
               stride_per_key_per_rank=[[2], [3], [1], [1]])
    with pytest.raises(RuntimeError):  # TorchRec's collection cannot concatenate the unequal batches either
        TEBC(tables=_tables(PoolingType.SUM))(kjt)
    with pytest.raises(InvalidInputError, match=r"variable batch size per feature \(\{'f1': 2, 'f2': 3, 'f3': 1\}\) "
                                                "without inverse_indices"):
        recgo.EmbeddingBagCollection(_tables(PoolingType.SUM))(kjt)
    out = recgo.EmbeddingCollection(_seq_tables())(kjt)
    assert [out[n].lengths().numel() for n in out] == [2, 3, 3, 1]


@pytest.mark.parametrize("empty_inverse", [False, True])
def test_without_inverse_indices_the_read_features_common_batch_size_is_the_outputs(empty_inverse: bool) -> None:
    """Only the key no table reads has another batch size (or the inverse indices are empty, which
    TorchRec's collection skips): the output has the read features' rows, as TorchRec's."""
    gen = torch.Generator().manual_seed(12)
    b = _batch(gen, 4, [3, 3, 3, 5], inverse=False)
    vbe = b.vbe
    if empty_inverse:
        vbe = TKJT(keys=KEYS, values=vbe.values(), weights=vbe.weights(), lengths=vbe.lengths(),
                   stride_per_key_per_rank=vbe.stride_per_key_per_rank(),
                   inverse_indices=(KEYS[:3], torch.empty(3, 0, dtype=torch.int64)))
    theirs = TEBC(tables=_tables(PoolingType.MEAN))
    ours = recgo.from_torchrec(copy.deepcopy(theirs))
    want, got = theirs(vbe).values(), ours(vbe).values()
    assert got.shape == want.shape == (3, 14)
    torch.testing.assert_close(got, want)


def test_a_batch_without_a_feature_the_collection_reads_is_named() -> None:
    kjt = TKJT(keys=["f1", "f2"], values=torch.arange(5), lengths=torch.ones(5, dtype=torch.int64),
               stride_per_key_per_rank=[[2], [3]], inverse_indices=(["f1", "f2"], torch.tensor([[0, 1], [2, 2]])))
    with pytest.raises(InvalidInputError, match=r"the batch lacks features \['f3'\]"):
        recgo.EmbeddingBagCollection(_tables(PoolingType.SUM))(kjt)


# -- the sharded collections (a world of 2 gloo ranks, each with its own batch sizes) ------------------


def _sharded_ranks(rank: int, world: int) -> dict:
    """Each rank pools (and looks up) its own variable batch; the unsharded collections, on the ranks'
    explicitly expanded batches (pooled) or own batches (sequence) one after the other, must give the
    rank's outputs and the same weights after fused Adagrad steps (the last with no samples on rank 1)."""
    from recgo.distributed import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection

    gen = torch.Generator().manual_seed(21)  # every rank draws every rank's batches alike
    ref = recgo.EmbeddingBagCollection(_tables(PoolingType.SUM), is_weighted=True, seed=3,
                                       optimizer=optim.Adagrad(lr=0.2))
    sh = ShardedEmbeddingBagCollection.from_ebc(ref, "hash", timeout=60, is_weighted=True)  # (not carried over)
    ref_ec = recgo.EmbeddingCollection(_seq_tables(), seed=4, optimizer=optim.Adagrad(lr=0.2))
    sh_ec = ShardedEmbeddingCollection.from_ec(ref_ec, "hash", timeout=60)
    for step in range(4):
        batches = []
        for r in range(world):
            n = 0 if step == 3 and r == 1 else 3 + 2 * r + step  # the last step: rank 1 has no samples
            batches.append(_batch(gen, n, _strides(gen, n) if n else [0] * len(KEYS), ranks=2))
        mine, glob = batches[rank], _merged(batches)
        start = sum(b.batch for b in batches[:rank])
        want = ref(_expanded_kjt(glob)).values()
        got = sh(mine.vbe).values()
        torch.testing.assert_close(got, want[start:start + mine.batch].detach(), rtol=1e-6, atol=1e-6)
        r_all = torch.randn(want.shape, generator=gen)
        (want * r_all).sum().backward()
        (got * r_all[start:start + mine.batch]).sum().backward()
        want_seq, got_seq = ref_ec(glob.vbe), sh_ec(mine.vbe)
        loss_ref = loss = 0
        for name in want_seq:
            key = name.split("@")[0]
            own = [len(b.own[key]) for b in batches]
            lo = sum(own[:rank])
            assert got_seq[name].lengths().numel() == own[rank]
            assert torch.equal(got_seq[name].lengths(), want_seq[name].lengths()[lo:lo + own[rank]])
            rows = int(want_seq[name].lengths()[:lo].sum())
            n = got_seq[name].values().shape[0]
            torch.testing.assert_close(got_seq[name].values(), want_seq[name].values()[rows:rows + n].detach())
            r_seq = torch.randn(want_seq[name].values().shape, generator=gen)
            loss_ref = loss_ref + (want_seq[name].values() * r_seq).sum()
            loss = loss + (got_seq[name].values() * r_seq[rows:rows + n]).sum()
        loss_ref.backward()
        loss.backward()
        for coll, sharded, tables in ((ref.embedding_bags, sh.embedding_bags, ("t1", "t2")),
                                      (ref_ec.embeddings, sh_ec.embeddings, ("t1", "t2"))):
            for t in tables:
                rows_of = (sh if sharded is sh.embedding_bags else sh_ec).local_ids(t)
                torch.testing.assert_close(sharded[t].weight.detach(), coll[t].weight.detach()[rows_of],
                                           rtol=1e-5, atol=1e-6)
    return {"steps": 4}


def test_sharded_collections_take_each_ranks_variable_batch(tmp_path) -> None:
    from spawned import ok, spawn

    res = spawn(_sharded_ranks, 2, tmp_path, wait=300)
    ok(res)
    assert [r["steps"] for r in res] == [4, 4]
