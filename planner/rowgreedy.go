package planner

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"time"

	"github.com/recgo/recgo/planner/cost"
)

// rebalanceBudget caps the local search that follows the greedy.
const rebalanceBudget = 10 * time.Second

// splitSlack keeps this share of the cluster's HBM free while choosing splits, so packing fits.
const splitSlack = 0.02

// upgrade is a candidate step of one table from its current option to the next.
type upgrade struct {
	table, to int
	ratio     float64 // cost saved per extra HBM byte
}

type upgradeHeap []upgrade

func (h upgradeHeap) Len() int           { return len(h) }
func (h upgradeHeap) Less(i, j int) bool { return h[i].ratio > h[j].ratio }
func (h upgradeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *upgradeHeap) Push(x any)        { *h = append(*h, x.(upgrade)) }
func (h *upgradeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// nextUpgrade is the best-ratio step of table i from option k to any larger option.
func nextUpgrade(t cost.Table, i, k int) (upgrade, bool) {
	best := upgrade{table: i, to: -1, ratio: -1}
	for k2 := k + 1; k2 < len(t.Options); k2++ {
		db := float64(t.Options[k2].HotBytes - t.Options[k].HotBytes)
		dc := t.Options[k].Cost - t.Options[k2].Cost
		if db > 0 && dc > 0 && dc/db > best.ratio {
			best = upgrade{table: i, to: k2, ratio: dc / db}
		}
	}
	return best, best.to >= 0
}

// RowGreedy is the row-level greedy: choose every table's split by cost saved per HBM byte against
// the cluster's total HBM, pack tables onto the least-loaded GPU that fits (largest cost first,
// shrinking a split when nothing fits), then improve the slowest GPU by upgrades and moves.
func RowGreedy(m *cost.Model) ([]cost.Assignment, error) {
	return rowGreedy(context.Background(), m)
}

// rowGreedy is RowGreedy whose improvement phases stop when ctx ends (the placement stays valid).
func rowGreedy(ctx context.Context, m *cost.Model) ([]cost.Assignment, error) {
	n, G := len(m.Tables), m.Topo.NumGPUs()
	// Phase 1: splits against the pooled HBM budget.
	opt := make([]int, n)
	budget := int64(float64(int64(G)*m.Topo.HBMBytes) * (1 - splitSlack))
	used := int64(0)
	h := &upgradeHeap{}
	for i, t := range m.Tables {
		used += t.Options[0].HotBytes
		if u, ok := nextUpgrade(t, i, 0); ok {
			*h = append(*h, u)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		u := heap.Pop(h).(upgrade)
		t := m.Tables[u.table]
		extra := t.Options[u.to].HotBytes - t.Options[opt[u.table]].HotBytes
		if used+extra > budget {
			continue
		}
		used += extra
		opt[u.table] = u.to
		if nu, ok := nextUpgrade(t, u.table, u.to); ok {
			heap.Push(h, nu)
		}
	}
	// Phase 2: largest cost first onto the least-loaded GPU that fits. That order can spend a node's
	// host memory on a table that had an HBM split to spare before a table that has none arrives, or
	// leave memory in pieces too small for a large table: when it leaves a table no room, the tables
	// with the fewest splits go first instead, the largest first among them.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(m.Tables[b].Options[opt[b]].Cost, m.Tables[a].Options[opt[a]].Cost)
	})
	s, failed := pack(m, opt, order)
	if failed >= 0 {
		slices.SortStableFunc(order, func(a, b int) int {
			ta, tb := m.Tables[a], m.Tables[b]
			return cmp.Or(cmp.Compare(len(ta.Options), len(tb.Options)),
				cmp.Compare(tb.Rows*tb.RowBytes(), ta.Rows*ta.RowBytes()))
		})
		s2, failed2 := pack(m, opt, order)
		if failed2 >= 0 {
			return nil, s.noRoom("row greedy", failed)
		}
		s = s2
	}
	improve(ctx, s)
	before := s.assignments()
	_, top := s.maxLoad()
	rebalance(ctx, s, rebalanceBudget)
	if _, after := s.maxLoad(); after > top || s.overCapacity() {
		return before, nil
	}
	return s.assignments(), nil
}

// pack places the tables in order, each onto the least-loaded GPU with room for its split opt[i], or
// for a smaller split, or for a larger one. It takes no context: a packing always completes, so there
// is a placement to return even when ctx has ended (only the improvement phases stop with it). It
// returns the state and -1, or, when a table fits nowhere, the partial state and that table.
func pack(m *cost.Model, opt, order []int) (*state, int) {
	s := newState(m)
	lh := newLoadHeap(s)
	for _, i := range order {
		placed := false
		// The chosen split first, then smaller ones (less HBM), then larger ones (less host memory).
		tries := make([]int, 0, len(m.Tables[i].Options))
		for k := opt[i]; k >= 0; k-- {
			tries = append(tries, k)
		}
		for k := opt[i] + 1; k < len(m.Tables[i].Options); k++ {
			tries = append(tries, k)
		}
		for _, k := range tries {
			if placed = lh.place(i, k); placed {
				break
			}
		}
		if !placed {
			return s, i
		}
	}
	return s, -1
}

// improve lowers the slowest GPU's load by upgrading one of its tables into free HBM or moving a
// table to another GPU, until neither helps; then spends every GPU's leftover HBM on upgrades.
func improve(ctx context.Context, s *state) {
	m := s.m
	G := m.Topo.NumGPUs()
	for iter := 0; iter < 20*len(m.Tables)+100 && ctx.Err() == nil; iter++ {
		g, top := s.maxLoad()
		eps := 1e-12 * top
		// Largest saving that fits g's free HBM.
		bi, bk, bsave := -1, -1, eps
		for i, c := range s.choice {
			if c.gpu != g {
				continue
			}
			t := m.Tables[i]
			for k := c.opt + 1; k < len(t.Options); k++ {
				save := t.Options[c.opt].Cost - t.Options[k].Cost
				dh := t.Options[k].HotBytes - t.Options[c.opt].HotBytes
				dc := t.Options[k].ColdBytes - t.Options[c.opt].ColdBytes
				if save > bsave && s.hbm[g]+dh <= m.Topo.HBMBytes && s.host[m.Topo.Node(g)]+dc <= m.Topo.HostBytes {
					bi, bk, bsave = i, k, save
				}
			}
		}
		if bi >= 0 {
			s.remove(bi)
			s.place(bi, bk, g)
			continue
		}
		// Best move of one of g's tables to another GPU (with the best option that fits there).
		mi, mg, mk, mval := -1, -1, -1, top-eps
		for i, c := range s.choice {
			if c.gpu != g {
				continue
			}
			t := m.Tables[i]
			left := s.load[g] - t.Options[c.opt].Cost
			s.remove(i)
			for g2 := 0; g2 < G; g2++ {
				if g2 == g {
					continue
				}
				for k := len(t.Options) - 1; k >= 0; k-- {
					if s.fits(i, k, g2) {
						if v := max(left, s.load[g2]+t.Options[k].Cost); v < mval {
							mi, mg, mk, mval = i, g2, k, v
						}
						break // costs fall with k: the largest fitting option is the best here
					}
				}
			}
			s.place(i, c.opt, g)
		}
		if mi < 0 {
			break
		}
		s.remove(mi)
		s.place(mi, mk, mg)
	}
	// Leftover HBM: upgrades never raise a load, so take the best-ratio ones everywhere.
	for ctx.Err() == nil {
		bi, bk, br := -1, -1, 0.0
		for i, c := range s.choice {
			t := m.Tables[i]
			for k := c.opt + 1; k < len(t.Options); k++ {
				save := t.Options[c.opt].Cost - t.Options[k].Cost
				dh := float64(t.Options[k].HotBytes - t.Options[c.opt].HotBytes)
				if save <= 0 || dh <= 0 {
					continue
				}
				s.remove(i)
				ok := s.fits(i, k, c.gpu)
				s.place(i, c.opt, c.gpu)
				if ok && save/dh > br {
					bi, bk, br = i, k, save/dh
				}
			}
		}
		if bi < 0 {
			return
		}
		g := s.choice[bi].gpu
		s.remove(bi)
		s.place(bi, bk, g)
	}
}
