package embedding

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDeduperMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	var d Deduper
	for _, n := range []int{0, 1, 7, 3000, 5000} { // growth and reuse across calls
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = rng.Int64N(int64(n/3+1)) * 1_000_003
		}
		inv := make([]int32, n)
		uniq := d.Dedup(ids, nil, inv)
		first := map[int64]int{}
		var want []int64
		for _, id := range ids {
			if _, ok := first[id]; !ok {
				first[id] = len(want)
				want = append(want, id)
			}
		}
		require.Equal(t, len(want), len(uniq))
		for i, id := range ids {
			require.Equal(t, id, uniq[inv[i]])
			require.Equal(t, want[first[id]], uniq[inv[i]])
		}
	}
}

func TestOwnerPrimitives(t *testing.T) {
	opt := OptimizerConfig{Kind: OptSGD, LR: 0.5}
	tb, err := NewFixedTable("t", 4, 2, opt)
	require.NoError(t, err)
	defer tb.Close()
	copy(tb.Data, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	dst := make([]float32, 6)
	require.NoError(t, tb.GatherRows([]int64{3, 0, 3}, dst))
	require.Equal(t, []float32{7, 8, 1, 2, 7, 8}, dst)
	require.ErrorContains(t, tb.GatherRows([]int64{4}, make([]float32, 2)), "row 4 out of range")
	require.ErrorContains(t, tb.GatherRows([]int64{-2}, make([]float32, 2)), "row -2 out of range")
	dst = []float32{9, 9, 9, 9}
	require.NoError(t, tb.GatherRows([]int64{-1, 0}, dst), "−1: an ID without a row (dynamic tables)")
	require.Equal(t, []float32{0, 0, 1, 2}, dst)
	require.ErrorContains(t, tb.GatherRows([]int64{1}, make([]float32, 3)), "need 2")

	require.NoError(t, tb.ApplyRows([]int64{1, -1}, []float32{2, 4, 100, 100}))
	require.Equal(t, []float32{1, 2, 2, 2, 5, 6, 7, 8}, tb.Data)
	require.NoError(t, tb.ApplyRows(nil, nil)) // a shard the step did not touch still counts the step
	require.Equal(t, int64(2), tb.Step[0])
	require.ErrorContains(t, tb.ApplyRows([]int64{9}, []float32{0, 0}), "out of range")

	none, err := NewFixedTable("n", 2, 2, OptimizerConfig{})
	require.NoError(t, err)
	defer none.Close()
	require.ErrorContains(t, none.ApplyRows(nil, nil), "no fused optimizer")
}

// ApplyLinear on unmerged gradients equals ApplyRows on their per-row sums (float rounding aside),
// counts the step, and refuses what it cannot apply.
func TestApplyLinearMatchesMergedApplyRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const rows, dim, n = 50, 5, 700 // rows repeat many times: the merge ApplyLinear skips matters
	a, err := NewFixedTable("a", rows, dim, OptimizerConfig{Kind: OptSGD, LR: 0.1})
	require.NoError(t, err)
	defer a.Close()
	b, err := NewFixedTable("b", rows, dim, OptimizerConfig{Kind: OptSGD, LR: 0.1})
	require.NoError(t, err)
	defer b.Close()
	for i := range a.Data {
		a.Data[i] = rng.Float32() - 0.5
	}
	copy(b.Data, a.Data)
	ids := make([]int64, n)
	offs := make([]int64, n)
	grads := make([]float32, (n+3)*dim) // offsets need not be in order or packed
	for i := range grads {
		grads[i] = rng.Float32() - 0.5
	}
	merged := make([]float32, rows*dim)
	all := make([]int64, rows)
	for j := range ids {
		ids[j] = int64(rng.IntN(rows))
		offs[j] = int64(rng.IntN(n+3)) * dim
		if j%7 == 0 { // an ID without a row (dynamic tables): skipped
			ids[j] = -1
			continue
		}
		for k := 0; k < dim; k++ {
			merged[ids[j]*dim+int64(k)] += grads[offs[j]+int64(k)]
		}
	}
	for r := range all {
		all[r] = int64(r)
	}
	require.NoError(t, a.ApplyLinear(ids, grads, offs))
	require.NoError(t, b.ApplyRows(all, merged))
	require.InDeltaSlice(t, b.Data, a.Data, 1e-5)
	require.Equal(t, b.Step[0], a.Step[0])

	cases := []struct {
		name       string
		rows, offs []int64
		grads      []float32
		want       string
	}{
		{"row out of range", []int64{rows}, []int64{0}, make([]float32, dim), "out of range"},
		{"negative row", []int64{-2}, []int64{0}, make([]float32, dim), "out of range"},
		{"offset past the gradients", []int64{0}, []int64{1}, make([]float32, dim), "gradient offset 1"},
		{"negative offset", []int64{0}, []int64{-dim}, make([]float32, dim), "gradient offset"},
		{"offsets and rows differ", []int64{0, 1}, []int64{0}, make([]float32, dim), "1 gradient offsets for 2 rows"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := append([]float32(nil), a.Data...)
			step := a.Step[0]
			require.ErrorContains(t, a.ApplyLinear(c.rows, c.grads, c.offs), c.want)
			require.Equal(t, before, a.Data, "a refused call changes nothing")
			require.Equal(t, step, a.Step[0])
		})
	}
	for _, opt := range []OptimizerConfig{{Kind: OptSGD, LR: 0.1, WeightDecay: 0.01}, {Kind: OptAdagrad, LR: 0.1, Eps: 1e-8}, {}} {
		tb, err := NewFixedTable("nl", 2, 2, opt)
		require.NoError(t, err)
		require.False(t, tb.Linear())
		require.ErrorContains(t, tb.ApplyLinear(nil, nil, nil), "not linear")
		require.NoError(t, tb.Close())
	}
}
