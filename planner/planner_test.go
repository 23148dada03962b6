package planner

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinyModel builds n random skewed tables on nodes×gpus GPUs with budgets tight enough that the
// split and the GPU choice both matter.
func tinyModel(t testing.TB, seed uint64, n, nodes, gpus, steps int) *cost.Model {
	rng := rand.New(rand.NewPCG(seed, 9))
	prof := &profile.Profile{Version: profile.Version, SampleRate: 1}
	var total int64
	for i := 0; i < n; i++ {
		rows := int64(1000 + rng.IntN(9000))
		total += rows * 64 * 4
		tab := profile.Zipf(fmt.Sprintf("t%d", i), rows, 64, 4, 0.2+0.8*rng.Float64(),
			1+9*rng.Float64(), 0.6+0.8*rng.Float64(), rows/2+int64(rng.IntN(int(rows/2))), profile.Levels(steps))
		prof.Tables = append(prof.Tables, tab)
	}
	topo := cost.Topology{Nodes: nodes, GPUsPerNode: gpus, HBMBytes: total / int64(3*nodes*gpus),
		HostBytes: total*3/int64(4*nodes) + total/int64(2*nodes*gpus), HBMBandwidth: 800e9, UVMBandwidth: 20e9, BatchSize: 1024}
	m, err := cost.New(topo, prof, nil, cost.Full)
	require.NoError(t, err)
	return m
}

// bruteForce enumerates every (GPU, option) per table and returns the least max-GPU cost that fits.
func bruteForce(m *cost.Model) float64 {
	G := m.Topo.NumGPUs()
	s := newState(m)
	best := math.Inf(1)
	var rec func(i int)
	rec = func(i int) {
		if i == len(m.Tables) {
			_, top := s.maxLoad()
			best = min(best, top)
			return
		}
		for g := 0; g < G; g++ {
			for k := range m.Tables[i].Options {
				if s.fits(i, k, g) {
					s.place(i, k, g)
					rec(i + 1)
					s.remove(i)
				}
			}
		}
	}
	rec(0)
	return best
}

func maxSeconds(t testing.TB, m *cost.Model, a []cost.Assignment) float64 {
	e, err := m.Evaluate(a)
	require.NoError(t, err)
	require.Empty(t, e.Violation)
	return e.MaxSeconds
}

func TestMILPEqualsBruteForce(t *testing.T) {
	tests := []struct {
		seed                  uint64
		n, nodes, gpus, steps int
		symmetry              bool
	}{
		{1, 3, 1, 2, 2, false}, {2, 4, 1, 2, 2, true}, {3, 3, 2, 1, 3, false},
		{4, 4, 2, 1, 2, true}, {5, 5, 1, 2, 1, false}, {7, 3, 1, 3, 2, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("seed%d", tc.seed), func(t *testing.T) {
			m := tinyModel(t, tc.seed, tc.n, tc.nodes, tc.gpus, tc.steps)
			want := bruteForce(m)
			require.False(t, math.IsInf(want, 1), "instance must be feasible")
			res, err := SolveMILP(m, MILPOptions{MipRelGap: 1e-9, Symmetry: tc.symmetry, Cold: tc.seed%2 == 1})
			require.NoError(t, err)
			assert.Equal(t, "optimal", res.Status)
			assert.InDelta(t, want, res.Objective, 1e-6*want)
			assert.InDelta(t, want, maxSeconds(t, m, res.Assign), 1e-6*want)
			// Heuristics are feasible and never beat the optimum.
			rg, err := RowGreedy(m)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, maxSeconds(t, m, rg), want*(1-1e-9))
		})
	}
}

func TestWholeTableGreedyBaselines(t *testing.T) {
	m := tinyModel(t, 11, 12, 2, 2, 4)
	for _, key := range []GreedyKey{BySize, ByLookups, BySizeLookups} {
		a, err := WholeTableGreedy(m, key)
		require.NoError(t, err, key.String())
		e, err := m.Evaluate(a)
		require.NoError(t, err)
		assert.Empty(t, e.Violation)
		for i, x := range a { // whole tables only: all rows hot or none
			assert.True(t, x.Hot == 0 || x.Hot == m.Tables[i].Rows, "%s table %d hot %d", key, i, x.Hot)
		}
	}
}

func TestRowGreedyBeatsWholeTableOnSkew(t *testing.T) {
	m := tinyModel(t, 12, 40, 2, 4, 8)
	rg, err := RowGreedy(m)
	require.NoError(t, err)
	best := math.Inf(1)
	for _, key := range []GreedyKey{BySize, ByLookups, BySizeLookups} {
		a, err := WholeTableGreedy(m, key)
		require.NoError(t, err)
		best = min(best, maxSeconds(t, m, a))
	}
	assert.Less(t, maxSeconds(t, m, rg), best)
	res, err := SolveMILP(m, MILPOptions{TimeLimit: 2})
	require.NoError(t, err)
	assert.True(t, res.StartAccepted)
	assert.LessOrEqual(t, maxSeconds(t, m, res.Assign), maxSeconds(t, m, rg)*(1+1e-9))
	assert.LessOrEqual(t, res.DualBound, res.Objective*(1+1e-9))
}

// A node limit stops HiGHS at the same point on every machine (a time limit would not), so the
// limit branch runs every time: status "solution limit", the incumbent no worse than the start.
func TestMILPNodeLimitKeepsIncumbent(t *testing.T) {
	m := tinyModel(t, 21, 60, 2, 4, 10)
	start, err := RowGreedy(m)
	require.NoError(t, err)
	res, err := SolveMILP(m, MILPOptions{MaxNodes: -1, MipRelGap: 1e-9, Threads: 1, Symmetry: true})
	require.NoError(t, err)
	assert.Equal(t, "solution limit", res.Status)
	assert.True(t, res.StartAccepted)
	assert.LessOrEqual(t, maxSeconds(t, m, res.Assign), maxSeconds(t, m, start)*(1+1e-9))
	assert.Greater(t, res.Gap, 0.0)
	assert.Less(t, res.DualBound, res.Objective)
	assert.GreaterOrEqual(t, res.DualBound, lowerBound(m)*(1-1e-12))
}

// An expired deadline or a cancelled context ends the call before HiGHS (or the model) is built:
// the warm start comes back as the incumbent, named by why the solve stopped.
func TestMILPStopsBeforeBuildingWhenTheContextEnds(t *testing.T) {
	m := tinyModel(t, 21, 60, 2, 4, 10)
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	res, err := SolveMILPContext(past, m, MILPOptions{MipRelGap: 1e-9, Symmetry: true})
	require.NoError(t, err)
	assert.Equal(t, "time limit", res.Status)
	assert.Zero(t, res.Columns)
	maxSeconds(t, m, res.Assign) // a valid placement
	done, stop := context.WithCancel(context.Background())
	stop()
	res, err = SolveMILPContext(done, m, MILPOptions{MipRelGap: 1e-9, Symmetry: true})
	require.NoError(t, err)
	assert.Equal(t, "interrupted", res.Status)
	_, _, err = buildMILP(done, m, true)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = SolveMILPContext(done, m, MILPOptions{Cold: true})
	assert.ErrorIs(t, err, errs.ErrSolver) // no start, no time: nothing to return
}

// Cancelling during the solve interrupts HiGHS through its callback; it returns its incumbent.
func TestMILPInterruptDuringTheSolve(t *testing.T) {
	m := tinyModel(t, 21, 60, 2, 4, 10)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	res, err := SolveMILPContext(ctx, m, MILPOptions{MipRelGap: 1e-12, Threads: 1, Symmetry: true})
	require.NoError(t, err)
	assert.Equal(t, "interrupted", res.Status)
	assert.True(t, res.StartAccepted)
	maxSeconds(t, m, res.Assign)
}

// When the fast tier holds every table: with few tables the bound proves the cheapest packing
// optimal at once; with many, the exact balance search settles it (no MILP either way); a cold
// solve skips the search and the MILP is the load balance alone (T×G columns), at the same
// optimum. No table is split into host memory in any case.
func TestFastTierCase(t *testing.T) {
	var searched float64
	for _, tc := range []struct {
		n, gpus int
		cold    bool
		proof   string
	}{{3, 4, false, "bound"}, {12, 4, false, "search"}, {12, 4, true, "highs"}} {
		m := tinyModel(t, 5, tc.n, 1, tc.gpus, 6)
		m.Topo.HBMBytes = 1 << 40 // every table fits one GPU's HBM many times over
		m, err := cost.New(m.Topo, profileOf(m), nil, cost.Full)
		require.NoError(t, err)
		res, err := SolveMILP(m, MILPOptions{MipRelGap: 1e-6, Symmetry: true, Cold: tc.cold})
		require.NoError(t, err)
		assert.Equal(t, "optimal", res.Status)
		assert.Equal(t, tc.proof, res.Proof)
		switch tc.proof {
		case "bound", "search":
			assert.Zero(t, res.Columns, "no MILP was built")
			assert.Zero(t, res.Gap)
			searched = res.Objective
		default:
			assert.Equal(t, tc.n*tc.gpus+1, res.Columns, "one column per (table, GPU) and z")
			assert.InDelta(t, searched, res.Objective, 1e-6*searched, "HiGHS reaches the search's optimum")
		}
		for i, a := range res.Assign {
			assert.Equal(t, m.Tables[i].Rows, a.Hot, "table %d entirely in HBM", i)
		}
		if tc.n <= 4 {
			assert.InDelta(t, bruteForce(m), res.Objective, 1e-6*res.Objective)
		}
	}
}

// profileOf is the profile behind a model's tables.
func profileOf(m *cost.Model) *profile.Profile {
	p := &profile.Profile{Version: profile.Version, SampleRate: 1}
	for _, t := range m.Tables {
		p.Tables = append(p.Tables, *t.Table)
	}
	return p
}

// lowerBound never exceeds the optimum (brute force on small models).
func TestLowerBoundIsValid(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		for n := 2; n <= 5; n++ { // k = 0, 1 and 2 of the pigeonhole bound on 2 GPUs
			m := tinyModel(t, seed, n, 1, 2, 2)
			assert.LessOrEqual(t, lowerBound(m), bruteForce(m)*(1+1e-12), "seed %d, %d tables", seed, n)
		}
	}
	// Equal costs, T = G+1: two tables share a GPU, and the bound says so.
	m := tinyModel(t, 1, 3, 1, 2, 2)
	for i := range m.Tables {
		m.Tables[i] = m.Tables[0]
	}
	c := m.Tables[0].Options[len(m.Tables[0].Options)-1].Cost
	assert.InDelta(t, 2*c, lowerBound(m), 1e-12*c)
}

func TestMakeFallsBackWhenTheSolverFails(t *testing.T) {
	defer func(f func(context.Context, *cost.Model, MILPOptions) (*MILPResult, error)) { solveMILP = f }(solveMILP)
	solveMILP = func(context.Context, *cost.Model, MILPOptions) (*MILPResult, error) {
		return nil, fmt.Errorf("highs: injected failure")
	}
	prof := countedProfile(t)
	p, err := Make(prof, smallTopo(), Options{Strategy: StrategyMILP})
	require.NoError(t, err)
	assert.Contains(t, p.Warning, "injected failure")
	assert.Contains(t, p.Warning, "fell back to the row-level greedy")
	assert.Nil(t, p.Solver)
	rg, err := Make(prof, smallTopo(), Options{Strategy: StrategyRowGreedy})
	require.NoError(t, err)
	assert.Equal(t, rg.Tables, p.Tables)
}

// A Job is waited on in slices and interrupted with Cancel, returning the incumbent.
func TestJobWaitAndCancel(t *testing.T) {
	m := tinyModel(t, 21, 60, 2, 4, 10)
	j := Start(profileOf(m), m.Topo, Options{MILP: MILPOptions{MipRelGap: 1e-12, Threads: 1, Symmetry: true}})
	p, done, err := j.Wait(time.Millisecond)
	require.NoError(t, err)
	require.False(t, done, "a 1e-12 gap does not close in a millisecond")
	assert.Nil(t, p)
	j.Cancel()
	p, done, err = j.Wait(time.Minute)
	require.NoError(t, err)
	require.True(t, done)
	assert.Equal(t, "interrupted", p.Solver.Status)
	assert.Empty(t, p.Eval.Violation)
	require.NoError(t, j.Close())
}
