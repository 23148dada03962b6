package embedding

import (
	"sort"

	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// sgdPartMin is the fewest lookups a part of a split linear pass gets (below it the goroutine
// start-up outweighs the work).
const sgdPartMin = 4096

// sgdColdCost, sgdRepeatCost and sgdSideCost are the relative costs of a lookup that first
// touches its row, of a repeat of an owned row and of one summed into a side buffer (measured on
// the sequence benchmark: about 100, 10 and 27 ns).
const (
	sgdColdCost   = 10
	sgdRepeatCost = 1
	sgdSideCost   = 3
)

// scaledAdder applies dst[row·stride : +dim] += alpha · src[off : +dim] for queued (row, off)
// pairs in queue order, rowChunk pairs per kernel call, each batch's rows prefetched rowLag
// batches before they are updated. Rows < 0 are skipped.
type scaledAdder struct {
	dst         []float32
	src         []float32
	stride, dim int
	alpha       float32
	rows, offs  [rowLag + 1][rowChunk]int64
	lens        [rowLag + 1]int
	cur, n      int // batch being filled and its entries
	queued      int // batches filled, prefetched and not yet applied
}

func (a *scaledAdder) add(row, off int64) {
	a.rows[a.cur][a.n], a.offs[a.cur][a.n] = row, off
	if a.n++; a.n == rowChunk {
		a.push()
	}
}

// push prefetches the batch being filled, queues it, and applies the oldest when the queue is full.
func (a *scaledAdder) push() {
	kernels.PrefetchRows(a.dst, a.rows[a.cur][:a.n], int64(a.stride), a.dim)
	a.lens[a.cur] = a.n
	a.cur, a.n = (a.cur+1)%(rowLag+1), 0
	if a.queued++; a.queued > rowLag {
		a.apply(a.cur) // the slot the next batch fills holds the oldest queued batch
	}
}

func (a *scaledAdder) apply(slot int) {
	n := a.lens[slot]
	kernels.AddScaledRows(a.dst, a.stride, a.dim, a.rows[slot][:n], a.src, a.offs[slot][:n], a.alpha)
	a.queued--
}

// flush applies everything queued, oldest first.
func (a *scaledAdder) flush() {
	if a.n > 0 {
		a.push()
	}
	for a.queued > 0 {
		a.apply((a.cur + rowLag + 1 - a.queued) % (rowLag + 1))
	}
}

// linearSGD is the backward of one table whose update is linear (SGD without weight decay): each
// lookup's gradient row, times −lr, is added to its table row, reading the gradient once front to
// back. To use every core the table's lookups (in the order dedup numbered them) are cut into
// contiguous parts, one goroutine each, and each row is written by one goroutine only: part p owns
// the distinct IDs first seen in it, [first[p], first[p+1]) (dedup numbers distinct IDs in
// first-seen order), and applies their lookups in place; a lookup of an ID first seen in an
// earlier part is summed into part p's side buffer instead, and finish adds the side buffers to
// the rows once the parts are done. Contiguous parts keep each goroutine's gradient reads
// sequential (splitting the lookups by row instead interleaves both goroutines' reads across the
// whole gradient, and measured no faster than one goroutine). The result equals the merged update
// up to float rounding and depends on the number of parts, not on scheduling.
type linearSGD struct {
	t      *Table
	tc     *tableCtx
	segs   []gradSeg
	bounds []int   // parts+1 lookup positions
	first  []int32 // parts+1 distinct-ID bounds
	alpha  float32
}

// gradSeg is one feature's run of a table's lookups: lookup positions [start, start+n) whose
// gradient rows start at base in the gradient buffer.
type gradSeg struct {
	start, n int
	base     int64
}

// sgdSide is a part's side buffer: per distinct ID of an earlier part its slot (-1 when untouched)
// and, per slot, its distinct ID and the sum of its gradient rows in the part.
type sgdSide struct {
	slot []int32
	ids  []int32
	acc  []float32
}

// newLinearSGD plans table ti's linear pass in up to parts parts.
func (s *SequenceCollection) newLinearSGD(ctx *Context, base []int64, ti, parts int) *linearSGD {
	c := s.view
	t, tc := c.Tables[ti], &ctx.tables[ti]
	B := (len(ctx.offsets) - 1) / len(c.Features)
	l := &linearSGD{t: t, tc: tc, alpha: -float32(t.Opt.LR)}
	p := 0
	for _, f := range c.features[ti] {
		k := ctx.featKey[f]
		m := int(ctx.offsets[(k+1)*B] - ctx.offsets[k*B])
		l.segs = append(l.segs, gradSeg{p, m, base[k]})
		p += m
	}
	n := len(tc.inv)
	parts = max(1, min(parts, n/sgdPartMin))
	one := func() *linearSGD {
		l.bounds, l.first = []int{0, n}, []int32{0, int32(len(tc.rows))}
		return l
	}
	if parts == 1 {
		return one()
	}
	// firstPos[x]: the lookup where distinct ID x first appears (recorded by dedup, or found here).
	// A numbering that is not first-seen (x > max so far + 1) would let two parts write one row:
	// one part then.
	if len(tc.firstPos) != len(tc.rows) {
		tc.firstPos = resize(tc.firstPos, len(tc.rows))
		next := int32(0)
		for q, x := range tc.inv {
			if x > next {
				return one()
			}
			if x == next {
				tc.firstPos[x] = int32(q)
				next++
			}
		}
	}
	// Cut so the parts cost about the same. What costs is the first touch of a row (a miss to
	// memory, sgdColdCost); a repeat of a row the part owns hits the cache (sgdRepeatCost), one going
	// to the side buffer costs a little more (sgdSideCost). The hot IDs are first seen early, so
	// later parts have fewer first touches and get more lookups.
	l.bounds = make([]int, parts+1)
	l.first = make([]int32, parts+1)
	u := int64(len(tc.rows))
	target := (u*sgdColdCost + (int64(n)-u)*sgdSideCost) / int64(parts)
	j := 0
	for q := 1; q < parts; q++ {
		start := int32(j)
		var cost int64
		for ; j < n && cost < target; j++ {
			switch f := tc.firstPos[tc.inv[j]]; {
			case f == int32(j):
				cost += sgdColdCost
			case f >= start:
				cost += sgdRepeatCost
			default:
				cost += sgdSideCost
			}
		}
		l.bounds[q] = j
	}
	l.bounds[parts] = n
	// first[q] = the distinct IDs seen before part q (firstPos increases with x).
	for q := 1; q <= parts; q++ {
		l.first[q] = int32(sort.Search(len(tc.firstPos), func(x int) bool { return int(tc.firstPos[x]) >= l.bounds[q] }))
	}
	tc.side = resize(tc.side, parts)
	return l
}

func (l *linearSGD) parts() int { return len(l.bounds) - 1 }

// run applies part p's lookups: those of IDs it owns in place, the others into its side buffer.
func (l *linearSGD) run(grad []float32, p int) {
	t, tc := l.t, l.tc
	d := int64(t.Dim)
	lo, hi, own := l.bounds[p], l.bounds[p+1], l.first[p]
	direct := scaledAdder{dst: t.Data, src: grad, stride: t.Stride, dim: t.Dim, alpha: l.alpha}
	var side *sgdSide
	var sum scaledAdder
	if p > 0 {
		side = &tc.side[p]
		side.slot = resize(side.slot, int(own))
		for i := range side.slot {
			side.slot[i] = -1
		}
		side.ids = side.ids[:0]
		side.acc = resize(side.acc, int(own)*t.Dim) // slots are cleared when first taken
		sum = scaledAdder{dst: side.acc, src: grad, stride: t.Dim, dim: t.Dim, alpha: 1}
	}
	for _, g := range l.segs {
		a, b := max(lo, g.start), min(hi, g.start+g.n)
		o := g.base + int64(a-g.start)*d
		for _, x := range tc.inv[a:max(a, b)] {
			if x >= own {
				direct.add(tc.rows[x], o)
			} else {
				slot := side.slot[x]
				if slot < 0 {
					slot = int32(len(side.ids))
					side.slot[x] = slot
					side.ids = append(side.ids, x)
					clear(side.acc[int(slot)*t.Dim : int(slot+1)*t.Dim])
				}
				sum.add(int64(slot), o)
			}
			o += d
		}
	}
	direct.flush()
	if side != nil {
		sum.flush()
	}
}

// finish adds the parts' side buffers to their rows, part by part (a row may be in several), each
// part's slots split across goroutines (one writer per row).
func (l *linearSGD) finish() {
	t, tc := l.t, l.tc
	for p := 1; p < l.parts(); p++ {
		side := &tc.side[p]
		parallel.For(len(side.ids), 2048, func(lo, hi int) {
			a := scaledAdder{dst: t.Data, src: side.acc, stride: t.Stride, dim: t.Dim, alpha: l.alpha}
			for i := lo; i < hi; i++ {
				a.add(tc.rows[side.ids[i]], int64(i*t.Dim))
			}
			a.flush()
		})
	}
}
