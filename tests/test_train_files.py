"""write_once: the main job's derived files appear whole or not at all, once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from recgo.errors import RecgoIOError
from recgo.train._files import write_once


def test_writes_once_and_then_reuses(tmp_path: Path) -> None:
    calls: list[Path] = []

    def write(p: Path) -> None:
        calls.append(p)
        p.write_text("x" * 1000)

    target = tmp_path / "sub" / "f.csv"
    assert write_once(target, write) == target and target.read_text() == "x" * 1000
    assert write_once(target, write) == target
    assert len(calls) == 1 and calls[0] != target  # written beside it, then renamed
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.csv"]


def test_a_failed_write_leaves_nothing_and_names_the_file(tmp_path: Path) -> None:
    def write(p: Path) -> None:
        p.write_text("partial")
        raise OSError("disk full")

    target = tmp_path / "f.csv"
    with pytest.raises(RecgoIOError, match=r"f\.csv: disk full"):
        write_once(target, write)
    assert list(tmp_path.iterdir()) == []


def test_concurrent_writers_never_expose_a_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "f.csv"
    seen: list[str] = []

    def write(p: Path) -> None:
        with p.open("w") as fh:
            for _ in range(2000):
                fh.write("0123456789\n")

    def reader() -> None:
        for _ in range(200):
            if target.exists():
                seen.append(target.read_text())

    threads = [threading.Thread(target=reader)] + [threading.Thread(target=write_once, args=(target, write))
                                                   for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_text() == "0123456789\n" * 2000
    assert all(s == "0123456789\n" * 2000 for s in seen)
