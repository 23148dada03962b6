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
