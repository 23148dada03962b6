//go:build !goexperiment.simd

package kernels

func segmentReduce(dst []float32, dstBase, dstStride, dim int, src []float32, offs []int64, mult int64,
	bounds []int64, weights, scales []float32) {
	SegmentReduceGeneric(dst, dstBase, dstStride, dim, src, offs, mult, bounds, weights, scales)
}

// SIMDEnabled reports whether the archsimd fast paths are in use (never, in this build).
func SIMDEnabled() bool { return false }

// PrefetchesInLoop reports whether SegmentReduce pools long bags of width dim with kernels that
// prefetch inside their loop (never, in this build).
func PrefetchesInLoop(dim int) bool { return false }

// InLoopMinBag is the mean bag length from which the in-loop kernels would run (none here).
const InLoopMinBag = 32

// InLoopAhead is how many rows ahead the in-loop kernels would prefetch (none here).
func InLoopAhead(dim int) int { return 0 }

func segmentScatter(dst []float32, dim int, idx []int32, fresh int32, src []float32, srcBase, srcStride int,
	bounds []int64, weights, scales []float32) int32 {
	return SegmentScatterGeneric(dst, dim, idx, fresh, src, srcBase, srcStride, bounds, weights, scales)
}
