package shard

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/embedding"
)

// pairOnce runs the next op of two ranks' exchanges against each other (a group of the two) and
// returns what each Feed said. The ops must have the same element type and size: that is what keeps
// gloo from aborting the process before the headers are read.
func pairOnce(t *testing.T, xs [2]*Exchange) [2]error {
	t.Helper()
	var ops [2]*Op
	for r, x := range xs {
		op, err := x.Next()
		require.NoError(t, err)
		require.NotNil(t, op)
		require.Len(t, op.SendSplits, 2)
		ops[r] = op
	}
	require.Equal(t, ElemInt64, ops[0].Elem)
	require.Equal(t, ops[0].Elem, ops[1].Elem)
	require.Equal(t, ops[0].SendSplits, ops[1].SendSplits, "the first op of a drive has one size whatever the phase")
	var out [2]error
	for r := range xs {
		var recv []int64
		for q := range xs {
			lo := ops[q].SendSplits[0] * int64(r)
			recv = append(recv, ops[q].SendI[lo:lo+ops[q].SendSplits[r]]...)
		}
		out[r] = xs[r].Feed(recv, nil, nil)
	}
	return out
}

// A rank that skips a step's backward meets its peer's backward with its next forward: on every route
// (the first collective on a leg's group or the second leg's, when the first is the rank alone) both
// ranks raise, naming the phases and steps, instead of exchanging buffers of different sizes.
func TestRanksOutOfStepRaiseOnBothSides(t *testing.T) {
	kinds, rows, dims := []Kind{Hash, TableWise}, []int64{50, 30}, []int{4, 8}
	opt := embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}
	for _, tc := range []struct {
		name       string
		nodes, per int
		mode       Mode
	}{{"flat", 1, 2, Flat}, {"hierarchical/one node", 1, 2, Hierarchical}, {"hierarchical/two nodes", 2, 1, Hierarchical}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWorld(t, tc.nodes, tc.per, tc.mode, kinds, rows, dims, opt)
			rng := rand.New(rand.NewPCG(3, 4))
			_, lens, vals := randBatch(rng, len(kinds), 4, rows)
			var first [2]*Step
			for r := range first {
				var err error
				first[r], err = w.ranks[r].Begin(sliceBatch(lens, vals, r*2, (r+1)*2))
				require.NoError(t, err)
			}
			runLockstep(t, w.topo, []*Exchange{first[0].X, first[1].X})
			for r, s := range first {
				require.NoError(t, s.Pool(make([]float32, 2*w.ranks[r].Width())))
			}
			// rank 0 goes on to its next forward; rank 1 runs the first step's backward
			next, err := w.ranks[0].Begin(sliceBatch(lens, vals, 0, 2))
			require.NoError(t, err)
			require.NoError(t, first[1].Backward(make([]float32, 2*w.ranks[1].Width()), true))
			errs := pairOnce(t, [2]*Exchange{next.X, first[1].X})
			require.ErrorContains(t, errs[0], "rank 1 is at the backward of step 1 while rank 0 is at the forward of step 2")
			require.ErrorContains(t, errs[1], "rank 0 is at the forward of step 2 while rank 1 is at the backward of step 1")
		})
	}
}

// A rank whose learning-rate schedule changed the fused optimizer differently meets its peer's next
// forward with another fingerprint: both raise, naming it, before either updates a row at its rate
// (they trained on, each owner and replica at its own rate).
func TestRanksWithDifferentOptimizersRaiseOnBothSides(t *testing.T) {
	kinds, rows, dims := []Kind{Hash, DataParallel}, []int64{50, 30}, []int{4, 8}
	opt := embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}
	w := newTestWorld(t, 1, 2, Flat, kinds, rows, dims, opt)
	require.NoError(t, w.ranks[1].SetOptimizer(embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.7}))
	rng := rand.New(rand.NewPCG(5, 6))
	_, lens, vals := randBatch(rng, len(kinds), 4, rows)
	var steps [2]*Exchange
	for r := range steps {
		s, err := w.ranks[r].Begin(sliceBatch(lens, vals, r*2, (r+1)*2))
		require.NoError(t, err)
		steps[r] = s.X
	}
	errs := pairOnce(t, steps)
	require.ErrorContains(t, errs[0], "rank 1's fused optimizer hyper-parameters differ from rank 0's at step 1")
	require.ErrorContains(t, errs[1], "rank 0's fused optimizer hyper-parameters differ from rank 1's at step 1")
	// the same change on both ranks: in step again
	require.NoError(t, w.ranks[0].SetOptimizer(embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.7}))
	for r := range steps {
		s, err := w.ranks[r].Begin(sliceBatch(lens, vals, r*2, (r+1)*2))
		require.NoError(t, err)
		steps[r] = s.X
	}
	runLockstep(t, w.topo, []*Exchange{steps[0], steps[1]})
}

// A rank in eval() mode beside a training peer: both raise at the step's first op, naming the modes
// (the evaluating rank's dynamic shards admitted none of the IDs the training one's admitted, and
// their clocks parted, silently), and steps in one mode pair up again, in either mode.
func TestRanksInDifferentModesRaiseOnBothSides(t *testing.T) {
	kinds, rows, dims := []Kind{Hash, RowWise}, []int64{50, 30}, []int{4, 8}
	opt := embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}
	for _, tc := range []struct {
		name       string
		nodes, per int
		mode       Mode
	}{{"flat", 1, 2, Flat}, {"hierarchical/two nodes", 2, 1, Hierarchical}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWorld(t, tc.nodes, tc.per, tc.mode, kinds, rows, dims, opt)
			rng := rand.New(rand.NewPCG(7, 8))
			_, lens, vals := randBatch(rng, len(kinds), 4, rows)
			begin := func() [2]*Exchange {
				var xs [2]*Exchange
				for r := range xs {
					s, err := w.ranks[r].Begin(sliceBatch(lens, vals, r*2, (r+1)*2))
					require.NoError(t, err)
					xs[r] = s.X
				}
				return xs
			}
			w.ranks[1].SetTraining(false)
			errs := pairOnce(t, begin())
			require.ErrorContains(t, errs[0], "rank 1 runs step 1 as an evaluation (eval()) step while rank 0 runs it as a training step")
			require.ErrorContains(t, errs[1], "rank 0 runs step 1 as a training step while rank 1 runs it as an evaluation (eval()) step")
			w.ranks[0].SetTraining(false)
			xs := begin()
			runLockstep(t, w.topo, xs[:])
			w.ranks[0].SetTraining(true)
			w.ranks[1].SetTraining(true)
			xs = begin()
			runLockstep(t, w.topo, xs[:])
		})
	}
}

// A rank whose per-ID weights require grad runs a sequence step where its peer runs a pooled one
// (the Python side's rows step): both raise, naming the cause, and the next steps pair up.
func TestPooledAndSequenceStepsOfOneCollectionRaiseOnBothSides(t *testing.T) {
	w := newTestWorld(t, 1, 2, Flat, []Kind{Hash}, []int64{50}, []int{4}, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
	rng := rand.New(rand.NewPCG(3, 4))
	_, lens, vals := randBatch(rng, 1, 4, []int64{50})
	pooled, err := w.ranks[0].Begin(sliceBatch(lens, vals, 0, 2))
	require.NoError(t, err)
	seq, err := w.ranks[1].BeginSequence(sliceBatch(lens, vals, 2, 4))
	require.NoError(t, err)
	errs := pairOnce(t, [2]*Exchange{pooled.X, seq.Step.X})
	require.ErrorContains(t, errs[0], "rank 1 runs a step of rows per lookup")
	require.ErrorContains(t, errs[1], "rank 0 runs a step of rows per lookup")
	require.ErrorContains(t, errs[1], "per-ID weights must require grad alike")
	var steps [2]*Exchange
	for r := range steps {
		s, err := w.ranks[r].Begin(sliceBatch(lens, vals, r*2, (r+1)*2))
		require.NoError(t, err)
		steps[r] = s.X
	}
	runLockstep(t, w.topo, []*Exchange{steps[0], steps[1]})
}

// Two collections share their groups. A rank that runs the other collection's step than its peer
// meets it, with every collection's first ops sized for the most tables among them (SetPadTables), in
// an op of one size: both raise, naming the mismatch (unpadded, one table against two, gloo aborted
// the process on the sizes; with equal sizes the rows of the other collection came back). Padded, the
// steps of each collection still match the unsharded collection.
func TestCollectionsCalledOutOfOrderRaiseOnBothSides(t *testing.T) {
	opt := embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}
	for _, mode := range []Mode{Flat, Hierarchical} {
		t.Run(mode.String(), func(t *testing.T) {
			a := newTestWorld(t, 1, 2, mode, []Kind{Hash}, []int64{50}, []int{4}, opt)
			b := newTestWorld(t, 1, 2, mode, []Kind{Hash, RowWise}, []int64{40, 30}, []int{4, 8}, opt)
			for _, w := range []*testWorld{a, b} {
				for _, c := range w.ranks {
					require.NoError(t, c.SetPadTables(2))
				}
			}
			rng := rand.New(rand.NewPCG(7, 8))
			_, lensA, valsA := randBatch(rng, 1, 4, []int64{50})
			_, lensB, valsB := randBatch(rng, 2, 4, []int64{40, 30})
			sa, err := a.ranks[0].Begin(sliceBatch(lensA, valsA, 0, 2))
			require.NoError(t, err)
			sb, err := b.ranks[1].Begin(sliceBatch(lensB, valsB, 2, 4))
			require.NoError(t, err)
			errs := pairOnce(t, [2]*Exchange{sa.X, sb.X})
			require.ErrorContains(t, errs[0], "rank 1 is running another sharded collection's step (its forward of step 1)")
			require.ErrorContains(t, errs[1], "rank 0 is running another sharded collection's step")
			require.ErrorContains(t, errs[1], "of the collection of tables [t0 t1]")
			// in order, padded past its tables: a collection's steps are the unsharded collection's
			fresh := newTestWorld(t, 1, 2, mode, mixedKinds, mixedRows, mixedDims, opt)
			for _, c := range fresh.ranks {
				require.NoError(t, c.SetPadTables(len(mixedKinds)+3))
			}
			checkSteps(t, fresh, mixedKinds, mixedRows, false)
		})
	}
	require.Error(t, (&Collection{}).SetPadTables(-1))
}

// Frozen tables take no step on any rank, the others train as ever (AdamW's decay would shrink a
// frozen table's rows; a data-parallel replica must stay put too). A table one rank froze and its
// peer did not makes both raise in the backward's first op, naming it, before any row moves.
func TestFrozenTablesTakeNoStepAndMustAgree(t *testing.T) {
	opt := embedding.OptimizerConfig{Kind: embedding.OptAdamW, LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.5}
	for _, mode := range []Mode{Flat, Hierarchical} {
		t.Run(mode.String(), func(t *testing.T) {
			w := newTestWorld(t, 1, 2, mode, mixedKinds, mixedRows, mixedDims, opt)
			T := len(mixedKinds)
			frozen := []bool{true, false, false, true} // a hash table and the data-parallel one
			rows := func() [][]float32 {
				out := make([][]float32, T)
				for i := range T {
					for id := int64(0); id < mixedRows[i]; id++ {
						out[i] = append(out[i], w.globalRow(i, id)...)
					}
				}
				return out
			}
			rng := rand.New(rand.NewPCG(9, 10))
			_, lens, vals := randBatch(rng, T, 8, mixedRows)
			step := func(frozenOn func(r int) []bool) ([2]*Step, [2]*Exchange) {
				var steps [2]*Step
				var xs [2]*Exchange
				for r := range steps {
					s, err := w.ranks[r].Begin(sliceBatch(lens, vals, r*4, (r+1)*4))
					require.NoError(t, err)
					steps[r], xs[r] = s, s.X
				}
				runLockstep(t, w.topo, xs[:])
				for r, s := range steps {
					width := w.ranks[r].Width()
					require.NoError(t, s.Pool(make([]float32, 4*width)))
					require.ErrorContains(t, s.BackwardSome(randGrad(rng, 4*width), 1, true, []bool{true}),
						"1 frozen-table flags for 4 tables")
					require.NoError(t, s.BackwardSome(randGrad(rng, 4*width), 1, true, frozenOn(r)))
				}
				return steps, xs
			}
			before := rows()
			steps, xs := step(func(int) []bool { return frozen })
			runLockstep(t, w.topo, xs[:])
			after := rows()
			for i := range T {
				if frozen[i] {
					require.Equal(t, before[i], after[i], "frozen table %d took a step", i)
				} else {
					require.NotEqual(t, before[i], after[i], "table %d took no step", i)
				}
			}
			for r, s := range steps {
				skipped, err := s.Skipped()
				require.NoError(t, err)
				require.Equal(t, frozen, skipped, "rank %d", r)
			}
			require.Equal(t, w.ranks[0].Shards[3].Data, w.ranks[1].Shards[3].Data)
			// rank 1 froze table 2 as well: both raise in the backward's first op
			_, xs = step(func(r int) []bool { return []bool{true, false, r == 1, true} })
			errs := pairOnce(t, xs)
			require.ErrorContains(t, errs[0], `table "t2" is frozen (requires_grad=False) on rank 1 but not on rank 0`)
			require.ErrorContains(t, errs[1], `table "t2" is frozen (requires_grad=False) on rank 1 but not on rank 0`)
			require.Equal(t, after, rows(), "a refused backward moved rows")
		})
	}
}
