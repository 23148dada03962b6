package highs

// The only file that includes highs_c_api.h (see DESIGN.md: "HiGHS inside librecgo.so").

/*
#cgo CFLAGS: -I${SRCDIR}/../../.cache/highs/include/highs
#cgo LDFLAGS: -L${SRCDIR}/../../.cache/highs/lib -lhighs -lhighs_extras -lstdc++ -lm
#include <math.h>
#include <stdlib.h>
#include "interfaces/highs_c_api.h"

// recgo_cb is the state HiGHS's interrupt callbacks read: a flag Go sets to interrupt the run, and
// a bound the caller proved, with the relative gap at which an incumbent is good enough.
typedef struct {
	int interrupt;
	int stopped_at_bound;
	int minimize;
	double bound;
	double gap;
} recgo_cb;

// recgo_cb_type mirrors kHighsCallbackMipInterrupt (static const in the header).
enum { recgo_cb_mip_interrupt = 6 };

static void recgo_highs_callback(int type, const char* message, const HighsCallbackDataOut* out,
                                 HighsCallbackDataIn* in, void* data) {
	(void)message;
	recgo_cb* d = (recgo_cb*)data;
	if (in == NULL || d == NULL) {
		return;
	}
	if (__atomic_load_n(&d->interrupt, __ATOMIC_RELAXED)) {
		in->user_interrupt = 1;
		return;
	}
	if (type == recgo_cb_mip_interrupt && d->gap > 0 && out != NULL) {
		double p = out->mip_primal_bound;
		if (isfinite(p) && fabs(p) < 1e30) {
			double diff = d->minimize ? p - d->bound : d->bound - p;
			if (diff <= d->gap * fabs(p)) {
				__atomic_store_n(&d->stopped_at_bound, 1, __ATOMIC_RELAXED);
				in->user_interrupt = 1;
			}
		}
	}
}

static HighsInt recgo_set_callback(void* highs, recgo_cb* d) {
	return Highs_setCallback(highs, recgo_highs_callback, d);
}

static void recgo_cb_interrupt(recgo_cb* d) { __atomic_store_n(&d->interrupt, 1, __ATOMIC_RELAXED); }

static int recgo_cb_stopped_at_bound(recgo_cb* d) {
	return __atomic_load_n(&d->stopped_at_bound, __ATOMIC_RELAXED);
}
*/
import "C"

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
)

// Values mirrored from highs_c_api.h (static const there; reading them through cgo breaks dlopen).
const (
	cStatusError       = -1
	cMatrixRowwise     = 2
	cSolutionFeasible  = 2
	cVarTypeContinuous = 0
	cVarTypeInteger    = 1
	// kHighsCallbackSimplexInterrupt, kHighsCallbackIpmInterrupt, kHighsCallbackMipInterrupt.
	cCallbackSimplexInterrupt = 1
	cCallbackIpmInterrupt     = 2
	cCallbackMipInterrupt     = 6
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
	if int(C.HighsInt(v)) != v { // HiGHS's integers are narrower than Go's: refuse, not truncate
		return errs.Invalidf("highs: option %s=%d is past HiGHS's integer range", name, v)
	}
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

// doubleOption reads a double option (NaN when HiGHS has none of that name).
func (h instance) doubleOption(name string) float64 {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var v C.double
	if C.Highs_getDoubleOptionValue(h.p, cs, &v) == cStatusError {
		return math.NaN()
	}
	return float64(v)
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
	if o.MaxIterations != 0 {
		if err := h.setInt("simplex_iteration_limit", max(o.MaxIterations, 0)); err != nil {
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

// testHookBeforeRun, when set, runs on the solving goroutine just before Highs_run (tests use it to
// stand in for a presolve that polls no callback, and to read the instance's options).
var testHookBeforeRun func(h instance)

// cModel is a Model (and warm start) converted to HiGHS's C types on the caller's goroutine, so
// that a run abandoned in the background never reads the caller's slices.
type cModel struct {
	n, r                 int
	sense                C.HighsInt
	offset               C.double
	cost, cl, cu, rl, ru []C.double
	aStart, aIndex       []C.HighsInt
	aValue               []C.double
	integrality          []C.HighsInt
	start                []C.double
}

// convert copies m and start into HiGHS's C types.
func convert(m *Model, start []float64) *cModel {
	// HiGHS's infinity, kHighsInf, is +Inf (HConst.h): ±Inf bounds pass through as they are.
	inf := math.Inf(1)
	n, r := m.NumCols(), m.NumRows()
	c := &cModel{n: n, r: r, sense: C.HighsInt(m.Sense), offset: C.double(m.Offset),
		cost: clampInf(m.ColCost, inf), cl: clampInf(m.ColLower, inf), cu: clampInf(m.ColUpper, inf),
		rl: clampInf(m.RowLower, inf), ru: clampInf(m.RowUpper, inf), aValue: clampInf(m.AValue, inf)}
	c.integrality = make([]C.HighsInt, n)
	for j, isInt := range m.Integer {
		c.integrality[j] = cVarTypeContinuous
		if isInt {
			c.integrality[j] = cVarTypeInteger
		}
	}
	c.aStart = make([]C.HighsInt, r+1)
	for i := 0; i < r && len(m.AStart) > 0; i++ {
		c.aStart[i] = C.HighsInt(m.AStart[i])
	}
	c.aIndex = make([]C.HighsInt, len(m.AIndex))
	for k, j := range m.AIndex {
		c.aIndex[k] = C.HighsInt(j)
	}
	if start != nil {
		c.start = make([]C.double, n)
		for j, v := range start {
			c.start[j] = C.double(v)
		}
	}
	return c
}

// outcome is what the solving goroutine hands back.
type outcome struct {
	res *Result
	err error
}

// run solves m on a goroutine of its own and waits for it, or for o.Done: then HiGHS is
// interrupted, and if it does not return within InterruptGrace (it is reading or presolving the
// model) run returns at once with status Interrupt and the warm start, if any, as the incumbent.
// The abandoned goroutine finishes on its own, frees HiGHS and drops its result; the interrupt,
// seen at HiGHS's first callback, and the zero time limit, seen at its next time check (between
// presolve passes), bound that work.
func run(m *Model, o Options, start []float64) (*Result, error) {
	t0 := time.Now()
	c := convert(m, start)
	out := make(chan outcome, 1) // buffered: an abandoned solve's send never blocks
	go func() {
		var res *Result
		err := errs.Run(func() (err error) { res, err = solve(c, o); return err }) // a panic here would end the process
		out <- outcome{res, err}
	}()
	finish := func(r outcome) (*Result, error) {
		if errors.Is(r.err, errNotRun) { // solve saw o.Done closed before it set HiGHS up
			return interrupted(m, start, t0), nil
		}
		return r.res, r.err
	}
	select {
	case r := <-out:
		return finish(r)
	case <-o.Done:
	}
	grace := time.NewTimer(InterruptGrace)
	defer grace.Stop()
	select {
	case r := <-out:
		return finish(r)
	case <-grace.C:
		return interrupted(m, start, t0), nil
	}
}

// errNotRun is solve's answer when o.Done closed before HiGHS began the costly steps.
var errNotRun = errors.New("highs: interrupted before the run")

// interrupted is the result of a run interrupted before HiGHS reported anything: the warm start,
// when there is one, is the incumbent (as HiGHS would return it), with no bound proved.
func interrupted(m *Model, start []float64, t0 time.Time) *Result {
	r := &Result{Status: StatusInterrupt, Gap: math.Inf(1), DualBound: math.Inf(-int(m.Sense)),
		Seconds: time.Since(t0).Seconds()}
	if start != nil {
		r.HasSolution, r.X, r.Objective = true, slices.Clone(start), m.Objective(start)
	}
	return r
}

// closed reports whether done (possibly nil) is closed.
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// solve owns one HiGHS instance for the whole solve, on one locked OS thread. It skips the costly
// steps (passing the model, running) once o.Done is closed, returning errNotRun.
func solve(c *cModel, o Options) (*Result, error) {
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
	n, r := c.n, c.r
	if closed(o.Done) { // passing a large model alone takes seconds
		return nil, errNotRun
	}
	st := C.Highs_passMip(p, C.HighsInt(n), C.HighsInt(r), C.HighsInt(len(c.aIndex)), cMatrixRowwise,
		c.sense, c.offset, cptr(c.cost), cptr(c.cl), cptr(c.cu), cptr(c.rl), cptr(c.ru),
		cptr(c.aStart), cptr(c.aIndex), cptr(c.aValue), cptr(c.integrality))
	if st == cStatusError {
		return nil, errs.Solverf("highs: passMip rejected the model (%d cols, %d rows)", n, r)
	}
	// The interrupt callbacks: o.Done interrupts, o.StopGap stops at the caller's bound.
	cb := (*C.recgo_cb)(C.calloc(1, C.sizeof_recgo_cb))
	if cb == nil {
		return nil, errs.Capacityf("highs: cannot allocate the callback state")
	}
	defer C.free(unsafe.Pointer(cb)) // HiGHS calls back only inside Highs_run
	if o.StopGap > 0 {
		cb.gap, cb.bound = C.double(o.StopGap), C.double(o.StopBound)
		if c.sense == C.HighsInt(Minimize) {
			cb.minimize = 1
		}
	}
	if o.Done != nil || o.StopGap > 0 {
		if C.recgo_set_callback(p, cb) == cStatusError {
			return nil, errs.Solverf("highs: setCallback failed")
		}
		for _, t := range []C.HighsInt{cCallbackSimplexInterrupt, cCallbackIpmInterrupt, cCallbackMipInterrupt} {
			if C.Highs_startCallback(p, t) == cStatusError {
				return nil, errs.Solverf("highs: startCallback(%d) failed", t)
			}
		}
	}
	if o.Done != nil {
		finished := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-o.Done:
				C.recgo_cb_interrupt(cb)
				// Presolve and the MIP's inner LP solves poll no callback, only the time limit, which
				// they read from this instance's options: a zero limit stops them at their next check,
				// so an abandoned run does not presolve on for minutes. The option is a double the
				// solve only reads (Highs::setOptionValue stores it and touches nothing else).
				_ = h.setDouble("time_limit", 0)
			case <-finished:
			}
		}()
		defer wg.Wait() // before cb is freed (defers run last-in first-out)
		defer close(finished)
	}
	if c.start != nil {
		// Highs_setSolution orders (col_value, row_value, col_dual, row_dual); only primal columns.
		if C.Highs_setSolution(p, cptr(c.start), nil, nil, nil) == cStatusError {
			return nil, errs.Solverf("highs: setSolution rejected the warm start")
		}
	}
	if testHookBeforeRun != nil {
		testHookBeforeRun(h)
	}
	if closed(o.Done) {
		return nil, errNotRun
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
	res.StoppedAtBound = C.recgo_cb_stopped_at_bound(cb) != 0
	if res.Status == StatusTimeLimit && closed(o.Done) && !(o.TimeLimit > 0 && res.Seconds >= o.TimeLimit) {
		res.Status = StatusInterrupt // the zero time limit set on Done, not the caller's, stopped it
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
