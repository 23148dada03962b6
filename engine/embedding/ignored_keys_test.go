package embedding

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// Keys that no feature reads (KeyFeature -1) are skipped, as TorchRec's EmbeddingBagCollection
// ignores extra KJT keys: the output and the gradients equal those of the batch without them, and
// their IDs (here out of every table's range) are never checked.
func TestIgnoredKeysAreSkipped(t *testing.T) {
	newColl := func() *Collection {
		u, err := NewFixedTable("users", 10, 4, OptimizerConfig{Kind: OptSGD, LR: 0.1})
		require.NoError(t, err)
		i, err := NewFixedTable("items", 6, 3, OptimizerConfig{Kind: OptSGD, LR: 0.1})
		require.NoError(t, err)
		for j := range u.Data {
			u.Data[j] = float32(j%7) - 3
		}
		for j := range i.Data {
			i.Data[j] = float32(j%5) * 0.5
		}
		c, err := NewCollection([]*Table{u, i}, []Feature{{Name: "u", Table: 0}, {Name: "i", Table: 1, Pooling: PoolMean}})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, c.Close()) })
		return c
	}
	plain := Batch{KeyFeature: []int64{0, 1}, Values: []int64{1, 2, 9, 5, 0, 3}, Lengths: []int64{2, 1, 1, 2}}
	cases := []struct {
		name string
		b    Batch
	}{
		{"extra keys around", Batch{KeyFeature: []int64{IgnoredKey, 1, 0, IgnoredKey},
			Values:  []int64{999, -5, 5, 0, 3, 1, 2, 9, 1 << 40},
			Lengths: []int64{1, 1, 1, 2, 2, 1, 0, 1}}},
		{"extra key, empty bags", Batch{KeyFeature: []int64{0, IgnoredKey, 1},
			Values: []int64{1, 2, 9, 5, 0, 3}, Lengths: []int64{2, 1, 0, 0, 1, 2}}},
	}
	ref := newColl()
	want := make([]float32, 2*ref.Width())
	ctx, err := ref.Forward(plain, want, true, true)
	require.NoError(t, err)
	grad := make([]float32, len(want))
	for j := range grad {
		grad[j] = float32(j) - 3.5
	}
	wantRows, wantVals := [][]int64{make([]int64, ctx.Unique(0)), make([]int64, ctx.Unique(1))},
		[][]float32{make([]float32, ctx.Unique(0)*4), make([]float32, ctx.Unique(1)*3)}
	require.NoError(t, ref.Backward(ctx, grad, wantRows, wantVals))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newColl()
			B, err := ValidateBatch(tc.b, 2)
			require.NoError(t, err)
			require.Equal(t, 2, B)
			got := make([]float32, B*c.Width())
			ctx, err := c.Forward(tc.b, got, true, true)
			require.NoError(t, err)
			require.Equal(t, want, got)
			rows, vals := [][]int64{make([]int64, ctx.Unique(0)), make([]int64, ctx.Unique(1))},
				[][]float32{make([]float32, ctx.Unique(0)*4), make([]float32, ctx.Unique(1)*3)}
			require.NoError(t, c.Backward(ctx, grad, rows, vals))
			require.Equal(t, wantRows, rows)
			require.Equal(t, wantVals, vals)
		})
	}
}

func TestKeyFeatureValidation(t *testing.T) {
	cases := []struct {
		name string
		b    Batch
		msg  string
	}{
		{"feature missing", Batch{KeyFeature: []int64{0, IgnoredKey}, Lengths: []int64{0, 0}}, "1 of the collection's 2 features"},
		{"too few keys", Batch{KeyFeature: []int64{1}, Lengths: []int64{0}}, "1 keys for a collection of 2"},
		{"twice", Batch{KeyFeature: []int64{0, 0, 1}, Lengths: []int64{0, 0, 0}}, "feature 0 appears twice"},
		{"below -1", Batch{KeyFeature: []int64{0, -2, 1}, Lengths: []int64{0, 0, 0}}, "maps to feature -2"},
		{"lengths per key", Batch{KeyFeature: []int64{0, IgnoredKey, 1}, Lengths: []int64{0, 0}}, "multiple of the 3 keys"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ValidateBatch(tc.b, 2)
			require.ErrorContains(t, err, tc.msg)
			require.Equal(t, errs.CodeInvalid, errs.Code(err))
		})
	}
}

func TestOutOfRangeIDSaysWhatToDo(t *testing.T) {
	err := RangeSource{Table: "users", Rows: 10}.check(12)
	require.ErrorContains(t, err, `table "users": id 12 out of range [0, 10)`)
	require.ErrorContains(t, err, ".mod(10)")
	require.ErrorContains(t, err, "larger num_embeddings")
}
