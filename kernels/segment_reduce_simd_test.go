//go:build goexperiment.simd

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSegmentReduceAVX2 runs the 256-bit path (used on CPUs without AVX-512) against the portable
// one, whatever the dispatcher would pick on this machine.
func TestSegmentReduceAVX2(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA")
	}
	for _, dim := range []int{8, 24, 64, 72, 128, 136, 200} {
		for _, weighted := range []bool{false, true} {
			t.Run(fmt.Sprintf("d%d_w%v", dim, weighted), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(dim), 5))
				rows, stride := 30, dim+8
				src := randVec(r, rows*stride)
				bounds := []int64{0, 3, 3, 7, 12}
				offs := make([]int64, 12)
				for j := range offs {
					offs[j] = int64(r.IntN(rows) * stride)
				}
				offs[4] = -1
				var w []float32
				if weighted {
					w = randVec(r, 12)
				}
				sc := randVec(r, 4)
				want := make([]float32, 4*dim)
				got := make([]float32, 4*dim)
				SegmentReduceGeneric(want, 0, dim, dim, src, offs, 1, bounds, w, sc)
				segmentReduceAVX2(got, 0, dim, dim, src, offs, 1, bounds, w, sc)
				requireClose(t, f64(want), got, 1e-5, "avx2")
			})
		}
	}
}

// TestSegmentScatterAVX2 runs the 256-bit scatter against the portable one.
func TestSegmentScatterAVX2(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA")
	}
	for _, dim := range []int{8, 24, 64} {
		for _, fresh := range []int32{0, -1} {
			t.Run(fmt.Sprintf("d%d_fresh%d", dim, fresh), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(dim), 9))
				idx, bounds, rows := scatterCase(r, 8, 2)
				src := randVec(r, 8*dim)
				w := randVec(r, len(idx))
				sc := randVec(r, 8)
				want := make([]float32, int(rows)*dim)
				got := make([]float32, len(want))
				SegmentScatterGeneric(want, dim, idx, fresh, src, 0, dim, bounds, w, sc)
				segmentScatterBlocks8(got, dim, idx, fresh, src, 0, dim, bounds, w, sc)
				requireClose(t, f64(want), got, 1e-5, "avx2")
			})
		}
	}
}
