//go:build goexperiment.simd

package kernels

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// maskedDims are widths that are not a multiple of 16 but of 4: alone, and as the last column
// group of wider rows.
var maskedDims = []int{4, 8, 12, 20, 24, 28, 36, 40, 44, 52, 56, 60, 68, 72, 100, 136, 188, 200}

// TestMaskedTailMatchesLaneKernels: widths that pool in one pass with a masked last block equal
// the 4-column kernel (each lane summed in entry order with the same add or fused multiply-add, as
// the split into a vector head and the rest summed them) bit for bit, weighted or not, by offset
// or row index, in short bags and long ones (the in-loop prefetching kernel), with strided output (the columns between outputs stay as they were), skipped
// entries, empty bags and scales; and the portable kernel within rounding.
func TestMaskedTailMatchesLaneKernels(t *testing.T) {
	if !maskedTail(20) {
		t.Skip("no AVX-512")
	}
	for _, dim := range maskedDims {
		for _, byRow := range []bool{false, true} {
			t.Run(fmt.Sprintf("d%d_row%v", dim, byRow), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(dim), 7))
				rows, stride := 50, dim+4
				src := randVec(r, rows*stride)
				short, long := []int64{0, 3, 3, 4, 40, 47}, []int64{0, 70, 70, 75, 200, 241}
				require.False(t, InLoop(dim, short[5], 5))
				require.Equal(t, dim != 4 && dim != 12, InLoop(dim, long[5], 5), "the in-loop prefetching kernel")
				bounds := long
				offs := make([]int64, bounds[len(bounds)-1])
				for j := range offs {
					offs[j] = int64(r.IntN(rows))
					if j%9 == 2 {
						offs[j] = -1
					}
				}
				offs[5] = int64(rows - 1)
				mult := int64(stride)
				if !byRow {
					for j := range offs {
						if offs[j] >= 0 {
							offs[j] *= int64(stride)
						}
					}
					mult = 1
				}
				for k, w := range [][]float32{nil, randVec(r, len(offs)), nil, randVec(r, int(short[5]))} {
					if k == 2 {
						bounds = short
					}
					for _, sc := range [][]float32{nil, randVec(r, 5)} {
						out := dim + 3
						want := randVec(r, 2+5*out)
						got := append([]float32(nil), want...)
						generic := append([]float32(nil), want...)
						segmentReduce4(want, 2, out, dim, src, offs, mult, bounds, w, sc)
						SegmentReduce(got, 2, out, dim, src, offs, mult, bounds, w, sc)
						require.Equal(t, want, got)
						SegmentReduceGeneric(generic, 2, out, dim, src, offs, mult, bounds, w, sc)
						requireClose(t, f64(generic), got, 1e-5, "generic")
					}
				}
			})
		}
	}
}

// TestMaskedTailStaysInsideRows: the masked block neither reads past a row nor writes past an
// output that ends where the mapping does (the next page is unmapped: a full-width load or store
// there would fault).
func TestMaskedTailStaysInsideRows(t *testing.T) {
	if !maskedTail(20) {
		t.Skip("no AVX-512")
	}
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	require.NoError(t, err)
	defer func() { require.NoError(t, syscall.Munmap(mem)) }()
	require.NoError(t, syscall.Mprotect(mem[page:], syscall.PROT_NONE))
	floats := unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), page/4)
	for _, dim := range maskedDims {
		src := floats[len(floats)-2*dim:] // two rows; the second ends at the unmapped page
		for k := range src {
			src[k] = float32(k % 7)
		}
		want := make([]float32, dim)
		SegmentReduceGeneric(want, 0, dim, dim, src, []int64{1, 1, 0}, int64(dim), []int64{0, 3}, nil, nil)
		dst := floats[len(floats)-dim-2*dim : len(floats)-2*dim] // below the rows, ending where they start
		SegmentReduce(dst, 0, dim, dim, src, []int64{1, 1, 0}, int64(dim), []int64{0, 3}, nil, nil)
		require.Equal(t, want, dst, "dim %d", dim)
		out := floats[len(floats)-dim:] // the output over the last row, ending at the unmapped page
		SegmentReduce(out, 0, dim, dim, append([]float32(nil), src...), []int64{1, 1, 0}, int64(dim),
			[]int64{0, 3}, nil, nil)
		require.Equal(t, want, out, "dim %d", dim)
	}
}

// TestMaskedTailLeavesBadArgumentsToGo: arguments the assembly kernel cannot trust run on the Go
// kernels, which panic with an index error, as before.
func TestMaskedTailLeavesBadArgumentsToGo(t *testing.T) {
	src := make([]float32, 10*20)
	require.Panics(t, func() {
		SegmentReduce(make([]float32, 20), 0, 20, 20, src, []int64{9, 10}, 20, []int64{0, 2}, nil, nil)
	})
	require.Panics(t, func() {
		SegmentReduce(make([]float32, 20), 0, 20, 20, src, []int64{1, 2}, 20, []int64{0, 2}, []float32{1}, nil)
	})
	require.False(t, trustedArgs(make([]float32, 20), 0, 20, 20, src, []int64{1, 2}, 20, []int64{0, 0}, nil, nil),
		"no entries")
}

// TestSegmentReduce8: the AVX2 kernel for D=8 (CPUs without AVX-512) equals the 4-column kernel bit
// for bit, weighted or not, with skipped entries, empty bags, scales and strided output.
func TestSegmentReduce8(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA")
	}
	r := rand.New(rand.NewPCG(8, 8))
	src := randVec(r, 20*8)
	bounds := []int64{0, 3, 3, 9, 13}
	offs := []int64{19, 2, -1, 7, 7, 0, 19, 4, 5, 11, -1, 3, 8}
	for _, w := range [][]float32{nil, randVec(r, len(offs))} {
		for _, sc := range [][]float32{nil, randVec(r, 4)} {
			want := randVec(r, 1+4*11)
			got := append([]float32(nil), want...)
			segmentReduce4(want, 1, 11, 8, src, offs, 8, bounds, w, sc)
			segmentReduce8(got, 1, 11, src, offs, 8, bounds, w, sc)
			require.Equal(t, want, got)
		}
	}
}

// TestSegmentReduceHalf: the AVX2 kernel for widths of 8n+4 columns (CPUs without AVX-512: run
// directly here, whatever the dispatcher picks) equals the 4-column kernel bit for bit, weighted or
// not, with skipped entries, empty bags, scales and strided output, on rows that end at the table's
// end.
func TestSegmentReduceHalf(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA")
	}
	for dim := 20; dim < 64; dim += 8 {
		r := rand.New(rand.NewPCG(uint64(dim), 4))
		const rows = 20
		src := randVec(r, rows*dim)
		bounds := []int64{0, 3, 3, 9, 13}
		offs := []int64{19, 2, -1, 7, 7, 0, 19, 4, 5, 11, -1, 3, 8}
		require.True(t, trustedArgs(make([]float32, 4*dim), 0, dim, dim, src, offs, int64(dim), bounds, nil, nil))
		for _, w := range [][]float32{nil, randVec(r, len(offs))} {
			for _, sc := range [][]float32{nil, randVec(r, 4)} {
				stride := dim + 3
				want := randVec(r, 1+4*stride)
				got := append([]float32(nil), want...)
				segmentReduce4(want, 1, stride, dim, src, offs, int64(dim), bounds, w, sc)
				segmentReduceHalf(got, 1, stride, dim, src, offs, int64(dim), bounds, w, sc)
				require.Equal(t, want, got, "dim %d", dim)
			}
		}
	}
}
