package planner

import (
	"fmt"
	"math"
	"strconv"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
)

// DefaultMemoryLimit is the memory one plan may allocate for its model when the caller sets no
// limit (Options.MemoryLimit, Config.memory_limit): every allocation whose size follows from the
// input is estimated against it first, so an absurd request fails with an ErrCapacity error
// instead of exhausting the process.
const DefaultMemoryLimit int64 = 8 << 30

// Per-item byte costs of the estimates (Go slices, their C copies and HiGHS's own copies).
const (
	bytesPerGPU       = 256 // evaluation, heuristic state and the plan's per-GPU JSON
	bytesPerColumn    = 96  // cost, bounds, integrality, start and solution, in Go, C and HiGHS
	bytesPerNonzero   = 64  // index and value, in Go, C and HiGHS (presolve keeps copies)
	nonzerosPerColumn = 7   // placement, load, HBM, host, per-table and two symmetry rows
	bytesPerRankedRow = 64  // remap: ranked, sorted and the position map entry
)

// memoryLimit returns limit, or DefaultMemoryLimit when limit is 0.
func memoryLimit(limit int64) int64 {
	if limit <= 0 {
		return DefaultMemoryLimit
	}
	return limit
}

// checkBytes returns an ErrCapacity error naming what and its size when need exceeds limit.
func checkBytes(what string, need float64, limit int64) error {
	limit = memoryLimit(limit)
	if need > float64(limit) || math.IsNaN(need) {
		return errs.Capacityf("planner: %s needs about %s, over the planner's memory limit of %s (raise memory_limit to allow it)",
			what, cost.FormatBytes(int64(min(need, math.MaxInt64))), cost.FormatBytes(limit))
	}
	return nil
}

// checkTopology bounds the per-GPU state of any strategy on topo.
func checkTopology(topo cost.Topology, limit int64) error {
	g := float64(topo.Nodes) * float64(topo.GPUsPerNode)
	return checkBytes(fmtCount("topology of %s GPUs", g), g*bytesPerGPU+float64(topo.Nodes)*bytesPerGPU, limit)
}

// milpColumns counts the MILP's binaries: one per (table, GPU, option).
func milpColumns(m *cost.Model) float64 {
	opts := 0.0
	for _, t := range m.Tables {
		opts += float64(len(t.Options))
	}
	return opts * float64(m.Topo.NumGPUs())
}

// checkMILP bounds the MILP's model before it is built.
func checkMILP(m *cost.Model, limit int64) error {
	cols := milpColumns(m) + 1
	need := cols*bytesPerColumn + cols*nonzerosPerColumn*bytesPerNonzero
	if cols > math.MaxInt32 {
		return errs.Capacityf("planner: the MILP for %d tables on %d GPUs has %.3g columns, more than HiGHS's 32-bit indices hold",
			len(m.Tables), m.Topo.NumGPUs(), cols)
	}
	return checkBytes(fmtCount("the MILP (%s columns", cols)+fmtCount(" for %s tables", float64(len(m.Tables)))+
		fmtCount(" on %s GPUs)", float64(m.Topo.NumGPUs())), need, limit)
}

// fmtCount renders n compactly inside format's %s (1.2e+06 for large counts, digits otherwise).
func fmtCount(format string, n float64) string {
	s := strconv.FormatFloat(n, 'g', 3, 64)
	if n < 1e12 {
		s = strconv.FormatInt(int64(n), 10)
	}
	return fmt.Sprintf(format, s)
}
