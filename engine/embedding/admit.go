package embedding

import (
	"sync/atomic"

	"github.com/recgo/recgo/internal/parallel"
)

// RoomChecker is a RowSource that tells, changing nothing, whether a training Resolve of ids would
// fail for want of rows (a dynamic table's CapacityError).
type RoomChecker interface {
	RowSource
	// CheckRoom returns the error a training Resolve of ids would fail with for want of rows.
	CheckRoom(ids []int64) error
}

// admits reports whether a training Resolve may change the table's row source (admit or evict IDs,
// move its clock): any source but a RangeSource.
func (t *Table) admits() bool {
	_, ok := t.Source.(RangeSource)
	return !ok
}

// checkFixed range-checks the IDs of fixed table ti's features in the batch.
func (c *Collection) checkFixed(ti int, b Batch, B int, featKey []int, offsets []int64) error {
	fixed, _ := c.Tables[ti].fixedRange()
	for _, f := range c.features[ti] {
		k := featKey[f]
		for _, id := range b.Values[offsets[k*B]:offsets[(k+1)*B]] {
			if uint64(id) >= uint64(fixed.Rows) {
				return fixed.check(id)
			}
		}
	}
	return nil
}

// admitDeferred resolves the tables a training forward's dedupTable deferred (those whose source
// admits IDs) once every other table of the batch passed its checks: first the IDs of the fixed
// tables in check (nil: none; the sequence forward dedups them later, beside its gather), then, with
// several deferred tables, each one's room (RoomChecker). So a refused batch admits, evicts and
// moves the clock of no table: a fixed table's out-of-range ID, or a second dynamic table's
// CapacityError, used to leave the first dynamic table's admissions in place. after (nil: none) runs
// on each table once it is resolved.
func (c *Collection) admitDeferred(ctx *Context, b Batch, B int, featKey []int, offsets []int64, keep bool,
	check []int, after func(ti int)) error {
	var deferred []int
	for ti := range c.Tables {
		if ctx.tables[ti].deferred {
			deferred = append(deferred, ti)
		}
	}
	if len(deferred) == 0 {
		return nil
	}
	for _, ti := range check {
		if err := c.checkFixed(ti, b, B, featKey, offsets); err != nil {
			return err
		}
	}
	if len(deferred) > 1 { // one table's Resolve checks its own room before it changes anything
		for _, ti := range deferred {
			if rc, ok := c.Tables[ti].Source.(RoomChecker); ok {
				if err := rc.CheckRoom(ctx.tables[ti].uniq); err != nil {
					return wrapTable(c.Tables[ti], err)
				}
			}
		}
	}
	var firstErr atomic.Pointer[error]
	parallel.ForEach(len(deferred), 1, func(i int) {
		ti := deferred[i]
		if err := c.resolveTable(ti, b, B, featKey, offsets, ctx, true, keep); err != nil {
			firstErr.CompareAndSwap(nil, &err)
			return
		}
		if after != nil {
			after(ti)
		}
	})
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return nil
}
