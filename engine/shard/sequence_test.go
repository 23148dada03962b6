package shard

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/stretchr/testify/require"
)

// The sharded sequence step equals embedding's SequenceCollection on the whole global batch: one row
// per lookup, and every table row after three fused updates, for every sharding kind, both exchange
// modes and two optimizers (several features share table 0).
func TestShardedSequenceStepsMatchOneCollection(t *testing.T) {
	opts := []embedding.OptimizerConfig{
		{Kind: embedding.OptSGD, LR: 0.1},
		{Kind: embedding.OptAdagrad, LR: 0.1, Eps: 1e-8},
	}
	kinds, rows, dims := mixedKinds, mixedRows, mixedDims
	for _, sh := range []shape{{2, 2}, {1, 2}} {
		for _, mode := range []Mode{Flat, Hierarchical} {
			for _, opt := range opts {
				t.Run(fmt.Sprintf("%dx%d/%s/%s", sh.nodes, sh.per, mode, opt.Kind), func(t *testing.T) {
					w := newTestWorld(t, sh.nodes, sh.per, mode, kinds, rows, dims, opt)
					checkSequenceSteps(t, w, rows, 5)
				})
			}
		}
	}
	// ~1,000 lookups per key and rank: Gather's work items split each key's rows
	t.Run("1x2/flat/sgd/long", func(t *testing.T) {
		checkSequenceSteps(t, newTestWorld(t, 1, 2, Flat, kinds, rows, dims, opts[0]), rows, 700)
	})
	// gradient division: the ranks' BackwardScaled(g, 1/4) equals the reference's backward of g/4
	// (SGD: Adagrad's first steps barely depend on the gradient's scale)
	t.Run("2x2/hierarchical/sgd/scaled", func(t *testing.T) {
		w := newTestWorld(t, 2, 2, Hierarchical, kinds, rows, dims, opts[0])
		w.gradScale = 0.25
		checkSequenceSteps(t, w, rows, 5)
	})
}

func checkSequenceSteps(t *testing.T, w *testWorld, rows []int64, Bl int) {
	feats := make([]embedding.Feature, len(rows))
	for i := range feats {
		feats[i] = embedding.Feature{Name: fmt.Sprintf("s%d", i), Table: i}
	}
	ref, err := embedding.NewSequenceCollection(w.ref, feats)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	W := w.topo.World()
	for step := 0; step < 3; step++ {
		_, lens, vals := randBatch(rng, len(rows), W*Bl, rows)
		whole := sliceBatch(lens, vals, 0, W*Bl)
		sizes, err := ref.OutputSizes(whole)
		require.NoError(t, err)
		refOuts := make([][]float32, len(sizes))
		for k, n := range sizes {
			refOuts[k] = make([]float32, n)
		}
		ctx, err := ref.Forward(whole, refOuts, true, true)
		require.NoError(t, err)
		refGrads := make([][]float32, len(sizes))
		for k := range refGrads {
			refGrads[k] = make([]float32, len(refOuts[k]))
			for i := range refGrads[k] {
				refGrads[k][i] = rng.Float32() - 0.5
			}
		}
		steps := make([]*SequenceStep, W)
		xs := make([]*Exchange, W)
		for r := range w.ranks {
			steps[r], err = w.ranks[r].BeginSequence(sliceBatch(lens, vals, r*Bl, (r+1)*Bl))
			require.NoError(t, err)
			xs[r] = steps[r].Step.X
		}
		runLockstep(t, w.topo, xs)
		done := make([]int, len(sizes)) // per key: values of the ranks before
		for r, q := range steps {
			out := make([]float32, q.OutputLen())
			require.NoError(t, q.Gather(out))
			grad := make([]float32, len(out))
			for k := range sizes {
				off, n := q.KeyOutput(k)
				d := dims(w, k)
				// Step 0 is exact; later the reference's SGD (applied per lookup, unmerged) rounds differently.
				require.InDeltaSlice(t, refOuts[k][done[k]:done[k]+n*d], out[off:off+n*d], 1e-6, "rows, rank %d key %d step %d", r, k, step)
				if step == 0 {
					require.Equal(t, refOuts[k][done[k]:done[k]+n*d], out[off:off+n*d])
				}
				copy(grad[off:off+n*d], refGrads[k][done[k]:done[k]+n*d])
				done[k] += n * d
			}
			require.NoError(t, q.BackwardScaled(grad, w.scale(), true))
		}
		runLockstep(t, w.topo, xs)
		flat := []float32{}
		for _, g := range refGrads {
			flat = append(flat, g...)
		}
		flat = w.scaled(flat)
		gr, err := ref.GradRows(whole)
		require.NoError(t, err)
		flat = append(flat, make([]float32, gr*ref.Width()-len(flat))...)
		require.NoError(t, ref.Backward(ctx, flat, nil, nil))
		for i := range rows {
			for id := int64(0); id < rows[i]; id++ {
				require.InDeltaSlice(t, w.ref.Tables[i].Row(id), w.globalRow(i, id), 1e-5, "table %d row %d step %d", i, id, step)
			}
		}
	}
}

func dims(w *testWorld, k int) int { return w.ranks[0].Layouts[k].Dim }

func TestSequenceStepRefusesMisuse(t *testing.T) {
	w := newTestWorld(t, 1, 1, Flat, []Kind{Hash}, []int64{10}, []int{4}, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
	c := w.ranks[0]
	_, err := c.BeginSequence(embedding.Batch{KeyFeature: []int64{0}, Values: []int64{3, 10}, Lengths: []int64{2}})
	require.ErrorContains(t, err, "10")
	_, err = c.BeginSequence(embedding.Batch{KeyFeature: []int64{0}, Values: []int64{3}, Lengths: []int64{2}})
	require.Error(t, err)
	q, err := c.BeginSequence(embedding.Batch{KeyFeature: []int64{0}, Values: []int64{3, 3, 1}, Lengths: []int64{2, 1}})
	require.NoError(t, err)
	require.Equal(t, 12, q.OutputLen())
	require.ErrorContains(t, q.Backward(make([]float32, 12), true), "did not finish")
	require.ErrorContains(t, q.Gather(make([]float32, 12)), "not finished")
	runLockstep(t, w.topo, []*Exchange{q.Step.X})
	require.ErrorContains(t, q.Gather(make([]float32, 11)), "need 12")
	out := make([]float32, 12)
	require.NoError(t, q.Gather(out))
	require.Equal(t, out[0:4], out[4:8])
	require.ErrorContains(t, q.Gather(out), "not finished")
	require.ErrorContains(t, q.Backward(make([]float32, 5), true), "need 12")
	require.NoError(t, q.Backward([]float32{1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0}, true))
	runLockstep(t, w.topo, []*Exchange{q.Step.X})
	row := w.globalRow(0, 3)
	want := append([]float32(nil), w.ref.Tables[0].Row(3)...)
	for i := range want {
		want[i] -= 0.1 * 3
	}
	require.InDeltaSlice(t, want, row, 1e-6)
}

// FuzzBeginSequence: any batch either starts a step whose output covers every lookup, or is
// refused with an error; never a panic.
func FuzzBeginSequence(f *testing.F) {
	f.Add([]byte{0, 1}, []byte{2, 1, 0, 1}, []byte{1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, rawKeys, rawLens, rawVals []byte) {
		topo, _ := NewTopology(1, 1, 1)
		var ls []*Layout
		for i, n := range []int64{5, 9} {
			l, _ := NewLayout(fmt.Sprintf("t%d", i), n, 2+i, Hash, 0, 1)
			ls = append(ls, l)
		}
		feats := []embedding.Feature{{Name: "a", Table: 0}, {Name: "b", Table: 1}, {Name: "c", Table: 0}}
		c, err := NewCollection(ls, topo, 0, Flat, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}, feats)
		require.NoError(t, err)
		defer c.Close()
		var b embedding.Batch
		for _, k := range rawKeys {
			b.KeyFeature = append(b.KeyFeature, int64(k%5)-1)
		}
		for _, l := range rawLens {
			b.Lengths = append(b.Lengths, int64(l%4))
		}
		for _, v := range rawVals {
			b.Values = append(b.Values, int64(v%12))
		}
		q, err := c.BeginSequence(b)
		if err != nil {
			return
		}
		for op, err := q.Step.X.Next(); op != nil || err != nil; op, err = q.Step.X.Next() {
			require.NoError(t, err)
			sendF, err := op.Floats(nil)
			require.NoError(t, err)
			require.NoError(t, q.Step.X.Feed(op.SendI, sendF, op.SendB))
		}
		out := make([]float32, q.OutputLen())
		require.NoError(t, q.Gather(out))
		n := 0
		for k := range b.KeyFeature {
			_, lookups := q.KeyOutput(k)
			n += lookups
		}
		require.LessOrEqual(t, n, len(b.Values))
	})
}

// Sequence steps begun concurrently on every rank (with a pooled step among them) coexist: run one
// after the other, each returns the rows of its own batch.
func TestSequenceStepsBegunConcurrently(t *testing.T) {
	kinds := []Kind{Hash, TableWise}
	rows := []int64{40, 25}
	w := newTestWorld(t, 1, 2, Flat, kinds, rows, []int{4, 3}, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
	const n = 4
	rng := rand.New(rand.NewPCG(9, 9))
	type batch struct{ lens, vals [][]int64 }
	batches := make([]batch, n)
	for i := range batches {
		_, l, v := randBatch(rng, len(kinds), 2*3, rows)
		batches[i] = batch{l, v}
	}
	steps := make([][]*SequenceStep, n) // [batch][rank]
	pooled := make([]*Step, 2)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n+2)
	for i := range steps {
		steps[i] = make([]*SequenceStep, 2)
		for r := range w.ranks {
			wg.Add(1)
			go func(i, r int) {
				defer wg.Done()
				q, err := w.ranks[r].BeginSequence(sliceBatch(batches[i].lens, batches[i].vals, r*3, (r+1)*3))
				steps[i][r] = q
				errs <- err
			}(i, r)
		}
	}
	for r := range w.ranks {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			s, err := w.ranks[r].Begin(sliceBatch(batches[0].lens, batches[0].vals, r*3, (r+1)*3))
			pooled[r] = s
			errs <- err
		}(r)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range steps {
		runLockstep(t, w.topo, []*Exchange{steps[i][0].Step.X, steps[i][1].Step.X})
		for r, q := range steps[i] {
			out := make([]float32, q.OutputLen())
			require.NoError(t, q.Gather(out))
			b := sliceBatch(batches[i].lens, batches[i].vals, r*3, (r+1)*3)
			var pos int64
			for k := range b.KeyFeature {
				off, m := q.KeyOutput(k)
				d := w.ranks[0].Layouts[k].Dim
				for j := 0; j < m; j++ {
					require.Equal(t, w.globalRow(k, b.Values[pos+int64(j)]), out[off+j*d:off+(j+1)*d], "batch %d rank %d key %d", i, r, k)
				}
				pos += int64(m)
			}
		}
	}
	runLockstep(t, w.topo, []*Exchange{pooled[0].X, pooled[1].X})
	for r := range pooled {
		require.NoError(t, pooled[r].Pool(make([]float32, 3*w.ranks[r].Width())))
	}
}

// A table no rank marks used takes no step on any rank (AdamW's decay would shrink its rows); one
// that a single rank uses (another node, another rail in 2×2) is stepped on every rank, replicas
// included. The ranks learn it from the backward's sync ops, in both exchange modes.
func TestBackwardSomeSkipsOnlyTablesNoRankUsed(t *testing.T) {
	opt := embedding.OptimizerConfig{Kind: embedding.OptAdamW, LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.5}
	for _, mode := range []Mode{Flat, Hierarchical} {
		t.Run(mode.String(), func(t *testing.T) {
			w := newTestWorld(t, 2, 2, mode, mixedKinds, mixedRows, mixedDims, opt)
			W, T := w.topo.World(), len(mixedKinds)
			// table 0: no rank uses it; table 1: rank 3 alone; table 3 (data-parallel): rank 0 alone;
			// table 2: every rank
			unused := func(r int) []bool { return []bool{true, r != 3, false, r != 0} }
			before := make([][]float32, T)
			for i := range T {
				for id := int64(0); id < mixedRows[i]; id++ {
					before[i] = append(before[i], w.globalRow(i, id)...)
				}
			}
			rng := rand.New(rand.NewPCG(5, 6))
			_, lens, vals := randBatch(rng, T, W*4, mixedRows)
			steps := make([]*SequenceStep, W)
			xs := make([]*Exchange, W)
			for r := range W {
				var err error
				steps[r], err = w.ranks[r].BeginSequence(sliceBatch(lens, vals, r*4, (r+1)*4))
				require.NoError(t, err)
				xs[r] = steps[r].Step.X
			}
			runLockstep(t, w.topo, xs)
			for r, q := range steps {
				out := make([]float32, q.OutputLen())
				require.NoError(t, q.Gather(out))
				grad := make([]float32, len(out))
				for k := range T {
					if !unused(r)[k] {
						off, n := q.KeyOutput(k)
						copy(grad[off:off+n*mixedDims[k]], randGrad(rng, n*mixedDims[k]))
					}
				}
				require.ErrorContains(t, q.BackwardSome(grad, 1, true, Skip{Unused: []bool{true}}), "1 unused-table flags for 4")
				require.NoError(t, q.BackwardSome(grad, 1, true, Skip{Unused: unused(r)}))
			}
			runLockstep(t, w.topo, xs)
			for r, q := range steps {
				skipped, err := q.Step.Skipped()
				require.NoError(t, err)
				require.Equal(t, []bool{true, false, false, false}, skipped, "rank %d", r)
			}
			for i := range T {
				var after []float32
				for id := int64(0); id < mixedRows[i]; id++ {
					after = append(after, w.globalRow(i, id)...)
				}
				if i == 0 {
					require.Equal(t, before[i], after, "table 0 took a step")
				} else {
					require.NotEqual(t, before[i], after, "table %d took no step", i)
				}
			}
			for r := 1; r < W; r++ { // the replicas stayed identical
				require.Equal(t, w.ranks[0].Shards[3].Data, w.ranks[r].Shards[3].Data)
			}
		})
	}
}
