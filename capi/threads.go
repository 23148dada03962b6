package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"os"
	"runtime"
	"sync"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/gcpace"
	"github.com/recgo/recgo/internal/omp"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/internal/sysmon"
)

// At load the library paces Go's garbage collector (internal/gcpace: the heap grows by about a
// cache's size between collections, not by as much as the collections' pooled buffers hold) unless
// the process set GOGC or RECGO_GC_HEADROOM=0, keeps Go's default worker count (the machine's
// cores) with one spare P (parallel.SetWorkers) unless the process set GOMAXPROCS, and starts the
// search for Go's sysmon thread, to set it to SCHED_BATCH (internal/sysmon), unless the process set
// RECGO_SYSMON_BATCH=0.
func init() {
	gcpace.Start()
	if os.Getenv("GOMAXPROCS") == "" {
		parallel.SetWorkers(runtime.GOMAXPROCS(0))
	}
	go sysmon.Quiet() // a few ms of /proc reads: off the load's path
}

// openmpSwitch makes each recgo_use_openmp call one step.
var openmpSwitch sync.Mutex

// recgo_use_openmp runs the engine's parallel loops on the OpenMP team of the already-loaded runtime
// at path (enable != 0), or back on Go's threads (enable == 0).
//
//export recgo_use_openmp
func recgo_use_openmp(path *C.char, enable C.int32_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		openmpSwitch.Lock() // two steps each way: opposite calls at once could leave the team of one, the flag of the other
		defer openmpSwitch.Unlock()
		if enable == 0 {
			omp.Disable()
			parallel.SetTeam(nil)
			return nil
		}
		if err := omp.Open(goString(path)); err != nil {
			return errs.NotFoundf("%v", err)
		}
		parallel.SetTeam(omp.Team)
		return nil
	})
}

// maxThreads is the most goroutines recgo_set_num_threads accepts: far past any useful count (the
// engine's loops are memory-bound), and far below where Go's per-P structures (gigabytes at 10^5)
// and a goroutine per worker and loop make every parallel call crawl.
func maxThreads() int { return max(1024, 8*runtime.NumCPU()) }

// recgo_set_num_threads sets how many goroutines the engine's parallel loops use off the OpenMP
// team (GOMAXPROCS becomes n + 1: parallel.SetWorkers says why); n must be in [1, max(1024, 8 × the
// machine's CPUs)]. Ranks sharing one machine each set their share of its cores, so that their
// loops do not compete for the same ones.
//
//export recgo_set_num_threads
func recgo_set_num_threads(n C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		if n < 1 || n > C.int64_t(maxThreads()) {
			return errs.Invalidf("set_num_threads: the number of threads must be in [1, %d] (this machine has %d CPUs), got %d",
				maxThreads(), runtime.NumCPU(), int64(n))
		}
		parallel.SetWorkers(int(n))
		return nil
	})
}
