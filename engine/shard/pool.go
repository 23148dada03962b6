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
}

// freeListMax is the most buffers a list keeps (a step uses a few per route leg).
const freeListMax = 32

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
		if cap(b) < 1024 {
			continue
		}
		if len(l.bufs) < freeListMax {
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
	dd  sync.Pool // *embedding.Deduper: a kept one sizes its index from its last pass (no regrowth)
}

// dedup deduplicates ids as embedding.Deduper.Dedup does, with a recycled deduper.
func (p *pools) dedup(ids []int64, inv []int32) []int64 {
	if p == nil {
		var d embedding.Deduper
		return d.Dedup(ids, nil, inv)
	}
	d, _ := p.dd.Get().(*embedding.Deduper)
	if d == nil {
		d = new(embedding.Deduper)
	}
	defer p.dd.Put(d)
	return d.Dedup(ids, nil, inv)
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
