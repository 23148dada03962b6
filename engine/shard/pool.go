package shard

import (
	"sync"

	"github.com/recgo/recgo/engine/embedding"
)

// freeList recycles a collection's large per-step buffers (rows, gradients, send buffers) from
// one step to the next. The embedding rows a step moves dwarf everything else it allocates, and
// with fresh buffers every step the Go heap kept growing, collecting and faulting pages back in.
// Safe for concurrent use; a nil list allocates.
type freeList[T any] struct {
	mu   sync.Mutex
	bufs [][]T
	keep int // the most buffers kept; 0: freeListMin
	made int // buffers of a keepable size get allocated because none kept fitted (tests read it)
}

// freeMinCap is the smallest buffer capacity a list keeps (smaller ones are cheap to allocate).
const freeMinCap = 1024

// freeListMin is the fewest buffers a list keeps (a step uses a few per route leg and table).
const freeListMin = 32

// buffersPerTable is how many of a list's buffers one table may hold at once within a step
// (rows and gradients per leg and level, the pooled gradient, the send buffers). A list kept to
// fewer than a step holds misses on every step: with 26 tables it allocated (and zeroed) a
// quarter of the buffers afresh each step.
const buffersPerTable = 8

// get returns a buffer of length n (contents undefined): the smallest kept one that fits, or a new one.
func (l *freeList[T]) get(n int) []T {
	if l == nil {
		return make([]T, n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	best := -1
	for k, b := range l.bufs {
		if cap(b) >= n && (best < 0 || cap(b) < cap(l.bufs[best])) {
			best = k
		}
	}
	if best < 0 {
		if n >= freeMinCap {
			l.made++
		}
		return make([]T, n, n+n/4)
	}
	b := l.bufs[best]
	l.bufs[best] = l.bufs[len(l.bufs)-1]
	l.bufs = l.bufs[:len(l.bufs)-1]
	return b[:n]
}

// put hands buffers back (the caller must not use them afterwards); small ones are dropped.
func (l *freeList[T]) put(bs ...[]T) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range bs {
		if cap(b) < freeMinCap {
			continue
		}
		if len(l.bufs) < max(l.keep, freeListMin) {
			l.bufs = append(l.bufs, b)
			continue
		}
		small := 0 // full: replace the smallest kept buffer when this one is larger
		for k, c := range l.bufs {
			if cap(c) < cap(l.bufs[small]) {
				small = k
			}
		}
		if cap(b) > cap(l.bufs[small]) {
			l.bufs[small] = b
		}
	}
}

// pools are a collection's free lists.
type pools struct {
	f32 freeList[float32]
	i64 freeList[int64]
	u8  freeList[byte]

	ddMu sync.Mutex
	dd   []*deduper // idle dedupers (a mutex-guarded stack: a sync.Pool drops them at every GC)
}

// dedup returns the distinct IDs of ids in first-seen order and writes each ID's index among them
// to inv (len(ids)), as embedding.Deduper.Dedup does, with a recycled deduper.
func (p *pools) dedup(ids []int64, inv []int32) []int64 { return p.dedupMax(ids, inv, maxID(ids)) }

// maxID is the largest of ids as unsigned (a negative ID wraps to a huge value; 0 for none): one
// pass gives both the range check of a fixed table's IDs and the deduper's choice of index.
func maxID(ids []int64) uint64 {
	var hi uint64
	for _, id := range ids {
		hi = max(hi, uint64(id))
	}
	return hi
}

// dedupMax is dedup of ids whose maxID is hi.
func (p *pools) dedupMax(ids []int64, inv []int32, hi uint64) []int64 {
	if p == nil {
		var d embedding.Deduper
		return d.Dedup(ids, nil, inv)
	}
	p.ddMu.Lock()
	var d *deduper
	if n := len(p.dd); n > 0 {
		d, p.dd = p.dd[n-1], p.dd[:n-1]
	} else {
		d = new(deduper)
	}
	p.ddMu.Unlock()
	out := d.dedup(ids, inv, hi)
	p.ddMu.Lock()
	if len(p.dd) < dedupersMax {
		p.dd = append(p.dd, d)
	}
	p.ddMu.Unlock()
	return out
}

// dedupersMax is the most idle dedupers a collection keeps (one per table deduplicated at once).
const dedupersMax = 64

// denseMin and denseMax bound the IDs a deduper indexes densely: below denseMin always, below
// denseMax when the list is at least a quarter as long as the ID range (the index costs 4 bytes
// and one bit per ID of the range, kept between passes).
const (
	denseMin = 1 << 20
	denseMax = 1 << 22
)

// deduper deduplicates one ID list at a time. IDs in a small range (every shard layout's IDs are
// its table's rows, checked before they reach a deduper) go through a dense index: a bitmap of the
// IDs seen (cache resident; only a seen ID's slot is read) and a slot per ID holding its index;
// others through the engine's hash index. Both give the same first-seen order. Not safe for
// concurrent use.
type deduper struct {
	hash embedding.Deduper
	slot []int32  // per ID below len(slot): its index among the distinct IDs (valid where seen)
	seen []uint64 // bitmap over the same range; all clear between passes
	last int      // the last pass's distinct count (sizes the next output)
}

// dedup deduplicates ids, whose maxID is hi (a negative ID's huge value takes the hash index).
func (d *deduper) dedup(ids []int64, inv []int32, hi uint64) []int64 {
	if len(ids) == 0 || hi >= max(denseMin, min(denseMax, 4*uint64(len(ids)))) {
		out := d.hash.Dedup(ids, nil, inv)
		d.last = len(out)
		return out
	}
	if uint64(len(d.slot)) <= hi {
		n := nextPow2(int(hi) + 1)
		d.slot, d.seen = make([]int32, n), make([]uint64, (n+63)/64)
	}
	slot, seen := d.slot, d.seen
	// Sized from the last pass (a pooled deduper serves lists of other sizes too, the owner's merged
	// ones among them), and at least half the list: a regrown output costs more than the slack.
	uniq := make([]int64, 0, min(len(ids), max(d.last+d.last/4+64, len(ids)/2)))
	for p, id := range ids {
		w, bit := id>>6, uint64(1)<<(id&63)
		if seen[w]&bit == 0 {
			seen[w] |= bit
			slot[id] = int32(len(uniq))
			inv[p] = int32(len(uniq))
			uniq = append(uniq, id)
			continue
		}
		inv[p] = slot[id]
	}
	for _, id := range uniq {
		seen[id>>6] = 0
	}
	d.last = len(uniq)
	return uniq
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// sizeFor keeps enough buffers for a step over tables tables (call before the first step).
func (p *pools) sizeFor(tables int) {
	n := freeListMin + buffersPerTable*tables
	p.f32.keep, p.i64.keep, p.u8.keep = n, n, n
}

func (p *pools) floats() *freeList[float32] {
	if p == nil {
		return nil
	}
	return &p.f32
}

func (p *pools) ints() *freeList[int64] {
	if p == nil {
		return nil
	}
	return &p.i64
}

func (p *pools) bytes() *freeList[byte] {
	if p == nil {
		return nil
	}
	return &p.u8
}
