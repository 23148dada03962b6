package dynamic

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
)

// TestTrainingMatchesFixedTable trains a dynamic table through an embedding collection and, beside it,
// a fixed table fed the same batches with the dynamic table's ID→row mapping applied (rows reset to the
// same init whenever the dynamic table gives them to a new ID; unadmitted IDs dropped, which sum pooling
// makes equivalent to pooling zeros). Outputs, weights and optimizer state must agree every step.
func TestTrainingMatchesFixedTable(t *testing.T) {
	opts := []embedding.OptimizerConfig{
		{Kind: embedding.OptSGD, LR: 0.1},
		{Kind: embedding.OptRowwiseAdagrad, LR: 0.05, Eps: 1e-8},
		{Kind: embedding.OptAdam, LR: 0.01, Eps: 1e-8, Beta1: 0.9, Beta2: 0.999},
	}
	for _, opt := range opts {
		t.Run(opt.Kind.String(), func(t *testing.T) {
			const dim, bound = 4, 24
			cfg := Config{MaxRows: bound, MinCount: 2, EvictFrac: 0.125, InitLow: -0.1, InitHigh: 0.1, Seed: 3}
			b, err := NewBuilder(cfg)
			require.NoError(t, err)
			dt, err := b.BuildTable("d", dim, opt)
			require.NoError(t, err)
			ft, err := embedding.NewFixedTable("d", bound, dim, opt)
			require.NoError(t, err)
			feats := []embedding.Feature{{Name: "a", Table: 0}, {Name: "b", Table: 0}}
			dc, err := embedding.NewCollection([]*embedding.Table{dt}, feats)
			require.NoError(t, err)
			defer dc.Close()
			fc, err := embedding.NewCollection([]*embedding.Table{ft}, feats)
			require.NoError(t, err)
			defer fc.Close()
			dyn := Of(dt)
			require.NotNil(t, dyn)
			assert.Nil(t, Of(ft))

			owner := map[int64]int64{} // row → id in the reference
			rng := rand.New(rand.NewPCG(9, 10))
			const B = 6
			for step := range 60 {
				batch := embedding.Batch{KeyFeature: []int64{1, 0}}
				for range 2 * B {
					n := rng.IntN(4)
					batch.Lengths = append(batch.Lengths, int64(n))
					for range n {
						batch.Values = append(batch.Values, int64(rng.ExpFloat64()*30)*1_000_003)
					}
				}
				outD := make([]float32, B*2*dim)
				ctxD, err := dc.Forward(batch, outD, true, true)
				require.NoError(t, err)

				snap, err := dyn.Export()
				require.NoError(t, err)
				rowOf := map[int64]int64{}
				var fresh []int64
				for r, id := range snap.IDs {
					if snap.Counts[r] == 0 {
						delete(owner, int64(r)) // free: its next owner starts fresh
						continue
					}
					rowOf[id] = int64(r)
					if prev, ok := owner[int64(r)]; !ok || prev != id {
						owner[int64(r)] = id
						fresh = append(fresh, int64(r))
					}
				}
				require.NoError(t, ft.ResetRows(fresh, func(r int64, w []float32) {
					InitVector(w, owner[r], cfg.Seed, cfg.InitLow, cfg.InitHigh)
				}))
				mapped := embedding.Batch{KeyFeature: batch.KeyFeature}
				pos := 0
				for _, n := range batch.Lengths {
					kept := 0
					for _, id := range batch.Values[pos : pos+int(n)] {
						if r, ok := rowOf[id]; ok {
							mapped.Values = append(mapped.Values, r)
							kept++
						}
					}
					pos += int(n)
					mapped.Lengths = append(mapped.Lengths, int64(kept))
				}
				outF := make([]float32, B*2*dim)
				ctxF, err := fc.Forward(mapped, outF, true, true)
				require.NoError(t, err)
				require.Equal(t, outF, outD, "step %d: pooled output", step)

				grad := make([]float32, len(outD))
				for i := range grad {
					grad[i] = float32(rng.NormFloat64())
				}
				require.NoError(t, dc.Backward(ctxD, grad, nil, nil))
				require.NoError(t, fc.Backward(ctxF, grad, nil, nil))
				for _, r := range rowOf {
					require.InDeltaSlice(t, ft.Row(r), dt.Row(r), 1e-6, "step %d row %d weights", step, r)
					require.InDeltaSlice(t, ft.StateRow(r), dt.StateRow(r), 1e-6, "step %d row %d state", step, r)
				}
			}
			st, err := dyn.Stats()
			require.NoError(t, err)
			assert.Positive(t, st.Evicted, "the run exercised eviction")
			assert.Equal(t, ft.Step[0], dt.Step[0])
		})
	}
}

func TestBuilderRejectsBadConfig(t *testing.T) {
	_, err := NewBuilder(Config{MaxRows: -1})
	assert.ErrorIs(t, err, errs.ErrInvalid)
	b, err := NewBuilder(Config{MaxRows: 8, Default: []float32{1, 2}})
	require.NoError(t, err)
	_, err = b.BuildTable("x", 3, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 1})
	assert.ErrorContains(t, err, "default vector has 2 values, expected dim 3")
	_, err = b.BuildTable("x", 2, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: -1})
	assert.ErrorContains(t, err, "learning rate")
	tb, err := b.BuildTable("x", 2, embedding.OptimizerConfig{Kind: embedding.OptAdagrad, LR: 1, Eps: 1e-8})
	require.NoError(t, err)
	assert.Equal(t, int64(9), tb.Rows(), "bound plus the default row")
	assert.Equal(t, 2, Of(tb).Config().StateWidth)
	require.NoError(t, tb.Close())
}

// TestResidentMemoryStopsGrowing streams ever-new IDs through a table far smaller than the ID space
// and checks that committed storage grows only until the bound is reached and then stays flat, below
// the bound's own size.
func TestResidentMemoryStopsGrowing(t *testing.T) {
	const dim, bound = 32, 4096
	tab := newTable(t, Config{Name: "t", Dim: dim, StateWidth: dim, MaxRows: bound, MinCount: 2, EvictFrac: 0.05})
	rng := rand.New(rand.NewPCG(1, 1))
	ids, rows := make([]int64, 512), make([]int64, 512)
	var filled, last int
	next := int64(0)
	for step := range 1500 {
		for i := range ids { // half popular, half brand-new IDs
			if i%2 == 0 {
				ids[i] = int64(rng.ExpFloat64() * 2000)
			} else {
				next++
				ids[i] = 1<<40 + next
			}
		}
		require.NoError(t, tab.Resolve(ids, rows, true))
		st, err := tab.Stats()
		require.NoError(t, err)
		require.LessOrEqual(t, st.Rows, bound)
		if step == 500 {
			require.Equal(t, bound, st.HighWater, "the table is full by now")
			filled = st.ResidentBytes
		}
		last = st.ResidentBytes
	}
	st, err := tab.Stats()
	require.NoError(t, err)
	assert.Positive(t, st.Evicted)
	assert.Equal(t, filled, last, "no growth once full")
	storage := bound * (dim + dim + 6) * 4 // weights, state, metadata (ID, last step, count, freed count)
	assert.LessOrEqual(t, last, storage+8*4096, "resident storage within the bound (plus page rounding)")
	assert.Less(t, last, st.ReservedBytes+1)
}

// TestDefaultRowPoolsButIsNeverTrained: in eval mode an unseen ID pools the default vector; a fused
// backward of that pass updates the IDs' own rows but never the shared default row, and Lookup
// reports -1 for the unseen ID.
func TestDefaultRowPoolsButIsNeverTrained(t *testing.T) {
	b, err := NewBuilder(Config{MaxRows: 4, Default: []float32{0.5, -2}, InitLow: 1, InitHigh: 1})
	require.NoError(t, err)
	tb, err := b.BuildTable("d", 2, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 1})
	require.NoError(t, err)
	require.Equal(t, int64(4), tb.TrainableRows())
	c, err := embedding.NewCollection([]*embedding.Table{tb}, []embedding.Feature{{Name: "a", Table: 0}})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Forward(embedding.Batch{KeyFeature: []int64{0}, Values: []int64{7}, Lengths: []int64{1}}, make([]float32, 2), true, false)
	require.NoError(t, err) // admits 7
	for range 3 {
		out := make([]float32, 4)
		ctx, err := c.Forward(embedding.Batch{KeyFeature: []int64{0}, Values: []int64{7, 9}, Lengths: []int64{1, 1}}, out, false, true)
		require.NoError(t, err)
		require.Equal(t, []float32{0.5, -2}, out[2:], "unseen 9 pools the default")
		require.NoError(t, c.Backward(ctx, []float32{1, 1, 1, 1}, nil, nil))
	}
	d := Of(tb)
	require.Equal(t, []float32{0.5, -2}, d.Weights()[4*2:5*2], "the default row is unchanged")
	require.Equal(t, []float32{-2, -2}, tb.Row(0), "7's row took three steps")
	rows := make([]int64, 2)
	require.NoError(t, d.Lookup([]int64{7, 9}, rows, false))
	require.Equal(t, []int64{0, -1}, rows)
}

// TestRecomputeReadsTheTrainingForwardsRows: a forward's recomputation in backward (activation
// checkpointing; Batch.Recompute) reads the rows the training forward read: an admitted ID its row,
// a pending one (min_count not reached) zeros — an eval forward gives it the default vector, which the
// recomputation gave it before, so the backward saw values the forward never produced. Nothing is
// counted or admitted and the clock stays; a training forward marked Recompute is refused.
func TestRecomputeReadsTheTrainingForwardsRows(t *testing.T) {
	cases := []struct {
		name       string
		train      bool
		recompute  bool
		want       []float32 // ID 7 (admitted), ID 9 (seen once, pending)
		step       int64
		admitted   int64
		wantErrMsg string
	}{
		{name: "train", train: true, want: []float32{1, 1, 1, 1}, step: 3, admitted: 2}, // 9 seen twice now
		{name: "eval", want: []float32{1, 1, 0.5, -2}, step: 2, admitted: 1},
		{name: "recompute", recompute: true, want: []float32{1, 1, 0, 0}, step: 2, admitted: 1},
		{name: "train+recompute", train: true, recompute: true, wantErrMsg: "not a training forward"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBuilder(Config{MaxRows: 4, MinCount: 2, Default: []float32{0.5, -2}, InitLow: 1, InitHigh: 1})
			require.NoError(t, err)
			tb, err := b.BuildTable("d", 2, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 1})
			require.NoError(t, err)
			c, err := embedding.NewCollection([]*embedding.Table{tb}, []embedding.Feature{{Name: "a", Table: 0}})
			require.NoError(t, err)
			defer c.Close()
			for _, ids := range [][]int64{{7}, {7, 9}} { // 7 admitted at its second sighting, 9 seen once
				_, err = c.Forward(embedding.Batch{KeyFeature: []int64{0}, Values: ids, Lengths: []int64{int64(len(ids))}}, make([]float32, 2), true, false)
				require.NoError(t, err)
			}
			out := make([]float32, 4)
			batch := embedding.Batch{KeyFeature: []int64{0}, Values: []int64{7, 9}, Lengths: []int64{1, 1}, Recompute: tc.recompute}
			ctx, err := c.Forward(batch, out, tc.train, true)
			if tc.wantErrMsg != "" {
				require.ErrorIs(t, err, errs.ErrInvalid)
				require.ErrorContains(t, err, tc.wantErrMsg)
				return
			}
			require.NoError(t, err)
			c.Release(ctx)
			assert.Equal(t, tc.want, out)
			st, err := Of(tb).Stats()
			require.NoError(t, err)
			assert.Equal(t, tc.step, st.Step)
			assert.Equal(t, tc.admitted, st.Admitted)
		})
	}
}
