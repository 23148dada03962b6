//go:build !goexperiment.simd

package kernels

func gatherRowsStreaming(dst []float32, dim int, src []float32, offs []int64, mult int64) {
	GatherRowsGeneric(dst, dim, src, offs, mult)
}

func gatherRows(dst []float32, dim int, src []float32, offs []int64, mult int64) {
	GatherRowsGeneric(dst, dim, src, offs, mult)
}

func addScaledRows(dst []float32, dstStride, dim int, rows []int64, src []float32, srcOffs []int64, alpha float32) {
	AddScaledRowsGeneric(dst, dstStride, dim, rows, src, srcOffs, alpha)
}
