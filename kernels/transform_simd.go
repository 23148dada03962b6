//go:build goexperiment.simd

package kernels

import "simd/archsimd"

var transformAVX512 = archsimd.X86.AVX512()

// maxVectorBounds is the boundary count up to which bucketize compares each vector of 8 values
// against every boundary (branch-free) instead of binary-searching each value.
const maxVectorBounds = 32

// HashIDs writes dst[i] = int64(HashID(src[i], seed)); dst and src may be the same slice. With
// AVX-512 it hashes 8 IDs per step in vector registers.
func HashIDs(dst, src []int64, seed uint64) {
	if !transformAVX512 {
		HashIDsGeneric(dst, src, seed)
		return
	}
	n := len(dst)
	src = src[:n]
	p1 := archsimd.BroadcastUint64x8(xxPrime1)
	p2 := archsimd.BroadcastUint64x8(xxPrime2)
	p3 := archsimd.BroadcastUint64x8(xxPrime3)
	p4 := archsimd.BroadcastUint64x8(xxPrime4)
	h0 := archsimd.BroadcastUint64x8(seed + xxPrime5 + 8)
	// Logical right shifts are rotations plus a mask: ShiftAllRight with a variable count is far
	// slower than the whole hash on this toolchain.
	m33 := archsimd.BroadcastUint64x8(1<<31 - 1)
	m29 := archsimd.BroadcastUint64x8(1<<35 - 1)
	m32 := archsimd.BroadcastUint64x8(1<<32 - 1)
	i := 0
	for ; i+8 <= n; i += 8 {
		x := archsimd.LoadInt64x8Slice(src[i : i+8]).AsUint64x8()
		k := x.Mul(p2).RotateAllLeft(31).Mul(p1)
		h := h0.Xor(k).RotateAllLeft(27).Mul(p1).Add(p4)
		h = h.Xor(h.RotateAllRight(33).And(m33)).Mul(p2)
		h = h.Xor(h.RotateAllRight(29).And(m29)).Mul(p3)
		h = h.Xor(h.RotateAllRight(32).And(m32))
		h.AsInt64x8().StoreSlice(dst[i : i+8])
	}
	archsimd.ClearAVXUpperBits() // the scalar tail and callers are legacy-SSE encoded (see segment_reduce_simd.go)
	HashIDsGeneric(dst[i:], src[i:], seed)
}

// BucketizeFloat64 is BucketizeFloat64Generic with an AVX-512 path for up to 32 boundaries.
func BucketizeFloat64(dst []int64, src []float64, bounds []float64) int {
	if !transformAVX512 || len(bounds) > maxVectorBounds {
		return BucketizeFloat64Generic(dst, src, bounds)
	}
	n := len(dst)
	src = src[:n]
	i := 0
	firstNaN := -1
	for ; i+8 <= n; i += 8 {
		x := archsimd.LoadFloat64x8Slice(src[i : i+8])
		if firstNaN < 0 && x.Equal(x).ToBits() != 0xff {
			firstNaN = i + nanIndex(src[i:i+8])
		}
		bucketize8(x, bounds).StoreSlice(dst[i : i+8])
	}
	archsimd.ClearAVXUpperBits()
	if r := BucketizeFloat64Generic(dst[i:], src[i:], bounds); firstNaN < 0 && r >= 0 {
		firstNaN = i + r
	}
	return firstNaN
}

// BucketizeFloat32 is BucketizeFloat32Generic with an AVX-512 path for up to 32 boundaries.
func BucketizeFloat32(dst []int64, src []float32, bounds []float64) int {
	if !transformAVX512 || len(bounds) > maxVectorBounds {
		return BucketizeFloat32Generic(dst, src, bounds)
	}
	n := len(dst)
	src = src[:n]
	i := 0
	firstNaN := -1
	for ; i+8 <= n; i += 8 {
		x := archsimd.LoadFloat32x8Slice(src[i : i+8]).ConvertToFloat64()
		if firstNaN < 0 && x.Equal(x).ToBits() != 0xff {
			for j, v := range src[i : i+8] {
				if v != v {
					firstNaN = i + j
					break
				}
			}
		}
		bucketize8(x, bounds).StoreSlice(dst[i : i+8])
	}
	archsimd.ClearAVXUpperBits()
	if r := BucketizeFloat32Generic(dst[i:], src[i:], bounds); firstNaN < 0 && r >= 0 {
		firstNaN = i + r
	}
	return firstNaN
}

// bucketize8 counts, for each of 8 values, the boundaries at or below it (NaN counts none).
func bucketize8(x archsimd.Float64x8, bounds []float64) archsimd.Int64x8 {
	one := archsimd.BroadcastInt64x8(1)
	var acc archsimd.Int64x8
	for _, b := range bounds {
		acc = acc.Add(one.Masked(x.GreaterEqual(archsimd.BroadcastFloat64x8(b))))
	}
	return acc
}

func nanIndex(s []float64) int {
	for j, v := range s {
		if v != v {
			return j
		}
	}
	return -1
}
