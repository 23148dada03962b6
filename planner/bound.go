package planner

import (
	"cmp"
	"context"
	"slices"

	"github.com/recgo/recgo/planner/cost"
)

// cheapest is the index of table t's least-cost option, the one with the most hot rows on a tie. It
// is usually the last (the most rows in HBM), but a topology whose HBM reads are slower than its
// UVM reads makes hot rows cost more, and then the all-UVM split is the cheapest.
func cheapest(t cost.Table) int {
	k := 0
	for j, o := range t.Options {
		if o.Cost <= t.Options[k].Cost {
			k = j
		}
	}
	return k
}

// lowerBound is a bound on the slowest GPU's cost that every placement obeys. Each table costs at
// least its cheapest option, so with those costs c sorted
// descending the slowest GPU carries at least the mean load, and, for every k with kG < T, among
// the kG+1 costliest tables some GPU holds k+1 (pigeonhole), hence at least the k+1 smallest of
// them: c[kG-k] + … + c[kG] (k = 0 is the costliest table alone).
func lowerBound(m *cost.Model) float64 {
	c := make([]float64, len(m.Tables))
	sum := 0.0
	for i, t := range m.Tables {
		c[i] = t.Options[cheapest(t)].Cost
		sum += c[i]
	}
	slices.SortFunc(c, func(a, b float64) int { return cmp.Compare(b, a) })
	G := m.Topo.NumGPUs()
	lb := sum / float64(G)
	for k := 0; k*G < len(c); k++ {
		s := 0.0
		for _, v := range c[k*G-k : k*G+1] {
			s += v
		}
		lb = max(lb, s)
	}
	return lb
}

// cheapestPacking places every table with its cheapest option, largest cost first onto the
// least-loaded GPU with room (LPT). It returns nil when some table finds no room or ctx ends
// first. When the fast tier holds everything this is the placement [lowerBound] proves optimal or
// nearly so.
func cheapestPacking(ctx context.Context, m *cost.Model) []cost.Assignment {
	order := make([]int, len(m.Tables))
	for i := range order {
		order[i] = i
	}
	best := make([]int, len(m.Tables))
	for i, t := range m.Tables {
		best[i] = cheapest(t)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(m.Tables[b].Options[best[b]].Cost, m.Tables[a].Options[best[a]].Cost)
	})
	s := newState(m)
	h := newLoadHeap(s)
	for n, i := range order {
		if n%64 == 0 && ctx.Err() != nil {
			return nil
		}
		if !h.place(i, best[i]) {
			return nil
		}
	}
	return s.assignments()
}

// modelCost is the slowest GPU's cost of a under the model's weights.
func modelCost(m *cost.Model, a []cost.Assignment) float64 {
	load := make([]float64, m.Topo.NumGPUs())
	for i, x := range a {
		load[x.GPU] += m.Tables[i].Options[optionOf(m.Tables[i], x.Hot)].Cost
	}
	return slices.Max(load)
}

// withinGap reports whether objective is within the relative gap of bound.
func withinGap(objective, bound, gap float64) bool {
	return objective-bound <= gap*objective
}

// fastTierModel returns m with every table restricted to its cheapest option when that loses
// nothing: the cheapest options of all tables together fit one GPU's HBM and one node's host
// memory, so every placement of them is feasible, and any other option only adds cost. It
// returns nil otherwise. The MILP of the result is a pure load balance, T×G columns.
func fastTierModel(m *cost.Model) *cost.Model {
	var hot, cold int64
	best := make([]int, len(m.Tables))
	for i, t := range m.Tables {
		best[i] = cheapest(t)
		o := t.Options[best[i]]
		hot += o.HotBytes
		cold += o.ColdBytes
		if hot > m.Topo.HBMBytes || cold > m.Topo.HostBytes {
			return nil
		}
	}
	r := *m
	r.Tables = make([]cost.Table, len(m.Tables))
	for i, t := range m.Tables {
		r.Tables[i] = cost.Table{Table: t.Table, Options: t.Options[best[i] : best[i]+1]}
	}
	return &r
}
