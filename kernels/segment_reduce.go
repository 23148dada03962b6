package kernels

// WeightedSum is the index-aware segment reduction at the heart of embedding pooling and of the
// duplicate-merging backward (RecIS Algorithm 1): it overwrites dst with
//
//	dst = scale · Σ_j w_j · src[offs[j] : offs[j]+len(dst)]
//
// where w_j = weights[j], or 1 when weights is nil. A negative offset marks a missing source (an
// unresolved row) and contributes nothing. With no contributions dst becomes zero. The caller owns
// dst exclusively (one writer per output segment), so no atomics are needed; len(weights) must equal
// len(offs) when weights is non-nil, and every non-negative offset must leave room for len(dst)
// values in src (otherwise the function panics with an index error).
func WeightedSum(dst, src []float32, offs []int64, weights []float32, scale float32) {
	weightedSum(dst, src, offs, weights, scale)
}

// WeightedSumGeneric is the portable implementation of WeightedSum.
func WeightedSumGeneric(dst, src []float32, offs []int64, weights []float32, scale float32) {
	clear(dst)
	d := len(dst)
	for j, o := range offs {
		if o < 0 {
			continue
		}
		w := float32(1)
		if weights != nil {
			w = weights[j]
		}
		row := src[o : o+int64(d)]
		for k := range dst {
			dst[k] += w * row[k]
		}
	}
	if scale != 1 {
		for k := range dst {
			dst[k] *= scale
		}
	}
}
