// Package main is recgo's C ABI: the //export functions that librecgo.so exposes to Python.
//
// It holds marshalling, pointer and size validation, handle bookkeeping and panic recovery, and no
// engine logic. Every export returns a status code (internal/errs.Code*) and, on failure, writes a
// NUL-terminated message into the caller's buffer. A Go panic never crosses the boundary.
package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

func main() {}

// guard runs body, turns its error or panic into a status code, and writes the message into
// errbuf (capacity errlen bytes, NUL-terminated, truncated to fit).
func guard(errbuf *C.char, errlen C.size_t, body func() error) C.int {
	err := errs.Run(body)
	if err != nil {
		writeMessage(errbuf, errlen, err.Error())
	}
	return C.int(errs.Code(err))
}

// writeMessage copies msg into the C buffer, truncating on a UTF-8-agnostic byte boundary. It views
// no more of the buffer than the message needs: errlen comes from the caller, and a huge one (past
// the int range) must not make the view panic here, after the export's own recovery.
func writeMessage(errbuf *C.char, errlen C.size_t, msg string) {
	if errbuf == nil || errlen == 0 {
		return
	}
	n := min(uint64(errlen), uint64(len(msg))+1)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(errbuf)), int(n))
	buf[copy(buf[:n-1], msg)] = 0
}

// goString copies a NUL-terminated C string (the empty string for NULL).
func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}
