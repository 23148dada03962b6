package embedding

import (
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOptionsArePerCollection runs collections forced onto different paths side by side: each keeps
// its own options, and all pool and merge the same values.
func TestOptionsArePerCollection(t *testing.T) {
	opts := []Options{
		{}, {PoolOrder: PoolSampleMajor, BackwardPath: BackwardGrouped},
		{PoolOrder: PoolFeatureMajor, BackwardPath: BackwardScatter, DenseDedupMaxRows: -1},
	}
	var wg sync.WaitGroup
	for _, o := range opts {
		s := newSetup(t, 17, true, OptimizerConfig{Kind: OptNone}, o)
		require.Equal(t, o, s.c.Options())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				checkStep(t, s)
			}
		}()
	}
	wg.Wait()
	_, err := NewCollectionWithOptions(nil, nil, Options{PoolOrder: 7})
	require.Error(t, err)
	tb, err := NewFixedTable("t", 4, 2, OptimizerConfig{})
	require.NoError(t, err)
	_, err = NewCollectionWithOptions([]*Table{tb}, []Feature{{Name: "a"}}, Options{BackwardPath: -1})
	require.ErrorContains(t, err, "unknown pool order")
}

// TestUnusedHyperParametersAreRefused: a parameter the optimizer does not take is an error, not
// silently ignored.
func TestUnusedHyperParametersAreRefused(t *testing.T) {
	for _, c := range []struct {
		cfg OptimizerConfig
		msg string
	}{
		{OptimizerConfig{Kind: OptSGD, LR: 0.1, Eps: 1e-8}, "eps=1e-08 has no meaning for sgd"},
		{OptimizerConfig{Kind: OptSGD, LR: 0.1, Beta2: 0.9}, "beta2=0.9 has no meaning"},
		{OptimizerConfig{Kind: OptAdagrad, LR: 0.1, Eps: 1e-8, Beta1: 0.9}, "beta1=0.9 has no meaning for adagrad"},
		{OptimizerConfig{Kind: OptRowwiseAdagrad, LR: 0.1, Eps: 1e-8, WeightDecay: -1}, "weight decay -1"},
		// values that float32, the kernels' precision, turns into 0 or infinity
		{OptimizerConfig{Kind: OptAdagrad, LR: 0.1, Eps: 1e-50}, "eps 1e-50 must be finite and > 0 in float32"},
		{OptimizerConfig{Kind: OptAdam, LR: 0.1, Eps: 1e-46, Beta1: 0.9, Beta2: 0.99}, "eps 1e-46"},
		{OptimizerConfig{Kind: OptSGD, LR: 1e39}, "learning rate 1e+39 must be finite in float32"},
		{OptimizerConfig{Kind: OptSGD, LR: 0.1, WeightDecay: 1e39}, "weight decay 1e+39 must be finite in float32"},
	} {
		require.ErrorContains(t, c.cfg.Validate(), c.msg)
	}
	for _, ok := range []OptimizerConfig{
		{Kind: OptSGD, LR: 0.1, WeightDecay: 0.5}, {Kind: OptAdagrad, LR: 0.1, Eps: 1e-8, WeightDecay: 0.5},
		{Kind: OptAdam, LR: 0.1, Eps: 1e-8, Beta1: 0.9, Beta2: 0.99, WeightDecay: 0.5},
		{Kind: OptRowwiseAdagrad, LR: math.MaxFloat32, Eps: math.SmallestNonzeroFloat32},
	} {
		require.NoError(t, ok.Validate())
	}
}

// fusedStep runs one fused step of a one-table, one-feature collection on the given IDs with an
// output gradient of ones and returns the table.
func fusedStep(t *testing.T, opt OptimizerConfig, init []float32, ids []int64) *Table {
	tb, err := NewFixedTable("t", int64(len(init)/2), 2, opt)
	require.NoError(t, err)
	copy(tb.Data, init)
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "a", Table: 0}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	out := make([]float32, 2)
	ctx, err := c.Forward(Batch{KeyFeature: []int64{0}, Values: ids, Lengths: []int64{int64(len(ids))}}, out, true, true)
	require.NoError(t, err)
	require.NoError(t, c.Backward(ctx, []float32{1, 1}, nil, nil))
	return tb
}

// TestWeightDecayIsTheL2Term: g' = g + wd·w on the touched rows, before each optimizer's formula.
func TestWeightDecayIsTheL2Term(t *testing.T) {
	init := []float32{1, -2, 4, 8}
	sgd := fusedStep(t, OptimizerConfig{Kind: OptSGD, LR: 0.5, WeightDecay: 0.25}, init, []int64{1})
	// row 1: g = 1 + 0.25·w → w − 0.5·g
	require.InDeltaSlice(t, []float32{1, -2, 4 - 0.5*(1+1), 8 - 0.5*(1+2)}, sgd.Data, 1e-6)
	ada := fusedStep(t, OptimizerConfig{Kind: OptAdagrad, LR: 0.5, Eps: 1e-10, WeightDecay: 0.25}, init, []int64{0})
	// row 0: g = (1.25, 0.5); s = g²; w − 0.5·g/|g| = w − 0.5·sign(g)
	require.InDeltaSlice(t, []float32{0.5, -2.5, 4, 8}, ada.Data, 1e-5)
	require.InDeltaSlice(t, []float32{1.5625, 0.25, 0, 0}, ada.State, 1e-6)
}

// TestOptimizerStepOutOfRangeIsRefused: a counter past [0, MaxStep) (a corrupted checkpoint) fails the
// step instead of producing NaN rows.
func TestOptimizerStepOutOfRangeIsRefused(t *testing.T) {
	for _, step := range []int64{-1, MaxStep} {
		tb, err := NewFixedTable("t", 2, 2, OptimizerConfig{Kind: OptAdam, LR: 0.1, Eps: 1e-8, Beta1: 0.9, Beta2: 0.99})
		require.NoError(t, err)
		c, err := NewCollection([]*Table{tb}, []Feature{{Name: "a", Table: 0}})
		require.NoError(t, err)
		tb.Step[0] = step
		ctx, err := c.Forward(Batch{KeyFeature: []int64{0}, Values: []int64{1}, Lengths: []int64{1}}, make([]float32, 2), true, true)
		require.NoError(t, err)
		require.ErrorContains(t, c.Backward(ctx, []float32{1, 1}, nil, nil), "optimizer step")
		require.Equal(t, []float32{0, 0, 0, 0}, tb.Data)
		require.NoError(t, c.Close())
	}
}

// TestFusedStepsAreAtomic: concurrent fused steps on one collection all land (the step counter counts
// each) and their SGD updates add up as in a serial run.
func TestFusedStepsAreAtomic(t *testing.T) {
	tb, err := NewFixedTable("t", 8, 4, OptimizerConfig{Kind: OptSGD, LR: 0.125})
	require.NoError(t, err)
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "a", Table: 0}})
	require.NoError(t, err)
	defer c.Close()
	const goroutines, steps = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range steps {
				out := make([]float32, 4)
				b := Batch{KeyFeature: []int64{0}, Values: []int64{int64(g % 8), 3}, Lengths: []int64{2}}
				ctx, err := c.Forward(b, out, true, true)
				if err == nil {
					err = c.Backward(ctx, []float32{1, 1, 1, 1}, nil, nil)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(goroutines*steps), tb.Step[0])
	// Row 3 got every step's gradient of 1 (plus goroutine 3's own ID): exact in binary fractions.
	require.Equal(t, float32(-0.125*float64(goroutines*steps+steps)), tb.Row(3)[0])
	require.Equal(t, float32(-0.125*steps), tb.Row(0)[0])
}
