package planner

import (
	"os"
	"testing"
	"time"

	"github.com/recgo/recgo/planner/cost"
	"github.com/stretchr/testify/require"
)

func TestScaleRM(t *testing.T) {
	if os.Getenv("RECGO_SCALE") == "" {
		t.Skip()
	}
	for _, tb := range []float64{318e9, 636e9, 1272e9} {
		prof, err := Synthetic(SyntheticSpec{Tables: 397, Dim: 64, ElemBytes: 4, TotalBytes: tb, MinRows: 1e3, MaxRows: 1e8,
			Alphas: []float64{0.6, 0.8, 0.9, 1.0, 1.1, 1.2}, Coverages: []float64{0.05, 0.2, 0.5, 0.9, 1, 1},
			Poolings: []float64{1, 1, 2, 5, 10, 20, 50}, TouchedMin: 0.2, Steps: 16, Seed: 1})
		require.NoError(t, err)
		m, err := cost.New(cost.DefaultTopology(), prof, nil, cost.Full)
		require.NoError(t, err)
		for _, k := range []GreedyKey{BySize, ByLookups, BySizeLookups} {
			a, err := WholeTableGreedy(m, k)
			require.NoError(t, err)
			e, _ := m.Evaluate(a)
			t.Logf("%g %s max %.4g hbm %.4f uvmrows %.3f", tb, k, e.MaxSeconds, e.HBMAccessShare, e.UVMRowShare)
		}
		t0 := time.Now()
		rg, err := RowGreedy(m)
		require.NoError(t, err)
		e, _ := m.Evaluate(rg)
		t.Logf("rowgreedy %.2fs max %.4g spread %.3f hbm %.4f uvmrows %.3f", time.Since(t0).Seconds(), e.MaxSeconds, e.Spread, e.HBMAccessShare, e.UVMRowShare)
		for _, sym := range []bool{false, true} {
			res, err := SolveMILP(m, MILPOptions{TimeLimit: 30, MipRelGap: 0.01, Symmetry: sym})
			require.NoError(t, err)
			e, _ = m.Evaluate(res.Assign)
			t.Logf("milp sym=%v %s %.1fs gap %.4f bound %.4g obj %.4g start %.4g max %.4g hbm %.4f uvmrows %.3f cols %d", sym, res.Status, res.Seconds, res.Gap, res.DualBound, res.Objective, res.StartObjective, e.MaxSeconds, e.HBMAccessShare, e.UVMRowShare, res.Columns)
		}
	}
}
