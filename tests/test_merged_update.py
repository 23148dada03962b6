"""A pooled collection called twice before one backward (two towers over one table) steps each call
under a fused optimizer, as FBGEMM's fused kernels and DMP do; inside ``merged_update()`` it takes one
step on the summed gradient, as TorchRec's unfused collection under ``apply_optimizer_in_backward``
does (checked against float64 torch)."""

from __future__ import annotations

import pytest
import torch

import recgo
from recgo.modules import optim

K1 = recgo.KeyedJaggedTensor(["f1"], torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 1]))
K2 = recgo.KeyedJaggedTensor(["f1"], torch.tensor([1, 1, 4]), lengths=torch.tensor([1, 2]))


def _pool(w: torch.Tensor, values: list[int], lengths: list[int]) -> torch.Tensor:
    out, at = [], 0
    for n in lengths:
        out.append(w[values[at:at + n]].sum(0))
        at += n
    return torch.stack(out)


def _loss(out1: torch.Tensor, out2: torch.Tensor) -> torch.Tensor:
    return (out1 ** 2).sum() + (out2 * 3).sum()


@pytest.mark.parametrize("fused", [optim.Adagrad(lr=0.5, eps=1e-8), optim.Adam(lr=0.1)])
def test_two_calls_take_one_step_inside_merged_update(fused: optim.FusedOptimizer) -> None:
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t1", ["f1"])], optimizer=fused, seed=3)
    w0 = ebc.embedding_bags["t1"].weight.detach().clone()
    ref = w0.double().requires_grad_()
    torch_opt = (torch.optim.Adagrad([ref], lr=0.5, eps=1e-8) if isinstance(fused, optim.Adagrad)
                 else torch.optim.Adam([ref], lr=0.1))
    _loss(_pool(ref, [1, 2, 3], [2, 1]), _pool(ref, [1, 1, 4], [1, 2])).backward()
    torch_opt.step()  # one step on the summed gradient
    with ebc.merged_update():
        _loss(ebc(K1).values(), ebc(K2).values()).backward()
    torch.testing.assert_close(ebc.embedding_bags["t1"].weight.detach().double(), ref.detach(), rtol=0, atol=2e-6)
    assert ebc.state_dict()["embedding_bags.t1.optimizer_step"].item() == 1
    # outside the scope each call's backward steps: row 1, in both calls, moves twice
    twice = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t1", ["f1"])], optimizer=fused, seed=3)
    _loss(twice(K1).values(), twice(K2).values()).backward()
    assert (twice.embedding_bags["t1"].weight.detach().double() - ref.detach()).abs().max() > 1e-3


def test_merged_update_on_meta_is_refused() -> None:
    with torch.device("meta"):
        ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 4, "t1", ["f1"])], optimizer=optim.SGD(lr=0.1))
    with pytest.raises(recgo.InvalidInputError, match="meta device"), ebc.merged_update():
        pass


def _one_row(fused: optim.FusedOptimizer) -> recgo.EmbeddingBagCollection:
    return recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(
        1, 2, "t", ["f"], dynamic=recgo.DynamicConfig(init_min=-0.5, init_max=0.5, seed=0))], optimizer=fused)


def _bag(ids: list[int]) -> recgo.KeyedJaggedTensor:
    return recgo.KeyedJaggedTensor(["f"], torch.tensor(ids), lengths=torch.tensor([len(ids)]))


@pytest.mark.parametrize("fused", [optim.SGD(lr=1.0), optim.Adagrad(lr=1.0, eps=1e-8)])
def test_a_row_evicted_inside_the_scope_takes_only_its_new_ids_gradient(fused: optim.FusedOptimizer) -> None:
    """A dynamic table evicts inside the scope: an evicted ID's summed gradient went to the row's new ID
    at the scope's end (SGD: -101 instead of -1; Adagrad's state 10201 instead of 1). Found by an
    adversarial pass."""
    from test_dynamic import init_vector

    for ids, grads, last in (([1, 2], [100.0, 1.0], 2), ([1, 2, 1], [100.0, 10.0, 1.0], 1)):
        ebc = _one_row(fused)
        with ebc.merged_update():
            for i, g in zip(ids, grads):  # each forward evicts the row's ID before (one row)
                (ebc(_bag([i])).values() * g).sum().backward()
        assert recgo.dynamic.lookup(ebc, "t", torch.tensor([last])).tolist() == [0]
        want = init_vector(last, 0, -0.5, 0.5, 2) - 1.0 / (1.0 + (1e-8 if isinstance(fused, optim.Adagrad) else 0.0))
        torch.testing.assert_close(ebc.embedding_bags["t"].weight.detach()[0], want, rtol=0, atol=1e-6)
        if isinstance(fused, optim.Adagrad):
            assert ebc.embedding_bags["t"].optimizer_state[0].tolist() == [1.0, 1.0]
