//go:build goexperiment.simd

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The 256-bit SGD, Adagrad and Adam row kernels (every CPU with AVX2, dims that are a multiple of 4;
// see optim_simd.go). A dim of 8n+4 ends in 4 columns taken in the low lanes of masked 8-lane loads
// and stores, so every value stays in a 256-bit register: 4-lane values made Go copy registers with
// legacy-SSE MOVUPS, and each copy between 256-bit instructions paid an SSE/AVX transition (Adam at
// D=12 ran 13x slower than at D=8 on an AVX-512 Xeon). The portable path these dims took before was
// 2.5 to 4 times slower than now.

// blk8 is x[i : i+8] as the array a 256-bit load or store takes.
func blk8(x []float32, i int) *[8]float32 { return (*[8]float32)(x[i : i+8]) }

// lanes4 selects the low 4 of 8 lanes: a masked load or store of them touches only the 4 floats a
// row's last block holds (masked-off lanes are neither read nor written, and cannot fault).
func lanes4() archsimd.Mask32x8 {
	return archsimd.LoadInt32x8(&laneIndex).Less(archsimd.BroadcastInt32x8(4))
}

// laneIndex holds each lane's index (a package variable: a literal built on the stack was zeroed
// with a legacy-SSE store, a transition after the kernel's first 256-bit instruction).
var laneIndex = [8]int32{0, 1, 2, 3, 4, 5, 6, 7}

// tail8 is the last 4 floats x holds as the 8-float array a lanes4 masked load or store takes; its
// upper half lies past x, which the mask never touches (hence no checkptr: the array may straddle
// the end of x's allocation, as the race detector's pointer check would refuse).
//
//go:nocheckptr
func tail8(x []float32) *[8]float32 {
	return (*[8]float32)(unsafe.Pointer(unsafe.SliceData(x[len(x)-4:])))
}

// adagradRowsAVX2 applies s ← s + g², w ← w − lr·g/(√s + eps) (AdagradRowsGeneric) on 8 lanes.
func adagradRowsAVX2(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, lr, eps float32) {
	lrv, epsv := archsimd.BroadcastFloat32x8(lr), archsimd.BroadcastFloat32x8(eps)
	full, low := dim&^7, lanes4()
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, sr, gr := w[r*int64(wStride):][:dim], s[r*int64(sStride):][:dim], g[k*dim:][:dim]
		for i := 0; i < full; i += 8 {
			wv, sv := adagradLanes(archsimd.LoadFloat32x8(blk8(gr, i)), archsimd.LoadFloat32x8(blk8(wr, i)),
				archsimd.LoadFloat32x8(blk8(sr, i)), lrv, epsv)
			sv.Store(blk8(sr, i))
			wv.Store(blk8(wr, i))
		}
		if full < dim { // the last 4 columns, masked
			wv, sv := adagradLanes(archsimd.LoadMaskedFloat32x8(tail8(gr), low), archsimd.LoadMaskedFloat32x8(tail8(wr), low),
				archsimd.LoadMaskedFloat32x8(tail8(sr), low), lrv, epsv)
			sv.StoreMasked(tail8(sr), low)
			wv.StoreMasked(tail8(wr), low)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// adagradLanes is one 8-lane block of adagradRowsAVX2's update: the row's new weights and sums.
func adagradLanes(gv, wv, sv, lrv, epsv archsimd.Float32x8) (archsimd.Float32x8, archsimd.Float32x8) {
	sv = gv.MulAdd(gv, sv)
	return wv.Sub(lrv.Mul(gv).Div(sv.Sqrt().Add(epsv))), sv
}

// adamRowsAVX2 applies AdamRowsGeneric's update on 8 lanes: the weight-decay mode (adamNoDecay,
// adamL2 or adamDecoupled) is chosen by the caller, outside the loop. Its last 4 columns repeat the
// block's math on masked loads: a helper taking the nine broadcast constants in a struct made Go copy
// them with legacy-SSE moves, a transition per call (adagradLanes, with two, copies none).
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
	full, low := dim&^7, lanes4()
	for k, r := range rows {
		if r < 0 {
			continue
		}
		wr, gr := w[r*int64(wStride):][:dim], g[k*dim:][:dim]
		st := s[r*int64(sStride):][:2*dim]
		m, v := st[:dim], st[dim:]
		for i := 0; i < full; i += 8 {
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
		if full < dim { // the last 4 columns, masked
			gv := archsimd.LoadMaskedFloat32x8(tail8(gr), low)
			wv := archsimd.LoadMaskedFloat32x8(tail8(wr), low)
			switch mode {
			case adamDecoupled:
				wv = wv.Mul(decay)
			case adamL2:
				gv = wd.MulAdd(wv, gv)
			}
			mv := b1.Mul(archsimd.LoadMaskedFloat32x8(tail8(m), low)).Add(omb1.Mul(gv))
			vv := b2.Mul(archsimd.LoadMaskedFloat32x8(tail8(v), low)).Add(omb2.Mul(gv).Mul(gv))
			mv.StoreMasked(tail8(m), low)
			vv.StoreMasked(tail8(v), low)
			denom := vv.Sqrt().Div(sqrtBC2).Add(epsv)
			wv.Sub(step.Mul(mv).Div(denom)).StoreMasked(tail8(wr), low)
		}
	}
	archsimd.ClearAVXUpperBits()
}
