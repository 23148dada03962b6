package embedding

import (
	"sync"

	"github.com/recgo/recgo/internal/errs"
)

// pendingUpdate is a table's merged gradients accumulated during a merged-update scope (see
// [Collection.BeginMergedUpdate]): per storage row, the sum of the merged gradients the scope's
// fused backwards handed it. A dynamic table's rows pass to other IDs as it admits and evicts inside
// the scope, so each row's sum also keeps the ID it is for and the eviction count at which its
// backward checked that the ID held the row: a sum whose row was freed since is dropped (before, the
// evicted ID's gradient and optimizer step went to the row's new ID at the scope's end).
type pendingUpdate struct {
	mu        sync.Mutex
	src       EvictingSource  // the table's, when its rows can pass to other IDs (nil: fixed rows)
	slot      map[int64]int32 // row → its index in rows
	rows      []int64
	ids       []int64   // the ID each row's sum is for (with src)
	since     []int64   // src's eviction count when that ID was last seen holding the row
	grads     []float32 // len(rows)·dim
	backwards int       // fused backwards over the table in the scope
}

// took counts a fused backward over the table (with or without rows: the step it owes is taken
// at the scope's end, as a backward outside a scope steps every used table).
func (p *pendingUpdate) took() {
	p.mu.Lock()
	p.backwards++
	p.mu.Unlock()
}

// add sums the gradients g (len(rows)·d values) of distinct rows into the pending update (−1 rows
// skipped): rows[i] held ids[i] at eviction count since (the backward's recheck). A row whose sum
// so far is for an incarnation freed since starts a new sum. Safe for concurrent use.
func (p *pendingUpdate) add(ids, rows []int64, g []float32, d int, since int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range rows {
		if r < 0 {
			continue
		}
		src := g[i*d : (i+1)*d]
		if s, ok := p.slot[r]; ok {
			dst := p.grads[int(s)*d:][:d]
			if p.src != nil && p.since[s] != since && p.freed(int(s)) {
				copy(dst, src)
				p.ids[s], p.since[s] = ids[i], since
				continue
			}
			for k, v := range src {
				dst[k] += v
			}
			continue
		}
		p.slot[r] = int32(len(p.rows))
		p.rows = append(p.rows, r)
		p.grads = append(p.grads, src...)
		if p.src != nil {
			p.ids = append(p.ids, ids[i])
			p.since = append(p.since, since)
		}
	}
}

// freed reports whether sum s's row was freed since its ID was seen holding it.
func (p *pendingUpdate) freed(s int) bool {
	row := []int64{p.rows[s]}
	p.src.Recheck(p.ids[s:s+1], row, p.since[s])
	return row[0] < 0
}

// live returns the rows to update (−1 for those freed since their sums' backwards) and their sums.
func (p *pendingUpdate) live() ([]int64, []float32) {
	if p.src == nil {
		return p.rows, p.grads
	}
	bySince := map[int64][]int{} // one Recheck per eviction count (one per backward, at most)
	for s, c := range p.since {
		bySince[c] = append(bySince[c], s)
	}
	for since, sums := range bySince {
		ids, rows := make([]int64, len(sums)), make([]int64, len(sums))
		for j, s := range sums {
			ids[j], rows[j] = p.ids[s], p.rows[s]
		}
		p.src.Recheck(ids, rows, since)
		for j, s := range sums {
			p.rows[s] = rows[j]
		}
	}
	return p.rows, p.grads
}

// BeginMergedUpdate opens a merged-update scope over the collection's tables that have a fused
// optimizer: until [Collection.EndMergedUpdate], a fused backward over them — this collection's
// and those of sequence collections over its tables — updates no row and leaves the step counter
// alone; it adds its merged gradient of each row into the table's pending update instead. So a
// step that uses a table both pooled and as a sequence takes one optimizer step over the summed
// gradient (what a torch optimizer does with the two gradients accumulated into one parameter),
// rather than one update per backward. Forwards inside the scope read the weights as they were when
// it opened (a dynamic table still admits and evicts IDs). It waits for running passes and fails
// when a scope is already open.
func (c *Collection) BeginMergedUpdate() error {
	unlock, err := c.lock(true)
	if err != nil {
		return err
	}
	defer unlock()
	for _, t := range c.Tables {
		if t.pending != nil {
			return errs.Invalidf("merged update: a scope is already open on table %q", t.Name)
		}
	}
	for _, t := range c.Tables {
		if t.Opt.Kind != OptNone {
			t.pending = &pendingUpdate{slot: map[int64]int32{}}
			t.pending.src, _ = t.Source.(EvictingSource)
		}
	}
	return nil
}

// EndMergedUpdate closes the scope: each table some fused backward used in it takes one optimizer
// step over the per-row sums of their gradients (its step counter advances once); a table no
// backward used is left as it was. It waits for running passes; without an open scope it does nothing.
func (c *Collection) EndMergedUpdate() error {
	unlock, err := c.lock(true)
	if err != nil {
		return err
	}
	defer unlock()
	var first error
	for _, t := range c.Tables {
		p := t.pending
		t.pending = nil
		if p == nil || p.backwards == 0 {
			continue
		}
		rows, grads := p.live()
		if err := t.ApplyRows(rows, grads); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// MergedUpdateOpen reports whether a merged-update scope is open on the collection.
func (c *Collection) MergedUpdateOpen() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, t := range c.Tables {
		if t.pending != nil {
			return true
		}
	}
	return false
}
