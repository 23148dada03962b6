//go:build !goexperiment.simd

package kernels

func sgdRows(w []float32, wStride, dim int, rows []int64, g []float32, lr float32) {
	SGDRowsGeneric(w, wStride, dim, rows, g, lr)
}

func adagradRows(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, lr, eps float32) {
	AdagradRowsGeneric(w, wStride, s, sStride, dim, rows, g, lr, eps)
}

func scaledRows(w []float32, wStride, dim int, rows []int64, g, mult []float32) {
	ScaledRowsGeneric(w, wStride, dim, rows, g, mult)
}

func adamRows(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, p AdamParams) {
	AdamRowsGeneric(w, wStride, s, sStride, dim, rows, g, p)
}
