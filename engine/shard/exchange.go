package shard

import (
	"sync/atomic"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
)

// Elem is the element type of an op's buffers.
type Elem int

// The element types: int64 (counts), float32 (rows, partial sums, gradients), bytes (IDs and bag
// structure packed in the narrowest integer widths, see wire.go).
const (
	ElemInt64 Elem = iota
	ElemFloat32
	ElemByte
)

// Op is one all-to-all the caller must run on Group (torch.distributed's all_to_all_single): send
// SendSplits[i] elements of the send buffer to group index i and receive RecvSplits[i] elements
// from it, in group order. The send buffer is SendI (int64), SendF (float32) or SendB (bytes), by Elem;
// a float32 op may instead leave it unbuilt until the caller says where it goes (WriteFloats, Floats).
type Op struct {
	Group      Group
	Elem       Elem
	SendI      []int64
	SendF      []float32
	SendB      []byte
	SendSplits []int64
	RecvSplits []int64

	recycle bool // the send buffer came from the collection's free lists

	// buildF, when set, writes the float32 send buffer (nF values) into its argument and reports a
	// length that disagrees with nF. The rows and gradients are a step's largest sends: built straight
	// into the transport's buffer they skip a copy through a Go buffer. It only reads the step's state,
	// so it may run more than once.
	buildF func(dst []float32) error
	nF     int
}

// deferredFloats is a float32 op of n values whose send buffer build writes when asked.
func deferredFloats(g Group, n int, build func(dst []float32) error, sendSplits, recvSplits []int64) *Op {
	return &Op{Group: g, Elem: ElemFloat32, buildF: build, nF: n, SendSplits: sendSplits, RecvSplits: recvSplits}
}

// WriteFloats writes a float32 op's send buffer into dst (SendLen values, memory the caller owns and
// that is not kept past the call): built in place when it was deferred, copied otherwise.
func (o *Op) WriteFloats(dst []float32) error {
	if o.Elem != ElemFloat32 {
		return errs.Invalidf("shard op: WriteFloats on an op of element type %d", o.Elem)
	}
	if len(dst) != o.SendLen() {
		return errs.Invalidf("shard op: send buffer of %d for %d values", len(dst), o.SendLen())
	}
	if o.buildF != nil && o.SendF == nil {
		return o.buildF(dst)
	}
	copy(dst, o.SendF)
	return nil
}

// Floats returns a float32 op's send buffer, building a deferred one into a buffer of free (nil:
// allocated) first.
func (o *Op) Floats(free *freeList[float32]) ([]float32, error) {
	if o.buildF != nil && o.SendF == nil {
		buf := free.get(o.nF)
		if err := o.buildF(buf); err != nil {
			free.put(buf)
			return nil, err
		}
		o.SendF, o.recycle = buf, true
	}
	return o.SendF, nil
}

// SendLen is the number of elements the op sends.
func (o *Op) SendLen() int {
	switch o.Elem {
	case ElemFloat32:
		if o.buildF != nil {
			return o.nF
		}
		return len(o.SendF)
	case ElemByte:
		return len(o.SendB)
	}
	return len(o.SendI)
}

// RecvLen is the number of elements the op receives.
func (o *Op) RecvLen() int64 {
	var n int64
	for _, s := range o.RecvSplits {
		n += s
	}
	return n
}

// Store is the owner side of an exchange: the rank's shards of the tables. An exchange may call
// Lookup (or Apply) for different tables at once, never for the same table.
type Store interface {
	// Lookup copies the rows of table t's shard into dst (len(rows)·dim values).
	Lookup(t int, rows []int64, dst []float32) error
	// Apply takes one optimizer step on table t's shard with the merged gradients of its distinct rows.
	Apply(t int, rows []int64, grads []float32) error
}

// ResolveStore is a Store with dynamic-ID tables (Layout.Dynamic): the owner's shard maps the IDs
// it receives to rows once per step (embedding.RowSource.Resolve), also when none arrive.
type ResolveStore interface {
	Store
	// Resolve writes table t's row of each id into rows, −1 for an id without one; train admits
	// new IDs and advances the shard's clock.
	Resolve(t int, ids, rows []int64, train bool) error
	// Recompute is Resolve in an evaluation step that recomputes a training step's forward (see
	// embedding.ResolveRecompute).
	Recompute(t int, ids, rows []int64) error
	// Evictions counts the rows table t's shard has freed (see embedding.EvictingSource).
	Evictions(t int) int64
	// Recheck sets rows[i] to −1 where ids[i] no longer holds rows[i] in table t's shard as it did
	// when resolved, since being Evictions(t) then (see embedding.EvictingSource).
	Recheck(t int, ids, rows []int64, since int64)
}

// LinearStore is a Store whose tables may take a linear update (SGD without weight decay) straight
// from every requested entry's gradient: duplicates add up in the row, so the owner skips the
// merge per distinct row and its buffer (embedding.Table.ApplyLinear).
type LinearStore interface {
	Store
	// Linear reports whether table t's shard has a linear fused update.
	Linear(t int) bool
	// ApplyLinear takes one step on table t's shard: row rows[j] gets the update of the dim values
	// of grads at offs[j], for each j in order.
	ApplyLinear(t int, rows []int64, grads []float32, offs []int64) error
}

// leg is the state of one hop of a step's route at this rank.
type leg struct {
	hop
	items    [][]int64 // per table: the distinct IDs at the leg's start (L_h)
	perm     [][]int32 // per table: the item of each send entry, in send order (destination-major)
	sendCnt  []int64   // [size × tables]: IDs sent to each group index, per table
	recvCnt  []int64   // [size × tables]: IDs received from each group index, per table
	sendMeta []int64   // [size × tables × metaFields]: what each block sent carries (ownerpool.go)
	recvMeta []int64   // the same for each block received
	sendVec  []int64   // [size × tables]: vectors coming back for each block sent (rows or partials)
	recvVec  []int64   // [size × tables]: vectors returned for each block received
	recv     [][]int64 // per table: the IDs received, source-major (R_h)
	inv      [][]int32 // per table: R_h → the next leg's items
	selfBase []int     // per table: where the rank's own block starts in recv
	selfPerm []int     // per table: where it starts in perm
	total    []int64   // per table: the distinct IDs the leg's group holds, summed over its ranks' parts (room.go)
}

// Exchange is one step's routing state at one rank: it turns the rank's distinct IDs into the
// all-to-alls that bring their rows back (forward) and their merged gradients to the owners
// (backward). The caller runs each [Op] that Next returns and hands the result to Feed. It is not
// safe for concurrent use; every rank of the world must run the same sequence of steps.
type Exchange struct {
	layouts []*Layout
	dims    []int
	topo    Topology
	self    int
	store   Store
	legs    []leg

	owner     [][]int64     // per table: the distinct IDs this rank serves (after the last leg)
	ownerRows [][]int64     // their shard rows
	vecs      [][][]float32 // [leg or owner][table]: rows of that level's items (level 0: then partials)
	grads     [][][]float32 // [leg or owner][table]: merged gradients of that level's items (the same)
	direct    []gradEntries // owner, fused: per table with a linear update, its unmerged gradients
	fused     bool
	used      []bool        // backward: per table, whether some rank's loss used its outputs (sync.go)
	frozen    []bool        // backward: per table, whether it is frozen (on every rank alike; sync.go)
	train     bool          // a training step: dynamic shards admit IDs and count the step
	recompute bool          // an evaluation step recomputing a training step's forward (ResolveStore.Recompute)
	seq       int64         // the step's number in its collection (the same on every rank; sync.go)
	optim     int64         // the collection's optimizer fingerprint (the same on every rank; sync.go)
	ident     int64         // the collection's identity, and a sequence step's mark (the same on every rank; sync.go)
	pad       int           // tables the first ops are sized for, at least (padTables; sync.go)
	abandon   *abandoned    // the step is refused: this rank's batch, or a peer's (sync.go)
	steps     *atomic.Int64 // the collection's count of forwards driven, which numbers this one (nil: 0)
	evictions []int64       // owner, per dynamic table: its shard's evictions when it resolved the step's rows

	pre []*TablePartition // requester: leg 0's partition per table computed ahead (nil, or a nil entry: countStage computes it)

	bags    []Bags      // requester: per table, the bags over its distinct IDs (nil: rows only)
	returns []Return    // per table: how owners return vectors (ReturnAuto when nil)
	plans   []PoolPlan  // requester: per table, the pooling entries over rows and partials
	inPlace [][]int32   // requester: per table pooled from the owner's rows (rowsInPlace), each distinct ID's row there
	segs    []ownerSegs // owner: per table, the bag segments requesters asked it to pool

	stages   []stage
	cur      *stage
	curOp    *Op
	pools    *pools // nil: allocate every buffer
	Counters Counters
}

type stage struct {
	op   func() (*Op, error)
	feed func(op *Op, recvI []int64, recvF []float32, recvB []byte) error
}

// NewExchange starts a step for rank self of topology topo, routing tables laid out by layouts
// with mode, whose shards store holds.
func NewExchange(layouts []*Layout, topo Topology, self int, mode Mode, store Store) *Exchange {
	x := &Exchange{layouts: layouts, topo: topo, self: self, store: store, dims: make([]int, len(layouts)), train: true}
	for t, l := range layouts {
		x.dims[t] = l.Dim
	}
	for _, h := range route(mode, topo, self) {
		x.legs = append(x.legs, leg{hop: h})
	}
	x.Counters = newCounters(len(layouts))
	return x
}

// Forward queues the forward exchange for the rank's distinct IDs uniq (per table, each list
// without duplicates): after the ops it produces have run, Rows returns their rows.
func (x *Exchange) Forward(uniq [][]int64) error {
	T := len(x.layouts)
	if len(uniq) != T {
		return errs.Invalidf("exchange: %d ID lists for %d tables", len(uniq), T)
	}
	for t, ids := range uniq {
		for _, id := range ids {
			if err := x.layouts[t].Check(id); err != nil {
				return err
			}
		}
		x.Counters.Requested[t] += int64(len(ids))
	}
	x.legs[0].items = uniq
	for h := range x.legs {
		x.stages = append(x.stages, x.countStage(h), x.idStage(h))
	}
	if x.hasDynamic() { // every rank learns whether the owners' dynamic shards hold the step (room.go)
		x.stages = append(x.stages, x.roomStage())
	}
	x.stages = append(x.stages, stage{op: func() (*Op, error) { return nil, x.lookup() }})
	for h := len(x.legs) - 1; h >= 0; h-- {
		x.stages = append(x.stages, x.vecStage(h))
	}
	return nil
}

// Abandon queues the forward of a step whose batch this rank refused for reason (checks made
// before Forward): its ops are the forward's count stages, marked, which stop the step on every rank
// it meets (sync.go); the drive then ends with reason's error.
func (x *Exchange) Abandon(reason string) {
	x.abandon = &abandoned{rank: x.self, reason: reason, own: true}
	x.stages = x.abandonStages(0)
}

// Rows returns table t's rows of the distinct IDs Forward was given, in that order (after the
// forward ops ran); after ForwardBags, the owners' partial sums follow them (see Plan), and the
// rows of IDs whose owner pooled them are undefined.
func (x *Exchange) Rows(t int) []float32 {
	if x.vecs[0][t] == nil && x.inPlace != nil && x.inPlace[t] != nil { // copied out on demand
		d, top := x.dims[t], x.vecs[len(x.legs)][t]
		out := x.pools.floats().get(len(x.inPlace[t]) * d)
		for i, u := range x.inPlace[t] {
			copy(out[i*d:(i+1)*d], top[int(u)*d:int(u+1)*d])
		}
		x.vecs[0][t] = out
	}
	return x.vecs[0][t]
}

// poolRows is the buffer table t's pooling entries (Plan(t).Offs) index: Rows(t), or the owner's
// rows when they stayed in place (rowsInPlace).
func (x *Exchange) poolRows(t int) []float32 {
	if x.inPlace != nil && x.inPlace[t] != nil {
		return x.vecs[len(x.legs)][t]
	}
	return x.vecs[0][t]
}

// Backward queues the backward exchange: grads[t] holds the requester's merged gradient of each of
// table t's distinct IDs (in Forward's order). With fused, each owner applies its optimizer
// (through the store); otherwise OwnerGradients returns the merged gradients at the owner.
func (x *Exchange) Backward(grads [][]float32, fused bool) error {
	return x.BackwardSome(grads, fused, Skip{})
}

// Skip marks the tables a backward leaves out, one flag per table (a nil slice: none). Unused: the
// tables whose outputs this rank's loss left out; a table no rank used takes no optimizer step, as
// torch's optimizers skip a parameter without a gradient, and one any rank used is stepped
// everywhere, its rows' zero gradients included. Frozen: the tables frozen with
// requires_grad_(False), which no rank steps; every rank must freeze the same ones (the backward's
// sync ops compare them).
type Skip struct{ Unused, Frozen []bool }

// check refuses flags of another length than the T tables'.
func (k Skip) check(T int, what string) error {
	for _, f := range []struct {
		name  string
		flags []bool
	}{{"unused", k.Unused}, {"frozen", k.Frozen}} {
		if f.flags != nil && len(f.flags) != T {
			return errs.Invalidf("%s: %d %s-table flags for %d tables", what, len(f.flags), f.name, T)
		}
	}
	return nil
}

// BackwardSome is Backward leaving out the tables skip marks. The ranks tell each other which
// tables they used, and check that they froze the same ones, in the backward's sync ops; a table
// none used, or frozen, takes no optimizer step (Skipped).
func (x *Exchange) BackwardSome(grads [][]float32, fused bool, skip Skip) error {
	if x.vecs == nil {
		return errs.Invalidf("exchange: backward before forward")
	}
	if err := skip.check(len(x.layouts), "exchange"); err != nil {
		return err
	}
	x.used = make([]bool, len(x.layouts))
	x.frozen = make([]bool, len(x.layouts))
	for t := range x.used {
		x.frozen[t] = skip.Frozen != nil && skip.Frozen[t]
		x.used[t] = (skip.Unused == nil || !skip.Unused[t]) && !x.frozen[t]
	}
	for t, g := range grads {
		if n := len(x.legs[0].items[t]) + x.partials(t); len(g) != n*x.dims[t] {
			return errs.Invalidf("exchange: table %q: %d gradient values for %d IDs and partial sums", x.layouts[t].Name, len(g), n)
		}
	}
	x.fused = fused
	x.direct = make([]gradEntries, len(x.layouts))
	x.grads = make([][][]float32, len(x.legs)+1)
	x.grads[0] = grads
	for h := range x.legs {
		x.stages = append(x.stages, x.syncStage(h), x.gradStage(h))
	}
	if x.hasDataParallel() {
		x.stages = append(x.stages, x.replicaStages()...)
	}
	x.stages = append(x.stages, stage{op: func() (*Op, error) { return nil, x.apply() }})
	return nil
}

// OwnerGradients returns the distinct shard rows this rank owns that the step touched, for table
// t, and their gradients merged over every requester (after the backward ops ran).
func (x *Exchange) OwnerGradients(t int) ([]int64, []float32) {
	return x.ownerRows[t], x.grads[len(x.legs)][t]
}

// Skipped reports whether table t takes no step in this backward: no rank's loss used its outputs
// (see BackwardSome; known once the backward's ops ran).
func (x *Exchange) Skipped(t int) bool { return x.used != nil && !x.used[t] }

// Next returns the next all-to-all to run, or nil when the queued work is done. Stages that need
// no exchange (lookups, updates, legs over a group of one rank) run inside Next.
func (x *Exchange) Next() (*Op, error) {
	if x.cur != nil {
		return nil, errs.Invalidf("exchange: Next called before the previous op was fed")
	}
	for len(x.stages) > 0 {
		s := x.stages[0]
		x.stages = x.stages[1:]
		op, err := s.op()
		if err != nil {
			x.stages = nil
			return nil, err
		}
		if op == nil {
			continue
		}
		if op.selfOnly() {
			sendF, err := op.Floats(x.pools.floats())
			if err == nil {
				err = s.feed(op, op.SendI, sendF, op.SendB)
			}
			if err != nil {
				x.stages = nil
				return nil, err
			}
			x.recycle(op)
			continue
		}
		x.cur = &s
		x.curOp = op
		return op, nil
	}
	return nil, nil
}

// Feed hands Next's op its received buffer (recvI, recvF or recvB, by the op's Elem; RecvLen
// elements).
func (x *Exchange) Feed(recvI []int64, recvF []float32, recvB []byte) error {
	s, op := x.cur, x.curOp
	if s == nil {
		return errs.Invalidf("exchange: Feed without a pending op")
	}
	x.cur, x.curOp = nil, nil
	n := int64(len(recvI))
	switch op.Elem {
	case ElemFloat32:
		n = int64(len(recvF))
	case ElemByte:
		n = int64(len(recvB))
	}
	if n != op.RecvLen() {
		x.stages = nil
		return errs.Invalidf("exchange: received %d elements, the op expects %d", n, op.RecvLen())
	}
	if err := s.feed(op, recvI, recvF, recvB); err != nil {
		x.stages = nil
		return err
	}
	x.recycle(op)
	return nil
}

// recycle returns a fed op's send buffer to the free lists.
func (x *Exchange) recycle(op *Op) {
	if op.recycle {
		x.pools.ints().put(op.SendI)
		x.pools.floats().put(op.SendF)
		x.pools.bytes().put(op.SendB)
		op.SendI, op.SendF, op.SendB = nil, nil, nil
	}
}

// release returns row buffers to the free lists.
func (x *Exchange) release(levels [][][]float32) {
	for _, lv := range levels {
		x.pools.floats().put(lv...)
	}
}

// selfOnly reports whether the op runs on a group of one rank (the caller's own).
func (o *Op) selfOnly() bool { return len(o.SendSplits) == 1 }

// apply hands the owner's merged gradients to the store's optimizers (fused mode).
func (x *Exchange) apply() error {
	if !x.fused {
		return nil
	}
	top := x.grads[len(x.legs)]
	// the tables' shards are independent: one goroutine updates each
	fail := make([]error, len(x.layouts))
	parallel.ForEach(len(x.layouts), 1, func(t int) {
		if x.Skipped(t) {
			if e := x.direct[t]; e.g != nil {
				x.pools.ints().put(e.src)
				x.pools.floats().put(e.g)
				x.direct[t] = gradEntries{}
			}
			return
		}
		x.recheck(t)
		if e := x.direct[t]; e.g != nil {
			fail[t] = x.applyDirect(t, e)
			return
		}
		fail[t] = x.store.Apply(t, x.ownerRows[t], top[t])
	})
	if err := firstError(fail); err != nil {
		return err
	}
	x.release([][][]float32{top})
	x.grads[len(x.legs)] = make([][]float32, len(x.layouts)) // applied: nothing left to hand out
	return nil
}

// recheck drops the owner's rows of dynamic table t whose IDs its shard evicted since the step
// resolved them (another step's admissions in between, as under gradient accumulation): their
// gradients are dropped instead of landing on the rows' new IDs.
func (x *Exchange) recheck(t int) {
	rs, ok := x.store.(ResolveStore)
	if !ok || !x.layouts[t].Dynamic() || rs.Evictions(t) == x.evictions[t] {
		return
	}
	rs.Recheck(t, x.owner[t], x.ownerRows[t], x.evictions[t])
}

// firstError returns the first non-nil error of per-table results (the lowest table's, so the
// error a failing step reports does not depend on goroutine timing).
func firstError(results []error) error {
	for _, err := range results {
		if err != nil {
			return err
		}
	}
	return nil
}

// applyDirect hands table t's unmerged gradients to its shard's linear update, each entry's
// gradient to the shard row of its distinct ID.
func (x *Exchange) applyDirect(t int, e gradEntries) error {
	rows := x.pools.ints().get(len(e.dst))
	for j, u := range e.dst {
		rows[j] = x.ownerRows[t][u]
	}
	err := x.store.(LinearStore).ApplyLinear(t, rows, e.g, e.src)
	x.pools.ints().put(rows, e.src)
	x.pools.floats().put(e.g)
	x.direct[t] = gradEntries{}
	return err
}

// forwardDone reports whether the forward exchange has finished and its rows are still held.
func (x *Exchange) forwardDone() bool {
	return x.vecs != nil && x.vecs[0] != nil && len(x.stages) == 0 && x.cur == nil
}

// dropRows frees the forward's rows once the output is read out: backward needs the routes, not
// the rows.
func (x *Exchange) dropRows() {
	x.release(x.vecs)
	x.vecs = [][][]float32{nil}
}

func (x *Exchange) sameNode(peer int) bool { return x.topo.Node(peer) == x.topo.Node(x.self) }

// MergeRows sums the rows of src (len(inv) rows of dim values) into dst by inv: dst row u becomes
// the sum of the src rows i with inv[i] == u, added in increasing i (one writer per dst row;
// the order makes the sums identical wherever the same inputs are merged). dst rows no entry
// names become zero.
func MergeRows(dst, src []float32, inv []int32, dim int) {
	mergeWeighted(dst, src, inv, nil, nil, dim)
}

func fill(n int, v int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func sum(xs []int64) int64 {
	var s int64
	for _, v := range xs {
		s += v
	}
	return s
}

// rowSums is, per group index i, Σ_t cnt[i·T+t]·dims[t] (dims nil: 1).
func rowSums(cnt []int64, size, T int, dims []int) []int64 {
	out := make([]int64, size)
	for i := 0; i < size; i++ {
		for t := 0; t < T; t++ {
			w := int64(1)
			if dims != nil {
				w = int64(dims[t])
			}
			out[i] += cnt[i*T+t] * w
		}
	}
	return out
}

// splitByTable regroups a source-major buffer ([source][table] blocks of cnt entries of dims[t]
// elements each; dims nil: 1) into one contiguous slice per table, sources in order (the slices
// from free, which may be nil).
func splitByTable[E any](buf []E, cnt []int64, size, T int, dims []int, free *freeList[E]) [][]E {
	w := func(t int) int64 {
		if dims == nil {
			return 1
		}
		return int64(dims[t])
	}
	out := make([][]E, T)
	for t := range out {
		var n int64
		for s := 0; s < size; s++ {
			n += cnt[s*T+t]
		}
		out[t] = free.get(int(n * w(t)))[:0]
	}
	var p int64
	for s := 0; s < size; s++ {
		for t := 0; t < T; t++ {
			n := cnt[s*T+t] * w(t)
			out[t] = append(out[t], buf[p:p+n]...)
			p += n
		}
	}
	return out
}

// Pending returns the op Next returned that has not been fed yet (nil when none).
func (x *Exchange) Pending() *Op { return x.curOp }
