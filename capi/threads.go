package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"runtime"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/omp"
	"github.com/recgo/recgo/internal/parallel"
)

// recgo_use_openmp runs the engine's parallel loops on the OpenMP team of the already-loaded runtime
// at path (enable != 0), or back on Go's threads (enable == 0).
//
//export recgo_use_openmp
func recgo_use_openmp(path *C.char, enable C.int32_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
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

// recgo_set_num_threads sets how many goroutines the engine's parallel loops use off the OpenMP
// team (GOMAXPROCS); n must be at least 1. Ranks sharing one machine each set their share of its
// cores, so that their loops do not compete for the same ones.
//
//export recgo_set_num_threads
func recgo_set_num_threads(n C.int, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		if n < 1 {
			return errs.Invalidf("set_num_threads: the number of threads must be at least 1, got %d", int(n))
		}
		runtime.GOMAXPROCS(int(n))
		return nil
	})
}
