"""One merged optimizer step for a table that serves pooled and sequence features in one step
(``EmbeddingCollection(share=ebc)`` inside ``ec.merged_update()``), against a float64 torch reference
that sums both gradients and applies one update per step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from recgo import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from recgo.errors import InvalidInputError
from recgo.modules import optim
from test_embedding_optim import Reference
from test_sequence import seq_batch

OPTS = [optim.Adagrad(lr=0.2, eps=1e-8), optim.RowWiseAdagrad(lr=0.2, eps=1e-8), optim.Adam(lr=0.05),
        optim.SGD(lr=0.3)]


def _pair(opt: optim.FusedOptimizer) -> tuple[EmbeddingBagCollection, EmbeddingCollection]:
    ebc = EmbeddingBagCollection([EmbeddingBagConfig(20, 4, "item", ["item_id"])], optimizer=opt, seed=11)
    return ebc, EmbeddingCollection([EmbeddingConfig(20, 4, "item", ["hist"])], share=ebc)


@pytest.mark.parametrize("opt", OPTS, ids=lambda o: type(o).__name__)
@pytest.mark.parametrize("seq_first", [False, True])
def test_merged_update_matches_one_step_over_the_summed_gradient(opt: optim.FusedOptimizer, seq_first: bool) -> None:
    ebc, ec = _pair(opt)
    ref = Reference(opt, {"item": ebc.embedding_bags["item"].weight.detach().double()})
    gen = torch.Generator().manual_seed(12)
    for step in range(4):
        pooled = seq_batch({"item_id": 20}, 3, 3, gen, id_range=6)
        hist = seq_batch({"hist": 20}, 4, 6, gen, id_range=6)
        with ec.merged_update():
            out_p, out_s = ebc(pooled).values(), ec(hist)["hist"].values()
            g_p, g_s = torch.randn(out_p.shape, generator=gen), torch.randn(out_s.shape, generator=gen)
            if seq_first:  # two backward calls, in either order
                (out_s * g_s).sum().backward()
                (out_p * g_p).sum().backward()
            else:
                ((out_p * g_p).sum() + (out_s * g_s).sum()).backward()
            # nothing is updated before the scope ends
            torch.testing.assert_close(ebc.embedding_bags["item"].weight.detach().double(), ref.w["item"],
                                       rtol=1e-6, atol=1e-7)
        leaf = ref.w["item"].clone().requires_grad_(True)
        lengths = pooled.lengths()
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
        ref_p = nn.functional.embedding_bag(pooled.values(), leaf, offsets, mode="sum")
        ref_s = nn.functional.embedding(hist.values(), leaf)
        ((ref_p * g_p.double()).sum() + (ref_s * g_s.double()).sum()).backward()
        rows = torch.unique(torch.cat([pooled.values(), hist.values()]))
        ref.step += 1
        ref.update("item", rows, leaf.grad[rows])
        torch.testing.assert_close(ebc.embedding_bags["item"].weight.detach().double(), ref.w["item"],
                                   rtol=1e-5, atol=1e-6)
        assert int(ebc.embedding_bags["item"].optimizer_step) == step + 1


def test_merged_update_dropped_graph_and_errors() -> None:
    """A sequence graph dropped without backward contributes nothing and loses nothing: the pooled
    gradient is still applied when the scope ends; the step is applied even if the block raises; one
    scope at a time; a scope with no backward takes no step."""
    opt = optim.RowWiseAdagrad(lr=0.2, eps=1e-8)
    ebc, ec = _pair(opt)
    ref = Reference(opt, {"item": ebc.embedding_bags["item"].weight.detach().double()})
    pooled = KeyedJaggedTensor(["item_id"], torch.tensor([1, 2, 2]), lengths=torch.tensor([2, 1]))
    hist = KeyedJaggedTensor(["hist"], torch.tensor([2, 5]), lengths=torch.tensor([2]))
    with pytest.raises(RuntimeError, match="boom"):
        with ec.merged_update():
            ec(hist)  # graph dropped
            ebc(pooled).values().square().sum().backward()
            with pytest.raises(InvalidInputError, match="already open"):
                with ec.merged_update():
                    pass
            raise RuntimeError("boom")
    leaf = ref.w["item"].clone().requires_grad_(True)
    nn.functional.embedding_bag(pooled.values(), leaf, torch.tensor([0, 2]), mode="sum").square().sum().backward()
    rows = torch.tensor([1, 2])
    ref.step += 1
    ref.update("item", rows, leaf.grad[rows])
    torch.testing.assert_close(ebc.embedding_bags["item"].weight.detach().double(), ref.w["item"], rtol=1e-5, atol=1e-6)
    assert int(ebc.embedding_bags["item"].optimizer_step) == 1
    with ec.merged_update():
        with torch.no_grad():
            ec(hist)
    assert int(ebc.embedding_bags["item"].optimizer_step) == 1
