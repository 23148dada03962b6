//go:build goexperiment.simd

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
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
	for _, dim := range []int{4, 8, 12, 20, 24, 64} {
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

// TestInLoopPrefetchKernels: long bags of widths that are multiples of 16 run on the assembly
// kernel, which equal the Go kernels (AVX-512 and AVX2) bit for bit (each bag summed in entry
// order, weighted ones with one fused multiply-add per entry) with skipped entries, empty bags,
// scales and row-index offsets; arguments they cannot trust blindly are left to the Go kernels.
func TestInLoopPrefetchKernels(t *testing.T) {
	if !InLoop(64, inLoopMinBag, 1) {
		t.Skip("no AVX-512")
	}
	for _, dim := range []int{16, 32, 48, 64, 80, 112, 128, 176, 192, 256} {
		for _, byRow := range []bool{false, true} {
			t.Run(fmt.Sprintf("d%d_row%v", dim, byRow), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(dim), 11))
				rows, stride := 300, dim+16
				src := randVec(r, rows*stride)
				bounds := []int64{0, 70, 70, 75, 200, 241}
				offs := make([]int64, bounds[len(bounds)-1])
				for j := range offs {
					offs[j] = int64(r.IntN(rows))
					if !byRow {
						offs[j] *= int64(stride)
					}
					if j%17 == 3 {
						offs[j] = -1
					}
				}
				mult := int64(1)
				if byRow {
					mult = int64(stride)
				}
				ones := make([]float32, len(offs))
				for j := range ones {
					ones[j] = 1
				}
				for _, w := range [][]float32{nil, randVec(r, len(offs))} {
					for _, sc := range [][]float32{nil, randVec(r, 5)} {
						got := make([]float32, 5*(dim+8))
						want := make([]float32, len(got))
						require.True(t, segmentReduceInLoop(got, 0, dim+8, dim, src, offs, mult, bounds, w, sc))
						goW := w
						if goW == nil {
							goW = ones // the Go kernels' weighted path: a weight of 1 is an exact add
						}
						for _, p := range []func(dst []float32, dstBase, dstStride, dim int, src []float32, offs []int64,
							mult int64, bounds []int64, weights, scales []float32){segmentReduce64Groups, segmentReduceAVX2} {
							p(want, 0, dim+8, dim, src, offs, mult, bounds, goW, sc)
							require.Equal(t, want, got)
						}
						generic := make([]float32, len(got))
						SegmentReduceGeneric(generic, 0, dim+8, dim, src, offs, mult, bounds, w, sc)
						requireClose(t, f64(generic), got, 1e-5, "generic")
					}
				}
				// refused: a row past the source, short bags, a dst too short, bounds out of order
				bad := append([]int64(nil), offs...)
				bad[100] = int64(rows*stride) / mult
				require.False(t, segmentReduceInLoop(make([]float32, 5*dim), 0, dim, dim, src, bad, mult, bounds, nil, nil))
				require.False(t, segmentReduceInLoop(make([]float32, 5*dim), 0, dim, dim, src, offs, mult,
					[]int64{0, 10, 20}, nil, nil))
				require.False(t, segmentReduceInLoop(make([]float32, 4*dim), 0, dim, dim, src, offs, mult, bounds, nil, nil))
				require.False(t, segmentReduceInLoop(make([]float32, 5*dim), 0, dim, dim, src, offs, mult,
					[]int64{0, 200, 100, 150, 200, 241}, nil, nil))
				require.False(t, segmentReduceInLoop(make([]float32, 5*dim), 0, dim, dim, src, offs, mult, bounds,
					make([]float32, 10), nil), "too few weights")
				require.False(t, segmentReduceInLoop(make([]float32, dim), 0, dim, dim, src[:dim/2], make([]int64, 64),
					int64(2*dim), []int64{0, 64}, nil, nil), "a source shorter than one row")
			})
		}
	}
}

// TestSegmentReduceNarrowWidths: every width below 64 that is a multiple of 4 (D=12 on its own
// kernel, the others on the pieces they split into) and some around them equal the portable kernel
// (bit for bit unweighted, both summing in entry order) with strided output, skipped entries, empty
// bags and scales, on rows that end exactly at the table's end (a read past a row would panic).
func TestSegmentReduceNarrowWidths(t *testing.T) { checkNarrowWidths(t) }

// TestSegmentReduceWithoutAVX512: the same on the kernels a CPU with AVX2 but not AVX-512 runs
// (the 4-float-tail assembly kernel, D=8's and D=12's, the AVX2 one and the splits between them).
func TestSegmentReduceWithoutAVX512(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA")
	}
	defer func(was bool) { hasAVX512 = was }(hasAVX512)
	hasAVX512 = false
	require.True(t, halfTail(20))
	checkNarrowWidths(t)
}

func checkNarrowWidths(t *testing.T) {
	dims := []int{1, 3, 5, 13, 66, 68, 72, 76, 100}
	for d := 4; d < 64; d += 4 {
		dims = append(dims, d)
	}
	for _, dim := range dims {
		for _, weighted := range []bool{false, true} {
			t.Run(fmt.Sprintf("d%d_w%v", dim, weighted), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(dim), 11))
				const rows = 9
				src := randVec(r, rows*dim)
				bounds := []int64{0, 4, 4, 9, 14}
				offs := make([]int64, 14)
				for j := range offs {
					offs[j] = int64(r.IntN(rows))
				}
				offs[2], offs[5], offs[6] = -1, rows-1, rows-1
				var w, sc []float32
				if weighted {
					w, sc = randVec(r, len(offs)), randVec(r, 4)
				}
				stride := dim + 5
				want := randVec(r, 3+4*stride) // the columns between outputs stay as they were
				got := append([]float32(nil), want...)
				SegmentReduceGeneric(want, 3, stride, dim, src, offs, int64(dim), bounds, w, sc)
				SegmentReduce(got, 3, stride, dim, src, offs, int64(dim), bounds, w, sc)
				if weighted {
					requireClose(t, f64(want), got, 1e-5, "weighted")
				} else {
					require.Equal(t, want, got)
				}
			})
		}
	}
}
