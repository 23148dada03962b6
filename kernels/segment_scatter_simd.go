//go:build goexperiment.simd

package kernels

import "simd/archsimd"

func segmentScatter(dst []float32, dim int, idx []int32, fresh int32, src []float32, srcBase, srcStride int,
	bounds []int64, weights, scales []float32) int32 {
	switch {
	case hasAVX512 && dim == 64:
		return segmentScatter64(dst, idx, fresh, src, srcBase, srcStride, bounds, weights, scales)
	case avx2Rows(dim):
		return segmentScatterBlocks8(dst, dim, idx, fresh, src, srcBase, srcStride, bounds, weights, scales)
	default:
		return SegmentScatterGeneric(dst, dim, idx, fresh, src, srcBase, srcStride, bounds, weights, scales)
	}
}

// segmentScatter64 keeps the segment's 64-float source vector in four registers while it is added
// into each of the segment's rows.
func segmentScatter64(dst []float32, idx []int32, fresh int32, src []float32, srcBase, srcStride int,
	bounds []int64, weights, scales []float32) int32 {
	lo := bounds[0]
	for i := 0; i+1 < len(bounds); i++ {
		g := src[srcBase+i*srcStride:][:64]
		g0, g1 := archsimd.LoadFloat32x16(blk(g, 0)), archsimd.LoadFloat32x16(blk(g, 16))
		g2, g3 := archsimd.LoadFloat32x16(blk(g, 32)), archsimd.LoadFloat32x16(blk(g, 48))
		if scales != nil {
			s := archsimd.BroadcastFloat32x16(scales[i])
			g0, g1, g2, g3 = g0.Mul(s), g1.Mul(s), g2.Mul(s), g3.Mul(s)
		}
		for j := bounds[i] - lo; j < bounds[i+1]-lo; j++ {
			u := idx[j]
			row := dst[int(u)*64:][:64]
			first := fresh >= 0 && u >= fresh
			if first {
				if u != fresh {
					panic(notFirstTouch(u, fresh))
				}
				fresh++
			}
			switch {
			case weights == nil && first:
				g0.Store(blk(row, 0))
				g1.Store(blk(row, 16))
				g2.Store(blk(row, 32))
				g3.Store(blk(row, 48))
			case weights == nil:
				archsimd.LoadFloat32x16(blk(row, 0)).Add(g0).Store(blk(row, 0))
				archsimd.LoadFloat32x16(blk(row, 16)).Add(g1).Store(blk(row, 16))
				archsimd.LoadFloat32x16(blk(row, 32)).Add(g2).Store(blk(row, 32))
				archsimd.LoadFloat32x16(blk(row, 48)).Add(g3).Store(blk(row, 48))
			case first:
				w := archsimd.BroadcastFloat32x16(weights[j])
				g0.Mul(w).Store(blk(row, 0))
				g1.Mul(w).Store(blk(row, 16))
				g2.Mul(w).Store(blk(row, 32))
				g3.Mul(w).Store(blk(row, 48))
			default:
				w := archsimd.BroadcastFloat32x16(weights[j])
				g0.MulAdd(w, archsimd.LoadFloat32x16(blk(row, 0))).Store(blk(row, 0))
				g1.MulAdd(w, archsimd.LoadFloat32x16(blk(row, 16))).Store(blk(row, 16))
				g2.MulAdd(w, archsimd.LoadFloat32x16(blk(row, 32))).Store(blk(row, 32))
				g3.MulAdd(w, archsimd.LoadFloat32x16(blk(row, 48))).Store(blk(row, 48))
			}
		}
	}
	archsimd.ClearAVXUpperBits()
	return fresh
}

// segmentScatterBlocks8 handles the other dims that are a multiple of 4, with 256-bit vectors on
// every CPU (the scatter is bound by memory, not by vector width, once dim is not 64); a dim of
// 8n+4 ends in 4 columns masked as the optimizers' kernels take theirs (optim_avx2.go).
func segmentScatterBlocks8(dst []float32, dim int, idx []int32, fresh int32, src []float32, srcBase, srcStride int,
	bounds []int64, weights, scales []float32) int32 {
	lo := bounds[0]
	full, low := dim&^7, lanes4()
	for i := 0; i+1 < len(bounds); i++ {
		g := src[srcBase+i*srcStride:][:dim]
		sv := archsimd.BroadcastFloat32x8(1)
		if scales != nil {
			sv = archsimd.BroadcastFloat32x8(scales[i])
		}
		for j := bounds[i] - lo; j < bounds[i+1]-lo; j++ {
			u := idx[j]
			row := dst[int(u)*dim:][:dim]
			first := fresh >= 0 && u >= fresh
			if first {
				if u != fresh {
					panic(notFirstTouch(u, fresh))
				}
				fresh++
			}
			wv := sv // no scalar float math here: see segment_reduce_simd.go
			if weights != nil {
				wv = archsimd.BroadcastFloat32x8(weights[j]).Mul(sv)
			}
			for c := 0; c < full; c += 8 {
				gv := archsimd.LoadFloat32x8((*[8]float32)(g[c : c+8]))
				out := (*[8]float32)(row[c : c+8])
				if first {
					gv.Mul(wv).Store(out)
				} else {
					gv.MulAdd(wv, archsimd.LoadFloat32x8(out)).Store(out)
				}
			}
			if full < dim {
				gv, out := archsimd.LoadMaskedFloat32x8(tail8(g), low), tail8(row)
				if first {
					gv.Mul(wv).StoreMasked(out, low)
				} else {
					gv.MulAdd(wv, archsimd.LoadMaskedFloat32x8(out, low)).StoreMasked(out, low)
				}
			}
		}
	}
	archsimd.ClearAVXUpperBits()
	return fresh
}
