package embedding

import (
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// ownedMarkBudget bounds the bytes of the ownership bitmaps one table's ownedSGD plan may hold
// (parts−1 bitmaps of rows/8 bytes); a table past it gets fewer parts.
const ownedMarkBudget = 16 << 20

// ownedSample is the stride of the lookups ownedSGD.balance samples; ownedSideCost the extra cost
// of a lookup summed into a side buffer relative to one applied in place; balanceRounds the most
// times balance re-samples under the cuts it moved. The cost and the rounds were fitted on
// BenchmarkSequenceStep by timing each part: a side lookup costs about four times an in-place one
// there (the in-place ones of the first part are mostly the batch's hot, cached rows).
const (
	ownedSample   = 8
	ownedSideCost = 3
	balanceRounds = 3
)

// bitsAhead is how many lookups ahead of its tests a part prefetches the bitmaps' words.
const bitsAhead = 64

// ownedSGD is the backward of a table whose update is linear (SGD without weight decay): each lookup's
// gradient row, times −lr, is added to its table row, so no merge is needed, only one writer per row.
// The table's lookups (their rows, in the order of its features) are cut into contiguous parts, and a
// bitmap per part (but the last) marks the rows the part looks up. In backward part p applies, in
// place and in order, its lookups of rows that no earlier part looks up (it owns those rows: no other
// part writes them in that phase), and sums its lookups of rows an earlier part also looks up into a
// side buffer, one slot per row (an idIndex maps rows to slots). Every part reads its stretch of the
// gradient once, front to back, and the parts may run in any order or at once. Then finish adds the
// side buffers to their rows, part by part. The result equals the merged update up to float
// rounding and depends on the cut, which depends on the batch alone, not on scheduling.
//
// For a fixed table (ID i is row i) the forward plans this straight from the batch's IDs and does
// not deduplicate at all (planOwned): deduplication costs a random access per lookup into a slot
// array of the table's size, on the forward's critical path, where the bitmaps (rows/8 bytes each)
// stay in cache, and the rows shared between parts, the ones side buffers hold, are the batch's hot
// rows: few, and cached. Other tables are planned from their deduplicated rows (planOwnedFromDedup).
type ownedSGD struct {
	t      *Table
	segs   []gradSeg
	ids    []int64     // the table's lookups, in the order of its features (a copy of the batch's)
	cuts   []int       // parts+1 lookup positions
	marks  [][]uint64  // per part but the last, its rows' bits
	marked []int       // cuts of the marks now set (to clear them before the next plan)
	sides  []ownedSide // per part but the first
	alpha  float32
}

// ownedSide is a part's side buffer: the rows it shares with earlier parts, their slots (index) and
// per slot the sum of the part's gradient rows for it.
type ownedSide struct {
	index idIndex
	rows  []int64
	acc   []float32
}

// ownedEligible reports whether table ti's sequence backward can be planned by ownedSGD: a fixed
// table where ID i is row i, with a linear update outside a merged-update scope, deduplication on and
// no dedup prepared with the batch.
func (s *SequenceCollection) ownedEligible(ti int, b Batch) bool {
	c := s.view
	t := c.Tables[ti]
	_, dense := t.fixedRange()
	return dense && s.linear(t) && !c.opts.NoDedup && b.Dedup == nil && t.rows > 0
}

// ownedParts is the number of parts an ownedSGD plan of n lookups over a table of rows rows uses on
// workers threads.
func ownedParts(n int, rows int64, workers int) int {
	parts := max(1, min(workers, n/sgdPartMin))
	if words := (rows + 63) / 64; words > 0 {
		parts = min(parts, 1+int(ownedMarkBudget/8/words))
	}
	return max(parts, 1)
}

// planOwned fills table ti's ownedSGD plan from the batch: it range-checks and copies the table's
// lookups, cuts them into up to workers parts and marks each part's rows (but the last part's). It
// runs in the forward, beside the gathers.
func (s *SequenceCollection) planOwned(ti int, b Batch, B int, ctx *Context, base []int64, workers int) error {
	c := s.view
	t, tc := c.Tables[ti], &ctx.tables[ti]
	src, _ := t.fixedRange()
	o := s.startOwned(ti, ctx, base)
	o.ids = o.ids[:0]
	for _, f := range c.features[ti] {
		k := ctx.featKey[f]
		vals := b.Values[ctx.offsets[k*B]:ctx.offsets[(k+1)*B]]
		if err := src.checkAll(vals); err != nil {
			o.ids = o.ids[:0]
			return err
		}
		o.ids = append(o.ids, vals...)
	}
	o.cutAndMark(t.rows, workers)
	tc.lazy, tc.planned = true, true
	return nil
}

// planOwnedFromDedup fills table ti's ownedSGD plan from the rows its deduplication resolved (any
// row source); the table stays deduplicated.
func (s *SequenceCollection) planOwnedFromDedup(ti int, ctx *Context, base []int64, workers int) {
	t, tc := s.view.Tables[ti], &ctx.tables[ti]
	o := s.startOwned(ti, ctx, base)
	o.ids = resize(o.ids, len(tc.inv))
	for i, x := range tc.inv {
		o.ids[i] = tc.rows[x]
	}
	o.cutAndMark(t.rows, workers)
	tc.planned = true
}

// startOwned readies table ti's plan for a new batch: the last plan's marks cleared, the table's
// rate, and each feature's run of the lookups with where its gradient rows start.
func (s *SequenceCollection) startOwned(ti int, ctx *Context, base []int64) *ownedSGD {
	c := s.view
	t, o := c.Tables[ti], &ctx.tables[ti].own
	o.clearMarks()
	o.t, o.alpha = t, -float32(t.Opt.LR)
	B := (len(ctx.offsets) - 1) / len(c.Features)
	o.segs = o.segs[:0]
	p := 0
	for _, f := range c.features[ti] {
		k := ctx.featKey[f]
		m := int(ctx.offsets[(k+1)*B] - ctx.offsets[k*B])
		o.segs = append(o.segs, gradSeg{p, m, base[k]})
		p += m
	}
	return o
}

// cutAndMark cuts the plan's lookups into up to workers parts of about equal cost and marks each
// part's rows (but the last part's) in its bitmap of a table of rows rows.
func (o *ownedSGD) cutAndMark(rows int64, workers int) {
	n := len(o.ids)
	parts := ownedParts(n, rows, workers)
	o.cuts = resize(o.cuts, parts+1)
	for p := range o.cuts {
		o.cuts[p] = n * p / parts
	}
	o.mark(int((rows + 63) / 64))
	for r := 0; r < balanceRounds && o.balance(); r++ {
		o.remark()
	}
	for len(o.sides) < parts {
		o.sides = append(o.sides, ownedSide{})
	}
}

// mark sets, per part but the last, the bits of its rows (bitmaps of words words).
func (o *ownedSGD) mark(words int) {
	parts := o.parts()
	for len(o.marks) < parts-1 {
		o.marks = append(o.marks, nil)
	}
	for p := 0; p < parts-1; p++ {
		if len(o.marks[p]) != words {
			o.marks[p] = make([]uint64, words)
		}
		setBits(o.marks[p], o.ids[o.cuts[p]:o.cuts[p+1]])
	}
	o.marked = append(o.marked[:0], o.cuts...)
}

// balance re-cuts the parts so they cost about the same, from a sample of each part's lookups under
// the equal cut: a lookup of a row an earlier part also looks up (summed into a side buffer, then
// added again) costs 1+ownedSideCost times one applied in place. Hot rows are seen early, so later
// parts share more of their rows and get fewer lookups. It reports whether the cuts moved (the marks
// must then be redone). A part's sharing grows as its start moves later, so one round, sampled under
// the equal cut, underrates the later parts: the caller runs it again under the moved cuts (up to
// balanceRounds) until they stay put. The cut depends on the batch alone.
func (o *ownedSGD) balance() bool {
	parts := o.parts()
	if parts < 2 {
		return false
	}
	density := make([]float64, parts)
	var total float64
	for p := range parts {
		lo, hi := o.cuts[p], o.cuts[p+1]
		shared, seen := 0, 0
		for j := lo; j < hi; j += ownedSample {
			id := o.ids[j]
			if id < 0 {
				continue
			}
			for _, m := range o.marks[:p] {
				if m[id>>6]&(1<<(id&63)) != 0 {
					shared++
					break
				}
			}
			seen++
		}
		density[p] = 1 + ownedSideCost*float64(shared)/float64(max(seen, 1))
		total += density[p] * float64(hi-lo)
	}
	// walk the piecewise-constant cost, cutting at each parts-th of the total
	moved := false
	cuts := append([]int(nil), o.cuts...)
	q, acc := 1, 0.0
	for p := 0; p < parts && q < parts; p++ {
		lo, hi := cuts[p], cuts[p+1]
		for q < parts && acc+density[p]*float64(hi-lo) >= total*float64(q)/float64(parts) {
			at := lo + int((total*float64(q)/float64(parts)-acc)/density[p])
			at = min(max(at, o.cuts[q-1]), cuts[parts])
			moved = moved || at != o.cuts[q]
			o.cuts[q] = at
			q++
		}
		acc += density[p] * float64(hi-lo)
	}
	return moved
}

// remark updates the bitmaps to the cuts balance moved: a part whose range only grew (the first part,
// as a rule) marks the lookups it gained; any other part's bitmap is cleared and marked again.
func (o *ownedSGD) remark() {
	for p := 0; p < o.parts()-1; p++ {
		m := o.marks[p]
		lo0, hi0, lo, hi := o.marked[p], o.marked[p+1], o.cuts[p], o.cuts[p+1]
		if lo <= lo0 && hi >= hi0 {
			setBits(m, o.ids[lo:lo0])
			setBits(m, o.ids[hi0:hi])
			continue
		}
		clearBits(m, o.ids[lo0:hi0])
		setBits(m, o.ids[lo:hi])
	}
	o.marked = append(o.marked[:0], o.cuts...)
}

// setBits sets the bits of ids (negative ids skipped).
func setBits(m []uint64, ids []int64) {
	for _, id := range ids {
		if id >= 0 {
			m[id>>6] |= 1 << (id & 63)
		}
	}
}

// clearBits clears the words of the bits of ids (negative ids skipped): bits of other ids in those
// words go too, so a caller marks again what must stay.
func clearBits(m []uint64, ids []int64) {
	for _, id := range ids {
		if id >= 0 {
			m[id>>6] = 0
		}
	}
}

// clearMarks clears the bits the last plan set, walking the lookups it marked (the bitmaps are
// large; the lookups are few).
func (o *ownedSGD) clearMarks() {
	for p := 0; p+1 < len(o.marked)-1; p++ {
		clearBits(o.marks[p], o.ids[o.marked[p]:o.marked[p+1]])
	}
	o.marked = o.marked[:0]
}

func (o *ownedSGD) parts() int { return len(o.cuts) - 1 }

// run applies part p's lookups of the rows it owns and sums the others into its side buffer.
func (o *ownedSGD) run(grad []float32, p int) {
	t := o.t
	d := int64(t.Dim)
	lo, hi := o.cuts[p], o.cuts[p+1]
	direct := scaledAdder{dst: t.Data, src: grad, stride: t.Stride, dim: t.Dim, alpha: o.alpha}
	earlier := o.marks[:p]
	var side *ownedSide
	var sum scaledAdder
	var scratch [bitsAhead]int64
	if p > 0 {
		side = &o.sides[p]
		side.index.reset(hi - lo)
		side.rows = side.rows[:0]
		side.acc = resize(side.acc, (hi-lo)*t.Dim) // slots are cleared when first taken
		sum = scaledAdder{dst: side.acc, src: grad, stride: t.Dim, dim: t.Dim, alpha: 1}
	}
	for _, g := range o.segs {
		a, b := max(lo, g.start), min(hi, g.start+g.n)
		off := g.base + int64(a-g.start)*d
		ids := o.ids[a:max(a, b)]
		for j0 := 0; j0 < len(ids); j0 += bitsAhead {
			// the row traffic evicts the bitmaps' words between tests: fetch the next run's early
			ahead := ids[min(j0+bitsAhead, len(ids)):min(j0+2*bitsAhead, len(ids))]
			for _, m := range earlier {
				kernels.PrefetchBits(m, ahead)
			}
			if side != nil {
				side.index.prefetch(ahead, scratch[:])
			}
			for _, id := range ids[j0:min(j0+bitsAhead, len(ids))] {
				if id < 0 { // unresolved: no row to update
					off += d
					continue
				}
				w, bit := id>>6, uint64(1)<<(id&63)
				owned := true
				for _, m := range earlier {
					if m[w]&bit != 0 {
						owned = false
						break
					}
				}
				if owned {
					direct.add(id, off)
				} else {
					slot, fresh := side.index.find(id, int32(len(side.rows)))
					if fresh {
						side.rows = append(side.rows, id)
						clear(side.acc[int(slot)*t.Dim : int(slot+1)*t.Dim])
						if 2*len(side.rows) > len(side.index.slots) {
							side.index.grow(side.rows)
						}
					}
					sum.add(int64(slot), off)
				}
				off += d
			}
		}
	}
	direct.flush()
	if side != nil {
		sum.flush()
		side.index.lastDistinct = len(side.rows)
		side.index.clear()
	}
}

// finish adds the parts' side buffers to their rows, part by part (a row may be in several), each
// part's slots split across goroutines (one writer per row).
func (o *ownedSGD) finish() {
	t := o.t
	for p := 1; p < o.parts(); p++ {
		side := &o.sides[p]
		parallel.For(len(side.rows), 2048, func(lo, hi int) {
			a := scaledAdder{dst: t.Data, src: side.acc, stride: t.Stride, dim: t.Dim, alpha: o.alpha}
			for i := lo; i < hi; i++ {
				a.add(side.rows[i], int64(i*t.Dim))
			}
			a.flush()
		})
	}
}

// materialize deduplicates a table whose forward deferred it (ownedSGD planned), for the paths that
// need the distinct IDs after all: counts, gradients for a torch optimizer, or a merged-update scope
// opened since the forward.
func (c *Collection) materialize(x *Context, ti int) error {
	t, tc := c.Tables[ti], &x.tables[ti]
	if !tc.lazy {
		return nil
	}
	src, _ := t.fixedRange()
	ids := tc.own.ids
	tc.inv = resize(tc.inv, len(ids))
	tc.uniq = tc.uniq[:0]
	one, b, offsets := []int{0}, Batch{Values: ids}, []int64{0, int64(len(ids))} // the lookups as one feature
	if t.rows <= c.opts.denseDedupMaxRows() {
		if err := t.dedupDense(one, b, 1, one, offsets, tc, src); err != nil {
			return err
		}
	} else {
		dedupMap(one, b, 1, one, offsets, tc)
	}
	tc.rows = append(tc.rows[:0], tc.uniq...)
	tc.lazy = false
	return nil
}
