package planner

import (
	"errors"
	"math"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
)

// FuzzMakeMatchesBruteForce plans a parsed profile on a small fuzzed topology. Whatever the input,
// the planner returns a named error or a plan that fits, whose file can be written, and whose MILP
// objective is the brute-force optimum over the same splits (a heuristic's is never below it).
// Sizes are kept small so that the brute force stays quick.
func FuzzMakeMatchesBruteForce(f *testing.F) {
	f.Add([]byte(`{"version":1,"tables":[{"name":"a","rows":37,"dim":1,"elem_bytes":2,"coverage":1,"pooling":1,"touched":37,"cdf":[{"rows":0,"frac":0},{"rows":13,"frac":0.27},{"rows":37,"frac":1}]},{"name":"b","rows":5,"dim":4,"elem_bytes":4,"coverage":0.3,"pooling":2.5,"touched":0,"cdf":[{"rows":0,"frac":0}]},{"name":"c","rows":100,"dim":1,"elem_bytes":2,"coverage":1,"pooling":0,"touched":100,"cdf":[{"rows":0,"frac":0},{"rows":22,"frac":0.93},{"rows":100,"frac":1}]}]}`),
		uint8(0), uint8(2), int64(96), int64(271), 1e9, 22e9, uint16(1))
	f.Add([]byte(`{"version":1,"tables":[{"name":"a","rows":10,"dim":4,"elem_bytes":4,"coverage":1,"pooling":1e308,"touched":0,"cdf":[{"rows":0,"frac":0}]}]}`),
		uint8(0), uint8(0), int64(100), int64(100), 850e9, 22e9, uint16(128))
	f.Fuzz(func(t *testing.T, data []byte, nodes, gpus uint8, hbm, host int64, hbmBW, uvmBW float64, batch uint16) {
		prof, err := profile.Parse(data)
		if err != nil || len(prof.Tables) > 3 {
			return
		}
		for _, tab := range prof.Tables {
			if len(tab.CDF) > 4 {
				return
			}
		}
		topo := cost.Topology{Nodes: int(nodes%2) + 1, GPUsPerNode: int(gpus%3) + 1, HBMBytes: hbm, HostBytes: host,
			HBMBandwidth: hbmBW, UVMBandwidth: uvmBW, BatchSize: int(batch)}
		m, err := cost.New(topo, prof, nil, cost.Full)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) && !errors.Is(err, errs.ErrCapacity) && !errors.Is(err, errs.ErrNotFound) {
				t.Fatalf("unnamed error: %v", err)
			}
			return
		}
		want := bruteForce(m)
		for _, s := range []string{StrategyRowGreedy, StrategyMILP} {
			p, err := Make(prof, topo, Options{Strategy: s, Weights: cost.Full, MILP: MILPOptions{MipRelGap: 1e-9}})
			if err != nil {
				if !math.IsInf(want, 1) && s == StrategyMILP {
					t.Fatalf("%s: %v, but a placement costs %g", s, err, want)
				}
				continue
			}
			if p.Eval.Violation != "" || math.IsInf(want, 1) {
				t.Fatalf("%s: a plan over capacity (%q) or where none fits the splits (optimum %g)", s, p.Eval.Violation, want)
			}
			if _, err := p.MarshalFile(); err != nil {
				t.Fatalf("%s: the plan file cannot be written: %v", s, err)
			}
			got := modelCost(m, p.Assign)
			if got < want*(1-1e-9) || s == StrategyMILP && got > want*(1+1e-7)+1e-300 {
				t.Fatalf("%s: slowest GPU %g, brute force %g", s, got, want)
			}
		}
	})
}
