package planner

import (
	"fmt"
	"testing"

	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A topology whose HBM reads are slower than its UVM reads makes hot rows cost more. The bound took
// every table's last option (all it may hold in HBM) as its cheapest, so it rose above the optimum
// and the MILP returned a worse placement as "optimal" by that bound; the fast-tier shortcut and
// its packing made the same assumption. Found by a brute-force sweep: the first case is its
// instance, the others tinyModel's tables with the two bandwidths swapped.
func TestSlowHBMBoundAndMILPMatchBruteForce(t *testing.T) {
	sweep := &profile.Profile{Version: profile.Version, SampleRate: 1, Tables: []profile.Table{
		tab("t0", 37, 1, 2, 1, 1, profile.Point{Rows: 13, Frac: 0.27}, profile.Point{Rows: 37, Frac: 1}),
		tab("t1", 5, 4, 4, 0.3, 2.5),
		tab("t2", 100, 1, 2, 1, 0, profile.Point{Rows: 22, Frac: 0.93}, profile.Point{Rows: 100, Frac: 1}),
	}}
	sweepTopo := cost.Topology{Nodes: 1, GPUsPerNode: 3, HBMBytes: 96, HostBytes: 271, HBMBandwidth: 1e9,
		UVMBandwidth: 22e9, BatchSize: 1}
	models := map[string]*cost.Model{}
	m, err := cost.New(sweepTopo, sweep, nil, cost.Full)
	require.NoError(t, err)
	models["sweep"] = m
	for _, seed := range []uint64{1, 2, 3} {
		tm := tinyModel(t, seed, 3, 1, 2, 2)
		tp := tm.Topo
		tp.HBMBandwidth, tp.UVMBandwidth = tp.UVMBandwidth, tp.HBMBandwidth
		for _, hbm := range []int64{tp.HBMBytes, 1 << 40} { // tight, then the fast-tier shortcut's case
			tp.HBMBytes = hbm
			m, err := cost.New(tp, profileOf(tm), nil, cost.Full)
			require.NoError(t, err)
			models[fmt.Sprintf("tiny %d, hbm %d", seed, hbm)] = m
		}
	}
	for name, m := range models {
		t.Run(name, func(t *testing.T) {
			want := bruteForce(m)
			assert.LessOrEqual(t, lowerBound(m), want*(1+1e-12))
			res, err := SolveMILP(m, MILPOptions{MipRelGap: 1e-9})
			require.NoError(t, err)
			assert.InDelta(t, want, maxSeconds(t, m, res.Assign), want*1e-9, "proof %s", res.Proof)
		})
	}
}
