package embedding

import (
	"slices"

	"github.com/recgo/recgo/internal/errs"
)

// TableDedup is one table's lookups deduplicated ahead of the forward, by the input pipeline's
// FORMAT stage: over the values of Features (in that order, each feature's values in batch order),
// Uniq holds the distinct IDs in first-seen order and Inv, per lookup, its index into Uniq — what
// [Collection.Forward] would compute itself.
type TableDedup struct {
	Table    string
	Features []string
	Uniq     []int64
	Inv      []int32
}

// Deduper deduplicates ID lists in first-seen order with the collection's hash index, reusing its
// memory across calls. It is not safe for concurrent use.
type Deduper struct{ x idIndex }

// Dedup appends the distinct IDs of ids (first-seen order) to uniq and writes each ID's index into
// uniq to inv (len(ids)); it returns uniq.
func (d *Deduper) Dedup(ids []int64, uniq []int64, inv []int32) []int64 {
	x := &d.x
	x.reset(len(ids))
	defer x.clear()
	base := len(uniq)
	for p, id := range ids {
		u, fresh := x.find(id, int32(len(uniq)-base))
		if fresh {
			uniq = append(uniq, id)
			if 2*(len(uniq)-base) > len(x.slots) {
				x.grow(uniq[base:])
			}
		}
		inv[p] = u
	}
	x.lastDistinct = len(uniq) - base
	return uniq
}

// PreparedDedup is a batch's dedup for the tables of a collection it describes, in table order (see
// [Collection.MatchDedup]); a [Batch] that carries one skips the forward's own deduplication for
// those tables.
type PreparedDedup struct {
	tables []*TableDedup // nil where the table deduplicates itself
}

// MatchDedup orders a pipeline's per-table dedup results by this collection's tables. A table the
// pipeline did not deduplicate, or deduplicated over other features (another collection's table of
// the same name), is left to deduplicate itself, as is any table whose prepared dedup no longer
// matches the batch at forward time (an ID changed in place): a prepared batch is a valid batch for
// every collection, whatever the pipeline prepared it for.
func (c *Collection) MatchDedup(ds []TableDedup) *PreparedDedup {
	p := &PreparedDedup{tables: make([]*TableDedup, len(c.Tables))}
	for ti, t := range c.Tables {
		var names []string
		for _, f := range c.features[ti] {
			names = append(names, c.Features[f].Name)
		}
		for i := range ds {
			if ds[i].Table == t.Name && slices.Equal(ds[i].Features, names) {
				p.tables[ti] = &ds[i]
			}
		}
	}
	return p
}

// Verify checks the dedup against the lookups it describes, given as the values of each of its
// Features in order: every lookup's distinct ID equals its value, in first-seen order.
func (d *TableDedup) Verify(values [][]int64) error {
	n := 0
	for _, v := range values {
		n += len(v)
	}
	if len(d.Inv) != n {
		return errs.Invalidf("prepared dedup: table %q has %d lookups in the batch, %d prepared", d.Table, n, len(d.Inv))
	}
	p, next := 0, int32(0)
	for _, vals := range values {
		for _, id := range vals {
			u := d.Inv[p]
			if u < 0 || u > next || int(u) >= len(d.Uniq) || d.Uniq[u] != id {
				return errs.Invalidf("prepared dedup: table %q lookup %d does not match the batch (was it modified?)", d.Table, p)
			}
			if u == next {
				next++
			}
			p++
		}
	}
	if int(next) != len(d.Uniq) {
		return errs.Invalidf("prepared dedup: table %q lists %d distinct IDs, the batch has %d", d.Table, len(d.Uniq), next)
	}
	return nil
}

// usePrepared fills table ti's context from the batch's prepared dedup after checking it against
// the batch (TableDedup.Verify); it reports false when the batch carries none for the table or the
// batch no longer matches it (the table then deduplicates itself).
func (c *Collection) usePrepared(ti int, b Batch, B int, featKey []int, offsets []int64, tc *tableCtx) bool {
	if b.Dedup == nil || b.Dedup.tables[ti] == nil {
		return false
	}
	d := b.Dedup.tables[ti]
	values := make([][]int64, 0, len(c.features[ti]))
	for _, f := range c.features[ti] {
		k := featKey[f]
		values = append(values, b.Values[offsets[k*B]:offsets[(k+1)*B]])
	}
	if d.Verify(values) != nil {
		return false
	}
	copy(tc.inv, d.Inv)
	tc.uniq = append(tc.uniq[:0], d.Uniq...)
	return true
}

// checkAll range-checks distinct IDs.
func (s RangeSource) checkAll(ids []int64) error {
	for _, id := range ids {
		if uint64(id) >= uint64(s.Rows) {
			return s.check(id)
		}
	}
	return nil
}
