package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/recgo/recgo/planner"
	"github.com/recgo/recgo/planner/profile"
)

// recgo_remap_new builds the hot-rows-first remap of a plan from the profile's ranked rows.
//
//export recgo_remap_new
func recgo_remap_new(planH, profH C.uintptr_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := lookup[*planner.Plan](planH, "plan")
		if err != nil {
			return err
		}
		prof, err := lookup[*profile.Profile](profH, "profile")
		if err != nil {
			return err
		}
		r, err := planner.NewRemap(p, prof)
		return storeHandle(out, r, err)
	})
}

// recgo_remap_load reads and verifies a remap.bin file, refusing one whose rows would take more
// than memoryLimit bytes (0: the planner's default limit).
//
//export recgo_remap_load
func recgo_remap_load(path *C.char, memoryLimit C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		r, err := planner.LoadRemap(goString(path), int64(memoryLimit))
		return storeHandle(out, r, err)
	})
}

// recgo_remap_tables writes [{"name","rows","hot","ranked"}] for the remap's tables as JSON.
//
//export recgo_remap_tables
func recgo_remap_tables(h C.uintptr_t, buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		r, err := lookup[*planner.Remap](h, "remap")
		if err != nil {
			return err
		}
		type info struct {
			Name   string `json:"name"`
			Rows   int64  `json:"rows"`
			Hot    int64  `json:"hot"`
			Ranked int    `json:"ranked"`
		}
		infos := make([]info, len(r.Tables))
		for i, t := range r.Tables {
			infos[i] = info{t.Name, t.Rows, t.Hot, len(t.Ranked)}
		}
		return writeJSON(infos, buf, buflen, needed)
	})
}

// recgo_remap_apply maps n IDs of remap table t into out (may alias ids).
//
//export recgo_remap_apply
func recgo_remap_apply(h C.uintptr_t, t C.int64_t, idsPtr unsafe.Pointer, n C.int64_t, outPtr unsafe.Pointer,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		r, err := lookup[*planner.Remap](h, "remap")
		if err != nil {
			return err
		}
		ids, err := viewSlice[int64](idsPtr, int64(n), "ids")
		if err != nil {
			return err
		}
		out, err := viewSlice[int64](outPtr, int64(n), "out")
		if err != nil {
			return err
		}
		return r.Apply(int(t), ids, out)
	})
}

// recgo_remap_apply_kjt maps a KJT's values in one call: key i's values (lengths key-major, batch
// per key) go through remap table tables[i], or are copied when tables[i] is -1.
//
//export recgo_remap_apply_kjt
func recgo_remap_apply_kjt(h C.uintptr_t, tablesPtr unsafe.Pointer, nkeys, batch C.int64_t, lengthsPtr unsafe.Pointer,
	valuesPtr unsafe.Pointer, nvalues C.int64_t, outPtr unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		r, err := lookup[*planner.Remap](h, "remap")
		if err != nil {
			return err
		}
		tabs, err := viewSlice[int64](tablesPtr, int64(nkeys), "tables")
		if err != nil {
			return err
		}
		lengths, err := viewGrid[int64](lengthsPtr, int64(nkeys), int64(batch), "lengths")
		if err != nil {
			return err
		}
		values, err := viewSlice[int64](valuesPtr, int64(nvalues), "values")
		if err != nil {
			return err
		}
		out, err := viewSlice[int64](outPtr, int64(nvalues), "out")
		if err != nil {
			return err
		}
		return r.ApplyKJT(tabs, int(batch), lengths, values, out)
	})
}
