package embedding

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// TestBadInput: each malformed batch is refused with an error naming the problem, and leaves the
// collection fit for the next batch.
func TestBadInput(t *testing.T) {
	tb, err := NewFixedTable("users", 10, 4, OptimizerConfig{Kind: OptSGD, LR: 0.1})
	require.NoError(t, err)
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "u", Table: 0}})
	require.NoError(t, err)
	defer c.Close()
	cases := []struct {
		name string
		b    Batch
		msg  string
	}{
		{"id too large", Batch{KeyFeature: []int64{0}, Values: []int64{3, 10}, Lengths: []int64{2}}, `table "users": id 10 out of range [0, 10)`},
		{"negative id", Batch{KeyFeature: []int64{0}, Values: []int64{-1}, Lengths: []int64{1}}, "id -1 out of range"},
		{"lengths short", Batch{KeyFeature: []int64{0}, Values: []int64{1, 2}, Lengths: []int64{1}}, "lengths sum to 1 but there are 2 values"},
		{"lengths long", Batch{KeyFeature: []int64{0}, Values: []int64{1}, Lengths: []int64{3}}, "lengths sum past"},
		{"negative length", Batch{KeyFeature: []int64{0}, Values: []int64{1}, Lengths: []int64{-1, 2}}, "negative"},
		{"weights", Batch{KeyFeature: []int64{0}, Values: []int64{1}, Lengths: []int64{1}, Weights: []float32{1, 2}}, "2 weights for 1 values"},
		{"key map", Batch{KeyFeature: []int64{3}, Values: nil, Lengths: []int64{0}}, "maps to feature 3"},
		{"missing key", Batch{KeyFeature: nil}, "0 keys for a collection of 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			B := max(len(tc.b.Lengths), 1)
			_, err := c.Forward(tc.b, make([]float32, B*4), true, true)
			require.ErrorContains(t, err, tc.msg)
			require.Equal(t, errs.CodeInvalid, errs.Code(err))
		})
	}
	// The dedup scratch is clean after a failed batch: a valid batch still pools correctly.
	out := make([]float32, 4)
	_, err = c.Forward(Batch{KeyFeature: []int64{0}, Values: []int64{3}, Lengths: []int64{1}}, out, true, false)
	require.NoError(t, err)
	require.Equal(t, tb.Row(3), out)
	require.NoError(t, c.Close())
	_, err = c.Forward(Batch{KeyFeature: []int64{0}, Lengths: []int64{0}}, out[:4], true, false)
	require.ErrorContains(t, err, "after close")
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		opt OptimizerConfig
		ok  bool
	}{
		{OptimizerConfig{Kind: OptNone}, true},
		{OptimizerConfig{Kind: OptSGD, LR: 0.1}, true},
		{OptimizerConfig{Kind: OptSGD, LR: -1}, false},
		{OptimizerConfig{Kind: OptSGD, LR: math.NaN()}, false},
		{OptimizerConfig{Kind: OptAdagrad, LR: 0.1, Eps: 0}, false},
		{OptimizerConfig{Kind: OptRowwiseAdagrad, LR: 0.1, Eps: 1e-8}, true},
		{OptimizerConfig{Kind: OptAdam, LR: 0.1, Eps: 1e-8, Beta1: 0.9, Beta2: 1}, false},
		{OptimizerConfig{Kind: OptAdamW, LR: 0.1, Eps: 1e-8, Beta1: 0.9, Beta2: 0.999, WeightDecay: -1}, false},
		{OptimizerConfig{Kind: OptAdamW, LR: 0.1, Eps: 1e-8, Beta1: 0.9, Beta2: 0.999, WeightDecay: 0.01}, true},
		{OptimizerConfig{Kind: 42}, false},
	}
	for _, tc := range cases {
		err := tc.opt.Validate()
		if tc.ok {
			require.NoError(t, err, "%+v", tc.opt)
		} else {
			require.True(t, errors.Is(err, errs.ErrInvalid), "%+v: %v", tc.opt, err)
		}
	}
	_, err := NewFixedTable("t", 0, 4, OptimizerConfig{})
	require.ErrorContains(t, err, "num_embeddings 0")
	_, err = NewFixedTable("t", 4, -1, OptimizerConfig{})
	require.ErrorContains(t, err, "dim -1")
	tb, _ := NewFixedTable("t", 4, 2, OptimizerConfig{})
	_, err = NewCollection([]*Table{tb}, []Feature{{Name: "a", Table: 1}})
	require.ErrorContains(t, err, "references table 1")
	_, err = NewCollection([]*Table{tb}, nil)
	require.ErrorContains(t, err, "has no features")
	_, err = NewCollection([]*Table{tb}, []Feature{{Name: "a"}, {Name: "a"}})
	require.ErrorContains(t, err, "duplicate feature")
	require.NoError(t, tb.Close())
}
