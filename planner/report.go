package planner

import (
	"fmt"
	"slices"
	"strings"

	"github.com/recgo/recgo/planner/cost"
)

// Report renders the plan as markdown: topology, predicted figures, per-GPU load and the tables.
// withRemap says whether a remap.bin is saved beside the plan: the next steps load it only then.
func (p *Plan) Report(withRemap bool) string {
	var b strings.Builder
	t := p.Topology
	e := p.Eval
	fmt.Fprintf(&b, "# Embedding placement plan (%s)\n\n", p.Strategy)
	fmt.Fprintf(&b, "Topology: %d node(s) × %d GPU(s), %s HBM per GPU, %s host per node, HBM %.0f GB/s, UVM %.0f GB/s, batch %d. Cost model: %s.\n\n",
		t.Nodes, t.GPUsPerNode, cost.FormatBytes(t.HBMBytes), cost.FormatBytes(t.HostBytes),
		t.HBMBandwidth/cost.GB, t.UVMBandwidth/cost.GB, t.BatchSize, p.CostModel)
	fmt.Fprintf(&b, "| figure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| slowest GPU, modeled (ms/step) | %.4f |\n", e.MaxSeconds*1e3)
	fmt.Fprintf(&b, "| spread (slowest / mean) | %.3f |\n", e.Spread)
	fmt.Fprintf(&b, "| lookups served from HBM | %.2f %% |\n", 100*e.HBMAccessShare)
	fmt.Fprintf(&b, "| rows in host memory (UVM) | %.2f %% |\n", 100*e.UVMRowShare)
	fmt.Fprintf(&b, "| solve time (s) | %.2f |\n", p.SolveSeconds)
	if s := p.Solver; s != nil {
		fmt.Fprintf(&b, "| MILP status | %s |\n| MILP gap | %.4f |\n| MILP dual bound (ms) | %.4f |\n| warm start (ms), accepted | %.4f, %v |\n",
			s.Status, s.Gap, s.DualBound*1e3, s.StartObjective*1e3, s.StartAccepted)
	}
	if p.Warning != "" {
		fmt.Fprintf(&b, "\n**Warning:** %s\n", p.Warning)
	}
	if e.Violation != "" {
		fmt.Fprintf(&b, "\n**Over capacity:** %s\n", e.Violation)
	}
	fmt.Fprintf(&b, "\n## Per GPU\n\n| rank | node | tables | modeled ms | HBM used | UVM lookups/step |\n|---|---|---|---|---|---|\n")
	count := make([]int, t.NumGPUs())
	for _, tp := range p.Tables {
		count[tp.GPU]++
	}
	for g := range e.GPUSeconds {
		fmt.Fprintf(&b, "| %d | %d | %d | %.4f | %s | %.0f |\n", g, t.Node(g), count[g], e.GPUSeconds[g]*1e3,
			cost.FormatBytes(e.GPUHBM[g]), e.UVMAccesses[g])
	}
	tables := slices.Clone(p.Tables)
	slices.SortStableFunc(tables, func(a, b TablePlan) int {
		switch {
		case a.PredictedSeconds > b.PredictedSeconds:
			return -1
		case a.PredictedSeconds < b.PredictedSeconds:
			return 1
		}
		return 0
	})
	const show = 40
	fmt.Fprintf(&b, "\n## Tables (most expensive first%s)\n\n| table | rank | rows | hot rows | HBM share of lookups | pooling | coverage | modeled ms |\n|---|---|---|---|---|---|---|---|\n",
		map[bool]string{true: fmt.Sprintf(", first %d of %d", show, len(tables)), false: ""}[len(tables) > show])
	for _, tp := range tables[:min(show, len(tables))] {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.4f | %.2f | %.3f | %.4f |\n", tp.Name, tp.GPU, tp.Rows, tp.HotRows,
			tp.HBMAccessShare, tp.Pooling, tp.Coverage, tp.PredictedSeconds*1e3)
	}
	b.WriteString(p.nextSteps(withRemap))
	return b.String()
}

// nextSteps is the report's closing section: what to do with the plan, and what to try when its
// evidence is weak (a solver gap, a fallback, a breach), and how to train with it (with the saved
// remap, or how to get one).
func (p *Plan) nextSteps(withRemap bool) string {
	var b strings.Builder
	b.WriteString("\n## Next steps\n\n")
	if p.Eval.Violation != "" {
		b.WriteString("- The placement breaches a budget: give the planner more HBM or host memory (`--hbm-gb`, `--host-gb`, more GPUs), or plan fewer tables.\n")
	}
	if p.Warning != "" {
		b.WriteString("- The MILP did not run to the end (see the warning): re-run with a longer `--time-limit`, or use the row-level greedy's plan as it is.\n")
	}
	if s := p.Solver; s != nil && s.Gap > 0.01 {
		fmt.Fprintf(&b, "- The MILP stopped %.1f %% above its proven bound (%s): a longer `--time-limit` or a looser `--gap` may settle it.\n",
			100*s.Gap, s.Status)
	}
	b.WriteString("- Check the topology above against your cluster; the plan is only as good as these budgets and bandwidths.\n")
	if withRemap {
		b.WriteString("- Train with the plan: `recgo.planner.PlannedEmbeddingBagCollection(tables, recgo.planner.Plan.load(dir), remap=recgo.planner.Remap.load(dir + \"/remap.bin\"))` puts each table's hot rows first and renumbers the IDs of raw batches itself; or renumber them in the data loader (`recgo.DataPipeline(..., remap=remap, tables=...)` or `remap.apply_kjt(batch, feature_to_table={key: table})`, the mapping needed when the batch's keys are not the table names) and feed its `.ebc`, so no ID is renumbered twice.\n")
	} else {
		// without ranked rows there is no hot-rows-first order to train with
		b.WriteString("- No remap.bin was written: the profile has no ranked rows (a synthetic profile, or one saved without them), so this plan gives each table's GPU and hot-row count but not which rows are hot. To train with a hot-rows-first layout, profile a sample of the data (`python -m recgo profile --criteo ...` or `recgo.planner.profile(...)`), re-plan and save with that profile; `recgo.planner.PlannedEmbeddingBagCollection` then takes the plan with its remap.\n")
	}
	b.WriteString("- Keep TorchRec's sharding: `recgo.planner.torchrec_sharding_plan(plan, module)` gives TorchRec this placement (ranks, kernels and cache sizes from the hot-row splits); `torchrec_constraints(plan)` carries the sharding types, kernels and cache sizes but not the ranks (TorchRec's ParameterConstraints has no rank field), so TorchRec's planner fed them places the tables itself.\n")
	b.WriteString("- Re-profile when the data drifts (`python -m recgo profile`), then re-plan.\n")
	return b.String()
}
