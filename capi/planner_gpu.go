package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/recgo/recgo/planner/gpuinfo"
)

// recgo_gpu_info writes the local GPUs ([{"name","memory_bytes"}], via NVML loaded at run time) as
// JSON; without an NVIDIA driver it fails with a not-found error.
//
//export recgo_gpu_info
func recgo_gpu_info(buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		gpus, err := gpuinfo.Detect()
		if err != nil {
			return err
		}
		return writeJSON(gpus, buf, buflen, needed)
	})
}
