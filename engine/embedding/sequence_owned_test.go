package embedding

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOwnedSGDParts runs the ownedSGD pass with 1..5 parts, the parts concurrently, and checks the
// rows against the float64 reference (every lookup applied once, none lost to a race), on batches
// with hot rows shared by every part (300 rows) and with few shared rows (100,000).
func TestOwnedSGDParts(t *testing.T) {
	for _, tc := range []struct {
		rows    int64
		B       int
		workers int
	}{
		{5000, 600, 1}, {5000, 600, 2}, {5000, 600, 3}, {300, 900, 4}, {100000, 700, 5}, {5000, 10, 4},
	} {
		t.Run(fmt.Sprintf("rows%d_B%d_workers%d", tc.rows, tc.B, tc.workers), func(t *testing.T) {
			x := newSGDCase(t, uint64(tc.rows)+uint64(tc.workers), tc.rows, tc.B)
			ctx, err := x.s.Forward(x.b, x.outs(), true, true)
			require.NoError(t, err)
			defer x.s.Release(ctx)
			tcx := &ctx.tables[0]
			require.True(t, tcx.lazy, "a fixed SGD table's forward plans ownedSGD")
			require.NoError(t, x.s.planOwned(0, x.b, len(x.b.Lengths)/2, ctx, x.s.keyBases(ctx), tc.workers))
			o := &tcx.own
			require.Equal(t, ownedParts(len(x.b.Values), tc.rows, tc.workers), o.parts())
			require.Equal(t, 0, o.cuts[0])
			require.Equal(t, len(x.b.Values), o.cuts[o.parts()])
			require.IsNonDecreasing(t, o.cuts)
			var wg sync.WaitGroup
			for p := range o.parts() {
				wg.Add(1)
				go func() { defer wg.Done(); o.run(x.grad, p) }()
			}
			wg.Wait()
			// ownership: a part sums into its side buffer exactly the rows an earlier part also
			// looks up (first-seen order), and applies the others in place (no two parts write a row:
			// the kernels' stores are assembly, which -race does not see)
			before := make(map[int64]bool)
			for p := range o.parts() {
				var want []int64
				in := make(map[int64]bool)
				for _, id := range o.ids[o.cuts[p]:o.cuts[p+1]] {
					if before[id] && !in[id] {
						want = append(want, id)
					}
					in[id] = true
				}
				if p > 0 {
					require.Equal(t, fmt.Sprint(want), fmt.Sprint(o.sides[p].rows), "part %d", p)
				}
				for id := range in {
					before[id] = true
				}
			}
			o.finish()
			x.check(t)
		})
	}
}

// TestOwnedSGDBalance: on a Zipf batch, later parts share more rows with earlier ones, so the
// balanced cut gives them fewer lookups; the cut depends on the batch alone (two plans agree).
func TestOwnedSGDBalance(t *testing.T) {
	x := newSGDCase(t, 21, 3000, 1200)
	ctx, err := x.s.Forward(x.b, x.outs(), true, true)
	require.NoError(t, err)
	defer x.s.Release(ctx)
	base := x.s.keyBases(ctx)
	B := len(x.b.Lengths) / 2
	require.NoError(t, x.s.planOwned(0, x.b, B, ctx, base, 2))
	o := &ctx.tables[0].own
	require.Equal(t, 2, o.parts())
	n := len(x.b.Values)
	require.Greater(t, o.cuts[1], n/2, "the first part, which owns the hot rows, takes more lookups")
	first := append([]int(nil), o.cuts...)
	require.NoError(t, x.s.planOwned(0, x.b, B, ctx, base, 2))
	require.Equal(t, first, o.cuts)
	// the bitmaps hold exactly the first part's rows
	want := make(map[int64]bool)
	for _, id := range o.ids[:o.cuts[1]] {
		want[id] = true
	}
	for id := int64(0); id < x.tb.rows; id++ {
		require.Equal(t, want[id], o.marks[0][id>>6]&(1<<(id&63)) != 0, "row %d", id)
	}
}

// TestOwnedSGDReusedContexts: forwards whose contexts are released without a backward, and others
// with one, leave no stale marks behind (each step's update stays exact).
func TestOwnedSGDReusedContexts(t *testing.T) {
	x := newSGDCase(t, 23, 4000, 700) // its reference: w0 − 0.05·Σg
	w0 := append([]float32(nil), x.tb.Data...)
	for range 3 {
		ctx, err := x.s.Forward(x.b, x.outs(), true, true)
		require.NoError(t, err)
		x.s.Release(ctx) // no backward: the marks stay set in the pooled context
	}
	for range 2 {
		ctx, err := x.s.Forward(x.b, x.outs(), true, true)
		require.NoError(t, err)
		require.NoError(t, x.s.Backward(ctx, x.grad, nil, nil))
		x.s.Release(ctx)
	}
	for i, w := range w0 { // two steps: w0 − 2·0.05·Σg
		x.want[i] = 2*x.want[i] - float64(w)
	}
	x.check(t)
}

// TestOwnedSGDMaterialize: a context planned by ownedSGD still answers distinct counts, gives
// merged gradients to a caller that asks for them, and takes a merged-update scope opened after its
// forward, all as a deduplicating forward does.
func TestOwnedSGDMaterialize(t *testing.T) {
	x := newSGDCase(t, 25, 2000, 500)
	distinct := make(map[int64]int)
	for _, id := range x.b.Values {
		distinct[id]++
	}
	t.Run("counts", func(t *testing.T) {
		ctx, err := x.s.Forward(x.b, x.outs(), true, true)
		require.NoError(t, err)
		defer x.s.Release(ctx)
		require.Equal(t, len(x.b.Values), ctx.Lookups(0))
		require.True(t, ctx.tables[0].lazy)
		require.Equal(t, len(distinct), ctx.Unique(0))
		require.False(t, ctx.tables[0].lazy)
	})
	t.Run("gradients", func(t *testing.T) {
		ctx, err := x.s.Forward(x.b, x.outs(), true, true)
		require.NoError(t, err)
		defer x.s.Release(ctx)
		u := ctx.Unique(0)
		rows, vals := [][]int64{make([]int64, u)}, [][]float32{make([]float32, u*16)}
		require.NoError(t, x.s.Backward(ctx, x.grad, rows, vals))
		want := make(map[int64][]float64)
		for v, id := range x.b.Values {
			if want[id] == nil {
				want[id] = make([]float64, 16)
			}
			for j := range 16 {
				want[id][j] += float64(x.grad[v*16+j])
			}
		}
		for i, r := range rows[0] {
			for j := range 16 {
				require.InDelta(t, want[r][j], float64(vals[0][i*16+j]), 1e-4*(1+math.Abs(want[r][j])))
			}
		}
	})
	t.Run("merged scope", func(t *testing.T) {
		ctx, err := x.s.Forward(x.b, x.outs(), true, true)
		require.NoError(t, err)
		require.True(t, ctx.tables[0].lazy)
		require.NoError(t, x.s.owner.BeginMergedUpdate())
		require.NoError(t, x.s.Backward(ctx, x.grad, nil, nil))
		require.False(t, ctx.tables[0].lazy, "a scope needs the merged rows")
		x.s.Release(ctx)
		require.NoError(t, x.s.owner.EndMergedUpdate())
		x.check(t)
	})
}

// TestOwnedSGDBadID: an ID out of range fails the forward, and the next forward still plans and
// updates exactly.
func TestOwnedSGDBadID(t *testing.T) {
	x := newSGDCase(t, 27, 3000, 600)
	bad := x.b
	bad.Values = append([]int64(nil), x.b.Values...)
	bad.Values[len(bad.Values)-1] = x.tb.rows
	_, err := x.s.Forward(bad, x.outs(), true, true)
	require.Error(t, err)
	ctx, err := x.s.Forward(x.b, x.outs(), true, true)
	require.NoError(t, err)
	require.NoError(t, x.s.Backward(ctx, x.grad, nil, nil))
	x.s.Release(ctx)
	x.check(t)
}

// TestOwnedSGDFromDedup: tables the forward must deduplicate (a row source other than a fixed range,
// with unresolved IDs; a fixed table under Options.NoDedup) get the plan from their resolved rows,
// split into parts, and update exactly; so does a context the forward did not plan (the backward
// plans it).
func TestOwnedSGDFromDedup(t *testing.T) {
	const rows, dim, lr = 3000, 8, 0.05
	r := rand.New(rand.NewPCG(31, 5))
	src := mapSource{}
	perm := r.Perm(rows)
	for id := 0; id < rows; id++ {
		if id%10 != 9 { // every tenth ID unresolved
			src[int64(id)] = int64(perm[id])
		}
	}
	data := make([]float32, rows*dim)
	for i := range data {
		data[i] = float32(r.NormFloat64())
	}
	tb, err := NewTable(TableSpec{Name: "m", Source: src, Data: data, Stride: dim, Dim: dim,
		Opt: OptimizerConfig{Kind: OptSGD, LR: lr}})
	require.NoError(t, err)
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0}})
	require.NoError(t, err)
	defer c.Close()
	s, err := NewSequenceCollection(c, []Feature{{Name: "hist", Table: 0}})
	require.NoError(t, err)
	z := rand.NewZipf(r, 1.1, 1, rows-1)
	b := Batch{KeyFeature: []int64{0}}
	for i := 0; i < 700; i++ {
		n := r.IntN(40)
		b.Lengths = append(b.Lengths, int64(n))
		for j := 0; j < n; j++ {
			b.Values = append(b.Values, int64(z.Uint64()))
		}
	}
	grad := make([]float32, len(b.Values)*dim)
	for i := range grad {
		grad[i] = float32(r.NormFloat64())
	}
	want := make([]float64, len(data))
	for i, v := range data {
		want[i] = float64(v)
	}
	step := func() {
		for v, id := range b.Values {
			if row, ok := src[id]; ok {
				for j := 0; j < dim; j++ {
					want[int(row)*dim+j] -= lr * float64(grad[v*dim+j])
				}
			}
		}
	}
	check := func(what string) {
		for i, v := range tb.Data {
			require.InDelta(t, want[i], float64(v), 1e-4*(1+math.Abs(want[i])), "%s: value %d", what, i)
		}
	}
	out := make([]float32, len(b.Values)*dim)
	ctx, err := s.Forward(b, [][]float32{out}, true, true)
	require.NoError(t, err)
	tc := &ctx.tables[0]
	require.True(t, tc.planned && !tc.lazy, "planned from the dedup's rows")
	for i, x := range tc.inv {
		require.Equal(t, tc.rows[x], tc.own.ids[i])
	}
	s.planOwnedFromDedup(0, ctx, s.keyBases(ctx), 3)
	require.Equal(t, 3, tc.own.parts())
	for p := range 3 {
		tc.own.run(grad, p)
	}
	tc.own.finish()
	s.Release(ctx)
	step()
	check("three parts")

	ctx, err = s.Forward(b, [][]float32{out}, true, true)
	require.NoError(t, err)
	ctx.tables[0].planned = false // as when the optimizer became linear after the forward
	require.NoError(t, s.Backward(ctx, grad, nil, nil))
	s.Release(ctx)
	step()
	check("planned by the backward")

	s.view.opts.NoDedup = true
	ctx, err = s.Forward(b, [][]float32{out}, true, true)
	require.NoError(t, err)
	require.True(t, ctx.tables[0].planned && !ctx.tables[0].lazy)
	require.NoError(t, s.Backward(ctx, grad, nil, nil))
	s.Release(ctx)
	step()
	check("NoDedup")
}

// TestOwnedSGDRemark: after cuts move either way, each part's bitmap holds exactly its rows.
func TestOwnedSGDRemark(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 7))
	const rows = 700
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.IntN(400)
		parts := 2 + r.IntN(3)
		o := &ownedSGD{ids: make([]int64, n)}
		for i := range o.ids {
			o.ids[i] = int64(r.IntN(rows+40)) - 40 // some unresolved (negative)
		}
		randomCuts := func() {
			o.cuts = resize(o.cuts, parts+1)
			o.cuts[0], o.cuts[parts] = 0, n
			for p := 1; p < parts; p++ {
				o.cuts[p] = r.IntN(n + 1)
			}
			slices.Sort(o.cuts)
		}
		randomCuts()
		o.mark((rows + 63) / 64)
		randomCuts()
		o.remark()
		for p := 0; p < parts-1; p++ {
			want := make([]uint64, (rows+63)/64)
			for _, id := range o.ids[o.cuts[p]:o.cuts[p+1]] {
				if id >= 0 {
					want[id>>6] |= 1 << (id & 63)
				}
			}
			require.Equal(t, want, o.marks[p], "trial %d part %d", trial, p)
		}
		require.Equal(t, o.cuts, o.marked)
	}
}
