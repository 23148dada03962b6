"""`pip wheel .` builds one self-contained wheel for every Python: py3-none-manylinux, imports with no
Go, HiGHS, TorchRec or source tree around, in fresh virtual environments of two Python versions, where
the installed `recgo train` script trains."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("RECGO_CACHE", Path.home() / ".cache" / "recgo"))
UV = next(iter(sorted(glob.glob(str(CACHE / "uv-*" / "bin" / "uv")))), None) or shutil.which("uv")

_spec = importlib.util.spec_from_file_location("recgo_setup", ROOT / "setup.py")
recgo_setup = importlib.util.module_from_spec(_spec)  # setup.py's tag logic (setup() runs only as __main__)
_spec.loader.exec_module(recgo_setup)


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


def test_wheel_is_python_independent_manylinux_and_carries_the_library(wheel: Path) -> None:
    tags = wheel.name[: -len(".whl")].split("-")[-3:]
    assert tags[0] == "py3" and tags[1] == "none", wheel.name
    assert tags[2].startswith("manylinux_") and tags[2].endswith("_x86_64"), wheel.name
    zf = zipfile.ZipFile(wheel)
    names = zf.namelist()
    assert "recgo/librecgo.so" in names and "recgo/__init__.py" in names and "recgo/_abi.py" in names
    assert not any(n.endswith(".h") for n in names)
    assert "recgo/feature/configs/criteo.yaml" in names  # the example config docs/features.md names ships
    meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for extra in ("plots", "yaml", "compare"):
        assert f"Provides-Extra: {extra}" in meta, meta


def test_platform_tag_follows_the_symbol_versions_objdump_reports(wheel: Path, tmp_path: Path) -> None:
    if shutil.which("objdump") is None:
        pytest.skip("needs objdump")
    zipfile.ZipFile(wheel).extract("recgo/librecgo.so", tmp_path)
    lib = tmp_path / "recgo" / "librecgo.so"
    dump = subprocess.run(["objdump", "-T", str(lib)], capture_output=True, text=True, check=True).stdout
    import re

    glibc = max(tuple(map(int, v.split("."))) for v in re.findall(r"\(GLIBC_(\d+\.\d+(?:\.\d+)?)\)", dump))
    cxx = max((tuple(map(int, v.split("."))) for v in re.findall(r"\(GLIBCXX_(\d+\.\d+\.\d+)\)", dump)), default=(0,))
    assert recgo_setup.symbol_versions(lib) == (glibc, cxx)
    want = next(f"manylinux_{g[0]}_{g[1]}_x86_64" for g, c in recgo_setup.MANYLINUX if glibc <= g and cxx <= c)
    assert wheel.name.endswith(f"-py3-none-{want}.whl"), (wheel.name, glibc, cxx)
    # The choice is the oldest policy that covers both: a newer libstdc++ need moves it up.
    assert recgo_setup.MANYLINUX == sorted(recgo_setup.MANYLINUX)


def _interpreter(version: str) -> str | None:
    if UV:
        res = subprocess.run([UV, "python", "find", version], capture_output=True, text=True)
        if res.returncode == 0 and res.stdout.strip():
            return res.stdout.strip()
    for p in sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / f"{version}.*" / "bin" / f"python{version}"))):
        return p
    return shutil.which(f"python{version}")


@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_wheel_installs_and_runs_in_a_fresh_venv(wheel: Path, tmp_path: Path, version: str) -> None:
    if UV is None:
        pytest.skip("needs uv")
    py = _interpreter(version)
    if py is None:
        pytest.skip(f"no Python {version} on this machine")
    env = dict(os.environ, UV_CACHE_DIR=str(CACHE / "uv-cache"), UV_LINK_MODE="hardlink")
    venv = tmp_path / "venv"
    subprocess.run([UV, "venv", "-q", "--python", py, str(venv)], check=True, env=env, capture_output=True)
    # The wheel with its declared dependencies (torch, numpy), from uv's cache only: nothing downloaded.
    res = subprocess.run([UV, "pip", "install", "-q", "--offline", "--python", str(venv / "bin" / "python"), str(wheel)],
                         env=env, capture_output=True, text=True, timeout=600)
    # uv names an offline miss "offline" (older releases) or "the network was disabled" (0.13)
    if res.returncode != 0 and any(w in res.stderr.lower() for w in ("offline", "network was disabled")):
        pytest.skip(f"uv's cache lacks torch for Python {version}: {res.stderr.strip()[-300:]}")
    assert res.returncode == 0, res.stderr
    code = (
        "import importlib.util, sys, torch, recgo\n"
        f"assert sys.version.startswith({version!r}), sys.version\n"
        "assert recgo.__file__.startswith(sys.prefix), recgo.__file__\n"
        "assert importlib.util.find_spec('torchrec') is None\n"
        "assert recgo.library_version() == recgo.__version__\n"
        "cfg = [recgo.EmbeddingBagConfig(name='t', embedding_dim=3, num_embeddings=5, feature_names=['f'])]\n"
        "m = recgo.EmbeddingBagCollection(tables=cfg)\n"
        "kjt = recgo.KeyedJaggedTensor.from_lengths_sync(['f'], torch.tensor([0, 4, 4]), torch.tensor([1, 2]))\n"
        "out = m(kjt).values()\n"
        "w = m.embedding_bags['t'].weight.detach()\n"
        "assert torch.equal(out, torch.stack([w[0], w[4] + w[4]])), (out, w)\n"
        "print('ok', sys.version.split()[0])\n"
    )
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONNOUSERSITE": "1"}  # no Go on PATH
    run = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=clean, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"ok {version}"), run.stdout
    # The installed console script trains (TorchRec, PyYAML and matplotlib absent: the report has no PNG).
    train = subprocess.run([str(venv / "bin" / "recgo"), "train", "--backend", "recgo", "--steps", "6",
                            "--batch-size", "128", "--out", str(tmp_path / "report")],
                           env=clean, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-2000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["summary"]["auc_recgo"] == report["backends"]["recgo"]["final_auc"]
    assert 0.0 < report["backends"]["recgo"]["final_auc"] < 1.0, report["summary"]
    assert len(report["backends"]["recgo"]["train_loss"]) == 6
    usage = subprocess.run([str(venv / "bin" / "recgo"), "--help"], env=clean, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: recgo [-h] {train,profile,plan}"), usage.stdout[:200]
    deps = subprocess.run(["ldd", str(next(venv.glob("lib/python*/site-packages/recgo/librecgo.so")))],
                          capture_output=True, text=True).stdout
    assert "highs" not in deps.lower() and "not found" not in deps, deps
