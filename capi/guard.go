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
	"fmt"
	"runtime/debug"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

func main() {}

// guard runs body, turns its error or panic into a status code, and writes the message into
// errbuf (capacity errlen bytes, NUL-terminated, truncated to fit).
func guard(errbuf *C.char, errlen C.size_t, body func() error) (code C.int) {
	defer func() {
		if r := recover(); r != nil {
			msg := fmt.Sprintf("internal error (a bug in recgo, please report it): %v\n%s", r, debug.Stack())
			writeMessage(errbuf, errlen, msg)
			code = C.int(errs.CodeInternal)
		}
	}()
	err := body()
	if err != nil {
		writeMessage(errbuf, errlen, err.Error())
	}
	return C.int(errs.Code(err))
}

// writeMessage copies msg into the C buffer, truncating on a UTF-8-agnostic byte boundary.
func writeMessage(errbuf *C.char, errlen C.size_t, msg string) {
	if errbuf == nil || errlen == 0 {
		return
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(errbuf)), int(errlen))
	n := copy(buf[:len(buf)-1], msg)
	buf[n] = 0
}

// goString copies a NUL-terminated C string (the empty string for NULL).
func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}
