"""All-or-nothing training calls: a forward or backward that raises leaves the collection exactly as it
was (every state_dict entry bit for bit, and the dynamic tables' stats), and a backward whose forward
predates a load writes nothing into the rows the load replaced."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import recgo
from recgo import (EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig,
                   KeyedJaggedTensor)
from recgo.errors import CapacityError, InvalidInputError
from recgo.modules import optim


def state(m: Any) -> dict[str, Any]:
    """Every state_dict entry's bytes, and each dynamic table's stats."""
    out: dict[str, Any] = {k: (v.dtype, tuple(v.shape), v.detach().contiguous().numpy().tobytes())
                           for k, v in m.state_dict().items()}
    for c in m.embedding_configs():
        if c.dynamic is not None:
            out["stats:" + c.name] = recgo.dynamic.stats(m, c.name)
    return out


def collection(sequence: bool, second_rows: int, second_dynamic: bool) -> Any:
    """A dynamic table "d" (feature fd) beside table "x" (feature fx), with fused Adam, trained one step."""
    Cfg, Coll = (EmbeddingConfig, EmbeddingCollection) if sequence else (EmbeddingBagConfig, EmbeddingBagCollection)
    dyn = recgo.DynamicConfig(seed=1)
    m = Coll([Cfg(8, 2, "d", ["fd"], dynamic=dyn),
              Cfg(second_rows, 2, "x", ["fx"], dynamic=recgo.DynamicConfig(seed=2) if second_dynamic else None)],
             optimizer=optim.Adam(lr=0.1), seed=0)
    out = m(KeyedJaggedTensor(["fd", "fx"], torch.tensor([5, 6, 0, 1]), lengths=torch.tensor([1, 1, 1, 1])))
    loss(out, sequence).backward()
    return m


def loss(out: Any, sequence: bool) -> torch.Tensor:
    return sum(v.values().sum() for v in out.values()) if sequence else out.values().sum()


@pytest.mark.parametrize("sequence", [False, True], ids=["pooled", "sequence"])
@pytest.mark.parametrize("bad_id", [4, 99, -1])
def test_out_of_range_id_in_a_later_table_admits_nothing(sequence: bool, bad_id: int) -> None:
    """The dynamic table's new IDs 100, 101 were admitted (rows, clock, counts) before the fixed table's
    out-of-range ID raised."""
    m = collection(sequence, 4, False)
    before = state(m)
    bad = KeyedJaggedTensor(["fd", "fx"], torch.tensor([100, 101, 1, bad_id]), lengths=torch.tensor([1, 1, 1, 1]))
    with pytest.raises(InvalidInputError, match=rf'table "x": id {bad_id} out of range \[0, 4\)'):
        m(bad)
    assert state(m) == before


@pytest.mark.parametrize("sequence", [False, True], ids=["pooled", "sequence"])
def test_second_dynamic_table_out_of_rows_admits_nothing(sequence: bool) -> None:
    """CapacityError says "nothing was changed": it was true of its table only, not of the first one."""
    m = collection(sequence, 2, True)
    before = state(m)
    bad = KeyedJaggedTensor(["fd", "fx"], torch.tensor([100, 101, 7, 8, 9]), lengths=torch.tensor([1, 1, 2, 1]))
    with pytest.raises(CapacityError, match='dynamic table "x"'):
        m(bad)
    assert state(m) == before
    m(KeyedJaggedTensor(["fd", "fx"], torch.tensor([100, 101, 7, 8]), lengths=torch.tensor([1, 1, 1, 1])))


@pytest.mark.parametrize("sequence", [False, True], ids=["pooled", "sequence"])
def test_backward_after_a_load_leaves_the_loaded_rows(sequence: bool) -> None:
    """A forward, then load_state_dict of another run's checkpoint, then the forward's backward: the
    loaded IDs' rows (the rows the forward's IDs held) kept the loaded values; the update went into
    them, as the load restored the eviction count backward rechecks rows by."""
    m, other = collection(sequence, 4, False), collection(sequence, 4, False)
    other(KeyedJaggedTensor(["fd", "fx"], torch.tensor([50, 51, 2, 3]), lengths=torch.tensor([1, 1, 1, 1])))
    checkpoint = {k: v.clone() for k, v in other.state_dict().items()}
    out = m(KeyedJaggedTensor(["fd", "fx"], torch.tensor([5, 6, 2, 3]), lengths=torch.tensor([1, 1, 1, 1])))
    total = loss(out, sequence)
    prefix = "embeddings" if sequence else "embedding_bags"
    m.load_state_dict(checkpoint)
    total.backward()
    got = m.state_dict()
    for k in ("weight", "optimizer_state"):
        assert torch.equal(got[f"{prefix}.d.{k}"], checkpoint[f"{prefix}.d.{k}"]), k
    assert not torch.equal(got[f"{prefix}.x.weight"], checkpoint[f"{prefix}.x.weight"])  # a fixed table's rows are its IDs'
