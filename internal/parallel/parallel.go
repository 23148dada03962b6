// Package parallel splits index ranges across goroutines. It is the engine's one worker-fan-out
// helper, so every parallel loop shares the same chunking rule and panic handling.
package parallel

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// Workers returns the number of threads parallel loops use: what SetWorkers set, or GOMAXPROCS
// before any call (as when GOMAXPROCS in the environment sizes the process).
func Workers() int {
	if n := workers.Load(); n > 0 {
		return int(n)
	}
	return runtime.GOMAXPROCS(0)
}

var workers atomic.Int64

// SetWorkers makes parallel loops use n threads (n >= 1) and gives Go's scheduler one P more
// (GOMAXPROCS = n + 1).
//
// Why the spare P: every thread that calls into Go from C (Python's main thread for each export, an
// OpenMP worker for each chunk it runs) needs a P, and between calls leaves its P in the syscall
// state. With no P idle, Go's sysmon thread retakes such a P after 20 µs, so the next call waits for
// a handoff, and having retaken one sysmon keeps polling every 20 µs instead of backing off: in
// perf, sysmon alone took 7 % of a sharded rank's CPU time. With one P idle, sysmon leaves a P in a
// syscall alone (for up to 10 ms) and backs off. The spare P runs no loop of the engine's, whose
// thread counts come from Workers.
//
// Calls may overlap (recgo_set_num_threads from several threads): the count and GOMAXPROCS are set
// together under a lock, or the count of one call and the GOMAXPROCS of another were left.
func SetWorkers(n int) {
	n = max(n, 1)
	setMu.Lock()
	defer setMu.Unlock()
	workers.Store(int64(n))
	runtime.GOMAXPROCS(n + 1)
}

var setMu sync.Mutex

// For calls body(lo, hi) over [0, n) cut into equal contiguous chunks of at least minChunk items (a
// few per worker) and returns when all are done. The calling goroutine and up to Workers()-1 helpers
// claim chunks from a shared counter, and the caller waits only for chunks already claimed: on a
// busy machine (other processes, or torch's OpenMP workers still spinning after their last op) a
// helper that does not get a CPU in time claims nothing and nobody waits for it, where a fixed split
// into goroutines would wait for the slowest. With one chunk it runs inline. A panic in any chunk is
// re-raised in the caller's goroutine (so the C ABI's recover sees it) after all claimed chunks end.
func For(n, minChunk int, body func(lo, hi int)) { ForN(0, n, minChunk, body) }

// ForN is For with at most workers threads (the caller's included; workers <= 0 means Workers()).
// A caller with a CPU budget of its own, such as an input pipeline stage that must leave the other
// cores to the training step, passes that budget here.
func ForN(workers, n, minChunk int, body func(lo, hi int)) {
	if n <= 0 {
		return
	}
	minChunk = max(minChunk, 1)
	if workers <= 0 {
		workers = Workers()
	}
	chunks := min(workers*4, (n+minChunk-1)/minChunk)
	if chunks <= 1 || workers == 1 {
		body(0, n)
		return
	}
	size := (n + chunks - 1) / chunks
	chunks = (n + size - 1) / size
	var next, left atomic.Int64
	left.Store(int64(chunks))
	done := make(chan struct{})
	var once sync.Once
	var panicked any
	work := func() {
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						once.Do(func() { panicked = r })
					}
					if left.Add(-1) == 0 {
						close(done)
					}
				}()
				body(c*size, min(n, (c+1)*size))
			}()
		}
	}
	(*team.Load())(min(workers, chunks), work)
	<-done
	if panicked != nil {
		panic(fmt.Sprintf("parallel worker: %v", panicked))
	}
}

// team runs work on n threads of the current scheduling (see SetTeam): by default the caller and n-1
// new goroutines. Atomic: recgo_use_openmp may switch it while other threads' loops start.
var team atomic.Pointer[func(n int, work func())]

func init() { SetTeam(nil) }

func goroutineTeam(n int, work func()) {
	for range n - 1 {
		go work()
	}
	work()
}

// SetTeam replaces how For starts its helpers: run(n, work) must call work from n threads (the
// caller's included) and may return before they finish; nil restores goroutines. It may be called
// while loops run: each loop starts its helpers with the team it read when it began.
func SetTeam(run func(n int, work func())) {
	if run == nil {
		run = goroutineTeam
	}
	team.Store(&run)
}

// ForEach calls body(i) for each i in [0, n) with the chunking of For.
func ForEach(n, minChunk int, body func(i int)) { ForEachN(0, n, minChunk, body) }

// ForEachN is ForEach with at most workers threads (see ForN).
func ForEachN(workers, n, minChunk int, body func(i int)) {
	ForN(workers, n, minChunk, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			body(i)
		}
	})
}
