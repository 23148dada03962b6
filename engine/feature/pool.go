package feature

import (
	"math/bits"
	"sync"
)

// slabs recycles the int64 buffers of transform runs across batches. Reuse skips the page faults
// and zeroing of fresh memory and keeps the garbage collector (whose stop-the-world phases preempt
// the kernels) mostly idle. Buffers come back unzeroed: every user overwrites all it reads.
var slabs slabPool

// slabPool holds buffers in power-of-two capacity classes: class k holds capacities in [2^k, 2^k+1).
type slabPool struct{ classes [64]sync.Pool }

// get returns a buffer of length n (contents arbitrary).
func (p *slabPool) get(n int) []int64 {
	if n == 0 {
		return []int64{}
	}
	k := bits.Len(uint(n - 1)) // smallest k with 2^k >= n
	if v, ok := p.classes[k].Get().(*[]int64); ok {
		return (*v)[:n]
	}
	return make([]int64, n, 1<<k)
}

// put returns a buffer obtained from get.
func (p *slabPool) put(s []int64) {
	if cap(s) == 0 {
		return
	}
	k := bits.Len(uint(cap(s))) - 1 // 2^k <= cap
	s = s[:0]
	p.classes[k].Put(&s)
}

// alloc takes a buffer for this run; the run's Result returns it to the pool on Release.
func (r *run) alloc(n int) []int64 {
	s := slabs.get(n)
	r.mu.Lock()
	r.bufs = append(r.bufs, s)
	r.mu.Unlock()
	return s
}

// Release returns the result's buffers for reuse by later batches. The result (and every slice
// Feature returned) must not be used afterwards. Calling it is optional.
func (r *Result) Release() {
	for _, p := range r.parts {
		p.Release()
	}
	r.parts = nil
	for _, b := range r.bufs {
		slabs.put(b)
	}
	r.bufs, r.vals, r.lens = nil, nil, nil
}
