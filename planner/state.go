package planner

import (
	"container/heap"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
)

// choice places table i on GPU gpu with option opt of m.Tables[i].Options.
type choice struct{ gpu, opt int }

// state tracks per-GPU load and memory while a heuristic builds a placement.
type state struct {
	m      *cost.Model
	load   []float64 // model cost per GPU
	hbm    []int64
	host   []int64 // per node
	choice []choice
}

func newState(m *cost.Model) *state {
	s := &state{m: m, load: make([]float64, m.Topo.NumGPUs()), hbm: make([]int64, m.Topo.NumGPUs()),
		host: make([]int64, m.Topo.Nodes), choice: make([]choice, len(m.Tables))}
	for i := range s.choice {
		s.choice[i] = choice{-1, -1}
	}
	return s
}

func (s *state) opt(i, k int) cost.Option { return s.m.Tables[i].Options[k] }

// fits reports whether option k of table i fits GPU g's remaining memory.
func (s *state) fits(i, k, g int) bool {
	o := s.opt(i, k)
	return s.hbm[g]+o.HotBytes <= s.m.Topo.HBMBytes && s.host[s.m.Topo.Node(g)]+o.ColdBytes <= s.m.Topo.HostBytes
}

// packingHint ends a greedy strategy's capacity error: the tables placed before this one took the
// room in the order the strategy packs them, and another order (the MILP searches them) may fit.
const packingHint = "; the tables placed before it took that room in this strategy's order, and the milp " +
	"strategy, which searches the placements, may still fit them all"

// noRoom is the ErrCapacity error for table i, which fits no GPU at any of its options (what names
// the strategy). It says whether the GPU with the most room left could hold the table's bytes split
// another way: the options are the profile's CDF steps only, so a split between two steps may fit.
func (s *state) noRoom(what string, i int) error {
	t := s.m.Tables[i]
	need := t.Options[0].HotBytes + t.Options[0].ColdBytes
	best, bestHBM, bestHost, bestG := int64(-1), int64(0), int64(0), 0
	for g := range s.hbm {
		hbm, host := s.m.Topo.HBMBytes-s.hbm[g], s.m.Topo.HostBytes-s.host[s.m.Topo.Node(g)]
		if hbm+host > best {
			best, bestHBM, bestHost, bestG = hbm+host, hbm, host, g
		}
	}
	if best >= need {
		return errs.Capacityf("%s: table %q (%s) fits no GPU at any of its %d splits, the profile's CDF steps; GPU %d "+
			"has %s of HBM and %s of its node's host memory left, so a split between two steps may fit (profile with "+
			"more CDF steps, or give the GPUs more memory)%s", what, t.Name, cost.FormatBytes(need), len(t.Options), bestG,
			cost.FormatBytes(bestHBM), cost.FormatBytes(bestHost), packingHint)
	}
	return errs.Capacityf("%s: table %q needs %s of HBM and host memory together, more than any GPU has left (the "+
		"most: GPU %d, %s of HBM and %s of its node's host memory)%s", what, t.Name, cost.FormatBytes(need), bestG,
		cost.FormatBytes(bestHBM), cost.FormatBytes(bestHost), packingHint)
}

// overCapacity reports whether some GPU's HBM or some node's host memory holds more than its budget.
func (s *state) overCapacity() bool {
	for g, b := range s.hbm {
		if b > s.m.Topo.HBMBytes {
			return true
		}
		if s.host[s.m.Topo.Node(g)] > s.m.Topo.HostBytes {
			return true
		}
	}
	return false
}

func (s *state) place(i, k, g int) {
	o := s.opt(i, k)
	s.load[g] += o.Cost
	s.hbm[g] += o.HotBytes
	s.host[s.m.Topo.Node(g)] += o.ColdBytes
	s.choice[i] = choice{g, k}
}

func (s *state) remove(i int) {
	c := s.choice[i]
	o := s.opt(i, c.opt)
	s.load[c.gpu] -= o.Cost
	s.hbm[c.gpu] -= o.HotBytes
	s.host[s.m.Topo.Node(c.gpu)] -= o.ColdBytes
	s.choice[i] = choice{-1, -1}
}

func (s *state) maxLoad() (int, float64) {
	best, arg := -1.0, 0
	for g, l := range s.load {
		if l > best {
			best, arg = l, g
		}
	}
	return arg, best
}

func (s *state) assignments() []cost.Assignment {
	out := make([]cost.Assignment, len(s.choice))
	for i, c := range s.choice {
		out[i] = cost.Assignment{GPU: c.gpu, Hot: s.opt(i, c.opt).Hot}
	}
	return out
}

// allHot returns the option index holding the whole table in HBM, or -1 when it cannot fit one GPU.
func allHot(t cost.Table) int {
	k := len(t.Options) - 1
	if t.Options[k].Hot == t.Rows {
		return k
	}
	return -1
}

// loadHeap orders GPUs by load (lowest first, then by rank) for packing: [loadHeap.leastFitting]
// finds the least-loaded GPU with room in O(log G) when the first GPUs fit, instead of a scan.
type loadHeap struct {
	s *state
	g []int
}

func newLoadHeap(s *state) *loadHeap {
	h := &loadHeap{s: s, g: make([]int, len(s.load))}
	for i := range h.g {
		h.g[i] = i
	}
	heap.Init(h)
	return h
}

func (h *loadHeap) Len() int { return len(h.g) }
func (h *loadHeap) Less(i, j int) bool {
	a, b := h.g[i], h.g[j]
	return h.s.load[a] < h.s.load[b] || (h.s.load[a] == h.s.load[b] && a < b)
}
func (h *loadHeap) Swap(i, j int) { h.g[i], h.g[j] = h.g[j], h.g[i] }
func (h *loadHeap) Push(x any)    { h.g = append(h.g, x.(int)) }
func (h *loadHeap) Pop() any {
	x := h.g[len(h.g)-1]
	h.g = h.g[:len(h.g)-1]
	return x
}

// place puts option k of table i on the least-loaded GPU with room and reports whether one had it.
func (h *loadHeap) place(i, k int) bool {
	var skipped []int
	best := -1
	for h.Len() > 0 {
		g := heap.Pop(h).(int)
		if h.s.fits(i, k, g) {
			best = g
			break
		}
		skipped = append(skipped, g)
	}
	if best >= 0 {
		h.s.place(i, k, best)
		heap.Push(h, best)
	}
	for _, g := range skipped {
		heap.Push(h, g)
	}
	return best >= 0
}
