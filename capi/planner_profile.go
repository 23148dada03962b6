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
	"github.com/recgo/recgo/planner"
	"github.com/recgo/recgo/planner/profile"
)

// recgo_profiler_new starts profiling the tables in specJSON ([{"name","rows","dim","elem_bytes"}]),
// keeping each sample with probability rate (deterministic per seed), CDF at steps quantiles.
//
//export recgo_profiler_new
func recgo_profiler_new(spec unsafe.Pointer, specLen C.int64_t, rate C.double, seed C.uint64_t, steps C.int64_t,
	out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		data, err := bytesArg(spec, specLen, "spec")
		if err != nil {
			return err
		}
		var specs []struct {
			Name      string `json:"name"`
			Rows      int64  `json:"rows"`
			Dim       int    `json:"dim"`
			ElemBytes int    `json:"elem_bytes"`
		}
		if err := json.Unmarshal(data, &specs); err != nil {
			return errs.Invalidf("profiler spec: %v", err)
		}
		ps := make([]profile.Spec, len(specs))
		for i, s := range specs {
			ps[i] = profile.Spec{Name: s.Name, Rows: s.Rows, Dim: s.Dim, ElemBytes: s.ElemBytes}
		}
		p, err := profile.NewProfiler(ps, float64(rate), uint64(seed), int(steps))
		if err != nil {
			return err
		}
		return putHandle(out, p)
	})
}

// recgo_profiler_add counts one KJT-shaped batch: key i feeds profiled table tables[i] (-1: skip),
// lengths holds nkeys*batch counts key-major, values the IDs.
//
//export recgo_profiler_add
func recgo_profiler_add(h C.uintptr_t, tablesPtr unsafe.Pointer, nkeys, batch C.int64_t, lengthsPtr unsafe.Pointer,
	nlengths C.int64_t, valuesPtr unsafe.Pointer, nvalues C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := lookup[*profile.Profiler](h, "profiler")
		if err != nil {
			return err
		}
		tabs, err := viewSlice[int64](tablesPtr, int64(nkeys), "tables")
		if err != nil {
			return err
		}
		lengths, err := viewSlice[int64](lengthsPtr, int64(nlengths), "lengths")
		if err != nil {
			return err
		}
		values, err := viewSlice[int64](valuesPtr, int64(nvalues), "values")
		if err != nil {
			return err
		}
		ti := make([]int, len(tabs))
		for i, t := range tabs {
			ti[i] = int(t)
		}
		return p.Add(ti, int(batch), lengths, values)
	})
}

// recgo_profiler_samples writes the samples offered and kept so far into out[0], out[1].
//
//export recgo_profiler_samples
func recgo_profiler_samples(h C.uintptr_t, outPtr unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := lookup[*profile.Profiler](h, "profiler")
		if err != nil {
			return err
		}
		out, err := viewSlice[int64](outPtr, 2, "out")
		if err != nil {
			return err
		}
		out[0], out[1] = p.Samples()
		return nil
	})
}

// recgo_profiler_profile freezes the counts into a profile handle.
//
//export recgo_profiler_profile
func recgo_profiler_profile(h C.uintptr_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := lookup[*profile.Profiler](h, "profiler")
		if err != nil {
			return err
		}
		prof, err := p.Profile()
		return storeHandle(out, prof, err)
	})
}

// recgo_profile_parse reads a profile from JSON (the format recgo_profile_json writes).
//
//export recgo_profile_parse
func recgo_profile_parse(doc unsafe.Pointer, n C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		return parseHandle(doc, n, out, profile.Parse)
	})
}

// recgo_profile_synthetic builds a synthetic profile from a planner.SyntheticSpec in JSON.
//
//export recgo_profile_synthetic
func recgo_profile_synthetic(doc unsafe.Pointer, n C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		return parseHandle(doc, n, out, func(data []byte) (*profile.Profile, error) {
			var spec planner.SyntheticSpec
			if err := json.Unmarshal(data, &spec); err != nil {
				return nil, errs.Invalidf("synthetic spec: %v", err)
			}
			return planner.Synthetic(spec)
		})
	})
}

// recgo_profile_json writes the profile as JSON (with ranked rows when ranked != 0).
//
//export recgo_profile_json
func recgo_profile_json(h C.uintptr_t, ranked C.int32_t, buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t,
	errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		prof, err := lookup[*profile.Profile](h, "profile")
		if err != nil {
			return err
		}
		view := *prof
		if ranked == 0 {
			view.Tables = make([]profile.Table, len(prof.Tables))
			for i, t := range prof.Tables {
				t.Ranked = nil
				view.Tables[i] = t
			}
		}
		return writeJSON(&view, buf, buflen, needed)
	})
}
