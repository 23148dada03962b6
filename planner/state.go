package planner

import (
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
