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
// The merge walks each table's lookups in order (kernels.SegmentScatter over one-ID segments): the
// gradient is read once, front to back, and added into the merged row of each lookup's distinct
// ID; a table with one feature numbers its distinct IDs in that order, so its merged rows need no
// zeroing. Tables merge concurrently; the update then splits every table by chunks of distinct
// rows, each row written once, so no atomics are needed.
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
	parallel.ForEach(len(c.Tables), 1, func(t int) { s.scatterSequence(ctx, grad, base, t, merged(t)) })
	updaters := make([]rowUpdater, len(c.Tables))
	if fused {
		for i, t := range c.Tables {
			t.Step[0]++
			updaters[i] = newRowUpdater(t.Opt, t.Step[0])
		}
	}
	type item struct{ t, lo, hi int }
	var items []item
	for i := range c.Tables {
		for lo := 0; lo < ctx.Unique(i); lo += updateChunk {
			items = append(items, item{i, lo, min(lo+updateChunk, ctx.Unique(i))})
		}
	}
	parallel.ForEach(len(items), 1, func(j int) {
		it := items[j]
		rows := ctx.tables[it.t].rows[it.lo:it.hi]
		if fused {
			d := c.Tables[it.t].Dim
			updaters[it.t].applyRows(c.Tables[it.t], rows, merged(it.t)[it.lo*d:it.hi*d])
		} else {
			copy(gradRows[it.t][it.lo:it.hi], rows)
		}
	})
	since(StageUpdate, t0)
	return nil
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

// scatterSequence merges the gradient rows of table t's lookups (its features in order, each
// feature's lookups contiguous in grad) into acc, Unique(t)·dim values, in lookup order.
func (s *SequenceCollection) scatterSequence(ctx *Context, grad []float32, base []int64, t int, acc []float32) {
	c := s.view
	tc, d, feats := &ctx.tables[t], c.Tables[t].Dim, c.features[t]
	B := (len(ctx.offsets) - 1) / len(c.Features)
	fresh := int32(0)
	if len(feats) > 1 {
		fresh = -1
		clear(acc)
	}
	p := 0
	for _, f := range feats {
		k := ctx.featKey[f]
		n := int(ctx.offsets[(k+1)*B] - ctx.offsets[k*B])
		if n > 0 {
			fresh = kernels.SegmentScatter(acc, d, tc.inv[p:p+n], fresh, grad, int(base[k]), d, iota64(n+1), nil, nil)
		}
		p += n
	}
}
