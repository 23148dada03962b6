//go:build goexperiment.simd

package kernels

import "simd/archsimd"

var hasAVX512 = archsimd.X86.AVX512()

// SIMDEnabled reports whether the archsimd fast paths are in use (built with GOEXPERIMENT=simd on a
// CPU with AVX-512).
func SIMDEnabled() bool { return hasAVX512 }

func weightedSum(dst, src []float32, offs []int64, weights []float32, scale float32) {
	d := len(dst)
	switch {
	case !hasAVX512 || d < 16:
		WeightedSumGeneric(dst, src, offs, weights, scale)
	case d == 64:
		weightedSum64(dst, src, offs, weights, scale)
	default:
		weightedSumBlocks(dst, src, offs, weights, scale)
	}
}

// weightedSum64 keeps the whole 64-float row in four registers.
func weightedSum64(dst, src []float32, offs []int64, weights []float32, scale float32) {
	var a0, a1, a2, a3 archsimd.Float32x16
	for j, o := range offs {
		if o < 0 {
			continue
		}
		row := (*[64]float32)(src[o : o+64])
		r0 := archsimd.LoadFloat32x16((*[16]float32)(row[0:16]))
		r1 := archsimd.LoadFloat32x16((*[16]float32)(row[16:32]))
		r2 := archsimd.LoadFloat32x16((*[16]float32)(row[32:48]))
		r3 := archsimd.LoadFloat32x16((*[16]float32)(row[48:64]))
		if weights == nil {
			a0, a1, a2, a3 = a0.Add(r0), a1.Add(r1), a2.Add(r2), a3.Add(r3)
			continue
		}
		w := archsimd.BroadcastFloat32x16(weights[j])
		a0, a1, a2, a3 = r0.MulAdd(w, a0), r1.MulAdd(w, a1), r2.MulAdd(w, a2), r3.MulAdd(w, a3)
	}
	if scale != 1 {
		s := archsimd.BroadcastFloat32x16(scale)
		a0, a1, a2, a3 = a0.Mul(s), a1.Mul(s), a2.Mul(s), a3.Mul(s)
	}
	out := (*[64]float32)(dst)
	a0.Store((*[16]float32)(out[0:16]))
	a1.Store((*[16]float32)(out[16:32]))
	a2.Store((*[16]float32)(out[32:48]))
	a3.Store((*[16]float32)(out[48:64]))
}

// weightedSumBlocks walks 16-column blocks, each accumulated in one register; a tail narrower than
// 16 columns goes through the portable code.
func weightedSumBlocks(dst, src []float32, offs []int64, weights []float32, scale float32) {
	d := len(dst)
	full := d &^ 15
	s := archsimd.BroadcastFloat32x16(scale)
	for c := 0; c < full; c += 16 {
		var acc archsimd.Float32x16
		for j, o := range offs {
			if o < 0 {
				continue
			}
			start := o + int64(c)
			r := archsimd.LoadFloat32x16((*[16]float32)(src[start : start+16]))
			if weights == nil {
				acc = acc.Add(r)
			} else {
				acc = r.MulAdd(archsimd.BroadcastFloat32x16(weights[j]), acc)
			}
		}
		acc.Mul(s).Store((*[16]float32)(dst[c : c+16]))
	}
	if full < d {
		tail := make([]int64, len(offs))
		for j, o := range offs {
			tail[j] = o
			if o >= 0 {
				tail[j] = o + int64(full)
			}
		}
		WeightedSumGeneric(dst[full:], src, tail, weights, scale)
	}
}
