package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func requireClose(t *testing.T, want []float64, got []float32, tol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.InDelta(t, want[i], float64(got[i]), tol*(1+math.Abs(want[i])), "%s[%d]", what, i)
	}
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// Each kernel runs through its public (dispatching) name and its portable one.
var paths = []struct {
	name string
	sr   func(dst []float32, dstBase, dstStride, dim int, src []float32, offs []int64, mult int64, bounds []int64, weights, scales []float32)
	sgd  func(w []float32, wStride, dim int, rows []int64, g []float32, lr float32)
	ada  func(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, lr, eps float32)
	adam func(w []float32, wStride int, s []float32, sStride, dim int, rows []int64, g []float32, p AdamParams)
}{
	{"dispatch", SegmentReduce, SGDRows, AdagradRows, AdamRows},
	{"generic", SegmentReduceGeneric, SGDRowsGeneric, AdagradRowsGeneric, AdamRowsGeneric},
}

func TestSegmentReduce(t *testing.T) {
	cases := []struct {
		dim, segs        int
		weighted, scaled bool
		missing          bool
	}{
		{64, 10, false, false, false}, {64, 7, true, true, true}, {64, 0, false, false, false},
		{16, 5, true, false, false}, {48, 9, false, true, true}, {37, 6, true, true, true}, {3, 4, false, false, false},
		{128, 3, true, true, false}, {128, 6, false, true, true},
		// multiples of 16: row-major groups of 128 columns, then 64, then 16 to 48
		{192, 5, true, true, true}, {256, 4, false, false, true}, {320, 3, true, false, false},
		{32, 6, true, false, true}, {80, 5, false, true, false}, {96, 4, true, true, true}, {112, 3, false, false, true},
		{176, 5, true, true, false},
		// not multiples of the vector widths: vector columns, then 4-wide or scalar ones
		{4, 6, true, true, true}, {12, 7, false, false, true}, {20, 5, true, false, false}, {36, 4, false, true, false},
		{68, 3, true, true, true}, {100, 5, false, false, false}, {24, 6, true, true, true}, {12, 6, true, true, false},
	}
	for _, p := range paths {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/d%d_s%d_w%v_s%v", p.name, c.dim, c.segs, c.weighted, c.scaled), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(c.dim), uint64(c.segs)))
				rows, stride := 20, c.dim+3
				src := randVec(r, rows*stride)
				bounds := []int64{0}
				for i := 0; i < c.segs; i++ {
					bounds = append(bounds, bounds[i]+int64(r.IntN(5))) // includes empty segments
				}
				n := int(bounds[c.segs])
				offs := make([]int64, n)
				for j := range offs {
					offs[j] = int64(r.IntN(rows) * stride)
					if c.missing && j%3 == 1 {
						offs[j] = -1
					}
				}
				// Odd segment counts pass row indices with mult = stride instead of offsets.
				byRow := c.segs%2 == 1
				arg, mult := offs, int64(1)
				if byRow {
					arg, mult = make([]int64, n), int64(stride)
					for j, o := range offs {
						arg[j] = -1
						if o >= 0 {
							arg[j] = o / int64(stride)
						}
					}
				}
				var w, sc []float32
				if c.weighted {
					w = randVec(r, n)
				}
				if c.scaled {
					sc = randVec(r, c.segs)
				}
				dstStride, dstBase := c.dim+5, 2
				dst := randVec(r, dstBase+c.segs*dstStride+c.dim) // the segments' slots must be overwritten
				want := f64(dst)
				for i := 0; i < c.segs; i++ {
					out := want[dstBase+i*dstStride:][:c.dim]
					clear(out)
					for j := bounds[i]; j < bounds[i+1]; j++ {
						if offs[j] < 0 {
							continue
						}
						wj := 1.0
						if w != nil {
							wj = float64(w[j])
						}
						for k := range out {
							out[k] += wj * float64(src[offs[j]+int64(k)])
						}
					}
					if sc != nil {
						for k := range out {
							out[k] *= float64(sc[i])
						}
					}
				}
				p.sr(dst, dstBase, dstStride, c.dim, src, arg, mult, bounds, w, sc)
				requireClose(t, want, dst, 1e-5, "dst")
			})
		}
	}
}

// rowsCase is a batch of distinct rows (one skipped as -1) of a table with padding after each row.
func rowsCase(r *rand.Rand, dim int) (w []float32, wStride int, rows []int64, g []float32) {
	wStride = dim + 3
	w = randVec(r, 10*wStride)
	rows = []int64{7, 2, -1, 9, 0}
	g = randVec(r, len(rows)*dim)
	return
}

func TestOptimizerRows(t *testing.T) {
	for _, p := range paths {
		for _, dim := range []int{64, 16, 48, 40, 5, 4, 12, 20, 24, 44} {
			t.Run(fmt.Sprintf("%s/d%d", p.name, dim), func(t *testing.T) {
				r := rand.New(rand.NewPCG(7, uint64(dim)))
				w0, ws, rows, g := rowsCase(r, dim)
				check := func(name string, got []float32, want []float64, tol float64) {
					requireClose(t, want, got, tol, name)
				}
				// SGD
				w, want := append([]float32(nil), w0...), f64(w0)
				p.sgd(w, ws, dim, rows, g, 0.1)
				for k, row := range rows {
					for i := 0; i < dim && row >= 0; i++ {
						want[int(row)*ws+i] -= 0.1 * float64(g[k*dim+i])
					}
				}
				check("sgd w", w, want, 1e-6)
				// Adagrad, state stride dim+1
				ss := dim + 1
				s0 := randVec(r, 10*ss)
				for i := range s0 {
					s0[i] *= s0[i]
				}
				w, s := append([]float32(nil), w0...), append([]float32(nil), s0...)
				want, wantS := f64(w0), f64(s0)
				p.ada(w, ws, s, ss, dim, rows, g, 0.05, 1e-8)
				for k, row := range rows {
					for i := 0; i < dim && row >= 0; i++ {
						gi := float64(g[k*dim+i])
						wantS[int(row)*ss+i] += gi * gi
						want[int(row)*ws+i] -= 0.05 * gi / (math.Sqrt(wantS[int(row)*ss+i]) + 1e-8)
					}
				}
				check("adagrad s", s, wantS, 1e-6)
				check("adagrad w", w, want, 1e-5)
				// Adam and AdamW at step 3, state stride 2·dim+2
				for _, decoupled := range []bool{false, true} {
					as := 2*dim + 2
					st0 := randVec(r, 10*as)
					for i := range st0 {
						if (i%as) >= dim && (i%as) < 2*dim {
							st0[i] *= st0[i] // second moments are ≥ 0
						}
					}
					w, st := append([]float32(nil), w0...), append([]float32(nil), st0...)
					want, wantSt := f64(w0), f64(st0)
					b1, b2, lr, eps, wd := 0.9, 0.999, 0.01, 1e-8, 0.1
					bc1, bc2 := 1-math.Pow(b1, 3), 1-math.Pow(b2, 3)
					p.adam(w, ws, st, as, dim, rows, g, NewAdamParams(lr, b1, b2, eps, wd, decoupled, 3))
					for k, row := range rows {
						for i := 0; i < dim && row >= 0; i++ {
							wi, gi := want[int(row)*ws+i], float64(g[k*dim+i])
							if decoupled {
								wi *= 1 - lr*wd
							} else {
								gi += wd * wi
							}
							m, v := &wantSt[int(row)*as+i], &wantSt[int(row)*as+dim+i]
							*m = b1**m + (1-b1)*gi
							*v = b2**v + (1-b2)*gi*gi
							want[int(row)*ws+i] = wi - lr/bc1**m/(math.Sqrt(*v)/math.Sqrt(bc2)+eps)
						}
					}
					check("adam state", st, wantSt, 1e-6)
					check("adam w", w, want, 1e-5)
				}
			})
		}
	}
}

func TestRowwiseAdagradRows(t *testing.T) {
	for _, dim := range []int{64, 7} {
		r := rand.New(rand.NewPCG(1, uint64(dim)))
		w0, ws, rows, g := rowsCase(r, dim)
		w, s := append([]float32(nil), w0...), make([]float32, 20) // state stride 2
		for i := range s {
			s[i] = 0.5
		}
		RowwiseAdagradRows(w, ws, s, 2, dim, rows, g, 0.1, 1e-8)
		want := f64(w0)
		for k, row := range rows {
			if row < 0 {
				continue
			}
			var sq float64
			for i := 0; i < dim; i++ {
				sq += float64(g[k*dim+i]) * float64(g[k*dim+i])
			}
			acc := 0.5 + sq/float64(dim)
			require.InDelta(t, acc, float64(s[row*2]), 1e-5)
			for i := 0; i < dim; i++ {
				want[int(row)*ws+i] -= 0.1 / (math.Sqrt(acc) + 1e-8) * float64(g[k*dim+i])
			}
		}
		requireClose(t, want, w, 1e-5, "rowwise w")
		require.Equal(t, float32(0.5), s[1], "untouched state")
	}
}

func ExampleSegmentReduce() {
	// A 2-wide table with rows [1 2] and [10 20]. Segment 0 pools row 1 twice and row 0 once with
	// weights and halves the sum; segment 1 is empty.
	table := []float32{1, 2, 10, 20}
	out := make([]float32, 4)
	SegmentReduce(out, 0, 2, 2, table, []int64{2, 0, 2}, 1, []int64{0, 3, 3}, []float32{1, 3, 1}, []float32{0.5, 1})
	fmt.Println(out)
	// Output: [11.5 23 0 0]
}

func BenchmarkSegmentReduce64(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	src := randVec(r, 5000*64)
	out := make([]float32, 26*1024*64)
	for _, n := range []int{1, 4, 20} {
		offs := make([]int64, n*1024)
		bounds := make([]int64, 1025)
		for i := range offs {
			offs[i] = int64(r.IntN(5000) * 64)
		}
		for i := range bounds {
			bounds[i] = int64(i * n)
		}
		for _, p := range paths {
			b.Run(fmt.Sprintf("pool%d/%s", n, p.name), func(b *testing.B) {
				for b.Loop() {
					p.sr(out, 0, 26*64, 64, src, offs, 1, bounds, nil, nil)
				}
			})
		}
	}
}

// TestSegmentReduceOfEmptyBagsNeedsNoSource: a sharded step pools a table no sample uses from no
// rows at all; the column split of widths that are not a multiple of the vector width sliced past
// the empty source and panicked.
func TestSegmentReduceOfEmptyBagsNeedsNoSource(t *testing.T) {
	for _, dim := range []int{4, 12, 20, 36, 64, 68} {
		dst := []float32{9, 9}
		dst = append(dst, make([]float32, 3*dim)...)
		for i := 2; i < len(dst); i++ {
			dst[i] = 7
		}
		SegmentReduce(dst, 2, dim, dim, nil, nil, 1, []int64{0, 0, 0, 0}, nil, nil)
		require.Equal(t, []float32{9, 9}, dst[:2], "dim %d", dim)
		for _, x := range dst[2:] {
			require.Zero(t, x, "dim %d", dim)
		}
	}
}

// BenchmarkSegmentReduceNarrow pools bags of 1–10 rows from a 100k-row table at narrow widths (the
// shape of shapes.py's d12 case: rows miss the cache, so the passes over each row matter) and at
// wider ones, multiples of 16 or not.
func BenchmarkSegmentReduceNarrow(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	const rows, bags = 100_000, 4096
	bounds := bagBounds(r, bags, 10)
	ids := make([]int64, bounds[bags])
	for i := range ids {
		ids[i] = int64(r.IntN(rows))
	}
	for _, dim := range []int{4, 8, 12, 16, 20, 24, 32, 40, 44, 64, 72, 128} {
		src := randVec(r, rows*dim)
		out := make([]float32, bags*dim)
		b.Run(fmt.Sprintf("dim%d", dim), func(b *testing.B) {
			for b.Loop() {
				SegmentReduce(out, 0, dim, dim, src, ids, int64(dim), bounds, nil, nil)
			}
		})
	}
}

// bagBounds is the segment bounds of n bags of 1 to maxLen entries each (the benchmarks' batches).
func bagBounds(r *rand.Rand, n, maxLen int) []int64 {
	bounds := make([]int64, n+1)
	for i := 1; i <= n; i++ {
		bounds[i] = bounds[i-1] + 1 + int64(r.IntN(maxLen))
	}
	return bounds
}
