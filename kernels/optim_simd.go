//go:build goexperiment.simd

package kernels

import "simd/archsimd"

func blk(x []float32, i int) *[16]float32 { return (*[16]float32)(x[i : i+16]) }

func sgdRow(w, g []float32, lr float32) {
	n := len(w)
	if !hasAVX512 || n < 16 {
		SGDRowGeneric(w, g, lr)
		return
	}
	g = g[:n]
	full := n &^ 15
	neg := archsimd.BroadcastFloat32x16(-lr)
	for i := 0; i < full; i += 16 {
		gv := archsimd.LoadFloat32x16(blk(g, i))
		gv.MulAdd(neg, archsimd.LoadFloat32x16(blk(w, i))).Store(blk(w, i))
	}
	SGDRowGeneric(w[full:], g[full:], lr)
}

func adagradRow(w, s, g []float32, lr, eps float32) {
	n := len(w)
	if !hasAVX512 || n < 16 {
		AdagradRowGeneric(w, s, g, lr, eps)
		return
	}
	s, g = s[:n], g[:n]
	full := n &^ 15
	lrv, epsv := archsimd.BroadcastFloat32x16(lr), archsimd.BroadcastFloat32x16(eps)
	for i := 0; i < full; i += 16 {
		gv := archsimd.LoadFloat32x16(blk(g, i))
		sv := gv.MulAdd(gv, archsimd.LoadFloat32x16(blk(s, i)))
		sv.Store(blk(s, i))
		upd := lrv.Mul(gv).Div(sv.Sqrt().Add(epsv))
		archsimd.LoadFloat32x16(blk(w, i)).Sub(upd).Store(blk(w, i))
	}
	AdagradRowGeneric(w[full:], s[full:], g[full:], lr, eps)
}

func adamRow(w, m, v, g []float32, p AdamParams) {
	n := len(w)
	if !hasAVX512 || n < 16 {
		AdamRowGeneric(w, m, v, g, p)
		return
	}
	m, v, g = m[:n], v[:n], g[:n]
	full := n &^ 15
	b1 := archsimd.BroadcastFloat32x16(p.Beta1)
	b2 := archsimd.BroadcastFloat32x16(p.Beta2)
	omb1 := archsimd.BroadcastFloat32x16(p.OneMinusBeta1)
	omb2 := archsimd.BroadcastFloat32x16(p.OneMinusBeta2)
	step := archsimd.BroadcastFloat32x16(p.StepSize)
	sqrtBC2 := archsimd.BroadcastFloat32x16(p.SqrtBC2)
	epsv := archsimd.BroadcastFloat32x16(p.Eps)
	wd := archsimd.BroadcastFloat32x16(p.WeightDecay)
	decay := archsimd.BroadcastFloat32x16(p.Decay)
	for i := 0; i < full; i += 16 {
		gv := archsimd.LoadFloat32x16(blk(g, i))
		wv := archsimd.LoadFloat32x16(blk(w, i))
		if p.WeightDecay != 0 {
			if p.Decoupled {
				wv = wv.Mul(decay)
			} else {
				gv = wd.MulAdd(wv, gv)
			}
		}
		mv := b1.Mul(archsimd.LoadFloat32x16(blk(m, i))).Add(omb1.Mul(gv))
		vv := b2.Mul(archsimd.LoadFloat32x16(blk(v, i))).Add(omb2.Mul(gv).Mul(gv))
		mv.Store(blk(m, i))
		vv.Store(blk(v, i))
		denom := vv.Sqrt().Div(sqrtBC2).Add(epsv)
		wv.Sub(step.Mul(mv).Div(denom)).Store(blk(w, i))
	}
	AdamRowGeneric(w[full:], m[full:], v[full:], g[full:], p)
}
