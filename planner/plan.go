// Package planner places embedding tables RecShard-style: from a data profile and a topology it
// chooses, for every table, a GPU and how many of its hottest rows live in that GPU's HBM (the rest
// in host memory reached over UVM), minimizing the slowest GPU's modeled time.
//
// Strategies: the paper's whole-table greedy baselines ([WholeTableGreedy]), a row-level greedy
// ([RowGreedy]) and the MILP ([SolveMILP], HiGHS, warm-started from the row-level greedy). [Make]
// runs one and returns a [Plan]; [Plan.Save] writes plan.json, report.md and the row remap.
package planner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/highs"
	"github.com/recgo/recgo/planner/profile"
)

// PlanVersion is the plan.json format version (2: with a checksum trailer).
const PlanVersion = 2

// Strategy names.
const (
	StrategyGreedySize        = "greedy_size"
	StrategyGreedyLookups     = "greedy_lookups"
	StrategyGreedySizeLookups = "greedy_size_lookups"
	StrategyRowGreedy         = "row_greedy"
	StrategyMILP              = "milp"
)

// Strategies lists every strategy [Make] accepts, baselines first.
var Strategies = []string{StrategyGreedySize, StrategyGreedyLookups, StrategyGreedySizeLookups,
	StrategyRowGreedy, StrategyMILP}

// Options select the strategy and its settings.
type Options struct {
	Strategy string
	// Weights is the cost model the strategy optimizes (Full normally; others for the ablation).
	// Plans are always evaluated with the full model.
	Weights cost.Weights
	// Tables restricts the plan to these profiled tables (nil: all; names must be distinct).
	Tables []string
	// TimeLimit bounds the whole [MakeContext] call in seconds, model building included (0: none).
	TimeLimit float64
	// MemoryLimit caps the memory the plan's model may take (0: DefaultMemoryLimit).
	MemoryLimit int64
	MILP        MILPOptions
}

// TablePlan is one table's placement and its predicted cost.
type TablePlan struct {
	Name      string  `json:"name"`
	GPU       int     `json:"rank"`
	Node      int     `json:"node"`
	Rows      int64   `json:"rows"`
	HotRows   int64   `json:"hot_rows"`
	HotBytes  int64   `json:"hot_bytes"`
	ColdBytes int64   `json:"cold_bytes"`
	Dim       int     `json:"dim"`
	Pooling   float64 `json:"pooling"`
	Coverage  float64 `json:"coverage"`
	// HBMAccessShare is the predicted share of this table's lookups served from HBM.
	HBMAccessShare   float64 `json:"hbm_access_share"`
	PredictedSeconds float64 `json:"predicted_seconds"`
}

// SolverInfo is the MILP's evidence (absent for heuristics).
type SolverInfo struct {
	Status         string  `json:"status"`
	Gap            float64 `json:"mip_gap"`
	DualBound      float64 `json:"dual_bound"`
	Objective      float64 `json:"objective"`
	StartObjective float64 `json:"start_objective"`
	StartAccepted  bool    `json:"start_accepted"`
	// Proof is what proved the gap: "highs" (its dual bound) or "bound" (the planner's own bound).
	Proof   string `json:"proof"`
	Columns int    `json:"columns"`
	Rows    int    `json:"rows"`
}

// Plan is a placement of every table with its predicted costs.
type Plan struct {
	Version      int           `json:"version"`
	Strategy     string        `json:"strategy"`
	CostModel    string        `json:"cost_model"`
	Topology     cost.Topology `json:"topology"`
	Tables       []TablePlan   `json:"tables"`
	Eval         cost.Eval     `json:"predicted"`
	SolveSeconds float64       `json:"solve_seconds"`
	Solver       *SolverInfo   `json:"solver,omitempty"`
	Warning      string        `json:"warning,omitempty"`
	// Checksum is set by [LoadPlan] from the file's trailer (see planfile.go); not part of the body.
	Checksum string            `json:"checksum,omitempty"`
	Assign   []cost.Assignment `json:"-"`
}

// solveMILP is SolveMILPContext, replaceable in tests of the fallback.
var solveMILP = SolveMILPContext

// Make is [MakeContext] without a context.
func Make(prof *profile.Profile, topo cost.Topology, opts Options) (*Plan, error) {
	return MakeContext(context.Background(), prof, topo, opts)
}

// withTimeLimit bounds ctx by seconds. No limit (zero), or one past what a time.Duration holds
// (centuries), is none: converted, such a limit would wrap to a negative duration and end the call
// at once.
func withTimeLimit(ctx context.Context, seconds float64) (context.Context, context.CancelFunc) {
	ns := seconds * float64(time.Second)
	if !(seconds > 0) || ns >= math.MaxInt64 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, time.Duration(ns))
}

// MakeContext plans the profiled tables on topo with the chosen strategy. opts.TimeLimit and ctx
// bound the whole call; cancelling ctx interrupts the MILP, which then returns its incumbent
// (status "interrupted"). The MILP falls back to the row-level greedy, with a warning in the
// plan, when HiGHS fails or stops before any placement; if the greedy cannot place the tables
// either, the error (ErrSolver) says both. ErrCapacity means no placement fits: HiGHS proved it, or
// a size that follows from the input is past opts.MemoryLimit (checked before allocating).
func MakeContext(ctx context.Context, prof *profile.Profile, topo cost.Topology, opts Options) (*Plan, error) {
	t0 := time.Now()
	if opts.TimeLimit < 0 || math.IsNaN(opts.TimeLimit) {
		return nil, errs.Invalidf("planner: time limit %g is negative", opts.TimeLimit)
	}
	if err := checkThreads(opts.MILP.Threads); err != nil { // refused here, not taken as a solver failure
		return nil, err
	}
	ctx, cancel := withTimeLimit(ctx, opts.TimeLimit)
	defer cancel()
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	if err := checkTopology(topo, opts.MemoryLimit); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(opts.Tables))
	for _, name := range opts.Tables {
		if seen[name] {
			return nil, errs.Invalidf("planner: table %q is listed twice", name)
		}
		seen[name] = true
	}
	if opts.Tables != nil && len(opts.Tables) == 0 {
		return nil, errs.Invalidf("planner: an empty table list (nil plans every profiled table)")
	}
	m, err := cost.New(topo, prof, opts.Tables, opts.Weights)
	if err != nil {
		return nil, err
	}
	var a []cost.Assignment
	var info *SolverInfo
	warning := ""
	switch opts.Strategy {
	case StrategyGreedySize:
		a, err = WholeTableGreedy(m, BySize)
	case StrategyGreedyLookups:
		a, err = WholeTableGreedy(m, ByLookups)
	case StrategyGreedySizeLookups:
		a, err = WholeTableGreedy(m, BySizeLookups)
	case StrategyRowGreedy:
		a, err = rowGreedy(ctx, m)
	case StrategyMILP, "":
		opts.Strategy = StrategyMILP
		var res *MILPResult
		mo := opts.MILP
		mo.MemoryLimit = opts.MemoryLimit
		res, err = solveMILP(ctx, m, mo)
		if errors.Is(err, errs.ErrCapacity) {
			return nil, err // a model too large to build is the caller's to shrink, not a solver failure
		}
		if err != nil {
			warning = fmt.Sprintf("MILP failed (%v); fell back to the row-level greedy", err)
			milpErr := err
			if a, err = rowGreedy(ctx, m); err != nil {
				return nil, fallbackFailed(milpErr, err)
			}
		} else {
			a = res.Assign
			info = solverInfo(res)
			warning = res.Warning
		}
	default:
		return nil, errs.Invalidf("planner: unknown strategy %q (one of %v)", opts.Strategy, Strategies)
	}
	if err != nil {
		return nil, err
	}
	p, err := FromAssignments(m, opts.Strategy, a)
	if err != nil {
		return nil, err
	}
	p.SolveSeconds = time.Since(t0).Seconds()
	p.Solver = info
	p.Warning = warning
	return p, nil
}

// fallbackFailed is the error when the MILP returned no placement and the row-level greedy could
// not place the tables either. Neither proved that no placement fits (HiGHS's proof comes back
// from the MILP as an ErrCapacity error), so it is an ErrSolver error, not the greedy's ErrCapacity.
func fallbackFailed(milpErr, greedyErr error) error {
	var stop *stopError
	switch {
	case errors.As(milpErr, &stop) && stop.reason == highs.StatusTimeLimit.String():
		return errs.Solverf("planner: the MILP found no placement within the time limit (raise time_limit), and its "+
			"fallback, the row-level greedy, could not place the tables: %v", greedyErr)
	case errors.As(milpErr, &stop):
		return errs.Solverf("planner: the MILP was %s before it found a placement, and its fallback, the row-level "+
			"greedy, could not place the tables: %v", stop.reason, greedyErr)
	}
	return errs.Solverf("planner: the MILP failed (%v), and its fallback, the row-level greedy, could not place "+
		"the tables: %v", milpErr, greedyErr)
}

// solverInfo copies the MILP's evidence into JSON-safe values: a bound HiGHS never proved (stopped
// before the root LP) becomes the trivial bound 0, hence gap 1; a missing start objective becomes 0.
func solverInfo(res *MILPResult) *SolverInfo {
	bound, gap := res.DualBound, res.Gap
	if math.IsNaN(bound) || math.IsInf(bound, 0) || bound < 0 {
		bound = 0
	}
	if math.IsNaN(gap) || math.IsInf(gap, 0) {
		gap = 1
		if res.Objective > 0 {
			gap = (res.Objective - bound) / res.Objective
		}
	}
	start := res.StartObjective
	if math.IsNaN(start) || math.IsInf(start, 0) {
		start = 0
	}
	return &SolverInfo{Status: res.Status, Gap: gap, DualBound: bound, Objective: res.Objective,
		StartObjective: start, StartAccepted: res.StartAccepted, Proof: res.Proof, Columns: res.Columns, Rows: res.Rows}
}

// FromAssignments turns a placement (from any source, e.g. TorchRec's planner) into a Plan priced
// by the full model.
func FromAssignments(m *cost.Model, strategy string, a []cost.Assignment) (*Plan, error) {
	e, err := m.Evaluate(a)
	if err != nil {
		return nil, err
	}
	p := &Plan{Version: PlanVersion, Strategy: strategy, CostModel: m.Weights.String(), Topology: m.Topo,
		Eval: e, Assign: a}
	for i, x := range a {
		t := m.Tables[i]
		p.Tables = append(p.Tables, TablePlan{Name: t.Name, GPU: x.GPU, Node: m.Topo.Node(x.GPU), Rows: t.Rows,
			HotRows: x.Hot, HotBytes: x.Hot * t.RowBytes(), ColdBytes: (t.Rows - x.Hot) * t.RowBytes(), Dim: t.Dim,
			Pooling: t.Pooling, Coverage: t.Coverage, HBMAccessShare: t.Frac(x.Hot), PredictedSeconds: m.Seconds(i, x.Hot)})
	}
	return p, nil
}

// Evaluate prices an external placement (table i of opts.Tables, or of the profile, on gpus[i]
// with hots[i] hottest rows in HBM) as a plan named opts.Strategy.
func Evaluate(prof *profile.Profile, topo cost.Topology, opts Options, gpus, hots []int64) (*Plan, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	if err := checkTopology(topo, opts.MemoryLimit); err != nil {
		return nil, err
	}
	m, err := cost.New(topo, prof, opts.Tables, opts.Weights)
	if err != nil {
		return nil, err
	}
	if len(gpus) != len(m.Tables) || len(hots) != len(m.Tables) {
		return nil, errs.Invalidf("planner: %d gpus and %d hot counts for %d tables", len(gpus), len(hots), len(m.Tables))
	}
	a := make([]cost.Assignment, len(gpus))
	for i := range a {
		a[i] = cost.Assignment{GPU: int(gpus[i]), Hot: hots[i]}
	}
	name := opts.Strategy
	if name == "" {
		name = "external"
	}
	return FromAssignments(m, name, a)
}
