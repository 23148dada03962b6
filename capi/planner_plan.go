package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"time"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
)

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

// recgo_plan_start begins planning the profile with a planner.Config given as JSON and returns a
// job handle at once; wait for it with recgo_plan_wait, interrupt it with recgo_plan_cancel (freeing
// the job cancels it too).
//
//export recgo_plan_start
func recgo_plan_start(profH C.uintptr_t, cfg unsafe.Pointer, n C.int64_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		prof, topo, opts, err := profileConfig(profH, cfg, n)
		if err != nil {
			return err
		}
		return putHandle(out, planner.Start(prof, topo, opts))
	})
}

// recgo_plan_wait waits up to timeout seconds for a job: *done is 1 and *out the plan's handle when
// it finished (or the call fails with the planner's error), 0 when it is still running.
//
//export recgo_plan_wait
func recgo_plan_wait(jobH C.uintptr_t, timeout C.double, done *C.int32_t, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		j, err := lookup[*planner.Job](jobH, "plan job")
		if err != nil {
			return err
		}
		if done == nil || out == nil {
			return errs.Invalidf("plan wait: null output pointer")
		}
		if !(timeout >= 0) || timeout > 3600 {
			return errs.Invalidf("plan wait: timeout %g outside [0, 3600] seconds", float64(timeout))
		}
		p, finished, err := j.Wait(time.Duration(float64(timeout) * float64(time.Second)))
		*done = 0
		if !finished {
			return nil
		}
		*done = 1
		return storeHandle(out, p, err)
	})
}

// recgo_plan_cancel interrupts a job; it then finishes with its incumbent (status "interrupted").
//
//export recgo_plan_cancel
func recgo_plan_cancel(jobH C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		j, err := lookup[*planner.Job](jobH, "plan job")
		if err != nil {
			return err
		}
		j.Cancel()
		return nil
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

// recgo_plan_load reads and verifies a plan.json file (or the one in the directory path names).
//
//export recgo_plan_load
func recgo_plan_load(path *C.char, out *C.uintptr_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		p, err := planner.LoadPlan(goString(path))
		return storeHandle(out, p, err)
	})
}

// recgo_plan_save writes plan.json and report.md into dir, and remap.bin when profH (optional, 0
// for none) has ranked rows; an earlier plan's remap.bin there is removed (planner.Plan.Save).
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
