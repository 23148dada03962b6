"""Parquet FLOAT16 columns (pyarrow's ``pa.float16()``) read as numbers, through the Go reader.

Before, every row of one failed with 'FIXED_LEN_BYTE_ARRAY value ... is not a number': parquet-go has
no type for the FLOAT16 logical type and handed the reader the half floats' two raw bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import recgo
from recgo.data import Column, ParquetSource
from recgo.errors import InvalidInputError
from recgo.feature import Feature

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

LABELS = [1.0, 0.0, 1.0, 0.0, 1.0]
VALUES = [0.1, -2.5, 65504.0, 2.0**-24, 6.1e-5]  # 65504: the largest half; the last two subnormal
IDS = [7.0, -12.0, 2048.0, 0.0, 65504.0]


def write(path: Path, cols: dict[str, list[float]], **kw) -> Path:
    pq.write_table(pa.table({k: pa.array(np.array(v, dtype=np.float16)) for k, v in cols.items()}), path, **kw)
    assert all(pq.ParquetFile(path).schema.column(i).physical_type == "FIXED_LEN_BYTE_ARRAY" for i in range(len(cols)))
    return path


@pytest.mark.parametrize("kw", [{}, {"use_dictionary": False}, {"data_page_version": "2.0", "compression": "zstd"}],
                         ids=["dict", "plain", "v2-zstd"])
def test_float16_labels_dense_and_ids(tmp_path: Path, kw: dict) -> None:
    path = write(tmp_path / "h.parquet", {"label": LABELS, "x": VALUES, "id": IDS}, **kw)
    cols = [Column("label", "label"), Column("x", "dense"), Column("id")]
    batch = next(iter(recgo.DataPipeline(ParquetSource(path, cols), [Feature("id")], len(IDS), depth=0)))
    halves = np.array(VALUES, dtype=np.float16).astype(np.float32)  # the values the file holds, exactly
    assert batch.labels.tolist() == LABELS
    assert batch.dense[:, 0].numpy().tobytes() == halves.tobytes()
    assert batch.sparse["id"].values().tolist() == [int(v) for v in IDS]


def test_float16_nan_names_row_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "h.parquet", {"label": LABELS[:2], "x": [1.0, float("nan")], "id": IDS[:2]})
    src = ParquetSource(path, [Column("label", "label"), Column("x", "dense"), Column("id")])
    with pytest.raises(InvalidInputError, match=r"h\.parquet row 1 column 2 \(x\): FLOAT16 value NaN is not a number"):
        next(iter(recgo.DataPipeline(src, [Feature("id")], 2, depth=0)))
