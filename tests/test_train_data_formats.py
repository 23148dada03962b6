"""The training job's input files as users give them: gzip, labels outside {0, 1}, any event order,
out-of-range IDs, trailing blank lines, the cached split's streaming and clean-up, and the ranks'
epochs on --nproc. Every file is written here, small, into tmp_path."""

from __future__ import annotations

import gzip
import os
import random
import tempfile
import tracemalloc
from pathlib import Path

import pytest
import torch

from recgo.errors import InvalidInputError
from recgo.train import _inputs
from recgo.train import data as train_data
from recgo.train.data import Batch, CriteoFile, TaobaoSequences


@pytest.fixture(autouse=True)
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The derived files (splits, sample CSVs) under this test's folder, not the shared /tmp."""
    d = tmp_path / "derived"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def criteo_lines(n: int, seed: int = 0, labels: list[str] | None = None) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ints = [str(rng.randint(0, 50)) if rng.random() < 0.8 else "" for _ in range(13)]
        cats = [f"{rng.randrange(1 << 32):08x}" if rng.random() < 0.9 else "" for _ in range(26)]
        label = labels[i] if labels else str(rng.randint(0, 1))
        out.append("\t".join([label] + ints + cats) + "\n")
    return out


def rows(batch: Batch) -> list[tuple]:
    """Per sample: label, dense row, and per key its IDs."""
    kjt = batch.sparse
    per_key = []
    for k in kjt.keys():
        jt = kjt[k]
        per_key.append([tuple(v.tolist()) for v in torch.split(jt.values(), jt.lengths().tolist())])
    return [(float(batch.labels[i]), tuple(batch.dense[i].tolist()), tuple(p[i] for p in per_key))
            for i in range(batch.size)]


def take(stream, n: int) -> list[Batch]:
    """The stream's next n batches, copied out of the pipeline's pooled memory."""
    out = []
    for _ in range(n):
        b = next(stream)
        sparse = type(b.sparse)(b.sparse.keys(), b.sparse.values().clone(), lengths=b.sparse.lengths().clone())
        out.append(Batch(b.dense.clone(), sparse, b.labels.clone()))
    return out


def same_batches(a: list[Batch], b: list[Batch]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert rows(x) == rows(y)


# -- 1. gzip Criteo --------------------------------------------------------------------------------

def test_a_gzip_criteo_file_trains_as_the_plain_file(tmp_path: Path) -> None:
    lines = criteo_lines(300)
    plain, gz = tmp_path / "day.txt", tmp_path / "day.txt.gz"
    plain.write_text("".join(lines))
    gz.write_bytes(gzip.compress("".join(lines).encode()))
    a, b = CriteoFile(plain, batch_size=32), CriteoFile(gz, batch_size=32)
    assert a._n_train == b._n_train == 270
    assert b._train.read_text() == "".join(lines[:270]) and b._valpath.read_text() == "".join(lines[270:])
    same_batches(a.validation(), b.validation())
    assert sum(v.size for v in b.validation()) == 30
    same_batches(take(a.stream(depth=0), 10), take(b.stream(depth=0), 10))  # into the second epoch
    assert [r[0] for r in rows(b.validation()[0])] == [float(x.split("\t")[0]) for x in lines[270:302]]


def test_a_bad_line_of_a_gzip_file_is_named_by_its_line(tmp_path: Path) -> None:
    lines = criteo_lines(100)
    lines[95] = "x\tbad\n"  # line 96: in the validation part (the last 10)
    gz = tmp_path / "day.txt.gz"
    gz.write_bytes(gzip.compress("".join(lines).encode()))
    with pytest.raises(InvalidInputError, match=rf"day\.txt\.gz line 96 column 1 \(label\)"):
        CriteoFile(gz, batch_size=8).validation()


def test_a_truncated_gzip_file_is_named(tmp_path: Path) -> None:
    gz = tmp_path / "day.txt.gz"
    gz.write_bytes(gzip.compress("".join(criteo_lines(200)).encode())[:-40])
    with pytest.raises(InvalidInputError, match=r"day\.txt\.gz: truncated or corrupt gzip"):
        CriteoFile(gz, batch_size=8)


# -- 2. gzip UserBehavior --------------------------------------------------------------------------

def userbehavior(users: int = 40, seed: int = 0) -> list[str]:
    """Events grouped by user (ascending), each user's in time order, timestamps distinct per user."""
    rng = random.Random(seed)
    out = []
    for u in range(1, users + 1):
        t = 1_511_500_000 + rng.randrange(1000)
        for _ in range(rng.randint(3, 12)):
            t += rng.randint(1, 50)
            out.append(f"{u},{rng.randint(1, 200)},{rng.randint(1, 15)},pv,{t}\n")
    return out


def same_samples(a: TaobaoSequences, b: TaobaoSequences) -> None:
    assert torch.equal(a._train, b._train) and torch.equal(a._val_samples, b._val_samples)
    for k in a._data:
        assert torch.equal(a._data[k], b._data[k]), k
    same_batches([a.train_batch(i) for i in range(a.batches_per_epoch())],
                 [b.train_batch(i) for i in range(b.batches_per_epoch())])
    same_batches(a.validation(), b.validation())
    assert a.samples_csv().read_text() == b.samples_csv().read_text()


def test_a_gzip_userbehavior_file_gives_the_plain_files_samples(tmp_path: Path) -> None:
    text = "".join(userbehavior())
    plain, gz = tmp_path / "ub.csv", tmp_path / "ub.csv.gz"
    plain.write_text(text)
    gz.write_bytes(gzip.compress(text.encode()))
    a, b = TaobaoSequences(plain, batch_size=16, max_len=4), TaobaoSequences(gz, batch_size=16, max_len=4)
    same_samples(a, b)
    assert a.table_rows == b.table_rows and a._train.shape[0] > 100


# -- 3. labels other than 0/1 ----------------------------------------------------------------------

@pytest.mark.parametrize("bad_line, value, shown", [(7, "-1", "-1"), (150, "2", "2"), (193, "0.5", "0.5")])
def test_a_criteo_label_not_0_or_1_is_named(tmp_path: Path, bad_line: int, value: str, shown: str) -> None:
    labels = ["1" if i % 3 else "0" for i in range(200)]
    labels[bad_line - 1] = value
    f = tmp_path / "c.txt"
    f.write_text("".join(criteo_lines(200, labels=labels)))
    src = CriteoFile(f, batch_size=16)  # lines 1..180 train, 181..200 validate
    want = rf"c\.txt line {bad_line} column 1 \(label\): label {shown} is not 0 or 1"
    with pytest.raises(InvalidInputError, match=want):
        src.validation()
        it = src.stream(depth=0)
        for _ in range(src.batches_per_epoch()):
            next(it)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_bad_label_on_a_rank_is_named_by_the_files_line(tmp_path: Path, rank: int) -> None:
    labels = ["0"] * 200
    labels[41 + rank - 1] = "-1"  # line 41 is rank 0's (row 40), line 42 rank 1's (row 41): both in batch 2
    f = tmp_path / "c.txt"
    f.write_text("".join(criteo_lines(200, labels=labels)))
    src = CriteoFile(f, batch_size=8).shard(rank, 2)
    it = src.stream(depth=0)
    next(it), next(it)  # rows 0..31 of 180: clean
    with pytest.raises(InvalidInputError, match=rf"c\.txt line {41 + rank} column 1 \(label\): label -1 "):
        next(it)


def test_a_criteo_test_file_is_named_as_one(tmp_path: Path) -> None:
    """A file of Criteo's test layout (no label: 39 fields) says so; before, training stopped on 'label ""
    is not a number' or a hex value that is not an integer, and the reader's advice (labels=False, a
    CriteoSource argument) is no way to train."""
    f = tmp_path / "test.txt"
    f.write_text("".join(line.split("\t", 1)[1] for line in criteo_lines(200)))
    src = CriteoFile(f, batch_size=16)
    want = (r"test\.txt line \d+ .*\(the line has 39 fields, as Criteo's unlabelled test files do: I1\.\.I13 and "
            r"C1\.\.C26, no label; training needs the clicks: give a Criteo training file, a label first on each line\)")
    for read in (lambda: next(src.stream(depth=0)), src.validation):
        with pytest.raises(InvalidInputError, match=want) as info:
            read()
        assert "labels=False" not in str(info.value)


# -- 4. any event order ----------------------------------------------------------------------------

def test_userbehavior_events_in_any_order_give_the_same_samples(tmp_path: Path) -> None:
    events = userbehavior(users=50, seed=3)
    shuffled = events[:]
    random.Random(1).shuffle(shuffled)
    by_time = sorted(events, key=lambda e: int(e.split(",")[4]))
    paths = {}
    for name, evs in (("grouped", events), ("shuffled", shuffled), ("by_time", by_time)):
        paths[name] = tmp_path / f"{name}.csv"
        paths[name].write_text("user_id,item_id,category_id,behavior,timestamp\n" + "".join(evs))
    assert by_time != events  # the test means something: users interleave in time
    ref = TaobaoSequences(paths["grouped"], batch_size=16, max_len=5, seed=2)
    for name in ("shuffled", "by_time"):
        same_samples(ref, TaobaoSequences(paths[name], batch_size=16, max_len=5, seed=2))
    # each history is the user's earlier events by time: check one validation sample by hand
    b = ref.validation()[0]
    first_user = [e.split(",") for e in events if e.startswith("1,")]
    hist = b.sparse["hist_item"]
    got = hist.values()[:int(hist.lengths()[0])].tolist()
    items = sorted({int(e.split(",")[1]) for e in events})
    assert got == [items.index(int(e[1])) for e in first_user[:-1]][-5:]


def test_timestamps_may_be_fractional_and_must_be_numbers(tmp_path: Path) -> None:
    f = tmp_path / "ub.csv"
    f.write_text("1,10,1,pv,100.5\n1,11,1,pv,100.25\n1,12,1,pv,99\n2,13,1,pv,5\n2,14,1,pv,6\n")
    s = TaobaoSequences(f, batch_size=1, max_len=5)
    assert s._data["items"].tolist() == [2, 1, 0, 3, 4]  # user 1 by time: items 12, 11, 10
    f.write_text("1,10,1,pv,100\n1,11,1,pv,yesterday\n")
    with pytest.raises(InvalidInputError, match=r"ub\.csv, line 2, column 5 \(timestamp\): expected a number"):
        TaobaoSequences(f, batch_size=1)



@pytest.mark.parametrize("header", ["", "user_id,item_id,category_id,behavior,timestamp\n"])
def test_a_byte_order_mark_hides_no_event(tmp_path: Path, header: str) -> None:
    """A BOM before a headerless file's first event made it look like a header, and it was dropped."""
    events = userbehavior(users=10)
    plain, bom = tmp_path / "plain.csv", tmp_path / "bom.csv"
    plain.write_text(header + "".join(events))
    bom.write_bytes(b"\xef\xbb\xbf" + (header + "".join(events)).encode())
    same_samples(TaobaoSequences(plain, batch_size=8), TaobaoSequences(bom, batch_size=8))

# -- 5. IDs outside int64 --------------------------------------------------------------------------

@pytest.mark.parametrize("col, name", [(1, "user"), (2, "item"), (3, "category")])
def test_an_id_outside_int64_is_named(tmp_path: Path, col: int, name: str) -> None:
    events = userbehavior(users=5)
    fields = events[2].rstrip("\n").split(",")
    fields[col - 1] = str(2 ** 70)
    events[2] = ",".join(fields) + "\n"
    f = tmp_path / "ub.csv"
    f.write_text("".join(events))
    with pytest.raises(InvalidInputError, match=rf"ub\.csv, line 3, column {col} \({name}\): ID {2 ** 70} is "
                                                r"outside the int64 range"):
        TaobaoSequences(f, batch_size=4)


# -- 6. trailing blank lines and line numbers ------------------------------------------------------

@pytest.mark.parametrize("tail", ["\n", "\n\n\n", "\r\n  \n\t\n", " \n"])
def test_trailing_blank_lines_of_a_criteo_file_are_not_lines(tmp_path: Path, tail: str) -> None:
    lines = criteo_lines(100)
    plain, blank = tmp_path / "a.txt", tmp_path / "b.txt"
    plain.write_text("".join(lines))
    blank.write_text("".join(lines) + tail)
    a, b = CriteoFile(plain, batch_size=10), CriteoFile(blank, batch_size=10)
    assert (a._n_train, b._n_train) == (90, 90) and b._valpath.read_text() == "".join(lines[90:])
    same_batches(a.validation(), b.validation())
    assert sum(v.size for v in b.validation()) == 10
    same_batches(take(a.stream(depth=0), 12), take(b.stream(depth=0), 12))


def test_a_blank_line_inside_a_criteo_file_is_named_by_its_line(tmp_path: Path) -> None:
    lines = criteo_lines(100)
    lines[94] = "\n"
    f = tmp_path / "a.txt"
    f.write_text("".join(lines) + "\n\n")
    with pytest.raises(InvalidInputError, match=r"a\.txt line 95: empty line"):
        CriteoFile(f, batch_size=10).validation()


def test_trailing_blank_lines_of_a_userbehavior_file_are_dropped(tmp_path: Path) -> None:
    events = userbehavior(users=10)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("".join(events))
    b.write_text("".join(events) + "1,5\n\n\n")  # a cut last line, then blank lines
    same_samples(TaobaoSequences(a, batch_size=8), TaobaoSequences(b, batch_size=8))
    c = tmp_path / "c.csv"
    c.write_text("".join(events[:5]) + "\n" + "".join(events[5:]))
    with pytest.raises(InvalidInputError, match=r"c\.csv, line 6: 0 of the 5 columns"):
        TaobaoSequences(c, batch_size=8)


# -- 7. the split: streamed, exact at chunk edges, stale copies removed ----------------------------

@pytest.mark.parametrize("text", [
    "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk", "a\r\nbb\r\nccc\r\n\r\n",
    "aaa\t\t\nb\n\n\n  \n", "x\n\ny\nz\n\n", "\ufeffq\nr\ns\nt\n \t\n"])
@pytest.mark.parametrize("chunk", [1, 2, 3, 1 << 20])
@pytest.mark.parametrize("fraction", [0.1, 0.5])
def test_the_split_matches_a_whole_file_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                                              chunk: int, fraction: float) -> None:
    monkeypatch.setattr(_inputs, "_CHUNK", chunk)
    f = tmp_path / f"s{chunk}.txt"
    f.write_bytes(text.encode())
    lines = text.encode().splitlines(keepends=True)
    while lines and not lines[-1].strip():
        lines.pop()
    train, val, n_train = train_data._split_file(f, fraction)
    n_val = max(1, int(len(lines) * fraction))
    assert n_train == len(lines) - n_val
    assert train.read_bytes() == b"".join(lines[:n_train]) and val.read_bytes() == b"".join(lines[n_train:])


def test_the_split_is_streamed_in_constant_memory(tmp_path: Path) -> None:
    f = tmp_path / "big.txt.gz"
    line = criteo_lines(1)[0].encode()
    with gzip.open(f, "wb", compresslevel=1) as fh:
        for _ in range(100):
            fh.write(line * 1000)  # 100,000 lines, about 23 MB
    tracemalloc.start()
    try:
        train, val, n_train = train_data._split_file(f, 0.1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n_train == 90_000 and val.stat().st_size == 10_000 * len(line)
    assert peak < 8 << 20, peak  # a few chunks; the whole file is 23 MB


def test_the_split_is_kept_while_the_file_is_unchanged_and_replaced_when_it_changes(tmp_path: Path,
                                                                                   own_tmp: Path) -> None:
    f = tmp_path / "c.txt"
    f.write_text("".join(criteo_lines(50)))
    train, val, _ = train_data._split_file(f, 0.1)
    mtime = train.stat().st_mtime_ns
    assert train_data._split_file(f, 0.1)[:2] == (train, val) and train.stat().st_mtime_ns == mtime
    other = train_data._split_file(f, 0.2)[0]  # another fraction of the same version: kept beside it
    assert other.exists() and train.exists()
    f.write_text("".join(criteo_lines(60)))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    new_train, _, n_train = train_data._split_file(f, 0.1)
    assert n_train == 54 and new_train.read_text() == "".join(criteo_lines(60)[:54])
    assert not train.exists() and not other.exists()  # the old version's copies are gone
    groups = [p for p in own_tmp.iterdir() if p.name.startswith("recgo-split")]
    assert len(groups) == 1 and [p.name for p in groups[0].iterdir()] == [new_train.parent.name]


# -- 8. ranks in step ------------------------------------------------------------------------------

def test_ranks_take_the_same_batches_per_epoch_and_together_the_global_batch(tmp_path: Path) -> None:
    f = tmp_path / "c.txt"
    f.write_text("".join(criteo_lines(425)))  # 383 training lines, 42 validation lines
    whole = CriteoFile(f, batch_size=128)
    assert whole._n_train == 383
    ranks = [CriteoFile(f, batch_size=64).shard(r, 2) for r in (0, 1)]
    per_epoch = 383 // 128
    streams = [s.stream(depth=0) for s in ranks]
    single = whole.stream(depth=0)
    for epoch in range(3):
        for step in range(per_epoch):
            parts = [take(s, 1)[0] for s in streams]
            assert [s.epoch for s in streams] == [epoch, epoch]
            g = rows(take(single, 1)[0])
            assert len(g) == 128 and rows(parts[0]) == g[0::2] and rows(parts[1]) == g[1::2]
    # resumed from a state saved mid-epoch, a rank still ends the epoch after per_epoch batches
    s = ranks[1].stream(depth=0)
    first = take(s, 1)
    resumed = ranks[1].stream(s.state_dict(), depth=0)
    take(resumed, per_epoch - 1)
    assert resumed.epoch == 0
    same_batches(take(resumed, 1), first)
    assert resumed.epoch == 1


def test_taobao_ranks_stay_in_step(tmp_path: Path) -> None:
    f = tmp_path / "ub.csv"
    f.write_text("".join(userbehavior(users=20, seed=2)))
    whole = TaobaoSequences(f, batch_size=24, max_len=4)
    n = whole._train.shape[0]
    # dropping only its own short last batch, rank 0 would take one batch more than ranks 1 and 2
    assert n == 214 and [len(range(r, n, 3)) // 8 for r in range(3)] == [9, 8, 8]
    streams = [TaobaoSequences(f, batch_size=8, max_len=4).shard(r, 3).stream(depth=0) for r in range(3)]
    per_epoch = n // 24
    for step in range(2 * per_epoch + 1):
        parts = [take(s, 1)[0] for s in streams]
        assert [s.epoch for s in streams] == [step // per_epoch] * 3
        g = rows(whole.train_batch(step))
        assert all(rows(parts[r]) == g[r::3] for r in range(3))
