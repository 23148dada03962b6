//go:build !amd64

package kernels

import "unsafe"

func prefetchRows(base unsafe.Pointer, offs *int64, n int, scale int64, lines int) {}
