"""Opening the user's data files as bytes, plain or gzip (recognised by its magic bytes, as recgo's Go
readers do): shared by the training job's inputs and the planner's Criteo profiling."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO


def is_gzip(path: Path) -> bool:
    """Whether the file starts with gzip's magic bytes."""
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when it is gzip."""
    return gzip.open(path, "rb") if is_gzip(path) else path.open("rb")
