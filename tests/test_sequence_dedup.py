"""The dedup switch (``dedup=False``, for RecIS Fig. 7's "without ID dedup" ablation): every lookup is
resolved on its own and merged by row for backward, so outputs, gradients, weights and optimizer state
equal those of the deduplicating path, for both collections and every fused optimizer."""

from __future__ import annotations

import pytest
import torch

import recgo
from recgo import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from recgo.modules import optim
from test_embedding_optim import OPTIMIZERS
from test_sequence import CFGS, ROWS, seq_batch

OPT_IDS = [f"{type(o).__name__}-wd{o.weight_decay}" for o in OPTIMIZERS]


def _tables(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer (weights, optimizer state, step counters)."""
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=OPT_IDS)
def test_sequence_dedup_off_equals_on(opt: optim.FusedOptimizer) -> None:
    """Fused, several duplicate-heavy steps: identical outputs, weights and optimizer state."""
    on = EmbeddingCollection(CFGS, optimizer=opt, seed=1)
    off = EmbeddingCollection(CFGS, optimizer=opt, seed=1, dedup=False)
    gen = torch.Generator().manual_seed(2)
    for _ in range(4):
        kjt = seq_batch(ROWS, 6, 7, gen, id_range=5)
        grads = None
        for m in (on, off):
            out = m(kjt)
            if grads is None:
                grads = {k: torch.randn(jt.values().shape, generator=gen) for k, jt in out.items()}
                ref_out = {k: jt.values().detach().clone() for k, jt in out.items()}
            else:
                for k, jt in out.items():
                    assert torch.equal(jt.values(), ref_out[k])
            sum((jt.values() * grads[k]).sum() for k, jt in out.items()).backward()
    a, b = _tables(on), _tables(off)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert on.lookup_stats(kjt) == off.lookup_stats(kjt)


@pytest.mark.parametrize("sparse", [False, True])
def test_sequence_dedup_off_gradients(sparse: bool) -> None:
    """optimizer=None: the torch-optimizer gradients are identical."""
    on = EmbeddingCollection(CFGS, seed=3, sparse_grad=sparse)
    off = EmbeddingCollection(CFGS, seed=3, sparse_grad=sparse, dedup=False)
    gen = torch.Generator().manual_seed(4)
    kjt = seq_batch(ROWS, 5, 6, gen, id_range=4)
    for m in (on, off):
        sum(jt.values().square().sum() for jt in m(kjt).values()).backward()
    for c in CFGS:
        g1, g2 = on.embeddings[c.name].weight.grad, off.embeddings[c.name].weight.grad
        if sparse:
            g1, g2 = g1.to_dense(), g2.to_dense()
        assert torch.equal(g1, g2)
        assert g1.abs().sum() > 0


@pytest.mark.parametrize("opt", [OPTIMIZERS[2], OPTIMIZERS[4]], ids=[OPT_IDS[2], OPT_IDS[4]])
@pytest.mark.parametrize("weighted", [False, True])
def test_pooled_dedup_off_equals_on(opt: optim.FusedOptimizer, weighted: bool) -> None:
    """EmbeddingBagCollection(dedup=False): sum and mean pooling, per-ID weights, a table read by two
    features: identical outputs, weights and state over several steps."""
    cfgs = [EmbeddingBagConfig(12, 8, "t0", ["a", "b"]), EmbeddingBagConfig(9, 4, "t1", ["c"], pooling="mean")]
    on = EmbeddingBagCollection(cfgs, optimizer=opt, seed=5, is_weighted=weighted)
    off = EmbeddingBagCollection(cfgs, optimizer=opt, seed=5, is_weighted=weighted, dedup=False)
    gen = torch.Generator().manual_seed(6)
    for _ in range(3):
        kjt = seq_batch({"a": 12, "b": 12, "c": 9}, 8, 5, gen, id_range=4)
        if weighted:
            kjt = KeyedJaggedTensor(kjt.keys(), kjt.values(), torch.rand(kjt.values().shape, generator=gen),
                                    lengths=kjt.lengths())
        outs = [m(kjt).values() for m in (on, off)]
        assert torch.equal(outs[0], outs[1])
        g = torch.randn(outs[0].shape, generator=gen)
        for o in outs:
            (o * g).sum().backward()
    a, b = _tables(on), _tables(off)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_dedup_off_dynamic_table() -> None:
    """A dynamic-ID table resolves every occurrence: the same rows and the same training result while
    the table has room (no eviction); its sighting counts count every occurrence, not each batch's
    distinct IDs once."""
    def make(dedup: bool) -> EmbeddingCollection:
        cfg = EmbeddingConfig(64, 4, "d", ["hist"], dynamic=recgo.DynamicConfig(min_count=1, seed=3))
        return EmbeddingCollection([cfg], optimizer=optim.RowWiseAdagrad(lr=0.5), dedup=dedup)
    on, off = make(True), make(False)
    gen = torch.Generator().manual_seed(7)
    lookups = 0
    for _ in range(3):
        kjt = KeyedJaggedTensor(["hist"], torch.randint(0, 6, (20,), generator=gen) * 10**9 + 1,
                                lengths=torch.tensor([7, 0, 13]))
        lookups += kjt.values().numel()
        outs = [m(kjt)["hist"].values() for m in (on, off)]
        assert torch.equal(outs[0], outs[1])
        for o in outs:
            o.square().sum().backward()
    a, b = _tables(on), _tables(off)
    counts = "embeddings.d.dynamic_counts"
    assert int(b.pop(counts).sum()) == lookups and int(a.pop(counts).sum()) < lookups
    for k in a:
        assert torch.equal(a[k], b[k]), k
