package embedding

import (
	"sync/atomic"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// SequenceCollection looks up unpooled (sequence) features: one embedding per ID, as TorchRec's
// EmbeddingCollection returns them, over tables owned by a [Collection]. The same tables may serve
// the owner's pooled features at once (item_id pooled for the candidate, hist_item_ids as a
// sequence): the rows, the optimizer state, the step counter and the hyper-parameters are those of
// the owner's [Table] values, not copies.
//
// It runs the pooled collection's engine path: per table the batch's IDs are deduplicated and each
// distinct ID resolved once (the owner's dedup and row sources; for a fixed table beside the
// gather, which reads rows straight by ID), rows are copied out with kernels.GatherRows, and
// backward merges each distinct row's gradient (kernels.SegmentScatter, in lookup order) before
// the fused optimizer updates that row once — except SGD without weight decay, whose update is
// linear: it subtracts each lookup's gradient row from its table row in one pass (see
// [SequenceCollection.Backward]). A fixed table with that update is not deduplicated at all in a
// training forward: the forward only plans the backward's pass (ownedSGD), and deduplicates later
// only if something asks for the distinct IDs (counts, gradients for a torch optimizer).
//
// Output layout: per key of the batch (KJT order) one buffer of its n_k rows of its table's dim
// D_k. The gradient backward takes is those buffers back to back, in one buffer of
// [SequenceCollection.GradRows] rows of Width values (the last one zero-padded).
//
// Concurrency: as [Collection]; its calls may run concurrently with the owner's. The owner must
// outlive it: after the owner is closed, calls fail.
type SequenceCollection struct {
	owner  *Collection
	view   *Collection // the sequence features over the owner tables they use (the same *Table values)
	tables []int       // view table i is owner table tables[i]
}

// NewSequenceCollection builds sequence features over owner's tables: features[i].Table indexes
// owner.Tables (Pooling is ignored). Only the tables some feature uses take part (a backward
// steps only their optimizers).
func NewSequenceCollection(owner *Collection, features []Feature) (*SequenceCollection, error) {
	return NewSequenceCollectionWithOptions(owner, features, Options{})
}

// NewSequenceCollectionWithOptions is NewSequenceCollection with explicit Options (its own, not
// the owner's: e.g. NoDedup turns off the deduplication of this collection's lookups only).
func NewSequenceCollectionWithOptions(owner *Collection, features []Feature, opts Options) (*SequenceCollection, error) {
	if owner == nil {
		return nil, errs.Invalidf("sequence collection: no owner collection")
	}
	if err := owner.rlock(); err != nil {
		return nil, err
	}
	defer owner.mu.RUnlock()
	if len(features) == 0 {
		return nil, errs.Invalidf("sequence collection: no features")
	}
	used := make([]int, len(owner.Tables)) // owner table → view table + 1
	for _, f := range features {
		if f.Table < 0 || f.Table >= len(owner.Tables) {
			return nil, errs.Invalidf("sequence collection: feature %q references table %d of %d", f.Name, f.Table, len(owner.Tables))
		}
		used[f.Table] = 1
	}
	s := &SequenceCollection{owner: owner}
	var sub []*Table
	for t, u := range used {
		if u != 0 {
			s.tables = append(s.tables, t)
			sub = append(sub, owner.Tables[t])
			used[t] = len(sub)
		}
	}
	feats := make([]Feature, len(features))
	for i, f := range features {
		feats[i] = Feature{Name: f.Name, Table: used[f.Table] - 1, Pooling: PoolSum}
	}
	view, err := NewCollectionWithOptions(sub, feats, opts)
	if err != nil {
		return nil, err
	}
	s.view = view
	return s, nil
}

// Tables are the owner's indices of the tables the sequence features use, in owner order (the
// order of the per-table counts and gradients).
func (s *SequenceCollection) Tables() []int { return append([]int(nil), s.tables...) }

// NumFeatures is the number of sequence features.
func (s *SequenceCollection) NumFeatures() int { return len(s.view.Features) }

// Width is the sum of the features' dims: the row width of the output and gradient buffers.
func (s *SequenceCollection) Width() int { return s.view.width }

// TableDim is the embedding dim of the i-th table of Tables().
func (s *SequenceCollection) TableDim(i int) int { return s.view.Tables[i].Dim }

// Dim is the embedding dim of feature f.
func (s *SequenceCollection) Dim(f int) int { return s.view.Tables[s.view.Features[f].Table].Dim }

// OutputSizes validates a batch and returns the number of output values of each key, n_k·D_k.
func (s *SequenceCollection) OutputSizes(b Batch) ([]int64, error) {
	B, err := ValidateBatch(b, len(s.view.Features))
	if err != nil {
		return nil, err
	}
	sizes := make([]int64, len(b.KeyFeature))
	for k, f := range b.KeyFeature {
		var n int64
		for _, l := range b.Lengths[k*B : (k+1)*B] {
			n += l
		}
		sizes[k] = n * int64(s.Dim(int(f)))
	}
	return sizes, nil
}

// GradRows is the number of Width-wide rows of a batch's gradient buffer: ⌈Σ_k n_k·D_k / Width⌉.
func (s *SequenceCollection) GradRows(b Batch) (int, error) {
	sizes, err := s.OutputSizes(b)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, n := range sizes {
		total += n
	}
	return int((total + int64(s.view.width) - 1) / int64(s.view.width)), nil
}

// Close makes the collection unusable (later calls fail). The tables stay open: the owner closes them.
func (s *SequenceCollection) Close() error {
	s.view.mu.Lock()
	defer s.view.mu.Unlock()
	s.view.closed = true
	return nil
}

// lock takes the owner's lock, exclusive when asked (as Collection's own calls take it: a fused
// backward, a training forward that admits dynamic IDs), and the view's read lock (the tables stay
// open while they are held). The owner's lock guards the tables, which the view shares: a view that
// took only read locks let a forward read half of a fused update, evictions swap rows another
// forward had resolved, and two fused backwards lose step counts.
func (s *SequenceCollection) lock(exclusive bool) (func(), error) {
	unlockOwner, err := s.owner.lock(exclusive)
	if err != nil {
		return nil, err
	}
	if err := s.view.rlock(); err != nil {
		unlockOwner()
		return nil, err
	}
	return func() { s.view.mu.RUnlock(); unlockOwner() }, nil
}

// gatherRun is the number of rows one gather work item copies (streamRows: rowChunk per kernel call).
const gatherRun = 512

// iotaBuf holds 0, 1, 2, …: the bounds of one-ID segments (read-only once published).
var iotaBuf atomic.Pointer[[]int64]

func iota64(n int) []int64 {
	if p := iotaBuf.Load(); p != nil && len(*p) >= n {
		return (*p)[:n]
	}
	s := make([]int64, n+n/4)
	for i := range s {
		s[i] = int64(i)
	}
	iotaBuf.Store(&s)
	return s[:n]
}

// Forward gathers one row per ID of the batch (weights must be nil) into outs (one buffer per key,
// OutputSizes(b) values each, overwritten) and, when keep is true, returns the context
// [SequenceCollection.Backward] needs. Unresolved IDs (dynamic tables) give zero rows.
func (s *SequenceCollection) Forward(b Batch, outs [][]float32, train, keep bool) (*Context, error) {
	if train && b.Recompute {
		return nil, errRecomputeTrain
	}
	unlock, err := s.lock(train && s.view.exclusiveTrain)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := s.view
	if b.Weights != nil {
		return nil, errs.Invalidf("sequence forward: per-ID weights are not supported (an unpooled lookup has nothing to weight)")
	}
	sizes, err := s.OutputSizes(b)
	if err != nil {
		return nil, err
	}
	F, B := len(c.Features), len(b.Lengths)/len(c.Features)
	if len(outs) != F {
		return nil, errs.Invalidf("sequence forward: %d output buffers for %d keys", len(outs), F)
	}
	var total int64
	for k, n := range sizes {
		if int64(len(outs[k])) != n {
			return nil, errs.Invalidf("sequence forward: output %d has %d values, need %d", k, len(outs[k]), n)
		}
		total += n
	}
	rows := int((total + int64(c.width) - 1) / int64(c.width))
	ctx := c.getContext(rows) // B: the output's rows of Width, the gradient shape Backward checks
	ctx.featKey = resize(ctx.featKey, F)
	for k, f := range b.KeyFeature {
		ctx.featKey[f] = k
	}
	ctx.offsets = resize(ctx.offsets, len(b.Lengths)+1)
	offsets := ctx.offsets
	offsets[0] = 0
	for i, n := range b.Lengths {
		offsets[i+1] = offsets[i] + n
	}
	ctx.weighted, ctx.weights, ctx.scatter = false, ctx.weights[:0], false
	ctx.srcOff = resize(ctx.srcOff, len(b.Values))
	ctx.scales = resize(ctx.scales, 0)

	var firstErr atomic.Pointer[error]
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	var base []int64 // each key's first gradient value, for the linear SGD plans
	if keep {
		base = s.keyBases(ctx)
	}
	dedup := func(ti int) {
		t0 := time.Now()
		tc := &ctx.tables[ti]
		tc.planned = false
		if keep && s.ownedEligible(ti, b) {
			// no dedup: the backward's plan needs only the lookups and the parts' rows (ownedSGD)
			if err := s.planOwned(ti, b, B, ctx, base, parallel.Workers()); err != nil {
				fail(err)
			}
			since(StageDedup, t0)
			return
		}
		if err := c.dedupTable(ti, b, B, ctx.featKey, offsets, ctx, train, keep); err != nil {
			fail(err)
			return
		}
		if keep && linearUpdate(c.Tables[ti].Opt) && !tc.deferred {
			// planned here, beside the gather, rather than on backward's critical path
			s.planOwnedFromDedup(ti, ctx, base, parallel.Workers())
		}
		since(StageDedup, t0)
	}
	// A fixed table gathers straight from the batch's IDs, so its dedup runs beside the gather (one
	// worker dedups while the others gather); other tables gather from the rows dedup resolves.
	var early, late []int
	for ti, t := range c.Tables {
		if _, fixed := t.fixedRange(); fixed {
			late = append(late, ti)
		} else {
			early = append(early, ti)
		}
	}
	if len(early) > 0 {
		parallel.ForEach(len(early), 1, func(i int) { dedup(early[i]) })
		if firstErr.Load() == nil { // the fixed tables' IDs are checked before a table admits any
			err := c.admitDeferred(ctx, b, B, ctx.featKey, offsets, keep, late, func(ti int) {
				if keep && linearUpdate(c.Tables[ti].Opt) {
					s.planOwnedFromDedup(ti, ctx, base, parallel.Workers())
				}
			})
			if err != nil {
				fail(err)
			}
		}
		if p := firstErr.Load(); p != nil {
			c.Release(ctx)
			return nil, *p
		}
	}
	t0 := time.Now()
	items := s.gatherItems(b, B, ctx)
	copyRows := kernels.GatherRowsFor(int(total) * 4)
	parallel.ForEach(len(late)+len(items), 1, func(j int) {
		if j < len(late) {
			dedup(late[j])
			return
		}
		if err := s.gather(b, B, outs, ctx, items[j-len(late)], copyRows); err != nil {
			fail(err)
		}
	})
	since(StagePool, t0)
	if p := firstErr.Load(); p != nil {
		c.Release(ctx)
		return nil, *p
	}
	if !keep {
		c.Release(ctx)
		return nil, nil
	}
	return ctx, nil
}

// gatherItem is a run of one key's lookups that one work item gathers: values [v0, v1).
type gatherItem struct {
	k      int
	v0, v1 int64
}

// gatherItems cuts each key's lookups into work items of up to gatherRun lookups.
func (s *SequenceCollection) gatherItems(b Batch, B int, ctx *Context) []gatherItem {
	var items []gatherItem
	for k := range b.KeyFeature {
		for v := ctx.offsets[k*B]; v < ctx.offsets[(k+1)*B]; v += gatherRun {
			items = append(items, gatherItem{k, v, min(v+gatherRun, ctx.offsets[(k+1)*B])})
		}
	}
	return items
}

// gather copies each ID's row of an item to its slot of its key's output with copyRows (the
// forward's kernels.GatherRowsFor), rowChunk IDs per kernel call, rows prefetched ahead (streamRows). A fixed table's IDs are range-checked first (its dedup
// may not have run yet): an item with an ID out of range writes nothing and fails.
func (s *SequenceCollection) gather(b Batch, B int, outs [][]float32, ctx *Context, it gatherItem,
	copyRows func([]float32, int, []float32, []int64, int64)) error {
	c := s.view
	t := c.Tables[c.Features[b.KeyFeature[it.k]].Table]
	offs, mult := c.rowSource(t, b, ctx)
	if src, fixed := t.fixedRange(); fixed {
		if err := src.checkAll(b.Values[it.v0:it.v1]); err != nil {
			return err
		}
	}
	d, out := int64(t.Dim), outs[it.k]
	ids := offs[it.v0:] // prefetches may run into the next item: hints, never faults
	dst := out[(it.v0-ctx.offsets[it.k*B])*d:]
	streamRows(int(it.v1-it.v0), len(ids), func(lo, hi int) {
		kernels.PrefetchRows(t.Data, ids[lo:hi], mult, t.Dim)
	}, func(lo, hi int) {
		copyRows(dst[int64(lo)*d:int64(hi)*d], t.Dim, t.Data, ids[lo:hi], mult)
	})
	return nil
}

// Release hands a context's buffers back for reuse.
func (s *SequenceCollection) Release(x *Context) { s.view.Release(x) }
