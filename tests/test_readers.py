"""recgo.data sources through the Go readers: batches equal a Python reader + FeatureEngine run.

The reference parses each format with plain Python (str.split, int(), the csv module), feeds the
FeatureEngine with the same fields, and compares value for value; real samples come from
../shared/data (skipped when absent) and generated files cover gzip, CSV sequences and Parquet.
Malformed files raise the named error.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import recgo
from recgo.data import Column, CriteoSource, CSVSource, ParquetSource, SyntheticField, SyntheticSource
from recgo.feature import Feature, FeatureEngine, encode_strings

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CRITEO = DATA / "criteo" / "criteo_dac_train_head10109.txt"
AVAZU = DATA / "avazu" / "avazu_train_rows00001-08999.csv"
TAOBAO = DATA / "taobao" / "taobao_UserBehavior_head.csv"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def criteo_features() -> list[Feature]:
    feats = [Feature(f"C{i}").fill_missing(0).hash(seed=i).mod(50_000) for i in range(1, 27)]
    feats += [Feature(f"I{i}").fill_missing(-1).bucketize([0, 1, 2, 4, 8, 16, 64, 256, 1024]) for i in range(1, 14)]
    return feats


def _jagged(vals: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    flat = [v for bag in vals for v in bag]
    return torch.tensor(flat, dtype=torch.int64), torch.tensor([len(b) for b in vals], dtype=torch.int64)


def criteo_reference(lines: list[str], engine: FeatureEngine, batch: int):
    """Plain-Python Criteo parsing + the FeatureEngine: (values, lengths, dense, labels) per batch."""
    out = []
    for s in range(0, len(lines), batch):
        rows = [ln.rstrip("\n").split("\t") for ln in lines[s:s + batch]]
        raw = {}
        for i in range(13):
            raw[f"I{i + 1}"] = _jagged([[int(r[1 + i])] if r[1 + i] else [] for r in rows])
        for i in range(26):
            raw[f"C{i + 1}"] = _jagged([[int(r[14 + i], 16)] if r[14 + i] else [] for r in rows])
        kjt = engine(raw)
        dense = torch.tensor([[math.log1p(max(int(r[1 + i]), 0)) if r[1 + i] else 0.0 for i in range(13)] for r in rows],
                             dtype=torch.float32)
        labels = torch.tensor([float(r[0]) for r in rows], dtype=torch.float32)
        out.append((kjt.values().clone(), kjt.lengths().clone(), dense, labels))
    return out


def collect(pipe: recgo.DataPipeline):
    return [(b.sparse.values().clone(), b.sparse.lengths().clone(), b.dense.clone(), b.labels.clone()) for b in pipe]


def assert_same(got, want) -> None:
    assert len(got) == len(want)
    for (gv, gl, gd, gy), (wv, wl, wd, wy) in zip(got, want):
        assert torch.equal(gv, wv) and torch.equal(gl, wl) and torch.equal(gy, wy)
        torch.testing.assert_close(gd, wd, rtol=0, atol=1e-6)


@pytest.mark.parametrize("gz", [False, True])
def test_criteo_matches_python_reader(tmp_path: Path, gz: bool) -> None:
    lines = _need(CRITEO).read_text().splitlines(keepends=True)[:3000]
    path = tmp_path / ("c.txt.gz" if gz else "c.txt")
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write("".join(lines))
    else:
        path.write_text("".join(lines))
    engine = FeatureEngine(criteo_features())
    want = criteo_reference(lines, engine, 512)
    for depth in (0, 1, 3):
        for threads in (1, 2):
            with recgo.DataPipeline(CriteoSource(path), engine, 512, depth=depth, threads=threads) as pipe:
                assert_same(collect(pipe), want)


def test_avazu_csv_matches_python_reader() -> None:
    path = _need(AVAZU)
    with path.open() as fh:
        rows = list(csv.DictReader(fh))[:2500]
    strings = ["site_id", "app_id", "device_model"]
    ints = ["hour", "C14", "C17", "banner_pos"]
    feats = [Feature(c, dtype="bytes").hash(seed=7).mod(10_000) for c in strings] + [Feature(c).hash().mod(5_000) for c in ints]
    engine = FeatureEngine(feats)
    cols = [Column("click", "label")] + [Column(c, "sparse", "string") for c in strings] + [Column(c) for c in ints] + [Column("C20", "dense")]
    want = []
    for s in range(0, len(rows), 700):
        chunk = rows[s:s + 700]
        raw = {c: encode_strings([r[c] for r in chunk]) for c in strings}
        raw.update({c: _jagged([[int(r[c])] for r in chunk]) for c in ints})
        kjt = engine(raw)
        want.append((kjt.values().clone(), kjt.lengths().clone(), torch.tensor([[float(r["C20"])] for r in chunk]),
                     torch.tensor([float(r["click"]) for r in chunk])))
    # The reference covers the first 2500 rows: compare the three full batches inside them.
    for depth in (0, 2):
        pipe = recgo.DataPipeline(CSVSource(path, cols), engine, 700, depth=depth, threads=2)
        got = []
        for b in pipe:
            got.append((b.sparse.values().clone(), b.sparse.lengths().clone(), b.dense.clone(), b.labels.clone()))
            if sum(int(x[3].numel()) for x in got) >= 2500:
                break
        pipe.close()
        assert_same(got[:3], want[:3])


def test_taobao_sequences_without_header(tmp_path: Path) -> None:
    src = _need(TAOBAO)
    lines = src.read_text().splitlines()[:2000]
    # Per-line histories: category ids joined by '|' (a sequence column), behaviour as a string.
    path = tmp_path / "hist.csv"
    rows = [ln.split(",") for ln in lines]
    with path.open("w") as fh:
        for i, r in enumerate(rows):
            hist = "|".join(x[2] for x in rows[max(0, i - 5):i] if x[0] == r[0])
            fh.write(f"{r[0]},{r[1]},{hist},{r[3]},{r[4]}\n")
    cols = [Column("user"), Column("item"), Column("hist", "sequence", sep="|"), Column("behavior", "sparse", "string"),
            Column("ts", "dense")]
    feats = [Feature("user").hash().mod(10_000), Feature("item").hash().mod(10_000),
             Feature("hist").truncate(3, keep="last").hash().mod(1000), Feature("behavior", dtype="bytes").hash().mod(10)]
    engine = FeatureEngine(feats)
    text = path.read_text().splitlines()
    want = []
    for s in range(0, len(text), 300):
        chunk = [ln.split(",") for ln in text[s:s + 300]]
        raw = {"user": _jagged([[int(r[0])] for r in chunk]), "item": _jagged([[int(r[1])] for r in chunk]),
               "hist": _jagged([[int(x) for x in r[2].split("|")] if r[2] else [] for r in chunk]),
               "behavior": encode_strings([r[3] for r in chunk])}
        kjt = engine(raw)
        want.append((kjt.values().clone(), kjt.lengths().clone(), torch.tensor([[float(r[4])] for r in chunk]),
                     torch.zeros(len(chunk))))
    for depth in (0, 2):
        with recgo.DataPipeline(CSVSource(path, cols, header=False), engine, 300, depth=depth) as pipe:
            assert_same(collect(pipe), want)


def test_parquet_matches_rows(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    n = 500
    table = pa.table({"label": [float(i % 2) for i in range(n)], "user": list(range(0, 3 * n, 3)),
                      "hist": [list(range(i, i + i % 4)) for i in range(n)], "price": [i / 4 for i in range(n)]})
    path = tmp_path / "x.parquet"
    pq.write_table(table, path, row_group_size=64)
    cols = [Column("label", "label"), Column("user"), Column("hist", "sequence"), Column("price", "dense")]
    engine = FeatureEngine([Feature("user").mod(97), Feature("hist").mod(13)])
    with recgo.DataPipeline(ParquetSource(path, cols), engine, 128, depth=2) as pipe:
        got = collect(pipe)
    rows = table.to_pylist()  # pyarrow's own reading of the file, through the same engine
    want = []
    for s in range(0, n, 128):
        chunk = rows[s:s + 128]
        kjt = engine({"user": _jagged([[r["user"]] for r in chunk]), "hist": _jagged([r["hist"] for r in chunk])})
        want.append((kjt.values(), kjt.lengths(), torch.tensor([[r["price"]] for r in chunk]),
                     torch.tensor([r["label"] for r in chunk])))
    assert_same(got, want)


def test_parquet_empty_files_and_unsigned_columns(tmp_path: Path) -> None:
    """A file of no rows (pyarrow writes one row group of 0 rows) failed mid-run with "cannot read rows
    (truncated?)"; unsigned integers (uint32 past 2^31, uint64 past 2^63) came out negative, and as
    text hashed as the negative number."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from recgo.feature.reference import xxh64_bytes

    schema = pa.schema([("label", pa.float64()), ("a", pa.int64())])
    empty = pa.table({"label": pa.array([], pa.float64()), "a": pa.array([], pa.int64())})
    pq.write_table(empty, tmp_path / "empty.parquet")
    pq.write_table(empty, tmp_path / "empty2.parquet")  # a file is listed once
    with pq.ParquetWriter(tmp_path / "gap.parquet", schema) as w:  # row groups of 2, 0 and 1 rows
        for part in (pa.table({"label": [1.0, 0.0], "a": [1, 2]}, schema=schema), empty,
                     pa.table({"label": [1.0], "a": [3]}, schema=schema)):
            w.write_table(part)
    files = [tmp_path / "empty.parquet", tmp_path / "gap.parquet", tmp_path / "empty2.parquet"]
    cols = [Column("label", "label"), Column("a")]
    got = [b.sparse["a"].values().tolist() for b in recgo.DataPipeline(ParquetSource(files, cols), [Feature("a")], 2)]
    assert got == [[1, 2], [3]]
    with pytest.raises(recgo.InvalidInputError, match="empty.parquet: the data holds no rows"):  # nothing to train on
        list(recgo.DataPipeline(ParquetSource(files[0], cols), [Feature("a")], 2))

    big32, big64 = 4_000_000_000, 2**63 + 5
    pq.write_table(pa.table({"label": [1.0, 0.0], "w": pa.array([big32, 2], pa.uint32()),
                             "u": pa.array([big64, 1], pa.uint64()), "id": pa.array([3_000_000_000, 7], pa.uint32()),
                             "s": pa.array([3_000_000_000, 7], pa.uint32())}), tmp_path / "u.parquet")
    cols = [Column("label", "label"), Column("w", "dense"), Column("u", "dense"), Column("id"), Column("s", type="string")]
    batch = next(iter(recgo.DataPipeline(ParquetSource(tmp_path / "u.parquet", cols),
                                         [Feature("id"), Feature("s", dtype="bytes").hash()], 2)))
    assert batch.dense.tolist() == [[float(big32), float(big64)], [2.0, 1.0]]
    assert batch.sparse["id"].values().tolist() == [3_000_000_000, 7]
    hashes = [xxh64_bytes(s, 0) for s in (b"3000000000", b"7")]
    assert [h & (2**64 - 1) for h in batch.sparse["s"].values().tolist()] == hashes
    pq.write_table(pa.table({"label": [1.0], "id": pa.array([big64], pa.uint64())}), tmp_path / "past.parquet")
    with pytest.raises(recgo.InvalidInputError, match=r"unsigned value 9223372036854775813 is past int64"):
        next(iter(recgo.DataPipeline(ParquetSource(tmp_path / "past.parquet", [Column("label", "label"), Column("id")]),
                                     [Feature("id")], 1)))


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return p


GOOD = "1" + "\t3" * 13 + "\tab" * 26 + "\n"


@pytest.mark.parametrize("depth", [0, 2])
def test_malformed_files_raise_named_errors(tmp_path: Path, depth: int) -> None:
    feats = [Feature("C1").mod(10)]
    short = write(tmp_path, "short.txt", GOOD * 40 + "1\t2\n" + GOOD)
    pipe = recgo.DataPipeline(CriteoSource(short), feats, 16, depth=depth)
    assert next(pipe).labels.numel() == 16 and next(pipe).labels.numel() == 16
    with pytest.raises(recgo.InvalidInputError, match=r"step 2, read stage: .*short\.txt line 41: short line: 2 fields"):
        next(pipe)
    with pytest.raises(recgo.InvalidInputError):  # the stream stays failed, nothing hangs
        next(pipe)
    pipe.close()
    badnum = write(tmp_path, "num.txt", GOOD.replace("\t3", "\t3.5", 1))
    with pytest.raises(recgo.InvalidInputError, match=r"num\.txt line 1 column 2 \(I1\): \"3\.5\" is not an integer"):
        next(recgo.DataPipeline(CriteoSource(badnum), feats, 4, depth=depth))
    data = gzip.compress((GOOD * 5000).encode())
    trunc = write(tmp_path, "t.txt.gz", data[: len(data) // 2])
    with pytest.raises(recgo.RecgoIOError, match=r"t\.txt\.gz line \d+: truncated or corrupt gzip"):
        for _ in recgo.DataPipeline(CriteoSource(trunc), feats, 256, depth=depth):
            pass
    missing = write(tmp_path, "m.csv", "a,b\n1,2\n")
    with pytest.raises(recgo.InvalidInputError, match=r"m\.csv line 1: missing column \"c\""):
        recgo.DataPipeline(CSVSource(missing, [Column("a"), Column("c")]), [Feature("a").mod(3)], 4, depth=depth)
    # Skipped and counted on request.
    with recgo.DataPipeline(CriteoSource(short, skip_bad=True), feats, 16, depth=depth) as pipe:
        assert sum(b.labels.numel() for b in pipe) == 41
        assert pipe.stats()["skipped"] == 1


def test_early_stop_leaves_no_goroutine() -> None:
    base = recgo.pipeline.goroutines()
    src = SyntheticSource(1_000_000, [SyntheticField("a", 1000, 1.0)], dense=2)
    pipe = recgo.DataPipeline(src, [Feature("a").mod(100)], 64, depth=4, threads=3)
    next(pipe)
    assert recgo.pipeline.goroutines()[1] == 4  # one reader and three workers
    pipe.close()
    total, running = recgo.pipeline.goroutines()
    assert running == 0
    assert total <= base[0]
    pipe = recgo.DataPipeline(src, [Feature("a").mod(100)], 64, depth=2)
    next(pipe)
    del pipe  # dropping the object stops it too
    assert recgo.pipeline.goroutines()[1] == 0


def test_sharding_by_rank_covers_the_data() -> None:
    src = SyntheticSource(1000, [SyntheticField("a", 50, 1.0, pooling=2.0)], dense=1, seed=3)
    feats = [Feature("a").mod(1000)]
    full = torch.cat([b.dense[:, 0] for b in recgo.DataPipeline(src, feats, 100, depth=0)])
    parts = [torch.cat([b.dense[:, 0] for b in recgo.DataPipeline(src, feats, 100, depth=2, rank=r, world_size=3)])
             for r in range(3)]
    for r in range(3):
        assert torch.equal(parts[r], full[r::3])


def test_fit_and_generate_criteo_file(tmp_path: Path) -> None:
    fitted = CriteoSource(_need(CRITEO)).fit(max_rows=4000, samples=2000)
    assert len(fitted.fields) == 39 and fitted.dense == 13
    assert all(0 <= f.coverage <= 1 and f.rows >= 1 for f in fitted.fields)
    out = tmp_path / "gen.txt"
    assert fitted.write_criteo(out, 2000) == 2000
    back = recgo.DataPipeline(CriteoSource(out), [Feature("C3").mod(10**9)], 500, depth=1)
    first = next(back)
    assert first.labels.numel() == 500
    gen = recgo.DataPipeline(fitted, [Feature("C3").mod(10**9)], 500, depth=0)
    assert torch.equal(next(gen).sparse.values(), first.sparse.values() & 0xFFFFFFFF)


# A minimal Parquet writer (one required INT64 column "a", PLAIN pages, thrift compact by hand), so
# that the sizes a file declares can be forged without a Parquet library.
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _zz(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _struct(*fields: tuple[int, int, bytes]) -> bytes:
    out, last = bytearray(), 0
    for fid, typ, payload in fields:  # ids ascending, each within 15 of the last
        out += bytes([(fid - last) << 4 | typ]) + payload
        last = fid
    return bytes(out + b"\x00")


def _list(typ: int, items: list[bytes]) -> bytes:
    return bytes([len(items) << 4 | typ]) + b"".join(items)


I32, I64, BIN, LIST, STRUCT = 5, 6, 8, 9, 12


def _parquet(groups: list[list[int]], rows: list[int] | None = None, page_values: list[int] | None = None) -> bytes:
    """A file of one row group per list of values; rows and page_values forge what each declares."""
    body, chunks = bytearray(b"PAR1"), []
    for g, vals in enumerate(groups):
        data = b"".join(v.to_bytes(8, "little", signed=True) for v in vals)
        nv = page_values[g] if page_values else len(vals)
        header = _struct((1, I32, _zz(0)), (2, I32, _zz(len(data))), (3, I32, _zz(len(data))),
                         (5, STRUCT, _struct((1, I32, _zz(nv)), (2, I32, _zz(0)), (3, I32, _zz(3)), (4, I32, _zz(3)))))
        off = len(body)
        body += header + data
        meta = _struct((1, I32, _zz(2)), (2, LIST, _list(I32, [_zz(0)])), (3, LIST, _list(BIN, [_varint(1) + b"a"])),
                       (4, I32, _zz(0)), (5, I64, _zz(len(vals))), (6, I64, _zz(len(header + data))),
                       (7, I64, _zz(len(header + data))), (9, I64, _zz(off)))
        n = rows[g] if rows else len(vals)
        chunks.append(_struct((1, LIST, _list(STRUCT, [_struct((2, I64, _zz(off)), (3, STRUCT, meta))])),
                              (2, I64, _zz(len(data))), (3, I64, _zz(n))))
    schema = [_struct((4, BIN, _varint(6) + b"schema"), (5, I32, _zz(1))),
              _struct((1, I32, _zz(2)), (3, I32, _zz(0)), (4, BIN, _varint(1) + b"a"))]
    total = sum(rows) if rows else sum(map(len, groups))
    footer = _struct((1, I32, _zz(1)), (2, LIST, _list(STRUCT, schema)), (3, I64, _zz(total)), (4, LIST, _list(STRUCT, chunks)))
    return bytes(body + footer) + len(footer).to_bytes(4, "little") + b"PAR1"


def _read_ids(path: Path, skip_bad: bool = False) -> tuple[list[int], int]:
    ids: list[int] = []
    with recgo.DataPipeline(ParquetSource(path, [Column("a")], skip_bad=skip_bad), [Feature("a")], 2, depth=0) as pipe:
        for b in pipe:
            ids += b.sparse.values().tolist()
        return ids, pipe.stats()["skipped"]


def test_parquet_row_group_shorter_than_declared_raises(tmp_path: Path) -> None:
    """Row group 0 declaring 4 rows but holding 3 read [1, 2, 3] and took its early end for the
    file's: row group 1 was dropped without a word, with or without skip_bad."""
    honest = write(tmp_path, "ok.parquet", _parquet([[1, 2, 3], [4, 5, 6]]))
    assert _read_ids(honest) == ([1, 2, 3, 4, 5, 6], 0)
    short = write(tmp_path, "short.parquet", _parquet([[1, 2, 3], [4, 5, 6]], rows=[4, 3]))
    with pytest.raises(recgo.RecgoIOError, match=r"short\.parquet row 0: cannot read the row group: row group 0, "
                       r"column \"a\": the row group declares 4 rows, its pages hold 3"):
        _read_ids(short)
    assert _read_ids(short, skip_bad=True) == ([4, 5, 6], 4)  # the group fails alone; its rows count as skipped


_FORGED = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
import recgo
from recgo.data import Column, ParquetSource
from recgo.feature import Feature
out = {}
for name in sys.argv[1:]:
    try:
        with recgo.DataPipeline(ParquetSource(name, [Column("a")]), [Feature("a")], 2, depth=0) as pipe:
            out[name] = ["read", sum(b.labels.numel() for b in pipe)]
    except Exception as e:
        out[name] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""


def test_parquet_forged_sizes_raise_and_the_process_survives(tmp_path: Path) -> None:
    """Sizes a file declares were allocated before they were checked: a footer listing 2^31 - 1 row
    groups (188 GB), a footer length of 4 GiB, a page of 2^31 - 1 values (16 GiB) killed the process
    with Go's fatal "out of memory". Read in a child process, under an 8 GiB address-space limit."""
    lst = (b"\x15\x02\x19\x1c\x48\x06schema\x15\x00\x00\x16\x06\x19\xfc" + _varint(2**31 - 1) + b"\x00" * 4)
    honest = _parquet([[1, 2, 3]])
    files = {
        "list.parquet": b"PAR1" + lst + len(lst).to_bytes(4, "little") + b"PAR1",
        "len.parquet": honest[:-8] + (0xFFFFFFF0).to_bytes(4, "little") + b"PAR1",
        "values.parquet": _parquet([[1, 2, 3]], page_values=[2**31 - 1]),
    }
    paths = [str(write(tmp_path, name, data)) for name, data in files.items()]
    run = subprocess.run([sys.executable, "-c", _FORGED, *paths], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    want = {"list.parquet": r"list\.parquet: corrupt Parquet footer: a list of 2147483647 elements has 4 bytes left",
            "len.parquet": r"len\.parquet: corrupt Parquet footer: the footer length 4294967280 is past the file's \d+ bytes",
            "values.parquet": r"values\.parquet row 0: cannot read the row group: row group 0, column \"a\": page 0 at "
                              r"byte 4 declares 2147483647 values, past the 67108864 a page may hold"}
    for path in paths:
        kind, msg = got[path]
        assert kind == "RecgoIOError", (path, kind, msg)
        assert re.search(want[Path(path).name], msg), (path, msg)
    forged = write(tmp_path, "two.parquet", _parquet([[1, 2, 3], [4, 5, 6]], page_values=[2**31 - 1, 3]))
    assert _read_ids(forged, skip_bad=True) == ([4, 5, 6], 3)
