"""The raw batch's bound is the reader's memory bound, not the feature engine's ``max_values``
(session 43). A field that a transform shrinks before the engine checks its buffers (truncate,
filter), or that no feature reads, may hold more raw values than ``max_values``: the engine takes
such a batch, and until session 43 the reader refused it (``CapacityError``: ``field "seq" would
hold ... values ..., past the limit of <max_values>``), because the pipeline handed the reader the
engine's bound. A field the engine maps value by value past ``max_values`` is still refused, by the
engine, naming the feature."""

from __future__ import annotations

from pathlib import Path

import pytest

import recgo
from recgo.data import Column, CSVSource
from recgo.errors import CapacityError
from recgo.feature import Feature, FeatureEngine


def _source(tmp_path: Path) -> CSVSource:
    """10 rows of a 40-value sequence ``seq`` (0..39) and an int ``n``: 200 values of seq a batch of 5."""
    path = tmp_path / "seq.csv"
    path.write_text("seq,n\n" + "".join("|".join(str(i) for i in range(40)) + f",{r}\n" for r in range(10)))
    return CSVSource(path, [Column("seq", "sequence"), Column("n")])


@pytest.mark.parametrize("features, lengths", [
    ([Feature("seq").truncate(2).mod(7)], [2] * 5),
    ([Feature("seq").truncate(2, keep="last")], [2] * 5),
    ([Feature("seq").filter([3, 4], mode="keep").hash(1)], [2] * 5),
    ([Feature("n").mod(3)], [1] * 5),  # seq is read, and no feature reads it
], ids=["truncate", "truncate last", "filter", "unread field"])
@pytest.mark.parametrize("depth", [0, 2])
def test_a_raw_field_past_max_values_that_the_transforms_shrink_is_read(
        tmp_path: Path, features: list[Feature], lengths: list[int], depth: int) -> None:
    engine = FeatureEngine(features, max_values=10)
    with recgo.DataPipeline(_source(tmp_path), engine, 5, depth=depth) as pipe:
        batches = list(pipe)
    assert len(batches) == 2
    for b in batches:
        assert b.sparse.lengths().tolist() == lengths


@pytest.mark.parametrize("features", [[Feature("seq").mod(7)], [Feature("seq")]], ids=["mod", "copy"])
def test_a_raw_field_the_engine_maps_value_by_value_is_refused_by_the_engine(
        tmp_path: Path, features: list[Feature]) -> None:
    engine = FeatureEngine(features, max_values=100)
    with pytest.raises(CapacityError, match=r'transform stage: .*"seq".*limit of 100') as e:
        next(recgo.DataPipeline(_source(tmp_path), engine, 10, depth=0))
    assert "reader:" not in str(e.value)
    batch = next(recgo.DataPipeline(_source(tmp_path), engine, 2, depth=0))  # 80 values: within the bound
    assert batch.sparse.to_dict()["seq"].lengths().tolist() == [40, 40]
