//go:build !amd64

package kernels

import "unsafe"

func prefetchRows(base unsafe.Pointer, offs *int64, n int, scale int64, lines int) {}

func prefetchStrided(base unsafe.Pointer, off, stride int64, n int, lines int) {}

func prefetchBits(base unsafe.Pointer, ids *int64, n int) {}
