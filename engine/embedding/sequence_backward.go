package embedding

import (
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
// (kernels.SegmentScatter over one-ID segments): the gradient is read once, front to back, and
// added into the merged row of each lookup's distinct ID, the first contribution overwriting it
// (no zeroing pass). One goroutine merges a table: splitting a table's merge by distinct IDs
// would have each goroutine stream the whole gradient for half of its rows, doubling the memory
// traffic of the step's largest read (measured slower on two cores, and more CPU time). The
// update then splits the table's distinct rows into chunks across goroutines, each row written
// by one goroutine, so no atomics are needed.
//
// A fused SGD without weight decay skips the merge: its update is linear in the gradient, so the
// pass subtracts lr × each lookup's gradient row from its table row directly, which equals the
// merged update up to float rounding and saves writing and reading back the merged gradients
// (ownedSGD: parts own the rows they look up first; for a fixed table the forward skips the dedup).
func (s *SequenceCollection) Backward(ctx *Context, grad []float32, gradRows [][]int64, gradVals [][]float32) error {
	return s.BackwardSome(ctx, grad, gradRows, gradVals, nil)
}

// BackwardSome is Backward leaving out the tables skip marks (nil: none): tables whose outputs the
// loss did not use. A fused one takes no step (its step counter, Adam's moments and weight decay
// stay, as torch's optimizers skip a parameter without a gradient), and an unfused one's gradient
// buffers are left unwritten.
func (s *SequenceCollection) BackwardSome(ctx *Context, grad []float32, gradRows [][]int64, gradVals [][]float32,
	skip []bool) error {
	fused := gradRows == nil
	unlock, err := s.lock(fused) // a fused step is atomic, as Collection.Backward's
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
	skipped, err := skipFlags(skip, len(c.Tables), "sequence backward")
	if err != nil {
		return err
	}
	if !fused && (len(gradRows) != len(c.Tables) || len(gradVals) != len(c.Tables)) {
		return errs.Invalidf("sequence backward: %d/%d gradient buffers for %d tables", len(gradRows), len(gradVals), len(c.Tables))
	}
	for i, t := range c.Tables {
		ctx.recheck(i, t)
	}
	valBase := make([]int, len(c.Tables))
	var nVals int
	for i, t := range c.Tables {
		if fused && t.Opt.Kind == OptNone {
			return errs.Invalidf("sequence backward: table %q has no fused optimizer; ask for gradients instead", t.Name)
		}
		if ctx.tables[i].lazy && !(fused && s.linear(t)) {
			if err := c.materialize(ctx, i); err != nil { // its ownedSGD plan no longer applies
				return err
			}
		}
		if ctx.tables[i].lazy {
			continue // ownedSGD: no merged rows
		}
		u := ctx.Unique(i)
		if !fused && (len(gradRows[i]) != u || len(gradVals[i]) != u*t.Dim) {
			return errs.Invalidf("sequence backward: table %q gradient buffers hold %d rows / %d values, need %d / %d",
				t.Name, len(gradRows[i]), len(gradVals[i]), u, u*t.Dim)
		}
		valBase[i] = nVals
		if !fused || !s.linear(t) {
			nVals += u * t.Dim
		}
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
	// One work item per table's merge; a linear table's pass is cut into parts (see ownedSGD).
	type item struct {
		t    int
		own  *ownedSGD
		part int
	}
	var items []item
	var owns []*ownedSGD
	for t := range c.Tables {
		if skipped(t) {
			continue
		}
		if !fused || !s.linear(c.Tables[t]) {
			items = append(items, item{t: t})
			continue
		}
		if !ctx.tables[t].planned { // the forward did not plan it (a scope or an optimizer changed since)
			s.planOwnedFromDedup(t, ctx, base, parallel.Workers())
		}
		o := &ctx.tables[t].own
		o.alpha = -float32(c.Tables[t].Opt.LR) // the rate now, should it have changed since the forward
		owns = append(owns, o)
		for p := range o.parts() {
			items = append(items, item{t: t, own: o, part: p})
		}
	}
	parallel.ForEach(len(items), 1, func(j int) {
		it := items[j]
		if it.own != nil {
			it.own.run(grad, it.part)
			return
		}
		s.scatterSequence(ctx, grad, base, it.t, merged(it.t))
		if !fused {
			copy(gradRows[it.t], ctx.tables[it.t].rows)
		}
	})
	for _, o := range owns {
		o.finish()
	}
	if fused {
		type item struct{ t, lo, hi int }
		var items []item
		for i, t := range c.Tables {
			if skipped(i) {
				continue
			}
			if t.pending != nil { // a merged-update scope: the step comes at its end
				t.pending.took()
				items = append(items, item{i, 0, ctx.Unique(i)})
				continue
			}
			t.Step[0]++
			if linearUpdate(t.Opt) {
				continue
			}
			for lo := 0; lo < ctx.Unique(i); lo += updateChunk {
				items = append(items, item{i, lo, min(lo+updateChunk, ctx.Unique(i))})
			}
		}
		updaters := make([]rowUpdater, len(c.Tables))
		for i, t := range c.Tables {
			updaters[i] = newRowUpdater(t.Opt, t.Step[0])
		}
		parallel.ForEach(len(items), 1, func(j int) {
			it := items[j]
			d := c.Tables[it.t].Dim
			if p := c.Tables[it.t].pending; p != nil {
				tc := &ctx.tables[it.t]
				p.add(tc.uniq[it.lo:it.hi], tc.rows[it.lo:it.hi], merged(it.t)[it.lo*d:it.hi*d], d, tc.evictions)
				return
			}
			updaters[it.t].applyRows(c.Tables[it.t], ctx.tables[it.t].rows[it.lo:it.hi], merged(it.t)[it.lo*d:it.hi*d])
		})
	}
	since(StageUpdate, t0)
	return nil
}

// linearUpdate reports whether a fused optimizer's update of a row is linear in its gradient
// (SGD without weight decay): applying each lookup's gradient row in turn then equals the update by
// their merged sum, up to float rounding, and backward skips the merge (see ownedSGD).
func linearUpdate(o OptimizerConfig) bool { return o.Kind == OptSGD && o.WeightDecay == 0 }

// linear reports whether backward applies table t's update in its one-pass linear form: a linear
// update outside a merged-update scope (inside one the merged gradient is handed to the scope).
func (s *SequenceCollection) linear(t *Table) bool { return linearUpdate(t.Opt) && t.pending == nil }

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

// scatterSequence merges the gradient rows of table t's lookups into acc (its Unique(t)·dim
// values), walking the lookups in the order dedup numbered them (its features in order, each
// feature's lookups contiguous in grad). Distinct IDs are first seen in increasing order along that
// walk, so the first contribution to a merged row overwrites it and acc needs no zeroing.
func (s *SequenceCollection) scatterSequence(ctx *Context, grad []float32, base []int64, t int, acc []float32) {
	c := s.view
	tc, d := &ctx.tables[t], c.Tables[t].Dim
	B := (len(ctx.offsets) - 1) / len(c.Features)
	fresh := int32(0)
	p := 0
	for _, f := range c.features[t] {
		k := ctx.featKey[f]
		n := int(ctx.offsets[(k+1)*B] - ctx.offsets[k*B])
		if n == 0 {
			continue
		}
		fresh = kernels.SegmentScatter(acc, d, tc.inv[p:p+n], fresh, grad, int(base[k]), d, iota64(n+1), nil, nil)
		p += n
	}
}
