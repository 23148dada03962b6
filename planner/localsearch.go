package planner

import (
	"container/heap"
	"context"
	"time"
)

// reoptGPU re-chooses the splits of every table on GPU g to minimize g's load within its HBM: a
// multiple-choice knapsack solved greedily by cost saved per byte (optimal for its LP relaxation),
// starting each table from its smallest option that fits the node's host memory.
func reoptGPU(s *state, g int) {
	m := s.m
	saved := snapshot(s, g)
	defer func() { // the fresh splits overflowed the GPU or its node: keep the ones it had
		if s.hbm[g] > m.Topo.HBMBytes || s.host[m.Topo.Node(g)] > m.Topo.HostBytes {
			restore(s, saved)
		}
	}()
	var tabs []int
	for i, c := range s.choice {
		if c.gpu == g {
			tabs = append(tabs, i)
		}
	}
	for _, i := range tabs {
		s.remove(i)
	}
	node := m.Topo.Node(g)
	for _, i := range tabs {
		k := 0
		for k < len(m.Tables[i].Options)-1 && s.host[node]+m.Tables[i].Options[k].ColdBytes > m.Topo.HostBytes {
			k++
		}
		s.place(i, k, g)
	}
	h := &upgradeHeap{}
	for _, i := range tabs {
		if u, ok := fittingUpgrade(s, i); ok {
			*h = append(*h, u)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		u := heap.Pop(h).(upgrade)
		c := s.choice[u.table]
		o, o2 := m.Tables[u.table].Options[c.opt], m.Tables[u.table].Options[u.to]
		if s.hbm[g]+o2.HotBytes-o.HotBytes > m.Topo.HBMBytes {
			if nu, ok := fittingUpgrade(s, u.table); ok { // a smaller step may still fit
				heap.Push(h, nu)
			}
			continue
		}
		s.remove(u.table)
		s.place(u.table, u.to, g)
		if nu, ok := fittingUpgrade(s, u.table); ok {
			heap.Push(h, nu)
		}
	}
}

// fittingUpgrade is the best cost-per-byte step of table i to a larger option that fits its GPU's
// remaining HBM.
func fittingUpgrade(s *state, i int) (upgrade, bool) {
	c := s.choice[i]
	t := s.m.Tables[i]
	free := s.m.Topo.HBMBytes - s.hbm[c.gpu]
	best := upgrade{table: i, to: -1, ratio: -1}
	for k := c.opt + 1; k < len(t.Options); k++ {
		db := t.Options[k].HotBytes - t.Options[c.opt].HotBytes
		dc := t.Options[c.opt].Cost - t.Options[k].Cost
		if db > 0 && db <= free && dc > 0 && dc/float64(db) > best.ratio {
			best = upgrade{table: i, to: k, ratio: dc / float64(db)}
		}
	}
	return best, best.to >= 0
}

// snapshot saves the choices of the tables on the given GPUs (to undo a tentative move).
func snapshot(s *state, gpus ...int) []struct{ i, g, k int } {
	var out []struct{ i, g, k int }
	for i, c := range s.choice {
		for _, g := range gpus {
			if c.gpu == g {
				out = append(out, struct{ i, g, k int }{i, c.gpu, c.opt})
			}
		}
	}
	return out
}

func restore(s *state, saved []struct{ i, g, k int }) {
	for _, x := range saved {
		if s.choice[x.i].gpu >= 0 {
			s.remove(x.i)
		}
	}
	for _, x := range saved {
		s.place(x.i, x.k, x.g)
	}
}

// rebalance moves tables off the slowest GPU, re-choosing the splits of both GPUs involved
// (reoptGPU) after each tentative move, and keeps the move that lowers the pair's larger load the
// most; it stops when no move helps or the budget runs out.
func rebalance(ctx context.Context, s *state, budget time.Duration) {
	m := s.m
	G := m.Topo.NumGPUs()
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	for g := 0; g < G && ctx.Err() == nil; g++ {
		reoptGPU(s, g)
	}
	for ctx.Err() == nil {
		g, top := s.maxLoad()
		var tabs []int
		for i, c := range s.choice {
			if c.gpu == g {
				tabs = append(tabs, i)
			}
		}
		bestI, bestG, bestVal := -1, -1, top*(1-1e-9)
		for _, i := range tabs {
			for g2 := 0; g2 < G && ctx.Err() == nil; g2++ {
				if g2 == g || s.load[g2] >= bestVal {
					continue
				}
				saved := snapshot(s, g, g2)
				k := 0
				s.remove(i)
				for k < len(m.Tables[i].Options)-1 && !s.fits(i, k, g2) {
					k++
				}
				if s.fits(i, k, g2) {
					s.place(i, k, g2)
					reoptGPU(s, g)
					reoptGPU(s, g2)
					if v := max(s.load[g], s.load[g2]); v < bestVal {
						bestI, bestG, bestVal = i, g2, v
					}
				}
				restore(s, saved)
			}
		}
		if bestI < 0 {
			return
		}
		k := 0
		s.remove(bestI)
		for k < len(m.Tables[bestI].Options)-1 && !s.fits(bestI, k, bestG) {
			k++
		}
		s.place(bestI, k, bestG)
		reoptGPU(s, g)
		reoptGPU(s, bestG)
	}
}
