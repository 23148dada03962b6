// Package gcpace bounds how far the Go heap grows between garbage collections.
//
// Why: Go's default pacing (GOGC=100) lets the heap grow by as much as is live before the next
// collection. Most of recgo's live heap is long-lived numeric scratch that collections keep for
// reuse (free lists of send, receive and gradient buffers), while a training step's garbage is a
// few megabytes of index arrays. With several collections in one process (a pooled and a sequence
// collection, a train and an eval model), the live heap reaches hundreds of megabytes and each
// step's fresh allocations then walk through that much address space before it is reused: cold
// cache lines, TLB misses and page faults where the memory was returned to the OS. Keeping the
// growth near a fixed size instead (GOGC = 100 × Headroom ÷ live heap, capped at 100) reuses
// freed memory while it is still cached. The extra garbage-collection cycles are cheap: the live
// heap is almost all pointer-free, so marking it is quick.
//
// A process that sets GOGC itself keeps its setting; RECGO_GC_HEADROOM (MiB, 0 = off) overrides
// the default headroom.
package gcpace

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/recgo/recgo/internal/gccycle"
)

// DefaultHeadroom is the heap growth allowed between collections when RECGO_GC_HEADROOM is unset:
// about a last-level cache, several steps' index arrays.
const DefaultHeadroom = 32 << 20

// MinPercent is the lowest GOGC the pacer sets, so a very large live heap (gigabytes of dynamic
// tables) is not collected over and over.
const MinPercent = 10

var (
	once     sync.Once
	mu       sync.Mutex
	headroom atomic.Int64 // bytes; 0 when pacing is off
	percent  atomic.Int64 // the GOGC last set (100 before any change)
)

// Start turns pacing on unless the environment sets GOGC or RECGO_GC_HEADROOM=0. It returns the
// headroom in bytes (0: off). Calling it again does nothing and returns the same value.
func Start() int64 {
	once.Do(func() {
		h, ok := FromEnv(os.Getenv("GOGC"), os.Getenv("RECGO_GC_HEADROOM"))
		if !ok {
			return
		}
		headroom.Store(h)
		percent.Store(100)
		gccycle.Each(adjust)
	})
	return headroom.Load()
}

// FromEnv returns the headroom for the given GOGC and RECGO_GC_HEADROOM values (MiB) and whether
// pacing runs: not when GOGC is set (the user's choice stands), nor when RECGO_GC_HEADROOM is 0.
// An unparsable or negative RECGO_GC_HEADROOM means the default.
func FromEnv(gogc, mib string) (int64, bool) {
	if gogc != "" {
		return 0, false
	}
	if mib == "" {
		return DefaultHeadroom, true
	}
	n, err := strconv.ParseInt(mib, 10, 64)
	switch {
	case err != nil || n < 0:
		return DefaultHeadroom, true
	case n == 0:
		return 0, false
	default:
		return min(n, math.MaxInt64>>20) << 20, true
	}
}

// Percent returns the GOGC for a live heap of live bytes and a headroom of h bytes: 100 × h ÷
// live, within [MinPercent, 100].
func Percent(live, h int64) int {
	if live <= 0 || h <= 0 {
		return 100
	}
	p := float64(h) * 100 / float64(live)
	return int(min(100, max(MinPercent, p)))
}

// adjust sets GOGC from the live heap the last collection measured. It runs after each collection
// (gccycle); the mutex keeps two runs from interleaving their stores.
func adjust() {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	live := int64(min(sample[0].Value.Uint64(), math.MaxInt64))
	mu.Lock()
	defer mu.Unlock()
	if p := int64(Percent(live, headroom.Load())); p != percent.Load() {
		percent.Store(p)
		debug.SetGCPercent(int(p))
	}
}

// Current returns the GOGC the pacer last set (100 before its first change; -1 when it is off).
func Current() int {
	if headroom.Load() == 0 {
		return -1
	}
	return int(percent.Load())
}
