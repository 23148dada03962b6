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
stamp_want=$(printf '%s\n' "$UV_VERSION" "${PINS[@]}" "$TORCHREC" | sha256sum | cut -c1-16)
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
echo "$stamp_want" > .venv/.recgo-stamp
