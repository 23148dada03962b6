package main

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

// The JSON-out convention: an export that returns a document takes (buf, buflen, needed), writes the
// document into buf when it fits and always writes its length into *needed; the caller retries with
// needed bytes when the first buffer was short (Python: recgo._lib.call_json).

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
