package planner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/highs"
)

// defaultGap is the target relative gap when MILPOptions.MipRelGap is 0 (HiGHS's default).
const defaultGap = 1e-4

// setupSecondsPerNonzero is a floor on what building the MILP and HiGHS's reading and presolving it
// take per nonzero before branch and bound can improve on the warm start (0.6 µs measured for 1.7M
// columns and 11M nonzeros on a shared 2-core machine; a third of that, so that only a solve that
// cannot finish its set-up in the time left is skipped). A variable for tests.
var setupSecondsPerNonzero = 0.2e-6

// MILPOptions control the RecShard MILP solve.
type MILPOptions struct {
	// TimeLimit bounds the whole solve in seconds, warm start and model building included (0: no
	// limit besides the context's deadline). MipRelGap is the target relative gap (0: 1e-4): the
	// solve stops once the incumbent is within it of the best bound, HiGHS's or [lowerBound].
	TimeLimit float64
	MipRelGap float64
	// MaxNodes caps HiGHS's branch-and-bound nodes (0: none; negative: the root only), a limit
	// that, unlike TimeLimit, stops at the same point on every machine.
	MaxNodes int
	// MemoryLimit caps the MILP's estimated memory (0: DefaultMemoryLimit).
	MemoryLimit int64
	// Threads for HiGHS (0: the engine's worker count, parallel.Workers; at most highs.MaxThreads).
	Threads int
	// Symmetry orders the GPUs of each node by load (GPUs of a node are interchangeable).
	Symmetry bool
	// Start is the warm start; nil means the row-level greedy's placement.
	Start []cost.Assignment
	// Cold solves without any warm start (to measure what the start is worth).
	Cold bool
}

// MILPResult is the solve's placement with HiGHS's evidence of its quality (in model cost units).
type MILPResult struct {
	Assign         []cost.Assignment
	Status         string
	Objective      float64
	DualBound      float64
	Gap            float64
	StartObjective float64
	StartAccepted  bool
	// Proof names what proved the gap: "highs" (its dual bound), "bound" ([lowerBound], which
	// settles the trivial case, everything in the fast tier, without building the MILP) or
	// "search" ([exactBalance]'s exhaustive search of a fast-tier model's load balance).
	Proof         string
	Seconds       float64
	Columns, Rows int
	// Warning says why the result did not come from HiGHS although the model needed it (the time
	// left was too short to build and presolve it); "" otherwise.
	Warning string
}

// stopError is the MILP's error when a time limit or an interrupt ended it before any placement
// was found (an ErrSolver error).
type stopError struct{ reason string }

func (e *stopError) Error() string        { return "milp: " + e.reason + " before any placement was found" }
func (e *stopError) Is(target error) bool { return target == errs.ErrSolver }

// milp is the model's layout: column of w[t,g,k] is base[t] + g*len(options[t]) + k; z is last.
type milp struct {
	m     *cost.Model
	base  []int
	z     int
	scale float64
}

func (p *milp) col(t, g, k int) int { return p.base[t] + g*len(p.m.Tables[t].Options) + k }

// buildMILP writes RecShard's formulation with binaries w[t,g,k] only (table t on GPU g with split
// option k; Σ_{g,k} w = 1 per table): minimize z subject to each GPU's cost ≤ z, each GPU's hot
// bytes ≤ its HBM and each node's cold bytes ≤ its host memory.
// It stops with ctx's error when ctx ends first (checked every few dozen rows).
func buildMILP(ctx context.Context, m *cost.Model, symmetry bool) (*highs.Model, *milp, error) {
	G := m.Topo.NumGPUs()
	p := &milp{m: m, base: make([]int, len(m.Tables))}
	lb := 0.0
	n := 0
	for t, tab := range m.Tables {
		p.base[t] = n
		n += G * len(tab.Options)
		lb += tab.Options[cheapest(tab)].Cost
	}
	p.scale = max(lb/float64(G), 1e-300)
	for _, tab := range m.Tables { // costs below 1e-9 of the mean load are noise for the solver
		for _, o := range tab.Options {
			p.scale = max(p.scale, o.Cost*1e-9)
		}
	}
	hm := &highs.Model{Sense: highs.Minimize}
	for _, tab := range m.Tables {
		for range G * len(tab.Options) {
			hm.AddCol(0, 0, 1, true)
		}
	}
	p.z = int(hm.AddCol(1, 0, highs.Inf, false))
	for t, tab := range m.Tables { // one placement per table
		if t%64 == 0 && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		idx := make([]int32, 0, G*len(tab.Options))
		for g := 0; g < G; g++ {
			for k := range tab.Options {
				idx = append(idx, int32(p.col(t, g, k)))
			}
		}
		hm.AddRow(1, 1, idx, ones(len(idx)))
	}
	hbm, host := float64(m.Topo.HBMBytes), float64(m.Topo.HostBytes)
	// appendGPU appends the column and coefficient of every option (of every table) on GPU g for
	// which coef reports one.
	appendGPU := func(idx []int32, val []float64, g int, coef func(o cost.Option) (float64, bool)) ([]int32, []float64) {
		for t, tab := range m.Tables {
			for k, o := range tab.Options {
				if c, ok := coef(o); ok {
					idx = append(idx, int32(p.col(t, g, k)))
					val = append(val, c)
				}
			}
		}
		return idx, val
	}
	load := func(o cost.Option) (float64, bool) { return o.Cost / p.scale, o.Cost != 0 }
	hot := func(o cost.Option) (float64, bool) { return float64(o.HotBytes) / hbm, o.HotBytes > 0 }
	cold := func(o cost.Option) (float64, bool) { return float64(o.ColdBytes) / host, o.ColdBytes > 0 }
	loadRow := func(g int) ([]int32, []float64) { return appendGPU(nil, nil, g, load) }
	for g := 0; g < G; g++ {
		if g%16 == 0 && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		idx, val := loadRow(g)
		hm.AddRow(math.Inf(-1), 0, append(idx, int32(p.z)), append(val, -1))
		idx, val = appendGPU(idx[:0], val[:0], g, hot)
		if len(idx) > 0 {
			hm.AddRow(math.Inf(-1), 1, idx, val)
		}
	}
	for node := 0; node < m.Topo.Nodes; node++ {
		var idx []int32
		var val []float64
		for g := node * m.Topo.GPUsPerNode; g < (node+1)*m.Topo.GPUsPerNode; g++ {
			idx, val = appendGPU(idx, val, g, cold)
		}
		if len(idx) > 0 {
			hm.AddRow(math.Inf(-1), 1, idx, val)
		}
	}
	// A table's own cost bounds z (it sits on one GPU): valid, and it lifts the LP bound when one
	// heavy table, not the balance, sets the slowest GPU.
	for t, tab := range m.Tables {
		var idx []int32
		var val []float64
		for g := 0; g < G; g++ {
			for k, o := range tab.Options {
				if o.Cost != 0 {
					idx = append(idx, int32(p.col(t, g, k)))
					val = append(val, o.Cost/p.scale)
				}
			}
		}
		if len(idx) > 0 {
			hm.AddRow(math.Inf(-1), 0, append(idx, int32(p.z)), append(val, -1))
		}
	}
	if symmetry {
		for g := 0; g+1 < G; g++ {
			if g%16 == 0 && ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			if m.Topo.Node(g) != m.Topo.Node(g+1) {
				continue
			}
			i1, v1 := loadRow(g)
			i2, v2 := loadRow(g + 1)
			for k := range v2 {
				v2[k] = -v2[k]
			}
			hm.AddRow(0, math.Inf(1), append(i1, i2...), append(v1, v2...))
		}
	}
	return hm, p, ctx.Err()
}

func ones(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// canonical relabels the GPUs of each node by decreasing load (what the symmetry rows require).
func canonical(m *cost.Model, a []cost.Assignment) []cost.Assignment {
	load := make([]float64, m.Topo.NumGPUs())
	for i, x := range a {
		load[x.GPU] += m.Tables[i].Options[optionOf(m.Tables[i], x.Hot)].Cost
	}
	relabel := make([]int, len(load))
	for node := 0; node < m.Topo.Nodes; node++ {
		lo := node * m.Topo.GPUsPerNode
		gs := make([]int, m.Topo.GPUsPerNode)
		for j := range gs {
			gs[j] = lo + j
		}
		slices.SortStableFunc(gs, func(x, y int) int { return cmp.Compare(load[y], load[x]) })
		for j, g := range gs {
			relabel[g] = lo + j
		}
	}
	out := make([]cost.Assignment, len(a))
	for i, x := range a {
		out[i] = cost.Assignment{GPU: relabel[x.GPU], Hot: x.Hot}
	}
	return out
}

// optionOf finds the option with hot rows h (-1 when none).
func optionOf(t cost.Table, h int64) int {
	for k, o := range t.Options {
		if o.Hot == h {
			return k
		}
	}
	return -1
}

// checkThreads refuses a HiGHS thread count outside [0, highs.MaxThreads] (0: the engine's worker
// count), naming it.
func checkThreads(n int) error {
	if n < 0 || n > highs.MaxThreads {
		return errs.Invalidf("planner: threads %d outside [0, %d] (HiGHS starts an OS thread for each; 0 uses "+
			"recgo's worker count)", n, highs.MaxThreads)
	}
	return nil
}

// SolveMILP is [SolveMILPContext] without a context.
func SolveMILP(m *cost.Model, opts MILPOptions) (*MILPResult, error) {
	return SolveMILPContext(context.Background(), m, opts)
}

// SolveMILPContext solves RecShard's MILP with HiGHS, warm-started from opts.Start (default: the
// better of the row-level greedy and [cheapestPacking]). When the start is already within the
// target gap of [lowerBound] it returns the start without building the MILP (Proof "bound").
// opts.TimeLimit and ctx's deadline bound the whole call; when either ends it, or ctx is
// cancelled (an interrupt), it returns the best incumbent so far with status "time limit" or
// "interrupted", its gap and bound, at once even while HiGHS presolves (see [highs.Options].Done).
// When the time left cannot cover building and presolving the model, it returns the warm start
// without building it (status "time limit", with a Warning). With no incumbent at all it returns
// an ErrSolver error; when HiGHS proves that no placement fits, an ErrCapacity error saying so.
func SolveMILPContext(ctx context.Context, m *cost.Model, opts MILPOptions) (*MILPResult, error) {
	t0 := time.Now()
	if err := checkThreads(opts.Threads); err != nil {
		return nil, err
	}
	ctx, cancel := withTimeLimit(ctx, opts.TimeLimit)
	defer cancel()
	gap := opts.MipRelGap
	if gap <= 0 {
		gap = defaultGap
	}
	start := opts.Start
	if start != nil && len(start) != len(m.Tables) {
		return nil, errs.Invalidf("milp: warm start has %d assignments for %d tables", len(start), len(m.Tables))
	}
	if start == nil && !opts.Cold {
		start = warmStart(ctx, m)
	}
	for t, a := range start {
		if optionOf(m.Tables[t], a.Hot) < 0 || a.GPU < 0 || a.GPU >= m.Topo.NumGPUs() {
			return nil, errs.Invalidf("milp: warm start for table %q (gpu %d, hot %d) is not one of its options", m.Tables[t].Name, a.GPU, a.Hot)
		}
	}
	lb := lowerBound(m)
	result := func(a []cost.Assignment, status, proof string, bound float64) *MILPResult {
		obj := modelCost(m, a)
		bound = min(bound, obj)
		g := 0.0
		if obj > 0 {
			g = (obj - bound) / obj
		}
		return &MILPResult{Assign: a, Status: status, Objective: obj, DualBound: bound, Gap: g, StartObjective: obj,
			StartAccepted: true, Proof: proof, Seconds: time.Since(t0).Seconds()}
	}
	stopped := func(a []cost.Assignment, err error) (*MILPResult, error) {
		if a == nil {
			return nil, &stopError{stopReason(err)}
		}
		return result(a, stopReason(err), "bound", lb), nil
	}
	if start != nil && withinGap(modelCost(m, start), lb, gap) {
		return result(start, highs.StatusOptimal.String(), "bound", lb), nil
	}
	if ctx.Err() != nil {
		return stopped(start, ctx.Err())
	}
	if r := fastTierModel(m); r != nil {
		m = r // everything fits the fast tier: only the balance is left to decide
		if start != nil || opts.Start != nil {
			start = cheapestPacking(ctx, m)
		}
		if !opts.Cold { // a cold solve measures HiGHS alone
			a, exhaustive := exactBalance(ctx, m, start)
			if exhaustive {
				return result(a, highs.StatusOptimal.String(), "search", modelCost(m, a)), nil
			}
			start = a
		}
	}
	if err := checkMILP(m, opts.MemoryLimit); err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		// HiGHS checks its time limit only after presolve: a solve that cannot get that far in the
		// time left would return the start anyway, after building a model of gigabytes for nothing.
		need := milpColumns(m) * nonzerosPerColumn * setupSecondsPerNonzero
		if left := time.Until(dl).Seconds(); left < need {
			res, err := stopped(start, context.DeadlineExceeded)
			if res != nil {
				res.Warning = fmt.Sprintf("the MILP (%s) was skipped: its set-up takes about %.1f s or more, "+
					"and %.1f s of the time limit were left; returned the warm start (raise the time limit)",
					fmtCount("%s columns", milpColumns(m)+1), need, max(left, 0))
			}
			return res, err
		}
	}
	hm, p, err := buildMILP(ctx, m, opts.Symmetry)
	if err != nil {
		return stopped(start, err)
	}
	var x0 []float64
	if start != nil {
		if opts.Symmetry {
			start = canonical(m, start)
		}
		x0 = make([]float64, hm.NumCols())
		load := make([]float64, m.Topo.NumGPUs())
		for t, a := range start {
			k := optionOf(m.Tables[t], a.Hot)
			x0[p.col(t, a.GPU, k)] = 1
			load[a.GPU] += m.Tables[t].Options[k].Cost / p.scale
		}
		x0[p.z] = slices.Max(load) * (1 + 1e-9)
		if ok, _ := hm.Feasible(x0, 1e-7); !ok {
			x0 = nil // an over-full start (from a caller) is no start
		}
	}
	threads := opts.Threads
	if threads <= 0 {
		threads = parallel.Workers()
	}
	hctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		// HiGHS stops this much early: a run abandoned at its deadline returns InterruptGrace later.
		hdl := dl.Add(-min(highs.InterruptGrace, time.Until(dl)/10))
		var cancel context.CancelFunc
		hctx, cancel = context.WithDeadline(ctx, hdl)
		defer cancel()
	}
	ho := highs.Options{MipRelGap: opts.MipRelGap, Threads: threads, MaxNodes: opts.MaxNodes, Done: hctx.Done(),
		StopBound: lb / p.scale, StopGap: gap}
	if dl, ok := hctx.Deadline(); ok {
		ho.TimeLimit = max(time.Until(dl).Seconds(), 1e-3)
	}
	res, err := highs.Solve(hm, ho, x0)
	if err != nil {
		switch {
		case hctx.Err() != nil || res != nil && (res.Status == highs.StatusTimeLimit || res.Status == highs.StatusInterrupt):
			return stopped(start, hctx.Err())
		case res != nil && (res.Status == highs.StatusInfeasible || res.Status == highs.StatusUnboundedOrInf):
			// z is bounded below, so "unbounded or infeasible" is infeasible.
			return nil, errs.Capacityf("milp: no placement fits: HiGHS proved the MILP infeasible (no choice of a GPU "+
				"and a hot-row split, among the planner's split points, for each of the %d tables fits %d GPUs with %s "+
				"of HBM each and %d nodes with %s of host memory each)", len(m.Tables), m.Topo.NumGPUs(),
				cost.FormatBytes(m.Topo.HBMBytes), m.Topo.Nodes, cost.FormatBytes(m.Topo.HostBytes))
		}
		return nil, err
	}
	out := &MILPResult{Status: res.Status.String(), Objective: res.Objective * p.scale,
		DualBound: res.DualBound * p.scale, Gap: res.Gap, StartObjective: res.StartObjective * p.scale,
		StartAccepted: res.StartAccepted, Proof: "highs", Seconds: time.Since(t0).Seconds(), Columns: hm.NumCols(),
		Rows: hm.NumRows(), Assign: make([]cost.Assignment, len(m.Tables))}
	switch {
	case res.StoppedAtBound:
		out.Status, out.Proof = highs.StatusOptimal.String(), "bound"
	case res.Status == highs.StatusInterrupt || res.Status == highs.StatusTimeLimit:
		out.Status = stopReason(hctx.Err())
	}
	if !(out.DualBound >= lb) { // also when HiGHS proved nothing (NaN, -Inf)
		out.DualBound = lb
		if out.Proof == "highs" && out.Status != highs.StatusOptimal.String() {
			out.Proof = "bound"
		}
	}
	if out.Objective > 0 && (out.Status != highs.StatusOptimal.String() || res.StoppedAtBound) {
		out.Gap = max(0, (out.Objective-out.DualBound)/out.Objective)
	}
	for t, tab := range m.Tables {
		best, bv := -1, -1.0
		for g := 0; g < m.Topo.NumGPUs(); g++ {
			for k := range tab.Options {
				if v := res.X[p.col(t, g, k)]; v > bv {
					best, bv = g*len(tab.Options)+k, v
				}
			}
		}
		g, k := best/len(tab.Options), best%len(tab.Options)
		out.Assign[t] = cost.Assignment{GPU: g, Hot: tab.Options[k].Hot}
	}
	return out, nil
}

// warmStart is the better of the row-level greedy and cheapestPacking (nil when neither packs).
// The greedy's local search gets at most a quarter of ctx's remaining time.
func warmStart(ctx context.Context, m *cost.Model) []cost.Assignment {
	gctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		gctx, cancel = context.WithTimeout(ctx, time.Until(dl)/4)
		defer cancel()
	}
	start, err := rowGreedy(gctx, m)
	if err != nil {
		start = nil // HiGHS may still find a placement the greedy could not pack
	}
	// On a tie the packing wins: it holds whole tables in HBM, the greedy may leave untouched rows out.
	if cp := cheapestPacking(ctx, m); cp != nil && (start == nil || modelCost(m, cp) <= modelCost(m, start)*(1+1e-12)) {
		start = cp
	}
	return start
}

// stopReason names why a solve stopped early: "time limit" for a deadline, "interrupted" otherwise.
func stopReason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return highs.StatusTimeLimit.String()
	}
	if err == nil {
		return highs.StatusTimeLimit.String() // HiGHS's own time limit ended the run
	}
	return highs.StatusInterrupt.String()
}
