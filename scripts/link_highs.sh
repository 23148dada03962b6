#!/usr/bin/env bash
# Builds HiGHS if needed and points the repository's .cache/highs at it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
bash scripts/build_highs.sh
mkdir -p .cache
target="$RECGO_CACHE/highs-$HIGHS_VERSION"
if [ "$(readlink .cache/highs 2>/dev/null)" != "$target" ]; then
  rm -rf .cache/highs && ln -s "$target" .cache/highs
fi
