package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestForCoversEveryIndexOnce(t *testing.T) {
	cases := []struct{ n, minChunk int }{{0, 1}, {1, 1}, {7, 1}, {1000, 3}, {1000, 5000}, {10, 0}, {12345, 64}, {100, 100000}}
	for _, c := range cases {
		hits := make([]int32, c.n)
		For(c.n, c.minChunk, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				atomic.AddInt32(&hits[i], 1)
			}
		})
		for i, h := range hits {
			assert.EqualValues(t, 1, h, "n=%d index %d", c.n, i)
		}
	}
}

func TestForRepanicsInCaller(t *testing.T) {
	assert.Panics(t, func() {
		ForEach(100, 1, func(i int) {
			if i == 57 {
				panic("boom")
			}
		})
	})
}

func TestForNKeepsToItsBudget(t *testing.T) {
	cases := []struct{ workers, n int }{{1, 1000}, {2, 1000}, {3, 5000}}
	for _, c := range cases {
		var inFlight, peak, calls atomic.Int32
		hits := make([]int32, c.n)
		ForN(c.workers, c.n, 1, func(lo, hi int) {
			calls.Add(1)
			now := inFlight.Add(1)
			for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
			}
			for i := lo; i < hi; i++ {
				atomic.AddInt32(&hits[i], 1)
			}
			time.Sleep(time.Millisecond)
			inFlight.Add(-1)
		})
		assert.LessOrEqual(t, int(peak.Load()), c.workers, "workers=%d", c.workers)
		for i, h := range hits {
			assert.EqualValues(t, 1, h, "workers=%d index %d", c.workers, i)
		}
		if c.workers == 1 {
			assert.EqualValues(t, 1, calls.Load(), "one worker runs the whole range inline")
		}
	}
}

// TestSetWorkersKeepsASpareP checks that loops use the set count while the scheduler gets one P
// more, and that loops keep to the set count (not GOMAXPROCS) when they run.
func TestSetWorkersKeepsASpareP(t *testing.T) {
	prevWorkers, prevProcs := workers.Load(), runtime.GOMAXPROCS(0)
	defer func() { workers.Store(prevWorkers); runtime.GOMAXPROCS(prevProcs) }()
	for _, c := range []struct{ set, workers, procs int }{{1, 1, 2}, {3, 3, 4}, {0, 1, 2}, {-2, 1, 2}} {
		SetWorkers(c.set)
		assert.Equal(t, c.workers, Workers(), "SetWorkers(%d)", c.set)
		assert.Equal(t, c.procs, runtime.GOMAXPROCS(0), "SetWorkers(%d)", c.set)
	}
	SetWorkers(2)
	var inFlight, peak atomic.Int32
	For(64, 1, func(lo, hi int) {
		now := inFlight.Add(1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		time.Sleep(time.Millisecond)
		inFlight.Add(-1)
	})
	assert.LessOrEqual(t, int(peak.Load()), 2, "the spare P runs no chunk")
	workers.Store(0)
	assert.Equal(t, runtime.GOMAXPROCS(0), Workers(), "unset: GOMAXPROCS")
}

// TestSetTeamWhileLoopsRun switches the team (as recgo_use_openmp does from any Python thread)
// while other goroutines run loops: every loop still covers each index once, and under -race the
// switch is no data race (team was a plain variable, read by every loop's start).
func TestSetTeamWhileLoopsRun(t *testing.T) {
	defer SetTeam(nil)
	inline := func(n int, work func()) { work() }
	stop := make(chan struct{})
	switched := make(chan struct{})
	go func() {
		defer close(switched)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				SetTeam(inline)
			} else {
				SetTeam(nil)
			}
		}
	}()
	const loops, n = 4, 2000
	sums := make([]atomic.Int64, loops)
	done := make(chan int, loops)
	for l := range loops {
		go func() {
			for range 50 {
				For(n, 16, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						sums[l].Add(int64(i))
					}
				})
			}
			done <- l
		}()
	}
	for range loops {
		<-done
	}
	close(stop)
	<-switched
	for l := range loops {
		assert.EqualValues(t, 50*n*(n-1)/2, sums[l].Load(), "loop %d", l)
	}
}

// TestSetWorkersFromSeveralGoroutines: recgo.set_num_threads may be called from any thread at any
// time, so two calls may overlap. The worker count and GOMAXPROCS (one more, the spare P) were set
// one after the other without a lock: overlapping calls left the count of one and the GOMAXPROCS
// of the other (no spare P, or a P too many).
func TestSetWorkersFromSeveralGoroutines(t *testing.T) {
	prevWorkers, prevProcs := workers.Load(), runtime.GOMAXPROCS(0)
	defer func() { workers.Store(prevWorkers); runtime.GOMAXPROCS(prevProcs) }()
	for round := range 100 {
		done := make(chan struct{})
		for g := range 4 {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range 5 {
					SetWorkers(1 + (g+i)%3)
				}
			}()
		}
		for range 4 {
			<-done
		}
		assert.Equal(t, Workers()+1, runtime.GOMAXPROCS(0), "round %d", round)
	}
}
