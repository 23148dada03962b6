//go:build !goexperiment.simd

package kernels

func weightedSum(dst, src []float32, offs []int64, weights []float32, scale float32) {
	WeightedSumGeneric(dst, src, offs, weights, scale)
}

// SIMDEnabled reports whether the archsimd fast paths are in use (never, in this build).
func SIMDEnabled() bool { return false }
