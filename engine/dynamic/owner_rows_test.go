package dynamic

import (
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/stretchr/testify/require"
)

// TestDefaultRowTakesNoOwnerUpdate: a shard owner (engine/shard) applies gradients by row; the
// default row an evaluation lookup hands out is read-only there too, and an ID without a row (−1)
// reads zeros and is skipped.
func TestDefaultRowTakesNoOwnerUpdate(t *testing.T) {
	b, err := NewBuilder(Config{MaxRows: 8, Default: []float32{1, 2}})
	require.NoError(t, err)
	tb, err := b.BuildTable("d", 2, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.5})
	require.NoError(t, err)
	defer tb.Close()
	rows := make([]int64, 2)
	require.NoError(t, tb.Source.Resolve([]int64{7, 9}, rows, false))
	def := Of(tb).DefaultRow()
	require.Equal(t, []int64{def, def}, rows)
	dst := make([]float32, 6)
	require.NoError(t, tb.GatherRows([]int64{def, -1, def}, dst))
	require.Equal(t, []float32{1, 2, 0, 0, 1, 2}, dst)

	require.NoError(t, tb.ApplyRows([]int64{def, -1}, []float32{1, 1, 1, 1}))
	require.NoError(t, tb.ApplyLinear([]int64{def, -1}, []float32{1, 1}, []int64{0, 0}))
	require.Equal(t, []float32{1, 2}, tb.Row(def), "the default row changed")
	require.Equal(t, int64(2), tb.Step[0], "each call is one optimizer step")
}
