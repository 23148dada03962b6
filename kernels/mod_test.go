package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestModFloorFastMatchesDivision(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	edges := []int64{0, 1, -1, 2, -2, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}
	divisors := []int64{1, 2, 3, 7, 10, 1000, 1 << 20, 1000003, 1<<32 + 1, math.MaxInt64, math.MaxInt64 - 1, 1 << 62}
	for range 20 {
		divisors = append(divisors, 1+r.Int64N(math.MaxInt64), 1+r.Int64N(1<<20))
	}
	for _, n := range divisors {
		src := append([]int64{}, edges...)
		for range 200 {
			src = append(src, int64(r.Uint64()), r.Int64N(n)-n/2, -r.Int64N(1<<40), int64(r.Uint64())%n, -(int64(r.Uint64()) % n))
		}
		want := make([]int64, len(src))
		got := make([]int64, len(src))
		ModFloor(want, src, n)
		m := NewModulus(n)
		ModFloorFast(got, src, m)
		assert.Equal(t, want, got, "n=%d", n)
		assert.Equal(t, n, m.N())
		ModFloorFast(src, src, m) // in place
		assert.Equal(t, want, src, "in place, n=%d", n)
	}
}

func FuzzModFloorFast(f *testing.F) {
	f.Add(int64(-7), int64(3))
	f.Add(int64(math.MinInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, x, n int64) {
		if n <= 0 {
			return
		}
		want, got := []int64{0}, []int64{0}
		ModFloor(want, []int64{x}, n)
		ModFloorFast(got, []int64{x}, NewModulus(n))
		if want[0] != got[0] {
			t.Fatalf("%d mod %d: want %d, got %d", x, n, want[0], got[0])
		}
	})
}
