package planner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// packingCase is tables of the given byte sizes (4-byte rows, never looked up) on nodes of one GPU
// with no HBM and 1000 B of host memory each: a bin packing the row greedy may fail.
func packingCase(sizes ...int64) (*profile.Profile, cost.Topology) {
	p := &profile.Profile{Version: profile.Version, SampleRate: 1}
	for i, b := range sizes {
		p.Tables = append(p.Tables, profile.Table{Name: string(rune('a' + i)), Rows: b / 4, Dim: 1, ElemBytes: 4})
	}
	return p, cost.Topology{Nodes: 2, GPUsPerNode: 1, HBMBytes: 0, HostBytes: 1000, HBMBandwidth: 800e9,
		UVMBandwidth: 20e9, BatchSize: 16}
}

// When the MILP returns no placement and the row greedy cannot place the tables either, the error
// says why: a time limit or an interrupt is a SolverError naming both (the greedy's shortfall is
// no proof that nothing fits); HiGHS's proof of infeasibility is a CapacityError naming it.
func TestMakeSaysWhyNoPlacementCameBack(t *testing.T) {
	feasible := []int64{500, 500, 400, 400, 200} // 500+500 | 400+400+200; the greedy fails
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name      string
		sizes     []int64
		ctx       context.Context
		timeLimit float64
		class     error
		notClass  error
		want      []string
	}{
		{"time limit", feasible, context.Background(), 1e-9, errs.ErrSolver, errs.ErrCapacity,
			[]string{"the MILP found no placement within the time limit (raise time_limit)",
				`could not place the tables: row greedy: table "`}},
		{"interrupted", feasible, cancelled, 0, errs.ErrSolver, errs.ErrCapacity,
			[]string{"the MILP was interrupted before it found a placement", `row greedy: table "`}},
		{"proven infeasible", []int64{600, 600, 600}, context.Background(), 30, errs.ErrCapacity, errs.ErrSolver,
			[]string{"milp: no placement fits: HiGHS proved the MILP infeasible", "3 tables fits 2 GPUs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prof, topo := packingCase(tc.sizes...)
			_, err := MakeContext(tc.ctx, prof, topo, Options{Strategy: StrategyMILP, TimeLimit: tc.timeLimit,
				MILP: MILPOptions{Threads: 1, Symmetry: true}})
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.class)
			assert.NotErrorIs(t, err, tc.notClass)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
			assert.NotContains(t, err.Error()[:12], "row greedy", "the greedy's error is not the headline")
		})
	}
	// Given the time, the MILP places what the greedy could not.
	prof, topo := packingCase(feasible...)
	p, err := Make(prof, topo, Options{Strategy: StrategyMILP, TimeLimit: 30, MILP: MILPOptions{Threads: 1}})
	require.NoError(t, err)
	assert.Empty(t, p.Eval.Violation)
	assert.Equal(t, "optimal", p.Solver.Status)
}

// A deadline too close to build and presolve the MILP returns the warm start without building it,
// and the plan's warning says so (HiGHS would only have returned the start, late).
func TestMILPSkipsASolveItCannotSetUpInTime(t *testing.T) {
	defer func(v float64) { setupSecondsPerNonzero = v }(setupSecondsPerNonzero)
	m := tinyModel(t, 21, 60, 2, 4, 10)
	for _, tc := range []struct {
		perNonzero float64
		skipped    bool
	}{{1, true}, {1e-12, false}} {
		t.Run(fmt.Sprint(tc.perNonzero), func(t *testing.T) {
			setupSecondsPerNonzero = tc.perNonzero
			t0 := time.Now()
			p, err := Make(profileOf(m), m.Topo, Options{Strategy: StrategyMILP, TimeLimit: 20,
				MILP: MILPOptions{MaxNodes: -1, Threads: 1, Symmetry: true}})
			require.NoError(t, err)
			require.NotNil(t, p.Solver)
			assert.Empty(t, p.Eval.Violation)
			if !tc.skipped {
				assert.Positive(t, p.Solver.Columns, "the MILP was built")
				assert.Empty(t, p.Warning)
				return
			}
			assert.Less(t, time.Since(t0), 10*time.Second, "no wait for the deadline")
			assert.Equal(t, "time limit", p.Solver.Status)
			assert.Zero(t, p.Solver.Columns, "no MILP was built")
			assert.Regexp(t, `^the MILP \(\d+ columns\) was skipped: its set-up takes about \d+\.\d s or more, `+
				`and \d+\.\d s of the time limit were left; returned the warm start \(raise the time limit\)$`, p.Warning)
			assert.Contains(t, p.Report(false), "The MILP did not run to the end (see the warning)")
		})
	}
}
