package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestGatherRowsMatchesReference: every dim (the SIMD and the portable paths), strided sources,
// missing rows (zeros) and repeated rows, for GatherRows and GatherRowsStreaming (whose streamed
// path needs a 32-byte aligned destination: both an aligned and a misaligned one are tried).
func TestGatherRowsMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	kernels := []struct {
		name string
		fn   func([]float32, int, []float32, []int64, int64)
		skew int // float32s the destination starts past a 32-byte boundary
	}{{"plain", GatherRows, 0}, {"streaming", GatherRowsStreaming, 0}, {"streaming_misaligned", GatherRowsStreaming, 1}}
	for _, k := range kernels {
		for _, dim := range []int{1, 3, 8, 16, 19, 64, 128} {
			for _, stride := range []int{dim, dim + 5} {
				t.Run(fmt.Sprintf("%s/dim%d/stride%d", k.name, dim, stride), func(t *testing.T) {
					rows := 20
					src := make([]float32, rows*stride)
					for i := range src {
						src[i] = float32(r.NormFloat64())
					}
					offs := make([]int64, 50)
					for i := range offs {
						offs[i] = r.Int64N(int64(rows)+2) - 2 // some negative: missing rows
					}
					dst := aligned32(len(offs)*dim, k.skew)
					for i := range dst {
						dst[i] = 7 // overwritten
					}
					k.fn(dst, dim, src, offs, int64(stride))
					for i, o := range offs {
						for c := 0; c < dim; c++ {
							want := float32(0)
							if o >= 0 {
								want = src[int(o)*stride+c]
							}
							require.Equal(t, want, dst[i*dim+c], "row %d col %d", i, c)
						}
					}
					ref := make([]float32, len(dst))
					GatherRowsGeneric(ref, dim, src, offs, int64(stride))
					require.Equal(t, ref, dst)
				})
			}
		}
	}
}

// TestGatherRowsStreamingChecksBoundsFirst: an offset past the source panics with an index
// error, as slicing does, and nothing was written (the assembly has no bounds checks of its own).
func TestGatherRowsStreamingChecksBoundsFirst(t *testing.T) {
	src := make([]float32, 4*64)
	dst := aligned32(3*64, 0)
	for i := range dst {
		dst[i] = 7
	}
	require.Panics(t, func() { GatherRowsStreaming(dst, 64, src, []int64{0, 4, 1}, 64) })
	for _, v := range dst {
		require.Equal(t, float32(7), v)
	}
	require.Panics(t, func() { GatherRowsStreaming(dst[:64], 64, src, []int64{0, 1}, 64) }) // dst too short
}

// aligned32 is a slice of n float32s starting skew values past a 32-byte boundary.
func aligned32(n, skew int) []float32 {
	buf := make([]float32, n+8+skew)
	lead := int((32 - uintptr(unsafe.Pointer(&buf[0]))%32) % 32 / 4)
	return buf[lead+skew : lead+skew+n]
}

// TestAddScaledRowsMatchesReference: repeated rows accumulate in order, negative rows are skipped,
// the SIMD path agrees with the portable one (to FMA rounding) and with a float64 reference.
func TestAddScaledRowsMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, dim := range []int{1, 4, 8, 12, 19, 20, 64} {
		for _, stride := range []int{dim, dim + 3} {
			t.Run(fmt.Sprintf("dim%d/stride%d", dim, stride), func(t *testing.T) {
				nrows, n := 6, 40
				dst := make([]float32, nrows*stride)
				for i := range dst {
					dst[i] = float32(r.NormFloat64())
				}
				want := make([]float64, len(dst))
				for i, v := range dst {
					want[i] = float64(v)
				}
				src := make([]float32, n*dim+5)
				for i := range src {
					src[i] = float32(r.NormFloat64())
				}
				rows, offs := make([]int64, n), make([]int64, n)
				for k := range rows {
					rows[k] = r.Int64N(int64(nrows)+1) - 1
					offs[k] = int64(k*dim) + r.Int64N(6)
					if rows[k] >= 0 {
						for c := 0; c < dim; c++ {
							want[int(rows[k])*stride+c] += -0.5 * float64(src[int(offs[k])+c])
						}
					}
				}
				generic := append([]float32(nil), dst...)
				AddScaledRows(dst, stride, dim, rows, src, offs, -0.5)
				AddScaledRowsGeneric(generic, stride, dim, rows, src, offs, -0.5)
				for i := range dst {
					require.InDelta(t, want[i], float64(dst[i]), 1e-4, "value %d", i)
					require.InDelta(t, float64(generic[i]), float64(dst[i]), 1e-5, "value %d", i)
				}
			})
		}
	}
}
