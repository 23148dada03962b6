"""`pip wheel .` builds a self-contained wheel: it imports with no Go, HiGHS or source tree around."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True, cwd=ROOT, capture_output=True, text=True,
    )
    wheels = list(out.glob("recgo-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_is_platform_tagged_and_carries_the_library(wheel: Path) -> None:
    assert "linux_x86_64" in wheel.name or "manylinux" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "recgo/librecgo.so" in names
    assert "recgo/__init__.py" in names
    assert not any(n.endswith(".h") for n in names)


def test_wheel_imports_without_go_highs_or_sources(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, text=True)
    lib = site / "recgo" / "librecgo.so"
    deps = subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
    assert "highs" not in deps.lower() and "not found" not in deps, deps
    code = (
        "import sys, recgo; "
        f"assert recgo.__file__.startswith({str(site)!r}), recgo.__file__; "
        "assert recgo.library_version() == recgo.__version__; "
        "import recgo._lib as L; print(L.library_path())"
    )
    # A PATH without Go; no HiGHS anywhere but inside librecgo.so; the venv's torch via its site-packages.
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path), "PYTHONNOUSERSITE": "1"}
    res = subprocess.run([sys.executable, "-S", "-c", "import site; site.main(); " + code], env=env,
                         cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert str(site) in res.stdout
