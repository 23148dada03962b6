package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"errors"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/gcpace"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/internal/sysmon"
)

// Version is the library's version; Python checks it against the package's own.
const Version = "0.1.0"

// recgo_version writes the library version into buf.
//
//export recgo_version
func recgo_version(buf *C.char, buflen C.size_t) C.int {
	writeMessage(buf, buflen, Version)
	return 0
}

// recgo_num_threads returns the number of goroutines parallel kernels use (parallel.Workers).
//
//export recgo_num_threads
func recgo_num_threads() C.int { return C.int(parallel.Workers()) }

// recgo_gc_percent returns the GOGC the library's collector pacing last set (internal/gcpace), or
// -1 when pacing is off (GOGC or RECGO_GC_HEADROOM=0 in the environment).
//
//export recgo_gc_percent
func recgo_gc_percent() C.int { return C.int(gcpace.Current()) }

// recgo_sysmon_thread returns the thread ID of Go's sysmon, which the library set to SCHED_BATCH at
// load (internal/sysmon), or 0 when it set none (RECGO_SYSMON_BATCH=0, a process already under
// SCHED_BATCH, not Linux, or no thread stood out). It waits for the search started at load.
//
//export recgo_sysmon_thread
func recgo_sysmon_thread() C.int64_t { return C.int64_t(sysmon.Quiet()) }

// recgo_debug_fail fails on purpose, for tests of the error path: mode 0 returns an invalid-input
// error, 1 panics in the calling goroutine, 2 panics in a worker goroutine that the engine joins.
//
//export recgo_debug_fail
func recgo_debug_fail(mode C.int, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		switch mode {
		case 0:
			return errs.Invalidf("debug_fail: the argument you asked to be rejected was rejected")
		case 1:
			var m map[string]int
			m["x"] = 1 // nil-map write: a real runtime panic
			return nil
		case 2:
			return panicInWorker()
		default:
			return errors.New("debug_fail: unknown mode")
		}
	})
}
