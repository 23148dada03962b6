// Package kernels holds recgo's compute kernels: small pure functions over slices, with no knowledge
// of tables, batches or plans (gonum style).
//
// Hot kernels come in pairs: a portable Go implementation (always compiled, named *Generic) and an
// archsimd fast path in a *_simd.go file (built with GOEXPERIMENT=simd, used only when the CPU has
// AVX-512, checked at run time). A *_generic.go file routes the public name to the portable
// implementation when the experiment is off. Tests run both paths on the same random inputs.
package kernels
