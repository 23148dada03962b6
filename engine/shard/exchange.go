package shard

import (
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
)

// Elem is the element type of an op's buffers.
type Elem int

// The element types: int64 (counts), float32 (rows, partial sums, gradients), bytes (IDs and bag
// structure packed in the narrowest integer widths, see ownerpool.go).
const (
	ElemInt64 Elem = iota
	ElemFloat32
	ElemByte
)

// Op is one all-to-all the caller must run on Group (torch.distributed's all_to_all_single): send
// SendSplits[i] elements of the send buffer to group index i and receive RecvSplits[i] elements
// from it, in group order. The send buffer is SendI (int64), SendF (float32) or SendB (bytes), by Elem.
type Op struct {
	Group      Group
	Elem       Elem
	SendI      []int64
	SendF      []float32
	SendB      []byte
	SendSplits []int64
	RecvSplits []int64

	recycle bool // the send buffer came from the collection's free lists
}

// SendLen is the number of elements the op sends.
func (o *Op) SendLen() int {
	switch o.Elem {
	case ElemFloat32:
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

// Store is the owner side of an exchange: the rank's shards of the tables.
type Store interface {
	// Lookup copies the rows of table t's shard into dst (len(rows)·dim values).
	Lookup(t int, rows []int64, dst []float32) error
	// Apply takes one optimizer step on table t's shard with the merged gradients of its distinct rows.
	Apply(t int, rows []int64, grads []float32) error
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
	fused     bool

	bags    []Bags      // requester: per table, the bags over its distinct IDs (nil: rows only)
	returns []Return    // per table: how owners return vectors (ReturnAuto when nil)
	plans   []PoolPlan  // requester: per table, the pooling entries over rows and partials
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
	x := &Exchange{layouts: layouts, topo: topo, self: self, store: store, dims: make([]int, len(layouts))}
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
	x.stages = append(x.stages, stage{op: func() (*Op, error) { return nil, x.lookup() }})
	for h := len(x.legs) - 1; h >= 0; h-- {
		x.stages = append(x.stages, x.vecStage(h))
	}
	return nil
}

// Rows returns table t's rows of the distinct IDs Forward was given, in that order (after the
// forward ops ran); after ForwardBags, the owners' partial sums follow them (see Plan), and the
// rows of IDs whose owner pooled them are undefined.
func (x *Exchange) Rows(t int) []float32 { return x.vecs[0][t] }

// Backward queues the backward exchange: grads[t] holds the requester's merged gradient of each of
// table t's distinct IDs (in Forward's order). With fused, each owner applies its optimizer
// (through the store); otherwise OwnerGradients returns the merged gradients at the owner.
func (x *Exchange) Backward(grads [][]float32, fused bool) error {
	if x.vecs == nil {
		return errs.Invalidf("exchange: backward before forward")
	}
	for t, g := range grads {
		if n := len(x.legs[0].items[t]) + x.partials(t); len(g) != n*x.dims[t] {
			return errs.Invalidf("exchange: table %q: %d gradient values for %d IDs and partial sums", x.layouts[t].Name, len(g), n)
		}
	}
	x.fused = fused
	x.grads = make([][][]float32, len(x.legs)+1)
	x.grads[0] = grads
	for h := range x.legs {
		x.stages = append(x.stages, x.gradStage(h))
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
			if err := s.feed(op, op.SendI, op.SendF, op.SendB); err != nil {
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

// countStage exchanges leg h's block metadata ([size × tables × metaFields] int64: the IDs of
// each block, and on the flat route whether its owner pools bags for it, see ownerpool.go).
func (x *Exchange) countStage(h int) stage {
	T := len(x.layouts)
	return stage{
		op: func() (*Op, error) {
			lg := &x.legs[h]
			lg.sendCnt = make([]int64, lg.size*T)
			lg.perm = make([][]int32, T)
			dests := make([][]int32, T)
			for t, ids := range lg.items {
				dest := make([]int32, len(ids))
				for i, id := range ids {
					o, _ := x.layouts[t].Owner(id, x.self)
					d := lg.dest(o)
					dest[i] = int32(d)
					lg.sendCnt[d*T+t]++
				}
				// counting sort of the items by destination, stable in item order
				start := make([]int32, lg.size+1)
				for d := 0; d < lg.size; d++ {
					start[d+1] = start[d] + int32(lg.sendCnt[d*T+t])
				}
				perm := make([]int32, len(ids))
				for i, d := range dest {
					perm[start[d]] = int32(i)
					start[d]++
				}
				lg.perm[t] = perm
				dests[t] = dest
			}
			lg.sendMeta = make([]int64, lg.size*T*metaFields)
			lg.sendVec = append([]int64(nil), lg.sendCnt...)
			for i, n := range lg.sendCnt {
				lg.sendMeta[i*metaFields+metaIDs] = n
			}
			if h == 0 && x.bags != nil {
				x.planReturns(lg, dests)
			}
			return &Op{Group: lg.group, SendI: lg.sendMeta, SendSplits: fill(lg.size, int64(T*metaFields)),
				RecvSplits: fill(lg.size, int64(T*metaFields))}, nil
		},
		feed: func(_ *Op, recv []int64, _ []float32, _ []byte) error {
			lg := &x.legs[h]
			lg.recvCnt = make([]int64, lg.size*T)
			for i := range lg.recvCnt {
				if err := checkMeta(recv[i*metaFields:(i+1)*metaFields], h == 0); err != nil {
					return err
				}
				lg.recvCnt[i] = recv[i*metaFields+metaIDs]
			}
			lg.recvMeta = append([]int64(nil), recv...)
			return nil
		},
	}
}

// idStage sends leg h's IDs (with the bag structure of the blocks pooled at their owner) and
// merges the received ones (the next leg's items, or the owner's).
func (x *Exchange) idStage(h int) stage {
	T := len(x.layouts)
	return stage{
		op: func() (*Op, error) {
			lg := &x.legs[h]
			splits := make([]int64, lg.size)
			for i := range lg.sendCnt {
				splits[i/T] += x.blockBytes(lg.sendMeta[i*metaFields:], i%T)
			}
			send := x.pools.bytes().get(int(sum(splits)))
			pos, p := make([]int, T), 0 // per table: next perm entry; write position
			for d := 0; d < lg.size; d++ {
				for t := 0; t < T; t++ {
					n, w := int(lg.sendCnt[d*T+t]), x.idWidth(t)
					for _, i := range lg.perm[t][pos[t] : pos[t]+n] {
						putUint(send[p:], w, uint64(lg.items[t][i]))
						p += w
					}
					pos[t] += n
					if h == 0 && x.plans != nil {
						p += x.plans[t].encode(send[p:], d, lg.sendMeta[(d*T+t)*metaFields:])
					}
					if d != lg.self {
						x.Counters.addIDs(t, x.sameNode(lg.rank(d)), int64(n))
					}
				}
			}
			recvSplits := make([]int64, lg.size)
			for i := range lg.recvCnt {
				recvSplits[i/T] += x.blockBytes(lg.recvMeta[i*metaFields:], i%T)
			}
			return &Op{Group: lg.group, Elem: ElemByte, SendB: send, SendSplits: splits, RecvSplits: recvSplits, recycle: true}, nil
		},
		feed: func(_ *Op, _ []int64, _ []float32, recv []byte) error {
			lg := &x.legs[h]
			if err := x.decodeBlocks(lg, recv, h == 0); err != nil {
				return err
			}
			lg.inv = make([][]int32, T)
			next := make([][]int64, T)
			parallel.ForEach(T, 1, func(t int) {
				lg.inv[t] = make([]int32, len(lg.recv[t]))
				next[t] = x.pools.dedup(lg.recv[t], lg.inv[t])
			})
			for t, ids := range next {
				for _, id := range ids {
					if err := x.layouts[t].Check(id); err != nil {
						return err
					}
				}
			}
			for t := range x.segs {
				if h == 0 { // pooled segments exist on the first leg only
					x.segs[t].resolve(lg.inv[t])
				}
			}
			if h+1 < len(x.legs) {
				x.legs[h+1].items = next
			} else {
				x.owner = next
			}
			return nil
		},
	}
}

// lookup resolves the owner's distinct IDs to shard rows and reads them once each.
func (x *Exchange) lookup() error {
	T := len(x.layouts)
	x.ownerRows = make([][]int64, T)
	x.vecs = make([][][]float32, len(x.legs)+1)
	top := make([][]float32, T)
	for t, ids := range x.owner {
		rows := make([]int64, len(ids))
		for i, id := range ids {
			o, r := x.layouts[t].Owner(id, x.self)
			if o != x.self {
				return errs.Invalidf("exchange: table %q: id %d reached rank %d but belongs to rank %d", x.layouts[t].Name, id, x.self, o)
			}
			rows[i] = r
		}
		x.ownerRows[t] = rows
		top[t] = x.pools.floats().get(len(rows) * x.dims[t])
		if err := x.store.Lookup(t, rows, top[t]); err != nil {
			return err
		}
		x.Counters.Lookups[t] += int64(len(rows))
	}
	x.vecs[len(x.legs)] = top
	return nil
}

// vecStage sends leg h's vectors back: every received ID gets its row (expanded along the inverse
// map), or, for a block whose bags this rank pools, every non-empty bag segment gets its partial
// sum; the vectors that arrive fill this leg's items (and level 0's partial slots). The rank's own
// block (always rows) does not go through the all-to-all: the feed copies it from the rows directly.
func (x *Exchange) vecStage(h int) stage {
	T := len(x.layouts)
	return stage{
		op: func() (*Op, error) {
			lg := &x.legs[h]
			src := x.vecs[h+1]
			send := x.pools.floats().get(rowSum(lg.recvVec, x.dims))[:0]
			base, seg := make([]int, T), make([]int, T) // per table: received-ID and segment cursors
			for s := 0; s < lg.size; s++ {
				for t := 0; t < T; t++ {
					n, d, nv := int(lg.recvCnt[s*T+t]), x.dims[t], int(lg.recvVec[s*T+t])
					switch {
					case s == lg.self:
					case lg.recvMeta[(s*T+t)*metaFields+metaFlags]&flagPooled != 0:
						send = x.segs[t].pool(send, seg[t], nv, src[t], d)
						seg[t] += nv
						x.Counters.PooledVecs[t] += int64(nv)
					default:
						for _, u := range lg.inv[t][base[t] : base[t]+n] {
							send = append(send, src[t][int(u)*d:int(u+1)*d]...)
						}
					}
					base[t] += n
					if s != lg.self {
						x.Counters.addVecs(t, x.sameNode(lg.rank(s)), int64(nv))
					}
				}
			}
			return &Op{Group: lg.group, Elem: ElemFloat32, SendF: send, SendSplits: x.vecSplits(lg, lg.recvVec),
				RecvSplits: x.vecSplits(lg, lg.sendVec), recycle: true}, nil
		},
		feed: func(_ *Op, _ []int64, recv []float32, _ []byte) error {
			lg := &x.legs[h]
			src := x.vecs[h+1]
			out := make([][]float32, T)
			for t := range out {
				out[t] = x.pools.floats().get((len(lg.items[t]) + x.levelPartials(h, t)) * x.dims[t])
			}
			pos, p := make([]int, T), 0
			for d := 0; d < lg.size; d++ {
				for t := 0; t < T; t++ {
					n, dim, nv := int(lg.sendCnt[d*T+t]), x.dims[t], int(lg.sendVec[d*T+t])
					switch {
					case d == lg.self: // this rank's own IDs: their rows straight from the level above
						b := lg.selfBase[t]
						for k, i := range lg.perm[t][pos[t] : pos[t]+n] {
							u := int(lg.inv[t][b+k])
							copy(out[t][int(i)*dim:int(i+1)*dim], src[t][u*dim:(u+1)*dim])
						}
					case lg.sendMeta[(d*T+t)*metaFields+metaFlags]&flagPooled != 0:
						at := (len(lg.items[t]) + x.plans[t].partStart[d]) * dim
						copy(out[t][at:at+nv*dim], recv[p:p+nv*dim])
						p += nv * dim
					default:
						for _, i := range lg.perm[t][pos[t] : pos[t]+n] {
							copy(out[t][int(i)*dim:int(i+1)*dim], recv[p:p+dim])
							p += dim
						}
					}
					pos[t] += n
				}
			}
			x.vecs[h] = out
			return nil
		},
	}
}

// vecSplits is rowSums of a leg's per-block vector counts, without the rank's own block (which
// never travels).
func (x *Exchange) vecSplits(lg *leg, cnt []int64) []int64 {
	out := rowSums(cnt, lg.size, len(x.layouts), x.dims)
	out[lg.self] = 0
	return out
}

// gradStage sends leg h's merged gradients along the IDs' path (a pooled block's: one per bag
// segment) and merges what arrives per distinct ID of the next level; the rank's own block is
// taken from its gradients directly.
func (x *Exchange) gradStage(h int) stage {
	T := len(x.layouts)
	return stage{
		op: func() (*Op, error) {
			lg := &x.legs[h]
			g := x.grads[h]
			send := x.pools.floats().get(rowSum(lg.sendVec, x.dims))[:0]
			pos := make([]int, T)
			for d := 0; d < lg.size; d++ {
				for t := 0; t < T; t++ {
					n, dim, nv := int(lg.sendCnt[d*T+t]), x.dims[t], int(lg.sendVec[d*T+t])
					switch {
					case d == lg.self:
					case lg.sendMeta[(d*T+t)*metaFields+metaFlags]&flagPooled != 0:
						at := (len(lg.items[t]) + x.plans[t].partStart[d]) * dim
						send = append(send, g[t][at:at+nv*dim]...)
						x.Counters.PooledGrads[t] += int64(nv)
					default:
						for _, i := range lg.perm[t][pos[t] : pos[t]+n] {
							send = append(send, g[t][int(i)*dim:int(i+1)*dim]...)
						}
					}
					pos[t] += n
					if d != lg.self {
						x.Counters.addGrads(t, x.sameNode(lg.rank(d)), int64(nv))
					}
				}
			}
			return &Op{Group: lg.group, Elem: ElemFloat32, SendF: send, SendSplits: x.vecSplits(lg, lg.sendVec),
				RecvSplits: x.vecSplits(lg, lg.recvVec), recycle: true}, nil
		},
		feed: func(_ *Op, _ []int64, recv []float32, _ []byte) error {
			lg := &x.legs[h]
			in := x.gatherGrads(lg, h, recv)
			nextN := func(t int) int {
				if h+1 < len(x.legs) {
					return len(x.legs[h+1].items[t])
				}
				return len(x.owner[t])
			}
			out := make([][]float32, T)
			for t := range out {
				out[t] = x.pools.floats().get(nextN(t) * x.dims[t])
			}
			parallel.ForEach(T, 1, func(t int) {
				if h == 0 && x.segs != nil && x.segs[t].any() {
					x.segs[t].expand(out[t], in[t], lg, t, T, x.dims[t])
					return
				}
				MergeRows(out[t], in[t], lg.inv[t], x.dims[t])
			})
			x.release([][][]float32{in, x.grads[h]})
			x.grads[h] = nil
			x.grads[h+1] = out
			return nil
		},
	}
}

// gatherGrads regroups the gradients a leg received (source-major blocks) into one slice per table,
// sources in order, with the rank's own block taken from its level-h gradients in send order.
func (x *Exchange) gatherGrads(lg *leg, h int, recv []float32) [][]float32 {
	T := len(x.layouts)
	out := make([][]float32, T)
	for t := range out {
		var n int64
		for s := 0; s < lg.size; s++ {
			n += lg.recvVec[s*T+t]
		}
		out[t] = x.pools.floats().get(int(n) * x.dims[t])[:0]
	}
	var p int
	for s := 0; s < lg.size; s++ {
		for t := 0; t < T; t++ {
			n, dim := int(lg.recvVec[s*T+t]), x.dims[t]
			if s != lg.self {
				out[t] = append(out[t], recv[p:p+n*dim]...)
				p += n * dim
				continue
			}
			for _, i := range lg.perm[t][lg.selfPerm[t] : lg.selfPerm[t]+n] {
				out[t] = append(out[t], x.grads[h][t][int(i)*dim:int(i+1)*dim]...)
			}
		}
	}
	return out
}

// apply hands the owner's merged gradients to the store's optimizers (fused mode).
func (x *Exchange) apply() error {
	if !x.fused {
		return nil
	}
	top := x.grads[len(x.legs)]
	for t := range x.layouts {
		if err := x.store.Apply(t, x.ownerRows[t], top[t]); err != nil {
			return err
		}
	}
	x.release([][][]float32{top})
	x.grads[len(x.legs)] = make([][]float32, len(x.layouts)) // applied: nothing left to hand out
	return nil
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

// rowSum is Σ_i Σ_t cnt[i·T+t]·dims[t].
func rowSum(cnt []int64, dims []int) int {
	T := len(dims)
	var n int64
	for i, c := range cnt {
		n += c * int64(dims[i%T])
	}
	return int(n)
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
