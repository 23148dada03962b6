//go:build goexperiment.simd

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

func gatherRows(dst []float32, dim int, src []float32, offs []int64, mult int64) {
	if !hasAVX2 || dim%8 != 0 {
		GatherRowsGeneric(dst, dim, src, offs, mult)
		return
	}
	dst = dst[:len(dst):len(dst)] // rows past len(dst) panic, even within its capacity
	_ = dst[:len(offs)*dim]
	d := int64(dim)
	var zero archsimd.Float32x8
	for i, off := range offs {
		out := dst[i*dim : (i+1)*dim]
		if off < 0 {
			for c := 0; c < dim; c += 8 {
				zero.Store((*[8]float32)(out[c : c+8]))
			}
			continue
		}
		row := src[off*mult : off*mult+d]
		for c := 0; c < dim; c += 8 {
			archsimd.LoadFloat32x8((*[8]float32)(row[c : c+8])).Store((*[8]float32)(out[c : c+8]))
		}
	}
	archsimd.ClearAVXUpperBits()
}

func gatherRowsStreaming(dst []float32, dim int, src []float32, offs []int64, mult int64) {
	if !hasAVX2 || dim%16 != 0 || len(offs) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%32 != 0 {
		gatherRows(dst, dim, src, offs, mult)
		return
	}
	gatherRowsNT(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), unsafe.SliceData(offs),
		len(offs), mult*4, dim*4)
}

func addScaledRows(dst []float32, dstStride, dim int, rows []int64, src []float32, srcOffs []int64, alpha float32) {
	if !avx2Rows(dim) {
		AddScaledRowsGeneric(dst, dstStride, dim, rows, src, srcOffs, alpha)
		return
	}
	a := archsimd.BroadcastFloat32x8(alpha)
	full, low := dim&^7, lanes4()
	for k, r := range rows {
		if r < 0 {
			continue
		}
		out := dst[r*int64(dstStride):][:dim]
		g := src[srcOffs[k]:][:dim]
		for c := 0; c < full; c += 8 {
			o := (*[8]float32)(out[c : c+8])
			archsimd.LoadFloat32x8((*[8]float32)(g[c:c+8])).MulAdd(a, archsimd.LoadFloat32x8(o)).Store(o)
		}
		if full < dim { // the last 4 columns, masked (see optim_avx2.go)
			o := tail8(out)
			archsimd.LoadMaskedFloat32x8(tail8(g), low).MulAdd(a, archsimd.LoadMaskedFloat32x8(o, low)).StoreMasked(o, low)
		}
	}
	archsimd.ClearAVXUpperBits()
}
