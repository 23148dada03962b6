//go:build !goexperiment.simd

package kernels

// HashIDs writes dst[i] = int64(HashID(src[i], seed)); dst and src may be the same slice.
func HashIDs(dst, src []int64, seed uint64) { HashIDsGeneric(dst, src, seed) }

// BucketizeFloat64 is BucketizeFloat64Generic (portable build).
func BucketizeFloat64(dst []int64, src []float64, bounds []float64) int {
	return BucketizeFloat64Generic(dst, src, bounds)
}

// BucketizeFloat32 is BucketizeFloat32Generic (portable build).
func BucketizeFloat32(dst []int64, src []float32, bounds []float64) int {
	return BucketizeFloat32Generic(dst, src, bounds)
}
