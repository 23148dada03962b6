package planner

import (
	"cmp"
	"context"
	"math"
	"slices"

	"github.com/recgo/recgo/planner/cost"
)

// balanceNodes bounds [exactBalance]'s search: past it the search gives up and the MILP decides.
const balanceNodes = 2_000_000

// exactBalance searches for the placement of a fast-tier model (every table one option, every GPU
// able to hold them all: [fastTierModel]) with the least slowest-GPU cost, a pure load balance of
// the tables' costs over identical GPUs. It starts from start (nil: none) and returns the best
// placement found and whether the search was exhaustive, which proves that placement optimal.
//
// Depth-first, costliest table first; a table tries each distinct GPU load once (GPUs with equal
// loads are interchangeable), and a branch is cut when its slowest GPU, or the mean load it must
// reach, is no better than the best placement so far. On the Criteo sample's 26 tables over 16
// GPUs this settles in milliseconds what HiGHS leaves at a 1.5 % gap after a minute: many tables
// cost the same, which the MILP's symmetry makes hard and the load classes here make small.
func exactBalance(ctx context.Context, m *cost.Model, start []cost.Assignment) ([]cost.Assignment, bool) {
	T, G := len(m.Tables), m.Topo.NumGPUs()
	order := make([]int, T)
	for i := range order {
		order[i] = i
	}
	c := func(t int) float64 { return m.Tables[t].Options[0].Cost }
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(c(b), c(a)) })
	rest := make([]float64, T+1) // rest[d]: the cost of the tables from depth d on
	for d := T - 1; d >= 0; d-- {
		rest[d] = rest[d+1] + c(order[d])
	}
	best := math.Inf(1)
	var bestGPU []int
	if start != nil {
		best = modelCost(m, start)
	}
	load := make([]float64, G)
	gpu := make([]int, T)
	nodes := 0
	var search func(d int, top float64) bool // false: gave up (node limit or ctx)
	search = func(d int, top float64) bool {
		if nodes++; nodes > balanceNodes || (nodes%4096 == 0 && ctx.Err() != nil) {
			return false
		}
		if d == T {
			best, bestGPU = top, slices.Clone(gpu)
			return true
		}
		var placed float64
		for _, l := range load {
			placed += l
		}
		if max(top, (placed+rest[d])/float64(G)) >= best*(1-1e-12) {
			return true // nothing below here beats the best
		}
		cost := c(order[d])
		tried := make([]float64, 0, G)
		for g := range G {
			if slices.Contains(tried, load[g]) {
				continue // a GPU with the same load was tried: the same subtrees
			}
			tried = append(tried, load[g])
			old := load[g]
			next := old + cost
			if next >= best*(1-1e-12) {
				continue
			}
			load[g], gpu[d] = next, g
			ok := search(d+1, max(top, next))
			load[g] = old
			if !ok {
				return false
			}
		}
		return true
	}
	complete := search(0, 0)
	if bestGPU == nil {
		return start, complete && start != nil
	}
	out := make([]cost.Assignment, T)
	for d, t := range order {
		out[t] = cost.Assignment{GPU: bestGPU[d], Hot: m.Tables[t].Options[0].Hot}
	}
	return out, complete
}
