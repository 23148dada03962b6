package kernels

// SegmentReduce is the index-aware segment reduction at the heart of embedding pooling and of the
// duplicate-merging backward (RecIS Algorithm 1). For every segment i in [0, len(bounds)-1) it
// overwrites the dim values at dst[dstBase+i*dstStride:] with
//
//	scale_i · Σ_{j ∈ [bounds[i], bounds[i+1])} w_j · src[offs[j]·mult : offs[j]·mult+dim]
//
// where w_j = weights[j] (1 when weights is nil) and scale_i = scales[i] (1 when scales is nil).
// offs holds offsets (mult 1) or row indices (mult = the row stride: a fixed table pools straight
// from the batch's IDs, with no offset array written and read back). A negative entry marks a
// missing source (an unresolved row) and contributes nothing; a segment
// with no contributions becomes zero. Each segment has exactly one writer, so callers split
// segments across goroutines without atomics. Whole CSR walks go through one call: the archsimd
// path pays a fixed cost per call (see segment_reduce_simd.go), not per segment.
//
// Out-of-range bounds or offsets panic with an index error; the caller validates its inputs.
func SegmentReduce(dst []float32, dstBase, dstStride, dim int, src []float32, offs []int64, mult int64,
	bounds []int64, weights, scales []float32) {
	segmentReduce(dst, dstBase, dstStride, dim, src, offs, mult, bounds, weights, scales)
}

// SegmentReduceGeneric is the portable implementation of SegmentReduce.
func SegmentReduceGeneric(dst []float32, dstBase, dstStride, dim int, src []float32, offs []int64, mult int64,
	bounds []int64, weights, scales []float32) {
	for i := 0; i+1 < len(bounds); i++ {
		out := dst[dstBase+i*dstStride:][:dim]
		clear(out)
		for j := bounds[i]; j < bounds[i+1]; j++ {
			o := offs[j] * mult
			if o < 0 {
				continue
			}
			w := float32(1)
			if weights != nil {
				w = weights[j]
			}
			row := src[o : o+int64(dim)]
			for k := range out {
				out[k] += w * row[k]
			}
		}
		if scales != nil {
			s := scales[i]
			for k := range out {
				out[k] *= s
			}
		}
	}
}
