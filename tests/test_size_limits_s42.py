"""Sizes from input are checked before they are allocated: a dynamic table's ``sketch_width`` (far
past a small table's rows, it allocated gigabytes of counters), the pages a Parquet row group holds at
once (a file of under a kilobyte whose pages each declared the most a page may hold reserved that
for every column), and a profiler's dense count arrays (thousands of tables allocated without a
check). Each died of Go's fatal out-of-memory error under a memory limit; each now raises a recgo
error first. The raw batch's per-field bound is tested in Go (engine/reader/batch_limit_test.go),
with small bounds: its default takes gigabytes to reach."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import recgo
from recgo import planner as P
from recgo.data import Column, ParquetSource
from recgo.errors import CapacityError, RecgoIOError
from recgo.modules import optim


def _ebc(rows: int, min_count: int, sketch_width: int) -> recgo.EmbeddingBagCollection:
    return recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(
        num_embeddings=rows, embedding_dim=1, name="t", feature_names=["f"],
        dynamic=recgo.DynamicConfig(min_count=min_count, sketch_width=sketch_width))],
        optimizer=optim.SGD(lr=0.1), seed=0)


@pytest.mark.parametrize("rows, width, words", [
    (1000, 2**30, ["sketch_width 1073741824", "admission sketch of 4294967296 bytes",
                   "past the limit of 1073741824 bytes"]),
    (1000, 2**28 + 1, ["sketch_width 268435457 (536870912 counters a row", "2147483648 bytes"]),
])
def test_sketch_width_past_the_bound_is_refused(rows: int, width: int, words: list[str]) -> None:
    with pytest.raises(CapacityError) as e:
        _ebc(rows, 2, width)
    for w in words:
        assert w in str(e.value)
    assert 'dynamic table "t"' in str(e.value)
    _ebc(rows, 2, 2**16)  # within the bound
    _ebc(rows, 1, width)  # no admission, no sketch: the width is not used


# A Parquet file of one row group: ncols required INT64 columns, one snappy page each that declares
# `declared` bytes decoded (zero: its true size), written with a minimal Thrift compact encoder.

def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zigzag(v: int) -> bytes:
    return _varint((v << 1) ^ (v >> 63))


class _Struct:
    """A Thrift compact struct: fields added in increasing id order."""

    def __init__(self) -> None:
        self.buf, self.last = bytearray(), 0

    def _head(self, fid: int, typ: int) -> None:
        assert 0 < fid - self.last <= 15
        self.buf.append((fid - self.last) << 4 | typ)
        self.last = fid

    def int(self, fid: int, v: int, typ: int = 5) -> "_Struct":  # the Thrift type: i32 by default, or i64
        self._head(fid, typ)
        self.buf += _zigzag(v)
        return self

    def bin(self, fid: int, v: bytes) -> "_Struct":
        self._head(fid, 8)
        self.buf += _varint(len(v)) + v
        return self

    def struct(self, fid: int, s: "_Struct") -> "_Struct":
        self._head(fid, 12)
        self.buf += s.end()
        return self

    def list(self, fid: int, typ: int, items: list[bytes]) -> "_Struct":
        self._head(fid, 9)
        assert len(items) < 15
        self.buf.append(len(items) << 4 | typ)
        for it in items:
            self.buf += it
        return self

    def end(self) -> bytes:
        return bytes(self.buf) + b"\x00"


def _parquet(path: Path, ncols: int, declared: int) -> None:
    INT64, REQUIRED, PLAIN, RLE, SNAPPY, I64 = 2, 0, 0, 3, 1, 6
    body = bytearray(b"PAR1")
    schema = [_Struct().bin(4, b"schema").int(5, ncols).end()]
    chunks = []
    for i in range(ncols):
        name = f"c{i}".encode()
        schema.append(_Struct().int(1, INT64).int(3, REQUIRED).bin(4, name).end())
        plain = struct.pack("<q", i + 1)
        comp = _varint(len(plain)) + bytes([(len(plain) - 1) << 2]) + plain  # one snappy literal
        size = declared or len(plain)
        header = (_Struct().int(1, 0).int(2, size).int(3, len(comp))
                  .struct(5, _Struct().int(1, 1).int(2, PLAIN).int(3, RLE).int(4, RLE)).end())
        off = len(body)
        body += header + comp
        meta = (_Struct().int(1, INT64).list(2, 5, [_zigzag(PLAIN), _zigzag(RLE)])
                .list(3, 8, [_varint(len(name)) + name]).int(4, SNAPPY).int(5, 1, I64)
                .int(6, len(header) + size, I64).int(7, len(header) + len(comp), I64).int(9, off, I64))
        chunks.append(_Struct().int(2, off, I64).struct(3, meta).end())
    group = _Struct().list(1, 12, chunks).int(2, 100, I64).int(3, 1, I64).end()
    footer = (_Struct().int(1, 1).list(2, 12, schema).int(3, 1, I64).list(4, 12, [group])
              .bin(6, b"test_size_limits_s42").end())
    path.write_bytes(bytes(body) + footer + struct.pack("<I", len(footer)) + b"PAR1")


def _read(path: Path, ncols: int) -> list[recgo.KeyedJaggedTensor]:
    cols = [Column(f"c{i}", "sparse", "int") for i in range(ncols)]
    p = recgo.DataPipeline(ParquetSource(str(path), cols), [recgo.Feature(f"c{i}") for i in range(ncols)],
                           batch_size=4, depth=0)
    return [b.sparse for b in p]


def test_parquet_row_group_pages_past_the_bound_are_refused(tmp_path: Path) -> None:
    ok = tmp_path / "ok.parquet"  # the file as written reads
    _parquet(ok, 8, 0)
    (kjt,) = _read(ok, 8)
    assert [kjt[f"c{i}"].values().tolist() for i in range(8)] == [[i + 1] for i in range(8)]
    path = tmp_path / "forged.parquet"
    _parquet(path, 8, 2**30)
    assert path.stat().st_size < 1024
    with pytest.raises(RecgoIOError) as e:
        _read(path, 8)
    msg = str(e.value)
    assert "cannot read the row group: row group 0, column \"c4\"" in msg
    assert "5368709120 bytes of pages held at once, past the 4294967296 a row group's reader may hold" in msg


def test_profiler_dense_counts_past_the_limit_are_refused() -> None:
    with pytest.raises(CapacityError) as e:
        P.Profiler([P.TableSpec(f"t{i}", 2**18, 8) for i in range(2000)])
    msg = str(e.value)
    assert "2000 tables counted densely (524288000 rows in all, the largest 262144)" in msg
    assert "20971520000 bytes" in msg and "memory limit of 8589934592 bytes" in msg
    # tables past the dense size are counted in maps, which take memory only as rows are touched
    P.Profiler([P.TableSpec(f"t{i}", 2**18 + 1, 8) for i in range(2000)])
