"""Several Criteo day files as one training run (``recgo train --data day_*.gz``).

The rule: the files are read in natural order (digit runs compared as numbers, so ``day_2`` comes
before ``day_10``; :func:`data_files`), one after another as one stream; every line of every file but
the last trains, and the last file is split as a single file is (:class:`~recgo.train.data.CriteoFile`:
its last ``validation_fraction`` of lines held out). One file is therefore exactly the one-file run,
and the reader's position (file number, row) makes a resume exact across file boundaries. Each earlier
file's row count (lines, blank lines at its very end not counted, as the Go reader skips them) is
counted once per file version and cached."""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from bisect import bisect_right
from itertools import accumulate
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError, RecgoIOError
from .._textfiles import expand_paths, natural_key, open_binary, refuse_repeats
from ._files import derived_path, write_once
from ._inputs import _CHUNK, _bad_gzip
from .data import Batch, CriteoFile, _label_check


def data_files(data: list[str]) -> list[str]:
    """The training job's data files: each glob pattern expanded (:func:`recgo._textfiles.expand_paths`),
    all of them in natural order. Raises ``InvalidInputError`` for a path that is not a file and for a
    file given twice (by any path), ``RecgoIOError`` for a pattern that matches nothing."""
    found = sorted(expand_paths(list(data), "data"), key=natural_key)
    for f in found:
        if not Path(f).is_file():
            raise InvalidInputError(f"data: {f} is not a file")
    refuse_repeats(found, "data")
    return found


def count_rows(path: Path) -> int:
    """The rows of a Criteo file (plain or gzip) as the Go reader reads them: its lines, those made of
    line endings only at its very end not counted. Counted once per file version (resolved path, size,
    modification time) and cached under the temporary folder."""
    try:
        st = path.stat()
    except OSError as exc:
        raise RecgoIOError(f"{path}: {exc}") from exc
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]

    def write(tmp: Path) -> None:
        tmp.write_text(f"{_count(path)}\n")

    cached = write_once(derived_path("recgo-rowcounts", f"{key}.rows"), write)
    try:
        return int(cached.read_text())
    except (OSError, ValueError) as exc:
        raise RecgoIOError(f"{cached}: unreadable row count ({exc}); remove it") from exc


def _count(path: Path) -> int:
    rows = newlines = 0
    try:
        with open_binary(path) as src:
            while chunk := src.read(_CHUNK):
                kept = chunk.rstrip(b"\r\n")
                if kept:  # the last row ends in this chunk (so far): the lines before it, and it
                    rows = newlines + kept.count(b"\n") + 1
                newlines += chunk.count(b"\n")
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise _bad_gzip(path, exc) from exc
    except OSError as exc:
        raise RecgoIOError(f"{path}: {exc}") from exc
    return rows


class CriteoFiles(CriteoFile):
    """Labelled Criteo files trained as one stream (the module's rule): every row of ``paths[:-1]``, then
    the training lines of the last file, whose last ``validation_fraction`` is the validation set."""

    def __init__(self, paths: list[str | os.PathLike[str]], batch_size: int = 1024, rows: int = 100_000,
                 validation_fraction: float = 0.1, progress: bool = False) -> None:
        if len(paths) < 2:
            raise InvalidInputError("CriteoFiles: give two or more files (CriteoFile reads one)")
        self.paths = [Path(p) for p in paths]
        counts = [count_rows(p) for p in self.paths[:-1]]
        self._before = sum(counts)
        self._ends = list(accumulate(counts))  # global training row where each earlier file ends
        super().__init__(self.paths[-1], batch_size, rows, validation_fraction, progress)

    def _data_name(self) -> str:
        return f"{self.paths[0]} .. {self.path} ({len(self.paths)} files)"

    def _train_source(self) -> Any:
        from ..data import CriteoSource

        return CriteoSource([*self.paths[:-1], self._train], needs_labels=True)

    def _train_rows(self) -> int:
        return self._before + self._n_train

    def _where(self, g: int) -> tuple[Path, int]:
        """The file and 1-based line of global training row ``g``."""
        i = bisect_right(self._ends, g)
        return self.paths[i], g - (self._ends[i - 1] if i else 0) + 1

    def _check_train(self, batch: Batch, k: int) -> None:
        labels = batch.labels
        bad = ~((labels == 0) | (labels == 1))
        if not bool(bad.any()):
            return
        j = int(bad.nonzero()[0, 0])
        b, n, r, w = self.batch_size, self.world_size, self.rank, self.shuffle_rows
        if not w:
            path, line = self._where((k * b + j) * n + r)
            _label_check(labels[j:j + 1], path, lambda _: line)
            return
        first = (k * b + j) // w * w
        last = min(first + w, (self._train_rows() - r + n - 1) // n) - 1
        (p0, l0), (p1, l1) = self._where(first * n + r), self._where(last * n + r)
        _label_check(labels[j:j + 1], p0, lambda _: f"line {l0} .. {p1} line {l1} (one of these rows; shuffled "
                                                    f"in windows of {w} rows)")
