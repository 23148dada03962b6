"""JaggedTensor against a straightforward Python padding reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from recgo.errors import InvalidInputError
from recgo.jagged import JaggedTensor


def _reference(rows: list[list[list[float]]], length: int, keep: str, pad: float, dim: int):
    out = torch.full((len(rows), length, dim), pad, dtype=torch.float64)
    mask = torch.ones(len(rows), length, dtype=torch.bool)
    for b, r in enumerate(rows):
        kept = r[:length] if keep == "first" else r[max(0, len(r) - length):]
        for j, v in enumerate(kept):
            out[b, j] = torch.tensor(v, dtype=torch.float64)
            mask[b, j] = False
    return out, mask


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 6), min_size=0, max_size=6), length=st.integers(0, 7),
       keep=st.sampled_from(["first", "last"]), dim=st.integers(1, 3), pad=st.sampled_from([0.0, -1.5]))
def test_padded_matches_reference(lengths: list[int], length: int, keep: str, dim: int, pad: float) -> None:
    gen = torch.Generator().manual_seed(sum(lengths) + 7 * length)
    n = sum(lengths)
    values = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    rows, start = [], 0
    for k in lengths:
        rows.append(values[start:start + k].tolist())
        start += k
    jt = JaggedTensor(values, lengths=torch.tensor(lengths, dtype=torch.int64))
    got, mask = jt.to_padded(length, keep=keep, padding_value=pad)
    want, want_mask = _reference(rows, length, keep, pad, dim)
    assert torch.equal(mask, want_mask)
    assert torch.equal(got, want)


def test_padded_is_differentiable() -> None:
    values = torch.arange(10, dtype=torch.float64).reshape(5, 2).requires_grad_()
    jt = JaggedTensor(values, lengths=torch.tensor([3, 0, 2]))
    out, _ = jt.to_padded(2, keep="last")
    out.sum().backward()
    assert values.grad.tolist() == [[0, 0], [1, 1], [1, 1], [1, 1], [1, 1]]


def test_torchrec_shapes_and_accessors() -> None:
    jt = JaggedTensor(torch.tensor([1.0, 2, 3, 4, 5, 6, 7, 8]), offsets=torch.tensor([0, 2, 2, 3, 4, 5, 8]))
    assert jt.lengths().tolist() == [2, 0, 1, 1, 1, 3]
    assert [t.tolist() for t in jt.to_dense()] == [[1, 2], [], [3], [4], [5], [6, 7, 8]]
    assert jt.to_padded_dense(2, 10.0).tolist() == [[1, 2], [10, 10], [3, 10], [4, 10], [5, 10], [6, 7]]
    back = JaggedTensor.from_dense(jt.to_dense())
    assert torch.equal(back.values(), jt.values()) and torch.equal(back.lengths(), jt.lengths())
    dense = JaggedTensor.from_dense_lengths(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([1, 3]))
    assert dense.values().tolist() == [1, 4, 5, 6]


@pytest.mark.parametrize("kwargs, match", [
    ({}, "lengths or offsets"),
    ({"lengths": torch.tensor([1, 1])}, "sum to 2"),
    ({"offsets": torch.tensor([0, 3, 1])}, "monotonically"),
    ({"lengths": torch.tensor([1.0, 2.0])}, "int64"),
])
def test_bad_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        JaggedTensor(torch.zeros(3), **kwargs)
