"""Opening the user's data files as bytes, plain or gzip (recognised by its magic bytes, as recgo's Go
readers do): shared by the training job's inputs and the planner's Criteo profiling; reading a
whole small file (a config, a profile) only when it is a regular file; and expanding the glob
patterns in data paths (:func:`expand_paths`, for every source and the training job's ``--data``)."""

from __future__ import annotations

import glob
import gzip
import os
import re
import stat
from pathlib import Path
from typing import IO, Any

from .errors import InvalidInputError, RecgoIOError

#: The characters that make a data path a glob pattern (when no file has that name).
GLOB_CHARS = frozenset("*?[")

#: The most bytes :func:`read_regular` reads (configs and profiles are far smaller).
READ_LIMIT = 1 << 30


def read_regular(path: str | os.PathLike[str], what: str, limit: int = READ_LIMIT) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``. A missing file, a directory, a pipe,
    socket or device (``/dev/zero`` was read until memory ran out, a FIFO blocked the read until a
    writer came) and a larger file raise :class:`RecgoIOError` naming ``what`` (as the engine's
    ``internal/files`` does for the files it reads)."""
    p = Path(path)
    try:
        st = p.stat()
        if stat.S_ISDIR(st.st_mode):
            raise RecgoIOError(f"{what}: {p} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise RecgoIOError(f"{what}: {p} is not a regular file (a pipe, socket or device): give the file itself")
        if st.st_size > limit:
            raise RecgoIOError(f"{what}: {p}: more than the {limit}-byte limit")
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise RecgoIOError(f"{what}: cannot read {p}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise RecgoIOError(f"{what}: {p}: more than the {limit}-byte limit")
    return data


def is_gzip(path: Path) -> bool:
    """Whether the file starts with gzip's magic bytes."""
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when it is gzip."""
    return gzip.open(path, "rb") if is_gzip(path) else path.open("rb")


def natural_key(path: str) -> list[Any]:
    """Sort key that compares digit runs as numbers (``day_2`` < ``day_10``), then the path as is."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", path)] + [(2, 0, path)]


def expand_paths(paths: list[str], what: str = "data") -> list[str]:
    """``paths`` with each glob pattern replaced by the files it matches, in natural order
    (:func:`natural_key`: ``day_2`` before ``day_10``; so that every rank lists them in the same
    order, which a saved position's file number relies on). A path is a pattern
    when it holds ``*``, ``?`` or ``[`` and names no existing file (a file of that very name is read as
    it is); ``**`` matches any number of folders; folders are not matched. Other paths pass unchanged
    (the reader names a missing one).

    Raises:
        RecgoIOError: a pattern that matches no file, naming it and ``what``.
    """
    out: list[str] = []
    for p in paths:
        if GLOB_CHARS.isdisjoint(p) or os.path.exists(p):
            out.append(p)
            continue
        found = sorted((f for f in glob.glob(p, recursive=True) if os.path.isfile(f)), key=natural_key)
        if not found:
            raise RecgoIOError(f"{what}: the pattern {p!r} matches no file")
        out.extend(found)
    return out


def refuse_repeats(files: list[str], what: str) -> None:
    """Raise :class:`InvalidInputError` naming both paths when two of ``files`` are the same file (the same
    path, another spelling of it, a symbolic or hard link: compared by device and inode, as the Go
    readers do), which would be read twice. Files that cannot be examined are left to the reader."""
    seen: dict[tuple[int, int], str] = {}
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise InvalidInputError(f"{what}: {f} is given twice (also as {seen[key]}): each file is read once")
        seen[key] = f
