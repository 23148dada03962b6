//go:build !goexperiment.simd

package kernels

func segmentReduce(dst []float32, dstBase, dstStride, dim int, src []float32, offs []int64, mult int64,
	bounds []int64, weights, scales []float32) {
	SegmentReduceGeneric(dst, dstBase, dstStride, dim, src, offs, mult, bounds, weights, scales)
}

// SIMDEnabled reports whether the archsimd fast paths are in use (never, in this build).
func SIMDEnabled() bool { return false }

// InLoop reports whether SegmentReduce pools bags of width dim, entries long over bags, with a
// kernel that prefetches inside its loop (never, in this build).
func InLoop(dim int, entries int64, bags int) bool { return false }

// InLoopAhead is how many rows ahead the in-loop kernels would prefetch (none here).
func InLoopAhead(dim int) int { return 0 }

func segmentScatter(dst []float32, dim int, idx []int32, fresh int32, src []float32, srcBase, srcStride int,
	bounds []int64, weights, scales []float32) int32 {
	return SegmentScatterGeneric(dst, dim, idx, fresh, src, srcBase, srcStride, bounds, weights, scales)
}
