package planner

import (
	"testing"

	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tab is a profiled table with the given CDF steps (rows, share); no steps means none touched.
func tab(name string, rows int64, dim, elem int, coverage, pooling float64, steps ...profile.Point) profile.Table {
	t := profile.Table{Name: name, Rows: rows, Dim: dim, ElemBytes: elem, Coverage: coverage, Pooling: pooling,
		CDF: []profile.Point{{}}}
	t.CDF = append(t.CDF, steps...)
	t.Touched = t.CDF[len(t.CDF)-1].Rows
	return t
}

// The row greedy packed tables by cost alone, so a table with an HBM split to spare could take the
// host memory that a table with one possible split needed, or small tables could leave no node room
// for a large one: it raised a capacity error ("fits no
// GPU at any of its splits") on these feasible instances (found by a brute-force sweep), which the
// MILP and the brute force place.
func TestRowGreedyPacksTablesWithFewSplitsWhenCostOrderFails(t *testing.T) {
	tests := []struct {
		name   string
		topo   cost.Topology
		tables []profile.Table
	}{
		{"one node's host memory", cost.Topology{Nodes: 1, GPUsPerNode: 3, HBMBytes: 318, HostBytes: 509,
			HBMBandwidth: 850e9, UVMBandwidth: 850e9, BatchSize: 128}, []profile.Table{
			tab("t0", 100, 3, 1, 0.3, 2.5),
			tab("t1", 37, 3, 4, 0.3, 0, profile.Point{Rows: 28, Frac: 0.28}, profile.Point{Rows: 37, Frac: 1}),
		}},
		{"two nodes", cost.Topology{Nodes: 2, GPUsPerNode: 2, HBMBytes: 26, HostBytes: 17,
			HBMBandwidth: 22e9, UVMBandwidth: 850e9, BatchSize: 128}, []profile.Table{
			tab("t0", 1, 4, 4, 0.3, 1),
			tab("t1", 1, 3, 1, 0, 1),
			tab("t2", 2, 4, 4, 1, 0, profile.Point{Rows: 1, Frac: 1}),
		}},
		{"host memory in pieces", cost.Topology{Nodes: 2, GPUsPerNode: 1, HBMBytes: 0, HostBytes: 243,
			HBMBandwidth: 22e9, UVMBandwidth: 850e9, BatchSize: 128}, []profile.Table{
			tab("t0", 10, 4, 2, 0, 2.5),
			tab("t1", 100, 1, 2, 0, 1),
			tab("t2", 37, 4, 1, 1, 2.5, profile.Point{Rows: 33, Frac: 1}),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := cost.New(tc.topo, &profile.Profile{Version: profile.Version, SampleRate: 1, Tables: tc.tables},
				nil, cost.Full)
			require.NoError(t, err)
			want := bruteForce(m)
			rg, err := RowGreedy(m)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, maxSeconds(t, m, rg), want*(1-1e-12))
			milp, err := SolveMILP(m, MILPOptions{MipRelGap: 1e-9})
			require.NoError(t, err)
			assert.InDelta(t, want, maxSeconds(t, m, milp.Assign), want*1e-9)
		})
	}
}
