package shard

import (
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
)

// Owner-side pooling. On its route's first leg a requester may ask the rank it sends to (the owner
// on the flat route; on the hierarchical route the rank of its node holding the owner's local
// index, which gets the rows from the owner over the rail) to pool, rather than return rows: with
// long bags a table's distinct IDs at one rank far outnumber its bags, so one partial sum per
// (bag, table) segment costs less than one row per distinct ID. The requester still sends each
// distinct ID once, and with it a per-bag segment length and a per-value index into those IDs (and
// the per-sample weights), each in the narrowest unsigned width that holds its values. The owner
// pools every non-empty segment (Σ_j w_j · row(id_j), in value order) and returns one vector per
// segment; the requester adds the owners' partials to its own rows' terms in a fixed order (one
// writer per bag) and only then applies the bag's mean scale, so MEAN pooling is total sum ÷ total
// length. Backward sends one gradient per segment (the bag's gradient times its scale); the owner
// expands it along the segments it kept (w_j · g to each value's row), merges per distinct row over
// every requester and applies the optimizer once per row.
//
// Which return a block takes is decided per (table, destination, step) by the requester, from
// counts it knows, and announced in the block metadata (countStage), so both sides size every
// buffer without another exchange: [ReturnAuto] compares the bytes of the two (rows: IDs·dim
// floats forward and back; pooled: segments·dim floats forward and back plus the lengths, indices
// and weights); [ReturnRows] and [ReturnPooled] force one. A rank's own IDs always come back as rows
// (nothing travels), and so do data-parallel tables. On the hierarchical route the inter-node leg
// still carries rows merged per node, so its IDs, vectors and gradients keep Eq. 3 whatever the
// returns; pooling saves the intra-node leg's vectors.
//
// Counters: IDs count distinct IDs sent in either return (so Eq. 3 holds for IDs whatever the
// returns); Vecs* count the vectors returned (rows and partials), Grads* the gradients sent (per
// row or per segment); PooledVecs and PooledGrads count how many of those were partials.

// Return selects how owners return a table's vectors to a requester.
type Return int

// The returns: decide per step from the counts, one row per distinct ID, one partial per bag segment.
const (
	ReturnAuto Return = iota
	ReturnRows
	ReturnPooled
)

var returnNames = [...]string{"auto", "rows", "pooled"}

// String is the return's name as Python spells it: auto, rows or pooled.
func (r Return) String() string {
	if r >= 0 && int(r) < len(returnNames) {
		return returnNames[r]
	}
	return "Return(?)"
}

// Bags is one table's bags at the requester, over the table's distinct IDs (the list given to
// ForwardBags): Inv[j] is value j's index among them, bag b holds values [Bounds[b], Bounds[b+1])
// (Bounds[0] = 0), and Weights (nil: all 1) are the per-value weights.
type Bags struct {
	Inv     []int32
	Bounds  []int64
	Weights []float32
}

// ForwardBags queues the forward exchange of Forward, with each table's bags (bags[t] over
// uniq[t]) and return policy (returns nil: all ReturnAuto), so that owners may pool. After the ops
// ran, Plan(t) says how to pool Rows(t) into the bags.
func (x *Exchange) ForwardBags(uniq [][]int64, bags []Bags, returns []Return) error {
	T := len(x.layouts)
	if len(bags) != T || (returns != nil && len(returns) != T) {
		return errs.Invalidf("exchange: %d bag lists and %d returns for %d tables", len(bags), len(returns), T)
	}
	if len(uniq) != T {
		return errs.Invalidf("exchange: %d ID lists for %d tables", len(uniq), T)
	}
	for t, b := range bags {
		if err := b.check(len(uniq[t])); err != nil {
			return errs.Invalidf("exchange: table %q: %v", x.layouts[t].Name, err)
		}
	}
	x.bags, x.returns = bags, returns
	return x.Forward(uniq)
}

func (b *Bags) check(n int) error {
	if len(b.Bounds) == 0 || b.Bounds[0] != 0 || b.Bounds[len(b.Bounds)-1] != int64(len(b.Inv)) {
		return errs.Invalidf("bag bounds do not span the %d values", len(b.Inv))
	}
	for i := 1; i < len(b.Bounds); i++ {
		if b.Bounds[i] < b.Bounds[i-1] {
			return errs.Invalidf("bag bounds decrease at bag %d", i)
		}
	}
	if b.Weights != nil && len(b.Weights) != len(b.Inv) {
		return errs.Invalidf("%d weights for %d values", len(b.Weights), len(b.Inv))
	}
	for _, u := range b.Inv {
		if u < 0 || int(u) >= n {
			return errs.Invalidf("value index %d outside the %d distinct IDs", u, n)
		}
	}
	return nil
}

// PoolPlan is a requester's pooling of one table: entries over slots — slot u < len(uniq) is the
// row of distinct ID u, slot len(uniq)+p the p-th partial sum returned (destination-major, then bag
// order) — with one entry per value returned as a row and one per pooled segment.
type PoolPlan struct {
	Slots   []int32   // per entry: its slot
	Offs    []int64   // the same, for SegmentReduce (once the forward ran: the row Pool reads, see rowsInPlace)
	Weights []float32 // per entry (nil: all 1)
	Bounds  []int64   // per bag: its entries

	nPart     int
	partStart []int // per destination: its first partial (relative to len(uniq))
	lens      [][]int64
	idx       [][]int32
	wts       [][]float32
}

// Plan returns table t's pooling entries (after ForwardBags): bag b of the table is
// Σ_{e in [Bounds[b], Bounds[b+1])} Weights[e] · Rows(t)[Slots[e]], to be scaled by the bag's mean
// factor; Backward takes the gradient of every slot.
func (x *Exchange) Plan(t int) *PoolPlan { return &x.plans[t] }

// partials is the number of partial sums table t's level-0 buffers hold after its own rows.
func (x *Exchange) partials(t int) int {
	if x.plans == nil {
		return 0
	}
	return x.plans[t].nPart
}

// rowsReturned reports whether some of table t's distinct IDs come back as rows (from this rank's
// own rows or a block its owner does not pool): otherwise the pooling entries name partial sums
// alone, and the gradients of the IDs' slots are neither written nor read.
func (x *Exchange) rowsReturned(t int) bool {
	lg, T := &x.legs[0], len(x.layouts)
	for d := 0; d < lg.size; d++ {
		if lg.sendCnt[d*T+t] > 0 && (d == lg.self || lg.sendMeta[(d*T+t)*metaFields+metaFlags]&flagPooled == 0) {
			return true
		}
	}
	return false
}

func (x *Exchange) levelPartials(h, t int) int {
	if h != 0 {
		return 0
	}
	return x.partials(t)
}

// planReturns decides leg 0's return of every (destination, table) block and builds the tables'
// pooling entries and pooled blocks' payloads; dests[t][i] is item i's destination.
func (x *Exchange) planReturns(lg *leg, dests [][]int32) { x.planTables(lg, dests, true) }

// planTables is planReturns; oneDest enables the single-destination shortcut (planOneDest), which
// must plan exactly what the general per-value passes plan (a test compares them).
func (x *Exchange) planTables(lg *leg, dests [][]int32, oneDest bool) {
	T, S := len(x.layouts), lg.size
	x.plans = make([]PoolPlan, T)
	for t := range x.layouts {
		bg, dest, dim := x.bags[t], dests[t], int64(x.dims[t])
		nU, nb := len(lg.items[t]), len(bg.Bounds)-1
		pol := ReturnAuto
		if x.returns != nil {
			pol = x.returns[t]
		}
		nVals, nSegs, maxLen := make([]int64, S), make([]int64, S), make([]int64, S)
		pooled := make([]bool, S)
		remote := false // some of the table's IDs go to another rank that may pool them
		for d := 0; d < S && x.layouts[t].Kind != DataParallel; d++ {
			remote = remote || (d != lg.self && lg.sendCnt[d*T+t] > 0)
		}
		// one: the destination of every item when they all go to one rank (table-wise tables), so
		// the counts come from the bag bounds alone and the items' positions are their indices
		one := -1
		for d := 0; d < S && nU > 0 && oneDest; d++ {
			if lg.sendCnt[d*T+t] == int64(nU) {
				one = d
			}
		}
		switch {
		case pol == ReturnRows || !remote:
		case one >= 0:
			nVals[one] = int64(len(bg.Inv))
			for b := 0; b < nb; b++ {
				if n := bg.Bounds[b+1] - bg.Bounds[b]; n > 0 {
					nSegs[one]++
					maxLen[one] = max(maxLen[one], n)
				}
			}
		default:
			cur, last := make([]int64, S), make([]int, S)
			for d := range last {
				last[d] = -1
			}
			for b := 0; b < nb; b++ {
				for j := bg.Bounds[b]; j < bg.Bounds[b+1]; j++ {
					d := dest[bg.Inv[j]]
					nVals[d]++
					if last[d] != b {
						last[d], cur[d] = b, 0
						nSegs[d]++
					}
					cur[d]++
					maxLen[d] = max(maxLen[d], cur[d])
				}
			}
		}
		if pol != ReturnRows && remote {
			for d := 0; d < S; d++ {
				if d == lg.self || nVals[d] == 0 || x.layouts[t].Kind == DataParallel {
					continue
				}
				ids := lg.sendCnt[d*T+t]
				rows := ids * dim * 8
				pool := nSegs[d]*dim*8 + int64(nb)*int64(widthFor(uint64(maxLen[d]))) + nVals[d]*int64(indexWidth(ids))
				if bg.Weights != nil {
					pool += nVals[d] * 4
				}
				pooled[d] = pol == ReturnPooled || pool < rows
			}
		}
		p := &x.plans[t]
		p.partStart = make([]int, S)
		for d := 0; d < S; d++ {
			p.partStart[d] = p.nPart
			if pooled[d] {
				p.nPart += int(nSegs[d])
			}
		}
		if p.nPart == 0 {
			p.Slots, p.Weights, p.Bounds = bg.Inv, bg.Weights, bg.Bounds
			p.Offs = make([]int64, len(bg.Inv))
			for j, u := range bg.Inv {
				p.Offs[j] = int64(u)
			}
			continue
		}
		if one >= 0 {
			x.planOneDest(lg, t, one)
			continue
		}
		// position of each item within its destination's block (the index a pooled owner decodes)
		posIn := make([]int32, nU)
		var at int
		for d := 0; d < S; d++ {
			n := int(lg.sendCnt[d*T+t])
			for k, i := range lg.perm[t][at : at+n] {
				posIn[i] = int32(k)
			}
			at += n
		}
		p.lens, p.idx, p.wts = make([][]int64, S), make([][]int32, S), make([][]float32, S)
		for d := 0; d < S; d++ {
			if !pooled[d] {
				continue
			}
			p.lens[d] = make([]int64, nb)
			p.idx[d] = make([]int32, 0, nVals[d])
			if bg.Weights != nil {
				p.wts[d] = make([]float32, 0, nVals[d])
			}
			x.announcePooled(lg, t, d, nVals[d], nSegs[d], maxLen[d])
		}
		next := append([]int(nil), p.partStart...)
		seen := make([]int, S)
		for d := range seen {
			seen[d] = -1
		}
		p.Bounds = make([]int64, nb+1)
		p.Slots = make([]int32, 0, len(bg.Inv))
		if bg.Weights != nil {
			p.Weights = make([]float32, 0, len(bg.Inv))
		}
		for b := 0; b < nb; b++ {
			for j := bg.Bounds[b]; j < bg.Bounds[b+1]; j++ {
				u := bg.Inv[j]
				d := dest[u]
				w := float32(1)
				if bg.Weights != nil {
					w = bg.Weights[j]
				}
				if !pooled[d] {
					p.Slots = append(p.Slots, u)
					if p.Weights != nil {
						p.Weights = append(p.Weights, w)
					}
					continue
				}
				if seen[d] != b {
					seen[d] = b
					p.Slots = append(p.Slots, int32(nU+next[d]))
					next[d]++
					if p.Weights != nil {
						p.Weights = append(p.Weights, 1)
					}
				}
				p.lens[d][b]++
				p.idx[d] = append(p.idx[d], posIn[u])
				if p.wts[d] != nil {
					p.wts[d] = append(p.wts[d], w)
				}
			}
			p.Bounds[b+1] = int64(len(p.Slots))
		}
		p.Offs = make([]int64, len(p.Slots))
		for e, s := range p.Slots {
			p.Offs[e] = int64(s)
		}
	}
}

// announcePooled marks block (destination d, table t) of leg 0 as pooled at its receiver, with
// its values, segments and longest segment, in the metadata countStage sends.
func (x *Exchange) announcePooled(lg *leg, t, d int, vals, segs, maxLen int64) {
	T := len(x.layouts)
	m := lg.sendMeta[(d*T+t)*metaFields:]
	m[metaFlags] = flagPooled
	if x.bags[t].Weights != nil {
		m[metaFlags] |= flagWeighted
	}
	m[metaBags], m[metaVals], m[metaLenW] = int64(len(x.bags[t].Bounds)-1), vals, int64(widthFor(uint64(maxLen)))
	lg.sendVec[d*T+t] = segs
}

// planOneDest is planReturns' pooling plan of table t when all its items go to destination d,
// which pools them: one partial per non-empty bag, and the bags' values as they are (an item's
// position in d's block is its index).
func (x *Exchange) planOneDest(lg *leg, t, d int) {
	S, bg, p := lg.size, x.bags[t], &x.plans[t]
	nU, nb := len(lg.items[t]), len(bg.Bounds)-1
	p.lens, p.idx, p.wts = make([][]int64, S), make([][]int32, S), make([][]float32, S)
	p.lens[d], p.idx[d], p.wts[d] = make([]int64, nb), bg.Inv, bg.Weights
	var maxLen int64
	p.Bounds = make([]int64, nb+1)
	p.Slots = make([]int32, 0, p.nPart)
	if bg.Weights != nil {
		p.Weights = make([]float32, 0, p.nPart)
	}
	for b := 0; b < nb; b++ {
		if n := bg.Bounds[b+1] - bg.Bounds[b]; n > 0 {
			p.lens[d][b] = n
			maxLen = max(maxLen, n)
			p.Slots = append(p.Slots, int32(nU+p.partStart[d]+len(p.Slots)))
			if p.Weights != nil {
				p.Weights = append(p.Weights, 1)
			}
		}
		p.Bounds[b+1] = int64(len(p.Slots))
	}
	x.announcePooled(lg, t, d, int64(len(bg.Inv)), int64(len(p.Slots)), maxLen)
	p.Offs = make([]int64, len(p.Slots))
	for e, s := range p.Slots {
		p.Offs[e] = int64(s)
	}
}

// ownerSegs are the bag segments an owner pools for one table, over every requester (source
// order, then bag order; empty segments are not kept).
type ownerSegs struct {
	bounds []int64   // per segment: its values (bounds[0] = 0)
	rows   []int64   // per value: its position among the received IDs; after resolve, its owner row slot
	w      []float32 // per value (nil: all 1)
}

func (s *ownerSegs) any() bool { return len(s.bounds) > 0 }

// resolve maps each value's received position to the owner's distinct-ID slot.
func (s *ownerSegs) resolve(inv []int32) {
	for j, r := range s.rows {
		s.rows[j] = int64(inv[r])
	}
}

// pool appends the partial sums of segments [seg0, seg0+n) over the owner's rows.
func (s *ownerSegs) pool(send []float32, seg0, n int, rows []float32, dim int) []float32 {
	at := len(send)
	send = send[:at+n*dim]
	kernels.SegmentReduce(send, at, dim, dim, rows, s.rows, int64(dim), s.bounds[seg0:seg0+n+1], s.w, nil)
	return send
}

// mergeWeighted sets out row u to Σ w[i] · in row src[i] over the contributions i with dst[i] == u,
// added in increasing i (src nil: in row i; w nil: all 1); rows no contribution names become zero.
func mergeWeighted(out, in []float32, dst []int32, src []int64, w []float32, dim int) {
	mergeInto(out, in, dst, src, int64(dim), w, dim, nil)
}

// mergeInto is mergeWeighted with src[i]·mult the offset of contribution i's values in in (src
// nil: i·mult) and its scratch from free (nil: allocated).
func mergeInto(out, in []float32, dst []int32, src []int64, mult int64, w []float32, dim int, free *freeList[int64]) {
	n := len(out) / dim
	bounds := free.get(n + 1)
	clear(bounds)
	for _, u := range dst {
		bounds[u+1]++
	}
	for u := 0; u < n; u++ {
		bounds[u+1] += bounds[u]
	}
	next := free.get(n)
	copy(next, bounds[:n])
	offs := free.get(len(dst))
	var ws []float32
	if w != nil {
		ws = make([]float32, len(dst))
	}
	for i, u := range dst {
		offs[next[u]] = int64(i)
		if src != nil {
			offs[next[u]] = src[i]
		}
		if w != nil {
			ws[next[u]] = w[i]
		}
		next[u]++
	}
	kernels.SegmentReduce(out, 0, dim, dim, in, offs, mult, bounds, ws, nil)
	free.put(bounds, next, offs)
}
