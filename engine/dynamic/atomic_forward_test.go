package dynamic

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
)

var _ embedding.RoomChecker = (*Table)(nil)

// atomicTables builds a collection of dynamic table "d" (8 rows, features a, b) beside second table
// "x" (feature c): fixed with 4 rows, or dynamic with 2.
func atomicTables(t *testing.T, secondDynamic bool, opts embedding.Options) (*embedding.Collection, []*Table) {
	opt := embedding.OptimizerConfig{Kind: embedding.OptAdam, LR: 0.1, Eps: 1e-8, Beta1: 0.9, Beta2: 0.999}
	build := func(name string, rows int) *embedding.Table {
		b, err := NewBuilder(Config{MaxRows: rows, InitLow: -0.1, InitHigh: 0.1, Seed: 5})
		require.NoError(t, err)
		tb, err := b.BuildTable(name, 2, opt)
		require.NoError(t, err)
		return tb
	}
	tables := []*embedding.Table{build("d", 8)}
	if secondDynamic {
		tables = append(tables, build("x", 2))
	} else {
		ft, err := embedding.NewFixedTable("x", 4, 2, opt)
		require.NoError(t, err)
		tables = append(tables, ft)
	}
	feats := []embedding.Feature{{Name: "a", Table: 0}, {Name: "b", Table: 0}, {Name: "c", Table: 1}}
	c, err := embedding.NewCollectionWithOptions(tables, feats, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	var dyn []*Table
	for _, tb := range tables {
		if d := Of(tb); d != nil {
			dyn = append(dyn, d)
		}
	}
	return c, dyn
}

// TestRefusedTrainingForwardAdmitsNothing: a training forward refused for a later table (a fixed
// table's out-of-range ID, a second dynamic table's CapacityError) leaves every dynamic table as it
// was (IDs, counts, clock, rows), pooled and sequence, with and without deduplication; it used to
// admit the first table's new IDs before the error.
func TestRefusedTrainingForwardAdmitsNothing(t *testing.T) {
	cases := []struct {
		name          string
		secondDynamic bool
		third         []int64 // feature c's two IDs
		class         error
	}{
		{"fixed table out of range", false, []int64{1, 9}, errs.ErrInvalid},
		{"fixed table negative", false, []int64{-1, 2}, errs.ErrInvalid},
		{"second dynamic table full", true, []int64{30, 31, 32}, errs.ErrCapacity},
	}
	for _, tc := range cases {
		for _, seq := range []bool{false, true} {
			for _, noDedup := range []bool{false, true} {
				name := tc.name
				if seq {
					name += "/sequence"
				}
				if noDedup {
					name += "/no dedup"
				}
				t.Run(name, func(t *testing.T) {
					c, dyn := atomicTables(t, tc.secondDynamic, embedding.Options{NoDedup: noDedup})
					lengths := []int64{1, 1, 1, 1, 1, int64(len(tc.third) - 1)}
					batch := embedding.Batch{KeyFeature: []int64{0, 1, 2}, Lengths: lengths,
						Values: append([]int64{10, 11, 12, 13}, tc.third...)}
					before := make([]*Snapshot, len(dyn))
					for i, d := range dyn {
						var err error
						before[i], err = d.Export()
						require.NoError(t, err)
					}
					var err error
					if seq {
						s, serr := embedding.NewSequenceCollectionWithOptions(c,
							[]embedding.Feature{{Name: "a", Table: 0}, {Name: "b", Table: 0}, {Name: "c", Table: 1}},
							embedding.Options{NoDedup: noDedup})
						require.NoError(t, serr)
						outs := [][]float32{make([]float32, 4), make([]float32, 4), make([]float32, 2*len(tc.third))}
						_, err = s.Forward(batch, outs, true, true)
					} else {
						_, err = c.Forward(batch, make([]float32, 2*6), true, true)
					}
					require.Error(t, err)
					assert.ErrorIs(t, err, tc.class)
					for i, d := range dyn {
						after, xerr := d.Export()
						require.NoError(t, xerr)
						assert.Equal(t, before[i], after, "dynamic table %d changed", i)
					}
				})
			}
		}
	}
}

// TestBackwardAfterImportDropsStaleRows: a forward's backward that runs after a checkpoint import
// drops its gradients (the rows it resolved now hold the loaded IDs), pooled and sequence, fused and
// merged into a torch optimizer's gradient buffers; it used to write them into the loaded IDs' rows,
// as an import restored the eviction count its rows were rechecked by.
func TestBackwardAfterImportDropsStaleRows(t *testing.T) {
	for _, seq := range []bool{false, true} {
		for _, fused := range []bool{true, false} {
			t.Run(map[bool]string{false: "pooled", true: "sequence"}[seq]+map[bool]string{true: "/fused", false: "/grads"}[fused], func(t *testing.T) {
				c, dyn := atomicTables(t, false, embedding.Options{})
				other, odyn := atomicTables(t, false, embedding.Options{})
				mk := func(ids ...int64) embedding.Batch {
					return embedding.Batch{KeyFeature: []int64{0, 1, 2}, Lengths: []int64{1, 1, 1, 1, 1, 1},
						Values: append(ids, 0, 1)}
				}
				_, err := other.Forward(mk(20, 21, 22, 23), make([]float32, 12), true, false)
				require.NoError(t, err)
				snap, err := odyn[0].Export()
				require.NoError(t, err)

				var ctx *embedding.Context
				var backward func(*embedding.Context, []float32, [][]int64, [][]float32) error
				if seq {
					s, serr := embedding.NewSequenceCollection(c,
						[]embedding.Feature{{Name: "a", Table: 0}, {Name: "b", Table: 0}, {Name: "c", Table: 1}})
					require.NoError(t, serr)
					ctx, err = s.Forward(mk(10, 11, 12, 13), [][]float32{make([]float32, 4), make([]float32, 4), make([]float32, 4)}, true, true)
					backward = s.Backward
				} else {
					ctx, err = c.Forward(mk(10, 11, 12, 13), make([]float32, 12), true, true)
					backward = c.Backward
				}
				require.NoError(t, err)
				require.NoError(t, dyn[0].Import(snap))
				grad := make([]float32, 12)
				for i := range grad {
					grad[i] = 1
				}
				var rows [][]int64
				var vals [][]float32
				if !fused {
					for i := range 2 {
						rows = append(rows, make([]int64, ctx.Unique(i)))
						vals = append(vals, make([]float32, ctx.Unique(i)*2))
					}
				}
				require.NoError(t, backward(ctx, grad, rows, vals))
				after, err := dyn[0].Export()
				require.NoError(t, err)
				assert.Equal(t, snap.Weights, after.Weights)
				assert.Equal(t, snap.State, after.State)
				if !fused {
					assert.Equal(t, []int64{-1, -1, -1, -1}, rows[0], "the stale rows' gradients are dropped")
				}
			})
		}
	}
}
