"""Parquet DECIMAL columns read as their decimal values, through the Go reader.

Before, a DECIMAL stored as INT32/INT64 (Spark's default for precision <= 18, pyarrow's with
store_decimal_as_integer=True) came out unscaled (1.25 as 125.0, an ID 7.5 as 75) without a word,
and one stored as FIXED_LEN_BYTE_ARRAY (pyarrow's default) failed with '... is not a number'. A file
with two top-level columns of one name was read from one of them.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
import torch

import recgo
from recgo.data import Column, ParquetSource
from recgo.feature import Feature

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

LABELS = ["1.00", "0.00", "1.00"]
PRICES = {  # (precision, scale) -> values
    (9, 2): ["1.25", "-3.50", "0.07"],
    (12, 1): ["7.5", "-12.0", "0.1"],
    (18, 4): ["12345678901234.5678", "-0.0001", "0.3333"],
    (38, 10): ["12345678901234567890123.4567890123", "-1.0000000001", "0.0000000001"],
}
IDS = {(9, 0): [7, -12, 999_999_999], (18, 0): [10**17, -(10**17), 5], (38, 0): [2**63 - 1, -(2**63), 0]}


def physical(precision: int, as_int: bool) -> str:
    """The physical type pyarrow stores a decimal of this precision in."""
    if not as_int or precision > 18:
        return "FIXED_LEN_BYTE_ARRAY"
    return "INT32" if precision <= 9 else "INT64"


def write(path: Path, cols: dict[str, tuple[list, int, int]], as_int: bool) -> Path:
    table = pa.table({name: pa.array([Decimal(str(v)) for v in vals], pa.decimal128(p, s))
                      for name, (vals, p, s) in cols.items()})
    pq.write_table(table, path, store_decimal_as_integer=as_int)
    schema = pq.ParquetFile(path).schema
    for i, (name, (_, p, _)) in enumerate(cols.items()):
        assert schema.column(i).name == name and schema.column(i).physical_type == physical(p, as_int)
    return path


@pytest.mark.parametrize("as_int", [True, False], ids=["int-storage", "flba-storage"])
@pytest.mark.parametrize("ps", list(PRICES), ids=[f"decimal{p}_{s}" for p, s in PRICES])
def test_decimal_labels_dense_and_ids(tmp_path: Path, as_int: bool, ps: tuple[int, int]) -> None:
    n = len(LABELS)
    id_ps = {9: (9, 0), 12: (18, 0), 18: (18, 0), 38: (38, 0)}[ps[0]]
    path = write(tmp_path / "d.parquet", {"label": (LABELS, 5, 2), "price": (PRICES[ps], *ps),
                                          "id": (IDS[id_ps][:n], *id_ps)}, as_int)
    cols = [Column("label", "label"), Column("price", "dense"), Column("id")]
    batch = next(iter(recgo.DataPipeline(ParquetSource(path, cols), [Feature("id")], n, depth=0)))
    # the float32 nearest the float64 nearest the exact decimal (float() of a Decimal rounds correctly)
    assert torch.equal(batch.labels, torch.tensor([float(Decimal(v)) for v in LABELS], dtype=torch.float32))
    assert torch.equal(batch.dense.flatten(), torch.tensor([float(Decimal(v)) for v in PRICES[ps]], dtype=torch.float32))
    assert batch.sparse["id"].values().tolist() == IDS[id_ps][:n]


@pytest.mark.parametrize("as_int", [True, False], ids=["int-storage", "flba-storage"])
def test_decimal_string_ids_keep_the_decimal_text(tmp_path: Path, as_int: bool) -> None:
    from recgo.feature.reference import xxh64_bytes

    vals = ["7.5", "12.0", "-0.3"]
    path = write(tmp_path / "s.parquet", {"id": (vals, 12, 1)}, as_int)
    batch = next(iter(recgo.DataPipeline(ParquetSource(path, [Column("id", type="string")]),
                                         [Feature("id", dtype="bytes").hash()], 3, depth=0)))
    want = [xxh64_bytes(v.encode(), 0) for v in vals]
    assert [h & (2**64 - 1) for h in batch.sparse["id"].values().tolist()] == want


@pytest.mark.parametrize("as_int", [True, False], ids=["int-storage", "flba-storage"])
@pytest.mark.parametrize("ps", [(9, 2), (12, 1), (38, 1)])
def test_decimal_with_a_scale_is_no_id(tmp_path: Path, as_int: bool, ps: tuple[int, int]) -> None:
    """Refused when the source opens, naming file and column, as a non-integral DOUBLE ID is per row."""
    path = write(tmp_path / "x.parquet", {"label": (LABELS[:2], 5, 2), "id": (["7.5", "12.0"], *ps)}, as_int)
    msg = re.escape(f'{path}: column "id" is DECIMAL({ps[0]},{ps[1]}): its values are not valid int values '
                    "(IDs must be integers)")
    with pytest.raises(recgo.InvalidInputError, match=msg):
        next(iter(recgo.DataPipeline(ParquetSource(path, [Column("label", "label"), Column("id")]), [Feature("id")], 2)))


def test_decimal_id_past_int64(tmp_path: Path) -> None:
    path = write(tmp_path / "big.parquet", {"id": ([1, 2**63], 38, 0)}, False)
    with pytest.raises(recgo.InvalidInputError,
                       match=r"row 1 column 1 \(id\): DECIMAL\(38,0\) value 9223372036854775808 is past int64"):
        next(iter(recgo.DataPipeline(ParquetSource(path, [Column("id")]), [Feature("id")], 2, depth=0)))


def test_duplicate_column_name(tmp_path: Path) -> None:
    path = tmp_path / "dup.parquet"
    pq.write_table(pa.table([pa.array([1, 2]), pa.array([10, 20])], names=["id", "id"]), path)
    msg = re.escape(f'{path}: column "id" is in the schema twice (fields 1 and 2): rename one')
    with pytest.raises(recgo.InvalidInputError, match=msg):
        next(iter(recgo.DataPipeline(ParquetSource(path, [Column("id")]), [Feature("id")], 2, depth=0)))
