package embedding

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// sgdCase is a sequence collection of two features over one fixed SGD table, a Zipf batch large
// enough to split, a gradient, and the float64 reference of the rows after one update.
type sgdCase struct {
	s    *SequenceCollection
	tb   *Table
	b    Batch
	grad []float32
	want []float64
}

func newSGDCase(t *testing.T, seed uint64, rows int64, B int) *sgdCase {
	const dim, lr = 16, 0.05
	tb, err := NewFixedTable("item", rows, dim, OptimizerConfig{Kind: OptSGD, LR: lr})
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(seed, 3))
	for i := range tb.Data {
		tb.Data[i] = float32(r.NormFloat64())
	}
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s, err := NewSequenceCollection(c, []Feature{{Name: "hist", Table: 0}, {Name: "clicks", Table: 0}})
	require.NoError(t, err)
	z := rand.NewZipf(r, 1.1, 1, uint64(rows-1))
	x := &sgdCase{s: s, tb: tb}
	x.b.KeyFeature = []int64{1, 0} // KJT order differs from the features' order
	for k := 0; k < 2; k++ {
		for i := 0; i < B; i++ {
			n := r.IntN(40)
			x.b.Lengths = append(x.b.Lengths, int64(n))
			for j := 0; j < n; j++ {
				x.b.Values = append(x.b.Values, int64(z.Uint64()))
			}
		}
	}
	gradRows, err := s.GradRows(x.b)
	require.NoError(t, err)
	x.grad = make([]float32, gradRows*s.Width()) // the outputs back to back, zero-padded to whole rows
	for i := range x.b.Values {
		for j := 0; j < dim; j++ {
			x.grad[i*dim+j] = float32(r.NormFloat64())
		}
	}
	x.want = make([]float64, len(tb.Data))
	for i, v := range tb.Data {
		x.want[i] = float64(v)
	}
	for v, id := range x.b.Values {
		for j := 0; j < dim; j++ {
			x.want[int(id)*dim+j] -= lr * float64(x.grad[v*dim+j])
		}
	}
	return x
}

func (x *sgdCase) check(t *testing.T) {
	t.Helper()
	for i, v := range x.tb.Data {
		require.InDelta(t, x.want[i], float64(v), 1e-4*(1+math.Abs(x.want[i])), "value %d", i)
	}
}

func (x *sgdCase) outs() [][]float32 {
	sizes, _ := x.s.OutputSizes(x.b)
	outs := make([][]float32, len(sizes))
	for k, n := range sizes {
		outs[k] = make([]float32, n)
	}
	return outs
}

// TestLinearSGDBackward is the same check through Backward (fused SGD), which splits by the
// worker count.
func TestLinearSGDBackward(t *testing.T) {
	x := newSGDCase(t, 9, 20000, 800)
	ctx, err := x.s.Forward(x.b, x.outs(), true, true)
	require.NoError(t, err)
	require.NoError(t, x.s.Backward(ctx, x.grad, nil, nil))
	x.s.Release(ctx)
	x.check(t)
}

// TestScaledAdderOrder: queued adds land in queue order for every queue length (the ring's
// flush of partly filled batches included).
func TestScaledAdderOrder(t *testing.T) {
	for n := 0; n < 5*rowChunk*(rowLag+1); n++ {
		dst := make([]float32, 8*4)
		src := make([]float32, n*8)
		want := make([]float64, len(dst))
		a := scaledAdder{dst: dst, src: src, stride: 8, dim: 8, alpha: 0.5}
		for i := 0; i < n; i++ {
			row := int64(i % 5)
			if row == 4 {
				row = -1 // skipped
			}
			for j := 0; j < 8; j++ {
				src[i*8+j] = float32(i + j)
				if row >= 0 {
					want[int(row)*8+j] += 0.5 * float64(i+j)
				}
			}
			a.add(row, int64(i*8))
		}
		a.flush()
		for i := range dst {
			require.InDelta(t, want[i], float64(dst[i]), 1e-3, "n %d value %d", n, i)
		}
	}
}

// TestLinearSGDRateAtBackward: a learning rate changed between the forward (which plans the split
// pass) and the backward applies, as it does on the other backward paths.
func TestLinearSGDRateAtBackward(t *testing.T) {
	x := newSGDCase(t, 17, 20000, 800) // its reference: w0 − 0.05·Σg
	w0 := append([]float32(nil), x.tb.Data...)
	ctx, err := x.s.Forward(x.b, x.outs(), true, true)
	require.NoError(t, err)
	require.True(t, ctx.tables[0].lazy, "the forward plans a linear table's pass (ownedSGD)")
	require.NoError(t, x.s.owner.SetOptimizer(OptimizerConfig{Kind: OptSGD, LR: 0.1}))
	require.NoError(t, x.s.Backward(ctx, x.grad, nil, nil))
	x.s.Release(ctx)
	for i, w := range w0 { // w0 − 0.1·Σg = 2·(w0 − 0.05·Σg) − w0
		x.want[i] = 2*x.want[i] - float64(w)
	}
	x.check(t)
}
