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
