"""Criteo DAC text files as KJT batches through recgo's FeatureEngine (for profiling and replay).

Each categorical column C1..C26 becomes one table: its 8-hex-digit value is hashed and reduced
modulo ``rows`` by the FeatureEngine; an empty value is an empty bag (the sample does not cover
that table).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from ..errors import RecgoIOError
from ..sparse import KeyedJaggedTensor
from ._profile import TableSpec

COLUMNS = [f"C{i}" for i in range(1, 27)]


def criteo_tables(rows: int = 100_000, dim: int = 64) -> list[TableSpec]:
    """One table per categorical column, ``rows`` hash buckets each."""
    return [TableSpec(c, rows, dim) for c in COLUMNS]


def criteo_batches(path: str | os.PathLike[str], rows: int = 100_000, batch_size: int = 1024,
                   has_label: bool | None = None) -> Iterator[KeyedJaggedTensor]:
    """Yield KJTs (keys C1..C26) of hashed categorical IDs read from a Criteo TSV file.

    ``has_label`` defaults to auto-detection (40 fields: train with label, 39: test).
    """
    from ..feature import Feature, FeatureEngine, encode_strings

    engine = FeatureEngine([Feature(c, dtype="bytes").hash().mod(rows) for c in COLUMNS])
    p = Path(path)
    try:
        fh = p.open("r", encoding="ascii", errors="replace")
    except OSError as exc:
        raise RecgoIOError(f"criteo: {exc}") from exc
    with fh:
        cols: list[list[list[str]]] = [[] for _ in COLUMNS]
        for line in fh:
            fields = line.rstrip("\n").split("\t")
            label = has_label if has_label is not None else len(fields) == 40
            cats = fields[14:40] if label else fields[13:39]
            for j, v in enumerate(cats):
                cols[j].append([v] if v else [])
            if len(cols[0]) == batch_size:
                yield engine({c: encode_strings(bags) for c, bags in zip(COLUMNS, cols)})
                cols = [[] for _ in COLUMNS]
        if cols[0]:
            yield engine({c: encode_strings(bags) for c, bags in zip(COLUMNS, cols)})
