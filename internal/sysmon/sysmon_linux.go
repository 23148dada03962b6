//go:build linux

package sysmon

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/recgo/recgo/internal/gccycle"
)

// Scheduling policies (sched(7)).
const (
	schedOther       = 0
	schedBatch       = 3
	schedResetOnFork = 0x40000000
)

// Quiet samples the process's threads in passes until one thread was found in nanosleep minHits
// times with no other thread there more than an eighth as often, or gives up after maxPasses or
// maxSearch, whichever comes first (a pass reads one file per thread, so a process with hundreds of
// threads makes slow passes). Sysmon is not in nanosleep at every pass: between sleeps it runs, or
// waits for a core that the process's other threads hold, so on a loaded machine the search needs
// more passes; no other thread is found there but in passing.
const (
	minHits   = 16
	maxPasses = 1024
	maxSearch = 250 * time.Millisecond
)

var (
	once   sync.Once
	thread atomic.Int64 // sysmon's thread ID once set to SCHED_BATCH; 0 otherwise
	keep   map[int]bool // threads already SCHED_BATCH before Quiet (the user's): the sweep leaves them
)

// Quiet finds sysmon's thread and sets it to SCHED_BATCH, once per process; later calls return the
// first call's result. It returns the thread ID, or 0 when it set nothing: RECGO_SYSMON_BATCH=0, a
// process already under SCHED_BATCH (whose choice stands), no thread that stood out, or a kernel
// that refused.
func Quiet() int {
	once.Do(func() {
		if !Enabled(os.Getenv("RECGO_SYSMON_BATCH")) || policy(os.Getpid()) == schedBatch {
			return
		}
		tid, ok := find(maxPasses, maxSearch)
		if !ok {
			return
		}
		keep = map[int]bool{}
		for _, t := range threads() {
			if policy(t) == schedBatch {
				keep[t] = true
			}
		}
		if setPolicy(tid, schedBatch) != nil {
			return
		}
		thread.Store(int64(tid))
		gccycle.Each(sweep)
	})
	return int(thread.Load())
}

// Thread returns the thread Quiet set to SCHED_BATCH, or 0.
func Thread() int { return int(thread.Load()) }

// find samples until pick names a thread (checked every 16 passes), for at most passes passes and
// about d.
func find(passes int, d time.Duration) (int, bool) {
	counts := map[int]int{}
	deadline := time.Now().Add(d)
	for p := 1; p <= passes; p++ {
		sample(counts)
		if p%16 == 0 {
			if tid, ok := pick(counts); ok {
				return tid, true
			}
			if time.Now().After(deadline) {
				break
			}
		}
	}
	return 0, false
}

// sample adds one to counts for each thread of the process now in nanosleep.
func sample(counts map[int]int) {
	want := strconv.Itoa(syscall.SYS_NANOSLEEP)
	for _, t := range threads() {
		b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(t) + "/syscall")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 && f[0] == want {
			counts[t]++
		}
	}
}

// pick returns the thread found in nanosleep at least minHits times while each other thread was
// found there at most an eighth as often, and whether there was one.
func pick(counts map[int]int) (int, bool) {
	best, hits, second := 0, 0, 0
	for t, c := range counts {
		switch {
		case c > hits || (c == hits && t < best):
			best, hits, second = t, c, max(second, hits)
		default:
			second = max(second, c)
		}
	}
	if hits < minHits || 8*second > hits {
		return 0, false
	}
	return best, true
}

// sweep sets back to SCHED_OTHER the SCHED_BATCH threads that neither are sysmon nor were batch
// before Quiet: threads sysmon started, which inherited its policy.
func sweep() {
	mon := Thread()
	for _, t := range threads() {
		if t != mon && !keep[t] && policy(t) == schedBatch {
			_ = setPolicy(t, schedOther) // the thread may have exited since it was listed
		}
	}
}

// threads lists the process's thread IDs.
func threads() []int {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(entries))
	for _, e := range entries {
		if t, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// policy returns thread tid's scheduling policy, or -1 when it cannot be read.
func policy(tid int) int {
	p, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
	if errno != 0 {
		return -1
	}
	return int(p) &^ schedResetOnFork
}

// setPolicy sets thread tid's scheduling policy (priority 0, as the fair policies take; the kernel
// keeps its nice value).
func setPolicy(tid, pol int) error {
	var param struct{ priority int32 }
	_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), uintptr(pol),
		uintptr(unsafe.Pointer(&param)))
	if errno != 0 {
		return errno
	}
	return nil
}
