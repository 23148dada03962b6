# Sourced by the Makefile and setup.py's build: where HiGHS is, and how librecgo.so is compiled.
# HiGHS lives in a per-user cache (built once per machine by build_highs.sh) and is linked into the
# repository's ignored .cache/highs, which planner/highs's #cgo directives name relative to the source.
HIGHS_VERSION="${HIGHS_VERSION:-1.15.1}"
RECGO_CACHE="${RECGO_CACHE:-$HOME/.cache/recgo}"
export CGO_ENABLED=1
# simd/archsimd fast paths (kernels/*_simd.go); the portable files build without it.
export GOEXPERIMENT="${GOEXPERIMENT-simd}"
# Keep HiGHS's and libstdc++'s symbols out of librecgo.so's dynamic table; fail on undefined symbols.
export CGO_LDFLAGS="${CGO_LDFLAGS:--Wl,--exclude-libs,ALL -Wl,-z,defs}"
