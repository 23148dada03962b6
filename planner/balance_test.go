package planner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
)

// balanceModel is a fast-tier model: one option per table with the given costs, G GPUs with room
// for everything.
func balanceModel(costs []float64, G int) *cost.Model {
	m := &cost.Model{Topo: cost.Topology{Nodes: 1, GPUsPerNode: G, HBMBytes: 1 << 40, HostBytes: 1 << 40}}
	for i, c := range costs {
		m.Tables = append(m.Tables, cost.Table{Table: &profile.Table{Name: fmt.Sprintf("t%d", i)},
			Options: []cost.Option{{Cost: c}}})
	}
	return m
}

// bruteBalance is the least slowest-GPU load over every assignment of the costs to G GPUs.
func bruteBalance(costs []float64, G int) float64 {
	best := -1.0
	load := make([]float64, G)
	var rec func(i int)
	rec = func(i int) {
		if i == len(costs) {
			top := 0.0
			for _, l := range load {
				top = max(top, l)
			}
			if best < 0 || top < best {
				best = top
			}
			return
		}
		for g := range G {
			load[g] += costs[i]
			rec(i + 1)
			load[g] -= costs[i]
		}
	}
	rec(0)
	return best
}

func TestExactBalanceFindsTheOptimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name  string
		costs []float64
		G     int
	}{
		{"equal costs, one more than GPUs", []float64{1, 1, 1}, 2},
		{"a big one and small ones", []float64{10, 1, 1, 1}, 2},
		{"LPT is not optimal", []float64{3, 3, 2, 2, 2}, 2},
	}
	for n := 4; n <= 8; n++ {
		costs := make([]float64, n)
		for i := range costs {
			costs[i] = float64(1 + rng.IntN(9)) // few distinct values: ties, as in real profiles
		}
		cases = append(cases, struct {
			name  string
			costs []float64
			G     int
		}{"random", costs, 2 + n%2})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := balanceModel(tc.costs, tc.G)
			for _, start := range [][]cost.Assignment{nil, cheapestPacking(context.Background(), m)} {
				a, exhaustive := exactBalance(context.Background(), m, start)
				require.True(t, exhaustive)
				require.Len(t, a, len(tc.costs))
				assert.InDelta(t, bruteBalance(tc.costs, tc.G), modelCost(m, a), 1e-12)
			}
		})
	}
}

// A cancelled context stops the search: what it returns is no worse than the start, not proven.
// Sixty random real costs on 7 GPUs have no perfect balance, so proving the optimum takes far more
// than the work between two looks at the context.
func TestExactBalanceGivesUpWhenCancelled(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	costs := make([]float64, 60)
	for i := range costs {
		costs[i] = 1000 + 1000*rng.Float64()
	}
	m := balanceModel(costs, 7)
	start := cheapestPacking(context.Background(), m)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a, exhaustive := exactBalance(ctx, m, start)
	assert.False(t, exhaustive)
	assert.LessOrEqual(t, modelCost(m, a), modelCost(m, start))
}
