package embedding

import (
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// updateChunk is the number of distinct rows one backward work item reduces and updates.
const updateChunk = 128

// grouped is a table's lookups grouped by destination row (RecIS Algorithm 1): the contributions to
// distinct ID u are entries start[u]..start[u+1] of off (output-gradient offsets) and scale.
type grouped struct {
	start []int64
	off   []int64
	scale []float32
	next  []int32 // scratch
}

// Backward merges the output gradient gradOut ([B, Width]) into one gradient per distinct row of
// each table, then either applies each table's fused optimizer to that row in the same pass
// (gradRows == nil) or writes the gradients out for a caller's optimizer: for each table t, its
// Unique(t) row indices into gradRows[t] (-1 for unresolved IDs) and Unique(t)·dim values into gradVals[t].
// Each distinct row is written exactly once, so work splits across goroutines without atomics.
func (c *Collection) Backward(ctx *Context, gradOut []float32, gradRows [][]int64, gradVals [][]float32) error {
	if err := c.rlock(); err != nil {
		return err
	}
	defer c.mu.RUnlock()
	if ctx == nil || len(ctx.tables) != len(c.Tables) {
		return errs.Invalidf("backward: context does not belong to this collection")
	}
	if len(gradOut) != ctx.B*c.width {
		return errs.Invalidf("backward: gradient has %d values, need %d (batch %d × width %d)", len(gradOut), ctx.B*c.width, ctx.B, c.width)
	}
	fused := gradRows == nil
	valBase := make([]int, len(c.Tables))
	var nVals int
	if !fused && (len(gradRows) != len(c.Tables) || len(gradVals) != len(c.Tables)) {
		return errs.Invalidf("backward: %d/%d gradient buffers for %d tables", len(gradRows), len(gradVals), len(c.Tables))
	}
	for i, t := range c.Tables {
		if fused && t.Opt.Kind == OptNone {
			return errs.Invalidf("backward: table %q has no fused optimizer; ask for gradients instead", t.Name)
		}
		valBase[i] = nVals
		nVals += ctx.Unique(i) * t.Dim
		if !fused && (len(gradRows[i]) != ctx.Unique(i) || len(gradVals[i]) != ctx.Unique(i)*t.Dim) {
			return errs.Invalidf("backward: table %q gradient buffers hold %d rows / %d values, need %d / %d",
				t.Name, len(gradRows[i]), len(gradVals[i]), ctx.Unique(i), ctx.Unique(i)*t.Dim)
		}
	}
	if fused {
		ctx.grads = resize(ctx.grads, nVals)
	}
	t0 := time.Now()
	type item struct{ t, lo, hi int }
	var items []item
	updaters := make([]rowUpdater, len(c.Tables))
	for i, t := range c.Tables {
		if fused {
			t.Step[0]++
			updaters[i] = newRowUpdater(t.Opt, t.Step[0])
		}
		for lo := 0; lo < ctx.Unique(i); lo += updateChunk {
			items = append(items, item{i, lo, min(lo+updateChunk, ctx.Unique(i))})
		}
	}
	parallel.ForEach(len(items), 1, func(j int) {
		it := items[j]
		t, tc := c.Tables[it.t], &ctx.tables[it.t]
		g := &tc.grp
		d := t.Dim
		var buf []float32
		if fused {
			buf = ctx.grads[valBase[it.t]+it.lo*d : valBase[it.t]+it.hi*d]
		} else {
			buf = gradVals[it.t][it.lo*d : it.hi*d]
			copy(gradRows[it.t][it.lo:], tc.rows[it.lo:it.hi])
		}
		// Phase 1: merge each distinct row's contributions (reads of the output gradient).
		kernels.SegmentReduce(buf, 0, d, d, gradOut, g.off, g.start[it.lo:it.hi+1], g.scale, nil)
		// Phase 2: one write per distinct row.
		if fused {
			updaters[it.t].applyRows(t, tc.rows[it.lo:it.hi], buf)
		}
	})
	since(StageUpdate, t0)
	return nil
}
