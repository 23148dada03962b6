package embedding

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/recgo/recgo/kernels"
	"github.com/stretchr/testify/require"
)

// TestLongBagsMatchBruteForce pools bags long enough to be summed in pieces (poolLongBag: more than
// twice the rows a feature-major kernel call takes) or, of a width a multiple of 64, by the in-loop
// prefetching kernel (in entry order, as FBGEMM sums), beside short and empty ones,
// weighted, with sum and mean pooling and widths with and without a vector tail, against a float64
// reference within the float32 summation bound.
func TestLongBagsMatchBruteForce(t *testing.T) {
	for _, dim := range []int{20, 48, 128} {
		for _, weighted := range []bool{false, true} {
			t.Run(fmt.Sprintf("d%d_w%v", dim, weighted), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(dim), 3))
				tb, err := NewFixedTable("t", 300, dim, OptimizerConfig{Kind: OptNone})
				require.NoError(t, err)
				for j := range tb.Data {
					tb.Data[j] = float32(r.NormFloat64())
				}
				feats := []Feature{{Name: "sum", Table: 0, Pooling: PoolSum}, {Name: "mean", Table: 0, Pooling: PoolMean}}
				c, err := NewCollectionWithOptions([]*Table{tb}, feats, Options{PoolOrder: PoolFeatureMajor})
				require.NoError(t, err)
				defer c.Close()
				lengths := []int64{0, 3001, 70, 1, 2500, 0} // 3 samples × 2 features, feature-major
				var b Batch
				b.KeyFeature = []int64{0, 1}
				for _, n := range lengths {
					for range n {
						b.Values = append(b.Values, r.Int64N(300))
						b.Weights = append(b.Weights, float32(r.Float64()+0.5))
					}
				}
				b.Lengths = lengths
				if !weighted {
					b.Weights = nil
				}
				out := make([]float32, 3*c.Width())
				_, err = c.Forward(b, out, false, false)
				require.NoError(t, err)
				at := 0
				for f := range 2 {
					for s := range 3 {
						n := int(lengths[f*3+s])
						want, mag := make([]float64, dim), make([]float64, dim)
						seq := make([]float32, dim) // float32, in entry order (FBGEMM's order)
						for j := at; j < at+n; j++ {
							w := 1.0
							if weighted {
								w = float64(b.Weights[j])
							}
							for d, x := range tb.Row(b.Values[j]) {
								want[d] += w * float64(x)
								mag[d] += math.Abs(w * float64(x))
								seq[d] += x
							}
						}
						for d := range want {
							got := out[s*c.Width()+c.ColumnOffset(f)+d]
							if f == 1 && n > 0 {
								want[d] /= float64(n)
								mag[d] /= float64(n)
								seq[d] *= 1 / float32(n)
							}
							msg := fmt.Sprintf("feature %d sample %d col %d", f, s, d)
							// a float32 sum of n terms is within n·u·Σ|terms| of the exact one (Higham)
							require.InDelta(t, want[d], float64(got), 1e-5*(1+math.Abs(want[d]))+float64(n)*0x1p-24*mag[d], msg)
							if !weighted && kernels.InLoop(dim, int64(n), 1) {
								require.Equal(t, seq[d], got, msg) // the in-loop kernel sums in entry order
							}
						}
						at += n
					}
				}
			})
		}
	}
}
