package shard

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// Collection is one rank's part of a sharded embedding-bag collection: the layouts of every table,
// this rank's shard of each (a fixed engine table of its local rows, with the fused optimizer's
// state), and the features that look the tables up. Its pooled output has the columns of
// embedding.Collection ([B, Width], feature f at ColumnOffset(f)), for the rank's own samples.
type Collection struct {
	Layouts  []*Layout
	Shards   []*embedding.Table
	Features []embedding.Feature
	Topo     Topology
	Rank     int
	Mode     Mode

	// Returns is each table's return policy for owner pooling (nil: all ReturnAuto); set it with
	// SetReturns.
	Returns []Return

	colOff   []int
	width    int
	features [][]int // per table: its features
	featPos  []int   // per feature: its position among its table's features

	part  *Partitioner // computes leg-0 partitions ahead (the input pipeline's FORMAT stage)
	pools pools        // buffers recycled between steps

	mu     sync.RWMutex
	closed bool
	eval   bool         // steps begun now look dynamic tables up without admitting IDs (SetTraining)
	recomp bool         // evaluation steps begun now recompute a training step's forward (SetRecompute)
	steps  atomic.Int64 // forward exchanges driven so far: each one's number (sync.go)
	optim  int64        // the optimizer's fingerprint, which the step headers carry (sync.go)
	ident  int64        // the collection's identity, which the step headers carry (sync.go)
	pad    atomic.Int64 // tables the drives' first ops are sized for, at least (SetPadTables)
}

// NewCollection checks the arguments and allocates this rank's shards (zero weights and state).
func NewCollection(layouts []*Layout, topo Topology, rank int, mode Mode, opt embedding.OptimizerConfig, features []embedding.Feature) (*Collection, error) {
	if len(layouts) == 0 {
		return nil, errs.Invalidf("sharded collection: no tables")
	}
	if rank < 0 || rank >= topo.World() {
		return nil, errs.Invalidf("sharded collection: rank %d outside the world of %d", rank, topo.World())
	}
	if mode != Flat && mode != Hierarchical {
		return nil, errs.Invalidf("sharded collection: unknown exchange mode %d", int(mode))
	}
	c := &Collection{Layouts: layouts, Features: features, Topo: topo, Rank: rank, Mode: mode, featPos: make([]int, len(features)),
		optim: optimFingerprint(opt), ident: collectionIdent(layouts, features)}
	c.pools.sizeFor(len(layouts))
	dims, names := make([]int, len(layouts)), make([]string, len(layouts))
	for i, l := range layouts {
		if l.World != topo.World() {
			return nil, errs.Invalidf("table %q: laid out for %d ranks, the world has %d", l.Name, l.World, topo.World())
		}
		for j := 0; j < i; j++ {
			if layouts[j].Name == l.Name {
				return nil, errs.Invalidf("sharded collection: duplicate table name %q", l.Name)
			}
		}
		dims[i], names[i] = l.Dim, l.Name
	}
	lay, err := embedding.LayOutFeatures("sharded collection", features, dims, names)
	if err != nil {
		return nil, err
	}
	c.colOff, c.width, c.features = lay.ColOff, lay.Width, lay.PerTable
	for _, fs := range c.features {
		for q, f := range fs {
			c.featPos[f] = q
		}
	}
	c.part = newPartitioner(c)
	for _, l := range layouts {
		var s *embedding.Table
		if l.Dynamic() { // every rank has a shard (reserved, committed as rows are used)
			s, err = l.Builder.BuildTable(l.Name, l.Dim, opt)
		} else {
			// A rank that holds none of a table's rows keeps a one-row shard, so every rank has the
			// table's step counter and optimizer config.
			s, err = embedding.NewFixedTable(l.Name, max(1, l.LocalRows(rank)), l.Dim, opt)
		}
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.Shards = append(c.Shards, s)
	}
	return c, nil
}

// SetReturns sets each table's return policy (one per table; see ownerpool.go). It waits for
// running Begin calls; steps already begun keep the policy they started with. Ranks may choose
// differently: each requester's choice travels with its blocks.
func (c *Collection) SetReturns(r []Return) error {
	if len(r) != len(c.Layouts) {
		return errs.Invalidf("sharded collection: %d return policies for %d tables", len(r), len(c.Layouts))
	}
	for t, v := range r {
		if v < ReturnAuto || v > ReturnPooled {
			return errs.Invalidf("table %q: unknown return policy %d (0 auto, 1 rows, 2 pooled)", c.Layouts[t].Name, int(v))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Returns = append([]Return(nil), r...)
	return nil
}

// SetTraining sets whether the steps begun from now on train (the default) or evaluate: an
// evaluation step's dynamic shards admit no ID and keep their clocks (unseen IDs read zeros, or the
// table's default vector). Fixed tables look the same either way.
func (c *Collection) SetTraining(train bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eval = !train
}

// SetRecompute sets whether the evaluation steps begun from now on are the recomputation of a
// training step's forward in backward (activation checkpointing): their dynamic shards resolve IDs
// with embedding.ResolveRecompute (an ID without a row reads zeros as in the training step, not the
// default vector). Training steps ignore it.
func (c *Collection) SetRecompute(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recomp = on
}

// SetOptimizer changes every shard's optimizer hyper-parameters (the kind must stay), for
// learning-rate schedules. Call it between steps: a step's update reads them.
func (c *Collection) SetOptimizer(opt embedding.OptimizerConfig) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errs.Invalidf("sharded collection: used after close")
	}
	if err := embedding.SetOptimizer(c.Shards, opt); err != nil {
		return err
	}
	c.optim = optimFingerprint(opt)
	return nil
}

// Width is the number of output columns.
func (c *Collection) Width() int { return c.width }

// Close frees the shards; a second Close is a no-op.
func (c *Collection) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return embedding.CloseTables(c.Shards)
}

// Lookup implements Store.
func (c *Collection) Lookup(t int, rows []int64, dst []float32) error {
	return c.Shards[t].GatherRows(rows, dst)
}

// Resolve implements ResolveStore: table t's dynamic shard resolves ids.
func (c *Collection) Resolve(t int, ids, rows []int64, train bool) error {
	return c.Shards[t].Source.Resolve(ids, rows, train)
}

// Recompute implements ResolveStore: table t's dynamic shard resolves ids as a recomputation.
func (c *Collection) Recompute(t int, ids, rows []int64) error {
	return embedding.ResolveRecompute(c.Shards[t].Source, ids, rows)
}

// CheckRoom implements RoomStore: whether table t's dynamic shard would hold a training Resolve of
// ids (nil for a shard that cannot tell).
func (c *Collection) CheckRoom(t int, ids []int64) error {
	if rc, ok := c.Shards[t].Source.(interface{ CheckRoom(ids []int64) error }); ok {
		return rc.CheckRoom(ids)
	}
	return nil
}

// MayOverflow implements RoomStore.
func (c *Collection) MayOverflow(t int, n int64) bool {
	rc, ok := c.Shards[t].Source.(interface{ MayOverflow(n int64) bool })
	return ok && rc.MayOverflow(n)
}

// Evictions implements ResolveStore (0 for a shard that never evicts).
func (c *Collection) Evictions(t int) int64 {
	if es, ok := c.Shards[t].Source.(embedding.EvictingSource); ok {
		return es.Evictions()
	}
	return 0
}

// Recheck implements ResolveStore.
func (c *Collection) Recheck(t int, ids, rows []int64, since int64) {
	if es, ok := c.Shards[t].Source.(embedding.EvictingSource); ok {
		es.Recheck(ids, rows, since)
	}
}

// Apply implements Store.
func (c *Collection) Apply(t int, rows []int64, grads []float32) error {
	return c.Shards[t].ApplyRows(rows, grads)
}

// Linear implements LinearStore.
func (c *Collection) Linear(t int) bool { return c.Shards[t].Linear() }

// ApplyLinear implements LinearStore.
func (c *Collection) ApplyLinear(t int, rows []int64, grads []float32, offs []int64) error {
	return c.Shards[t].ApplyLinear(rows, grads, offs)
}

// Step is one training step of a rank: its batch's local dedup, the exchange that brings the
// rows (or the owners' partial sums), the pooling, and later the backward exchange. Steps of one
// collection may coexist (each owns its buffers); every rank must run the exchanges of its steps in
// the same order.
type Step struct {
	c       *Collection
	X       *Exchange
	B       int
	uniq    [][]int64 // per table: distinct IDs, first-seen order over the table's features
	featKey []int
	scales  []float32
	pooled  bool
}

// Begin validates the rank's batch, deduplicates each table's IDs and queues the forward exchange
// (run its ops with s.X.Next / Feed, then call Pool).
func (c *Collection) Begin(b embedding.Batch) (*Step, error) { return c.begin(b, nil, nil) }

// BeginPrepared is Begin for a batch the input pipeline prepared. With part (the batch's leg-0
// partition, made by the Partitioner of this collection or of one laid out the same way: same
// world, rank, topology, mode, tables and features) it takes each table's distinct IDs from dedup
// and their partition from part instead of computing them, for every table whose dedup still
// matches the batch's values; the step is the one Begin would give. Without part, or with one made
// for a collection laid out otherwise, it is Begin.
func (c *Collection) BeginPrepared(b embedding.Batch, dedup []embedding.TableDedup, part *Partition) (*Step, error) {
	if part == nil {
		return c.Begin(b)
	}
	ds, ps, err := c.prepared(dedup, part)
	if err != nil {
		return nil, err
	}
	return c.begin(b, ds, ps)
}

// newStep checks that the collection is open and the batch valid and returns an empty step for
// it (featKey and uniq allocated). The caller holds c.mu.
func (c *Collection) newStep(b embedding.Batch) (*Step, error) {
	if c.closed {
		return nil, errs.Invalidf("sharded collection: used after close")
	}
	B, err := embedding.ValidateBatch(b, len(c.Features))
	if err != nil {
		return nil, err
	}
	return &Step{c: c, B: B, featKey: make([]int, len(c.Features)), uniq: make([][]int64, len(c.Layouts))}, nil
}

// newExchange is a step's exchange over the collection's shards, its buffers from the collection's
// free lists and its mode (training or evaluation) the collection's now. The caller holds c.mu.
func (c *Collection) newExchange() *Exchange {
	x := NewExchange(c.Layouts, c.Topo, c.Rank, c.Mode, c)
	x.pools, x.train, x.steps, x.optim, x.ident = &c.pools, !c.eval, &c.steps, c.optim, c.ident
	x.recompute = c.eval && c.recomp
	x.pad = int(c.pad.Load())
	return x
}

// SetPadTables sizes the first op of every later drive on each group for n tables at least: the
// caller gives every collection that shares groups the largest table count among them (the same
// on every rank, between the same steps), so their first ops are of one size (sync.go).
func (c *Collection) SetPadTables(n int) error {
	if n < 0 || n > 1<<24 {
		return errs.Invalidf("sharded collection: %d pad tables", n)
	}
	c.pad.Store(int64(n))
	return nil
}

// begin is Begin, with each table's dedup and partition taken from ds and ps when they are given.
func (c *Collection) begin(b embedding.Batch, ds []*embedding.TableDedup, ps []*TablePartition) (*Step, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, err := c.newStep(b)
	if err != nil {
		return nil, err
	}
	B, T := s.B, len(c.Layouts)
	s.scales = make([]float32, len(b.Lengths))
	offsets := make([]int64, len(b.Lengths)+1)
	for k, f := range b.KeyFeature {
		if f != embedding.IgnoredKey {
			s.featKey[f] = k
		}
	}
	for i, n := range b.Lengths {
		offsets[i+1] = offsets[i] + n
	}
	for k, f := range b.KeyFeature {
		if f == embedding.IgnoredKey { // a key no table reads: its values are never looked at
			continue
		}
		mean := c.Features[f].Pooling == embedding.PoolMean
		for i, n := range b.Lengths[int(k)*B : (int(k)+1)*B] {
			s.scales[int(k)*B+i] = 1
			if mean && n > 0 {
				s.scales[int(k)*B+i] = 1 / float32(n)
			}
		}
	}
	bags := make([]Bags, T)
	errsT := make([]error, T)
	var pre []*TablePartition
	if ps != nil {
		pre = make([]*TablePartition, T)
	}
	parallel.ForEach(T, 1, func(t int) {
		bg := &bags[t]
		bg.Bounds = make([]int64, 1, len(c.features[t])*B+1)
		if b.Weights != nil {
			bg.Weights = []float32{}
		}
		var segs [][]int64 // the values of each of the table's features (only read here, within the call)
		for _, f := range c.features[t] {
			k := s.featKey[f]
			v0, v1 := offsets[k*B], offsets[(k+1)*B]
			segs = append(segs, b.Values[v0:v1])
			if b.Weights != nil {
				bg.Weights = append(bg.Weights, b.Weights[v0:v1]...)
			}
			base := bg.Bounds[len(bg.Bounds)-1] - v0
			for _, o := range offsets[k*B+1 : (k+1)*B+1] {
				bg.Bounds = append(bg.Bounds, base+o)
			}
		}
		// A prepared table whose batch still matches its dedup takes it (copies: the step outlives the
		// prepared batch's memory); the others, and any whose IDs changed in place, deduplicate here.
		if ds != nil && ds[t] != nil && ds[t].Verify(segs) == nil {
			bg.Inv, s.uniq[t] = slices.Clone(ds[t].Inv), slices.Clone(ds[t].Uniq)
			p := ps[t]
			pre[t] = &TablePartition{Dest: slices.Clone(p.Dest), Perm: slices.Clone(p.Perm), Count: slices.Clone(p.Count)}
			return
		}
		ids := segs[0] // one feature: its values as they are; several: one copy
		if len(segs) > 1 {
			ids = slices.Concat(segs...)
		}
		hi := maxID(ids)
		if l := c.Layouts[t]; !l.Dynamic() && hi >= uint64(l.Rows) { // some ID is out of range: name the first
			for _, id := range ids {
				if err := l.Check(id); err != nil {
					errsT[t] = err
					return
				}
			}
		}
		bg.Inv = make([]int32, len(ids))
		s.uniq[t] = c.pools.dedupMax(ids, bg.Inv, hi)
	})
	if err := errors.Join(errsT...); err != nil {
		return nil, err
	}
	s.X = c.newExchange()
	s.X.pre = pre
	if err := s.X.ForwardBags(s.uniq, bags, c.Returns); err != nil {
		return nil, err
	}
	return s, nil
}

// Abandon returns a step of the collection that refuses this rank's batch for reason (a check that
// failed before or in Begin, or BeginSequence with sequence): its drive runs the forward's first ops
// (sized as always, marked as refused, without IDs), which stop the step on every rank, and then
// fails with reason; the peers' drives fail naming this rank and reason (sync.go). Every rank's
// step number advances alike and no shard changes, so the ranks' next steps pair up.
func (c *Collection) Abandon(reason string, sequence bool) (*Step, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, errs.Invalidf("sharded collection: used after close")
	}
	s := &Step{c: c, X: c.newExchange()}
	if sequence {
		s.X.ident ^= sequenceIdent
	}
	s.X.Abandon(reason)
	return s, nil
}

// Pool writes the rank's pooled output ([B, Width], overwritten) from the rows and partial sums
// the exchange brought: each (feature, sample) bag has one writer, through the engine's segment
// reduction, which adds the bag's terms in a fixed order and then applies its mean scale.
func (s *Step) Pool(out []float32) error {
	c := s.c
	if len(out) != s.B*c.width {
		return errs.Invalidf("forward: output has %d values, need %d (batch %d × width %d)", len(out), s.B*c.width, s.B, c.width)
	}
	if !s.X.forwardDone() {
		return errs.Invalidf("forward: the exchange has not finished")
	}
	B := s.B
	parallel.ForEach(len(c.Features), 1, func(f int) {
		t, k, q := c.Features[f].Table, s.featKey[f], c.featPos[f]
		p := s.X.Plan(t)
		kernels.SegmentReduce(out, c.colOff[f], c.width, c.Layouts[t].Dim, s.X.poolRows(t), p.Offs, int64(c.Layouts[t].Dim),
			p.Bounds[q*B:(q+1)*B+1], p.Weights, s.scales[k*B:(k+1)*B])
	})
	s.pooled = true
	s.X.dropRows()
	return nil
}

// checkFused refuses a fused backward (what names the caller) when a shard has no fused optimizer.
func (c *Collection) checkFused(fused bool, what string) error {
	if !fused {
		return nil
	}
	for _, sh := range c.Shards {
		if sh.Opt.Kind == embedding.OptNone {
			return errs.Invalidf("%s: table %q has no fused optimizer; ask for gradients instead", what, sh.Name)
		}
	}
	return nil
}

// Backward merges the output gradient ([B, Width]) into one gradient per distinct ID of each
// table and per partial sum an owner returned (the transpose of Pool) and queues the backward
// exchange; with fused, the owners apply their optimizers at its end, otherwise the owners' merged
// gradients are left in s.X.
func (s *Step) Backward(gradOut []float32, fused bool) error {
	return s.BackwardScaled(gradOut, 1, fused)
}

// BackwardScaled is Backward of scale × gradOut, the factor applied in the merge's one pass over
// the gradient (gradient division: 1/world makes the owners' sum over the ranks a mean).
func (s *Step) BackwardScaled(gradOut []float32, scale float32, fused bool) error {
	return s.BackwardSome(gradOut, scale, fused, nil)
}

// BackwardSome is BackwardScaled leaving out the tables frozen marks (nil: none; see Skip): no rank
// steps them, and every rank must freeze the same ones.
func (s *Step) BackwardSome(gradOut []float32, scale float32, fused bool, frozen []bool) error {
	c := s.c
	if !s.pooled {
		return errs.Invalidf("backward: the step's forward did not finish")
	}
	if len(gradOut) != s.B*c.width {
		return errs.Invalidf("backward: gradient has %d values, need %d (batch %d × width %d)", len(gradOut), s.B*c.width, s.B, c.width)
	}
	if err := c.checkFused(fused, "backward"); err != nil {
		return err
	}
	B, T := s.B, len(c.Layouts)
	skip := Skip{Frozen: frozen}
	if err := skip.check(T, "backward"); err != nil {
		return err
	}
	scales := s.scales // per bag: 1, or 1/length for mean pooling
	if scale != 1 {
		scales = make([]float32, len(s.scales))
		for i, v := range s.scales {
			scales[i] = v * scale
		}
	}
	grads := make([][]float32, T)
	parallel.ForEach(T, 1, func(t int) {
		d := c.Layouts[t].Dim
		p := s.X.Plan(t)
		n := (len(s.uniq[t]) + s.X.partials(t)) * d
		acc := s.X.pools.floats().get(n + s.X.arriving(t))[:n] // room for the gradients that join it
		if s.X.rowsReturned(t) {
			clear(acc)
		} else { // every ID's owner pooled it: only the partial sums' slots are scattered into and sent
			clear(acc[len(s.uniq[t])*d:])
		}
		for _, f := range c.features[t] {
			k, q := s.featKey[f], c.featPos[f]
			bnd := p.Bounds[q*B : (q+1)*B+1]
			e0, e1 := bnd[0], bnd[B]
			var w []float32
			if p.Weights != nil {
				w = p.Weights[e0:e1]
			}
			kernels.SegmentScatter(acc, d, p.Slots[e0:e1], -1, gradOut, c.colOff[f], c.width, bnd, w, scales[k*B:(k+1)*B])
		}
		grads[t] = acc
	})
	s.pooled = false
	return s.X.BackwardSome(grads, fused, skip)
}

// String describes the collection (tables, kinds, rank, mode).
func (c *Collection) String() string {
	return fmt.Sprintf("sharded collection: %d tables, rank %d of %d (%d×%d), %s", len(c.Layouts), c.Rank, c.Topo.World(), c.Topo.Nodes, c.Topo.PerNode, c.Mode)
}

// OwnerGradients returns table t's rows that this rank owns and the step touched, their merged
// gradients and the table's dim (after a non-fused backward exchange ran).
func (s *Step) OwnerGradients(t int) ([]int64, []float32, int, error) {
	if t < 0 || t >= len(s.c.Layouts) {
		return nil, nil, 0, errs.NotFoundf("table index %d of %d", t, len(s.c.Layouts))
	}
	x := s.X
	if x.grads == nil || x.grads[len(x.legs)] == nil || len(x.stages) > 0 || x.cur != nil {
		return nil, nil, 0, errs.Invalidf("owner gradients: the backward exchange has not finished")
	}
	rows, g := x.OwnerGradients(t)
	return rows, g, s.c.Layouts[t].Dim, nil
}

// Skipped returns, per table, whether the step's backward left it without an optimizer step
// because no rank's loss used its outputs or it is frozen (Skip; after the exchange ran).
func (s *Step) Skipped() ([]bool, error) {
	x := s.X
	if x.used == nil || len(x.stages) > 0 || x.cur != nil {
		return nil, errs.Invalidf("skipped tables: the backward exchange has not finished")
	}
	out := make([]bool, len(s.c.Layouts))
	for t := range out {
		out[t] = x.Skipped(t)
	}
	return out, nil
}
