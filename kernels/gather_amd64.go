package kernels

import "unsafe"

// gatherRowsNT is GatherRows with non-temporal stores for AVX2 CPUs; see gather_amd64.s for its
// preconditions, which gatherRowsStreaming checks.
//
//go:noescape
func gatherRowsNT(dst, src unsafe.Pointer, offs *int64, n int, scale int64, rowBytes int)
