package dynamic

import (
	"cmp"
	"slices"

	"github.com/recgo/recgo/internal/errs"
)

// refTable is a brute-force model of Table's documented semantics (exact counting, full sorts, Go
// maps), used to check the real table row for row.
type refTable struct {
	cfg       Config
	rowOf     map[int64]int
	ids       []int64
	counts    []uint32
	last      []int64       // the step last seen, never wrapping
	pending   map[int64]int // sightings of IDs without a row (the sketch, exactly)
	free      []int32
	highWater int
	step      int64
}

func newRef(c Config) *refTable {
	c, err := c.withDefaults()
	if err != nil {
		panic(err)
	}
	return &refTable{cfg: c, rowOf: map[int64]int{}, pending: map[int64]int{},
		ids: make([]int64, c.MaxRows), counts: make([]uint32, c.MaxRows), last: make([]int64, c.MaxRows)}
}

func (m *refTable) release(rows []int) {
	slices.Sort(rows)
	for _, r := range rows {
		delete(m.rowOf, m.ids[r])
		m.ids[r], m.counts[r], m.last[r] = 0, 0, 0
	}
	for i := len(rows) - 1; i >= 0; i-- {
		m.free = append(m.free, int32(rows[i]))
	}
}

func (m *refTable) used(keep func(r int) bool) []int {
	var out []int
	for r := range m.highWater {
		if m.counts[r] != 0 && keep(r) {
			out = append(out, r)
		}
	}
	return out
}

func (m *refTable) resolve(ids []int64, train bool) ([]int64, error) {
	c := &m.cfg
	if train && !c.ManualStep {
		m.step++
		if c.MaxAge > 0 && m.step%int64(max(1, c.MaxAge/4)) == 0 {
			m.release(m.used(func(r int) bool { return m.step-m.last[r] > int64(c.MaxAge) }))
		}
	}
	rows := make([]int64, len(ids))
	def := int64(-1)
	if c.Default != nil {
		def = int64(c.MaxRows)
	}
	var stale []int // rows past MaxAge the sweep left: their IDs come back as new ones
	for i, id := range ids {
		if r, ok := m.rowOf[id]; ok && c.MaxAge > 0 && m.step-m.last[r] > int64(c.MaxAge) {
			if !train {
				rows[i] = def
				continue
			}
			stale = append(stale, r)
			delete(m.rowOf, id)
		}
		if r, ok := m.rowOf[id]; ok {
			if train {
				m.last[r] = m.step
				m.counts[r]++
			}
			rows[i] = int64(r)
			continue
		}
		if !train {
			rows[i] = def
			continue
		}
		rows[i] = -1
		if c.MinCount <= 1 {
			rows[i] = -2
		} else {
			m.pending[id] = min(255, m.pending[id]+1)
			if m.pending[id] >= c.MinCount {
				rows[i] = -2
			}
		}
	}
	if !train {
		return rows, nil
	}
	m.release(stale)
	for i, r := range rows {
		if r != -2 {
			continue
		}
		id := ids[i]
		if r, ok := m.rowOf[id]; ok {
			m.last[r] = m.step
			m.counts[r]++
			rows[i] = int64(r)
			continue
		}
		for len(m.free) == 0 && m.highWater == c.MaxRows {
			cands := m.used(func(r int) bool { return m.last[r] != m.step })
			if len(cands) == 0 {
				return nil, errs.Capacityf("full")
			}
			slices.SortStableFunc(cands, func(a, b int) int { // LRU: stalest first; LFU: rarest, then stalest
				if c.Policy == LFU && m.counts[a] != m.counts[b] {
					return cmp.Compare(m.counts[a], m.counts[b])
				}
				return cmp.Or(cmp.Compare(m.last[a], m.last[b]), a-b)
			})
			m.release(cands[:min(c.evictBatch(), len(cands))])
		}
		var row int
		if n := len(m.free); n > 0 {
			row, m.free = int(m.free[n-1]), m.free[:n-1]
		} else {
			row = m.highWater
			m.highWater++
		}
		m.rowOf[id] = row
		m.ids[row], m.last[row], m.counts[row] = id, m.step, 1
		if c.MinCount > 1 {
			m.counts[row] = uint32(m.pending[id])
		}
		rows[i] = int64(row)
	}
	return rows, nil
}
