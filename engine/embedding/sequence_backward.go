package embedding

import (
	"sync"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// Backward merges the gradient of the outputs (back to back, zero-padded to GradRows·Width values)
// into one gradient per distinct row of each table, then applies the tables' fused optimizer once
// per distinct row (gradRows == nil; each used table's step counter advances once), or writes the
// merged gradients out: for the i-th table of Tables(), its Unique(i) rows into gradRows[i] (-1
// for unresolved IDs) and their Unique(i)·dim values into gradVals[i].
//
// The merge walks each table's lookups in the order dedup numbered its distinct IDs
// (kernels.SegmentScatter over one-ID segments): the gradient is read front to back and added into
// the merged row of each lookup's distinct ID, the first contribution overwriting it (no zeroing
// pass). A table with most of the batch's lookups is split into ranges of distinct IDs of about
// equal lookup counts, one goroutine each: it merges the lookups of its range (the others are empty
// segments, their gradient rows not read) and then updates its rows, each row written once by
// one goroutine, so no atomics are needed.
//
// A fused SGD without weight decay skips the merge: its update is linear in the gradient, so each
// part subtracts lr × each of its lookups' gradient rows from the table row directly, in lookup
// order (applySGD), which equals the merged update up to float rounding and saves writing and
// reading back the merged gradients.
func (s *SequenceCollection) Backward(ctx *Context, grad []float32, gradRows [][]int64, gradVals [][]float32) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	c := s.view
	if ctx == nil || len(ctx.tables) != len(c.Tables) || len(ctx.featKey) != len(c.Features) {
		return errs.Invalidf("sequence backward: context does not belong to this collection")
	}
	if len(grad) != ctx.B*c.width {
		return errs.Invalidf("sequence backward: gradient has %d values, need %d (%d rows × width %d)",
			len(grad), ctx.B*c.width, ctx.B, c.width)
	}
	fused := gradRows == nil
	if !fused && (len(gradRows) != len(c.Tables) || len(gradVals) != len(c.Tables)) {
		return errs.Invalidf("sequence backward: %d/%d gradient buffers for %d tables", len(gradRows), len(gradVals), len(c.Tables))
	}
	valBase := make([]int, len(c.Tables))
	var nVals int
	for i, t := range c.Tables {
		if fused && t.Opt.Kind == OptNone {
			return errs.Invalidf("sequence backward: table %q has no fused optimizer; ask for gradients instead", t.Name)
		}
		u := ctx.Unique(i)
		if !fused && (len(gradRows[i]) != u || len(gradVals[i]) != u*t.Dim) {
			return errs.Invalidf("sequence backward: table %q gradient buffers hold %d rows / %d values, need %d / %d",
				t.Name, len(gradRows[i]), len(gradVals[i]), u, u*t.Dim)
		}
		valBase[i] = nVals
		nVals += u * t.Dim
	}
	if fused {
		ctx.grads = resize(ctx.grads, nVals)
	}
	merged := func(t int) []float32 {
		if fused {
			return ctx.grads[valBase[t] : valBase[t]+ctx.Unique(t)*c.Tables[t].Dim]
		}
		return gradVals[t]
	}
	t0 := time.Now()
	base := s.keyBases(ctx)
	updaters := make([]rowUpdater, len(c.Tables))
	if fused {
		for i, t := range c.Tables {
			t.Step[0]++
			updaters[i] = newRowUpdater(t.Opt, t.Step[0])
		}
	}
	parts := s.partition(ctx)
	parallel.ForEach(len(parts), 1, func(j int) {
		pt := parts[j]
		d := c.Tables[pt.t].Dim
		if fused && linearUpdate(c.Tables[pt.t].Opt) {
			s.applySGD(ctx, grad, base, pt)
			return
		}
		acc := merged(pt.t)[int(pt.lo)*d : int(pt.hi)*d]
		s.scatterSequence(ctx, grad, base, pt, acc)
		rows := ctx.tables[pt.t].rows[pt.lo:pt.hi]
		if fused {
			updaters[pt.t].applyRows(c.Tables[pt.t], rows, acc)
		} else {
			copy(gradRows[pt.t][pt.lo:pt.hi], rows)
		}
	})
	since(StageUpdate, t0)
	return nil
}

// linearUpdate reports whether a fused optimizer's update of a row is linear in its gradient
// (SGD without weight decay): applying each lookup's gradient row in turn then equals the update by
// their merged sum, up to float rounding, and backward skips the merge (see applySGD).
func linearUpdate(o OptimizerConfig) bool { return o.Kind == OptSGD && o.WeightDecay == 0 }

// sgdBatch is the number of lookups applySGD applies per kernel call (the next call's rows are
// prefetched meanwhile).
const sgdBatch = 32

// applySGD is the backward of part pt for a table with a linear update: one pass over the
// gradient, front to back, subtracting lr × each lookup's gradient row from its table row
// (kernels.AddScaledRows; lookups of other parts skipped). Per row the contributions apply in
// lookup order, whatever the split, so the result does not depend on the worker count.
func (s *SequenceCollection) applySGD(ctx *Context, grad []float32, base []int64, pt seqPart) {
	c := s.view
	t, tc := c.Tables[pt.t], &ctx.tables[pt.t]
	d := int64(t.Dim)
	B := (len(ctx.offsets) - 1) / len(c.Features)
	whole := pt.lo == 0 && int(pt.hi) == len(tc.uniq)
	alpha := -float32(t.Opt.LR)
	var rowBuf, offBuf [2][sgdBatch]int64
	cur, n := 0, 0
	var pending int // entries of the other buffer, prefetched and waiting
	flush := func() {
		kernels.PrefetchRows(t.Data, rowBuf[cur][:n], int64(t.Stride), t.Dim)
		if pending > 0 {
			o := 1 - cur
			kernels.AddScaledRows(t.Data, t.Stride, t.Dim, rowBuf[o][:pending], grad, offBuf[o][:pending], alpha)
		}
		pending, cur, n = n, 1-cur, 0
	}
	p := 0
	for _, f := range c.features[pt.t] {
		k := ctx.featKey[f]
		m := int(ctx.offsets[(k+1)*B] - ctx.offsets[k*B])
		o := base[k]
		for _, x := range tc.inv[p : p+m] {
			if whole || (x >= pt.lo && x < pt.hi) {
				if r := tc.rows[x]; r >= 0 {
					rowBuf[cur][n], offBuf[cur][n] = r, o
					if n++; n == sgdBatch {
						flush()
					}
				}
			}
			o += d
		}
		p += m
	}
	flush()
	flush()
}

// keyBases returns each key's first value in the gradient buffer: the keys' n·dim, back to back
// in KJT order.
func (s *SequenceCollection) keyBases(ctx *Context) []int64 {
	c := s.view
	F := len(c.Features)
	B := (len(ctx.offsets) - 1) / F
	feat := make([]int, F) // key → feature
	for f, k := range ctx.featKey {
		feat[k] = f
	}
	base := make([]int64, F)
	var o int64
	for k, f := range feat {
		base[k] = o
		o += (ctx.offsets[(k+1)*B] - ctx.offsets[k*B]) * int64(c.Tables[c.Features[f].Table].Dim)
	}
	return base
}

// seqWorkers and seqPartMin override the number of parts a table may split into (0: the worker
// count) and the fewest distinct IDs a part holds; tests reach the split merge on small batches.
var (
	seqWorkers = 0
	seqPartMin = updateChunk
)

// seqPart is a range [lo, hi) of table t's distinct IDs that one goroutine merges and updates.
type seqPart struct {
	t      int
	lo, hi int32
}

// partition splits every table's distinct IDs into contiguous ranges of about equal lookup counts,
// as many per table as its share of the batch's lookups gives it of the workers (at least one).
func (s *SequenceCollection) partition(ctx *Context) []seqPart {
	c := s.view
	P := parallel.Workers()
	if seqWorkers > 0 {
		P = seqWorkers
	}
	var total int
	for t := range c.Tables {
		total += ctx.Lookups(t)
	}
	var parts []seqPart
	for t := range c.Tables {
		u, n := ctx.Unique(t), ctx.Lookups(t)
		k := 1
		if total > 0 {
			k = min(max(1, (P*n+total-1)/total), max(1, u/seqPartMin))
		}
		if k == 1 {
			parts = append(parts, seqPart{t, 0, int32(u)})
			continue
		}
		counts := make([]int32, u)
		for _, x := range ctx.tables[t].inv {
			counts[x]++
		}
		lo, acc, next := 0, 0, 1
		for x, cnt := range counts {
			acc += int(cnt)
			if next < k && acc*k >= next*n && x+1 < u {
				parts = append(parts, seqPart{t, int32(lo), int32(x + 1)})
				lo, next = x+1, next+1
			}
		}
		parts = append(parts, seqPart{t, int32(lo), int32(u)})
	}
	return parts
}

// scratch holds a merge's one-ID segment bounds and row indices (reused across calls).
type scratch struct {
	bounds []int64
	idx    []int32
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// scatterSequence merges the gradient rows of the lookups of part pt's distinct IDs into acc (its
// (hi−lo)·dim values), walking table t's lookups in the order dedup numbered them (its features in
// order, each feature's lookups contiguous in grad): a lookup of another part is an empty segment,
// whose gradient row is not read. Distinct IDs are first seen in increasing order along that walk,
// so the first contribution to a merged row overwrites it and acc needs no zeroing.
func (s *SequenceCollection) scatterSequence(ctx *Context, grad []float32, base []int64, pt seqPart, acc []float32) {
	c := s.view
	tc, d, feats := &ctx.tables[pt.t], c.Tables[pt.t].Dim, c.features[pt.t]
	B := (len(ctx.offsets) - 1) / len(c.Features)
	whole := pt.lo == 0 && int(pt.hi) == len(tc.uniq)
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	fresh := int32(0)
	p := 0
	for _, f := range feats {
		k := ctx.featKey[f]
		n := int(ctx.offsets[(k+1)*B] - ctx.offsets[k*B])
		if n == 0 {
			continue
		}
		inv := tc.inv[p : p+n]
		p += n
		if whole {
			fresh = kernels.SegmentScatter(acc, d, inv, fresh, grad, int(base[k]), d, iota64(n+1), nil, nil)
			continue
		}
		sc.bounds = resize(sc.bounds, n+1)
		sc.idx = sc.idx[:0]
		sc.bounds[0] = 0
		for i, x := range inv {
			if x >= pt.lo && x < pt.hi {
				sc.idx = append(sc.idx, x-pt.lo)
			}
			sc.bounds[i+1] = int64(len(sc.idx))
		}
		fresh = kernels.SegmentScatter(acc, d, sc.idx, fresh, grad, int(base[k]), d, sc.bounds, nil, nil)
	}
}
