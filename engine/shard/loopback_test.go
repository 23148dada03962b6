package shard

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/stretchr/testify/require"
)

// runLockstep drives the exchanges of every rank of topo together, moving each op's buffers as
// all_to_all_single would on the op's group (the ranks emit the same op sequence), each float send
// written into a buffer of the caller's as the C ABI's is; it returns the bytes the ranks sent to
// other ranks. Each inspect function sees every rank's op before it moves.
func runLockstep(t *testing.T, topo Topology, xs []*Exchange, inspect ...func(rank int, op *Op)) int64 {
	t.Helper()
	return lockstep(t, topo, xs, nil, inspect...)
}

// runLockstepErrors is runLockstep returning each rank's error instead of failing on it (a rank
// whose exchange failed has no ops left; the others must fail at the same op).
func runLockstepErrors(t *testing.T, topo Topology, xs []*Exchange) []error {
	t.Helper()
	failed := make([]error, topo.World())
	lockstep(t, topo, xs, failed)
	return failed
}

// lockstep is runLockstep, recording the ranks' errors in failed when it is not nil.
func lockstep(t *testing.T, topo Topology, xs []*Exchange, failed []error, inspect ...func(rank int, op *Op)) int64 {
	t.Helper()
	W := topo.World()
	var sent int64
	for {
		ops := make([]*Op, W)
		done := 0
		for r, x := range xs {
			op, err := x.Next()
			if failed != nil && err != nil {
				failed[r] = err
			} else {
				require.NoError(t, err)
			}
			ops[r] = op
			if op == nil {
				done++
			}
		}
		if done == W {
			return sent
		}
		require.Zero(t, done, "ranks disagree on the op sequence")
		members := func(r int, g Group) []int {
			var out []int
			for q := 0; q < W; q++ {
				switch g {
				case GroupWorld:
					out = append(out, q)
				case GroupNode:
					if topo.Node(q) == topo.Node(r) {
						out = append(out, q)
					}
				case GroupRail:
					if topo.Local(q) == topo.Local(r) {
						out = append(out, q)
					}
				}
			}
			return out
		}
		for r, op := range ops {
			for _, f := range inspect {
				f(r, op)
			}
		}
		sendFs := make([][]float32, W) // float sends written as the C ABI writes them: into the caller's buffer
		for r, op := range ops {
			if op.Elem == ElemFloat32 {
				sendFs[r] = make([]float32, op.SendLen())
				require.NoError(t, op.WriteFloats(sendFs[r]))
			}
		}
		recvIs, recvFs, recvBs := make([][]int64, W), make([][]float32, W), make([][]byte, W)
		for r, op := range ops {
			m := members(r, op.Group)
			var recvI []int64
			var recvF []float32
			var recvB []byte
			for _, q := range m { // what q sends to r: q's block at r's index in the group
				var idx int
				for i, v := range members(q, op.Group) {
					if v == r {
						idx = i
					}
				}
				qo := ops[q]
				var lo int64
				for i := 0; i < idx; i++ {
					lo += qo.SendSplits[i]
				}
				hi := lo + qo.SendSplits[idx]
				if q != r {
					sent += (hi - lo) * int64([]int{8, 4, 1}[qo.Elem])
				}
				require.Equal(t, op.Elem, qo.Elem, "ranks disagree on the op's element type")
				switch op.Elem {
				case ElemFloat32:
					recvF = append(recvF, sendFs[q][lo:hi]...)
				case ElemByte:
					recvB = append(recvB, qo.SendB[lo:hi]...)
				default:
					recvI = append(recvI, qo.SendI[lo:hi]...)
				}
			}
			if op.Elem == ElemFloat32 && recvF == nil {
				recvF = []float32{}
			}
			if op.Elem == ElemByte && recvB == nil {
				recvB = []byte{}
			}
			recvIs[r], recvFs[r], recvBs[r] = recvI, recvF, recvB
		}
		for r := range ops { // feeding recycles the send buffers: only once every rank has received
			if err := xs[r].Feed(recvIs[r], recvFs[r], recvBs[r]); failed != nil && err != nil {
				failed[r] = err
			} else {
				require.NoError(t, err, "rank %d", r)
			}
		}
	}
}

type testWorld struct {
	topo  Topology
	ranks []*Collection
	ref   *embedding.Collection
	// gradScale, when set, is the ranks' BackwardScaled factor; the reference gets the gradient
	// times it
	gradScale float32
	// ignoredKey puts a key no table reads in front of the ranks' batches (out-of-range IDs: they
	// must never be looked at)
	ignoredKey bool
}

// withIgnoredKey returns b (B samples) with a first key that no feature reads, one huge ID per bag.
func withIgnoredKey(b embedding.Batch, B int) embedding.Batch {
	out := embedding.Batch{KeyFeature: append([]int64{embedding.IgnoredKey}, b.KeyFeature...)}
	for range B {
		out.Lengths = append(out.Lengths, 1)
		out.Values = append(out.Values, 1<<40)
	}
	out.Lengths = append(out.Lengths, b.Lengths...)
	out.Values = append(out.Values, b.Values...)
	if b.Weights != nil {
		out.Weights = append(make([]float32, B), b.Weights...)
	}
	return out
}

// scale is the ranks' gradient scale (1 when unset).
func (w *testWorld) scale() float32 {
	if w.gradScale == 0 {
		return 1
	}
	return w.gradScale
}

// scaled returns g times the world's gradient scale (a copy when it is set).
func (w *testWorld) scaled(g []float32) []float32 {
	if w.gradScale == 0 {
		return g
	}
	out := make([]float32, len(g))
	for i, v := range g {
		out[i] = v * w.gradScale
	}
	return out
}

// The world most lockstep tests share: one table of each sharding kind (rows and dims per table),
// and shape, a topology of nodes × ranks per node.
var (
	mixedKinds = []Kind{Hash, TableWise, RowWise, DataParallel}
	mixedRows  = []int64{50, 30, 41, 7}
	mixedDims  = []int{4, 8, 3, 5}
)

type shape struct{ nodes, per int }

func newTestWorld(t *testing.T, nodes, per int, mode Mode, kinds []Kind, rows []int64, dims []int, opt embedding.OptimizerConfig) *testWorld {
	return newSplitWorld(t, nodes, per, mode, kinds, rows, dims, opt, nil)
}

// newSplitWorld is newTestWorld whose row-wise table i splits its rows as splits[i] says (nil
// splits, or a nil entry: evenly).
func newSplitWorld(t *testing.T, nodes, per int, mode Mode, kinds []Kind, rows []int64, dims []int, opt embedding.OptimizerConfig,
	splits [][]int64) *testWorld {
	topo, err := NewTopology(nodes, per, nodes*per)
	require.NoError(t, err)
	var feats []embedding.Feature
	var refTables []*embedding.Table
	for i := range kinds {
		feats = append(feats, embedding.Feature{Name: fmt.Sprintf("f%d", i), Table: i, Pooling: embedding.Pooling(i % 2)})
		tb, err := embedding.NewFixedTable(fmt.Sprintf("t%d", i), rows[i], dims[i], opt)
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		for j := range tb.Data {
			tb.Data[j] = rng.Float32() - 0.5
		}
		refTables = append(refTables, tb)
	}
	ref, err := embedding.NewCollection(refTables, feats)
	require.NoError(t, err)
	w := &testWorld{topo: topo, ref: ref}
	for r := 0; r < topo.World(); r++ {
		var ls []*Layout
		for i, k := range kinds {
			l, err := NewLayout(fmt.Sprintf("t%d", i), rows[i], dims[i], k, i%topo.World(), topo.World())
			if k == RowWise && splits != nil {
				l, err = NewRowWiseLayout(fmt.Sprintf("t%d", i), rows[i], dims[i], topo.World(), splits[i])
			}
			require.NoError(t, err)
			ls = append(ls, l)
		}
		c, err := NewCollection(ls, topo, r, mode, opt, feats)
		require.NoError(t, err)
		for i, l := range ls {
			for j, id := range l.LocalIDs(r) {
				copy(c.Shards[i].Row(int64(j)), refTables[i].Row(id))
			}
		}
		w.ranks = append(w.ranks, c)
	}
	return w
}

// globalRow reads table i's row id from whichever rank owns it (rank 0 for replicas).
func (w *testWorld) globalRow(i int, id int64) []float32 {
	o, r := w.ranks[0].Layouts[i].Owner(id, 0)
	return w.ranks[o].Shards[i].Row(r)
}

func randBatch(rng *rand.Rand, F, B int, rows []int64) (embedding.Batch, [][]int64, [][]int64) {
	lens := make([][]int64, F)
	vals := make([][]int64, F)
	for f := 0; f < F; f++ {
		for b := 0; b < B; b++ {
			n := rng.IntN(4)
			lens[f] = append(lens[f], int64(n))
			for j := 0; j < n; j++ {
				vals[f] = append(vals[f], rng.Int64N(rows[f]))
			}
		}
	}
	return embedding.Batch{}, lens, vals
}

// sliceBatch builds the KJT of samples [b0, b1) from per-feature lengths and values (weighted:
// per-ID weights derived from the ID and position, the same for every slicing).
func sliceBatch(lens, vals [][]int64, b0, b1 int, weighted ...bool) embedding.Batch {
	var b embedding.Batch
	if len(weighted) > 0 && weighted[0] {
		b.Weights = []float32{}
	}
	for f := range lens {
		b.KeyFeature = append(b.KeyFeature, int64(f))
		var skip int64
		for _, n := range lens[f][:b0] {
			skip += n
		}
		var take int64
		for _, n := range lens[f][b0:b1] {
			take += n
		}
		b.Lengths = append(b.Lengths, lens[f][b0:b1]...)
		b.Values = append(b.Values, vals[f][skip:skip+take]...)
		if b.Weights != nil {
			for j := skip; j < skip+take; j++ {
				b.Weights = append(b.Weights, 0.5+float32((vals[f][j]*7+j)%5)/4)
			}
		}
	}
	return b
}

func TestShardedStepsMatchOneCollection(t *testing.T) {
	opts := []embedding.OptimizerConfig{
		{Kind: embedding.OptSGD, LR: 0.1},
		{Kind: embedding.OptRowwiseAdagrad, LR: 0.1, Eps: 1e-8},
		{Kind: embedding.OptAdam, LR: 0.01, Eps: 1e-8, Beta1: 0.9, Beta2: 0.999},
	}
	kinds, rows, dims := mixedKinds, mixedRows, mixedDims
	for _, sh := range []shape{{2, 2}, {1, 2}} {
		for _, mode := range []Mode{Flat, Hierarchical} {
			for _, ret := range []Return{ReturnAuto, ReturnRows, ReturnPooled} {
				for oi, opt := range opts {
					weighted := oi == 1 // one optimizer runs weighted bags
					name := fmt.Sprintf("%dx%d/%s/%s/%s/weighted=%v", sh.nodes, sh.per, mode, ret, opt.Kind, weighted)
					t.Run(name, func(t *testing.T) {
						w := newTestWorld(t, sh.nodes, sh.per, mode, kinds, rows, dims, opt)
						for _, c := range w.ranks {
							require.NoError(t, c.SetReturns([]Return{ret, ret, ret, ret}))
						}
						pooled := checkSteps(t, w, kinds, rows, weighted)
						if ret == ReturnPooled && (mode == Flat || sh.nodes > 1) {
							require.Positive(t, pooled, "forced owner pooling returned no partial sums")
						}
						if ret == ReturnRows {
							require.Zero(t, pooled, "rows were asked for, partial sums came back")
						}
					})
				}
			}
		}
	}
	// gradient division: the ranks' BackwardScaled(g, 1/4) equals the reference's backward of g/4,
	// partial sums included (SGD: the adaptive optimizers barely depend on the gradient's scale)
	t.Run("2x2/flat/pooled/sgd/weighted/scaled", func(t *testing.T) {
		w := newTestWorld(t, 2, 2, Flat, kinds, rows, dims, opts[0])
		for _, c := range w.ranks {
			require.NoError(t, c.SetReturns([]Return{ReturnPooled, ReturnPooled, ReturnPooled, ReturnPooled}))
		}
		w.gradScale = 0.25
		require.Positive(t, checkSteps(t, w, kinds, rows, true))
	})
}

// TestKeysNoTableReadsAreIgnored: a batch key mapped to embedding.IgnoredKey (one KJT feeding
// several collections) changes nothing, weighted or not, whatever the exchange.
func TestKeysNoTableReadsAreIgnored(t *testing.T) {
	for _, mode := range []Mode{Flat, Hierarchical} {
		for _, weighted := range []bool{false, true} {
			t.Run(fmt.Sprintf("2x2/%s/weighted=%v", mode, weighted), func(t *testing.T) {
				w := newTestWorld(t, 2, 2, mode, mixedKinds, mixedRows, mixedDims, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
				w.ignoredKey = true
				checkSteps(t, w, mixedKinds, mixedRows, weighted)
			})
		}
	}
}

// forward begins a step on every rank of w with its batch and runs the forward exchanges.
func (w *testWorld) forward(t *testing.T, batch func(rank int) embedding.Batch) ([]*Step, []*Exchange) {
	W := len(w.ranks)
	steps, xs := make([]*Step, W), make([]*Exchange, W)
	for r, c := range w.ranks {
		var err error
		steps[r], err = c.Begin(batch(r))
		require.NoError(t, err)
		xs[r] = steps[r].X
	}
	runLockstep(t, w.topo, xs)
	return steps, xs
}

// randGrad is n values uniform in [−0.5, 0.5).
func randGrad(rng *rand.Rand, n int) []float32 {
	g := make([]float32, n)
	for i := range g {
		g[i] = rng.Float32() - 0.5
	}
	return g
}

// checkSteps runs three training steps of w against its reference collection (pooled outputs and
// every table row after the fused updates) and returns the partial sums the ranks returned.
func checkSteps(t *testing.T, w *testWorld, kinds []Kind, rows []int64, weighted bool) int64 {
	rng := rand.New(rand.NewPCG(1, 2))
	W, Bl := w.topo.World(), 6
	var pooled int64
	for step := 0; step < 3; step++ {
		_, lens, vals := randBatch(rng, len(kinds), W*Bl, rows)
		width := w.ref.Width()
		refOut := make([]float32, W*Bl*width)
		ctx, err := w.ref.Forward(sliceBatch(lens, vals, 0, W*Bl, weighted), refOut, true, true)
		require.NoError(t, err)
		steps, xs := w.forward(t, func(r int) embedding.Batch {
			b := sliceBatch(lens, vals, r*Bl, (r+1)*Bl, weighted)
			if w.ignoredKey {
				b = withIgnoredKey(b, Bl)
			}
			return b
		})
		gradOut := randGrad(rng, len(refOut))
		for r, s := range steps {
			for i := range kinds { // a table pooled from the owner's rows still hands out its rows
				if s.X.inPlace != nil && s.X.inPlace[i] != nil {
					d, got := s.X.dims[i], s.X.Rows(i)
					for u, id := range s.uniq[i] {
						require.Equal(t, w.globalRow(i, id), got[u*d:(u+1)*d], "rank %d table %d row %d", r, i, id)
					}
				}
			}
			out := make([]float32, Bl*width)
			require.NoError(t, s.Pool(out))
			require.InDeltaSlice(t, refOut[r*Bl*width:(r+1)*Bl*width], out, 1e-6, "pooled, rank %d step %d", r, step)
			require.NoError(t, s.BackwardScaled(gradOut[r*Bl*width:(r+1)*Bl*width], w.scale(), true))
		}
		runLockstep(t, w.topo, xs)
		require.NoError(t, w.ref.Backward(ctx, w.scaled(gradOut), nil, nil))
		for i := range kinds {
			for id := int64(0); id < rows[i]; id++ {
				require.InDeltaSlice(t, w.ref.Tables[i].Row(id), w.globalRow(i, id), 1e-5, "table %d row %d", i, id)
			}
		}
		var sent, got int64
		for _, s := range steps {
			for i := range kinds {
				sent += s.X.Counters.PooledVecs[i]
				got += s.X.Counters.PooledGrads[i]
			}
		}
		require.Equal(t, sent, got, "every partial sum returned gets one gradient back")
		pooled += sent
	}
	// replicas stay identical
	for r := 1; r < W; r++ {
		require.Equal(t, w.ranks[0].Shards[3].Data, w.ranks[r].Shards[3].Data)
	}
	return pooled
}

// TestAutoReturnPicksTheCheaper: with long bags over many distinct IDs the owners pool (and fewer
// bytes move than with rows); one-hot bags over a few repeated IDs come back as rows.
func TestAutoReturnPicksTheCheaper(t *testing.T) {
	const rows, dim, B = 2000, 16, 32
	topo, err := NewTopology(1, 2, 2)
	require.NoError(t, err)
	step := func(ret Return, bagLen int, span int64) (pooled, bytes int64) {
		feats := []embedding.Feature{{Name: "f", Table: 0, Pooling: embedding.PoolMean}}
		rng := rand.New(rand.NewPCG(3, 4))
		xs, cs := make([]*Exchange, 2), make([]*Collection, 2)
		for r := range cs {
			l, err := NewLayout("t", rows, dim, Hash, 0, 2)
			require.NoError(t, err)
			cs[r], err = NewCollection([]*Layout{l}, topo, r, Flat, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}, feats)
			require.NoError(t, err)
			require.NoError(t, cs[r].SetReturns([]Return{ret}))
			b := embedding.Batch{KeyFeature: []int64{0}}
			for i := 0; i < B; i++ {
				b.Lengths = append(b.Lengths, int64(bagLen))
				for j := 0; j < bagLen; j++ {
					b.Values = append(b.Values, rng.Int64N(span))
				}
			}
			s, err := cs[r].Begin(b)
			require.NoError(t, err)
			xs[r] = s.X
		}
		bytes = runLockstep(t, topo, xs)
		for _, x := range xs {
			pooled += x.Counters.PooledVecs[0]
		}
		return pooled, bytes
	}
	pooled, auto := step(ReturnAuto, 30, rows)
	require.Positive(t, pooled)
	_, asRows := step(ReturnRows, 30, rows)
	require.Less(t, auto, asRows)
	pooled, auto = step(ReturnAuto, 1, 5)
	require.Zero(t, pooled)
	_, asPooled := step(ReturnPooled, 1, 5)
	require.Less(t, auto, asPooled)
}

// TestReturnsMayDifferPerRankAndTable: each requester announces its own returns, so ranks and
// tables with different policies still train like the single collection; bad policies are refused.
func TestReturnsMayDifferPerRankAndTable(t *testing.T) {
	kinds, rows, dims := mixedKinds, mixedRows, mixedDims
	w := newTestWorld(t, 2, 2, Flat, kinds, rows, dims, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
	all := []Return{ReturnAuto, ReturnRows, ReturnPooled}
	for r, c := range w.ranks {
		require.NoError(t, c.SetReturns([]Return{all[r%3], all[(r+1)%3], all[(r+2)%3], ReturnPooled}))
	}
	require.Positive(t, checkSteps(t, w, kinds, rows, true))
	require.ErrorContains(t, w.ranks[0].SetReturns([]Return{ReturnAuto}), "4 tables")
	require.ErrorContains(t, w.ranks[0].SetReturns([]Return{0, 1, 2, 3}), "unknown return policy")
}
