package embedding

import (
	"slices"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
)

// This file holds the row-level primitives a shard owner needs when the requests for its rows
// arrive from other ranks (engine/shard): look up a list of distinct rows, and apply merged
// gradients to a list of distinct rows with the table's fused optimizer. A collection's own
// Forward and Backward reach the same kernels through its contexts.

// GatherRows copies the weights of each row in rows into dst (len(rows)·Dim values, row-major).
// Rows must be in [0, Rows()) or −1 (an ID without a row in a dynamic table), which reads zeros;
// duplicates are allowed (each is copied).
func (t *Table) GatherRows(rows []int64, dst []float32) error {
	d := t.Dim
	if len(dst) != len(rows)*d {
		return errs.Invalidf("table %q: gather of %d rows into %d values (need %d)", t.Name, len(rows), len(dst), len(rows)*d)
	}
	if err := t.checkRows(rows); err != nil {
		return err
	}
	streamRows(len(rows), len(rows), func(lo, hi int) {
		kernels.PrefetchRows(t.Data, rows[lo:hi], int64(t.Stride), d)
	}, func(lo, hi int) {
		for k, r := range rows[lo:hi] {
			if r < 0 {
				clear(dst[(lo+k)*d : (lo+k+1)*d])
				continue
			}
			copy(dst[(lo+k)*d:(lo+k+1)*d], t.Row(r))
		}
	})
	return nil
}

// checkRows returns an error naming the first of rows that is neither −1 nor in [0, Rows()).
func (t *Table) checkRows(rows []int64) error {
	for _, r := range rows {
		if r < -1 || r >= t.rows {
			return errs.Invalidf("table %q: row %d out of range [0, %d)", t.Name, r, t.rows)
		}
	}
	return nil
}

// trainableRows returns rows with every read-only row (at or above the trainable ones: a dynamic
// table's default row) replaced by −1, which the updates skip; rows itself when there is none.
func (t *Table) trainableRows(rows []int64) []int64 {
	if t.trainable == t.rows {
		return rows
	}
	out := rows
	for i, r := range rows {
		if r >= t.trainable {
			if &out[0] == &rows[0] {
				out = slices.Clone(rows)
			}
			out[i] = -1
		}
	}
	return out
}

// ApplyRows takes one fused optimizer step on the table: the step counter advances by one (also
// when rows is empty, so every shard of a table counts the same steps) and each row in rows gets
// its gradient from grads (len(rows)·Dim values, row-major) with one write per row. Rows must be
// distinct and in [0, Rows()); −1 entries and read-only rows (a dynamic table's default row) are
// skipped. The table must have a fused optimizer.
func (t *Table) ApplyRows(rows []int64, grads []float32) error {
	if t.Opt.Kind == OptNone {
		return errs.Invalidf("table %q: no fused optimizer to apply gradients with", t.Name)
	}
	if len(grads) != len(rows)*t.Dim {
		return errs.Invalidf("table %q: %d gradient values for %d rows (need %d)", t.Name, len(grads), len(rows), len(rows)*t.Dim)
	}
	if err := t.checkRows(rows); err != nil {
		return err
	}
	t.Step[0]++
	u := newRowUpdater(t.Opt, t.Step[0])
	u.applyRows(t, t.trainableRows(rows), grads)
	return nil
}

// Linear reports whether the table's fused update is linear in the gradient (SGD without weight
// decay, outside a merged-update scope), so that ApplyLinear may replace ApplyRows.
func (t *Table) Linear() bool { return linearUpdate(t.Opt) && t.pending == nil }

// ApplyLinear takes one step of the table's linear fused update (see Linear) straight from
// unmerged gradients: for each j in order, row rows[j] gets −lr times the Dim values of grads at
// offs[j] (−1 entries and read-only rows are skipped). Rows may repeat; their contributions add
// up, so the result equals ApplyRows on the gradients merged per row, up to float rounding, without
// the merge pass or its buffer. The step counter advances by one, as in ApplyRows.
func (t *Table) ApplyLinear(rows []int64, grads []float32, offs []int64) error {
	if !t.Linear() {
		return errs.Invalidf("table %q: its update (%v) is not linear in the gradient; merge the gradients and use ApplyRows", t.Name, t.Opt.Kind)
	}
	if len(offs) != len(rows) {
		return errs.Invalidf("table %q: %d gradient offsets for %d rows", t.Name, len(offs), len(rows))
	}
	d := int64(t.Dim)
	if err := t.checkRows(rows); err != nil {
		return err
	}
	for _, o := range offs {
		if o < 0 || o+d > int64(len(grads)) {
			return errs.Invalidf("table %q: gradient offset %d outside the %d values given", t.Name, o, len(grads))
		}
	}
	t.Step[0]++
	add := scaledAdder{dst: t.Data, src: grads, stride: t.Stride, dim: t.Dim, alpha: -float32(t.Opt.LR)}
	for j, r := range rows {
		if r >= 0 && r < t.trainable { // −1: an ID without a row; above: read-only rows
			add.add(r, offs[j])
		}
	}
	add.flush()
	return nil
}
