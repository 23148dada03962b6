package embedding

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
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

// TestLinearSGDParts runs the split linear pass with 1..5 parts, the parts concurrently, and checks
// the rows against the float64 reference (every row written once per lookup, none lost to a race).
func TestLinearSGDParts(t *testing.T) {
	for _, tc := range []struct {
		rows  int64
		B     int
		parts int
	}{
		{5000, 600, 1}, {5000, 600, 2}, {5000, 600, 3}, {300, 900, 4}, {100000, 700, 5}, {5000, 10, 4},
	} {
		t.Run(fmt.Sprintf("rows%d_B%d_parts%d", tc.rows, tc.B, tc.parts), func(t *testing.T) {
			x := newSGDCase(t, uint64(tc.rows)+uint64(tc.parts), tc.rows, tc.B)
			ctx, err := x.s.Forward(x.b, x.outs(), true, true)
			require.NoError(t, err)
			defer x.s.Release(ctx)
			require.NoError(t, x.s.view.materialize(ctx, 0)) // the forward planned ownedSGD instead
			l := x.s.newLinearSGD(ctx, x.s.keyBases(ctx), 0, tc.parts)
			want := max(1, min(tc.parts, len(x.b.Values)/sgdPartMin))
			require.Equal(t, want, l.parts())
			var wg sync.WaitGroup
			for p := range l.parts() {
				wg.Add(1)
				go func() { defer wg.Done(); l.run(x.grad, p) }()
			}
			wg.Wait()
			l.finish()
			x.check(t)
		})
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

// TestLinearSGDNumberingFallback: distinct IDs numbered other than in first-seen order make the
// pass run as one part (two parts could otherwise write one row), still exact.
func TestLinearSGDNumberingFallback(t *testing.T) {
	x := newSGDCase(t, 11, 5000, 600)
	ctx, err := x.s.Forward(x.b, x.outs(), true, true)
	require.NoError(t, err)
	defer x.s.Release(ctx)
	require.NoError(t, x.s.view.materialize(ctx, 0)) // the forward planned ownedSGD instead
	tc := &ctx.tables[0]
	tc.firstPos = tc.firstPos[:0] // as a path that records none
	u := len(tc.rows)             // reverse the numbering: x → u-1-x
	for i, v := range tc.inv {
		tc.inv[i] = int32(u-1) - v
	}
	for i, j := 0, u-1; i < j; i, j = i+1, j-1 {
		tc.rows[i], tc.rows[j] = tc.rows[j], tc.rows[i]
		tc.uniq[i], tc.uniq[j] = tc.uniq[j], tc.uniq[i]
	}
	l := x.s.newLinearSGD(ctx, x.s.keyBases(ctx), 0, 3)
	require.Equal(t, 1, l.parts())
	l.run(x.grad, 0)
	l.finish()
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

// TestDedupRecordsFirstPositions: the dense and the hash dedup record, per distinct ID, the lookup
// where it first appears (what the linear SGD plan relies on).
func TestDedupRecordsFirstPositions(t *testing.T) {
	for _, dense := range []bool{true, false} {
		x := newSGDCase(t, 13, 5000, 300)
		if !dense {
			x.s.view.opts.DenseDedupMaxRows = 1 // the table is past the slot array: hash dedup
		}
		ctx, err := x.s.Forward(x.b, x.outs(), true, true)
		require.NoError(t, err)
		require.NoError(t, x.s.view.materialize(ctx, 0)) // the forward planned ownedSGD instead
		tc := &ctx.tables[0]
		want := make([]int32, len(tc.rows))
		seen := make(map[int32]bool)
		for q, v := range tc.inv {
			if !seen[v] {
				seen[v] = true
				want[v] = int32(q)
			}
		}
		require.Equal(t, want, tc.firstPos, "dense %v", dense)
		x.s.Release(ctx)
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
