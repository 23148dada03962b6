"""Paths handed to the engine, files it writes, and objects that cannot be copied (found by an
adversarial pass over the C ABI boundary): a NUL byte cut a path short and another file was read or
written; ``write_criteo`` emptied the file it was to replace before it found the source could not be
written; ``copy.copy`` of a pipeline shared its stream; a dynamic table's clock wrapped to negative
steps after a step near 2^63 was imported."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import recgo
from recgo import dynamic
from recgo.data import SyntheticField, SyntheticSource
from recgo.errors import InvalidInputError
from recgo.feature import Feature
from recgo.planner import Plan, Remap

CRITEO_FIELDS = [SyntheticField(f"I{i}", 50) for i in range(1, 14)] + \
    [SyntheticField(f"C{i}", 1000) for i in range(1, 27)]


def _dynamic_collection() -> recgo.EmbeddingBagCollection:
    return recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(
        name="t", embedding_dim=4, num_embeddings=16, feature_names=["f"], dynamic=dynamic.DynamicConfig())],
        optimizer=recgo.modules.optim.SGD(lr=0.1))


def _criteo(path: Path) -> None:
    SyntheticSource(20, CRITEO_FIELDS, dense=13, seed=1).write_criteo(path, 20)


@pytest.mark.parametrize("name, call", [
    ("dynamic.save", lambda p: dynamic.save(_dynamic_collection(), "t", p)),
    ("dynamic.load", lambda p: dynamic.load(_dynamic_collection(), "t", p)),
    ("write_criteo", _criteo),
    ("Plan.load", Plan.load),
    ("Remap.load", Remap.load),
])
def test_a_path_holding_a_nul_byte_is_refused(tmp_path: Path, name: str, call: Callable[[Any], Any]) -> None:
    cut = tmp_path / "f.bin"
    if name.endswith("load"):
        cut.write_bytes(b"not read")
    before = sorted(tmp_path.iterdir())
    with pytest.raises(InvalidInputError, match="holds a NUL byte"):
        call(str(cut) + "\0.evil")
    assert sorted(tmp_path.iterdir()) == before, name


def test_write_criteo_replaces_a_file_only_once_written(tmp_path: Path) -> None:
    path = tmp_path / "day.tsv"
    path.write_text("important data\n")
    with pytest.raises(InvalidInputError, match='no int64 field "I1"'):
        SyntheticSource(10, [SyntheticField("a", 100)]).write_criteo(path, 5)
    assert path.read_text() == "important data\n"
    _criteo(path)
    lines = path.read_text().splitlines()
    assert len(lines) == 20 and all(len(line.split("\t")) == 40 for line in lines)
    assert [p.name for p in tmp_path.iterdir()] == ["day.tsv"]  # no temporary file left


def test_a_pipeline_cannot_be_copied_or_pickled() -> None:
    src = SyntheticSource(100, [SyntheticField("u", 50)], seed=3)
    with recgo.DataPipeline(src, [Feature("u").mod(50)], 10, depth=1) as pipe:
        next(pipe)
        for how in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="a DataPipeline cannot be copied or pickled.*load_state_dict"):
                how(pipe)
        again = recgo.DataPipeline(src, [Feature("u").mod(50)], 10, depth=1)
        again.load_state_dict(pipe.state_dict())
        assert torch.equal(next(again).sparse.values(), next(pipe).sparse.values())
        again.close()


def test_a_step_with_no_room_left_is_refused_on_import() -> None:
    ebc = _dynamic_collection()
    with pytest.raises(InvalidInputError, match=r"step 9223372036854775806 out of range \[0, 4611686018427387904\]"):
        dynamic.import_rows(ebc, "t", torch.tensor([5, 7]), torch.ones(2, 4), step=2**63 - 2)
    dynamic.import_rows(ebc, "t", torch.tensor([5, 7]), torch.ones(2, 4), step=2**62 - 1)
    dynamic.lookup(ebc, "t", torch.tensor([5]), train=True)
    with pytest.raises(InvalidInputError, match="its clock is at 4611686018427387904 steps, the most it counts"):
        dynamic.lookup(ebc, "t", torch.tensor([7]), train=True)
    assert dynamic.stats(ebc, "t").step == 2**62
    _dynamic_collection().load_state_dict(ebc.state_dict())  # its own checkpoint loads
