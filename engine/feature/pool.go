package feature

import (
	"math/bits"
	"sync"
	"unsafe"
)

// slabs recycles the int64 buffers of transform runs across batches. Reuse skips the page faults
// and zeroing of fresh memory and keeps the garbage collector (whose stop-the-world phases preempt
// the kernels) mostly idle. Unlike a sync.Pool, which a collection empties, the free lists survive
// garbage collections, so the large buffers of a big batch are still there for the next one.
// Buffers come back unzeroed: every user overwrites all it reads.
var slabs = slabPool{}

// slabsPerClass bounds each free list; small classes keep more, since a batch takes many of them.
func slabsPerClass(k int) int {
	if k >= 20 { // >= 8 MiB
		return 6
	}
	return 64
}

// slabPool holds buffers in power-of-two capacity classes: class k holds capacities in [2^k, 2^k+1).
type slabPool struct {
	mu      sync.Mutex
	classes [64][][]int64
}

// get returns a buffer of length n (contents arbitrary).
func (p *slabPool) get(n int) []int64 {
	if n == 0 {
		return []int64{}
	}
	k := bits.Len(uint(n - 1)) // smallest k with 2^k >= n
	p.mu.Lock()
	if list := p.classes[k]; len(list) > 0 {
		s := list[len(list)-1]
		p.classes[k] = list[:len(list)-1]
		p.mu.Unlock()
		return s[:n]
	}
	p.mu.Unlock()
	return make([]int64, n, 1<<k)
}

// put returns a buffer obtained from get.
func (p *slabPool) put(s []int64) {
	if cap(s) == 0 {
		return
	}
	k := bits.Len(uint(cap(s))) - 1 // 2^k <= cap
	p.mu.Lock()
	if len(p.classes[k]) < slabsPerClass(k) {
		p.classes[k] = append(p.classes[k], s[:0])
	}
	p.mu.Unlock()
}

// alloc takes a buffer for this run; the run's Result returns it to the pool on Release.
func (r *run) alloc(n int) []int64 {
	s := slabs.get(n)
	r.mu.Lock()
	r.bufs = append(r.bufs, s)
	r.mu.Unlock()
	return s
}

// allocAs takes a pooled buffer of n float32 or float64 values (the pool's int64 words viewed as
// the other type; no pointers live in either).
func allocAs[T float32 | float64](r *run, n int) []T {
	var zero T
	words := (n*int(unsafe.Sizeof(zero)) + 7) / 8
	s := r.alloc(words)
	if n == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(s))), n)
}

// Release returns the result's buffers for reuse by later batches. The result (and every slice
// Feature returned) must not be used afterwards. Calling it is optional.
func (r *Result) Release() {
	for _, b := range r.bufs {
		slabs.put(b)
	}
	r.bufs, r.vals, r.lens = nil, nil, nil
}
