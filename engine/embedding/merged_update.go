package embedding

import (
	"sync"

	"github.com/recgo/recgo/internal/errs"
)

// pendingUpdate is a table's merged gradients accumulated during a merged-update scope (see
// [Collection.BeginMergedUpdate]): per storage row, the sum of the merged gradients the scope's
// fused backwards handed it.
type pendingUpdate struct {
	mu        sync.Mutex
	slot      map[int64]int32 // row → its index in rows
	rows      []int64
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
// skipped). Safe for concurrent use.
func (p *pendingUpdate) add(rows []int64, g []float32, d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range rows {
		if r < 0 {
			continue
		}
		src := g[i*d : (i+1)*d]
		if s, ok := p.slot[r]; ok {
			dst := p.grads[int(s)*d:][:d]
			for k, v := range src {
				dst[k] += v
			}
			continue
		}
		p.slot[r] = int32(len(p.rows))
		p.rows = append(p.rows, r)
		p.grads = append(p.grads, src...)
	}
}

// BeginMergedUpdate opens a merged-update scope over the collection's tables that have a fused
// optimizer: until [Collection.EndMergedUpdate], a fused backward over them — this collection's
// and those of sequence collections over its tables — updates no row and leaves the step counter
// alone; it adds its merged gradient of each row into the table's pending update instead. So a
// step that uses a table both pooled and as a sequence takes one optimizer step over the summed
// gradient (what a torch optimizer does with the two gradients accumulated into one parameter),
// rather than one update per backward. Forwards inside the scope read the rows as they were when
// it opened. It waits for running passes and fails when a scope is already open.
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
		if err := t.ApplyRows(p.rows, p.grads); err != nil && first == nil {
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
