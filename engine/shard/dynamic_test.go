package shard

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/recgo/recgo/engine/dynamic"
	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dynamicIDs is the pool the dynamic tables' IDs are drawn from: spread over int64, negative ones
// included (a dynamic table has no ID range).
var dynamicIDs = func() []int64 {
	out := make([]int64, 40)
	for k := range out {
		out[k] = int64(uint64(k+1) * 0x9E3779B97F4A7C15)
	}
	return out
}()

// dynamicWorld is a world whose tables 0 and 1 are dynamic (hash with admission after two
// sightings and a default vector; table-wise on rank 1), table 2 fixed (hash), beside the
// single-process reference collection with the same tables.
type dynamicWorld struct {
	testWorld
	cfgs []dynamic.Config
}

func newDynamicWorld(t *testing.T, nodes, per int, mode Mode, opt embedding.OptimizerConfig, bound int) *dynamicWorld {
	topo, err := NewTopology(nodes, per, nodes*per)
	require.NoError(t, err)
	cfgs := []dynamic.Config{
		{MaxRows: bound, MinCount: 2, InitLow: -0.5, InitHigh: 0.5, Seed: 3, Default: []float32{1, 2, 3, 4}},
		{MaxRows: bound, MinCount: 1, InitLow: -0.5, InitHigh: 0.5, Seed: 4},
	}
	dims := []int{4, 3, 5}
	build := func(i int) *embedding.Table {
		b, err := dynamic.NewBuilder(cfgs[i])
		require.NoError(t, err)
		tb, err := b.BuildTable(fmt.Sprintf("t%d", i), dims[i], opt)
		require.NoError(t, err)
		return tb
	}
	feats := []embedding.Feature{{Name: "f0", Table: 0}, {Name: "f1", Table: 1, Pooling: embedding.PoolMean}, {Name: "f2", Table: 2}}
	fixed, err := embedding.NewFixedTable("t2", 20, dims[2], opt)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 6))
	for j := range fixed.Data {
		fixed.Data[j] = rng.Float32() - 0.5
	}
	ref, err := embedding.NewCollection([]*embedding.Table{build(0), build(1), fixed}, feats)
	require.NoError(t, err)
	w := &dynamicWorld{testWorld: testWorld{topo: topo, ref: ref}, cfgs: cfgs}
	for r := 0; r < topo.World(); r++ {
		var ls []*Layout
		for i, kind := range []Kind{Hash, TableWise} {
			b, err := dynamic.NewBuilder(cfgs[i])
			require.NoError(t, err)
			l, err := NewDynamicLayout(fmt.Sprintf("t%d", i), dims[i], kind, 1, topo.World(), b)
			require.NoError(t, err)
			ls = append(ls, l)
		}
		l, err := NewLayout("t2", 20, dims[2], Hash, 0, topo.World())
		require.NoError(t, err)
		c, err := NewCollection(append(ls, l), topo, r, mode, opt, feats)
		require.NoError(t, err)
		for j, id := range l.LocalIDs(r) {
			copy(c.Shards[2].Row(int64(j)), fixed.Row(id))
		}
		w.ranks = append(w.ranks, c)
	}
	t.Cleanup(func() {
		for _, c := range w.ranks {
			require.NoError(t, c.Close())
		}
		require.NoError(t, ref.Close())
	})
	return w
}

// dynamicBatch draws per-feature lengths and values for B samples: dynamic features from ids,
// the fixed one from its 20 rows.
func dynamicBatch(rng *rand.Rand, B int, ids []int64) (lens, vals [][]int64) {
	lens, vals = make([][]int64, 3), make([][]int64, 3)
	for f := range lens {
		for range B {
			n := rng.IntN(4)
			lens[f] = append(lens[f], int64(n))
			for range n {
				if f == 2 {
					vals[f] = append(vals[f], rng.Int64N(20))
				} else {
					vals[f] = append(vals[f], ids[rng.IntN(len(ids))])
				}
			}
		}
	}
	return lens, vals
}

// row reads id's row of dynamic table i in the reference (nil when it has none) and at its owner.
func (w *dynamicWorld) rows(t *testing.T, i int, id int64) (ref, owned []float32) {
	get := func(tb *embedding.Table) []float32 {
		r := []int64{0}
		require.NoError(t, dynamic.Of(tb).Lookup([]int64{id}, r, false))
		if r[0] < 0 {
			return nil
		}
		return tb.Row(r[0])
	}
	owner := w.ranks[0].Layouts[i].OwnerRank(id, 0)
	return get(w.ref.Tables[i]), get(w.ranks[owner].Shards[i])
}

// TestDynamicTablesShardedMatchOneCollection: dynamic tables sharded hash or table-wise train as
// the single-process collection does — the same admissions (after two sightings), pooled outputs,
// fused updates and, in an evaluation step, the same zeros or default vector for unseen IDs,
// without admitting them.
func TestDynamicTablesShardedMatchOneCollection(t *testing.T) {
	opts := []embedding.OptimizerConfig{
		{Kind: embedding.OptSGD, LR: 0.1},
		{Kind: embedding.OptAdam, LR: 0.01, Eps: 1e-8, Beta1: 0.9, Beta2: 0.999},
	}
	for _, sh := range []shape{{2, 2}, {1, 2}} {
		for _, mode := range []Mode{Flat, Hierarchical} {
			for _, opt := range opts {
				// SGD's owners pool the bags (an ID without a row adds zeros), Adam's return rows
				ret := map[embedding.OptimizerKind]Return{embedding.OptSGD: ReturnPooled, embedding.OptAdam: ReturnRows}[opt.Kind]
				t.Run(fmt.Sprintf("%dx%d/%s/%s/%s", sh.nodes, sh.per, mode, opt.Kind, ret), func(t *testing.T) {
					w := newDynamicWorld(t, sh.nodes, sh.per, mode, opt, 1000)
					for _, c := range w.ranks {
						require.NoError(t, c.SetReturns([]Return{ret, ret, ret}))
					}
					W, Bl := w.topo.World(), 5
					rng := rand.New(rand.NewPCG(7, 8))
					run := func(train bool, ids []int64) {
						lens, vals := dynamicBatch(rng, W*Bl, ids)
						width := w.ref.Width()
						refOut := make([]float32, W*Bl*width)
						ctx, err := w.ref.Forward(sliceBatch(lens, vals, 0, W*Bl), refOut, train, true)
						require.NoError(t, err)
						for _, c := range w.ranks {
							c.SetTraining(train)
						}
						steps, xs := w.forward(t, func(r int) embedding.Batch { return sliceBatch(lens, vals, r*Bl, (r+1)*Bl) })
						grad := randGrad(rng, len(refOut))
						for r, s := range steps {
							out := make([]float32, Bl*width)
							require.NoError(t, s.Pool(out))
							require.InDeltaSlice(t, refOut[r*Bl*width:(r+1)*Bl*width], out, 1e-6, "pooled, rank %d", r)
							if train {
								require.NoError(t, s.Backward(grad[r*Bl*width:(r+1)*Bl*width], true))
							}
						}
						if train {
							runLockstep(t, w.topo, xs)
							require.NoError(t, w.ref.Backward(ctx, grad, nil, nil))
						}
					}
					for range 4 {
						run(true, dynamicIDs[:30])
					}
					admitted := 0
					for i := range 2 {
						for _, id := range dynamicIDs {
							ref, owned := w.rows(t, i, id)
							require.Equal(t, ref == nil, owned == nil, "table %d id %d: admitted in one, not the other", i, id)
							if ref != nil {
								admitted++
								require.InDeltaSlice(t, ref, owned, 1e-5, "table %d id %d", i, id)
							}
						}
						for r, c := range w.ranks {
							require.Equal(t, dynamic.Of(w.ref.Tables[i]).Step(), dynamic.Of(c.Shards[i]).Step(), "table %d rank %d clock", i, r)
							require.Equal(t, w.ref.Tables[i].Step[0], c.Shards[i].Step[0], "table %d rank %d optimizer step", i, r)
						}
					}
					require.Positive(t, admitted)
					// evaluation: every ID, seen or not, pools as the reference's; nothing is admitted
					before := w.admittedIDs(t)
					run(false, dynamicIDs)
					require.Equal(t, before, w.admittedIDs(t), "an evaluation step admitted IDs")
				})
			}
		}
	}
}

// admittedIDs counts, per dynamic table, the IDs holding a row on any rank.
func (w *dynamicWorld) admittedIDs(t *testing.T) [2]int {
	var n [2]int
	for i := range n {
		for _, c := range w.ranks {
			st, err := dynamic.Of(c.Shards[i]).Stats()
			require.NoError(t, err)
			n[i] += st.Rows
		}
	}
	return n
}

// TestFullDynamicShardsEvict: shards fed more IDs than they hold evict and reuse rows step after
// step and stay within their bound.
func TestFullDynamicShardsEvict(t *testing.T) {
	const bound = 25 // above the distinct IDs of one batch (the table-wise shard gets all of them)
	w := newDynamicWorld(t, 1, 2, Flat, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}, bound)
	rng := rand.New(rand.NewPCG(9, 9))
	for range 8 {
		lens, vals := dynamicBatch(rng, 2*5, dynamicIDs)
		steps, xs := w.forward(t, func(r int) embedding.Batch { return sliceBatch(lens, vals, r*5, (r+1)*5) })
		for _, s := range steps {
			require.NoError(t, s.Pool(make([]float32, 5*w.ranks[0].Width())))
			g := make([]float32, 5*w.ranks[0].Width())
			for i := range g {
				g[i] = 1
			}
			require.NoError(t, s.Backward(g, true))
		}
		runLockstep(t, w.topo, xs)
	}
	var evicted int64
	for _, c := range w.ranks {
		for i := range 2 {
			st, err := dynamic.Of(c.Shards[i]).Stats()
			require.NoError(t, err)
			require.LessOrEqual(t, st.Rows, bound, "a shard outgrew its bound")
			evicted += st.Evicted
		}
	}
	require.Positive(t, evicted, "40 IDs through shards of 25 rows evicted nothing")
}

func TestDynamicLayoutRefusesRangeShardings(t *testing.T) {
	b, err := dynamic.NewBuilder(dynamic.Config{MaxRows: 10})
	require.NoError(t, err)
	for _, k := range []Kind{RowWise, DataParallel} {
		_, err := NewDynamicLayout("d", 4, k, 0, 2, b)
		require.ErrorContains(t, err, "hash or table-wise")
	}
	_, err = NewDynamicLayout("d", 4, Hash, 0, 2, nil)
	require.ErrorContains(t, err, "builder")
	l, err := NewDynamicLayout("d", 4, Hash, 0, 2, b)
	require.NoError(t, err)
	require.NoError(t, l.Check(-1<<63), "every int64 is an ID of a dynamic table")
	require.ErrorContains(t, l.Locate(0, []int64{1}, []int64{0}), "found by its shard")
	require.Empty(t, l.LocalIDs(0))
}

// TestAccumulatedStepsAcrossAnEviction: two steps' forwards before their backwards (gradient
// accumulation), the second's admission evicting a row the first looked up: the owner drops the
// evicted ID's gradient instead of writing it into the row's new ID (see TestBackwardAfterAnEviction-
// LeavesTheNewOwnerAlone in engine/dynamic for one process).
func TestAccumulatedStepsAcrossAnEviction(t *testing.T) {
	cfg := dynamic.Config{MaxRows: 4, Policy: dynamic.LFU, EvictFrac: 0.25, InitLow: -0.5, InitHigh: 0.5, Seed: 7}
	w, ids := dynamicPair(t, cfg, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 1}, 5)
	stepsA, xsA := w.forward(t, fromRank1(ids[:4]...)) // fills rank 0's shard
	stepsB, xsB := w.forward(t, fromRank1(ids[4]))     // evicts one of them for ids[4]
	for k, steps := range [][]*Step{stepsA, stepsB} {
		for r, s := range steps {
			require.NoError(t, s.Pool(make([]float32, 2)))
			g := float32([]int{10, 1}[k] * r) // rank 1's bag: 10 in the first step, 1 in the second
			require.NoError(t, s.Backward([]float32{g, g}, true))
		}
	}
	runLockstep(t, w.topo, xsA)
	runLockstep(t, w.topo, xsB)
	d := dynamic.Of(w.ranks[0].Shards[0])
	st, err := d.Stats()
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Evicted)
	rows := []int64{0}
	require.NoError(t, d.Lookup(ids[4:], rows, false))
	want := make([]float32, 2)
	dynamic.InitVector(want, ids[4], cfg.Seed, cfg.InitLow, cfg.InitHigh)
	require.InDeltaSlice(t, []float32{want[0] - 1, want[1] - 1}, w.ranks[0].Shards[0].Row(rows[0]), 1e-6,
		"the new ID took the gradient of the ID evicted for it")
}

// TestAccumulatedStepsAcrossAReadmission: three steps' forwards before their backwards; the second
// evicts the IDs the first looked up and the third re-admits them (re-initialised) into the same
// rows of the owner's shard. The first step's gradients belong to the evicted incarnation and are
// dropped (the owner's recheck compared the rows' IDs only, so it applied them); see
// TestBackwardAfterAReadmissionLeavesTheNewIncarnationAlone in engine/dynamic for one process.
func TestAccumulatedStepsAcrossAReadmission(t *testing.T) {
	cfg := dynamic.Config{MaxRows: 2, EvictFrac: 1, InitLow: -0.5, InitHigh: 0.5, Seed: 7}
	for _, opt := range []embedding.OptimizerConfig{{Kind: embedding.OptSGD, LR: 1}, {Kind: embedding.OptAdagrad, LR: 1, Eps: 1e-8}} {
		t.Run(opt.Kind.String(), func(t *testing.T) {
			w, ids := dynamicPair(t, cfg, opt, 4)
			d := dynamic.Of(w.ranks[0].Shards[0])
			rowsOf := func() []int64 {
				rows := make([]int64, 2)
				require.NoError(t, d.Lookup(ids[:2], rows, false))
				return rows
			}
			stepsA, xsA := w.forward(t, fromRank1(ids[:2]...))
			first := rowsOf()
			stepsB, xsB := w.forward(t, fromRank1(ids[2:]...)) // evicts ids[0], ids[1]
			stepsC, xsC := w.forward(t, fromRank1(ids[:2]...)) // evicts ids[2], ids[3]; the first two come back
			require.Equal(t, first, rowsOf(), "re-admitted into the same rows")
			for k, steps := range [][]*Step{stepsA, stepsB, stepsC} {
				for r, s := range steps {
					require.NoError(t, s.Pool(make([]float32, 2)))
					g := float32([]int{10, 10, 1}[k] * r) // rank 1's bag
					require.NoError(t, s.Backward([]float32{g, g}, true))
				}
			}
			runLockstep(t, w.topo, xsA)
			runLockstep(t, w.topo, xsB)
			runLockstep(t, w.topo, xsC)
			for i, id := range ids[:2] {
				want := make([]float32, 2)
				dynamic.InitVector(want, id, cfg.Seed, cfg.InitLow, cfg.InitHigh)
				assert.InDeltaSlice(t, []float32{want[0] - 1, want[1] - 1}, w.ranks[0].Shards[0].Row(first[i]), 1e-5,
					"ID %d took the gradient of its evicted incarnation", id)
			}
		})
	}
}

// TestFullShardRefusesTheStepOnEveryRank: a step whose IDs one owner's dynamic shard cannot hold
// fails on every rank with CapacityError (the owner's own; the others name the owner and the
// table) at the same op, before any shard admits an ID or moves its clock; the next step, which
// fits, runs on every rank and trains as if the refused one had never been sent.
func TestFullShardRefusesTheStepOnEveryRank(t *testing.T) {
	cfg := dynamic.Config{MaxRows: 2, InitLow: -0.5, InitHigh: 0.5, Seed: 7}
	for _, sh := range []struct {
		shape
		mode Mode
	}{{shape{1, 2}, Flat}, {shape{2, 2}, Flat}, {shape{2, 2}, Hierarchical}} {
		t.Run(fmt.Sprintf("%dx%d/%s", sh.nodes, sh.per, sh.mode), func(t *testing.T) {
			topo, err := NewTopology(sh.nodes, sh.per, sh.nodes*sh.per)
			require.NoError(t, err)
			W := topo.World()
			w := &testWorld{topo: topo}
			for r := range W {
				b, err := dynamic.NewBuilder(cfg)
				require.NoError(t, err)
				l, err := NewDynamicLayout("d", 2, Hash, 0, W, b)
				require.NoError(t, err)
				c, err := NewCollection([]*Layout{l}, topo, r, sh.mode, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 1},
					[]embedding.Feature{{Name: "f", Table: 0}})
				require.NoError(t, err)
				w.ranks = append(w.ranks, c)
			}
			defer func() {
				for _, c := range w.ranks {
					require.NoError(t, c.Close())
				}
			}()
			owned := func(owner, n int) []int64 { // n IDs of owner's shard
				var ids []int64
				for id := int64(1); len(ids) < n; id++ {
					if HashOwner(id, W) == owner {
						ids = append(ids, id)
					}
				}
				return ids
			}
			begin := func(batch func(r int) []int64) ([]*Step, []*Exchange) {
				steps, xs := make([]*Step, W), make([]*Exchange, W)
				for r, c := range w.ranks {
					vals := batch(r)
					steps[r], err = c.Begin(embedding.Batch{KeyFeature: []int64{0}, Values: vals, Lengths: []int64{int64(len(vals))}})
					require.NoError(t, err)
					xs[r] = steps[r].X
				}
				return steps, xs
			}
			// the last rank sends 4 of rank 0's IDs to its 2-row shard
			last := W - 1
			_, xs := begin(func(r int) []int64 {
				if r == last {
					return owned(0, 4)
				}
				return nil
			})
			for r, err := range runLockstepErrors(t, topo, xs) {
				require.ErrorIs(t, err, errs.ErrCapacity, "rank %d", r)
				if r == 0 {
					require.ErrorContains(t, err, "this batch needs 4 rows")
				} else {
					require.ErrorContains(t, err, `rank 0's shard of table "d" cannot hold this step's IDs`)
				}
			}
			for r, c := range w.ranks {
				st, err := dynamic.Of(c.Shards[0]).Stats()
				require.NoError(t, err)
				require.Equal(t, 0, st.Rows, "rank %d admitted IDs in a refused step", r)
				require.Zero(t, dynamic.Of(c.Shards[0]).Step(), "rank %d's clock moved in a refused step", r)
			}
			// a step that fits: every rank trains; each bag's gradient is 1 per column
			ids := append(owned(0, 2), owned(last, 1)...)
			steps, xs := begin(func(r int) []int64 {
				if r == last {
					return ids
				}
				return nil
			})
			runLockstep(t, topo, xs)
			for _, s := range steps {
				require.NoError(t, s.Pool(make([]float32, 2)))
				require.NoError(t, s.Backward([]float32{1, 1}, true))
			}
			runLockstep(t, topo, xs)
			for r, c := range w.ranks {
				require.Equal(t, int64(1), dynamic.Of(c.Shards[0]).Step(), "rank %d clock", r)
			}
			for _, id := range ids {
				owner := HashOwner(id, W)
				rows := []int64{0}
				require.NoError(t, dynamic.Of(w.ranks[owner].Shards[0]).Lookup([]int64{id}, rows, false))
				require.GreaterOrEqual(t, rows[0], int64(0), "id %d not admitted", id)
				want := make([]float32, 2)
				dynamic.InitVector(want, id, cfg.Seed, cfg.InitLow, cfg.InitHigh)
				require.InDeltaSlice(t, []float32{want[0] - 1, want[1] - 1}, w.ranks[owner].Shards[0].Row(rows[0]), 1e-6, "id %d", id)
			}
			// the room op runs only when the world's distinct IDs of the table exceed a shard's bound
			ops := func(vals []int64) int {
				_, xs := begin(func(r int) []int64 {
					if r == last {
						return vals
					}
					return nil
				})
				n := 0
				runLockstep(t, topo, xs, func(r int, _ *Op) {
					if r == last {
						n++
					}
				})
				return n
			}
			require.Equal(t, ops(ids[1:])+1, ops(ids), "3 IDs > 2 rows: one op more than for 2")
		})
	}
}

// dynamicPair is a world of 2 ranks (one node) holding one hash-sharded dynamic table "d" of width 2
// read by feature "f", with n IDs rank 0 owns; the collections close when the test ends.
func dynamicPair(t *testing.T, cfg dynamic.Config, opt embedding.OptimizerConfig, n int) (*testWorld, []int64) {
	t.Helper()
	topo, err := NewTopology(1, 2, 2)
	require.NoError(t, err)
	var ids []int64
	for id := int64(1); len(ids) < n; id++ {
		if HashOwner(id, 2) == 0 {
			ids = append(ids, id)
		}
	}
	w := &testWorld{topo: topo}
	for r := range 2 {
		b, err := dynamic.NewBuilder(cfg)
		require.NoError(t, err)
		l, err := NewDynamicLayout("d", 2, Hash, 0, 2, b)
		require.NoError(t, err)
		c, err := NewCollection([]*Layout{l}, topo, r, Flat, opt, []embedding.Feature{{Name: "f", Table: 0}})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		w.ranks = append(w.ranks, c)
	}
	return w, ids
}

// fromRank1 is a batch function in which rank 1 asks for vals (rank 0's IDs: their rows and gradients
// cross the exchange) and rank 0 for nothing.
func fromRank1(vals ...int64) func(int) embedding.Batch {
	return func(r int) embedding.Batch {
		if r == 0 {
			return embedding.Batch{KeyFeature: []int64{0}, Lengths: []int64{0}}
		}
		return embedding.Batch{KeyFeature: []int64{0}, Values: vals, Lengths: []int64{int64(len(vals))}}
	}
}
