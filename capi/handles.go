package main

/*
#include <stdint.h>
*/
import "C"

import (
	"runtime/cgo"
	"sync/atomic"
	"unsafe"

	"github.com/recgo/recgo/internal/capsule"
	"github.com/recgo/recgo/internal/errs"
)

// closer is implemented by handle targets that own memory outside the Go heap.
type closer interface{ Close() error }

// liveHandles counts the handles newHandle made that deleteHandle has not deleted yet: what Python
// (or an export that frees its own) still has to free. recgo_live_handles reads it for leak checks.
var liveHandles atomic.Int64

// newHandle registers v and returns its handle for Python to hold.
func newHandle(v any) C.uintptr_t {
	h := C.uintptr_t(cgo.NewHandle(v))
	liveHandles.Add(1)
	return h
}

// deleteHandle deletes the live handle h without closing its object; liveHandles counts it gone
// only once the delete succeeded (cgo.Handle.Delete panics on a handle that is not live).
func deleteHandle(h C.uintptr_t) {
	cgo.Handle(h).Delete()
	liveHandles.Add(-1)
}

// lookup returns the object behind h as a T, or a named error for a zero, freed or mistyped handle.
func lookup[T any](h C.uintptr_t, what string) (T, error) {
	var zero T
	if h == 0 {
		return zero, errs.Invalidf("%s: null handle", what)
	}
	v, ok := handleValue(cgo.Handle(h))
	if !ok {
		return zero, errs.Invalidf("%s: handle %d is not live (already freed?)", what, uint64(h))
	}
	t, ok := v.(T)
	if !ok {
		return zero, errs.Invalidf("%s: handle %d refers to a %T", what, uint64(h), v)
	}
	return t, nil
}

// handleValue is cgo.Handle.Value without its panic on invalid handles.
// lookupView is lookup of handle h followed by viewSlice of the caller's n elements at p: the
// marshalling of an export that works on one handle and one buffer.
func lookupView[T, E any](h C.uintptr_t, what string, p unsafe.Pointer, n C.int64_t, name string) (T, []E, error) {
	v, err := lookup[T](h, what)
	if err != nil {
		return v, nil, err
	}
	buf, err := viewSlice[E](p, int64(n), name)
	return v, buf, err
}

func handleValue(h cgo.Handle) (v any, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return h.Value(), true
}

// recgo_free releases a handle and, when its object owns memory outside the Go heap, that memory.
//
//export recgo_free
func recgo_free(h C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error { return freeHandle(h) })
}

func freeHandle(h C.uintptr_t) error {
	v, ok := handleValue(cgo.Handle(h))
	if !ok || h == 0 {
		return errs.Invalidf("free: handle %d is not live", uint64(h))
	}
	deleteHandle(h)
	if c, ok := v.(closer); ok {
		return c.Close()
	}
	return nil
}

// Python owns each handle through a capsule whose C destructor frees it when the owner is collected
// (internal/capsule: no Python code runs then, so a Ctrl-C cannot stop it). A handle already freed
// explicitly is not live any more; that, and any error of Close, has no one to go to.
func init() {
	capsule.OnRelease(func(h uintptr) { guard(nil, 0, func() error { return freeHandle(C.uintptr_t(h)) }) })
}

// recgo_capsule_destructor takes the address of Python's PyCapsule_GetPointer and writes to *out the
// address of the C function to pass as the destructor of a capsule made with PyCapsule_New(handle,
// NULL, destructor): it frees the handle when the capsule is collected (nothing in a forked child).
//
//export recgo_capsule_destructor
func recgo_capsule_destructor(getPointer C.uintptr_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		if getPointer == 0 || out == nil {
			return errs.Invalidf("capsule destructor: null pointer")
		}
		capsule.SetGetPointer(uintptr(getPointer))
		*out = C.uintptr_t(capsule.Destructor())
		return nil
	})
}

// storeHandle returns err, or stores v as a new handle in *out when err is nil.
func storeHandle[T any](out *C.uintptr_t, v T, err error) error {
	if err != nil {
		return err
	}
	return putHandle(out, v)
}

// putHandle stores v as a new handle in *out. A NULL out is refused, and v closed when it owns
// memory or goroutines ([closer]): a handle nobody holds could never be freed.
func putHandle(out *C.uintptr_t, v any) error {
	if out == nil {
		if c, ok := v.(closer); ok {
			_ = c.Close() // the refusal is what the caller needs to hear
		}
		return errs.Invalidf("out: null pointer")
	}
	*out = newHandle(v)
	return nil
}

// parseHandle reads n bytes of JSON at doc, parses them with parse and stores the result as a new
// handle in *out.
func parseHandle[T any](doc unsafe.Pointer, n C.int64_t, out *C.uintptr_t, parse func([]byte) (T, error)) error {
	data, err := bytesArg(doc, n, "json")
	if err != nil {
		return err
	}
	v, err := parse(data)
	return storeHandle(out, v, err)
}
