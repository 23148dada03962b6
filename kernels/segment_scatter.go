package kernels

import "fmt"

// SegmentScatter is the transpose of SegmentReduce, the sample-order half of the backward pass: every
// segment's source vector is added into the rows its entries name. For segment i in
// [0, len(bounds)-1) and entry j in [bounds[i], bounds[i+1]) (rebased so that bounds[0] is entry 0 of
// idx and weights), row idx[j] of dst (the dim values at idx[j]·dim) receives
//
//	scale_i · w_j · src[srcBase+i·srcStride : +dim]
//
// with w_j = weights[j] (1 when weights is nil) and scale_i = scales[i] (1 when scales is nil).
//
// Rows are numbered in the order they are first touched, so dst needs no zeroing pass: with
// fresh ≥ 0, an entry whose row equals fresh is that row's first contribution and overwrites it,
// and fresh advances; SegmentScatter returns the new fresh. With fresh < 0 every entry adds (dst
// must be zeroed by the caller) and −1 is returned. A row above fresh panics (not numbered in
// first-touch order), as do out-of-range indices; the caller guarantees both.
func SegmentScatter(dst []float32, dim int, idx []int32, fresh int32, src []float32, srcBase, srcStride int,
	bounds []int64, weights, scales []float32) int32 {
	return segmentScatter(dst, dim, idx, fresh, src, srcBase, srcStride, bounds, weights, scales)
}

// SegmentScatterGeneric is the portable implementation of SegmentScatter.
func SegmentScatterGeneric(dst []float32, dim int, idx []int32, fresh int32, src []float32, srcBase, srcStride int,
	bounds []int64, weights, scales []float32) int32 {
	lo := bounds[0]
	for i := 0; i+1 < len(bounds); i++ {
		g := src[srcBase+i*srcStride:][:dim]
		s := float32(1)
		if scales != nil {
			s = scales[i]
		}
		for j := bounds[i] - lo; j < bounds[i+1]-lo; j++ {
			w := s
			if weights != nil {
				w *= weights[j]
			}
			u := idx[j]
			row := dst[int(u)*dim:][:dim]
			if fresh >= 0 && u >= fresh {
				if u != fresh {
					panic(notFirstTouch(u, fresh))
				}
				fresh++
				for k := range row {
					row[k] = w * g[k]
				}
				continue
			}
			for k := range row {
				row[k] += w * g[k]
			}
		}
	}
	return fresh
}

// notFirstTouch is the panic of a row index numbered out of first-touch order (a caller bug).
func notFirstTouch(row, fresh int32) string {
	return fmt.Sprintf("kernels: SegmentScatter row %d touched before row %d", row, fresh)
}
