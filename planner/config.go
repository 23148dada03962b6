package planner

import (
	"encoding/json"
	"math"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/gpuinfo"
)

// Config is the JSON form of a planning request (what Python and the CLI send).
type Config struct {
	Topology  cost.Topology `json:"topology"`
	Strategy  string        `json:"strategy"`
	CostModel string        `json:"cost_model"`
	// Tables restricts the plan to these profiled tables; absent or null means all, an empty list
	// is refused.
	Tables *[]string `json:"tables"`
	// TimeLimit bounds the whole call in seconds (model building included); null means no limit,
	// zero or a negative value is refused.
	TimeLimit *float64 `json:"time_limit"`
	MipRelGap float64  `json:"mip_rel_gap"`
	// Threads for HiGHS: 0 for the engine's worker count, at most highs.MaxThreads.
	Threads  int   `json:"threads"`
	Symmetry *bool `json:"symmetry"`
	// WarmStart false solves the MILP cold (default true: warm-started from the row-level greedy).
	WarmStart *bool `json:"warm_start"`
	// MemoryLimit caps the bytes one plan may allocate for its model (0 or absent: DefaultMemoryLimit).
	MemoryLimit int64 `json:"memory_limit"`
}

// ParseConfig reads a Config and turns it into the topology and options for [Make].
func ParseConfig(data []byte) (cost.Topology, Options, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return cost.Topology{}, Options{}, errs.Invalidf("planner config: %v", err)
	}
	w, err := cost.ParseWeights(c.CostModel)
	if err != nil {
		return cost.Topology{}, Options{}, err
	}
	limit := 0.0
	if c.TimeLimit != nil {
		limit = *c.TimeLimit
		if !(limit > 0) || math.IsInf(limit, 0) {
			return cost.Topology{}, Options{}, errs.Invalidf(
				"planner config: time_limit %g must be a positive number of seconds (null for no limit)", limit)
		}
	}
	if !(c.MipRelGap >= 0 && c.MipRelGap < 1) {
		return cost.Topology{}, Options{}, errs.Invalidf("planner config: mip_rel_gap %g outside [0, 1)", c.MipRelGap)
	}
	if c.Threads < 0 || c.MemoryLimit < 0 {
		return cost.Topology{}, Options{}, errs.Invalidf("planner config: negative threads (%d) or memory_limit (%d)",
			c.Threads, c.MemoryLimit)
	}
	if err := checkThreads(c.Threads); err != nil {
		return cost.Topology{}, Options{}, err
	}
	var tables []string
	if c.Tables != nil {
		tables = *c.Tables
		if len(tables) == 0 {
			return cost.Topology{}, Options{}, errs.Invalidf("planner config: tables is an empty list (null plans every profiled table)")
		}
		seen := make(map[string]bool, len(tables))
		for _, t := range tables {
			if seen[t] {
				return cost.Topology{}, Options{}, errs.Invalidf("planner config: table %q is listed twice", t)
			}
			seen[t] = true
		}
	}
	sym := c.Symmetry == nil || *c.Symmetry
	return c.Topology, Options{Strategy: c.Strategy, Weights: w, Tables: tables, MemoryLimit: c.MemoryLimit,
		TimeLimit: limit,
		MILP: MILPOptions{MipRelGap: c.MipRelGap, Threads: c.Threads, Symmetry: sym,
			Cold: c.WarmStart != nil && !*c.WarmStart}}, nil
}

// LocalTopology returns base with its GPU facts replaced by this machine's (one node, its GPU count,
// hbmShare of the smallest GPU's memory as the HBM budget), and the GPUs found. Without a driver it
// returns base unchanged with the gpuinfo ErrNotFound error, so callers keep the given topology.
func LocalTopology(base cost.Topology, hbmShare float64) (cost.Topology, []gpuinfo.GPU, error) {
	if !(hbmShare > 0 && hbmShare <= 1) {
		return base, nil, errs.Invalidf("planner: hbm share %g outside (0, 1]", hbmShare)
	}
	gpus, err := gpuinfo.Detect()
	if err != nil {
		return base, nil, err
	}
	if len(gpus) == 0 {
		return base, nil, errs.NotFoundf("planner: NVML reports no GPUs")
	}
	smallest := gpus[0].MemoryBytes
	for _, g := range gpus {
		smallest = min(smallest, g.MemoryBytes)
	}
	t := base
	t.Nodes, t.GPUsPerNode = 1, len(gpus)
	t.HBMBytes = int64(float64(smallest) * hbmShare)
	return t, gpus, nil
}
