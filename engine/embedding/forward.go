package embedding

import (
	"sync/atomic"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// Stage names the parts of a training step whose time a collection accumulates (see [StageTimes]).
type Stage int

// The stages: deduplicate + resolve IDs, group the lookups by destination row for backward (in a
// forward that keeps its context), pool segments, reduce + apply the optimizer per distinct row.
const (
	StageDedup Stage = iota
	StagePool
	StageGroup
	StageUpdate
	numStages
)

var stageTimes [numStages]atomic.Int64

// StageTimes returns the nanoseconds spent in each stage since the process started, summed over all
// collections (for benchmarks' time breakdowns).
func StageTimes() [numStages]int64 {
	var out [numStages]int64
	for i := range out {
		out[i] = stageTimes[i].Load()
	}
	return out
}

func since(s Stage, t0 time.Time) { stageTimes[s].Add(int64(time.Since(t0))) }

// Context is what backward needs from a forward pass: per table, the batch's distinct IDs, their
// rows and the inverse map from each lookup to its distinct ID; the batch's segment offsets, scales
// and weights; and how backward merges (by the sample-order scatter, or from the lookups grouped
// by distinct ID per table). It holds no pointer into caller memory.
type Context struct {
	B        int
	tables   []tableCtx
	srcOff   []int64   // per KJT value of a non-fixed table: row·stride, or -1 (forward scratch)
	scales   []float32 // per KJT segment: 1/len for mean pooling, else 1
	offsets  []int64   // KJT value offsets of the segments (len F·B+1)
	featKey  []int     // per collection feature: its key in the batch
	weights  []float32 // a copy of the batch's per-ID weights (when weighted)
	weighted bool
	scatter  bool      // backward merges by the sample-order scatter (else grouped by row)
	grads    []float32 // backward: merged gradients of the distinct rows (fused mode scratch)
	owner    *Collection
}

type tableCtx struct {
	index idIndex  // dedup hash index for row sources other than RangeSource (reused)
	grp   grouped  // the lookups grouped by distinct ID (grouped backward path only; reused)
	uniq  []int64  // distinct ids, first-seen order
	rows  []int64  // their storage rows, -1 when unresolved
	inv   []int32  // per lookup position (the table's features' values in order): index into uniq
	merge rowMerge // Options.NoDedup: scratch of the merge by row (reused)
	// planned: the sequence forward planned the linear SGD backward, own (reused); lazy: it did so
	// instead of deduplicating (uniq, rows and inv are stale until materialize)
	planned, lazy bool
	deferred      bool // a training forward resolves it last (admitDeferred): its source admits IDs
	own           ownedSGD
	evictions     int64 // an EvictingSource's count when it resolved rows (see recheck)
}

// recheck drops (sets to −1) the rows of table t's distinct IDs that its row source has given to
// other IDs since the forward resolved them, so that backward updates no other ID's row; a planned
// linear update's per-lookup rows follow.
func (x *Context) recheck(t int, tb *Table) {
	tc := &x.tables[t]
	es, ok := tb.Source.(EvictingSource)
	if !ok || tc.lazy || es.Evictions() == tc.evictions {
		return
	}
	es.Recheck(tc.uniq, tc.rows, tc.evictions)
	tc.evictions = es.Evictions()
	if tc.planned {
		for i, u := range tc.inv {
			tc.own.ids[i] = tc.rows[u]
		}
	}
}

// Unique returns the number of distinct IDs table t saw in the batch.
func (x *Context) Unique(t int) int {
	if x.tables[t].lazy {
		_ = x.owner.materialize(x, t) // the plan range-checked the IDs: nothing left to fail
	}
	return len(x.tables[t].uniq)
}

// Lookups returns the number of IDs table t looked up in the batch (duplicates included).
func (x *Context) Lookups(t int) int {
	if x.tables[t].lazy {
		return len(x.tables[t].own.ids)
	}
	return len(x.tables[t].inv)
}

// errRecomputeTrain refuses a batch marked Recompute in a training forward (a recomputation admits nothing).
var errRecomputeTrain = errs.Invalidf("forward: a recomputation (Batch.Recompute) is not a training forward (train must be false)")

// poolChunk is the number of samples one pooling kernel call covers (and one sample-major work
// item pools over all features, so the output is written in address order: a row crosses pages, a
// column of rows strides across them).
const poolChunk = 32

// Forward pools the batch into out ([B, Width] row-major, overwritten) and, when keep is true,
// returns the context backward needs. IDs are deduplicated per table and each distinct ID is
// resolved once (without keep, fixed tables skip deduplication: ID i is row i); every output
// segment (feature, sample) has one writer.
func (c *Collection) Forward(b Batch, out []float32, train, keep bool) (*Context, error) {
	if train && b.Recompute {
		return nil, errRecomputeTrain
	}
	unlock, err := c.lock(train && c.exclusiveTrain)
	if err != nil {
		return nil, err
	}
	defer unlock()
	B, err := ValidateBatch(b, len(c.Features))
	if err != nil {
		return nil, err
	}
	if len(out) != B*c.width {
		return nil, errs.Invalidf("forward: output has %d values, need %d (batch %d × width %d)", len(out), B*c.width, B, c.width)
	}
	F := len(c.Features)
	ctx := c.getContext(B)
	ctx.featKey = resize(ctx.featKey, F)
	featKey := ctx.featKey
	for k, f := range b.KeyFeature {
		if f != IgnoredKey {
			featKey[f] = k
		}
	}
	ctx.offsets = resize(ctx.offsets, len(b.Lengths)+1) // KJT order
	offsets := ctx.offsets
	offsets[0] = 0
	for i, n := range b.Lengths {
		offsets[i+1] = offsets[i] + n
	}
	ctx.weighted = b.Weights != nil
	ctx.weights = ctx.weights[:0]
	if keep && ctx.weighted {
		ctx.weights = append(ctx.weights, b.Weights...) // backward must not read caller memory
	}
	ctx.srcOff = resize(ctx.srcOff, len(b.Values))
	ctx.scales = resize(ctx.scales, len(b.Lengths))
	for k, f := range b.KeyFeature {
		if f == IgnoredKey {
			continue
		}
		mean := c.Features[f].Pooling == PoolMean
		for i, n := range b.Lengths[int(k)*B : (int(k)+1)*B] {
			ctx.scales[int(k)*B+i] = 1
			if mean && n > 0 {
				ctx.scales[int(k)*B+i] = 1 / float32(n)
			}
		}
	}

	t0 := time.Now()
	var firstErr atomic.Pointer[error]
	parallel.ForEach(len(c.Tables), 1, func(ti int) {
		if err := c.dedupTable(ti, b, B, featKey, offsets, ctx, train, keep); err != nil {
			firstErr.CompareAndSwap(nil, &err)
		}
	})
	if p := firstErr.Load(); p == nil {
		if err := c.admitDeferred(ctx, b, B, featKey, offsets, keep, nil, nil); err != nil {
			firstErr.Store(&err)
		}
	}
	since(StageDedup, t0)
	if p := firstErr.Load(); p != nil {
		c.Release(ctx)
		return nil, *p
	}
	if keep {
		ctx.scatter = c.planScatter(ctx)
		if !ctx.scatter {
			t0 = time.Now()
			parallel.ForEach(len(c.Tables), 1, func(ti int) { c.groupTable(ti, b, B, featKey, offsets, ctx) })
			since(StageGroup, t0)
		}
	}

	t0 = time.Now()
	if c.poolsByFeature(b) {
		c.poolByFeature(b, out, ctx)
	} else {
		c.poolBySample(b, out, ctx)
	}
	since(StagePool, t0)
	if !keep {
		c.Release(ctx)
		return nil, nil
	}
	return ctx, nil
}

// featureMajorMinPooling is the mean bag length from which pooling goes feature by feature: with
// long bags the row reads dominate and one table's hot rows stay in cache across its bags; with about
// one ID per bag the output writes dominate and go in address order sample by sample (the
// end-to-end and embedding benchmarks, benchmarks/results, measure both).
const featureMajorMinPooling = 4

// poolsByFeature reports whether a batch pools feature by feature (long bags) or sample by sample
// (Options.PoolOrder overrides the choice).
func (c *Collection) poolsByFeature(b Batch) bool {
	if c.opts.PoolOrder != PoolAuto {
		return c.opts.PoolOrder == PoolFeatureMajor
	}
	return int64(len(b.Values)) >= featureMajorMinPooling*int64(len(b.Lengths))
}

// rowSource returns where table t's lookups find their rows: a fixed table pools straight from the
// batch's IDs (row = ID, validated by dedup) with the row stride as multiplier; other tables from
// the row offsets dedup resolved.
func (c *Collection) rowSource(t *Table, b Batch, ctx *Context) ([]int64, int64) {
	if _, ok := t.fixedRange(); ok {
		return b.Values, int64(t.Stride)
	}
	return ctx.srcOff, 1
}

// poolBySample pools work items of poolChunk samples over all features, so the output is written
// in address order; the next feature's rows and output lines are prefetched while one is summed.
func (c *Collection) poolBySample(b Batch, out []float32, ctx *Context) {
	B, F, offsets := ctx.B, len(c.Features), ctx.offsets
	chunks := (B + poolChunk - 1) / poolChunk
	parallel.ForEach(chunks, 1, func(item int) {
		b0 := item * poolChunk
		b1 := min(b0+poolChunk, B)
		prefetch := func(f int) {
			t := c.Tables[c.Features[f].Table]
			s0 := ctx.featKey[f]*B + b0
			offs, mult := c.rowSource(t, b, ctx)
			kernels.PrefetchRows(t.Data, offs[offsets[s0]:offsets[s0+(b1-b0)]], mult, t.Dim)
			// and the output lines it will write (stores that miss stall once the store buffer fills)
			kernels.PrefetchStrided(out, b0*c.width+c.colOff[f], c.width, b1-b0, t.Dim)
		}
		prefetch(0)
		for f := 0; f < F; f++ {
			if f+1 < F {
				prefetch(f + 1) // overlap the next feature's row misses with this feature's sums
			}
			t := c.Tables[c.Features[f].Table]
			s0 := ctx.featKey[f]*B + b0
			offs, mult := c.rowSource(t, b, ctx)
			kernels.SegmentReduce(out, b0*c.width+c.colOff[f], c.width, t.Dim, t.Data, offs, mult,
				offsets[s0:s0+(b1-b0)+1], b.Weights, ctx.scales[s0:s0+(b1-b0)])
		}
	})
}

// featureChunk is the number of samples of one feature a feature-major work item pools (halved,
// down to poolChunk, while there are fewer than four items per worker).
const featureChunk = 256

// poolCallBytes bounds the row bytes one feature-major kernel call sums, and so the prefetch issued
// ahead of it (whole samples, at least one): poolChunk samples of long bags asked for megabytes of
// rows at once, which evicted each other before the kernel reached them.
const poolCallBytes = 64 << 10

// poolByFeature pools work items of up to featureChunk samples of one feature, poolChunk samples
// per kernel call, prefetching the next call's rows.
func (c *Collection) poolByFeature(b Batch, out []float32, ctx *Context) {
	B, F, offsets := ctx.B, len(c.Features), ctx.offsets
	size := featureChunk // smaller when few features would leave cores idle
	for size > poolChunk && F*((B+size-1)/size) < 4*parallel.Workers() {
		size /= 2
	}
	chunks := (B + size - 1) / size
	parallel.ForEach(F*chunks, 1, func(item int) {
		f, c0 := item/chunks, (item%chunks)*size
		c1 := min(c0+size, B)
		t := c.Tables[c.Features[f].Table]
		offs, mult := c.rowSource(t, b, ctx)
		base := ctx.featKey[f] * B
		budget := int64(max(1, poolCallBytes/(4*t.Dim)))
		end := func(b0 int) int { // whole samples up to the budget of rows, at least one
			b1 := b0 + 1
			for b1 < min(b0+poolChunk, c1) && offsets[base+b1+1]-offsets[base+b0] <= budget {
				b1++
			}
			return b1
		}
		// long bags the kernel prefetches inside its loop: a call then needs only its first rows
		// prefetched ahead of it
		inLoop := func(b0, b1 int) bool { return kernels.InLoop(t.Dim, offsets[base+b1]-offsets[base+b0], b1-b0) }
		var scratch []float32 // a long bag's partial sums
		for b0, b1 := c0, end(c0); b0 < c1; {
			b2 := b1
			if b1 < c1 {
				b2 = end(b1)
				// the next call's first sample, at most a budget of it (a long bag's pieces prefetch their
				// own; the in-loop kernel all but its first rows)
				ahead := budget
				if inLoop(b1, b2) {
					ahead = int64(kernels.InLoopAhead(t.Dim))
				}
				kernels.PrefetchRows(t.Data, offs[offsets[base+b1]:min(offsets[base+b1]+ahead, offsets[base+min(b2, b1+1)])],
					mult, t.Dim)
			}
			lo, hi := offsets[base+b0], offsets[base+b1]
			if b1 == b0+1 && hi-lo > 2*budget && !inLoop(b0, b1) {
				scratch = poolLongBag(out, b0*c.width+c.colOff[f], t, offs, mult, lo, hi, budget, b.Weights,
					ctx.scales[base+b0], scratch)
			} else {
				kernels.SegmentReduce(out, b0*c.width+c.colOff[f], c.width, t.Dim, t.Data, offs, mult,
					offsets[base+b0:base+b1+1], b.Weights, ctx.scales[base+b0:base+b1])
			}
			if b2 > b1+1 && !inLoop(b1, b2) { // the rest of the next call's rows (its first sample's went ahead above)
				kernels.PrefetchRows(t.Data, offs[offsets[base+b1+1]:offsets[base+b2]], mult, t.Dim)
			}
			b0, b1 = b1, b2
		}
	})
}

// poolLongBag pools one bag of entries [lo, hi) (more than twice budget rows) into out[at:] in
// pieces of budget rows, each piece's rows prefetched while the one before is summed into a
// partial row of scratch, then sums the partials (and scales them); returns scratch for reuse.
// A kernel call walks its whole bag before the next call's prefetch is issued, so a bag of
// thousands of rows otherwise waited on every row's miss.
func poolLongBag(out []float32, at int, t *Table, offs []int64, mult, lo, hi, budget int64, weights []float32,
	scale float32, scratch []float32) []float32 {
	n := int((hi - lo + budget - 1) / budget)
	if cap(scratch) < n*t.Dim {
		scratch = make([]float32, n*t.Dim)
	}
	scratch = scratch[:n*t.Dim]
	var bounds [2]int64
	parts := make([]int64, n) // the partials' offsets in scratch
	for k := range n {
		bounds[0], bounds[1] = lo+int64(k)*budget, min(lo+int64(k+1)*budget, hi)
		if bounds[1] < hi {
			kernels.PrefetchRows(t.Data, offs[bounds[1]:min(bounds[1]+budget, hi)], mult, t.Dim)
		}
		kernels.SegmentReduce(scratch, k*t.Dim, t.Dim, t.Dim, t.Data, offs, mult, bounds[:], weights, nil)
		parts[k] = int64(k * t.Dim)
	}
	kernels.SegmentReduce(out, at, t.Dim, t.Dim, scratch, parts, 1, []int64{0, int64(n)}, nil, []float32{scale})
	return scratch
}

// maxPooled bounds the released contexts a collection keeps (a step needs one; gradient
// accumulation or pipelining a few).
const maxPooled = 4

// getContext returns a context from the collection's pool (its buffers reused) or a new one.
func (c *Collection) getContext(B int) *Context {
	c.poolMu.Lock()
	defer c.poolMu.Unlock()
	if n := len(c.contexts); n > 0 {
		x := c.contexts[n-1]
		c.contexts = c.contexts[:n-1]
		x.B = B
		return x
	}
	return &Context{B: B, tables: make([]tableCtx, len(c.Tables)), owner: c}
}

// Release hands a context's buffers back for reuse by later forward passes. The context must not
// be used afterwards (the C ABI calls this when the context's handle is freed).
func (c *Collection) Release(x *Context) {
	if x == nil {
		return
	}
	c.poolMu.Lock()
	defer c.poolMu.Unlock()
	if len(c.contexts) < maxPooled {
		c.contexts = append(c.contexts, x)
	}
}

// resize returns s with length n, reusing its array when it is large enough (contents undefined).
func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n, n+n/8)
}

// dedupTable collects table ti's lookups (its features' IDs, in feature order), deduplicates them
// and resolves the distinct IDs to rows; for tables other than fixed ones it also fills the source
// offset of each of its KJT values (a fixed table pools straight from the IDs). Without keep, a
// fixed table's IDs are only range-checked: there is nothing to deduplicate for. In a training
// forward a table whose source admits IDs is left unresolved (deferred): admitDeferred resolves it
// once every other table passed its checks.
func (c *Collection) dedupTable(ti int, b Batch, B int, featKey []int, offsets []int64, ctx *Context, train, keep bool) error {
	t, tc := c.Tables[ti], &ctx.tables[ti]
	tc.lazy, tc.deferred = false, false
	fixed, dense := t.fixedRange()
	if dense && !keep {
		return c.checkFixed(ti, b, B, featKey, offsets)
	}
	var n int64
	for _, f := range c.features[ti] {
		k := featKey[f]
		n += offsets[(k+1)*B] - offsets[k*B]
	}
	tc.inv = resize(tc.inv, int(n))
	tc.uniq = tc.uniq[:0]
	if c.opts.NoDedup {
		c.collectEach(ti, b, B, featKey, offsets, tc)
	} else {
		prepared := c.usePrepared(ti, b, B, featKey, offsets, tc)
		if dense && t.rows <= c.opts.denseDedupMaxRows() {
			// ID i is row i: the pass that deduplicates also range-checks.
			var err error
			if prepared {
				err = fixed.checkAll(tc.uniq)
			} else {
				err = t.dedupDense(c.features[ti], b, B, featKey, offsets, tc, fixed)
			}
			if err != nil {
				return err
			}
			tc.rows = append(tc.rows[:0], tc.uniq...)
			return nil
		}
		if !prepared {
			dedupMap(c.features[ti], b, B, featKey, offsets, tc)
		}
	}
	if tc.deferred = train && t.admits(); tc.deferred {
		return nil
	}
	return c.resolveTable(ti, b, B, featKey, offsets, ctx, train, keep)
}

// resolveTable is dedupTable's last part: it resolves table ti's collected IDs (resolveRows) and,
// without deduplication, merges the lookups by storage row for backward (mergeRows).
func (c *Collection) resolveTable(ti int, b Batch, B int, featKey []int, offsets []int64, ctx *Context, train, keep bool) error {
	if err := c.resolveRows(ti, b, B, featKey, offsets, ctx, train, keep); err != nil {
		return err
	}
	if c.opts.NoDedup && keep {
		ctx.tables[ti].mergeRows(c.Tables[ti].rows)
	}
	return nil
}

// resolveRows resolves table ti's distinct IDs (tc.uniq) to rows and, for tables other than fixed
// ones, fills the source offset of each of its KJT values from tc.inv.
func (c *Collection) resolveRows(ti int, b Batch, B int, featKey []int, offsets []int64, ctx *Context, train, keep bool) error {
	t, tc := c.Tables[ti], &ctx.tables[ti]
	_, dense := t.fixedRange()
	tc.rows = resize(tc.rows, len(tc.uniq))
	resolve := t.Source.Resolve
	if b.Recompute {
		resolve = func(ids, rows []int64, _ bool) error { return ResolveRecompute(t.Source, ids, rows) }
	}
	if err := resolve(tc.uniq, tc.rows, train); err != nil {
		return wrapTable(t, err)
	}
	if es, ok := t.Source.(EvictingSource); ok {
		tc.evictions = es.Evictions() // after Resolve: its own admissions never free its rows
	}
	for i, r := range tc.rows {
		if r < -1 || r >= t.rows {
			return errs.Invalidf("table %q: row source resolved id %d to row %d outside [0, %d)", t.Name, tc.uniq[i], r, t.rows)
		}
	}
	if dense {
		return nil // a fixed table past the slot-array size: Resolve checked the IDs, pooling reads them
	}
	stride := int64(t.Stride)
	p := 0
	for _, f := range c.features[ti] {
		k := featKey[f]
		for v := offsets[k*B]; v < offsets[(k+1)*B]; v++ {
			if r := tc.rows[tc.inv[p]]; r < 0 {
				ctx.srcOff[v] = -1
			} else {
				ctx.srcOff[v] = r * stride
			}
			p++
		}
	}
	if keep && t.trainable < t.rows {
		for i, r := range tc.rows { // read-only rows (a default row) pool but take no gradient
			if r >= t.trainable {
				tc.rows[i] = -1
			}
		}
	}
	return nil
}

// groupTable groups table ti's lookups by distinct ID for backward (counting sort on the inverse
// map: RecIS Algorithm 1): the contributions to distinct ID u become entries start[u]..start[u+1]
// of the grouping, in lookup order, each with its output-gradient offset (b·Width + column) and
// scale (weight × 1/len for mean pooling), computed here from the batch rather than stored per lookup.
func (c *Collection) groupTable(ti int, b Batch, B int, featKey []int, offsets []int64, ctx *Context) {
	tc := &ctx.tables[ti]
	g, u := &tc.grp, len(tc.uniq)
	g.start = resize(g.start, u+1)
	clear(g.start)
	g.off = resize(g.off, len(tc.inv))
	g.scale = resize(g.scale, len(tc.inv))
	g.next = resize(g.next, u)
	for _, x := range tc.inv {
		g.start[x+1]++
	}
	for i := 0; i < u; i++ {
		g.start[i+1] += g.start[i]
	}
	next := g.next
	for i := range next {
		next[i] = int32(g.start[i])
	}
	p := 0
	for _, f := range c.features[ti] {
		k := featKey[f]
		for bi := 0; bi < B; bi++ {
			seg := k*B + bi
			off, sc := int64(bi*c.width+c.colOff[f]), ctx.scales[seg]
			for v := offsets[seg]; v < offsets[seg+1]; v++ {
				x := tc.inv[p]
				q := next[x]
				next[x]++
				g.off[q] = off
				if b.Weights != nil {
					g.scale[q] = sc * b.Weights[v]
				} else {
					g.scale[q] = sc
				}
				p++
			}
		}
	}
}
