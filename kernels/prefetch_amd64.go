package kernels

import "unsafe"

// prefetchRows issues PREFETCHT0 for lines cache lines at base + offs[k]·scale, k < n (offs[k] < 0
// skipped); see prefetch_amd64.s. It uses no vector registers, so it is safe to call between
// archsimd kernels.
//
//go:noescape
func prefetchRows(base unsafe.Pointer, offs *int64, n int, scale int64, lines int)

// prefetchStrided issues PREFETCHT0 for lines cache lines at base + off + i·stride, i < n.
//
//go:noescape
func prefetchStrided(base unsafe.Pointer, off, stride int64, n int, lines int)

// prefetchBits issues PREFETCHT0 for the word of bit ids[k] of the bitmap at base, k < n (ids[k] < 0
// skipped); see prefetch_amd64.s.
//
//go:noescape
func prefetchBits(base unsafe.Pointer, ids *int64, n int)
