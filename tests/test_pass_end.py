"""A DataPipeline pass that trains on nothing, or on far less than the data, says so: before session 35
each of these read as an empty (or nearly empty) epoch with no error and no warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import recgo
from recgo.data import Column, CriteoSource, CSVSource, ParquetSource
from recgo.feature import Feature

GOOD = "1" + "\t3" * 13 + "\tab" * 26 + "\n"  # a training line (40 fields)
TEST = "3\t" * 13 + "\t".join(["ab"] * 26) + "\n"  # a test file's line (39 fields, no label)
C1 = [Feature("C1").mod(10)]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def run(source: object, batch_size: int = 4, **kwargs: object) -> tuple[int, list[str], dict]:
    """Read a pass; the samples, the warnings it gave and its stats."""
    pipe = recgo.DataPipeline(source, C1, batch_size, depth=0, **kwargs)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        n = sum(b.labels.numel() for b in pipe)
    return n, [str(w.message) for w in got if "skip_bad" in str(w.message)], pipe.stats()


@pytest.mark.parametrize(("world", "rank"), [(1, 0), (4, 1), (64, 3)])
def test_a_test_file_read_with_skip_bad_raises(tmp_path: Path, world: int, rank: int) -> None:
    """The known trap: a Criteo test file read with labels=True under skip_bad had every line skipped
    and counted, an empty epoch. Now the file (a share of 8 rows or more: Go, at the file's end) or the
    pass (any share: at its end) raises, naming the file and the first skipped line's reason."""
    path = write(tmp_path, "test.txt", TEST * 200)
    with pytest.raises(recgo.InvalidInputError, match=r"test\.txt: all \d+ rows .*malformed and skipped \(skip_bad\)"
                       r".*line \d+ column \d+.*read it with labels=False"):
        run(CriteoSource(path, skip_bad=True), rank=rank, world_size=world)


def test_most_rows_skipped_warns_once_with_the_reason(tmp_path: Path) -> None:
    path = write(tmp_path, "mixed.txt", GOOD * 10 + TEST * 30)
    n, warned, stats = run(CriteoSource(path, skip_bad=True))
    assert n == 10 and stats["skipped"] == 30
    assert len(warned) == 1
    assert "skipped 30 of rank 0's 40 rows (75%), training on 10" in warned[0]
    assert "The first skipped row: " + str(path) + " line 11 column " in warned[0]
    assert stats["first_skip"].startswith(f"{path} line 11 column ")
    # a few bad rows: no warning; none: no reason
    assert run(CriteoSource(write(tmp_path, "few.txt", GOOD * 30 + TEST * 2), skip_bad=True))[1] == []
    assert run(CriteoSource(write(tmp_path, "good.txt", GOOD * 9), skip_bad=True))[2]["first_skip"] == ""


def test_no_rows_at_all_raises(tmp_path: Path) -> None:
    """Empty files, a CSV of a header only, a Parquet file of no rows: an empty pass, silently."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.table({"label": pa.array([], pa.float64()), "C1": pa.array([], pa.int64())}),
                   tmp_path / "none.parquet")
    sources = [CriteoSource([write(tmp_path, "a.txt", ""), write(tmp_path, "b.txt", "")]),
               CSVSource(write(tmp_path, "h.csv", "label,C1\n"), [Column("label", "label"), Column("C1")]),
               ParquetSource(tmp_path / "none.parquet", [Column("label", "label"), Column("C1")])]
    for src in sources:
        with pytest.raises(recgo.InvalidInputError, match="the data holds no rows"):
            run(src)
    # an empty file among others is read as nothing
    assert run(CriteoSource([tmp_path / "a.txt", write(tmp_path, "g.txt", GOOD * 3)]))[0] == 3


def test_a_rank_without_rows_raises(tmp_path: Path) -> None:
    path = write(tmp_path, "small.txt", GOOD * 5)
    assert run(CriteoSource(path), rank=4, world_size=8)[0] == 1
    with pytest.raises(recgo.InvalidInputError, match="rank 5 of a world of 8 gets no rows: the data holds 5 rows"):
        run(CriteoSource(path), rank=5, world_size=8)


def test_drop_last_dropping_every_batch_raises(tmp_path: Path) -> None:
    path = write(tmp_path, "small.txt", GOOD * 5)
    assert run(CriteoSource(path), batch_size=5, drop_last=True)[0] == 5
    with pytest.raises(recgo.InvalidInputError, match="drop_last=True dropped the only batch: rank 0's share "
                                                      "holds 5 samples, fewer than batch_size=8"):
        run(CriteoSource(path), batch_size=8, drop_last=True)


def test_a_pass_resumed_at_its_end_is_not_an_error(tmp_path: Path) -> None:
    src = CriteoSource(write(tmp_path, "small.txt", GOOD * 5))
    pipe = recgo.DataPipeline(src, C1, 4, depth=0, drop_last=True)
    assert [b.labels.numel() for b in pipe] == [4]
    end = pipe.position()
    assert list(recgo.DataPipeline(src, C1, 4, depth=0, drop_last=True, position=end)) == []
