"""Every Python source of the package compiles without a warning: an invalid escape sequence in a
docstring (``\\ s``) is a DeprecationWarning on Python 3.11, a SyntaxWarning from 3.12 and meant to
become an error; before session 37 ``recgo/modules/_weight_grads.py`` had one, printed at every import
of a fresh install."""

from __future__ import annotations

import warnings
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "recgo"


def test_sources_compile_without_warnings() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                compile(path.read_text(), str(path), "exec")
            except (SyntaxError, Warning) as e:
                bad.append(f"{path.relative_to(PACKAGE)}: {e}")
    assert not bad, "\n".join(bad)
