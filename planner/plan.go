// Package planner places embedding tables RecShard-style: from a data profile and a topology it
// chooses, for every table, a GPU and how many of its hottest rows live in that GPU's HBM (the rest
// in host memory reached over UVM), minimizing the slowest GPU's modeled time.
//
// Strategies: the paper's whole-table greedy baselines ([WholeTableGreedy]), a row-level greedy
// ([RowGreedy]) and the MILP ([SolveMILP], HiGHS, warm-started from the row-level greedy). [Make]
// runs one and returns a [Plan]; [Plan.Save] writes plan.json, report.md and the row remap.
package planner

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
)

// PlanVersion is the plan.json format version.
const PlanVersion = 1

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
	// Tables restricts the plan to these profiled tables (nil: all).
	Tables []string
	MILP   MILPOptions
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
	Columns        int     `json:"columns"`
	Rows           int     `json:"rows"`
}

// Plan is a placement of every table with its predicted costs.
type Plan struct {
	Version      int               `json:"version"`
	Strategy     string            `json:"strategy"`
	CostModel    string            `json:"cost_model"`
	Topology     cost.Topology     `json:"topology"`
	Tables       []TablePlan       `json:"tables"`
	Eval         cost.Eval         `json:"predicted"`
	SolveSeconds float64           `json:"solve_seconds"`
	Solver       *SolverInfo       `json:"solver,omitempty"`
	Warning      string            `json:"warning,omitempty"`
	Assign       []cost.Assignment `json:"-"`
}

// solveMILP is SolveMILP, replaceable in tests of the fallback.
var solveMILP = SolveMILP

// Make plans the profiled tables on topo with the chosen strategy. The MILP falls back to the
// row-level greedy, with a warning in the plan, when HiGHS fails.
func Make(prof *profile.Profile, topo cost.Topology, opts Options) (*Plan, error) {
	m, err := cost.New(topo, prof, opts.Tables, opts.Weights)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
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
		a, err = RowGreedy(m)
	case StrategyMILP, "":
		opts.Strategy = StrategyMILP
		var res *MILPResult
		res, err = solveMILP(m, opts.MILP)
		if err != nil {
			warning = fmt.Sprintf("MILP failed (%v); fell back to the row-level greedy", err)
			a, err = RowGreedy(m)
		} else {
			a = res.Assign
			info = solverInfo(res)
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
		StartObjective: start, StartAccepted: res.StartAccepted, Columns: res.Columns, Rows: res.Rows}
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

// Save writes dir/plan.json and dir/report.md, and dir/remap.bin when prof has ranked rows for
// every table (profiles counted from data; synthetic ones have none).
func (p *Plan) Save(dir string, prof *profile.Profile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errs.IOf("plan: %v", err)
	}
	data, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		return errs.Invalidf("plan: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plan.json"), data, 0o644); err != nil {
		return errs.IOf("plan: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(p.Report()), 0o644); err != nil {
		return errs.IOf("plan: %v", err)
	}
	if prof != nil {
		r, err := NewRemap(p, prof)
		if err == nil {
			return r.Save(filepath.Join(dir, "remap.bin"))
		}
		if !errors.Is(err, errNoRanks) {
			return err
		}
	}
	return nil
}

// ParsePlan reads and checks a plan.json.
func ParsePlan(data []byte) (*Plan, error) {
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, errs.Invalidf("plan: %v", err)
	}
	if p.Version != PlanVersion {
		return nil, errs.Invalidf("plan: version %d, this recgo reads version %d", p.Version, PlanVersion)
	}
	if err := p.Topology.Validate(); err != nil {
		return nil, err
	}
	if len(p.Tables) == 0 {
		return nil, errs.Invalidf("plan: no tables")
	}
	p.Assign = make([]cost.Assignment, len(p.Tables))
	for i, t := range p.Tables {
		if t.GPU < 0 || t.GPU >= p.Topology.NumGPUs() || t.HotRows < 0 || t.HotRows > t.Rows || t.Rows <= 0 {
			return nil, errs.Invalidf("plan: table %q: rank %d of %d, hot rows %d of %d", t.Name, t.GPU,
				p.Topology.NumGPUs(), t.HotRows, t.Rows)
		}
		p.Assign[i] = cost.Assignment{GPU: t.GPU, Hot: t.HotRows}
	}
	return &p, nil
}

// LoadPlan reads dir/plan.json (or the file itself when path names one).
func LoadPlan(path string) (*Plan, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "plan.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errs.IOf("plan: %v", err)
	}
	p, err := ParsePlan(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Evaluate prices an external placement (table i of opts.Tables, or of the profile, on gpus[i]
// with hots[i] hottest rows in HBM) as a plan named opts.Strategy.
func Evaluate(prof *profile.Profile, topo cost.Topology, opts Options, gpus, hots []int64) (*Plan, error) {
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
