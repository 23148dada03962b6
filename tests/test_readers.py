"""recgo.data sources through the Go readers: batches equal a Python reader + FeatureEngine run.

The reference parses each format with plain Python (str.split, int(), the csv module), feeds the
FeatureEngine with the same fields, and compares value for value; real samples come from
../shared/data (skipped when absent) and generated files cover gzip, CSV sequences and Parquet.
Malformed files raise the named error.
"""

from __future__ import annotations

import csv
import gzip
import math
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
    with pq.ParquetWriter(tmp_path / "gap.parquet", schema) as w:  # row groups of 2, 0 and 1 rows
        for part in (pa.table({"label": [1.0, 0.0], "a": [1, 2]}, schema=schema), empty,
                     pa.table({"label": [1.0], "a": [3]}, schema=schema)):
            w.write_table(part)
    files = [tmp_path / "empty.parquet", tmp_path / "gap.parquet", tmp_path / "empty.parquet"]
    cols = [Column("label", "label"), Column("a")]
    got = [b.sparse["a"].values().tolist() for b in recgo.DataPipeline(ParquetSource(files, cols), [Feature("a")], 2)]
    assert got == [[1, 2], [3]]
    assert list(recgo.DataPipeline(ParquetSource(files[0], cols), [Feature("a")], 2)) == []

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
