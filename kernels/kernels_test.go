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

func requireClose(t *testing.T, want []float64, got []float32, tol float64) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.InDelta(t, want[i], float64(got[i]), tol*(1+math.Abs(want[i])), "index %d", i)
	}
}

// Each kernel runs through the public (dispatching) name and the portable one.
var paths = []struct {
	name string
	ws   func(dst, src []float32, offs []int64, weights []float32, scale float32)
	sgd  func(w, g []float32, lr float32)
	ada  func(w, s, g []float32, lr, eps float32)
	adam func(w, m, v, g []float32, p AdamParams)
}{
	{"dispatch", WeightedSum, SGDRow, AdagradRow, AdamRow},
	{"generic", WeightedSumGeneric, SGDRowGeneric, AdagradRowGeneric, AdamRowGeneric},
}

func TestWeightedSum(t *testing.T) {
	cases := []struct {
		dim, n   int
		weighted bool
		scale    float32
		missing  bool
	}{
		{64, 10, false, 1, false}, {64, 7, true, 0.5, true}, {64, 0, false, 1, false},
		{16, 5, true, 1, false}, {48, 9, false, 0.25, true}, {37, 6, true, 1, true}, {3, 4, false, 1, false},
		{130, 3, true, 2, false},
	}
	for _, p := range paths {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/d%d_n%d_w%v", p.name, c.dim, c.n, c.weighted), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(c.dim), uint64(c.n)))
				rows, stride := 20, c.dim+3
				src := randVec(r, rows*stride)
				offs := make([]int64, c.n)
				var w []float32
				if c.weighted {
					w = randVec(r, c.n)
				}
				want := make([]float64, c.dim)
				for j := range offs {
					offs[j] = int64(r.IntN(rows) * stride)
					if c.missing && j%3 == 1 {
						offs[j] = -1
						continue
					}
					wj := 1.0
					if w != nil {
						wj = float64(w[j])
					}
					for k := range want {
						want[k] += wj * float64(src[offs[j]+int64(k)])
					}
				}
				for k := range want {
					want[k] *= float64(c.scale)
				}
				dst := randVec(r, c.dim) // must be overwritten
				p.ws(dst, src, offs, w, c.scale)
				requireClose(t, want, dst, 1e-5)
			})
		}
	}
}

func TestOptimizerRows(t *testing.T) {
	for _, p := range paths {
		for _, dim := range []int{64, 16, 40, 5} {
			t.Run(fmt.Sprintf("%s/d%d", p.name, dim), func(t *testing.T) {
				r := rand.New(rand.NewPCG(7, uint64(dim)))
				w0, g := randVec(r, dim), randVec(r, dim)
				s0 := randVec(r, dim)
				for i := range s0 {
					s0[i] = s0[i] * s0[i]
				}
				// SGD
				w := append([]float32(nil), w0...)
				p.sgd(w, g, 0.1)
				want := make([]float64, dim)
				for i := range want {
					want[i] = float64(w0[i]) - 0.1*float64(g[i])
				}
				requireClose(t, want, w, 1e-6)
				// Adagrad
				w, s := append([]float32(nil), w0...), append([]float32(nil), s0...)
				p.ada(w, s, g, 0.05, 1e-8)
				wantS := make([]float64, dim)
				for i := range want {
					wantS[i] = float64(s0[i]) + float64(g[i])*float64(g[i])
					want[i] = float64(w0[i]) - 0.05*float64(g[i])/(math.Sqrt(wantS[i])+1e-8)
				}
				requireClose(t, wantS, s, 1e-6)
				requireClose(t, want, w, 1e-5)
				// Adam and AdamW, step 3
				for _, decoupled := range []bool{false, true} {
					w, m, v := append([]float32(nil), w0...), randVec(r, dim), append([]float32(nil), s0...)
					m0, v0 := append([]float32(nil), m...), append([]float32(nil), v...)
					b1, b2, lr, eps, wd := 0.9, 0.999, 0.01, 1e-8, 0.1
					bc1, bc2 := 1-math.Pow(b1, 3), 1-math.Pow(b2, 3)
					p.adam(w, m, v, g, NewAdamParams(lr, b1, b2, eps, wd, decoupled, 3))
					wantM, wantV := make([]float64, dim), make([]float64, dim)
					for i := range want {
						wi, gi := float64(w0[i]), float64(g[i])
						if decoupled {
							wi *= 1 - lr*wd
						} else {
							gi += wd * wi
						}
						wantM[i] = b1*float64(m0[i]) + (1-b1)*gi
						wantV[i] = b2*float64(v0[i]) + (1-b2)*gi*gi
						want[i] = wi - lr/bc1*wantM[i]/(math.Sqrt(wantV[i])/math.Sqrt(bc2)+eps)
					}
					requireClose(t, wantM, m, 1e-6)
					requireClose(t, wantV, v, 1e-6)
					requireClose(t, want, w, 1e-5)
				}
			})
		}
	}
}

func TestRowwiseAdagradRow(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	w0, g := randVec(r, 64), randVec(r, 64)
	w, s := append([]float32(nil), w0...), float32(0.5)
	RowwiseAdagradRow(w, &s, g, 0.1, 1e-8)
	var sq float64
	for _, x := range g {
		sq += float64(x) * float64(x)
	}
	wantS := 0.5 + sq/64
	require.InDelta(t, wantS, float64(s), 1e-5)
	want := make([]float64, 64)
	for i := range want {
		want[i] = float64(w0[i]) - 0.1/(math.Sqrt(wantS)+1e-8)*float64(g[i])
	}
	requireClose(t, want, w, 1e-5)
}

func ExampleWeightedSum() {
	// Two rows of a 2-wide table; pool row 1 twice and row 0 once with weights, then halve.
	table := []float32{1, 2, 10, 20}
	out := make([]float32, 2)
	WeightedSum(out, table, []int64{2, 0, 2}, []float32{1, 3, 1}, 0.5)
	fmt.Println(out)
	// Output: [11.5 23]
}

func BenchmarkWeightedSum64(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	src := randVec(r, 100000*64)
	offs := make([]int64, 20)
	for i := range offs {
		offs[i] = int64(r.IntN(100000) * 64)
	}
	dst := make([]float32, 64)
	for b.Loop() {
		WeightedSum(dst, src, offs, nil, 1)
	}
}
