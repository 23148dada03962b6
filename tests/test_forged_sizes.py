"""Sizes read from input are checked before they are allocated: a forged dynamic-table checkpoint
(entries of 2^40 rows over one stored value, a stride-0 view a few KB on disk) hung ``load_state_dict``
for many minutes checking its optimizer state value by value, or asked torch's allocator for terabytes
(a raw RuntimeError); ``to_padded`` of a huge length, and a DCP checkpoint whose metadata declares a
huge entry, did the same; ``DataPipeline(batch_size=2**63)`` gave Go's JSON reader's wording."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

import recgo
from recgo.data import SyntheticField, SyntheticSource
from recgo.feature import Feature
from recgo.modules import optim

HUGE = 2**40


def _dynamic() -> recgo.EmbeddingBagCollection:
    m = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(
        100, 4, "t", ["f"], dynamic=recgo.DynamicConfig(min_count=2))], optimizer=optim.Adagrad(lr=0.1), seed=0)
    kjt = recgo.KeyedJaggedTensor(["f"], torch.arange(50), lengths=torch.ones(50, dtype=torch.int64))
    m(kjt)
    m(kjt)
    return m


@pytest.mark.parametrize("entry, forged, match", [
    ("optimizer_state", torch.zeros(1).expand(HUGE, 4), r"has shape \(1099511627776, 4\); this dynamic table holds at most"),
    ("weight", torch.zeros(1).expand(HUGE, 4), r"has shape \(1099511627776, 4\); this dynamic table holds at most"),
    ("dynamic_sketch", torch.zeros(1, dtype=torch.uint8).expand(HUGE), "dynamic_sketch has 1099511627776 counters"),
    ("dynamic_ids", torch.zeros(1, dtype=torch.int64).expand(HUGE), "owns more than one row"),
])
def test_a_forged_dynamic_entry_is_refused_at_once(entry: str, forged: torch.Tensor, match: str) -> None:
    m = _dynamic()
    state = {k: v.clone() for k, v in m.state_dict().items()}
    before = {k: v.clone() for k, v in state.items()}
    state[f"embedding_bags.t.{entry}"] = forged
    start = time.perf_counter()
    with pytest.raises(recgo.InvalidInputError, match=match):
        m.load_state_dict(state)
    assert time.perf_counter() - start < 30  # (the optimizer state's check ran for many minutes)
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())


def test_to_padded_past_memory_is_a_capacity_error() -> None:
    jt = recgo.JaggedTensor(torch.arange(6.0).view(3, 2), lengths=torch.tensor([1, 2]))
    assert jt.to_padded(3)[0].shape == (2, 3, 2)
    for length in (HUGE, 2**63 - 1):
        with pytest.raises(recgo.CapacityError, match=f"2 samples × length {length} take"):
            jt.to_padded(length)


@pytest.mark.parametrize("kw", [{"batch_size": 2**63}, {"depth": 2**63}, {"threads": 2**64}, {"world_size": 2**63}])
def test_pipeline_integers_past_int64_are_named(kw: dict[str, Any]) -> None:
    source = SyntheticSource(100, [SyntheticField("u", 30, 1.1)])
    args = {"batch_size": 10, **kw}
    with pytest.raises(recgo.InvalidInputError, match=f"{next(iter(kw))} must be an integer within int64"):
        recgo.DataPipeline(source, [Feature("u").mod(5)], **args)


def test_a_dcp_entry_past_memory_is_a_capacity_error(tmp_path: Any) -> None:
    import pickle

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    m = _dynamic()
    dcp.save({"model": m.state_dict()}, checkpoint_id=tmp_path, no_dist=True)
    meta = pickle.loads((tmp_path / ".metadata").read_bytes())
    meta.state_dict_metadata["model.embedding_bags.t.dynamic_ids"].size = torch.Size([HUGE])
    (tmp_path / ".metadata").write_bytes(pickle.dumps(meta))
    state = {"model": _dynamic().state_dict()}
    with pytest.raises(CheckpointException, match="its metadata declares \\(1099511627776,\\)"):
        dcp.load(state, checkpoint_id=tmp_path, planner=recgo.dynamic.DCPLoadPlanner(), no_dist=True)
