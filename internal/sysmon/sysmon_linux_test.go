//go:build linux

package sysmon

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPick(t *testing.T) {
	cases := []struct {
		name   string
		counts map[int]int
		want   int
		ok     bool
	}{
		{"none", map[int]int{}, 0, false},
		{"one thread always there", map[int]int{7: 64}, 7, true},
		{"one thread, a stray other", map[int]int{7: 60, 9: 3}, 7, true},
		{"minHits is enough", map[int]int{7: minHits}, 7, true},
		{"fewer is not", map[int]int{7: minHits - 1}, 0, false},
		{"two threads alike", map[int]int{7: 40, 9: 40}, 0, false},
		{"a second thread too often", map[int]int{7: 48, 9: 7}, 0, false},
		{"a second thread just rare enough", map[int]int{7: 48, 9: 6}, 7, true},
		{"best found after the second", map[int]int{3: 5, 9: 60}, 9, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := pick(c.counts)
			assert.Equal(t, c.ok, ok)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestEnabled(t *testing.T) {
	for env, want := range map[string]bool{"": true, "1": true, "0": false, " 0 ": false, "no": true} {
		assert.Equal(t, want, Enabled(env), "RECGO_SYSMON_BATCH=%q", env)
	}
}

// TestQuietSetsTheMonitorOnly: a search of its own (with a generous bound) finds this test
// binary's sysmon, a thread other than the caller's; Quiet then sets that thread, and only it, to
// SCHED_BATCH, or, when its bounded search gave up (a loaded machine), sets nothing.
func TestQuietSetsTheMonitorOnly(t *testing.T) {
	if os.Getenv("RECGO_SYSMON_BATCH") == "0" || policy(os.Getpid()) == schedBatch {
		t.Skip("sysmon batching is off in this environment")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mon, ok := find(16*maxPasses, 20*time.Second)
	require.True(t, ok, "no thread stood out in nanosleep")
	require.NotEqual(t, syscall.Gettid(), mon)
	tid := Quiet()
	assert.Equal(t, tid, Quiet(), "a second call returns the first's result")
	assert.Equal(t, tid, Thread())
	assert.Equal(t, schedOther, policy(syscall.Gettid()))
	if tid == 0 {
		assert.Equal(t, schedOther, policy(mon), "a search that gave up sets nothing")
		return
	}
	assert.Equal(t, mon, tid)
	assert.Equal(t, schedBatch, policy(tid))
}

// TestSweepResetsInheritedBatchThreads: a thread made SCHED_BATCH after Quiet (as one sysmon starts
// would be) goes back to SCHED_OTHER; sysmon and the threads that were batch before stay.
func TestSweepResetsInheritedBatchThreads(t *testing.T) {
	if Quiet() == 0 {
		t.Skip("sysmon batching is off in this environment")
	}
	ready, done := make(chan int), make(chan struct{})
	go func() {
		runtime.LockOSThread() // the thread exits with the goroutine, policy and all
		tid := syscall.Gettid()
		if setPolicy(tid, schedBatch) != nil {
			tid = 0
		}
		ready <- tid
		<-done
	}()
	tid := <-ready
	defer close(done)
	require.NotZero(t, tid)
	require.Equal(t, schedBatch, policy(tid))
	sweep()
	assert.Equal(t, schedOther, policy(tid))
	assert.Equal(t, schedBatch, policy(Thread()))
}
