package highs

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// knapsack: maximize 8a+11b+6c+4d s.t. 5a+7b+4c+3d <= 14, binary; optimum 21 at (0,1,1,1).
func knapsack() *Model {
	m := &Model{Sense: Maximize}
	for _, c := range []float64{8, 11, 6, 4} {
		m.AddCol(c, 0, 1, true)
	}
	m.AddRow(math.Inf(-1), 14, []int32{0, 1, 2, 3}, []float64{5, 7, 4, 3})
	return m
}

// multiKnapsack is a random multidimensional 0/1 knapsack (maximize), hard enough that the root
// node does not close it.
func multiKnapsack(n, rows int, seed uint64) *Model {
	rng := rand.New(rand.NewPCG(seed, 1))
	m := &Model{Sense: Maximize}
	for j := 0; j < n; j++ {
		m.AddCol(float64(10+rng.IntN(90)), 0, 1, true)
	}
	for i := 0; i < rows; i++ {
		idx := make([]int32, n)
		val := make([]float64, n)
		total := 0.0
		for j := range idx {
			idx[j] = int32(j)
			val[j] = float64(5 + rng.IntN(60))
			total += val[j]
		}
		m.AddRow(math.Inf(-1), math.Floor(total/2), idx, val)
	}
	return m
}

func TestSolveKnownOptimum(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		start []float64
	}{
		{"cold", Options{}, nil},
		{"warm-optimal", Options{Threads: 1}, []float64{0, 1, 1, 1}},
		{"warm-suboptimal", Options{}, []float64{1, 1, 0, 0}},
		{"no-presolve", Options{NoPresolve: true}, []float64{0, 0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Solve(knapsack(), tc.opts, tc.start)
			require.NoError(t, err)
			assert.Equal(t, StatusOptimal, res.Status)
			assert.InDelta(t, 21, res.Objective, 1e-9)
			assert.InDeltaSlice(t, []float64{0, 1, 1, 1}, res.X, 1e-9)
			assert.InDelta(t, 21, res.DualBound, 1e-6)
			if tc.start != nil {
				assert.True(t, res.StartAccepted)
				assert.InDelta(t, knapsack().Objective(tc.start), res.StartObjective, 1e-12)
			} else {
				assert.True(t, math.IsNaN(res.StartObjective))
			}
		})
	}
}

// With branching and heuristics off, HiGHS stops after the root node: the cold run has no good
// incumbent there, the warm run ends exactly at the start it was given — proof HiGHS used it.
func TestWarmStartIsUsedAsIncumbent(t *testing.T) {
	m := multiKnapsack(60, 5, 7)
	full, err := Solve(m, Options{TimeLimit: 20}, nil)
	require.NoError(t, err)
	require.Equal(t, StatusOptimal, full.Status)

	limited := Options{MaxNodes: -1, NoHeuristics: true, NoPresolve: true}
	cold, err := Solve(m, limited, nil)
	if err == nil {
		assert.Less(t, cold.Objective, full.Objective-0.5, "the root alone should not find the optimum")
	} else {
		assert.ErrorIs(t, err, errs.ErrSolver)
	}
	warm, err := Solve(m, limited, full.X)
	require.NoError(t, err)
	assert.True(t, warm.StartAccepted)
	assert.InDelta(t, full.Objective, warm.Objective, 1e-6)
	assert.GreaterOrEqual(t, warm.DualBound, warm.Objective-1e-6) // maximize: bound above incumbent
}

// A node limit (root only; deterministic, unlike a time limit) still returns the incumbent, its
// gap and its bound: the limit branch runs on every machine.
func TestNodeLimitKeepsIncumbent(t *testing.T) {
	m := multiKnapsack(120, 10, 3)
	start := make([]float64, m.NumCols()) // all-zero is feasible
	res, err := Solve(m, Options{MaxNodes: -1, MipRelGap: 1e-9, Threads: 1}, start)
	require.NoError(t, err)
	require.True(t, res.HasSolution)
	assert.Equal(t, StatusSolutionLimit, res.Status)
	ok, why := m.Feasible(res.X, 1e-6)
	assert.True(t, ok, why)
	assert.InDelta(t, m.Objective(res.X), res.Objective, 1e-6)
	assert.Greater(t, res.Gap, 0.0)
	assert.Greater(t, res.DualBound, res.Objective)
	assert.True(t, res.StartAccepted)
}

// A closed Done channel interrupts the run through HiGHS's callback; the start is the incumbent.
func TestDoneInterrupts(t *testing.T) {
	m := multiKnapsack(120, 10, 3)
	done := make(chan struct{})
	close(done)
	res, err := Solve(m, Options{MipRelGap: 1e-12, Threads: 1, Done: done}, make([]float64, m.NumCols()))
	require.NoError(t, err)
	assert.Equal(t, StatusInterrupt, res.Status)
	assert.True(t, res.StartAccepted)
	assert.False(t, res.StoppedAtBound)
}

// HiGHS polls no callback while it reads or presolves a model; the hook stands in for such a
// phase. Closing Done then returns within the grace period, the warm start (if any) as the
// incumbent, sets HiGHS's time limit to zero (what presolve does poll), and the abandoned run never
// reaches Highs_run. A Done closed before the call skips HiGHS's costly steps altogether.
func TestDoneReturnsWhileHiGHSPollsNoCallback(t *testing.T) {
	tests := []struct {
		name       string
		closeAfter time.Duration // < 0: closed before Solve
		start      bool
		wantHook   bool
	}{
		{"during presolve, warm start", 50 * time.Millisecond, true, true},
		{"during presolve, cold", 50 * time.Millisecond, false, true},
		{"before the call", -1, true, false},
	}
	const presolve = 2 * time.Second
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hookDone := make(chan struct{})
			var hookRan atomic.Bool
			var limits [2]float64 // HiGHS's time limit before and after Done closed
			done := make(chan struct{})
			testHookBeforeRun = func(h instance) {
				defer close(hookDone)
				hookRan.Store(true)
				limits[0] = h.doubleOption("time_limit")
				time.Sleep(presolve)
				limits[1] = h.doubleOption("time_limit")
			}
			t.Cleanup(func() { testHookBeforeRun = nil })
			m := multiKnapsack(120, 10, 3)
			var start []float64
			if tc.start {
				start = make([]float64, m.NumCols())
				start[0] = 1
			}
			if tc.closeAfter < 0 {
				close(done)
			} else {
				time.AfterFunc(tc.closeAfter, func() { close(done) })
			}
			t0 := time.Now()
			res, err := Solve(m, Options{MipRelGap: 1e-12, Threads: 1, Done: done}, start)
			took := time.Since(t0)
			assert.Less(t, took, presolve/2, "Solve waited for the phase that polls no callback")
			require.NotNil(t, res)
			assert.Equal(t, StatusInterrupt, res.Status)
			assert.True(t, math.IsInf(res.DualBound, 1), "nothing proved (maximizing): %g", res.DualBound)
			if tc.start {
				require.NoError(t, err)
				assert.Equal(t, start, res.X)
				assert.InDelta(t, m.Objective(start), res.Objective, 1e-9)
				assert.True(t, res.StartAccepted)
			} else {
				assert.ErrorIs(t, err, errs.ErrSolver)
				assert.False(t, res.HasSolution)
			}
			if !tc.wantHook {
				assert.False(t, hookRan.Load(), "HiGHS was set up after Done closed")
				return
			}
			x := slices.Clone(res.X)
			<-hookDone
			assert.Equal(t, [2]float64{math.Inf(1), 0}, limits, "Done set the time limit to zero")
			time.Sleep(50 * time.Millisecond) // the abandoned run ends: it must not touch res
			assert.Equal(t, x, res.X)
			assert.Equal(t, StatusInterrupt, res.Status)
		})
	}
}

// StopGap ends the run once the incumbent is within the gap of the caller's bound.
func TestStopAtCallersBound(t *testing.T) {
	m := multiKnapsack(120, 10, 3)
	full, err := Solve(m, Options{MaxNodes: -1, Threads: 1}, make([]float64, m.NumCols()))
	require.NoError(t, err)
	// A "bound" far above any solution stops nothing; one at the root incumbent stops at once.
	res, err := Solve(m, Options{Threads: 1, StopBound: full.Objective, StopGap: 1e-9, MaxNodes: 50},
		make([]float64, m.NumCols()))
	require.NoError(t, err)
	assert.True(t, res.StoppedAtBound)
	assert.GreaterOrEqual(t, res.Objective, full.Objective*(1-1e-9))
}

func TestInfeasibleIsSolverError(t *testing.T) {
	m := &Model{Sense: Minimize}
	m.AddCol(1, 0, 1, true)
	m.AddCol(1, 0, 1, true)
	m.AddRow(3, math.Inf(1), []int32{0, 1}, []float64{1, 1})
	_, err := Solve(m, Options{}, nil)
	assert.ErrorIs(t, err, errs.ErrSolver)
}

func TestInvalidModels(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(m *Model)
		start []float64
	}{
		{"no columns", func(m *Model) { *m = Model{Sense: Minimize} }, nil},
		{"bad sense", func(m *Model) { m.Sense = 0 }, nil},
		{"short upper", func(m *Model) { m.ColUpper = m.ColUpper[:2] }, nil},
		{"column index", func(m *Model) { m.AIndex[1] = 9 }, nil},
		{"empty bounds", func(m *Model) { m.ColLower[0] = 2 }, nil},
		{"nan cost", func(m *Model) { m.ColCost[0] = math.NaN() }, nil},
		{"astart", func(m *Model) { m.AStart[1] = 2 }, nil},
		{"start length", func(m *Model) {}, []float64{1}},
		{"start infeasible", func(m *Model) {}, []float64{1, 1, 1, 1}},
		{"start fractional", func(m *Model) {}, []float64{0.5, 0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := knapsack()
			tc.edit(m)
			_, err := Solve(m, Options{}, tc.start)
			assert.ErrorIs(t, err, errs.ErrInvalid)
		})
	}
}

func FuzzValidate(f *testing.F) {
	f.Add(int32(0), int32(4), 14.0, 5.0, true)
	f.Add(int32(-1), int32(0), -1.0, math.NaN(), false)
	f.Fuzz(func(t *testing.T, idx, start int32, rhs, coef float64, integer bool) {
		m := knapsack()
		m.AIndex[0] = idx
		m.AStart[1] = start
		m.RowUpper[0] = rhs
		m.AValue[1] = coef
		m.Integer[2] = integer
		if m.Validate() != nil {
			return
		}
		res, err := Solve(m, Options{TimeLimit: 1}, nil)
		if err == nil {
			ok, why := m.Feasible(res.X, 1e-6)
			if !ok {
				t.Fatalf("solution infeasible: %s", why)
			}
		}
	})
}

// Integer options past HiGHS's integer range are refused by name: they were cut to its width (a
// huge node limit became none at all, a huge thread count a small one).
func TestIntegerOptionsOutOfRange(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		match string
	}{
		{"threads past MaxThreads", Options{Threads: MaxThreads + 1}, "threads 1025 outside [0, 1024]"},
		{"threads past int32", Options{Threads: 1<<32 + 2}, "threads 4294967298 outside"},
		{"negative threads", Options{Threads: -3}, "threads -3 outside"},
		{"nodes past int32", Options{MaxNodes: 1 << 40}, "mip_max_nodes=1099511627776 is past HiGHS's integer range"},
		{"iterations past int32", Options{MaxIterations: 1 << 33}, "simplex_iteration_limit=8589934592"},
		{"seed past int32", Options{Seed: -1 << 35}, "random_seed=-34359738368"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Solve(knapsack(), tc.opts, nil)
			assert.ErrorIs(t, err, errs.ErrInvalid)
			assert.ErrorContains(t, err, tc.match)
		})
	}
	res, err := Solve(knapsack(), Options{Threads: 1, MaxNodes: math.MaxInt32}, nil)
	require.NoError(t, err)
	assert.InDelta(t, 21, res.Objective, 1e-9)
}
