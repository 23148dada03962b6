#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv with the pinned torch, the
# TorchRec trio used for side-by-side comparisons, and the test tools. Uses uv, whose per-user cache
# hard-links packages, so a second clone on the same machine does not download torch's CUDA wheels
# again. Exits within a second when .venv already matches the pins (a stamp records them).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${RECGO_CACHE:-$HOME/.cache/recgo}"
UV_VERSION=0.13.8
PINS=(
  "torch==2.14.1"
  "fbgemm-gpu-cpu==1.9.0"
  # torchrec's own runtime needs, minus the CUDA fbgemm-gpu it names (fbgemm-gpu-cpu provides it)
  "tensordict" "torchmetrics==1.0.3" "tqdm" "pyre-extensions" "numpy"
  "pytest" "hypothesis" "scikit-learn" "matplotlib" "pyyaml" "setuptools" "wheel" "pip"
  "pyarrow==26.0.1"  # writes the Parquet files the reader tests compare against (an independent writer)
)
TORCHREC="torchrec==1.9.2"
BYTECODE=1  # bump to redo the byte-compilation below in existing environments
stamp_want=$(printf '%s\n' "$UV_VERSION" "${PINS[@]}" "$TORCHREC" "bytecode $BYTECODE" | sha256sum | cut -c1-16)
if [ -x .venv/bin/python ] && [ "$(cat .venv/.recgo-stamp 2>/dev/null)" = "$stamp_want" ]; then
  exit 0
fi
UV="$CACHE/uv-$UV_VERSION/bin/uv"
if [ ! -x "$UV" ]; then
  echo "[env] bootstrapping uv $UV_VERSION"
  python3 -m pip install --quiet --target "$CACHE/uv-$UV_VERSION" "uv==$UV_VERSION"
fi
export UV_CACHE_DIR="$CACHE/uv-cache" UV_LINK_MODE=hardlink
[ -x .venv/bin/python ] || "$UV" venv --quiet --python python3 .venv
echo "[env] installing torch, fbgemm-gpu-cpu, torchrec and test tools into .venv (first time: a few GB)"
"$UV" pip install --python .venv/bin/python "${PINS[@]}"
"$UV" pip install --python .venv/bin/python --no-deps "$TORCHREC"
# uv installs no .pyc files, and where PYTHONDONTWRITEBYTECODE is set (this machine's shell sets it)
# no import writes them either: every process compiled ~1,200 modules of torch, sympy and torchrec
# from source, 6 of `import torchrec`'s 12 s, in each of the test suite's spawned ranks. Compiled
# once here. (torch's testing/_internal/py312_intrinsics.py is Python 3.12 syntax and never imported
# on 3.11: its SyntaxError is left out of the report, the rest of the tree is compiled.)
echo "[env] byte-compiling .venv's packages (once)"
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
.venv/bin/python -m compileall -q -j 0 -x 'py312_intrinsics' "$site" >/dev/null || {
  echo "[env] compileall reported errors in $site (imports compile those modules from source, as before)"; }
echo "$stamp_want" > .venv/.recgo-stamp
