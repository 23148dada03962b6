package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"runtime"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/offheap"
)

// recgo_live_handles writes into *out the number of handles the engine made that are not freed yet
// (by recgo_free, a capsule's destructor, or the export that consumes them), for leak checks.
//
//export recgo_live_handles
func recgo_live_handles(out *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		if out == nil {
			return errs.Invalidf("out: null pointer")
		}
		*out = C.int64_t(liveHandles.Load())
		return nil
	})
}

// recgo_memory_in_use runs a full garbage collection, then writes into out (2 int64 values) the
// bytes of live Go heap objects (runtime.MemStats.HeapAlloc) and the bytes the engine holds mapped
// outside the Go heap (offheap.Mapped: tables, optimizer state, batch and output buffers), for leak
// checks. The collection stops the world: not for a training loop's hot path.
//
//export recgo_memory_in_use
func recgo_memory_in_use(out unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		dst, err := viewSlice[int64](out, 2, "out")
		if err != nil {
			return err
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		dst[0], dst[1] = int64(ms.HeapAlloc), offheap.Mapped()
		return nil
	})
}
