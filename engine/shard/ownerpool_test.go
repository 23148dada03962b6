package shard

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/stretchr/testify/require"
)

// TestPlanOneDestMatchesGeneralPlan checks the single-destination shortcut of the pooled-return
// planning against the general per-value passes: the same pooling entries, payloads, metadata and
// vector counts, for weighted and unweighted bags (empty ones included) and every return policy.
func TestPlanOneDestMatchesGeneralPlan(t *testing.T) {
	topo, err := NewTopology(1, 2, 2)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, weighted := range []bool{false, true} {
		for _, ret := range []Return{ReturnAuto, ReturnPooled, ReturnRows} {
			t.Run(fmt.Sprintf("weighted=%v/%s", weighted, ret), func(t *testing.T) {
				l, err := NewLayout("t", 1000, 4, TableWise, 1, 2) // rank 0's items all go to rank 1
				require.NoError(t, err)
				var bags Bags
				bags.Bounds = []int64{0}
				var ids []int64
				for b := 0; b < 40; b++ {
					n := rng.IntN(6) // some bags empty
					for j := 0; j < n; j++ {
						ids = append(ids, rng.Int64N(60))
						if weighted {
							bags.Weights = append(bags.Weights, rng.Float32())
						}
					}
					bags.Bounds = append(bags.Bounds, int64(len(ids)))
				}
				bags.Inv = make([]int32, len(ids))
				var d embedding.Deduper
				uniq := d.Dedup(ids, nil, bags.Inv)
				plan := func(oneDest bool) (*Exchange, *leg) {
					x := NewExchange([]*Layout{l}, topo, 0, Flat, nil)
					require.NoError(t, x.ForwardBags([][]int64{uniq}, []Bags{bags}, []Return{ret}))
					lg := &x.legs[0]
					lg.items = [][]int64{uniq}
					lg.sendCnt = []int64{0, int64(len(uniq))}
					lg.perm = [][]int32{make([]int32, len(uniq))}
					dest := make([]int32, len(uniq))
					for i := range uniq {
						lg.perm[0][i], dest[i] = int32(i), 1
					}
					lg.sendMeta = make([]int64, 2*metaFields)
					lg.sendMeta[metaIDs], lg.sendMeta[metaFields+metaIDs] = 0, int64(len(uniq))
					lg.sendVec = append([]int64(nil), lg.sendCnt...)
					x.planTables(lg, [][]int32{dest}, oneDest)
					return x, lg
				}
				fast, fl := plan(true)
				slow, sl := plan(false)
				require.Equal(t, sl.sendMeta, fl.sendMeta)
				require.Equal(t, sl.sendVec, fl.sendVec)
				fp, sp := fast.plans[0], slow.plans[0]
				require.Equal(t, sp.Bounds, fp.Bounds)
				require.Equal(t, sp.Slots, fp.Slots)
				require.Equal(t, sp.Offs, fp.Offs)
				require.Equal(t, sp.Weights, fp.Weights)
				require.Equal(t, sp.nPart, fp.nPart)
				require.Equal(t, sp.partStart, fp.partStart)
				if sp.nPart > 0 {
					m := sl.sendMeta[metaFields:]
					n := fast.blockBytes(m, 0) - int64(len(uniq)*fast.idWidth(0))
					fb, sb := make([]byte, n), make([]byte, n)
					require.Equal(t, sp.encode(sb, 1, m), fp.encode(fb, 1, m))
					require.Equal(t, sb, fb)
				}
			})
		}
	}
}
