// Package omp runs the engine's parallel loops on the OpenMP thread team of the process's libgomp
// (the one torch's intra-op pool uses), instead of on Go's own threads.
//
// Why: torch's OpenMP workers spin for a while after each parallel op. On a small machine those
// spinning threads hold the cores that Go's worker threads need for the embedding step that follows,
// and the step's time then depends on how the OS happens to schedule the two pools. Running recgo's
// chunks on the same OpenMP threads turns the spinning into useful work: a worker that is spinning
// picks up recgo's team at once, and the two pools never compete for a core.
//
// The library is found at run time (dlopen with RTLD_NOLOAD of a path the caller names, normally
// torch's bundled libgomp), so librecgo.so does not link against any OpenMP runtime. Each OpenMP
// thread calls back into Go; the first call from a new thread costs more than later ones.
package omp

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

typedef void (*gomp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
typedef int (*omp_max_fn)(void);
static gomp_parallel_fn gomp_parallel;
static omp_max_fn omp_max;

extern void recgoOMPWork(uintptr_t);

static void recgo_omp_body(void *data) { recgoOMPWork((uintptr_t)data); }

static int recgo_omp_open(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
	if (h == NULL) return 1;
	gomp_parallel = (gomp_parallel_fn)dlsym(h, "GOMP_parallel");
	omp_max = (omp_max_fn)dlsym(h, "omp_get_max_threads");
	return gomp_parallel == NULL || omp_max == NULL ? 2 : 0;
}

// Only the process's main thread (where torch runs its intra-op parallel ops) uses the team: Go's own
// threads (pipeline stages) and other C threads keep Go's scheduling, so no thread grows a second pool.
// The team has at most omp_get_max_threads() threads: what torch.set_num_threads set on this thread.
// Returns the team size used (1: the caller runs work alone), or 0 off the main thread.
static unsigned recgo_omp_team(uintptr_t work, unsigned n) {
	if (syscall(SYS_gettid) != getpid()) return 0;
	int m = omp_max();
	if (m >= 1 && (unsigned)m < n) n = (unsigned)m;
	if (n <= 1) {
		recgo_omp_body((void *)work);
		return 1;
	}
	gomp_parallel(recgo_omp_body, (void *)work, n, 0);
	return n;
}
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"sync/atomic"
	"unsafe"
)

var enabled atomic.Bool

// Open resolves GOMP_parallel and omp_get_max_threads in the already-loaded OpenMP runtime at path.
// It fails when that library is not loaded in this process (RTLD_NOLOAD) or lacks either.
func Open(path string) error {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	switch C.recgo_omp_open(cs) {
	case 0:
		enabled.Store(true)
		return nil
	case 1:
		return fmt.Errorf("openmp: %s is not loaded in this process", path)
	default:
		return fmt.Errorf("openmp: %s has no GOMP_parallel or omp_get_max_threads", path)
	}
}

// Enabled reports whether Open succeeded (and Disable was not called since).
func Enabled() bool { return enabled.Load() }

// Disable makes Team fall back to the caller's own scheduling (Enabled reports false).
func Disable() { enabled.Store(false) }

// Team runs work on n OpenMP threads and returns when all return, when called on the process's main
// thread (the caller is thread 0; the team is smaller when torch's intra-op thread count,
// omp_get_max_threads, is, so torch.set_num_threads(1) makes recgo's loops there serial too).
// Elsewhere it runs work on the caller and n-1 goroutines and returns at once (For waits for the
// chunks). work must not panic; it is called concurrently.
func Team(n int, work func()) {
	if enabled.Load() {
		h := cgo.NewHandle(work)
		ran := C.recgo_omp_team(C.uintptr_t(h), C.unsigned(n))
		h.Delete()
		if ran != 0 {
			return
		}
	}
	for range n - 1 {
		go work()
	}
	work()
}

//export recgoOMPWork
func recgoOMPWork(h C.uintptr_t) {
	cgo.Handle(h).Value().(func())()
}
