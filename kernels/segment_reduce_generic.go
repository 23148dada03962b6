//go:build !goexperiment.simd

package kernels

func segmentReduce(dst []float32, dstBase, dstStride, dim int, src []float32, offs, bounds []int64,
	weights, scales []float32) {
	SegmentReduceGeneric(dst, dstBase, dstStride, dim, src, offs, bounds, weights, scales)
}

// SIMDEnabled reports whether the archsimd fast paths are in use (never, in this build).
func SIMDEnabled() bool { return false }
