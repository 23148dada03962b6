"""recgo refuses, at import, a torch older than the oldest release it is tested on (older ones failed
deep inside, or, before about 2.9, pooled outputs into memory a live output still used)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from recgo._torch_version import MIN_TORCH, check

PYTHON_DIR = Path(__file__).resolve().parents[1] / "python"


@pytest.mark.parametrize("version, ok", [("2.11.0", False), ("2.4.1+cpu", False), ("1.13.1", False),
                                         ("2.12.0", True), ("2.14.1+cu130", True), ("3.0.0a0", True),
                                         ("nightly", True)])
def test_versions(version: str, ok: bool) -> None:
    if ok:
        check(version)
    else:
        with pytest.raises(ImportError, match=rf"recgo needs torch >= {MIN_TORCH[0]}\.{MIN_TORCH[1]}, found "
                                              rf"{version.replace('+', '[+]')}: .*pip install 'torch>="):
            check(version)


def test_import_refuses_an_old_torch() -> None:
    code = "import torch; torch.__version__ = '2.9.1'\ntry:\n    import recgo\nexcept ImportError as e:\n    print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(PYTHON_DIR), "PATH": "/usr/bin:/bin"})
    assert out.stdout.startswith("recgo needs torch >= 2.12, found 2.9.1"), out.stdout + out.stderr
