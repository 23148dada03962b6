"""How recgo's command line shows warnings: recgo's own as one ``warning: ...`` line, as it prints its
errors (Python's default adds the file, line and source of the ``warnings.warn`` call, which tells a
user of ``recgo train`` nothing); warnings from other packages keep Python's format."""

from __future__ import annotations

import contextlib
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, TextIO

_PACKAGE = Path(__file__).resolve().parent


def _from_recgo(filename: str) -> bool:
    try:
        return Path(filename).resolve().is_relative_to(_PACKAGE)
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Within the block, a warning raised from recgo's code prints as ``warning: <message>`` on stderr
    (the filters still decide whether it shows at all)."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if not _from_recgo(filename):
            shown(message, category, filename, lineno, file, line)
            return
        out: Any = file if file is not None else sys.stderr
        try:
            out.write(f"warning: {message}\n")
        except OSError:  # as Python's own: a closed stderr loses the warning, not the run
            pass

    warnings.showwarning = show
    try:
        yield
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = shown
