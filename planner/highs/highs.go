// Package highs is a small Go binding over the HiGHS C API for mixed-integer linear programs.
//
// It covers what the planner needs and what github.com/lanl/highs v1.0.0 lacks: it links against
// HiGHS ≥ 1.12, accepts a warm start (Highs_setSolution), and when a time limit stops the solve it
// returns the incumbent with its gap and dual bound instead of an empty solution.
//
// A [Model] is a MILP in row-wise sparse form; [Solve] passes it to a fresh HiGHS instance, runs it
// with [Options] and returns a [Result]. Each call owns its HiGHS instance, on a goroutine of its
// own locked to its OS thread from create to destroy (HiGHS keeps its scheduler per thread), so
// that closing [Options].Done returns at once even while HiGHS reads or presolves the model.
package highs

import (
	"fmt"
	"math"
	"time"

	"github.com/recgo/recgo/internal/errs"
)

// Inf is HiGHS's infinity (kHighsInf): bounds at or beyond it are unbounded.
var Inf = math.Inf(1)

// Sense is the optimization direction.
type Sense int32

// Values mirror kHighsObjSense* (never read C.kHighs* from Go: they are static const in the header).
const (
	Minimize Sense = 1
	Maximize Sense = -1
)

// Status is HiGHS's model status after a run (kHighsModelStatus*).
type Status int32

// Model statuses, mirroring kHighsModelStatus* in highs_c_api.h.
const (
	StatusNotSet         Status = 0
	StatusLoadError      Status = 1
	StatusModelError     Status = 2
	StatusPresolveError  Status = 3
	StatusSolveError     Status = 4
	StatusPostsolveError Status = 5
	StatusModelEmpty     Status = 6
	StatusOptimal        Status = 7
	StatusInfeasible     Status = 8
	StatusUnboundedOrInf Status = 9
	StatusUnbounded      Status = 10
	StatusObjectiveBound Status = 11
	StatusObjectiveTgt   Status = 12
	StatusTimeLimit      Status = 13
	StatusIterationLimit Status = 14
	StatusUnknown        Status = 15
	StatusSolutionLimit  Status = 16
	StatusInterrupt      Status = 17
)

var statusNames = map[Status]string{
	StatusNotSet: "not set", StatusLoadError: "load error", StatusModelError: "model error",
	StatusPresolveError: "presolve error", StatusSolveError: "solve error",
	StatusPostsolveError: "postsolve error", StatusModelEmpty: "model empty", StatusOptimal: "optimal",
	StatusInfeasible: "infeasible", StatusUnboundedOrInf: "unbounded or infeasible",
	StatusUnbounded: "unbounded", StatusObjectiveBound: "objective bound",
	StatusObjectiveTgt: "objective target", StatusTimeLimit: "time limit",
	StatusIterationLimit: "iteration limit", StatusUnknown: "unknown",
	StatusSolutionLimit: "solution limit", StatusInterrupt: "interrupted",
}

// String names the status as HiGHS's documentation does.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("status(%d)", int32(s))
}

// Model is a MILP: optimize ColCost·x subject to RowLower ≤ A x ≤ RowUpper and
// ColLower ≤ x ≤ ColUpper, with x[j] integral where Integer[j]. A is row-wise (CSR): row i holds
// AIndex[AStart[i]:AStart[i+1]] with values AValue[...] (AStart has NumRows()+1 entries).
type Model struct {
	Sense    Sense
	Offset   float64
	ColCost  []float64
	ColLower []float64
	ColUpper []float64
	Integer  []bool
	RowLower []float64
	RowUpper []float64
	AStart   []int32
	AIndex   []int32
	AValue   []float64
}

// NumCols is the number of variables.
func (m *Model) NumCols() int { return len(m.ColCost) }

// NumRows is the number of constraints.
func (m *Model) NumRows() int { return len(m.RowLower) }

// AddRow appends the constraint lower ≤ Σ value[k]·x[index[k]] ≤ upper.
func (m *Model) AddRow(lower, upper float64, index []int32, value []float64) {
	if len(m.AStart) == 0 {
		m.AStart = append(m.AStart, 0)
	}
	m.RowLower = append(m.RowLower, lower)
	m.RowUpper = append(m.RowUpper, upper)
	m.AIndex = append(m.AIndex, index...)
	m.AValue = append(m.AValue, value...)
	m.AStart = append(m.AStart, int32(len(m.AIndex)))
}

// AddCol appends a variable with its objective cost and bounds and returns its index.
func (m *Model) AddCol(cost, lower, upper float64, integer bool) int32 {
	m.ColCost = append(m.ColCost, cost)
	m.ColLower = append(m.ColLower, lower)
	m.ColUpper = append(m.ColUpper, upper)
	m.Integer = append(m.Integer, integer)
	return int32(len(m.ColCost) - 1)
}

// Validate checks sizes, index ranges and bound order, returning an errs.ErrInvalid error.
func (m *Model) Validate() error {
	n, r := m.NumCols(), m.NumRows()
	if n == 0 {
		return errs.Invalidf("highs: model has no columns")
	}
	if m.Sense != Minimize && m.Sense != Maximize {
		return errs.Invalidf("highs: sense %d is neither Minimize (1) nor Maximize (-1)", m.Sense)
	}
	if len(m.ColLower) != n || len(m.ColUpper) != n || len(m.Integer) != n {
		return errs.Invalidf("highs: %d costs but %d lower, %d upper, %d integrality entries",
			n, len(m.ColLower), len(m.ColUpper), len(m.Integer))
	}
	if len(m.RowUpper) != r {
		return errs.Invalidf("highs: %d row lower bounds but %d upper", r, len(m.RowUpper))
	}
	if n > math.MaxInt32 || len(m.AIndex) > math.MaxInt32 {
		return errs.Invalidf("highs: model too large for 32-bit HighsInt (%d cols, %d nonzeros)", n, len(m.AIndex))
	}
	if r > 0 || len(m.AStart) > 0 {
		if len(m.AStart) != r+1 || m.AStart[0] != 0 || int(m.AStart[r]) != len(m.AIndex) {
			return errs.Invalidf("highs: AStart must have %d entries from 0 to %d", r+1, len(m.AIndex))
		}
	}
	if len(m.AValue) != len(m.AIndex) {
		return errs.Invalidf("highs: %d indices but %d values", len(m.AIndex), len(m.AValue))
	}
	for i := 0; i < r; i++ {
		if m.AStart[i+1] < m.AStart[i] {
			return errs.Invalidf("highs: AStart decreases at row %d", i)
		}
		if m.RowLower[i] > m.RowUpper[i] || math.IsNaN(m.RowLower[i]) || math.IsNaN(m.RowUpper[i]) {
			return errs.Invalidf("highs: row %d bounds [%g, %g] are empty", i, m.RowLower[i], m.RowUpper[i])
		}
	}
	for k, j := range m.AIndex {
		if j < 0 || int(j) >= n {
			return errs.Invalidf("highs: nonzero %d names column %d of %d", k, j, n)
		}
		if math.IsNaN(m.AValue[k]) || math.IsInf(m.AValue[k], 0) {
			return errs.Invalidf("highs: nonzero %d is %g", k, m.AValue[k])
		}
	}
	for j := 0; j < n; j++ {
		if math.IsNaN(m.ColCost[j]) || math.IsInf(m.ColCost[j], 0) {
			return errs.Invalidf("highs: cost of column %d is %g", j, m.ColCost[j])
		}
		if m.ColLower[j] > m.ColUpper[j] || math.IsNaN(m.ColLower[j]) || math.IsNaN(m.ColUpper[j]) {
			return errs.Invalidf("highs: column %d bounds [%g, %g] are empty", j, m.ColLower[j], m.ColUpper[j])
		}
	}
	return nil
}

// Objective evaluates Offset + ColCost·x.
func (m *Model) Objective(x []float64) float64 {
	s := m.Offset
	for j, c := range m.ColCost {
		s += c * x[j]
	}
	return s
}

// Feasible reports whether x satisfies bounds, rows and integrality within tol, and if not, why.
func (m *Model) Feasible(x []float64, tol float64) (bool, string) {
	if len(x) != m.NumCols() {
		return false, fmt.Sprintf("%d values for %d columns", len(x), m.NumCols())
	}
	for j, v := range x {
		if v < m.ColLower[j]-tol || v > m.ColUpper[j]+tol {
			return false, fmt.Sprintf("column %d = %g outside [%g, %g]", j, v, m.ColLower[j], m.ColUpper[j])
		}
		if m.Integer[j] && math.Abs(v-math.Round(v)) > tol {
			return false, fmt.Sprintf("column %d = %g is not integral", j, v)
		}
	}
	for i := 0; i < m.NumRows(); i++ {
		s := 0.0
		for k := m.AStart[i]; k < m.AStart[i+1]; k++ {
			s += m.AValue[k] * x[m.AIndex[k]]
		}
		if s < m.RowLower[i]-tol || s > m.RowUpper[i]+tol {
			return false, fmt.Sprintf("row %d = %g outside [%g, %g]", i, s, m.RowLower[i], m.RowUpper[i])
		}
	}
	return true, ""
}

// InterruptGrace is how long Solve waits, once Options.Done is closed, for HiGHS to see the
// interrupt at a callback and return its incumbent before abandoning the run: HiGHS polls no
// callback while it reads or presolves a model, which takes seconds for millions of columns. A
// caller with a deadline closes Done this much before it to return on time.
const InterruptGrace = 250 * time.Millisecond

// MaxThreads is the most threads a solve may ask HiGHS for. HiGHS's scheduler starts an OS thread
// for each, so a count past any machine's cores (a typo, an overflowing computation) would start
// thousands of threads, or be cut to HiGHS's narrower integer into another number altogether.
const MaxThreads = 1024

// Options control one solve. Zero values mean HiGHS's defaults.
type Options struct {
	// TimeLimit in seconds (0: none).
	TimeLimit float64
	// MipRelGap stops when (primal - dual)/|primal| falls below it (0: HiGHS default 1e-4).
	MipRelGap float64
	// Threads for HiGHS's scheduler (0: HiGHS default; at most MaxThreads).
	Threads int
	// Output turns HiGHS's console log on.
	Output bool
	// Presolve off when true.
	NoPresolve bool
	// MaxNodes caps branch-and-bound nodes (0: no cap; negative: stop after the root).
	MaxNodes int
	// Seed for HiGHS's random choices (0: default).
	Seed int
	// NoHeuristics sets mip_heuristic_effort to 0 (primal heuristics off).
	NoHeuristics bool
	// MaxIterations caps simplex iterations (0: no cap; negative: none at all), a deterministic
	// limit where TimeLimit depends on the machine.
	MaxIterations int
	// Done, when closed, interrupts the run: HiGHS returns its incumbent with status Interrupt.
	// HiGHS polls no callback while it reads or presolves a model (seconds for millions of
	// columns), so closing Done also sets its time limit to zero, which presolve polls between
	// passes; if HiGHS has not returned within InterruptGrace, Solve returns the warm start (or no
	// solution) with status Interrupt and leaves the run to end in the background at that check.
	Done <-chan struct{}
	// StopGap > 0 stops the run as soon as the incumbent is within StopGap (relative) of
	// StopBound, a bound the caller proved (a lower bound when minimizing): Result.StoppedAtBound.
	StopBound float64
	StopGap   float64
}

// Result is what a solve produced.
type Result struct {
	Status Status
	// HasSolution is true when X holds a feasible point (optimal or the incumbent at a limit).
	HasSolution bool
	X           []float64
	// Objective of X; DualBound the best proven bound; Gap HiGHS's relative MIP gap (0 when optimal).
	Objective float64
	DualBound float64
	Gap       float64
	// StartObjective is the objective of the warm start when one was given and feasible, else NaN.
	StartObjective float64
	// StartAccepted reports that HiGHS took the warm start as its first incumbent: the solve ended
	// with an incumbent at least as good as the start.
	StartAccepted bool
	// StoppedAtBound reports that Options.StopGap ended the run (the incumbent is within the gap
	// of Options.StopBound; Status is then Interrupt).
	StoppedAtBound bool
	Nodes          int64
	Seconds        float64
}

// Solve runs HiGHS on m with opts, warm-started from start when it is non-nil (one value per
// column). It returns an ErrInvalid error for a malformed model or start and an ErrSolver error
// when HiGHS fails or ends without a feasible point (infeasible, or a limit hit with no incumbent);
// at a limit with an incumbent it returns that incumbent with its gap and bound and no error.
func Solve(m *Model, opts Options, start []float64) (*Result, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if opts.StopGap < 0 || math.IsNaN(opts.StopGap) || math.IsNaN(opts.StopBound) || opts.TimeLimit < 0 ||
		math.IsNaN(opts.TimeLimit) || opts.MipRelGap < 0 || math.IsNaN(opts.MipRelGap) {
		return nil, errs.Invalidf("highs: negative or NaN limit (time %g, gap %g, stop gap %g)", opts.TimeLimit,
			opts.MipRelGap, opts.StopGap)
	}
	if opts.Threads < 0 || opts.Threads > MaxThreads {
		return nil, errs.Invalidf("highs: threads %d outside [0, %d]", opts.Threads, MaxThreads)
	}
	startObj := math.NaN()
	if start != nil {
		if len(start) != m.NumCols() {
			return nil, errs.Invalidf("highs: warm start has %d values for %d columns", len(start), m.NumCols())
		}
		if ok, why := m.Feasible(start, 1e-6); !ok {
			return nil, errs.Invalidf("highs: warm start is infeasible: %s", why)
		}
		startObj = m.Objective(start)
	}
	res, err := run(m, opts, start)
	if err != nil {
		return nil, err
	}
	res.StartObjective = startObj
	if !res.HasSolution {
		return res, errs.Solverf("highs: no feasible solution (model status: %s)", res.Status)
	}
	if start != nil {
		tol := 1e-6 * math.Max(1, math.Abs(startObj))
		if m.Sense == Minimize {
			res.StartAccepted = res.Objective <= startObj+tol
		} else {
			res.StartAccepted = res.Objective >= startObj-tol
		}
	}
	return res, nil
}
