package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

// The planner exports' shared marshalling: JSON documents out (with the caller retrying on size),
// byte arguments in, and handles for parsed objects.

// writeDoc copies doc into buf (capacity buflen) when it fits and always reports its length in
// needed, so the caller can retry with a larger buffer.
func writeDoc(doc []byte, buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t) error {
	if needed == nil {
		return errs.Invalidf("needed: null pointer")
	}
	*needed = C.int64_t(len(doc))
	if int64(buflen) >= int64(len(doc)) && len(doc) > 0 {
		dst, err := viewSlice[byte](buf, int64(len(doc)), "buf")
		if err != nil {
			return err
		}
		copy(dst, doc)
	}
	return nil
}

// writeJSON marshals v and writes it with writeDoc.
func writeJSON(v any, buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeDoc(doc, buf, buflen, needed)
}

func bytesArg(ptr unsafe.Pointer, n C.int64_t, name string) ([]byte, error) {
	return viewSlice[byte](ptr, int64(n), name)
}

// storeHandle returns err, or stores v as a new handle in *out when err is nil.
func storeHandle[T any](out *C.uintptr_t, v T, err error) error {
	if err != nil {
		return err
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
