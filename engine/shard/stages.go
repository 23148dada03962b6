package shard

import (
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
)

// The stages of a step's route, per leg h: countStage (block metadata), idStage (IDs and bag
// structure; merge at the receiver), then after the owner's lookup vecStage (rows or partial sums
// back, last leg first) and in backward gradStage (gradients along the IDs' path).

// countStage exchanges leg h's block metadata ([size × tables × metaFields] int64: the IDs of
// each block, and on the flat route whether its owner pools bags for it, see ownerpool.go), each
// peer's block after the forward's header (sync.go).
func (x *Exchange) countStage(h int) stage {
	T := len(x.layouts)
	return stage{
		op: func() (*Op, error) {
			if h == 0 && x.steps != nil { // the forward's drive starts: number it (steps may be begun in any order)
				x.seq = x.steps.Add(1)
			}
			lg := &x.legs[h]
			width := x.padTables() * metaFields
			split := fill(lg.size, int64(hdrFields+width))
			if x.abandon != nil { // a refused step: the mark and the reason, no IDs (sync.go)
				blk := x.abandon.block(T * metaFields)
				blocks := make([]int64, 0, lg.size*len(blk))
				for range lg.size {
					blocks = append(blocks, blk...)
				}
				send := x.withHeaders(phaseAbandoned, blocks, lg.size, len(blk), width)
				return &Op{Group: lg.group, SendI: send, SendSplits: split, RecvSplits: split}, nil
			}
			lg.sendCnt = make([]int64, lg.size*T)
			lg.perm = make([][]int32, T)
			dests := make([][]int32, T)
			for t, ids := range lg.items {
				var tp TablePartition
				if h == 0 && x.pre != nil && x.pre[t] != nil { // computed ahead (Collection.BeginPrepared)
					tp = *x.pre[t]
				} else {
					tp = TablePartition{Dest: make([]int32, len(ids)), Perm: make([]int32, len(ids)), Count: make([]int64, lg.size)}
					partition(x.layouts[t], x.self, &lg.hop, ids, tp)
				}
				for d, n := range tp.Count {
					lg.sendCnt[d*T+t] = n
				}
				lg.perm[t] = tp.Perm
				dests[t] = tp.Dest
			}
			lg.sendMeta = make([]int64, lg.size*T*metaFields)
			lg.sendVec = append([]int64(nil), lg.sendCnt...)
			for i, n := range lg.sendCnt {
				lg.sendMeta[i*metaFields+metaIDs] = n
				lg.sendMeta[i*metaFields+metaTotal] = x.partTotal(h, i%T)
			}
			if h == 0 && x.bags != nil {
				x.planReturns(lg, dests)
			}
			return &Op{Group: lg.group, SendI: x.withHeaders(phaseForward, lg.sendMeta, lg.size, T*metaFields, width),
				SendSplits: split, RecvSplits: split}, nil
		},
		feed: func(_ *Op, recv []int64, _ []float32, _ []byte) error {
			lg := &x.legs[h]
			width := x.padTables() * metaFields
			blocks, err := x.stripHeaders(phaseForward, recv, lg.size, T*metaFields, width, lg.rank)
			if err != nil {
				return err
			}
			for d := range lg.size { // a peer refused its batch: so does this rank's step (sync.go)
				if x.abandon == nil && recv[d*(hdrFields+width)+hdrPhase] == phaseAbandoned {
					x.abandon = abandonedFrom(blocks[d*T*metaFields : (d+1)*T*metaFields])
				}
			}
			if x.abandon != nil {
				x.stages = x.abandonStages(h + 1)
				return nil
			}
			recv = blocks
			lg.recvCnt = make([]int64, lg.size*T)
			lg.total = make([]int64, T)
			for i := range lg.recvCnt {
				if err := checkMeta(recv[i*metaFields:(i+1)*metaFields], h == 0); err != nil {
					return err
				}
				lg.recvCnt[i] = recv[i*metaFields+metaIDs]
				lg.total[i%T] = min(lg.total[i%T]+recv[i*metaFields+metaTotal], maxCount)
			}
			lg.recvMeta = recv
			return nil
		},
	}
}

// abandonStages are a refused step's stages from leg h on: the remaining legs' count stages, which
// carry the mark (so that every rank of the world learns it), and then the step's error.
func (x *Exchange) abandonStages(h int) []stage {
	var out []stage
	for ; h < len(x.legs); h++ {
		out = append(out, x.countStage(h))
	}
	return append(out, stage{op: func() (*Op, error) { return nil, x.abandon.err(x.self, x.seq) }})
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
					p += putUints(send[p:], w, lg.items[t], lg.perm[t][pos[t]:pos[t]+n])
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
			his := make([]uint64, T)
			parallel.ForEach(T, 1, func(t int) {
				lg.inv[t] = make([]int32, len(lg.recv[t]))
				his[t] = maxID(lg.recv[t])
				next[t] = x.pools.dedupMax(lg.recv[t], lg.inv[t], his[t])
			})
			for t, ids := range next {
				rows := uint64(x.layouts[t].Rows)
				if x.layouts[t].Dynamic() || his[t] < rows {
					continue
				}
				for _, id := range ids { // the first out of range, in first-seen order
					if uint64(id) >= rows { // negative IDs wrap past rows
						return x.layouts[t].Check(id)
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

// resolve has table t's dynamic shard give rows to the owner's distinct IDs (−1 for an ID without
// one: it reads zeros and takes no update), admitting new IDs in a training step.
func (x *Exchange) resolve(t int, ids, rows []int64) error {
	rs, ok := x.store.(ResolveStore)
	if !ok {
		return errs.Invalidf("exchange: table %q is dynamic but the store resolves no IDs", x.layouts[t].Name)
	}
	resolve := rs.Resolve
	if x.recompute {
		resolve = func(t int, ids, rows []int64, _ bool) error { return rs.Recompute(t, ids, rows) }
	}
	if err := resolve(t, ids, rows, x.train); err != nil {
		return err
	}
	x.evictions[t] = rs.Evictions(t) // after Resolve: its own admissions never free its rows
	return nil
}

// lookup resolves the owner's distinct IDs to shard rows and reads them once each.
func (x *Exchange) lookup() error {
	T := len(x.layouts)
	x.ownerRows = make([][]int64, T)
	x.evictions = make([]int64, T)
	x.vecs = make([][][]float32, len(x.legs)+1)
	top := make([][]float32, T)
	fail := make([]error, T)
	parallel.ForEach(T, 1, func(t int) { // one goroutine per table's shard
		ids := x.owner[t]
		rows := make([]int64, len(ids))
		if fail[t] = x.layouts[t].OwnRows(x.self, ids, rows); fail[t] != nil {
			return
		}
		if x.layouts[t].Dynamic() { // every step, IDs or none: the shard's clock counts steps
			if fail[t] = x.resolve(t, ids, rows); fail[t] != nil {
				return
			}
		}
		x.ownerRows[t] = rows
		top[t] = x.pools.floats().get(len(rows) * x.dims[t])
		fail[t] = x.store.Lookup(t, rows, top[t])
		x.Counters.Lookups[t] += int64(len(rows))
	})
	x.vecs[len(x.legs)] = top
	return firstError(fail)
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
			x.countVecs(lg, lg.recvVec, lg.recvMeta, x.Counters.PooledVecs, x.Counters.addVecs)
			splits := x.vecSplits(lg, lg.recvVec)
			return deferredFloats(lg.group, int(sum(splits)), func(dst []float32) error { return x.buildVecs(h, dst) },
				splits, x.vecSplits(lg, lg.sendVec)), nil
		},
		feed: func(_ *Op, _ []int64, recv []float32, _ []byte) error {
			lg := &x.legs[h]
			src := x.vecs[h+1]
			out := make([][]float32, T)
			for t := range out {
				if x.rowsInPlace(h, t) {
					x.poolInPlace(t)
					continue
				}
				out[t] = x.pools.floats().get((len(lg.items[t]) + x.levelPartials(h, t)) * x.dims[t])
			}
			pos, p := make([]int, T), 0
			for d := 0; d < lg.size; d++ {
				for t := 0; t < T; t++ {
					n, dim, nv := int(lg.sendCnt[d*T+t]), x.dims[t], int(lg.sendVec[d*T+t])
					switch {
					case out[t] == nil: // rows left in place (rowsInPlace)
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

// rowsInPlace reports whether vecStage leaves table t's level-h rows where the owner's lookup put
// them: on a one-leg route with bags, a table whose IDs all stayed at this rank (its own table-wise
// tables, every table of a world of one) is pooled straight from the lookup's rows, which saves
// copying each of its rows once more in the step.
func (x *Exchange) rowsInPlace(h, t int) bool {
	lg := &x.legs[h]
	n := len(lg.items[t])
	return h == 0 && len(x.legs) == 1 && x.plans != nil && x.plans[t].nPart == 0 && n > 0 &&
		lg.sendCnt[lg.self*len(x.layouts)+t] == int64(n)
}

// poolInPlace points table t's pooling entries (Plan(t).Offs) at the lookup's rows (see
// rowsInPlace) and keeps each distinct ID's row there, for Rows.
func (x *Exchange) poolInPlace(t int) {
	lg, p := &x.legs[0], &x.plans[t]
	at := make([]int32, len(lg.items[t])) // per distinct ID: its row among the owner's
	inv := lg.inv[t][lg.selfBase[t]:]
	for k, i := range lg.perm[t][lg.selfPerm[t] : lg.selfPerm[t]+len(at)] {
		at[i] = inv[k]
	}
	for j, o := range p.Offs {
		p.Offs[j] = int64(at[o])
	}
	if x.inPlace == nil {
		x.inPlace = make([][]int32, len(x.layouts))
	}
	x.inPlace[t] = at
}

// buildVecs writes leg h's vector send buffer into dst: per source block (source-major, then
// table), the partial sum of each bag segment this rank pools for it, or each received ID's row.
func (x *Exchange) buildVecs(h int, dst []float32) error {
	T := len(x.layouts)
	lg := &x.legs[h]
	src := x.vecs[h+1]
	send := dst[:0]
	base, seg := make([]int, T), make([]int, T) // per table: received-ID and segment cursors
	for s := 0; s < lg.size; s++ {
		for t := 0; t < T; t++ {
			n, d, nv := int(lg.recvCnt[s*T+t]), x.dims[t], int(lg.recvVec[s*T+t])
			switch {
			case s == lg.self:
			case lg.recvMeta[(s*T+t)*metaFields+metaFlags]&flagPooled != 0:
				if len(send)+nv*d > cap(send) {
					return errs.Invalidf("exchange: vector send buffer of %d values overflows", len(dst))
				}
				send = x.segs[t].pool(send, seg[t], nv, src[t], d)
				seg[t] += nv
			default:
				for _, u := range lg.inv[t][base[t] : base[t]+n] {
					send = append(send, src[t][int(u)*d:int(u+1)*d]...)
				}
			}
			base[t] += n
		}
	}
	return checkBuilt("vector", send, dst)
}

// checkBuilt reports a send buffer whose builder wrote another length than the op announced (an
// append past dst's capacity would have moved the values to a new array, away from dst).
func checkBuilt(what string, send, dst []float32) error {
	if len(send) != len(dst) || (len(dst) > 0 && &send[0] != &dst[0]) {
		return errs.Invalidf("exchange: %s send buffer: %d values built for %d announced", what, len(send), len(dst))
	}
	return nil
}

// countVecs counts the vectors a leg moves to or from other ranks (cnt and meta per (rank, table)
// block, this rank's own block left out): every one through add, the pooled blocks' also in pooled.
func (x *Exchange) countVecs(lg *leg, cnt, meta, pooled []int64, add func(t int, intra bool, n int64)) {
	T := len(x.layouts)
	for q := 0; q < lg.size; q++ {
		for t := 0; t < T; t++ {
			if nv := cnt[q*T+t]; q != lg.self {
				if meta[(q*T+t)*metaFields+metaFlags]&flagPooled != 0 {
					pooled[t] += nv
				}
				add(t, x.sameNode(lg.rank(q)), nv)
			}
		}
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
			x.countVecs(lg, lg.sendVec, lg.sendMeta, x.Counters.PooledGrads, x.Counters.addGrads)
			splits := x.vecSplits(lg, lg.sendVec)
			return deferredFloats(lg.group, int(sum(splits)), func(dst []float32) error { return x.buildGrads(h, dst) },
				splits, x.vecSplits(lg, lg.recvVec)), nil
		},
		feed: func(_ *Op, _ []int64, recv []float32, _ []byte) error {
			lg := &x.legs[h]
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
			at := x.blockOffsets(lg, lg.recvVec)
			last := h+1 == len(x.legs)
			parallel.ForEach(T, 1, func(t int) {
				e := x.gradEntries(lg, h, t, recv, at)
				if last && x.fused && e.w == nil && x.linear(t) {
					// a linear update needs no merge: the owner adds each entry's gradient to its
					// row in apply (the buffer moves there, out of the release below)
					x.direct[t], x.grads[h][t] = e, nil
					x.pools.floats().put(out[t])
					out[t] = nil
					return
				}
				mergeInto(out[t], e.g, e.dst, e.src, 1, e.w, x.dims[t], x.pools.ints())
				x.pools.ints().put(e.src)
			})
			x.release([][][]float32{x.grads[h]})
			x.grads[h] = nil
			x.grads[h+1] = out
			return nil
		},
	}
}

// buildGrads writes leg h's gradient send buffer into dst: per destination block, the merged
// gradient of each ID sent there (in send order), or of each bag segment its owner pooled.
func (x *Exchange) buildGrads(h int, dst []float32) error {
	T := len(x.layouts)
	lg := &x.legs[h]
	g := x.grads[h]
	send := dst[:0]
	pos := make([]int, T)
	for d := 0; d < lg.size; d++ {
		for t := 0; t < T; t++ {
			n, dim, nv := int(lg.sendCnt[d*T+t]), x.dims[t], int(lg.sendVec[d*T+t])
			switch {
			case d == lg.self:
			case lg.sendMeta[(d*T+t)*metaFields+metaFlags]&flagPooled != 0:
				at := (len(lg.items[t]) + x.plans[t].partStart[d]) * dim
				send = append(send, g[t][at:at+nv*dim]...)
			default:
				for _, i := range lg.perm[t][pos[t] : pos[t]+n] {
					send = append(send, g[t][int(i)*dim:int(i+1)*dim]...)
				}
			}
			pos[t] += n
		}
	}
	return checkBuilt("gradient", send, dst)
}

// blockOffsets is, per (source, table) block of a float32 buffer a leg received (source-major,
// cnt[s·T+t] vectors of dims[t] values each, the rank's own block absent), where it starts.
func (x *Exchange) blockOffsets(lg *leg, cnt []int64) []int64 {
	T := len(x.layouts)
	at := make([]int64, lg.size*T)
	var p int64
	for s := 0; s < lg.size; s++ {
		for t := 0; t < T; t++ {
			if s == lg.self {
				continue
			}
			at[s*T+t] = p
			p += cnt[s*T+t] * int64(x.dims[t])
		}
	}
	return at
}

// arriving is the number of gradient values of table t that other ranks send this rank on the
// route's first leg: gradEntries appends them to the rank's own level-0 gradients, which the
// backward allocates with this much room so that they need not move.
func (x *Exchange) arriving(t int) int {
	lg, T := &x.legs[0], len(x.layouts)
	var n int
	for q := 0; q < lg.size; q++ {
		if q != lg.self {
			n += int(lg.recvVec[q*T+t])
		}
	}
	return n * x.dims[t]
}

// gradEntries lists table t's gradients arriving at leg h, to be merged into one row per distinct
// ID of the next level: every received ID's gradient, or for a block this rank pooled, each
// segment's gradient spread to its values' rows (times their weights), in arrival order (source,
// then entry), the rank's own block read in place from its level-h gradients. The blocks that
// arrived are appended to those gradients so that one buffer (the entries' g) holds every source.
func (x *Exchange) gradEntries(lg *leg, h, t int, recv []float32, at []int64) gradEntries {
	T, dim := len(x.layouts), x.dims[t]
	g := x.grads[h][t]
	var remote int
	for q := 0; q < lg.size; q++ {
		if q != lg.self {
			remote += int(lg.recvVec[q*T+t]) * dim
		}
	}
	if cap(g)-len(g) < remote {
		ng := x.pools.floats().get(len(g) + remote)[:len(g)]
		copy(ng, g)
		x.pools.floats().put(g)
		g = ng
	}
	start := make([]int64, lg.size) // per source: where its block starts in g
	for q := 0; q < lg.size; q++ {
		if q != lg.self {
			start[q] = int64(len(g))
			g = append(g, recv[at[q*T+t]:at[q*T+t]+lg.recvVec[q*T+t]*int64(dim)]...)
		}
	}
	x.grads[h][t] = g
	var sg *ownerSegs
	if h == 0 && x.segs != nil && x.segs[t].any() {
		sg = &x.segs[t]
	}
	pooled := func(q int) bool { return sg != nil && lg.recvMeta[(q*T+t)*metaFields+metaFlags]&flagPooled != 0 }
	total := 0
	for q := 0; q < lg.size; q++ {
		if !pooled(q) {
			total += int(lg.recvCnt[q*T+t])
		}
	}
	if sg != nil {
		total += len(sg.rows)
	}
	dst, src := make([]int32, 0, total), x.pools.ints().get(total)[:0]
	var w []float32
	if sg != nil && sg.w != nil {
		w = make([]float32, 0, total)
	}
	inv, d := lg.inv[t], int64(dim)
	base, seg := 0, 0
	for q := 0; q < lg.size; q++ {
		n, nv := int(lg.recvCnt[q*T+t]), int(lg.recvVec[q*T+t])
		switch {
		case pooled(q):
			for k := 0; k < nv; k++ {
				for j := sg.bounds[seg+k]; j < sg.bounds[seg+k+1]; j++ {
					dst = append(dst, int32(sg.rows[j]))
					src = append(src, start[q]+int64(k)*d)
				}
			}
			if w != nil {
				w = append(w, sg.w[sg.bounds[seg]:sg.bounds[seg+nv]]...)
			}
			seg += nv
		case q == lg.self:
			for k, i := range lg.perm[t][lg.selfPerm[t] : lg.selfPerm[t]+n] {
				dst = append(dst, inv[base+k])
				src = append(src, int64(i)*d)
			}
		default:
			for i := 0; i < n; i++ {
				dst = append(dst, inv[base+i])
				src = append(src, start[q]+int64(i)*d)
			}
		}
		for w != nil && len(w) < len(dst) { // rows entries weigh 1
			w = append(w, 1)
		}
		base += n
	}
	return gradEntries{g: g, dst: dst, src: src, w: w}
}

// gradEntries are one table's gradients at a leg, before their merge: per entry, its item of the
// next level (dst), where its gradient starts in g (src) and its weight (w; nil: every entry
// weighs 1).
type gradEntries struct {
	g   []float32
	dst []int32
	src []int64
	w   []float32
}

// linear reports whether table t's shard takes its fused update straight from unmerged gradients
// (embedding.Table.Linear), so the owner skips the merge per distinct row. A data-parallel table's
// merged gradients are all-reduced over the replicas first (replica.go).
func (x *Exchange) linear(t int) bool {
	ls, ok := x.store.(LinearStore)
	return ok && x.layouts[t].Kind != DataParallel && ls.Linear(t)
}
