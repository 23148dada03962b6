"""Criteo DAC text files as KJT batches through recgo's FeatureEngine (for profiling and replay).

Each categorical column C1..C26 becomes one table: its 8-hex-digit value is hashed and reduced
modulo ``rows`` by the FeatureEngine; an empty value is an empty bag (the sample does not cover
that table).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any, Iterator

from .._textfiles import expand_paths, open_binary, refuse_repeats
from ..errors import InvalidInputError, RecgoIOError
from ..tensors import integer
from ..sparse import KeyedJaggedTensor
from ._profile import TableSpec

COLUMNS = [f"C{i}" for i in range(1, 27)]


def criteo_tables(rows: int = 100_000, dim: int = 64) -> list[TableSpec]:
    """One table per categorical column, ``rows`` hash buckets each."""
    return [TableSpec(c, rows, dim) for c in COLUMNS]


def criteo_batches(path: str | os.PathLike[str], rows: int = 100_000, batch_size: int = 1024,
                   has_label: bool | None = None) -> Iterator[KeyedJaggedTensor]:
    """Yield KJTs (keys C1..C26) of hashed categorical IDs read from a Criteo TSV file (plain or gzip),
    or from each file a glob pattern matches, in natural order (:func:`recgo._textfiles.expand_paths`;
    a file's last batch may be short).

    ``has_label`` defaults to detection from each file's first line (40 fields: train with label, 39:
    test); every line must then have that many fields.

    Raises:
        InvalidInputError: a line with another number of fields, or bytes that are not ASCII (named
            by file and line), a batch size below 1, or one file matched twice (a file and a link to it).
        RecgoIOError: the file cannot be read, or is a damaged gzip stream; a pattern matching no file.
    """
    from ..feature import Feature, FeatureEngine

    batch_size = integer("batch_size", batch_size)
    if batch_size < 1:
        raise InvalidInputError(f"criteo: batch_size must be ≥ 1, got {batch_size}")
    engine = FeatureEngine([Feature(c, dtype="bytes").hash().mod(rows) for c in COLUMNS])
    files = expand_paths([os.fspath(path)], "criteo")
    refuse_repeats(files, "criteo")  # a pattern matching a file and a link to it would count it twice
    for p in files:
        yield from _file_batches(Path(p), engine, batch_size, has_label)


def _file_batches(p: Path, engine: Any, batch_size: int, has_label: bool | None) -> Iterator[KeyedJaggedTensor]:
    """:func:`criteo_batches` of one file, through ``engine``."""
    from ..feature import encode_strings

    try:
        fh = open_binary(p)
    except OSError as exc:
        raise RecgoIOError(f"criteo: {exc}") from exc
    width = None if has_label is None else (40 if has_label else 39)
    try:
        with fh:
            cols: list[list[list[str]]] = [[] for _ in COLUMNS]
            for n, raw in enumerate(fh, 1):
                try:
                    fields = raw.decode("ascii").rstrip("\r\n").split("\t")
                except UnicodeDecodeError as exc:
                    raise InvalidInputError(f"criteo: {p} line {n}: a byte that is not ASCII ({exc.reason} at "
                                            f"{exc.start})") from None
                if width is None:
                    width = len(fields)
                if len(fields) != width or width not in (39, 40):
                    raise InvalidInputError(f"criteo: {p} line {n}: {len(fields)} tab-separated fields, expected "
                                            f"{width if width in (39, 40) else '40 (with a label) or 39'}")
                cats = fields[width - 26:]
                for j, v in enumerate(cats):
                    cols[j].append([v] if v else [])
                if len(cols[0]) == batch_size:
                    yield engine({c: encode_strings(bags) for c, bags in zip(COLUMNS, cols)})
                    cols = [[] for _ in COLUMNS]
            if cols[0]:
                yield engine({c: encode_strings(bags) for c, bags in zip(COLUMNS, cols)})
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise RecgoIOError(f"criteo: {p}: truncated or corrupt gzip stream: {exc}") from exc
