// Package gccycle runs functions once after each garbage-collection cycle of the Go heap: the hook
// the library's periodic upkeep hangs on (gcpace's pacing, sysmon's sweep), so that an idle process
// does no upkeep at all and a busy one does it as often as it collects.
package gccycle

import (
	"runtime"
	"sync"
)

var (
	mu    sync.Mutex
	funcs []func()
	armed bool
)

// Each runs f after every collection from now on, on the runtime's cleanup goroutine, one function
// after another (f must not block). It cannot be undone.
func Each(f func()) {
	mu.Lock()
	defer mu.Unlock()
	funcs = append(funcs, f)
	if !armed {
		armed = true
		arm()
	}
}

// sentinel is a heap object whose cleanup runs once per collection cycle (it is unreachable as
// soon as it is made); each run re-arms with a fresh one first, so that a collection that starts
// while the functions run (they may take a while) has a sentinel to find and is not skipped.
type sentinel struct{ _ [32]byte }

func arm() {
	s := new(sentinel)
	runtime.AddCleanup(s, func(struct{}) { arm(); run() }, struct{}{})
}

func run() {
	mu.Lock()
	fs := funcs
	mu.Unlock()
	for _, f := range fs {
		f()
	}
}
