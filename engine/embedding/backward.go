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
	return c.BackwardSome(ctx, gradOut, gradRows, gradVals, nil)
}

// BackwardSome is Backward leaving out the tables skip marks (nil: none), the frozen ones
// (requires_grad=False): a fused one takes no step (its rows, step counter and optimizer state
// stay, as torch's optimizers skip a parameter without a gradient) and its gradient is not even
// merged; an unfused one's gradient buffers are left unwritten.
func (c *Collection) BackwardSome(ctx *Context, gradOut []float32, gradRows [][]int64, gradVals [][]float32,
	skip []bool) error {
	fused := gradRows == nil
	unlock, err := c.lock(fused) // a fused update writes rows: one at a time, and no forward meanwhile
	if err != nil {
		return err
	}
	defer unlock()
	if ctx == nil || len(ctx.tables) != len(c.Tables) {
		return errs.Invalidf("backward: context does not belong to this collection")
	}
	if len(gradOut) != ctx.B*c.width {
		return errs.Invalidf("backward: gradient has %d values, need %d (batch %d × width %d)", len(gradOut), ctx.B*c.width, ctx.B, c.width)
	}
	skipped, err := skipFlags(skip, len(c.Tables), "backward")
	if err != nil {
		return err
	}
	for i, t := range c.Tables {
		ctx.recheck(i, t)
	}
	valBase := make([]int, len(c.Tables))
	var nVals int
	if !fused && (len(gradRows) != len(c.Tables) || len(gradVals) != len(c.Tables)) {
		return errs.Invalidf("backward: %d/%d gradient buffers for %d tables", len(gradRows), len(gradVals), len(c.Tables))
	}
	for i, t := range c.Tables {
		if fused && t.Opt.Kind == OptNone {
			return errs.Invalidf("backward: table %q has no fused optimizer; ask for gradients instead", t.Name)
		}
		if fused && (t.Step[0] < 0 || t.Step[0] >= MaxStep) {
			return errs.Invalidf("backward: table %q: optimizer step %d is outside [0, %d) (a corrupted checkpoint?)",
				t.Name, t.Step[0], int64(MaxStep))
		}
		valBase[i] = nVals
		if !fused || !skipped(i) {
			nVals += ctx.Unique(i) * t.Dim
		}
		if !fused && (len(gradRows[i]) != ctx.Unique(i) || len(gradVals[i]) != ctx.Unique(i)*t.Dim) {
			return errs.Invalidf("backward: table %q gradient buffers hold %d rows / %d values, need %d / %d",
				t.Name, len(gradRows[i]), len(gradVals[i]), ctx.Unique(i), ctx.Unique(i)*t.Dim)
		}
	}
	if fused {
		ctx.grads = resize(ctx.grads, nVals)
	}
	t0 := time.Now()
	updaters := make([]rowUpdater, len(c.Tables))
	if fused {
		for i, t := range c.Tables {
			if skipped(i) {
				continue
			}
			if t.pending != nil { // in a merged-update scope the step comes at its end
				t.pending.took()
			} else {
				t.Step[0]++
			}
			updaters[i] = newRowUpdater(t.Opt, t.Step[0])
		}
	}
	// finish hands table t's merged gradients (its distinct rows lo..hi) to the optimizer (or the
	// open merged-update scope) or the caller.
	finish := func(t, lo, hi int, g []float32) {
		if p := c.Tables[t].pending; fused && p != nil {
			tc := &ctx.tables[t]
			p.add(tc.uniq[lo:hi], tc.rows[lo:hi], g, c.Tables[t].Dim, tc.evictions)
		} else if fused {
			updaters[t].applyRows(c.Tables[t], ctx.tables[t].rows[lo:hi], g)
		} else {
			copy(gradRows[t][lo:hi], ctx.tables[t].rows[lo:hi])
		}
	}
	merged := func(t int) []float32 {
		if fused {
			return ctx.grads[valBase[t] : valBase[t]+ctx.Unique(t)*c.Tables[t].Dim]
		}
		return gradVals[t]
	}
	if ctx.scatter {
		parallel.ForEach(len(c.Tables), 1, func(t int) {
			if skipped(t) {
				return
			}
			c.scatterTable(ctx, gradOut, t, merged(t))
			finish(t, 0, ctx.Unique(t), merged(t))
		})
		since(StageUpdate, t0)
		return nil
	}
	type item struct{ t, lo, hi int }
	var items []item
	for i := range c.Tables {
		if skipped(i) {
			continue
		}
		for lo := 0; lo < ctx.Unique(i); lo += updateChunk {
			items = append(items, item{i, lo, min(lo+updateChunk, ctx.Unique(i))})
		}
	}
	parallel.ForEach(len(items), 1, func(j int) {
		it := items[j]
		d, g := c.Tables[it.t].Dim, &ctx.tables[it.t].grp
		buf := merged(it.t)[it.lo*d : it.hi*d]
		// Merge each distinct row's contributions (reads of the output gradient), then one write per row.
		kernels.SegmentReduce(buf, 0, d, d, gradOut, g.off, 1, g.start[it.lo:it.hi+1], g.scale, nil)
		finish(it.t, it.lo, it.hi, buf)
	})
	since(StageUpdate, t0)
	return nil
}

// skipFlags checks a backward's skip flags (nil: none) against its T tables and returns whether table
// t is skipped; what names the caller for the message.
func skipFlags(skip []bool, T int, what string) (func(t int) bool, error) {
	if skip != nil && len(skip) != T {
		return nil, errs.Invalidf("%s: %d skip flags for %d tables", what, len(skip), T)
	}
	return func(t int) bool { return skip != nil && skip[t] }, nil
}

// MaxStep bounds a table's optimizer step counter: a loaded counter outside [0, MaxStep) is refused
// (Adam's bias correction β^t needs a sane t; 2^53 steps is far past any training run).
const MaxStep = 1 << 53

// scatterChunk is the number of samples the scatter walks between prefetches of the table's
// gradient columns.
const scatterChunk = 64

// scatterTable merges the output gradient into table t's distinct rows (acc, Unique(t)·dim values)
// in sample order: each (feature, sample) segment of gradOut is read once and added into the merged
// gradient of each of its lookups' distinct IDs (kernels.SegmentScatter). The table belongs to this
// caller alone, so no other goroutine writes its merged rows. A table with one feature numbers its
// distinct IDs in this very order, so its merged rows need no zeroing; others are zeroed first.
func (c *Collection) scatterTable(ctx *Context, gradOut []float32, t int, acc []float32) {
	B, tc, d, feats := ctx.B, &ctx.tables[t], c.Tables[t].Dim, c.features[t]
	fresh := int32(0)
	if len(feats) > 1 {
		fresh = -1
		clear(acc)
	}
	// featBase[i]: the table's lookup position of feature i's first value, minus its KJT position.
	featBase := make([]int64, len(feats))
	var base int64
	for i, f := range feats {
		k := ctx.featKey[f]
		featBase[i] = base - ctx.offsets[k*B]
		base += ctx.offsets[(k+1)*B] - ctx.offsets[k*B]
	}
	for b0 := 0; b0 < B; b0 += scatterChunk {
		n := min(scatterChunk, B-b0)
		if next := b0 + scatterChunk; next < B {
			for _, f := range feats { // the next chunk's gradient segments, while this one runs
				kernels.PrefetchStrided(gradOut, next*c.width+c.colOff[f], c.width, min(scatterChunk, B-next), d)
			}
		}
		for i, f := range feats {
			s0 := ctx.featKey[f]*B + b0
			v0, v1 := ctx.offsets[s0], ctx.offsets[s0+n]
			var w []float32
			if ctx.weighted {
				w = ctx.weights[v0:v1]
			}
			p0 := v0 + featBase[i]
			fresh = kernels.SegmentScatter(acc, d, tc.inv[p0:p0+(v1-v0)], fresh, gradOut,
				b0*c.width+c.colOff[f], c.width, ctx.offsets[s0:s0+n+1], w, ctx.scales[s0:s0+n])
		}
	}
}

// planScatter decides how backward merges the batch's gradients. The sample-order scatter reads
// each table's gradient columns once, in order, but gives each table to one goroutine; it is
// chosen unless one table holds more than a goroutine's share of the work (a core would then wait
// on it), in which case the grouped path splits every table by distinct rows instead.
func (c *Collection) planScatter(ctx *Context) bool {
	switch c.opts.BackwardPath {
	case BackwardGrouped:
		return false
	case BackwardScatter:
		return true
	}
	P := parallel.Workers()
	if P == 1 {
		return true
	}
	load := make([]int64, len(c.Tables))
	var total int64
	for t := range c.Tables {
		load[t] = int64(len(ctx.tables[t].inv) + ctx.B*len(c.features[t]))
		total += load[t]
	}
	for _, l := range load {
		if l > total/int64(P) {
			return false
		}
	}
	return true
}
