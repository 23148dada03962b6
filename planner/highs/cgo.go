package highs

// The only file that includes highs_c_api.h (see DESIGN.md: "HiGHS inside librecgo.so").

/*
#cgo CFLAGS: -I${SRCDIR}/../../.cache/highs/include/highs
#cgo LDFLAGS: -L${SRCDIR}/../../.cache/highs/lib -lhighs -lhighs_extras -lstdc++ -lm
#include <stdlib.h>
#include "interfaces/highs_c_api.h"
*/
import "C"

import (
	"runtime"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

// Values mirrored from highs_c_api.h (static const there; reading them through cgo breaks dlopen).
const (
	cStatusError          = -1
	cMatrixRowwise        = 2
	cSolutionFeasible     = 2
	cVarTypeContinuous    = 0
	cVarTypeInteger       = 1
	highsInfinityFallback = 1e30
)

type instance struct{ p unsafe.Pointer }

func (h instance) setBool(name string, v bool) error {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	b := C.HighsInt(0)
	if v {
		b = 1
	}
	if C.Highs_setBoolOptionValue(h.p, cs, b) == cStatusError {
		return errs.Solverf("highs: cannot set option %s=%v", name, v)
	}
	return nil
}

func (h instance) setInt(name string, v int) error {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	if C.Highs_setIntOptionValue(h.p, cs, C.HighsInt(v)) == cStatusError {
		return errs.Solverf("highs: cannot set option %s=%d", name, v)
	}
	return nil
}

func (h instance) setDouble(name string, v float64) error {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	if C.Highs_setDoubleOptionValue(h.p, cs, C.double(v)) == cStatusError {
		return errs.Solverf("highs: cannot set option %s=%g", name, v)
	}
	return nil
}

func (h instance) setString(name, v string) error {
	cs, cv := C.CString(name), C.CString(v)
	defer C.free(unsafe.Pointer(cs))
	defer C.free(unsafe.Pointer(cv))
	if C.Highs_setStringOptionValue(h.p, cs, cv) == cStatusError {
		return errs.Solverf("highs: cannot set option %s=%s", name, v)
	}
	return nil
}

func (h instance) doubleInfo(name string) float64 {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var v C.double
	C.Highs_getDoubleInfoValue(h.p, cs, &v)
	return float64(v)
}

func (h instance) intInfo(name string) int {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var v C.HighsInt
	C.Highs_getIntInfoValue(h.p, cs, &v)
	return int(v)
}

func (h instance) int64Info(name string) int64 {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var v C.int64_t
	C.Highs_getInt64InfoValue(h.p, cs, &v)
	return int64(v)
}

func (h instance) options(o Options) error {
	if err := h.setBool("output_flag", o.Output); err != nil {
		return err
	}
	if o.TimeLimit > 0 {
		if err := h.setDouble("time_limit", o.TimeLimit); err != nil {
			return err
		}
	}
	if o.MipRelGap > 0 {
		if err := h.setDouble("mip_rel_gap", o.MipRelGap); err != nil {
			return err
		}
	}
	if o.Threads > 0 {
		if err := h.setInt("threads", o.Threads); err != nil {
			return err
		}
	}
	if o.NoPresolve {
		if err := h.setString("presolve", "off"); err != nil {
			return err
		}
	}
	if o.MaxNodes != 0 {
		n := o.MaxNodes
		if n < 0 {
			n = 0
		}
		if err := h.setInt("mip_max_nodes", n); err != nil {
			return err
		}
	}
	if o.NoHeuristics {
		if err := h.setDouble("mip_heuristic_effort", 0); err != nil {
			return err
		}
	}
	if o.Seed != 0 {
		if err := h.setInt("random_seed", o.Seed); err != nil {
			return err
		}
	}
	return nil
}

// clampInf maps ±Inf to HiGHS's infinity value.
func clampInf(xs []float64, inf float64) []C.double {
	out := make([]C.double, len(xs))
	for i, v := range xs {
		switch {
		case v >= inf:
			out[i] = C.double(inf)
		case v <= -inf:
			out[i] = C.double(-inf)
		default:
			out[i] = C.double(v)
		}
	}
	return out
}

func cptr[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// run owns one HiGHS instance for the whole solve, on one locked OS thread.
func run(m *Model, o Options, start []float64) (*Result, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p := C.Highs_create()
	if p == nil {
		return nil, errs.Solverf("highs: Highs_create failed")
	}
	h := instance{p}
	defer C.Highs_destroy(p)
	if err := h.options(o); err != nil {
		return nil, err
	}
	inf := float64(C.Highs_getInfinity(p))
	if inf <= 0 {
		inf = highsInfinityFallback
	}
	n, r := m.NumCols(), m.NumRows()
	integrality := make([]C.HighsInt, n)
	for j, isInt := range m.Integer {
		integrality[j] = cVarTypeContinuous
		if isInt {
			integrality[j] = cVarTypeInteger
		}
	}
	cost := clampInf(m.ColCost, inf)
	cl, cu := clampInf(m.ColLower, inf), clampInf(m.ColUpper, inf)
	rl, ru := clampInf(m.RowLower, inf), clampInf(m.RowUpper, inf)
	aStart := make([]C.HighsInt, r+1)
	for i := 0; i < r && len(m.AStart) > 0; i++ {
		aStart[i] = C.HighsInt(m.AStart[i])
	}
	aIndex := make([]C.HighsInt, len(m.AIndex))
	for k, j := range m.AIndex {
		aIndex[k] = C.HighsInt(j)
	}
	aValue := clampInf(m.AValue, inf)
	st := C.Highs_passMip(p, C.HighsInt(n), C.HighsInt(r), C.HighsInt(len(aIndex)), cMatrixRowwise,
		C.HighsInt(m.Sense), C.double(m.Offset), cptr(cost), cptr(cl), cptr(cu), cptr(rl), cptr(ru),
		cptr(aStart), cptr(aIndex), cptr(aValue), cptr(integrality))
	if st == cStatusError {
		return nil, errs.Solverf("highs: passMip rejected the model (%d cols, %d rows)", n, r)
	}
	if start != nil {
		cs := make([]C.double, n)
		for j, v := range start {
			cs[j] = C.double(v)
		}
		// Highs_setSolution orders (col_value, row_value, col_dual, row_dual); only primal columns.
		if C.Highs_setSolution(p, cptr(cs), nil, nil, nil) == cStatusError {
			return nil, errs.Solverf("highs: setSolution rejected the warm start")
		}
	}
	if C.Highs_run(p) == cStatusError {
		// A run error can still leave an incumbent (for example after a limit); fall through.
		if h.intInfo("primal_solution_status") != cSolutionFeasible {
			return nil, errs.Solverf("highs: run failed (model status: %s)", Status(C.Highs_getModelStatus(p)))
		}
	}
	res := &Result{
		Status:    Status(C.Highs_getModelStatus(p)),
		Gap:       h.doubleInfo("mip_gap"),
		DualBound: h.doubleInfo("mip_dual_bound"),
		Nodes:     h.int64Info("mip_node_count"),
		Seconds:   float64(C.Highs_getRunTime(p)),
	}
	if h.intInfo("primal_solution_status") == cSolutionFeasible {
		// Highs_getSolution orders (col_value, col_dual, row_value, row_dual).
		x := make([]C.double, n)
		C.Highs_getSolution(p, cptr(x), nil, nil, nil)
		res.X = make([]float64, n)
		for j := range x {
			res.X[j] = float64(x[j])
		}
		res.HasSolution = true
		res.Objective = float64(C.Highs_getObjectiveValue(p))
		if res.Status == StatusOptimal {
			res.Gap = max(res.Gap, 0)
		}
	}
	return res, nil
}
