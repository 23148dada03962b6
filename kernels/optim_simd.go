//go:build goexperiment.simd

package kernels

import "simd/archsimd"

// See segment_reduce_simd.go for why these walk whole row batches and end with ClearAVXUpperBits.
// SGD and row-wise Adagrad's row scaling have 512-bit kernels for dims that are a multiple of 16
// on CPUs with AVX-512, and 256-bit ones for the other multiples of 4 (on every CPU with AVX2: an
// AVX-512 CPU ran D=8, 24, 40, ... on the portable path before session 46). Adagrad and Adam have
// one kernel, 256-bit (optim_avx2.go), for every CPU with AVX2 and dims that are a multiple of 4:
// the update of a scattered row waits on memory, not on the vector width, and one kernel is one to
// keep right (on an AVX2-only machine the scalar Adagrad it replaced was a fifth of a DLRM embedding
// step's CPU time). Other dims take the portable path.

// wide512 reports whether the 512-bit row kernels take rows of width dim, and avx2Rows whether the
// 256-bit ones do (the other widths take the portable kernels).
func wide512(dim int) bool  { return hasAVX512 && dim%16 == 0 }
func avx2Rows(dim int) bool { return hasAVX2 && dim%4 == 0 }

func sgdRows(w []float32, wStride, dim int, rows []int64, g []float32, lr float32) {
	if !wide512(dim) {
		if avx2Rows(dim) {
			scaledRowsAVX2(w, wStride, dim, rows, g, nil, -lr)
		} else {
			SGDRowsGeneric(w, wStride, dim, rows, g, lr)
		}
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
	if !wide512(dim) {
		if avx2Rows(dim) {
			scaledRowsAVX2(w, wStride, dim, rows, g, mult, 0)
		} else {
			ScaledRowsGeneric(w, wStride, dim, rows, g, mult)
		}
		return
	}
	for k, r := range rows {
		if r < 0 {
			continue
		}
		m := archsimd.BroadcastFloat32x16(mult[k])
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		for i := 0; i < dim; i += 16 {
			archsimd.LoadFloat32x16(blk(gr, i)).MulAdd(m, archsimd.LoadFloat32x16(blk(wr, i))).Store(blk(wr, i))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// scaledRowsAVX2 is the 256-bit w ← w + m_k·g for rows of a multiple of 4 columns: m_k = mult[k], or
// step for every row when mult is nil (SGD's −lr). The callers negate their steps in scalar code: a
// float negation here ran as a legacy-SSE instruction after the first 256-bit one, a transition per
// call (SGD at D=20, called once per streamed chunk of rows, spent 3 of its 4 ms in them).
func scaledRowsAVX2(w []float32, wStride, dim int, rows []int64, g, mult []float32, step float32) {
	m := archsimd.BroadcastFloat32x8(step)
	full, low := dim&^7, lanes4()
	for k, r := range rows {
		if r < 0 {
			continue
		}
		if mult != nil {
			m = archsimd.BroadcastFloat32x8(mult[k])
		}
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		for i := 0; i < full; i += 8 {
			archsimd.LoadFloat32x8(blk8(gr, i)).MulAdd(m, archsimd.LoadFloat32x8(blk8(wr, i))).Store(blk8(wr, i))
		}
		if full < dim { // the last 4 columns, masked (see optim_avx2.go)
			archsimd.LoadMaskedFloat32x8(tail8(gr), low).MulAdd(m, archsimd.LoadMaskedFloat32x8(tail8(wr), low)).StoreMasked(tail8(wr), low)
		}
	}
	archsimd.ClearAVXUpperBits()
}

func adagradRows(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, lr, eps float32) {
	if !avx2Rows(dim) {
		AdagradRowsGeneric(w, wStride, s, sStride, dim, rows, g, lr, eps)
		return
	}
	adagradRowsAVX2(w, wStride, s, sStride, dim, rows, g, lr, eps)
}

func adamRows(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, p AdamParams) {
	if !avx2Rows(dim) {
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
	adamRowsAVX2(w, wStride, s, sStride, dim, rows, g, &p, mode)
}

const (
	adamNoDecay = iota
	adamL2
	adamDecoupled
)
