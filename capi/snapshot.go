package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/recgo/recgo/engine/dynamic"
	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
)

// recgo_ebc_snapshot_exclusive copies n memory ranges, srcs[i] to dsts[i] of sizes[i] bytes, and
// snapshots the nt dynamic-ID tables whose indices are in tables (a handle per table written to
// snaps, read as recgo_dynamic_snapshot's), all while no pass runs on the collection (fused backwards
// and dynamic tables' training forwards hold the same lock): one step of every table (weights,
// optimizer state, step counters, ID maps), for a checkpoint written while other threads train.
//
//export recgo_ebc_snapshot_exclusive
func recgo_ebc_snapshot_exclusive(h C.uintptr_t, n C.int64_t, srcs, dsts, sizes unsafe.Pointer, nt C.int64_t,
	tables, snaps unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		c, err := lookup[*embedding.Collection](h, "embedding collection")
		if err != nil {
			return err
		}
		from, err := viewSlice[unsafe.Pointer](srcs, int64(n), "sources")
		if err != nil {
			return err
		}
		to, err := viewSlice[unsafe.Pointer](dsts, int64(n), "destinations")
		if err != nil {
			return err
		}
		lens, err := viewSlice[int64](sizes, int64(n), "sizes")
		if err != nil {
			return err
		}
		for i, l := range lens {
			if l < 0 || (l > 0 && (from[i] == nil || to[i] == nil)) {
				return errs.Invalidf("copy %d: %d bytes between %p and %p", i, l, from[i], to[i])
			}
		}
		idx, err := viewSlice[int64](tables, int64(nt), "tables")
		if err != nil {
			return err
		}
		out, err := viewSlice[C.uintptr_t](snaps, int64(nt), "snapshots")
		if err != nil {
			return err
		}
		ds := make([]*dynamic.Table, len(idx))
		for i, t := range idx {
			if ds[i], err = dynamicTable(h, C.int64_t(t)); err != nil {
				return err
			}
		}
		taken := make([]*dynamic.Snapshot, len(ds))
		err = c.Exclusive(func() error {
			for i, l := range lens {
				if l > 0 {
					copy(unsafe.Slice((*byte)(to[i]), l), unsafe.Slice((*byte)(from[i]), l))
				}
			}
			for i, d := range ds {
				if taken[i], err = d.Export(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i, s := range taken {
			out[i] = newHandle(s)
		}
		return nil
	})
}
