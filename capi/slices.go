package main

/*
#include <stdint.h>
*/
import "C"

import (
	"math"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

// viewSlice views n elements of type T at ptr (memory owned by the caller, valid for this call
// only). A nil pointer is accepted only for n == 0.
func viewSlice[T any](ptr unsafe.Pointer, n int64, name string) ([]T, error) {
	if n < 0 {
		return nil, errs.Invalidf("%s: negative length %d", name, n)
	}
	if n == 0 {
		return nil, nil
	}
	if ptr == nil {
		return nil, errs.Invalidf("%s: null pointer with length %d", name, n)
	}
	return unsafe.Slice((*T)(ptr), n), nil
}

// viewGrid is viewSlice of rows × cols elements (lengths key-major, one row per key), refusing
// negative counts and a product past int64, which would wrap to a view of the wrong length.
func viewGrid[T any](ptr unsafe.Pointer, rows, cols int64, name string) ([]T, error) {
	n, err := gridSize(rows, cols, name)
	if err != nil {
		return nil, err
	}
	return viewSlice[T](ptr, n, name)
}

// gridSize is rows × cols, refused by name when either is negative or the product overflows int64.
func gridSize(rows, cols int64, name string) (int64, error) {
	if rows < 0 || cols < 0 {
		return 0, errs.Invalidf("%s: negative size %d × %d", name, rows, cols)
	}
	if rows != 0 && cols > math.MaxInt64/rows {
		return 0, errs.Invalidf("%s: size %d × %d overflows int64", name, rows, cols)
	}
	return rows * cols, nil
}

// optionalSlice is viewSlice for an optional argument: a nil pointer means absent (nil slice).
func optionalSlice[T any](ptr unsafe.Pointer, n int64, name string) ([]T, error) {
	if ptr == nil {
		return nil, nil
	}
	return viewSlice[T](ptr, n, name)
}

// boolFlags reads n flag bytes at ptr (not 0: true) as a []bool; nil when there are none (n == 0).
func boolFlags(ptr unsafe.Pointer, n C.int64_t, name string) ([]bool, error) {
	b, err := viewSlice[byte](ptr, int64(n), name)
	if err != nil || len(b) == 0 {
		return nil, err
	}
	out := make([]bool, len(b))
	for i, x := range b {
		out[i] = x != 0
	}
	return out, nil
}

// bytesArg views n bytes at ptr (caller memory, valid for this call only).
func bytesArg(ptr unsafe.Pointer, n C.int64_t, name string) ([]byte, error) {
	return viewSlice[byte](ptr, int64(n), name)
}
