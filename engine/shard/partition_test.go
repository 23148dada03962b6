package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refPartition is an independent reference: each ID's first-leg group index from its owner and
// the topology (flat: the owner; hierarchical: the owner's local index), a stable sort by it, and
// the counts.
func refPartition(l *Layout, topo Topology, mode Mode, self int, ids []int64) TablePartition {
	size := topo.World()
	if mode == Hierarchical {
		size = topo.PerNode
	}
	p := TablePartition{Dest: make([]int32, len(ids)), Perm: []int32{}, Count: make([]int64, size)}
	for i, id := range ids {
		o, _ := l.Owner(id, self)
		d := o
		if mode == Hierarchical {
			d = topo.Local(o)
		}
		p.Dest[i] = int32(d)
		p.Count[d]++
	}
	for i := range ids {
		p.Perm = append(p.Perm, int32(i))
	}
	sort.SliceStable(p.Perm, func(a, b int) bool { return p.Dest[p.Perm[a]] < p.Dest[p.Perm[b]] })
	return p
}

func TestPartitionMatchesReference(t *testing.T) {
	for _, sh := range []shape{{1, 1}, {1, 3}, {2, 2}, {3, 2}} {
		for _, mode := range []Mode{Flat, Hierarchical} {
			for _, kind := range []Kind{Hash, TableWise, RowWise, DataParallel} {
				t.Run(fmt.Sprintf("%dx%d/%s/%s", sh.nodes, sh.per, mode, kind), func(t *testing.T) {
					topo, err := NewTopology(sh.nodes, sh.per, sh.nodes*sh.per)
					require.NoError(t, err)
					W := topo.World()
					l, err := NewLayout("t", 97, 4, kind, W-1, W)
					require.NoError(t, err)
					feats := []embedding.Feature{{Name: "a", Table: 0}, {Name: "b", Table: 0}}
					rng := rand.New(rand.NewPCG(uint64(W), uint64(kind)))
					for r := 0; r < W; r++ {
						c, err := NewCollection([]*Layout{l}, topo, r, mode, embedding.OptimizerConfig{}, feats)
						require.NoError(t, err)
						pt := c.Partitioner()
						name, fs := pt.Table(0)
						require.Equal(t, "t", name)
						require.Equal(t, []string{"a", "b"}, fs)
						for _, n := range []int{0, 1, 40, 97} {
							ids := make([]int64, n)
							for i, v := range rng.Perm(97)[:n] {
								ids[i] = int64(v)
							}
							got := TablePartition{Dest: make([]int32, n), Perm: make([]int32, n), Count: make([]int64, pt.Size())}
							require.NoError(t, pt.Partition(0, ids, got))
							require.Equal(t, refPartition(l, topo, mode, r, ids), got, "rank %d, %d IDs", r, n)
						}
						require.NoError(t, c.Close())
					}
				})
			}
		}
	}
}

func TestPartitionRejectsBadInput(t *testing.T) {
	topo, _ := NewTopology(1, 2, 2)
	l, err := NewLayout("t", 10, 4, Hash, 0, 2)
	require.NoError(t, err)
	c, err := NewCollection([]*Layout{l}, topo, 0, Flat, embedding.OptimizerConfig{}, []embedding.Feature{{Name: "f", Table: 0}})
	require.NoError(t, err)
	defer c.Close()
	pt := c.Partitioner()
	ok := func(n int) TablePartition {
		return TablePartition{Dest: make([]int32, n), Perm: make([]int32, n), Count: make([]int64, 2)}
	}
	for _, tc := range []struct {
		name string
		t    int
		ids  []int64
		out  TablePartition
		want string
	}{
		{"id out of range", 0, []int64{3, 10}, ok(2), "id 10 out of range"},
		{"negative id", 0, []int64{-1}, ok(1), "id -1 out of range"},
		{"no such table", 1, []int64{1}, ok(1), "table index 1 of 1"},
		{"short buffers", 0, []int64{1, 2}, ok(1), "buffers of 1, 1 and 2 for 2 IDs"},
		{"wrong count length", 0, []int64{1}, TablePartition{Dest: make([]int32, 1), Perm: make([]int32, 1), Count: make([]int64, 3)}, "3 for 1 IDs and 2 destinations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, pt.Partition(tc.t, tc.ids, tc.out), tc.want)
		})
	}
}

// The partition leg 0's countStage sends by (its send counts and send order) is the
// partitioner's over the step's distinct IDs.
func TestCountStageUsesThePartitioner(t *testing.T) {
	kinds, rows, dims := mixedKinds, mixedRows, mixedDims
	for _, sh := range []shape{{1, 4}, {2, 2}} {
		for _, mode := range []Mode{Flat, Hierarchical} {
			t.Run(fmt.Sprintf("%dx%d/%s", sh.nodes, sh.per, mode), func(t *testing.T) {
				w := newTestWorld(t, sh.nodes, sh.per, mode, kinds, rows, dims, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
				rng := rand.New(rand.NewPCG(5, 6))
				W, Bl := w.topo.World(), 8
				_, lens, vals := randBatch(rng, len(kinds), W*Bl, rows)
				for r, c := range w.ranks {
					s, err := c.Begin(sliceBatch(lens, vals, r*Bl, (r+1)*Bl))
					require.NoError(t, err)
					op, err := s.X.Next() // leg 0's countStage
					require.NoError(t, err)
					require.NotNil(t, op)
					lg := &s.X.legs[0]
					T := len(kinds)
					for ti := range kinds {
						n := len(s.uniq[ti])
						want := TablePartition{Dest: make([]int32, n), Perm: make([]int32, n), Count: make([]int64, c.Partitioner().Size())}
						require.NoError(t, c.Partitioner().Partition(ti, s.uniq[ti], want))
						require.Equal(t, want.Perm, lg.perm[ti], "rank %d table %d send order", r, ti)
						for d, cnt := range want.Count {
							require.Equal(t, cnt, lg.sendCnt[d*T+ti], "rank %d table %d destination %d", r, ti, d)
						}
					}
				}
			})
		}
	}
}

// The partitioner may run on several goroutines at once while the collection trains (the input
// pipeline's FORMAT workers partition ahead while the step runs): same answers, no race.
func TestPartitionerIsSafeConcurrently(t *testing.T) {
	w := newTestWorld(t, 1, 2, Flat, mixedKinds, mixedRows, mixedDims, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
	pt := w.ranks[0].Partitioner()
	ids := []int64{49, 3, 17, 0, 28, 11}
	part := func(ti int) TablePartition {
		p := TablePartition{Dest: make([]int32, len(ids)), Perm: make([]int32, len(ids)), Count: make([]int64, pt.Size())}
		assert.NoError(t, pt.Partition(ti, ids, p))
		return p
	}
	want := part(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				assert.Equal(t, want, part(0))
			}
		}()
	}
	checkSteps(t, w, mixedKinds, mixedRows, false)
	close(stop)
	wg.Wait()
}

// prepare does what the input pipeline's FORMAT stage does for c: each table's dedup over its
// features in the partitioner's order, and its partition.
func prepare(t *testing.T, c *Collection, b embedding.Batch, B int) ([]embedding.TableDedup, *Partition) {
	t.Helper()
	pt := c.Partitioner()
	offsets := make([]int64, len(b.Lengths)+1)
	for i, n := range b.Lengths {
		offsets[i+1] = offsets[i] + n
	}
	var ds []embedding.TableDedup
	part := &Partition{By: pt}
	var dd embedding.Deduper
	for ti := 0; ti < pt.NumTables(); ti++ {
		name, feats := pt.Table(ti)
		var ids []int64
		for _, fname := range feats {
			f := slices.IndexFunc(c.Features, func(x embedding.Feature) bool { return x.Name == fname })
			k := slices.Index(b.KeyFeature, int64(f))
			ids = append(ids, b.Values[offsets[k*B]:offsets[(k+1)*B]]...)
		}
		inv := make([]int32, len(ids))
		uniq := dd.Dedup(ids, nil, inv)
		ds = append(ds, embedding.TableDedup{Table: name, Features: feats, Uniq: uniq, Inv: inv})
		tp := TablePartition{Dest: make([]int32, len(uniq)), Perm: make([]int32, len(uniq)), Count: make([]int64, pt.Size())}
		require.NoError(t, pt.Partition(ti, uniq, tp))
		part.Tables = append(part.Tables, tp)
	}
	return ds, part
}

// Steps begun from prepared batches equal those begun by Begin, bit for bit: pooled outputs,
// every row after the fused updates, the counters and the bytes moved.
func TestBeginPreparedEqualsBegin(t *testing.T) {
	kinds, rows, dims := mixedKinds, mixedRows, mixedDims
	opt := embedding.OptimizerConfig{Kind: embedding.OptAdam, LR: 0.01, Eps: 1e-8, Beta1: 0.9, Beta2: 0.999}
	for _, sh := range []shape{{1, 2}, {2, 2}} {
		for _, mode := range []Mode{Flat, Hierarchical} {
			for _, ret := range []Return{ReturnAuto, ReturnPooled} {
				t.Run(fmt.Sprintf("%dx%d/%s/%s", sh.nodes, sh.per, mode, ret), func(t *testing.T) {
					plain := newTestWorld(t, sh.nodes, sh.per, mode, kinds, rows, dims, opt)
					prep := newTestWorld(t, sh.nodes, sh.per, mode, kinds, rows, dims, opt)
					checkPreparedEqualsBegin(t, plain, prep, ret, func(rng *rand.Rand, B int) ([][]int64, [][]int64) {
						_, lens, vals := randBatch(rng, len(kinds), B, rows)
						return lens, vals
					})
				})
			}
		}
	}
	// dynamic-ID tables: the input pipeline partitions their IDs by hash alone, ahead of the step
	t.Run("dynamic/2x2/hierarchical", func(t *testing.T) {
		plain := newDynamicWorld(t, 2, 2, Hierarchical, opt, 1000)
		prep := newDynamicWorld(t, 2, 2, Hierarchical, opt, 1000)
		checkPreparedEqualsBegin(t, &plain.testWorld, &prep.testWorld, ReturnAuto, func(rng *rand.Rand, B int) ([][]int64, [][]int64) {
			return dynamicBatch(rng, B, dynamicIDs)
		})
	})
}

// spoiler changes rank r's batch or what was prepared for it before the step begins.
type spoiler func(r int, b embedding.Batch, ds []embedding.TableDedup, part *Partition) (embedding.Batch, []embedding.TableDedup, *Partition)

// checkPreparedEqualsBegin runs three training steps on two identical worlds, one begun by Begin,
// one from prepared batches (changed by spoil, when given, before both begin), and requires the same
// outputs, counters, bytes and shards, bit for bit.
func checkPreparedEqualsBegin(t *testing.T, plain, prep *testWorld, ret Return, batch func(rng *rand.Rand, B int) ([][]int64, [][]int64), spoil ...spoiler) {
	T := len(plain.ranks[0].Layouts)
	for r := range plain.ranks {
		rets := slices.Repeat([]Return{ret}, T)
		require.NoError(t, plain.ranks[r].SetReturns(rets))
		require.NoError(t, prep.ranks[r].SetReturns(rets))
	}
	rng := rand.New(rand.NewPCG(7, 8))
	W, Bl := plain.topo.World(), 6
	width := plain.ranks[0].Width()
	for step := 0; step < 3; step++ {
		lens, vals := batch(rng, W*Bl)
		xa, xb := make([]*Exchange, W), make([]*Exchange, W)
		sa, sb := make([]*Step, W), make([]*Step, W)
		for r := 0; r < W; r++ {
			b := sliceBatch(lens, vals, r*Bl, (r+1)*Bl)
			ds, part := prepare(t, prep.ranks[r], b, Bl)
			if len(spoil) > 0 {
				b, ds, part = spoil[0](r, b, ds, part)
			}
			var err error
			sa[r], err = plain.ranks[r].Begin(b)
			require.NoError(t, err)
			sb[r], err = prep.ranks[r].BeginPrepared(b, ds, part)
			require.NoError(t, err)
			xa[r], xb[r] = sa[r].X, sb[r].X
			if len(spoil) == 0 {
				require.Len(t, xb[r].pre, T, "the prepared step takes the partition it was given")
				require.NotContains(t, xb[r].pre, (*TablePartition)(nil))
			}
		}
		require.Equal(t, runLockstep(t, plain.topo, xa), runLockstep(t, prep.topo, xb))
		for r := 0; r < W; r++ {
			oa, ob := make([]float32, Bl*width), make([]float32, Bl*width)
			require.NoError(t, sa[r].Pool(oa))
			require.NoError(t, sb[r].Pool(ob))
			require.Equal(t, oa, ob, "rank %d step %d pooled", r, step)
			g := make([]float32, len(oa))
			for i := range g {
				g[i] = rng.Float32() - 0.5
			}
			require.NoError(t, sa[r].Backward(g, true))
			require.NoError(t, sb[r].Backward(g, true))
		}
		require.Equal(t, runLockstep(t, plain.topo, xa), runLockstep(t, prep.topo, xb))
		for r := 0; r < W; r++ {
			require.Equal(t, xa[r].Counters, xb[r].Counters, "rank %d step %d counters", r, step)
			for i := range T {
				require.Equal(t, plain.ranks[r].Shards[i].Data, prep.ranks[r].Shards[i].Data, "rank %d table %d", r, i)
				require.Equal(t, plain.ranks[r].Shards[i].State, prep.ranks[r].Shards[i].State, "rank %d table %d state", r, i)
			}
		}
	}
}

// A prepared batch is a valid batch for every collection: one partitioned for another rank or
// another layout, one whose dedup misses a table or grouped other features, and one whose IDs were
// changed in place all give the step Begin gives (the tables concerned deduplicate and partition
// themselves), bit for bit over training steps.
func TestBeginPreparedFallsBackToBegin(t *testing.T) {
	kinds := []Kind{Hash, TableWise}
	rows := []int64{50, 30}
	dims := []int{4, 8}
	opt := embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}
	other := newTestWorld(t, 1, 2, Flat, []Kind{Hash, Hash}, rows, dims, opt)
	hier := newTestWorld(t, 1, 2, Hierarchical, kinds, rows, dims, opt)
	same := newTestWorld(t, 1, 2, Flat, kinds, rows, dims, opt)
	batchSize := func(b embedding.Batch) int { return len(b.Lengths) / len(b.KeyFeature) }
	cases := map[string]spoiler{
		"another rank's": func(r int, b embedding.Batch, ds []embedding.TableDedup, _ *Partition) (embedding.Batch, []embedding.TableDedup, *Partition) {
			_, p := prepare(t, same.ranks[1-r], b, batchSize(b))
			return b, ds, p
		},
		"another sharding": func(r int, b embedding.Batch, ds []embedding.TableDedup, _ *Partition) (embedding.Batch, []embedding.TableDedup, *Partition) {
			_, p := prepare(t, other.ranks[r], b, batchSize(b))
			return b, ds, p
		},
		"hierarchical": func(r int, b embedding.Batch, ds []embedding.TableDedup, _ *Partition) (embedding.Batch, []embedding.TableDedup, *Partition) {
			_, p := prepare(t, hier.ranks[r], b, batchSize(b))
			return b, ds, p
		},
		"no partitioner": func(_ int, b embedding.Batch, ds []embedding.TableDedup, part *Partition) (embedding.Batch, []embedding.TableDedup, *Partition) {
			return b, ds, &Partition{Tables: part.Tables}
		},
		"a table left out": func(_ int, b embedding.Batch, ds []embedding.TableDedup, part *Partition) (embedding.Batch, []embedding.TableDedup, *Partition) {
			return b, ds[1:], &Partition{By: part.By, Tables: part.Tables[1:]}
		},
		"other features": func(_ int, b embedding.Batch, ds []embedding.TableDedup, part *Partition) (embedding.Batch, []embedding.TableDedup, *Partition) {
			ds[0].Features = []string{"zz"}
			return b, ds, part
		},
		"changed in place": func(_ int, b embedding.Batch, ds []embedding.TableDedup, part *Partition) (embedding.Batch, []embedding.TableDedup, *Partition) {
			b.Values = slices.Clone(b.Values)
			b.Values[0] = (b.Values[0] + 1) % rows[0]
			return b, ds, part
		},
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			plain := newTestWorld(t, 1, 2, Flat, kinds, rows, dims, opt)
			prep := newTestWorld(t, 1, 2, Flat, kinds, rows, dims, opt)
			checkPreparedEqualsBegin(t, plain, prep, ReturnAuto, func(rng *rand.Rand, B int) ([][]int64, [][]int64) {
				_, lens, vals := randBatch(rng, len(kinds), B, rows)
				return lens, vals
			}, spoil)
		})
	}
	// A partition that does not fit its dedup is the pipeline's bug, not the batch's: an error.
	w := newTestWorld(t, 1, 2, Flat, kinds, rows, dims, opt)
	_, lens, vals := randBatch(rand.New(rand.NewPCG(9, 10)), len(kinds), 8, rows)
	b := sliceBatch(lens, vals, 0, 4)
	ds, part := prepare(t, w.ranks[0], b, 4)
	_, err := w.ranks[0].BeginPrepared(b, ds[:1], part)
	require.ErrorContains(t, err, "2 partitions for 1 deduplicated tables")
}

// FuzzPartition: arbitrary IDs are partitioned like the reference or refused (out of range),
// never a panic.
func FuzzPartition(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0}, uint8(0), uint8(2), false)
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255}, uint8(1), uint8(3), true)
	f.Fuzz(func(t *testing.T, raw []byte, kind, per uint8, hier bool) {
		ids := int64s(raw)
		for i := range ids {
			if ids[i] >= 0 {
				ids[i] %= 80 // mostly valid IDs, a few beyond the table
			}
		}
		topo, err := NewTopology(2, int(per%3)+1, 2*(int(per%3)+1))
		require.NoError(t, err)
		mode := Flat
		if hier {
			mode = Hierarchical
		}
		l, err := NewLayout("t", 70, 2, Kind(kind%4), 1, topo.World())
		require.NoError(t, err)
		c, err := NewCollection([]*Layout{l}, topo, 1, mode, embedding.OptimizerConfig{}, []embedding.Feature{{Name: "f", Table: 0}})
		require.NoError(t, err)
		defer c.Close()
		pt := c.Partitioner()
		out := TablePartition{Dest: make([]int32, len(ids)), Perm: make([]int32, len(ids)), Count: make([]int64, pt.Size())}
		err = pt.Partition(0, ids, out)
		for _, id := range ids {
			if id < 0 || id >= 70 {
				require.Error(t, err)
				return
			}
		}
		require.NoError(t, err)
		require.Equal(t, refPartition(l, topo, mode, 1, ids), out)
	})
}

// A row-wise table of 8 rows over two ranks: IDs 0-3 live on rank 0, 4-7 on rank 1.
func ExamplePartitioner() {
	topo, _ := NewTopology(1, 2, 2)
	l, _ := NewLayout("t", 8, 4, RowWise, 0, 2)
	c, _ := NewCollection([]*Layout{l}, topo, 0, Flat, embedding.OptimizerConfig{}, []embedding.Feature{{Name: "f", Table: 0}})
	defer c.Close()
	pt := c.Partitioner()
	ids := []int64{5, 1, 7, 2} // a table's distinct IDs, first-seen order
	p := TablePartition{Dest: make([]int32, len(ids)), Perm: make([]int32, len(ids)), Count: make([]int64, pt.Size())}
	if err := pt.Partition(0, ids, p); err != nil {
		panic(err)
	}
	fmt.Println("destinations", p.Dest, "send order", p.Perm, "counts", p.Count)
	// Output: destinations [1 0 1 0] send order [1 3 0 2] counts [2 2]
}

// A feature name may recur across tables (one batch key looked up in each, fed once per feature):
// the collection takes it and the partitioner lists it under each table, so an input pipeline
// deduplicating the tables by their batch keys matches. Within one table a name still may not recur.
func TestAFeatureNameMayRecurAcrossTables(t *testing.T) {
	topo, _ := NewTopology(1, 2, 2)
	layouts := func() []*Layout {
		a, err := NewLayout("a", 10, 4, Hash, 0, 2)
		require.NoError(t, err)
		b, err := NewLayout("b", 12, 4, RowWise, 0, 2)
		require.NoError(t, err)
		return []*Layout{a, b}
	}
	c, err := NewCollection(layouts(), topo, 0, Flat, embedding.OptimizerConfig{},
		[]embedding.Feature{{Name: "f", Table: 0}, {Name: "f", Table: 1}, {Name: "g", Table: 1}})
	require.NoError(t, err)
	defer c.Close()
	for i, want := range [][]string{{"f"}, {"f", "g"}} {
		_, feats := c.Partitioner().Table(i)
		assert.Equal(t, want, feats)
	}
	_, err = NewCollection(layouts(), topo, 0, Flat, embedding.OptimizerConfig{},
		[]embedding.Feature{{Name: "f", Table: 0}, {Name: "g", Table: 1}, {Name: "g", Table: 1}})
	require.ErrorContains(t, err, `duplicate feature name "g" in table "b"`)
}
