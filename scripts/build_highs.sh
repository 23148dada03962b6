#!/usr/bin/env bash
# Builds HiGHS once, from the complete C++ sources inside the pinned `highspy` sdist, into a
# static PIC libhighs.a under a per-user cache (shared by every clone on this machine), then prints
# nothing and exits 0 when it is already there. Debian 12 has no HiGHS package; this is why.
set -euo pipefail
HIGHS_VERSION="${HIGHS_VERSION:-1.15.1}"
CACHE="${RECGO_CACHE:-$HOME/.cache/recgo}"
PREFIX="$CACHE/highs-$HIGHS_VERSION"
if [ -f "$PREFIX/lib/libhighs.a" ] && [ -f "$PREFIX/include/highs/interfaces/highs_c_api.h" ]; then
  exit 0
fi
PY="${PYTHON:-python3}"
work="$CACHE/highs-build-$HIGHS_VERSION"
rm -rf "$work" && mkdir -p "$work"
echo "[highs] fetching highspy==$HIGHS_VERSION sdist (HiGHS C++ sources)"
# Through pip and whatever index it is configured with (pip.conf, PIP_INDEX_URL, ...). --no-binary
# names highspy only, so pip may read the sdist's metadata with wheels of its build dependencies
# (with :all: it would compile numpy from source for that). The sha256 pin checks the file.
if [ "$HIGHS_VERSION" = 1.15.1 ]; then
  printf 'highspy==%s --hash=sha256:%s\n' "$HIGHS_VERSION" \
    20ed2fbf1cb64bf3044ee6632364b7e2653d93e6901e2b19fd3d5df10702e8c5 >"$work/requirements.txt"
  pin=(--require-hashes -r "$work/requirements.txt")
else
  echo "[highs] no sha256 pin for highspy $HIGHS_VERSION in build_highs.sh; relying on the index's hash" >&2
  pin=("highspy==$HIGHS_VERSION")
fi
"$PY" -m pip download --quiet --no-deps --no-binary highspy --dest "$work" "${pin[@]}"
ls "$work"/highspy-"$HIGHS_VERSION".tar.gz >/dev/null
if [ "${HIGHS_FETCH_ONLY:-0}" = 1 ]; then  # fetch and verify only (tests, or preparing an offline build)
  echo "[highs] fetched $work/highspy-$HIGHS_VERSION.tar.gz"
  exit 0
fi
tar -xzf "$work"/highspy-*.tar.gz -C "$work"
src="$work/highspy-$HIGHS_VERSION"
# The sdist ships the library sources but not the pkg-config template nor the app/ folder that the
# top-level CMakeLists.txt names; neither is needed for libhighs.a, so stand in minimal ones.
[ -f "$src/highs.pc.in" ] || printf 'prefix=@CMAKE_INSTALL_PREFIX@\nName: highs\nDescription: HiGHS\nVersion: %s\nLibs: -L${prefix}/lib -lhighs\nCflags: -I${prefix}/include/highs\n' "$HIGHS_VERSION" >"$src/highs.pc.in"
mkdir -p "$src/app" && touch "$src/app/CMakeLists.txt"
echo "[highs] building static PIC libhighs.a (first time only; several minutes)"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DFAST_BUILD=ON -DBUILD_TESTING=OFF -DBUILD_EXAMPLES=OFF \
  -DBUILD_CXX_EXE=OFF -DZLIB=OFF -DBUILD_SHARED_EXTRAS_LIB=OFF -DCMAKE_INSTALL_PREFIX="$PREFIX.tmp" >"$work/cmake.log"
cmake --build "$work/build" -j"$(nproc)" >"$work/build.log"
cmake --install "$work/build" >"$work/install.log"
rm -rf "$PREFIX" && mv "$PREFIX.tmp" "$PREFIX"
rm -rf "$work"
echo "[highs] installed at $PREFIX"
