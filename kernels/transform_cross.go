package kernels

import "math/bits"

// MaxCrossFields is the most fields one cross transform may combine.
const MaxCrossFields = 8

// HashTuple returns XXH64(le64(xs[0]) || le64(xs[1]) || ..., seed): the hash of a crossed tuple of
// IDs, without building the byte string. HashTuple([a], s) = HashID(a, s) and HashTuple([a, b], s)
// = HashPair(a, b, s).
func HashTuple(xs []int64, seed uint64) uint64 {
	var h uint64
	i := 0
	if len(xs) >= 4 {
		v1 := seed + xxPrime1 + xxPrime2
		v2 := seed + xxPrime2
		v3 := seed
		v4 := seed - xxPrime1
		for ; i+4 <= len(xs); i += 4 {
			v1 = xxRound(v1, uint64(xs[i]))
			v2 = xxRound(v2, uint64(xs[i+1]))
			v3 = xxRound(v3, uint64(xs[i+2]))
			v4 = xxRound(v4, uint64(xs[i+3]))
		}
		h = xxConverge(v1, v2, v3, v4)
	} else {
		h = seed + xxPrime5
	}
	h += uint64(8 * len(xs))
	for ; i < len(xs); i++ {
		h ^= xxRound(0, uint64(xs[i]))
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	return xxAvalanche(h)
}

// CrossBag writes the hashed Cartesian product of two bags into dst (len(a)·len(b) entries,
// a-major): dst[i·len(b)+j] = int64(HashPair(a[i], b[j], seed)).
func CrossBag(dst, a, b []int64, seed uint64) {
	k := 0
	for _, x := range a {
		for _, y := range b {
			dst[k] = int64(HashPair(x, y, seed))
			k++
		}
	}
}

// CrossBags writes the hashed Cartesian product of 1 to MaxCrossFields bags into dst (the product
// of their lengths entries), in lexicographic order with the first bag most significant:
// dst[k] = int64(HashTuple([bags[0][i0], bags[1][i1], ...], seed)) for k = (i0·len1 + i1)·len2 + ...
// When ws is not nil (one entry per bag, nil for an unweighted bag), dstW[k] receives the product
// of the tuple's weights (an unweighted bag's weight is 1).
func CrossBags(dst []int64, dstW []float32, bags [][]int64, ws [][]float32, seed uint64) {
	m := len(bags)
	for _, b := range bags {
		if len(b) == 0 {
			return
		}
	}
	if m == 2 && ws == nil {
		CrossBag(dst, bags[0], bags[1], seed)
		return
	}
	var idx [MaxCrossFields]int
	var tup [MaxCrossFields]int64
	for j, b := range bags {
		tup[j] = b[0]
	}
	for k := range dst {
		dst[k] = int64(HashTuple(tup[:m], seed))
		if ws != nil {
			w := float32(1)
			for j, bw := range ws {
				if bw != nil {
					w *= bw[idx[j]]
				}
			}
			dstW[k] = w
		}
		for j := m - 1; j >= 0; j-- { // odometer: advance the last index, carry leftwards
			idx[j]++
			if idx[j] < len(bags[j]) {
				tup[j] = bags[j][idx[j]]
				break
			}
			idx[j] = 0
			tup[j] = bags[j][0]
		}
	}
}
