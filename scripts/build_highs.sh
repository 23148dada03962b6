#!/usr/bin/env bash
# Builds HiGHS once, from the complete C++ sources inside the pinned PyPI `highspy` sdist, into a
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
# Fetch the sdist file itself through PyPI's simple index (JSON form) (pip download would build numpy from source
# just to read the sdist's metadata), and check its sha256 against PyPI's record.
"$PY" - "$HIGHS_VERSION" "$work" <<'PYEOF'
import hashlib, json, sys, urllib.request
version, dest = sys.argv[1], sys.argv[2]
req = urllib.request.Request("https://pypi.org/simple/highspy/",
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(req, timeout=60))["files"]
sdist = next(f for f in files if f["filename"] == f"highspy-{version}.tar.gz")
data = urllib.request.urlopen(sdist["url"], timeout=300).read()
if hashlib.sha256(data).hexdigest() != sdist["hashes"]["sha256"]:
    sys.exit("highspy sdist: sha256 mismatch")
open(f"{dest}/{sdist['filename']}", "wb").write(data)
PYEOF
tar -xzf "$work"/highspy-*.tar.gz -C "$work"
src="$work/highspy-$HIGHS_VERSION"
# The sdist ships the library sources but not the pkg-config template nor the app/ folder that the
# top-level CMakeLists.txt names; neither is needed for libhighs.a, so stand in minimal ones.
[ -f "$src/highs.pc.in" ] || printf 'prefix=@CMAKE_INSTALL_PREFIX@\nName: highs\nDescription: HiGHS\nVersion: %s\nLibs: -L${prefix}/lib -lhighs\nCflags: -I${prefix}/include/highs\n' "$HIGHS_VERSION" >"$src/highs.pc.in"
mkdir -p "$src/app" && touch "$src/app/CMakeLists.txt"
echo "[highs] building static PIC libhighs.a (first time only, ~5 min on 2 cores)"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DFAST_BUILD=ON -DBUILD_TESTING=OFF -DBUILD_EXAMPLES=OFF \
  -DBUILD_CXX_EXE=OFF -DZLIB=OFF -DBUILD_SHARED_EXTRAS_LIB=OFF -DCMAKE_INSTALL_PREFIX="$PREFIX.tmp" >"$work/cmake.log"
cmake --build "$work/build" -j"$(nproc)" >"$work/build.log"
cmake --install "$work/build" >"$work/install.log"
rm -rf "$PREFIX" && mv "$PREFIX.tmp" "$PREFIX"
rm -rf "$work"
echo "[highs] installed at $PREFIX"
