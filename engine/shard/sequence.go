package shard

import (
	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// Sequence (unpooled) lookups over a sharded collection: one row per ID, as embedding's sequence
// collection returns them, for the rank's own samples. The step reuses the pooled path's exchange
// with every table returning rows (one per distinct ID the rank asked for, never owner partials):
// Begin deduplicates each table's IDs over the table's features, the exchange brings the distinct
// rows, and Gather expands them along the inverse map to one row per lookup. Backward is its
// transpose: each lookup's gradient is added to its distinct ID's (lookups in the table's feature
// order, then value order: one writer per row, a fixed order), and the exchange's backward sends the
// merged gradients to the owners, which merge them over the requesters and apply the fused
// optimizer once per row.

// SequenceStep is one training step of sequence lookups at a rank. Its Step carries the exchange
// (run its ops with Step.X.Next / Feed, read its counters); Gather and Backward replace the pooled
// step's Pool and Backward. Concurrency: BeginSequence may run concurrently with other Begin and
// BeginSequence calls on the collection, and steps (pooled and sequence) may coexist, each owning
// its buffers; one step is not safe for concurrent use, and every rank must run the exchanges of
// its steps in the same order.
type SequenceStep struct {
	Step *Step

	inv      [][]int32 // per table: each lookup's index among the table's distinct IDs
	lookups  []int     // per key: its lookups (0 for an ignored key)
	keyPos   []int     // per key: its first lookup in its table's list
	outOff   []int     // per key: its first value in the output
	total    int       // output values
	gathered bool
}

// BeginSequence validates the rank's batch (embedding.Batch; weights are ignored), deduplicates each
// table's IDs over its features and queues the forward exchange of their rows.
func (c *Collection) BeginSequence(b embedding.Batch) (*SequenceStep, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, err := c.newStep(b)
	if err != nil {
		return nil, err
	}
	B, K, T := s.B, len(b.KeyFeature), len(c.Layouts)
	q := &SequenceStep{Step: s, inv: make([][]int32, T), lookups: make([]int, K), keyPos: make([]int, K), outOff: make([]int, K)}
	valOff := make([]int64, K+1)
	for k, f := range b.KeyFeature {
		var n int64
		for _, l := range b.Lengths[k*B : (k+1)*B] {
			n += l
		}
		valOff[k+1] = valOff[k] + n
		if f == embedding.IgnoredKey {
			continue
		}
		s.featKey[f] = k
		q.lookups[k] = int(n)
	}
	for k, f := range b.KeyFeature {
		q.outOff[k] = q.total
		if f != embedding.IgnoredKey {
			q.total += q.lookups[k] * c.Layouts[c.Features[f].Table].Dim
		}
	}
	parallel.ForEach(T, 1, func(t int) {
		var ids []int64
		for _, f := range c.features[t] {
			k := s.featKey[f]
			q.keyPos[k] = len(ids)
			ids = append(ids, b.Values[valOff[k]:valOff[k+1]]...)
		}
		q.inv[t] = make([]int32, len(ids))
		s.uniq[t] = c.pools.dedup(ids, q.inv[t])
	})
	s.X = c.newExchange()
	s.X.ident ^= sequenceIdent
	// Forward checks every distinct ID against its table's layout.
	if err := s.X.Forward(s.uniq); err != nil {
		return nil, err
	}
	return q, nil
}

// OutputLen is the number of float32 values Gather writes: per key of the batch, in key order, one
// row of its table's dim per lookup (nothing for ignored keys).
func (q *SequenceStep) OutputLen() int { return q.total }

// KeyOutput returns where key k's rows start in the output and how many lookups it has.
func (q *SequenceStep) KeyOutput(k int) (offset, lookups int) { return q.outOff[k], q.lookups[k] }

// Gather writes one row per lookup (OutputLen values, overwritten) once the forward exchange ran:
// work items of gatherRun lookups run in parallel, rowChunk rows per kernel call; an output of
// kernels.StreamingBytes or more is written with non-temporal stores.
func (q *SequenceStep) Gather(out []float32) error {
	s := q.Step
	c := s.c
	if len(out) != q.total {
		return errs.Invalidf("sequence forward: output has %d values, need %d", len(out), q.total)
	}
	if q.gathered || !s.X.forwardDone() {
		return errs.Invalidf("sequence forward: the exchange has not finished")
	}
	copyRows := kernels.GatherRowsFor(len(out) * 4)
	type item struct{ f, lo, hi int }
	var items []item
	for f := range c.Features {
		for lo, n := 0, q.lookups[s.featKey[f]]; lo < n; lo += gatherRun {
			items = append(items, item{f, lo, min(lo+gatherRun, n)})
		}
	}
	parallel.ForEach(len(items), 1, func(i int) {
		it := items[i]
		t, k := c.Features[it.f].Table, s.featKey[it.f]
		d := c.Layouts[t].Dim
		rows := s.X.Rows(t)
		inv := q.inv[t][q.keyPos[k]+it.lo : q.keyPos[k]+it.hi]
		dst := out[q.outOff[k]+it.lo*d : q.outOff[k]+it.hi*d]
		var offs [rowChunk]int64
		for j := 0; j < len(inv); j += rowChunk {
			m := min(rowChunk, len(inv)-j)
			for x := range m {
				offs[x] = int64(inv[j+x])
			}
			copyRows(dst[j*d:(j+m)*d], d, rows, offs[:m], int64(d))
		}
	})
	q.gathered = true
	s.X.dropRows()
	return nil
}

// gatherRun is the number of lookups one Gather work item copies, and rowChunk the rows of one
// kernel call (the inverse map's int32 indices widened on the stack).
const (
	gatherRun = 512
	rowChunk  = 8
)

// Backward merges the per-lookup gradient (Gather's layout, OutputLen values) into one gradient per
// distinct ID of each table and queues the backward exchange; with fused, the owners apply their
// optimizers at its end, otherwise Step.OwnerGradients returns the owners' merged gradients.
func (q *SequenceStep) Backward(grad []float32, fused bool) error {
	return q.BackwardScaled(grad, 1, fused)
}

// BackwardScaled is Backward of scale × grad, the factor applied in the merge (gradient division,
// see Step.BackwardScaled).
func (q *SequenceStep) BackwardScaled(grad []float32, scale float32, fused bool) error {
	return q.BackwardSome(grad, scale, fused, Skip{})
}

// BackwardSome is BackwardScaled leaving out the tables skip marks: skip.Unused those none of whose
// keys' outputs this rank's loss used (their gradient there is zero), skip.Frozen the frozen ones;
// a table no rank used, or frozen, takes no optimizer step (Exchange.BackwardSome).
func (q *SequenceStep) BackwardSome(grad []float32, scale float32, fused bool, skip Skip) error {
	s := q.Step
	c := s.c
	if !q.gathered {
		return errs.Invalidf("sequence backward: the step's forward did not finish")
	}
	if len(grad) != q.total {
		return errs.Invalidf("sequence backward: gradient has %d values, need %d", len(grad), q.total)
	}
	if err := c.checkFused(fused, "sequence backward"); err != nil {
		return err
	}
	T := len(c.Layouts)
	if err := skip.check(T, "sequence backward"); err != nil {
		return err
	}
	grads := make([][]float32, T)
	parallel.ForEach(T, 1, func(t int) {
		d := c.Layouts[t].Dim
		n := len(s.uniq[t]) * d
		acc := s.X.pools.floats().get(n + s.X.arriving(t))[:n] // room for the gradients that join it
		clear(acc)
		for _, f := range c.features[t] {
			k := s.featKey[f]
			src := grad[q.outOff[k] : q.outOff[k]+q.lookups[k]*d]
			for j, u := range q.inv[t][q.keyPos[k] : q.keyPos[k]+q.lookups[k]] {
				dst := acc[int(u)*d : (int(u)+1)*d]
				for i, g := range src[j*d : (j+1)*d] { // × 1 is exact: the unscaled sums are unchanged
					dst[i] += scale * g
				}
			}
		}
		grads[t] = acc
	})
	q.gathered = false
	return s.X.BackwardSome(grads, fused, skip)
}
