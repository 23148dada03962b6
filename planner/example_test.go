package planner_test

import (
	"fmt"

	"github.com/recgo/recgo/planner"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
)

func ExampleMake() {
	levels := profile.Levels(8)
	prof := &profile.Profile{Version: profile.Version, SampleRate: 1, Tables: []profile.Table{
		profile.Zipf("user", 1_000_000, 64, 4, 1, 1, 1.1, 800_000, levels),
		profile.Zipf("item", 4_000_000, 64, 4, 1, 20, 1.0, 4_000_000, levels),
		profile.Zipf("tag", 10_000, 64, 4, 0.3, 5, 0.8, 10_000, levels),
	}}
	topo := cost.Topology{Nodes: 1, GPUsPerNode: 2, HBMBytes: 300 * 1 << 20, HostBytes: 8 << 30,
		HBMBandwidth: 850e9, UVMBandwidth: 22e9, BatchSize: 16384}
	p, err := planner.Make(prof, topo, planner.Options{Strategy: planner.StrategyMILP})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %.1f%% of lookups from HBM, %.0f%% of rows in host memory\n", p.Solver.Status, 100*p.Eval.HBMAccessShare, 100*p.Eval.UVMRowShare)
	// Output: optimal: 88.9% of lookups from HBM, 69% of rows in host memory
}
