package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
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
