"""Files the main job derives from its inputs and keeps across runs, under the temporary folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from ..errors import RecgoIOError


def derived_path(folder: str, name: str) -> Path:
    """Where a derived file lives: ``<temporary folder>/<folder>/<name>``."""
    return Path(tempfile.gettempdir()) / folder / name


def write_once(target: Path, write: Callable[[Path], None]) -> Path:
    """``target``, first written by ``write(tmp)`` when absent. ``write`` fills a fresh file of its own
    beside the target (``<name>.<random>.tmp``) that is then renamed into place, so concurrent writers
    (the ranks of one job, or threads) never expose a partial file; what they write is the same.
    OSErrors become RecgoIOError."""
    if target.exists():
        return target
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
        write(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        raise RecgoIOError(f"{target}: {exc}") from exc
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return target
