"""Glob patterns in data paths: before session 35 a source given ``part-*.txt`` failed in the reader
with "no such file or directory"; now every source (Criteo, CSV, Parquet), ``recgo train --data`` and
``recgo profile --criteo`` read the files a pattern matches, in natural order, through one function
(:func:`recgo._textfiles.expand_paths`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import recgo
from recgo.data import Column, CriteoSource, CSVSource, ParquetSource
from recgo.feature import Feature

GOOD = "1" + "\t3" * 13 + "\tab" * 26 + "\n"  # a Criteo training line
C1 = [Feature("C1").mod(10)]


def parts(tmp_path: Path, sizes: tuple[int, ...] = (5, 6, 7)) -> list[Path]:
    """Criteo files part-0.txt.. of ``sizes`` lines (written in reverse, so that listing order is not
    name order), and a folder whose name matches the same pattern."""
    out = [tmp_path / f"part-{i}.txt" for i in range(len(sizes))]
    for p, n in reversed(list(zip(out, sizes))):
        p.write_text(GOOD * n, encoding="utf-8")
    (tmp_path / "part-dir.txt").mkdir()
    return out


def rows(pipe: recgo.DataPipeline) -> int:
    """The samples of the pipeline's (rest of the) pass."""
    return sum(int(b.labels.numel()) for b in pipe)


def test_every_source_expands_a_pattern_sorted_files_only(tmp_path: Path) -> None:
    files = [str(p) for p in parts(tmp_path)]
    pattern = str(tmp_path / "part-*.txt")
    assert CriteoSource(pattern).paths == files
    assert CriteoSource([pattern, files[0]]).paths == files + files[:1]  # lists keep their order
    assert CriteoSource(tmp_path / "part-[12].txt").paths == files[1:]  # a PathLike too
    assert CSVSource(str(tmp_path / "part-?.txt"), [Column("a", "dense")]).paths == files
    assert ParquetSource(pattern, [Column("a", "dense")]).paths == files
    assert rows(recgo.DataPipeline(CriteoSource(pattern), C1, 4, depth=0)) == 18


def test_a_patterns_files_come_in_natural_order_for_sources_and_the_training_job(tmp_path: Path) -> None:
    """part-2 before part-10 in a source as in ``recgo train --data``, which sorted their files by two
    rules (a source's in name order: part-10 between part-1 and part-2)."""
    from recgo.train.criteo_files import data_files

    files = [str(p) for p in parts(tmp_path, (1,) * 11)]  # part-0.txt .. part-10.txt
    pattern = str(tmp_path / "part-*.txt")
    assert CriteoSource(pattern).paths == files
    assert data_files([pattern]) == files


def test_a_pattern_matching_no_file_names_it(tmp_path: Path) -> None:
    parts(tmp_path)
    for pattern in (tmp_path / "nothing-*.txt", tmp_path / "part-dir*"):  # no match; folders only
        message = f"CriteoSource: the pattern {str(pattern)!r} matches no file"
        with pytest.raises(recgo.RecgoIOError, match=re.escape(message)):
            CriteoSource(str(pattern))


def test_a_file_named_like_a_pattern_is_read_as_it_is(tmp_path: Path) -> None:
    odd = tmp_path / "day[1].txt"
    odd.write_text(GOOD * 3, encoding="utf-8")
    (tmp_path / "day1.txt").write_text(GOOD * 5, encoding="utf-8")  # what the pattern would match
    assert CriteoSource(str(odd)).paths == [str(odd)]
    assert rows(recgo.DataPipeline(CriteoSource(str(odd)), C1, 2, depth=0)) == 3


@pytest.mark.parametrize("world", [1, 2])
def test_a_position_taken_over_a_pattern_resumes_over_it(tmp_path: Path, world: int) -> None:
    """Positions name their file by number and base name: the sorted expansion gives every rank, and
    the resumed run, the same numbering."""
    parts(tmp_path)
    pattern = str(tmp_path / "part-*.txt")
    for rank in range(world):
        whole = rows(recgo.DataPipeline(CriteoSource(pattern), C1, 2, depth=0, rank=rank, world_size=world))
        pipe = recgo.DataPipeline(CriteoSource(pattern), C1, 2, depth=0, rank=rank, world_size=world)
        first = sum(int(next(pipe).labels.numel()) for _ in range(3))
        pos = pipe.position()
        pipe.close()
        again = recgo.DataPipeline(CriteoSource(pattern), C1, 2, depth=0, rank=rank, world_size=world, position=pos)
        assert first + rows(again) == whole


def test_the_training_job_and_the_profiler_take_a_pattern(tmp_path: Path) -> None:
    from recgo.planner.criteo import criteo_batches
    from recgo.train.loop import TrainConfig

    files = parts(tmp_path)
    cfg = TrainConfig(data=str(tmp_path / "part-1*"))
    cfg.validate()
    assert cfg.data == str(files[1])
    several = TrainConfig(data=str(tmp_path / "part-*.txt"))  # trained as one stream (test_train_multi_files)
    several.validate()
    assert several.data == [str(f) for f in files]
    with pytest.raises(recgo.RecgoIOError, match=r"data: the pattern .*none-\*' matches no file"):
        TrainConfig(data=str(tmp_path / "none-*")).validate()
    got = [int(k.lengths().numel()) // 26 for k in criteo_batches(tmp_path / "part-*.txt", rows=97, batch_size=4)]
    assert got == [4, 1, 4, 2, 4, 3]  # each file in name order, its last batch short


def test_a_file_listed_twice_is_refused_when_the_source_opens(tmp_path: Path) -> None:
    """A file a pattern and a path (or two patterns, or two spellings) both name was read twice
    before session 37, its rows counted twice in the pass without a word; every source refuses it
    now, naming both entries (the Go readers check the expanded list: ``engine/reader/distinct.go``)."""
    files = [str(p) for p in parts(tmp_path)]
    pattern = str(tmp_path / "part-*.txt")
    twice = re.escape(f"file 4 ({files[1]!r}".replace("'", '"')) + ".*are the same file, which would be read twice"
    for paths in ([pattern, files[1]], [pattern, str(tmp_path / "part-[1].txt")]):
        with pytest.raises(recgo.InvalidInputError, match=twice):
            recgo.DataPipeline(CriteoSource(paths), C1, 4, depth=0)
    dotted = str(tmp_path / "." / "part-0.txt")
    with pytest.raises(recgo.InvalidInputError, match="are the same file"):
        CSVSource([files[0], dotted], [Column("a", "dense")], header=False).schema()
    assert rows(recgo.DataPipeline(CriteoSource(files), C1, 4, depth=0)) == 18


def test_the_profiler_refuses_a_pattern_matching_a_file_and_a_link_to_it(tmp_path: Path) -> None:
    """``recgo profile --criteo`` reads its files in Python: a pattern matching a file and a symbolic
    (or hard) link to it counted that file's IDs twice before session 37; it is refused, naming both."""
    from recgo.planner.criteo import criteo_batches

    files = parts(tmp_path)
    (tmp_path / "part-9.txt").symlink_to(files[0])
    with pytest.raises(recgo.InvalidInputError, match=r"part-9.txt is given twice \(also as .*part-0.txt\)"):
        list(criteo_batches(tmp_path / "part-*.txt", rows=97, batch_size=4))
    (tmp_path / "part-9.txt").unlink()
    (tmp_path / "part-9.txt").hardlink_to(files[2])
    with pytest.raises(recgo.InvalidInputError, match=r"part-9.txt is given twice \(also as .*part-2.txt\)"):
        list(criteo_batches(tmp_path / "part-*.txt", rows=97, batch_size=4))
