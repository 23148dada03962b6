package embedding

import "github.com/recgo/recgo/internal/errs"

// RowSource resolves a table's raw IDs to rows of its storage.
//
// A fixed-size table (see [RangeSource]) maps id → row by identity after a range check. A
// dynamic-ID table (engine/dynamic) maps arbitrary int64 IDs to rows it allocates on demand.
// The collection calls Resolve once per table per forward pass, on the batch's distinct IDs of that
// table (after deduplication, in first-seen order), from one goroutine at a time per table;
// different tables may be resolved concurrently, so a RowSource shared by several tables must be
// safe for concurrent use. Rows returned must be < len(data)/stride of the table's storage; the
// collection checks this and fails the batch otherwise.
type RowSource interface {
	// Resolve writes, for each id, its storage row into rows (len(rows) == len(ids)), or -1 when the id has no
	// row (an unseen id in eval mode, or one not yet admitted): such an id pools as zeros and gets no update.
	Resolve(ids []int64, rows []int64, train bool) error
}

// EvictingSource is a RowSource whose rows can pass to other IDs between a forward and its backward
// (a dynamic table evicts rows to admit new IDs: under gradient accumulation a second training
// forward may take a row the first one looked up). Backward asks it which rows still belong to
// their IDs before it updates them.
type EvictingSource interface {
	RowSource
	// Evictions counts the rows freed so far: unchanged since a Resolve, every row it gave out
	// still belongs to its ID.
	Evictions() int64
	// Recheck sets rows[i] to −1 where ids[i] no longer holds rows[i] as it did when resolved, since
	// being the Evictions count then: the row was freed since (its gradient is dropped, as the ID's
	// row is gone), also when the ID came back to the same row (re-admitted and re-initialised).
	Recheck(ids, rows []int64, since int64)
}

// DefaultingSource is a RowSource whose eval-mode Resolve gives the IDs without a row a default row
// (a dynamic table with a default vector), which a training forward never hands out.
type DefaultingSource interface {
	RowSource
	// DefaultRow is the row eval lookups give IDs without one, or −1 without a default.
	DefaultRow() int64
}

// ResolveRecompute resolves ids as a forward's recomputation in backward (activation checkpointing)
// does: the rows the training forward it recomputes read. Nothing is counted, admitted or stamped and
// the clock stays (an eval Resolve: the first forward counted the batch), and an ID without a row
// reads −1 (zeros) as in that training forward, never a DefaultingSource's eval default row.
func ResolveRecompute(s RowSource, ids, rows []int64) error {
	if err := s.Resolve(ids, rows, false); err != nil {
		return err
	}
	if d, ok := s.(DefaultingSource); ok {
		if def := d.DefaultRow(); def >= 0 {
			for i, r := range rows {
				if r == def {
					rows[i] = -1
				}
			}
		}
	}
	return nil
}

// RangeSource is the RowSource of a fixed-size table: ID i is row i, for 0 ≤ i < Rows.
type RangeSource struct {
	Table string // the table's name, for error messages
	Rows  int64
}

// Resolve implements RowSource: it copies ids to rows after checking each is in [0, Rows).
func (s RangeSource) Resolve(ids []int64, rows []int64, train bool) error {
	if len(rows) != len(ids) {
		return errs.Invalidf("table %q: %d rows for %d ids", s.Table, len(rows), len(ids))
	}
	for i, id := range ids {
		if err := s.check(id); err != nil {
			return err
		}
		rows[i] = id
	}
	return nil
}

func (s RangeSource) check(id int64) error {
	if id < 0 || id >= s.Rows {
		return errs.Invalidf("table %q: id %d out of range [0, %d) (fold raw IDs into range with the FeatureEngine, "+
			"e.g. Feature(...).hash().mod(%d), or give the table a larger num_embeddings)", s.Table, id, s.Rows, s.Rows)
	}
	return nil
}
