package embedding

import (
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
)

// This file holds the row-level primitives a shard owner needs when the requests for its rows
// arrive from other ranks (engine/shard): look up a list of distinct rows, and apply merged
// gradients to a list of distinct rows with the table's fused optimizer. A collection's own
// Forward and Backward reach the same kernels through its contexts.

// GatherRows copies the weights of each row in rows into dst (len(rows)·Dim values, row-major).
// Rows must be in [0, Rows()); duplicates are allowed (each is copied).
func (t *Table) GatherRows(rows []int64, dst []float32) error {
	d := t.Dim
	if len(dst) != len(rows)*d {
		return errs.Invalidf("table %q: gather of %d rows into %d values (need %d)", t.Name, len(rows), len(dst), len(rows)*d)
	}
	for _, r := range rows {
		if r < 0 || r >= t.rows {
			return errs.Invalidf("table %q: row %d out of range [0, %d)", t.Name, r, t.rows)
		}
	}
	streamRows(len(rows), len(rows), func(lo, hi int) {
		kernels.PrefetchRows(t.Data, rows[lo:hi], int64(t.Stride), d)
	}, func(lo, hi int) {
		for k, r := range rows[lo:hi] {
			copy(dst[(lo+k)*d:(lo+k+1)*d], t.Row(r))
		}
	})
	return nil
}

// ApplyRows takes one fused optimizer step on the table: the step counter advances by one (also
// when rows is empty, so every shard of a table counts the same steps) and each row in rows gets
// its gradient from grads (len(rows)·Dim values, row-major) with one write per row. Rows must be
// distinct and in [0, Rows()); −1 entries are skipped. The table must have a fused optimizer.
func (t *Table) ApplyRows(rows []int64, grads []float32) error {
	if t.Opt.Kind == OptNone {
		return errs.Invalidf("table %q: no fused optimizer to apply gradients with", t.Name)
	}
	if len(grads) != len(rows)*t.Dim {
		return errs.Invalidf("table %q: %d gradient values for %d rows (need %d)", t.Name, len(grads), len(rows), len(rows)*t.Dim)
	}
	for _, r := range rows {
		if r < -1 || r >= t.rows {
			return errs.Invalidf("table %q: row %d out of range [0, %d)", t.Name, r, t.rows)
		}
	}
	t.Step[0]++
	u := newRowUpdater(t.Opt, t.Step[0])
	u.applyRows(t, rows, grads)
	return nil
}

// Linear reports whether the table's fused update is linear in the gradient (SGD without weight
// decay, outside a merged-update scope), so that ApplyLinear may replace ApplyRows.
func (t *Table) Linear() bool { return linearUpdate(t.Opt) && t.pending == nil }

// ApplyLinear takes one step of the table's linear fused update (see Linear) straight from
// unmerged gradients: for each j in order, row rows[j] gets −lr times the Dim values of grads at
// offs[j]. Rows may repeat; their contributions add up, so the result equals ApplyRows on the
// gradients merged per row, up to float rounding, without the merge pass or its buffer. The step
// counter advances by one, as in ApplyRows.
func (t *Table) ApplyLinear(rows []int64, grads []float32, offs []int64) error {
	if !t.Linear() {
		return errs.Invalidf("table %q: its update (%v) is not linear in the gradient; merge the gradients and use ApplyRows", t.Name, t.Opt.Kind)
	}
	if len(offs) != len(rows) {
		return errs.Invalidf("table %q: %d gradient offsets for %d rows", t.Name, len(offs), len(rows))
	}
	d := int64(t.Dim)
	for j, r := range rows {
		if r < 0 || r >= t.rows {
			return errs.Invalidf("table %q: row %d out of range [0, %d)", t.Name, r, t.rows)
		}
		if o := offs[j]; o < 0 || o+d > int64(len(grads)) {
			return errs.Invalidf("table %q: gradient offset %d outside the %d values given", t.Name, o, len(grads))
		}
	}
	t.Step[0]++
	add := scaledAdder{dst: t.Data, src: grads, stride: t.Stride, dim: t.Dim, alpha: -float32(t.Opt.LR)}
	for j, r := range rows {
		add.add(r, offs[j])
	}
	add.flush()
	return nil
}
