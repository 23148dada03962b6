// Package gpuinfo reads the local GPUs' names and memory through NVML, which it loads with dlopen
// at run time: librecgo.so gains no load-time dependency and works unchanged without a driver.
//
// github.com/NVIDIA/go-nvml (named in DESIGN.md) links every NVML entry point as an undefined
// dynamic symbol, so a c-shared library using it fails to load through ctypes (RTLD_NOW) on a
// machine without libnvidia-ml (measured: 428 undefined nvml* symbols). This package calls the
// four entry points it needs through dlsym instead.
package gpuinfo

/*
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned long long total, free, used; } recgo_nvml_memory;
typedef int (*recgo_nvml_init)(void);
typedef int (*recgo_nvml_count)(unsigned int*);
typedef int (*recgo_nvml_handle)(unsigned int, void**);
typedef int (*recgo_nvml_mem)(void*, recgo_nvml_memory*);
typedef int (*recgo_nvml_name)(void*, char*, unsigned int);

// recgo_nvml_probe fills up to max GPUs' total memory and names (namelen bytes each) and returns
// the GPU count, or -1 with a message in err.
static int recgo_nvml_probe(const char* lib, int max, unsigned long long* totals, char* names, int namelen,
                            char* err, int errlen) {
	void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "cannot load %s: %s", lib, dlerror());
		return -1;
	}
	recgo_nvml_init init = (recgo_nvml_init)dlsym(h, "nvmlInit_v2");
	recgo_nvml_init shutdown = (recgo_nvml_init)dlsym(h, "nvmlShutdown");
	recgo_nvml_count count = (recgo_nvml_count)dlsym(h, "nvmlDeviceGetCount_v2");
	recgo_nvml_handle handle = (recgo_nvml_handle)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	recgo_nvml_mem mem = (recgo_nvml_mem)dlsym(h, "nvmlDeviceGetMemoryInfo");
	recgo_nvml_name name = (recgo_nvml_name)dlsym(h, "nvmlDeviceGetName");
	if (!init || !shutdown || !count || !handle || !mem || !name) {
		snprintf(err, errlen, "%s lacks an NVML entry point", lib);
		dlclose(h);
		return -1;
	}
	int rc = init();
	if (rc != 0) {
		snprintf(err, errlen, "nvmlInit failed (NVML error %d)", rc);
		dlclose(h);
		return -1;
	}
	unsigned int n = 0;
	rc = count(&n);
	int out = (int)n;
	for (unsigned int i = 0; rc == 0 && i < n && (int)i < max; i++) {
		void* dev = 0;
		recgo_nvml_memory m;
		rc = handle(i, &dev);
		if (rc == 0) rc = mem(dev, &m);
		if (rc == 0) totals[i] = m.total;
		if (rc == 0) rc = name(dev, names + i * namelen, (unsigned int)namelen);
	}
	if (rc != 0) {
		snprintf(err, errlen, "NVML device query failed (NVML error %d)", rc);
		out = -1;
	}
	shutdown();
	dlclose(h);
	return out;
}
*/
import "C"

import (
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

// GPU is one local device.
type GPU struct {
	Name        string `json:"name"`
	MemoryBytes int64  `json:"memory_bytes"`
}

// Library is the NVML shared object Detect loads.
const Library = "libnvidia-ml.so.1"

const maxGPUs, nameLen = 64, 96

// Detect lists the local GPUs. Without an NVIDIA driver it returns an ErrNotFound error naming the
// reason, so callers fall back to a topology given as arguments.
func Detect() ([]GPU, error) { return detect(Library) }

func detect(lib string) ([]GPU, error) {
	totals := make([]C.ulonglong, maxGPUs)
	names := make([]byte, maxGPUs*nameLen)
	errbuf := make([]byte, 256)
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	n := C.recgo_nvml_probe(clib, maxGPUs, &totals[0], (*C.char)(unsafe.Pointer(&names[0])), nameLen,
		(*C.char)(unsafe.Pointer(&errbuf[0])), C.int(len(errbuf)))
	if n < 0 {
		return nil, errs.NotFoundf("gpuinfo: no GPU information: %s", C.GoString((*C.char)(unsafe.Pointer(&errbuf[0]))))
	}
	gpus := make([]GPU, min(int(n), maxGPUs))
	for i := range gpus {
		raw := names[i*nameLen : (i+1)*nameLen]
		end := 0
		for end < len(raw) && raw[end] != 0 {
			end++
		}
		gpus[i] = GPU{Name: string(raw[:end]), MemoryBytes: int64(totals[i])}
	}
	return gpus, nil
}
