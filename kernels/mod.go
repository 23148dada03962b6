package kernels

import "math/bits"

// Modulus is a positive divisor prepared for division-free remainders (Lemire, Kaser and Kurz,
// "Faster Remainder by Direct Computation", 2019): with M = floor((2^128-1)/n) + 1, the remainder of
// any 64-bit a is the high 64 bits of the 192-bit product (M·a mod 2^128)·n. Exact for every a and
// n. It is several times faster than a hardware 64-bit division by a run-time divisor.
type Modulus struct {
	n        uint64
	mhi, mlo uint64 // M
	neg      uint64 // 2^64 mod n: the correction for negative int64 inputs
}

// NewModulus prepares n (n > 0; it panics otherwise, so validate first).
func NewModulus(n int64) Modulus {
	if n <= 0 {
		panic("kernels: modulus must be positive")
	}
	u := uint64(n)
	m := Modulus{n: u}
	if u == 1 {
		return m
	}
	q1, r1 := ^uint64(0)/u, ^uint64(0)%u
	q0, _ := bits.Div64(r1, ^uint64(0), u) // floor((2^128-1)/n) = q1·2^64 + q0
	var c uint64
	m.mlo, c = bits.Add64(q0, 1, 0)
	m.mhi = q1 + c
	m.neg = (^uint64(0)%u + 1) % u
	return m
}

// N is the divisor.
func (m *Modulus) N() int64 { return int64(m.n) }

// rem returns a mod n for an unsigned a (n > 1).
func (m *Modulus) rem(a uint64) uint64 {
	hi, lo := bits.Mul64(m.mlo, a)
	lowHi := m.mhi*a + hi
	t, _ := bits.Mul64(lo, m.n)
	h2, l2 := bits.Mul64(lowHi, m.n)
	_, carry := bits.Add64(l2, t, 0)
	return h2 + carry
}

// ModFloorFast is ModFloor with a prepared modulus: dst[i] = src[i] mod n in [0, n). dst and src
// may be the same slice.
func ModFloorFast(dst, src []int64, m Modulus) {
	src = src[:len(dst)]
	if m.n == 1 {
		clear(dst)
		return
	}
	for i, x := range src {
		r := m.rem(uint64(x))
		// A negative x is uint64(x) - 2^64: subtract 2^64 mod n, adding n back on borrow (branch-free,
		// since hashed IDs are negative half the time).
		corr := m.neg & uint64(x>>63)
		r, borrow := bits.Sub64(r, corr, 0)
		dst[i] = int64(r + m.n&-borrow)
	}
}
