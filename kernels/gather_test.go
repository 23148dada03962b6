package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGatherRowsMatchesReference: every dim (the SIMD and the portable paths), strided sources,
// missing rows (zeros) and repeated rows.
func TestGatherRowsMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dim := range []int{1, 3, 8, 16, 19, 64, 128} {
		for _, stride := range []int{dim, dim + 5} {
			t.Run(fmt.Sprintf("dim%d/stride%d", dim, stride), func(t *testing.T) {
				rows := 20
				src := make([]float32, rows*stride)
				for i := range src {
					src[i] = float32(r.NormFloat64())
				}
				offs := make([]int64, 50)
				for i := range offs {
					offs[i] = r.Int64N(int64(rows)+2) - 2 // some negative: missing rows
				}
				dst := make([]float32, len(offs)*dim)
				for i := range dst {
					dst[i] = 7 // overwritten
				}
				GatherRows(dst, dim, src, offs, int64(stride))
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

// TestAddScaledRowsMatchesReference: repeated rows accumulate in order, negative rows are skipped,
// the SIMD path agrees with the portable one (to FMA rounding) and with a float64 reference.
func TestAddScaledRowsMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, dim := range []int{1, 8, 19, 64} {
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
