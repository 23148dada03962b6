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
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/gpuinfo"
	"github.com/recgo/recgo/planner/highs"
	"github.com/recgo/recgo/planner/profile"
)

// recgo_highs_solve solves a MILP with HiGHS (row-wise CSR matrix; integer is one byte per column,
// nonzero for integral). start (optional, ncol doubles) is a warm start. On return xOut (ncol
// doubles) holds the solution and info (8 doubles) holds: model status, objective, dual bound, MIP
// gap, start accepted (0/1), seconds, branch-and-bound nodes, start objective (NaN without start).
//
//export recgo_highs_solve
func recgo_highs_solve(ncol, nrow, nnz C.int64_t, sense C.int32_t, cost, colLower, colUpper, integer,
	rowLower, rowUpper, aStart, aIndex, aValue, start unsafe.Pointer, timeLimit, mipRelGap C.double,
	threads C.int32_t, xOut, info unsafe.Pointer, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		n, r, z := int64(ncol), int64(nrow), int64(nnz)
		m := &highs.Model{Sense: highs.Sense(sense)}
		var err error
		views := []struct {
			dst  *[]float64
			ptr  unsafe.Pointer
			n    int64
			name string
		}{
			{&m.ColCost, cost, n, "cost"}, {&m.ColLower, colLower, n, "col_lower"},
			{&m.ColUpper, colUpper, n, "col_upper"}, {&m.RowLower, rowLower, r, "row_lower"},
			{&m.RowUpper, rowUpper, r, "row_upper"}, {&m.AValue, aValue, z, "a_value"},
		}
		for _, v := range views {
			if *v.dst, err = viewSlice[float64](v.ptr, v.n, v.name); err != nil {
				return err
			}
		}
		ints, err := viewSlice[uint8](integer, n, "integer")
		if err != nil {
			return err
		}
		m.Integer = make([]bool, n)
		for j, b := range ints {
			m.Integer[j] = b != 0
		}
		if r > 0 {
			if m.AStart, err = viewSlice[int32](aStart, r+1, "a_start"); err != nil {
				return err
			}
		}
		if m.AIndex, err = viewSlice[int32](aIndex, z, "a_index"); err != nil {
			return err
		}
		x0, err := optionalSlice[float64](start, n, "start")
		if err != nil {
			return err
		}
		xs, err := viewSlice[float64](xOut, n, "x_out")
		if err != nil {
			return err
		}
		out, err := viewSlice[float64](info, 8, "info")
		if err != nil {
			return err
		}
		if threads < 0 || timeLimit < 0 || mipRelGap < 0 {
			return errs.Invalidf("highs: negative threads, time limit or gap")
		}
		res, err := highs.Solve(m, highs.Options{TimeLimit: float64(timeLimit),
			MipRelGap: float64(mipRelGap), Threads: int(threads)}, x0)
		if err != nil {
			return err
		}
		copy(xs, res.X)
		accepted := 0.0
		if res.StartAccepted {
			accepted = 1
		}
		copy(out, []float64{float64(res.Status), res.Objective, res.DualBound, res.Gap, accepted,
			res.Seconds, float64(res.Nodes), res.StartObjective})
		return nil
	})
}

// profileConfig looks up the profile behind profH and parses the planner.Config JSON at cfg.
func profileConfig(profH C.uintptr_t, cfg unsafe.Pointer, n C.int64_t) (*profile.Profile, cost.Topology, planner.Options, error) {
	prof, err := lookup[*profile.Profile](profH, "profile")
	if err != nil {
		return nil, cost.Topology{}, planner.Options{}, err
	}
	data, err := bytesArg(cfg, n, "config")
	if err != nil {
		return nil, cost.Topology{}, planner.Options{}, err
	}
	topo, opts, err := planner.ParseConfig(data)
	return prof, topo, opts, err
}

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
		*out = newHandle(p)
		return nil
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

// recgo_plan_make plans the profile with a planner.Config given as JSON.
//
//export recgo_plan_make
func recgo_plan_make(profH C.uintptr_t, cfg unsafe.Pointer, n C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		prof, topo, opts, err := profileConfig(profH, cfg, n)
		if err != nil {
			return err
		}
		p, err := planner.Make(prof, topo, opts)
		return storeHandle(out, p, err)
	})
}

// recgo_plan_evaluate prices an external placement (table i of the config's tables on gpus[i]
// with hots[i] hot rows) as a plan named by the config's strategy.
//
//export recgo_plan_evaluate
func recgo_plan_evaluate(profH C.uintptr_t, cfg unsafe.Pointer, n C.int64_t, gpusPtr, hotsPtr unsafe.Pointer,
	ntables C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		prof, topo, opts, err := profileConfig(profH, cfg, n)
		if err != nil {
			return err
		}
		gpus, err := viewSlice[int64](gpusPtr, int64(ntables), "gpus")
		if err != nil {
			return err
		}
		hots, err := viewSlice[int64](hotsPtr, int64(ntables), "hot_rows")
		if err != nil {
			return err
		}
		p, err := planner.Evaluate(prof, topo, opts, gpus, hots)
		return storeHandle(out, p, err)
	})
}

// recgo_plan_json writes the plan as JSON.
//
//export recgo_plan_json
func recgo_plan_json(h C.uintptr_t, buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := lookup[*planner.Plan](h, "plan")
		if err != nil {
			return err
		}
		return writeJSON(p, buf, buflen, needed)
	})
}

// recgo_plan_parse reads a plan.json document.
//
//export recgo_plan_parse
func recgo_plan_parse(doc unsafe.Pointer, n C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		return parseHandle(doc, n, out, planner.ParsePlan)
	})
}

// recgo_plan_save writes plan.json and report.md into dir, and remap.bin when profH (optional, 0
// for none) has ranked rows.
//
//export recgo_plan_save
func recgo_plan_save(h, profH C.uintptr_t, dir *C.char, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := lookup[*planner.Plan](h, "plan")
		if err != nil {
			return err
		}
		var prof *profile.Profile
		if profH != 0 {
			if prof, err = lookup[*profile.Profile](profH, "profile"); err != nil {
				return err
			}
		}
		return p.Save(goString(dir), prof)
	})
}

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

// recgo_remap_load reads a remap.bin file.
//
//export recgo_remap_load
func recgo_remap_load(path *C.char, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		r, err := planner.LoadRemap(goString(path))
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
		if batch < 0 {
			return errs.Invalidf("batch %d is negative", batch)
		}
		lengths, err := viewSlice[int64](lengthsPtr, int64(nkeys*batch), "lengths")
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

// recgo_gpu_info writes the local GPUs ([{"name","memory_bytes"}], via NVML loaded at run time) as
// JSON; without an NVIDIA driver it fails with a not-found error.
//
//export recgo_gpu_info
func recgo_gpu_info(buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		gpus, err := gpuinfo.Detect()
		if err != nil {
			return err
		}
		return writeJSON(gpus, buf, buflen, needed)
	})
}
