package shard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/stretchr/testify/require"
)

func zipfIDs(rng *rand.Rand, n int, rows int64) []int64 {
	z := rand.NewZipf(rng, 1.2, 1, uint64(rows-1))
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(z.Uint64())
	}
	return out
}

// The simulation's counts are the real exchange's counters, and Eq. 3 holds on both.
func TestSimulateMatchesExchangeAndEq3(t *testing.T) {
	for _, shape := range [][2]int{{2, 2}, {3, 2}, {2, 3}, {1, 4}, {4, 1}} {
		t.Run(fmt.Sprintf("%dx%d", shape[0], shape[1]), func(t *testing.T) {
			topo, err := NewTopology(shape[0], shape[1], shape[0]*shape[1])
			require.NoError(t, err)
			W := topo.World()
			rows := []int64{200, 60}
			rng := rand.New(rand.NewPCG(3, uint64(W)))
			batch := make([][][]int64, W)
			for r := range batch {
				batch[r] = [][]int64{zipfIDs(rng, 40, rows[0]), zipfIDs(rng, 25, rows[1])}
			}
			var ls []*Layout
			for i, n := range rows {
				l, err := NewLayout(fmt.Sprintf("t%d", i), n, 2, Hash, 0, W)
				require.NoError(t, err)
				ls = append(ls, l)
			}
			sim, err := Simulate(topo, batch, func(t int, id int64) int { o, _ := ls[t].Owner(id, 0); return o })
			require.NoError(t, err)
			for _, mode := range []Mode{Flat, Hierarchical} {
				xs := make([]*Exchange, W)
				store := nopStore{}
				for r := range xs {
					xs[r] = NewExchange(ls, topo, r, mode, store)
					var uniq [][]int64
					for _, ids := range batch[r] {
						var d embedding.Deduper
						uniq = append(uniq, d.Dedup(ids, nil, make([]int32, len(ids))))
					}
					require.NoError(t, xs[r].Forward(uniq))
				}
				runLockstep(t, topo, xs)
				var intra, inter, vIntra, vInter int64
				for _, x := range xs {
					for tb := range rows {
						intra += x.Counters.IDsIntra[tb]
						inter += x.Counters.IDsInter[tb]
						vIntra += x.Counters.VecsIntra[tb]
						vInter += x.Counters.VecsInter[tb]
					}
				}
				require.Equal(t, intra, vIntra)
				require.Equal(t, inter, vInter)
				if mode == Flat {
					require.Equal(t, [2]int64{sim.FlatIntra, sim.FlatInter}, [2]int64{intra, inter})
				} else {
					require.Equal(t, [2]int64{sim.HierIntra, sim.HierInter}, [2]int64{intra, inter})
				}
			}
			// Eq. 3 from the definition: G_n(x) ranks of node n ask for x, owned off node n.
			var eq3 int64
			for n := 0; n < topo.Nodes; n++ {
				for tb := range rows {
					g := map[int64]int64{}
					for l := 0; l < topo.PerNode; l++ {
						seen := map[int64]bool{}
						for _, x := range batch[topo.Rank(n, l)][tb] {
							if o, _ := ls[tb].Owner(x, 0); !seen[x] && topo.Node(o) != n {
								g[x]++
							}
							seen[x] = true
						}
					}
					for _, c := range g {
						eq3 += c - 1
					}
				}
			}
			require.Equal(t, eq3, sim.FlatInter-sim.HierInter)
		})
	}
}

type nopStore struct{}

func (nopStore) Lookup(t int, rows []int64, dst []float32) error  { return nil }
func (nopStore) Apply(t int, rows []int64, grads []float32) error { return nil }

// Resolve gives every ID of a dynamic table no row (it reads zeros).
func (nopStore) Resolve(t int, ids, rows []int64, train bool) error {
	for i := range rows {
		rows[i] = -1
	}
	return nil
}

func (s nopStore) Recompute(t int, ids, rows []int64) error    { return s.Resolve(t, ids, rows, false) }
func (nopStore) Evictions(t int) int64                         { return 0 }
func (nopStore) Recheck(t int, ids, rows []int64, since int64) {}

func TestLayoutsPartitionTheRows(t *testing.T) {
	for _, k := range []Kind{Hash, TableWise, RowWise, DataParallel} {
		for _, W := range []int{1, 3, 4} {
			l, err := NewLayout("t", 37, 2, k, W-1, W)
			require.NoError(t, err)
			holders := map[int64]int{}
			for r := 0; r < W; r++ {
				ids := l.LocalIDs(r)
				require.Len(t, ids, int(l.LocalRows(r)))
				rows := make([]int64, len(ids))
				require.NoError(t, l.Locate(r, ids, rows))
				for j, id := range ids {
					require.Equal(t, int64(j), rows[j], "%s W=%d: id %d", k, W, id)
					require.Equal(t, r, l.OwnerRank(id, r), "%s W=%d: id %d's owner", k, W, id)
					holders[id]++
				}
			}
			want := 1
			if k == DataParallel {
				want = W
			}
			require.Len(t, holders, 37)
			for id, n := range holders {
				require.Equal(t, want, n, "%s W=%d id %d", k, W, id)
			}
		}
	}
	_, err := NewLayout("t", 10, 2, TableWise, 5, 4)
	require.ErrorContains(t, err, "outside the world")
	l, _ := NewLayout("t", 10, 2, Hash, 0, 4)
	require.ErrorContains(t, l.Check(10), `table "t": id 10 out of range`)
	require.Less(t, math.Abs(float64(BucketRank(VirtualBuckets-1, 4))-3), 0.5)
}
