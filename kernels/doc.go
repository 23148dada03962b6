// Package kernels holds recgo's compute kernels: small pure functions over slices, with no knowledge
// of tables, batches or plans (gonum style).
//
// Hot kernels come in pairs: a portable Go implementation (always compiled, named *Generic) and an
// archsimd fast path in a *_simd.go file (built with GOEXPERIMENT=simd). Each fast path checks the
// CPU at run time and uses the widest instructions it has (AVX-512, or AVX2 with FMA where a kernel
// has such a path), falling back to the portable implementation otherwise. A *_generic.go file routes the public name to the portable
// implementation when the experiment is off. Tests run both paths on the same random inputs.
package kernels
