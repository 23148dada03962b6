"""``sparse_grad=True``: the weight's COO gradient is truly coalesced (sorted distinct rows), so torch's
sparse arithmetic on it is right — two calls of a collection in one backward sum to a gradient without
duplicate rows, and a sparse optimizer that squares the values (Adagrad) matches the dense one."""

from __future__ import annotations

import pytest
import torch

import recgo

K = recgo.KeyedJaggedTensor


def _collection(kind: str) -> torch.nn.Module:
    if kind == "ebc":
        return recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(10, 2, "t", ["a"])], sparse_grad=True, seed=0)
    return recgo.EmbeddingCollection([recgo.EmbeddingConfig(10, 2, "t", ["a"])], sparse_grad=True, seed=0)


def _out(m: torch.nn.Module, kjt: recgo.KeyedJaggedTensor) -> torch.Tensor:
    out = m(kjt)
    return out.values() if isinstance(out, recgo.KeyedTensor) else out["a"].values()


def _weight(m: torch.nn.Module) -> torch.Tensor:
    bags = m.embedding_bags if hasattr(m, "embedding_bags") else m.embeddings
    return bags["t"].weight


BATCHES = [K(["a"], torch.tensor([5, 1, 3]), lengths=torch.tensor([3])),
           K(["a"], torch.tensor([3, 5, 0]), lengths=torch.tensor([3]))]
SCALES = [torch.tensor([1.0, 2.0]), torch.tensor([-0.5, 3.0])]


def _loss(m: torch.nn.Module) -> torch.Tensor:
    return sum((_out(m, b) * s).sum() for b, s in zip(BATCHES, SCALES))


@pytest.mark.parametrize("kind", ["ebc", "ec"])
def test_one_call_gives_sorted_coalesced_rows(kind: str) -> None:
    m = _collection(kind)
    g = torch.autograd.grad(_out(m, BATCHES[0]).sum(), _weight(m))[0]
    assert g.is_coalesced()
    assert g._indices()[0].tolist() == [1, 3, 5]
    with torch.sparse.check_sparse_tensor_invariants():  # torch's own check of the flag
        torch.sparse_coo_tensor(g._indices(), g._values(), g.shape, is_coalesced=True)


@pytest.mark.parametrize("kind", ["ebc", "ec"])
def test_two_calls_in_one_backward_sum_without_duplicate_rows(kind: str) -> None:
    m = _collection(kind)
    w = _weight(m)
    g = torch.autograd.grad(_loss(m), w)[0]
    dense = torch.autograd.grad(_loss(m), w)[0].to_dense()  # the same sum taken again, densely compared
    ref_w = w.detach().clone().requires_grad_(True)
    ref = torch.autograd.grad(sum((torch.nn.functional.embedding(b.values(), ref_w).sum(0, keepdim=True)
                                   if kind == "ebc" else torch.nn.functional.embedding(b.values(), ref_w)) * s
                                  for b, s in zip(BATCHES, SCALES)).sum(), ref_w)[0]
    torch.testing.assert_close(dense, ref)
    co = g.coalesce()
    assert co._indices()[0].tolist() == [0, 1, 3, 5]
    torch.testing.assert_close(g.pow(2).to_dense(), ref.pow(2))  # element-wise ops see one row each


@pytest.mark.parametrize("kind", ["ebc", "ec"])
def test_sparse_adagrad_over_two_calls_matches_dense_adagrad(kind: str) -> None:
    m = _collection(kind)
    w = _weight(m)
    ref_w = torch.nn.Parameter(w.detach().clone())
    opt = torch.optim.Adagrad([w], lr=0.5)
    ref_opt = torch.optim.Adagrad([ref_w], lr=0.5)
    for _ in range(3):
        opt.zero_grad()
        _loss(m).backward()
        opt.step()
        ref_opt.zero_grad()
        sum(((torch.nn.functional.embedding(b.values(), ref_w).sum(0, keepdim=True) if kind == "ebc"
              else torch.nn.functional.embedding(b.values(), ref_w)) * s).sum()
            for b, s in zip(BATCHES, SCALES)).backward()
        ref_opt.step()
    torch.testing.assert_close(w.detach(), ref_w.detach())
