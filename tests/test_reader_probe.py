"""Random CSV, Criteo and Parquet files read by recgo and by an independent Python reading (the csv
module, plain str.split, pyarrow; gzip for compressed files) must agree: the same rows, IDs, string
hashes, dense values and labels, or, where the reference finds a row recgo's documented rules refuse
(docs/pipeline.md: IDs are decimal or hex integers of int64, labels and dense values finite float32
numbers, a row has the header's field count), recgo raises naming that file and line (or row).

The files mix quoting styles, quoted fields with delimiters, quotes and line breaks, empty fields,
whitespace, CRLF line ends, a byte order mark, long lines, huge and negative integers, NaN and inf,
trailing delimiters and a missing final newline. Few examples of small files keep the run short; the
examples are derandomized so that every run checks the same files. ``RECGO_PROBE_EXAMPLES=1500`` runs
that many random examples instead (a deeper probe, minutes long).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import recgo
from recgo.data import Column, CriteoSource, CSVSource, ParquetSource
from recgo.feature import Feature
from recgo.feature.reference import xxh64_bytes

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# A pass that skips most of a small file's rows warns; here that is the point.
pytestmark = pytest.mark.filterwarnings("ignore:.*skip_bad skipped:UserWarning")
PROBE = settings(max_examples=int(os.environ.get("RECGO_PROBE_EXAMPLES", "12")), deadline=None,
                 derandomize="RECGO_PROBE_EXAMPLES" not in os.environ, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
I64 = (-(2**63), 2**63 - 1)
F32_MAX = float(np.finfo(np.float32).max)
MASK = 2**64 - 1
csv.field_size_limit(1 << 24)  # the reference reads fields as long as recgo's 4 MiB records


class Malformed(Exception):
    """A row the reference finds recgo's rules refuse."""


# --- value rules, as docs/pipeline.md states them, applied to the reference's fields ---

def ref_int(s: str) -> list[int]:
    """A decimal int64 ID field: an empty bag when empty."""
    if s == "":
        return []
    if not re.fullmatch(r"[+-]?[0-9]+", s) or not I64[0] <= int(s) <= I64[1]:
        raise Malformed(s)
    return [int(s)]


def ref_hex(s: str) -> list[int]:
    """A Criteo categorical: 1 to 16 hex digits, their bits as an int64."""
    if s == "":
        return []
    if not re.fullmatch(r"[0-9a-fA-F]{1,16}", s):
        raise Malformed(s)
    v = int(s, 16)
    return [v - 2**64 if v >= 2**63 else v]


def ref_float(s: str, empty: float | None = 0.0) -> float:
    """A label or dense value: a finite float32 number (``empty`` for an empty field; None: refused)."""
    if s == "":
        if empty is None:
            raise Malformed(s)
        return empty
    if re.search(r"\s", s):  # Python's float strips spaces; recgo's numbers have none
        raise Malformed(s)
    try:  # Go's syntax is Python's (underscores between digits included) plus hex floats, which need an exponent
        v = float.fromhex(s) if s.lower().lstrip("+-").startswith("0x") and "p" in s.lower() else float(s)
    except ValueError:
        raise Malformed(s) from None
    if not math.isfinite(v) or abs(v) > F32_MAX:
        raise Malformed(s)
    return float(np.float32(v))


def str_hash(s: bytes) -> int:
    return xxh64_bytes(s, 0) & MASK


# --- strategies ---

INT_TEXT = st.one_of(st.integers(*I64).map(str), st.integers(-(2**70), 2**70).map(str), st.sampled_from(
    ["", "0", "-0", "+7", " 5", "5 ", "1.0", "1e3", "abc", "9223372036854775808", "-9223372036854775808", "1_000"]))
FLOAT_TEXT = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
                       st.floats(allow_nan=False, allow_infinity=False).map(repr), st.sampled_from(
    ["", "nan", "NaN", "inf", "-inf", "Infinity", "1e39", "-3.5e38", "1e-400", "1e-45", " 2", "3 ", "1_0", "0x1p-2",
     "+.5", "5.", "1E5", "abc"]))
LABEL_TEXT = st.one_of(st.sampled_from(["0", "1", "1.0", "0.5", "", "nan", "inf", "yes", " 1"]), FLOAT_TEXT)
CHARS = st.sampled_from(list("ab,;\"' |\t\n\r\\éx0") + ["\r\n", "💡", "\x00"])
STR_TEXT = st.one_of(st.lists(CHARS, max_size=8).map("".join),
                     st.integers(60_000, 140_000).map(lambda n: "L" * n))  # past the 64 KiB probe buffer


def names_line(path: Path, line: int) -> str:
    return re.escape(f"{path.name} line {line}") + r"\b"


def run(source: Any, feats: list[Feature]) -> list[Any]:
    """Every batch of one pass over ``source`` (one batch of everything)."""
    return list(recgo.DataPipeline(source, feats, 4096, depth=0))


# --- CSV ---

def csv_reference(data: bytes, delim: str, header: bool) -> tuple[list[tuple], list[int]]:
    """The file's bytes read by Python's csv module (as a file opened with newline="": line ends inside
    quoted fields are text) and checked by the rules: (id, s, x, y) rows and the first line of every
    malformed record."""
    rows, bad = [], []
    # Lines end at "\n" only, as recgo's do (a file object would also end them at a "\r" inside a quoted
    # field, numbering the lines after it otherwise).
    reader = csv.reader(re.findall(r"[^\n]*\n|[^\n]+\Z", data.decode("utf-8-sig")), delimiter=delim, strict=True)
    start = 1
    if header:
        assert next(reader) == ["id", "s", "x", "y"]
        start = reader.line_num + 1
    records = []
    for rec in reader:
        records.append((start, rec))
        start = reader.line_num + 1
    while records and records[-1][1] == []:  # blank lines that end a file are no rows
        records.pop()
    for line, rec in records:
        try:
            if len(rec) != 4:
                raise Malformed(rec)
            rows.append((ref_int(rec[0]), rec[1].encode(), ref_float(rec[2]), ref_float(rec[3], empty=None)))
        except Malformed:
            bad.append(line)
    return rows, bad


@st.composite
def csv_files(draw: Any) -> tuple[bytes, bool, str, bool]:
    """A CSV file's bytes, and skip_bad, the delimiter and whether a header line names the columns."""
    rows = draw(st.lists(st.tuples(INT_TEXT, STR_TEXT, FLOAT_TEXT, LABEL_TEXT), min_size=1, max_size=8))
    quoting = draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    delim, header = draw(st.sampled_from([",", ",", "\t", ";"])), draw(st.booleans())
    out = io.StringIO()
    w = csv.writer(out, quoting=quoting, lineterminator=end, delimiter=delim)
    if header:
        w.writerow(["id", "s", "x", "y"])
    for r in rows:
        if quoting == csv.QUOTE_MINIMAL and end == "\n":
            # The writer leaves a field with a bare "\r" unquoted: the csv module ends a row there, recgo
            # reads it as text (docs/pipeline.md). A delimiter in the field makes the writer quote it.
            r = tuple(f + delim if "\r" in f and not any(c in f for c in delim + '"\n') else f for f in r)
        w.writerow(list(r) + ([""] if draw(st.integers(0, 9)) == 0 else []))  # now and then a trailing delimiter
    text = out.getvalue()
    if draw(st.booleans()):
        text = text[:-len(end)]  # no final newline
    elif draw(st.booleans()):
        text += end * 2  # blank lines at the end
    data = ("\ufeff" if draw(st.booleans()) else "").encode() + text.encode()
    return data, draw(st.booleans()), delim, header


def check_csv(path: Path, data: bytes, skip: bool, delim: str, header: bool) -> None:
    want, bad = csv_reference(data, delim, header)
    cols = [Column("id"), Column("s", "sparse", "string"), Column("x", "dense"), Column("y", "label")]
    feats = [Feature("id"), Feature("s", dtype="bytes").hash()]
    if bad and not (skip and want):
        with pytest.raises(recgo.InvalidInputError, match=names_line(path, bad[0])):
            run(CSVSource(path, cols, header=header, delimiter=delim, skip_bad=skip), feats)
        return
    source = CSVSource(path, cols, header=header, delimiter=delim, skip_bad=skip)
    pipe = recgo.DataPipeline(source, feats, 4096, depth=0)
    (b,) = list(pipe)
    assert pipe.stats()["skipped"] == len(bad)
    ids, lens = b.sparse["id"].values().tolist(), b.sparse["id"].lengths().tolist()
    assert ids == [v for r in want for v in r[0]] and lens == [len(r[0]) for r in want]
    strings = [str_hash(r[1]) for r in want if r[1]]  # an empty field is an empty bag
    assert [h & MASK for h in b.sparse["s"].values().tolist()] == strings
    assert b.sparse["s"].lengths().tolist() == [int(bool(r[1])) for r in want]
    assert b.dense[:, 0].tolist() == [r[2] for r in want]
    assert b.labels.tolist() == [r[3] for r in want]


@PROBE
@given(csv_files())
def test_random_csv_files_read_as_the_csv_module_reads_them(case: tuple[bytes, bool, str, bool]) -> None:
    data, skip, delim, header = case
    with tempfile.TemporaryDirectory() as d:
        for name, payload in (("p.csv", data), ("p.csv.gz", gzip.compress(data))):
            path = Path(d) / name
            path.write_bytes(payload)
            check_csv(path, data, skip, delim, header)


# --- Criteo ---

@st.composite
def criteo_files(draw: Any) -> tuple[bytes, bool]:
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        label = draw(st.sampled_from(["0", "1", "1", "0", "", "nan", "2"]))
        ints = draw(st.lists(st.one_of(st.sampled_from(["", "0", "-3", "5"]), INT_TEXT), min_size=13, max_size=13))
        cats = draw(st.lists(st.one_of(st.integers(0, 2**64 - 1).map(lambda v: f"{v:x}"), st.sampled_from(
            ["", "68fd1e64", "FFFFFFFFFFFFFFFF", "0", "10000000000000000", "zz", " a"])), min_size=26, max_size=26))
        fields = [label] + ints + cats
        if draw(st.integers(0, 9)) == 0:
            fields.append("")  # a trailing tab
        if draw(st.integers(0, 9)) == 0:
            fields.pop()  # a short line
        lines.append("\t".join(fields))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    text = end.join(lines) + ("" if draw(st.booleans()) else end)
    return ("\ufeff" if draw(st.booleans()) else "").encode() + text.encode(), draw(st.booleans())


def criteo_reference(data: bytes) -> tuple[list[tuple], list[int]]:
    """str.split reading of a Criteo file: (label, ints, cats) rows and the malformed lines."""
    text = data.decode("utf-8-sig")
    lines = text.split("\n")
    while lines and lines[-1].strip("\r") == "":
        lines.pop()
    rows, bad = [], []
    for no, line in enumerate(lines, 1):
        f = line.removesuffix("\r").split("\t")
        try:
            if len(f) != 40:
                raise Malformed(line)
            rows.append((ref_float(f[0], empty=None), [ref_int(x) for x in f[1:14]], [ref_hex(x) for x in f[14:]]))
        except Malformed:
            bad.append(no)
    return rows, bad


@PROBE
@given(criteo_files())
def test_random_criteo_files_read_as_str_split_reads_them(case: tuple[bytes, bool]) -> None:
    data, skip = case
    want, bad = criteo_reference(data)
    feats = [Feature(f"I{i}") for i in range(1, 14)] + [Feature(f"C{i}") for i in range(1, 27)]
    with tempfile.TemporaryDirectory() as d:
        for name, payload in (("p.txt", data), ("p.gz", gzip.compress(data))):
            path = Path(d) / name
            path.write_bytes(payload)
            if bad and not (skip and want):
                with pytest.raises(recgo.InvalidInputError, match=names_line(path, bad[0])):
                    run(CriteoSource(path, skip_bad=skip), feats)
                continue
            pipe = recgo.DataPipeline(CriteoSource(path, skip_bad=skip), feats, 4096, depth=0)
            (b,) = list(pipe)
            assert pipe.stats()["skipped"] == len(bad)
            assert b.labels.tolist() == [r[0] for r in want]
            for i in range(13):
                kjt = b.sparse[f"I{i + 1}"]
                assert kjt.values().tolist() == [v for r in want for v in r[1][i]]
                assert kjt.lengths().tolist() == [len(r[1][i]) for r in want]
            for i in range(26):
                kjt = b.sparse[f"C{i + 1}"]
                assert kjt.values().tolist() == [v for r in want for v in r[2][i]]
                assert kjt.lengths().tolist() == [len(r[2][i]) for r in want]
            dense = torch.tensor([[math.log1p(max(v[0], 0)) if v else 0.0 for v in r[1]] for r in want],
                                 dtype=torch.float64).reshape(-1, 13)
            torch.testing.assert_close(b.dense.double(), dense.float().double(), rtol=1e-6, atol=0)


# --- Parquet ---

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

PQ_FLOAT = st.one_of(st.none(), st.floats(width=32), st.sampled_from([math.nan, math.inf, 1e39, -0.0]))
PQ_ID = st.one_of(st.none(), st.integers(*I64))
PQ_STR = st.one_of(st.none(), st.text(alphabet=st.sampled_from(list("ab,\"\n\r é💡\x00")), max_size=6))
PQ_SEQ = st.one_of(st.none(), st.lists(st.one_of(st.integers(*I64), st.none()), max_size=4))  # null lists, elements


@st.composite
def parquet_tables(draw: Any) -> tuple[Any, int, bool]:
    n = draw(st.integers(1, 10))
    rows = [(draw(st.one_of(st.sampled_from([0.0, 1.0, 0.25]), PQ_FLOAT)), draw(PQ_ID), draw(PQ_STR), draw(PQ_FLOAT),
             draw(PQ_SEQ)) for _ in range(n)]
    table = pa.table({
        "y": pa.array([r[0] for r in rows], pa.float64()),
        "id": pa.array([r[1] for r in rows], pa.int64()),
        "s": pa.array([r[2] for r in rows], pa.string()),
        "x": pa.array([r[3] for r in rows], draw(st.sampled_from([pa.float32(), pa.float64()]))),
        "seq": pa.array([r[4] for r in rows], pa.list_(pa.int64())),
    })
    return table, draw(st.integers(1, 4)), draw(st.booleans())


def pq_float(v: float | None, label: bool) -> float:
    if v is None:
        if label:
            raise Malformed(v)
        return 0.0
    if not math.isfinite(v) or abs(v) > F32_MAX:
        raise Malformed(v)
    return float(np.float32(v))


@PROBE
@given(parquet_tables())
def test_random_parquet_files_read_as_pyarrow_reads_them(case: tuple[Any, int, bool]) -> None:
    table, group, skip = case
    want, bad = [], []
    for i, r in enumerate(table.to_pylist()):  # pyarrow's reading of the file's rows
        try:
            if r["seq"] is not None and None in r["seq"]:
                raise Malformed(r["seq"])  # a null element inside a list
            want.append((pq_float(r["y"], True), [] if r["id"] is None else [r["id"]],
                         None if r["s"] is None else r["s"].encode(), pq_float(r["x"], False), r["seq"] or []))
        except Malformed:
            bad.append(i)
    cols = [Column("y", "label"), Column("id"), Column("s", "sparse", "string"), Column("x", "dense"),
            Column("seq", "sequence")]
    feats = [Feature("id"), Feature("s", dtype="bytes").hash(), Feature("seq")]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "p.parquet"
        pq.write_table(table, path, row_group_size=group)
        if bad and not (skip and want):
            with pytest.raises(recgo.InvalidInputError, match=re.escape(f"p.parquet row {bad[0]} ")):
                run(ParquetSource(path, cols, skip_bad=skip), feats)
            return
        pipe = recgo.DataPipeline(ParquetSource(path, cols, skip_bad=skip), feats, 4096, depth=0)
        (b,) = list(pipe)
    assert pipe.stats()["skipped"] == len(bad)
    assert b.labels.tolist() == [r[0] for r in want]
    assert b.sparse["id"].values().tolist() == [v for r in want for v in r[1]]
    assert b.sparse["id"].lengths().tolist() == [len(r[1]) for r in want]
    # A null string is an empty bag; an empty string is a value (its hash), as pyarrow tells them apart.
    assert [h & MASK for h in b.sparse["s"].values().tolist()] == [str_hash(r[2]) for r in want if r[2] is not None]
    assert b.sparse["s"].lengths().tolist() == [int(r[2] is not None) for r in want]
    assert b.dense[:, 0].tolist() == [r[3] for r in want]
    assert b.sparse["seq"].values().tolist() == [v for r in want for v in r[4]]
    assert b.sparse["seq"].lengths().tolist() == [len(r[4]) for r in want]
