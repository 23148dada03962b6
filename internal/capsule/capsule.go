// Package capsule frees an engine handle from the destructor of a Python capsule, in C.
//
// Why: Python frees an object's engine memory when the object is collected. A finalizer written in
// Python (__del__, a weakref callback) is Python code, and a pending Ctrl-C is raised at the first
// instruction of any Python function: one that lands as a finalizer starts runs it no further, so the
// handle was never freed (a batch's or a forward context's memory per interrupt), and the
// KeyboardInterrupt itself was swallowed ("Exception ignored in ... __del__"). A PyCapsule's
// destructor is a C function that runs during deallocation with no Python frame, so nothing can
// interrupt it and a pending signal stays pending for the caller's next instruction.
//
// Python creates each capsule with PyCapsule_New(handle, NULL, Destructor()) and passes the address
// of PyCapsule_GetPointer once (SetGetPointer), so this package needs no link-time Python
// dependency. The destructor runs with the GIL held; it calls the release function the C ABI
// registered (OnRelease), which must not wait on anything that needs Python. In a child forked after
// the library loaded the destructor does nothing: the Go runtime does not survive fork (its threads
// are gone), so entering Go there could hang.
package capsule

/*
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef void *(*recgo_capsule_pointer_fn)(void *capsule, const char *name);
static recgo_capsule_pointer_fn capsule_pointer;
static volatile int forked;

extern void recgoCapsuleRelease(uintptr_t);

static void recgo_capsule_after_fork(void) { forked = 1; }

// Registered once by Go's init (a C constructor could run before the Go runtime is ready to call).
static void recgo_capsule_watch_fork(void) { pthread_atfork(NULL, NULL, recgo_capsule_after_fork); }

static void recgo_capsule_set_pointer(uintptr_t f) { capsule_pointer = (recgo_capsule_pointer_fn)f; }

// The capsules are made with a NULL name, so PyCapsule_GetPointer(capsule, NULL) cannot fail.
static void recgo_capsule_destructor(void *capsule) {
	if (forked || capsule_pointer == NULL) return;
	uintptr_t h = (uintptr_t)capsule_pointer(capsule, NULL);
	if (h != 0) recgoCapsuleRelease(h);
}

static uintptr_t recgo_capsule_destructor_addr(void) { return (uintptr_t)recgo_capsule_destructor; }
*/
import "C"

import "sync/atomic"

var release atomic.Pointer[func(uintptr)]

func init() { C.recgo_capsule_watch_fork() }

// OnRelease sets the function the destructor calls with a capsule's handle (errors are the caller's
// to ignore: a handle freed explicitly before its capsule died is not live any more).
func OnRelease(f func(h uintptr)) { release.Store(&f) }

// SetGetPointer stores the address of Python's PyCapsule_GetPointer, which the destructor needs to
// read a capsule's handle.
func SetGetPointer(addr uintptr) { C.recgo_capsule_set_pointer(C.uintptr_t(addr)) }

// Destructor is the address of the C function to pass as PyCapsule_New's destructor.
func Destructor() uintptr { return uintptr(C.recgo_capsule_destructor_addr()) }

func releaseHandle(h uintptr) {
	if f := release.Load(); f != nil {
		(*f)(h)
	}
}
