//go:build !goexperiment.simd

package kernels

func sgdRow(w, g []float32, lr float32)             { SGDRowGeneric(w, g, lr) }
func adagradRow(w, s, g []float32, lr, eps float32) { AdagradRowGeneric(w, s, g, lr, eps) }
func adamRow(w, m, v, g []float32, p AdamParams)    { AdamRowGeneric(w, m, v, g, p) }
