//go:build goexperiment.simd

package kernels

import "simd/archsimd"

// See segment_reduce_simd.go for why these walk whole row batches and end with ClearAVXUpperBits.
// CPUs with AVX-512 take the 512-bit kernels for dims that are a multiple of 16; CPUs with AVX2
// only take 256-bit ones (optim_avx2.go) for dims that are a multiple of 8: a step updates tens of
// thousands of distinct rows, and the scalar Adagrad was a fifth of a DLRM embedding step's CPU
// time on an AVX2 machine. Other dims take the portable path.

func sgdRows(w []float32, wStride, dim int, rows []int64, g []float32, lr float32) {
	if hasAVX2 && !hasAVX512 && dim%8 == 0 {
		scaledRowsAVX2(w, wStride, dim, rows, g, nil, lr)
		return
	}
	if !hasAVX512 || dim%16 != 0 {
		SGDRowsGeneric(w, wStride, dim, rows, g, lr)
		return
	}
	neg := archsimd.BroadcastFloat32x16(-lr)
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		for i := 0; i < dim; i += 16 {
			archsimd.LoadFloat32x16(blk(gr, i)).MulAdd(neg, archsimd.LoadFloat32x16(blk(wr, i))).Store(blk(wr, i))
		}
	}
	archsimd.ClearAVXUpperBits()
}

func scaledRows(w []float32, wStride, dim int, rows []int64, g, mult []float32) {
	if hasAVX2 && !hasAVX512 && dim%8 == 0 {
		scaledRowsAVX2(w, wStride, dim, rows, g, mult, 0)
		return
	}
	if !hasAVX512 || dim%16 != 0 {
		ScaledRowsGeneric(w, wStride, dim, rows, g, mult)
		return
	}
	zero := archsimd.BroadcastFloat32x16(0)
	for k, r := range rows {
		if r < 0 {
			continue
		}
		neg := zero.Sub(archsimd.BroadcastFloat32x16(mult[k]))
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		for i := 0; i < dim; i += 16 {
			archsimd.LoadFloat32x16(blk(gr, i)).MulAdd(neg, archsimd.LoadFloat32x16(blk(wr, i))).Store(blk(wr, i))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// scaledRowsAVX2 is the 256-bit w ← w − m_k·g for CPUs without AVX-512: m_k = mult[k], or lr for
// every row when mult is nil (SGD).
func scaledRowsAVX2(w []float32, wStride, dim int, rows []int64, g, mult []float32, lr float32) {
	zero := archsimd.BroadcastFloat32x8(0)
	neg := archsimd.BroadcastFloat32x8(-lr)
	for k, r := range rows {
		if r < 0 {
			continue
		}
		if mult != nil {
			neg = zero.Sub(archsimd.BroadcastFloat32x8(mult[k]))
		}
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		for i := 0; i < dim; i += 8 {
			out := (*[8]float32)(wr[i : i+8])
			archsimd.LoadFloat32x8((*[8]float32)(gr[i:i+8])).MulAdd(neg, archsimd.LoadFloat32x8(out)).Store(out)
		}
	}
	archsimd.ClearAVXUpperBits()
}

func adagradRows(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, lr, eps float32) {
	if hasAVX2 && !hasAVX512 && dim%8 == 0 {
		adagradRowsAVX2(w, wStride, s, sStride, dim, rows, g, lr, eps)
		return
	}
	if !hasAVX512 || dim%16 != 0 {
		AdagradRowsGeneric(w, wStride, s, sStride, dim, rows, g, lr, eps)
		return
	}
	lrv, epsv := archsimd.BroadcastFloat32x16(lr), archsimd.BroadcastFloat32x16(eps)
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, sr, gr := w[r*int64(wStride):][:dim], s[r*int64(sStride):][:dim], g[k*dim:][:dim]
		for i := 0; i < dim; i += 16 {
			gv := archsimd.LoadFloat32x16(blk(gr, i))
			sv := gv.MulAdd(gv, archsimd.LoadFloat32x16(blk(sr, i)))
			sv.Store(blk(sr, i))
			upd := lrv.Mul(gv).Div(sv.Sqrt().Add(epsv))
			archsimd.LoadFloat32x16(blk(wr, i)).Sub(upd).Store(blk(wr, i))
		}
	}
	archsimd.ClearAVXUpperBits()
}

func adamRows(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, p AdamParams) {
	avx2 := hasAVX2 && !hasAVX512 && dim%8 == 0
	if !avx2 && (!hasAVX512 || dim%16 != 0) {
		AdamRowsGeneric(w, wStride, s, sStride, dim, rows, g, p)
		return
	}
	// The weight-decay mode is decided here, in scalar code: a float comparison left for the
	// compiler to sink into the vector loop runs as legacy SSE there (a transition penalty per row).
	mode := adamNoDecay
	if p.WeightDecay != 0 {
		mode = adamL2
		if p.Decoupled {
			mode = adamDecoupled
		}
	}
	if avx2 {
		adamRowsAVX2(w, wStride, s, sStride, dim, rows, g, &p, mode)
		return
	}
	adamRowsAVX512(w, wStride, s, sStride, dim, rows, g, &p, mode)
}

const (
	adamNoDecay = iota
	adamL2
	adamDecoupled
)

//go:noinline
func adamRowsAVX512(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, p *AdamParams, mode int) {
	b1 := archsimd.BroadcastFloat32x16(p.Beta1)
	b2 := archsimd.BroadcastFloat32x16(p.Beta2)
	omb1 := archsimd.BroadcastFloat32x16(p.OneMinusBeta1)
	omb2 := archsimd.BroadcastFloat32x16(p.OneMinusBeta2)
	step := archsimd.BroadcastFloat32x16(p.StepSize)
	sqrtBC2 := archsimd.BroadcastFloat32x16(p.SqrtBC2)
	epsv := archsimd.BroadcastFloat32x16(p.Eps)
	wd := archsimd.BroadcastFloat32x16(p.WeightDecay)
	decay := archsimd.BroadcastFloat32x16(p.Decay)
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		st := s[r*int64(sStride):][:2*dim]
		m, v := st[:dim], st[dim:]
		for i := 0; i < dim; i += 16 {
			gv := archsimd.LoadFloat32x16(blk(gr, i))
			wv := archsimd.LoadFloat32x16(blk(wr, i))
			switch mode {
			case adamDecoupled:
				wv = wv.Mul(decay)
			case adamL2:
				gv = wd.MulAdd(wv, gv)
			}
			mv := b1.Mul(archsimd.LoadFloat32x16(blk(m, i))).Add(omb1.Mul(gv))
			vv := b2.Mul(archsimd.LoadFloat32x16(blk(v, i))).Add(omb2.Mul(gv).Mul(gv))
			mv.Store(blk(m, i))
			vv.Store(blk(v, i))
			denom := vv.Sqrt().Div(sqrtBC2).Add(epsv)
			wv.Sub(step.Mul(mv).Div(denom)).Store(blk(wr, i))
		}
	}
	archsimd.ClearAVXUpperBits()
}
