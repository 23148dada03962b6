// Package parallel splits index ranges across goroutines. It is the engine's one worker-fan-out
// helper, so every parallel loop shares the same chunking rule and panic handling.
package parallel

import (
	"fmt"
	"runtime"
	"sync"
)

// Workers returns the number of goroutines parallel loops use: GOMAXPROCS.
func Workers() int { return runtime.GOMAXPROCS(0) }

// For calls body(lo, hi) over [0, n) cut into contiguous chunks of at least minChunk items, at most
// a few chunks per worker, and waits for all. With one chunk it runs inline. A panic in any chunk is
// re-raised in the caller's goroutine (so the C ABI's recover sees it) after all chunks end.
func For(n, minChunk int, body func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if minChunk < 1 {
		minChunk = 1
	}
	chunks := min(Workers()*4, (n+minChunk-1)/minChunk)
	if chunks <= 1 {
		body(0, n)
		return
	}
	size := (n + chunks - 1) / chunks
	var wg sync.WaitGroup
	var once sync.Once
	var panicked any
	for lo := 0; lo < n; lo += size {
		hi := min(lo+size, n)
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					once.Do(func() { panicked = r })
				}
			}()
			body(lo, hi)
		}(lo, hi)
	}
	wg.Wait()
	if panicked != nil {
		panic(fmt.Sprintf("parallel worker: %v", panicked))
	}
}

// ForEach calls body(i) for each i in [0, n) with the chunking of For.
func ForEach(n, minChunk int, body func(i int)) {
	For(n, minChunk, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			body(i)
		}
	})
}
