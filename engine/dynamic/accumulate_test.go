package dynamic

import (
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackwardAfterAnEvictionLeavesTheNewOwnerAlone: gradient accumulation runs two training
// forwards before their backwards. When the second forward's admission evicts a row the first
// looked up and gives it to a new ID, the first backward must not write its gradient into the new
// owner's row: the evicted ID's gradient is dropped (it has no row any more), the new ID trains on
// its own gradient only. Pooled and sequence collections, SGD (the sequence one's planned linear
// update) and Adagrad; every ID's gradient is 1 in the second batch and 10 in the first, so the
// new ID's row moves by exactly 1 (SGD lr 1; Adagrad lr 1: g/√g²).
func TestBackwardAfterAnEvictionLeavesTheNewOwnerAlone(t *testing.T) {
	const dim = 2
	cfg := Config{MaxRows: 4, Policy: LFU, EvictFrac: 0.25, InitLow: -0.5, InitHigh: 0.5, Seed: 7}
	opts := []embedding.OptimizerConfig{{Kind: embedding.OptSGD, LR: 1}, {Kind: embedding.OptAdagrad, LR: 1, Eps: 1e-8}}
	one := func(ids ...int64) embedding.Batch {
		return embedding.Batch{KeyFeature: []int64{0}, Values: ids, Lengths: []int64{int64(len(ids))}}
	}
	fill := func(n int, v float32) []float32 {
		g := make([]float32, n)
		for i := range g {
			g[i] = v
		}
		return g
	}
	for _, opt := range opts {
		for _, sequence := range []bool{false, true} {
			t.Run(opt.Kind.String()+map[bool]string{false: "/pooled", true: "/sequence"}[sequence], func(t *testing.T) {
				c, s, tb := oneDynamicTable(t, cfg, dim, opt)
				// forward keeps its context; backward gives every looked-up value the gradient g
				type step struct {
					ctx *embedding.Context
					n   int
				}
				forward := func(ids ...int64) step {
					if sequence {
						ctx, err := s.Forward(one(ids...), [][]float32{make([]float32, len(ids)*dim)}, true, true)
						require.NoError(t, err)
						return step{ctx, len(ids) * dim}
					}
					ctx, err := c.Forward(one(ids...), make([]float32, dim), true, true)
					require.NoError(t, err)
					return step{ctx, dim}
				}
				backward := func(st step, g float32) {
					if sequence {
						require.NoError(t, s.Backward(st.ctx, fill(st.n, g), nil, nil))
					} else {
						require.NoError(t, c.Backward(st.ctx, fill(st.n, g), nil, nil))
					}
				}
				a := forward(1, 2, 3, 4) // fills the table
				bb := forward(5)         // evicts one of 1..4 for 5
				stats, err := Of(tb).Stats()
				require.NoError(t, err)
				require.Equal(t, int64(1), stats.Evicted)
				backward(a, 10)
				backward(bb, 1)
				rows := []int64{0}
				require.NoError(t, Of(tb).Lookup([]int64{5}, rows, false))
				want := make([]float32, dim)
				InitVector(want, 5, cfg.Seed, cfg.InitLow, cfg.InitHigh)
				for j := range want {
					want[j]--
				}
				require.InDeltaSlice(t, want, tb.Row(rows[0]), 1e-5, "ID 5 took the gradient of the ID evicted for it")
			})
		}
	}
}

// TestBackwardAfterAReadmissionLeavesTheNewIncarnationAlone: under gradient accumulation a later
// forward evicts the IDs an earlier one looked up and a third re-admits them (re-initialised) into
// the very rows they held. The earlier backward's gradient belongs to the evicted incarnation and is
// dropped; the row's ID alone cannot tell (the same ID holds the same row), so it used to be applied.
func TestBackwardAfterAReadmissionLeavesTheNewIncarnationAlone(t *testing.T) {
	const dim = 2
	cfg := Config{MaxRows: 2, EvictFrac: 1, InitLow: -0.5, InitHigh: 0.5, Seed: 11}
	cases := []struct {
		name     string
		opt      embedding.OptimizerConfig
		sequence bool
	}{
		{"sgd/pooled", embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 1}, false},
		{"sgd/sequence", embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 1}, true},
		{"adagrad/pooled", embedding.OptimizerConfig{Kind: embedding.OptAdagrad, LR: 1, Eps: 1e-8}, false},
		{"adagrad/sequence", embedding.OptimizerConfig{Kind: embedding.OptAdagrad, LR: 1, Eps: 1e-8}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s, tb := oneDynamicTable(t, cfg, dim, tc.opt)
			var err error
			forward := func(ids ...int64) *embedding.Context { // two samples of one ID each
				batch := embedding.Batch{KeyFeature: []int64{0}, Values: ids, Lengths: []int64{1, 1}}
				var ctx *embedding.Context
				if tc.sequence {
					ctx, err = s.Forward(batch, [][]float32{make([]float32, 2*dim)}, true, true)
				} else {
					ctx, err = c.Forward(batch, make([]float32, 2*dim), true, true)
				}
				require.NoError(t, err)
				return ctx
			}
			backward := func(ctx *embedding.Context, g float32) {
				grad := []float32{g, g, g, g}
				if tc.sequence {
					require.NoError(t, s.Backward(ctx, grad, nil, nil))
				} else {
					require.NoError(t, c.Backward(ctx, grad, nil, nil))
				}
			}
			rowsOf := func(ids ...int64) []int64 {
				rows := make([]int64, len(ids))
				require.NoError(t, Of(tb).Lookup(ids, rows, false))
				return rows
			}
			f1 := forward(1, 2)
			first := rowsOf(1, 2)
			f2 := forward(3, 4) // evicts 1 and 2
			f3 := forward(1, 2) // evicts 3 and 4; 1 and 2 come back, re-initialised, to their rows
			require.Equal(t, first, rowsOf(1, 2), "the same rows as in the first forward")
			backward(f1, 10) // the evicted incarnation's gradient: dropped
			backward(f2, 10) // 3 and 4 are gone: dropped
			backward(f3, 1)
			for i, id := range []int64{1, 2} {
				want := make([]float32, dim)
				InitVector(want, id, cfg.Seed, cfg.InitLow, cfg.InitHigh)
				for j := range want {
					want[j]-- // one step of gradient 1 (SGD lr 1; Adagrad lr 1: g/√g²)
				}
				assert.InDeltaSlice(t, want, tb.Row(first[i]), 1e-5, "ID %d took the gradient of its evicted incarnation", id)
			}
		})
	}
}

// oneDynamicTable is a pooled collection of one dynamic table "d" read by feature "f", the sequence
// collection over it, and the table; the collection closes when the test ends.
func oneDynamicTable(t *testing.T, cfg Config, dim int, opt embedding.OptimizerConfig) (*embedding.Collection,
	*embedding.SequenceCollection, *embedding.Table) {
	t.Helper()
	b, err := NewBuilder(cfg)
	require.NoError(t, err)
	tb, err := b.BuildTable("d", dim, opt)
	require.NoError(t, err)
	feats := []embedding.Feature{{Name: "f", Table: 0}}
	c, err := embedding.NewCollection([]*embedding.Table{tb}, feats)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	s, err := embedding.NewSequenceCollection(c, feats)
	require.NoError(t, err)
	return c, s, tb
}
