//go:build goexperiment.simd

package kernels

import "simd/archsimd"

// The 256-bit Adagrad and Adam row kernels (every CPU with AVX2, dims that are a multiple of 8;
// see optim_simd.go).

// blk8 is x[i : i+8] as the array a 256-bit load or store takes.
func blk8(x []float32, i int) *[8]float32 { return (*[8]float32)(x[i : i+8]) }

// adagradRowsAVX2 applies s ← s + g², w ← w − lr·g/(√s + eps) (AdagradRowsGeneric) on 8 lanes.
func adagradRowsAVX2(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, lr, eps float32) {
	lrv, epsv := archsimd.BroadcastFloat32x8(lr), archsimd.BroadcastFloat32x8(eps)
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, sr, gr := w[r*int64(wStride):][:dim], s[r*int64(sStride):][:dim], g[k*dim:][:dim]
		for i := 0; i < dim; i += 8 {
			gv := archsimd.LoadFloat32x8(blk8(gr, i))
			sv := gv.MulAdd(gv, archsimd.LoadFloat32x8(blk8(sr, i)))
			sv.Store(blk8(sr, i))
			upd := lrv.Mul(gv).Div(sv.Sqrt().Add(epsv))
			archsimd.LoadFloat32x8(blk8(wr, i)).Sub(upd).Store(blk8(wr, i))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// adamRowsAVX2 applies AdamRowsGeneric's update on 8 lanes: the weight-decay mode (adamNoDecay,
// adamL2 or adamDecoupled) is chosen by the caller, outside the loop.
//
//go:noinline
func adamRowsAVX2(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, p *AdamParams, mode int) {
	b1 := archsimd.BroadcastFloat32x8(p.Beta1)
	b2 := archsimd.BroadcastFloat32x8(p.Beta2)
	omb1 := archsimd.BroadcastFloat32x8(p.OneMinusBeta1)
	omb2 := archsimd.BroadcastFloat32x8(p.OneMinusBeta2)
	step := archsimd.BroadcastFloat32x8(p.StepSize)
	sqrtBC2 := archsimd.BroadcastFloat32x8(p.SqrtBC2)
	epsv := archsimd.BroadcastFloat32x8(p.Eps)
	wd := archsimd.BroadcastFloat32x8(p.WeightDecay)
	decay := archsimd.BroadcastFloat32x8(p.Decay)
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		st := s[r*int64(sStride):][:2*dim]
		m, v := st[:dim], st[dim:]
		for i := 0; i < dim; i += 8 {
			gv := archsimd.LoadFloat32x8(blk8(gr, i))
			wv := archsimd.LoadFloat32x8(blk8(wr, i))
			switch mode {
			case adamDecoupled:
				wv = wv.Mul(decay)
			case adamL2:
				gv = wd.MulAdd(wv, gv)
			}
			mv := b1.Mul(archsimd.LoadFloat32x8(blk8(m, i))).Add(omb1.Mul(gv))
			vv := b2.Mul(archsimd.LoadFloat32x8(blk8(v, i))).Add(omb2.Mul(gv).Mul(gv))
			mv.Store(blk8(m, i))
			vv.Store(blk8(v, i))
			denom := vv.Sqrt().Div(sqrtBC2).Add(epsv)
			wv.Sub(step.Mul(mv).Div(denom)).Store(blk8(wr, i))
		}
	}
	archsimd.ClearAVXUpperBits()
}
