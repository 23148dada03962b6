package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/highs"
	"github.com/recgo/recgo/planner/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countedProfile profiles random skewed batches over three tables.
func countedProfile(t testing.TB) *profile.Profile {
	specs := []profile.Spec{{Name: "a", Rows: 300, Dim: 8, ElemBytes: 4}, {Name: "b", Rows: 2000, Dim: 16, ElemBytes: 4},
		{Name: "c", Rows: 50, Dim: 8, ElemBytes: 4}}
	p, err := profile.NewProfiler(specs, 1, 0, 8)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 5))
	const batch = 256
	var lengths, values []int64
	for _, s := range specs {
		for b := 0; b < batch; b++ {
			l := int64(rng.IntN(3))
			lengths = append(lengths, l)
			for k := int64(0); k < l; k++ {
				u := rng.Float64()
				values = append(values, int64(float64(s.Rows)*u*u*u*u))
			}
		}
	}
	require.NoError(t, p.Add([]int{0, 1, 2}, batch, lengths, values))
	prof, err := p.Profile()
	require.NoError(t, err)
	return prof
}

func smallTopo() cost.Topology {
	return cost.Topology{Nodes: 1, GPUsPerNode: 2, HBMBytes: 40000, HostBytes: 1 << 20,
		HBMBandwidth: 800e9, UVMBandwidth: 20e9, BatchSize: 512}
}

func TestMakeEveryStrategy(t *testing.T) {
	prof := countedProfile(t)
	for _, s := range Strategies {
		t.Run(s, func(t *testing.T) {
			p, err := Make(prof, smallTopo(), Options{Strategy: s, MILP: MILPOptions{TimeLimit: 5, Symmetry: true}})
			require.NoError(t, err)
			assert.Equal(t, s, p.Strategy)
			assert.Empty(t, p.Eval.Violation)
			assert.Len(t, p.Tables, 3)
			sum := 0.0
			for _, tp := range p.Tables {
				sum += tp.PredictedSeconds
				assert.LessOrEqual(t, tp.HotRows, tp.Rows)
			}
			total := 0.0
			for _, g := range p.Eval.GPUSeconds {
				total += g
			}
			assert.InDelta(t, total, sum, 1e-15)
			if s == StrategyMILP {
				require.NotNil(t, p.Solver)
				assert.True(t, p.Solver.StartAccepted)
				assert.LessOrEqual(t, p.Solver.DualBound, p.Eval.MaxSeconds*(1+1e-9))
			}
		})
	}
}

func TestMakeBadInput(t *testing.T) {
	prof := countedProfile(t)
	neg := smallTopo()
	neg.HBMBytes = -1
	tiny := smallTopo()
	tiny.HBMBytes, tiny.HostBytes = 100, 1000
	tests := []struct {
		name  string
		prof  *profile.Profile
		topo  cost.Topology
		opts  Options
		class error
		match string
	}{
		{"negative budget", prof, neg, Options{}, errs.ErrInvalid, "negative budget"},
		{"too small", prof, tiny, Options{}, errs.ErrCapacity, "more needed"},
		{"missing table", prof, smallTopo(), Options{Tables: []string{"a", "zzz"}}, errs.ErrNotFound, `"zzz" is missing`},
		{"empty profile", &profile.Profile{Version: 1}, smallTopo(), Options{}, errs.ErrInvalid, "empty profile"},
		{"unknown strategy", prof, smallTopo(), Options{Strategy: "best"}, errs.ErrInvalid, "unknown strategy"},
		{"empty table list", prof, smallTopo(), Options{Tables: []string{}}, errs.ErrInvalid, "empty table list"},
		{"duplicate table", prof, smallTopo(), Options{Tables: []string{"a", "b", "a"}}, errs.ErrInvalid, `"a" is listed twice`},
		{"past MaxGPUs", prof, func() cost.Topology { t := smallTopo(); t.Nodes = 1 << 30; return t }(),
			Options{Strategy: StrategyGreedySize}, errs.ErrCapacity, "past the planner's"},
		{"memory limit", prof, smallTopo(), Options{MemoryLimit: 100}, errs.ErrCapacity, "topology of 2 GPUs needs about 768 B, over the planner's memory limit of 100 B"},
		{"huge table", hugeTable(prof), smallTopo(), Options{}, errs.ErrCapacity, "table size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Make(tc.prof, tc.topo, tc.opts)
			assert.ErrorIs(t, err, tc.class)
			assert.ErrorContains(t, err, tc.match)
		})
	}
}

// A MILP past the memory limit is refused before it is built, naming its size; 10^6 GPUs with
// room for every table are settled by the bound without a MILP at all.
func TestMILPMemoryLimit(t *testing.T) {
	m := tinyModel(t, 21, 60, 2, 4, 10)
	_, err := SolveMILP(m, MILPOptions{MemoryLimit: 1 << 20, Symmetry: true})
	assert.ErrorIs(t, err, errs.ErrCapacity)
	assert.ErrorContains(t, err, "the MILP (")
	assert.ErrorContains(t, err, "columns for 60 tables on 8 GPUs) needs about")
	p, err := Make(profileOf(m), m.Topo, Options{MemoryLimit: 1 << 20, MILP: MILPOptions{Symmetry: true}})
	assert.ErrorIs(t, err, errs.ErrCapacity, "not swallowed by the fallback")
	assert.Nil(t, p)
	big := smallTopo()
	big.Nodes, big.GPUsPerNode = 125000, 8
	p, err = Make(countedProfile(t), big, Options{})
	require.NoError(t, err)
	assert.Equal(t, "bound", p.Solver.Proof)
	assert.Zero(t, p.Solver.Columns)
	_, err = Make(countedProfile(t), big, Options{MemoryLimit: 100 << 20})
	assert.ErrorIs(t, err, errs.ErrCapacity)
	assert.ErrorContains(t, err, "topology of 1000000 GPUs needs about")
}

// hugeTable is prof with its first table grown past the planner's table size.
func hugeTable(prof *profile.Profile) *profile.Profile {
	p := *prof
	p.Tables = append([]profile.Table(nil), prof.Tables...)
	p.Tables[0].Rows = 1 << 60
	p.Tables[0].Ranked = nil
	return &p
}

func TestParseConfigRejects(t *testing.T) {
	for js, match := range map[string]string{
		`{"time_limit": 0}`:                "time_limit 0 must be a positive",
		`{"time_limit": -2}`:               "time_limit -2 must be a positive",
		`{"tables": []}`:                   "tables is an empty list",
		`{"tables": ["a", "a"]}`:           `table "a" is listed twice`,
		`{"mip_rel_gap": 1.5}`:             "mip_rel_gap 1.5 outside",
		`{"threads": -1}`:                  "negative threads",
		`{"time_limit": NaN}`:              "invalid character",
		`{"cost_model": "x"}`:              "unknown cost model",
		`{"memory_limit": -5}`:             "memory_limit",
		`{"time_limit": 1e400}`:            "cannot unmarshal",
		`{"topology": {"nodes": "two"}}`:   "cannot unmarshal",
		`{"tables": null, "time_limit": 3`: "unexpected end",
	} {
		_, _, err := ParseConfig([]byte(js))
		assert.ErrorIs(t, err, errs.ErrInvalid, js)
		assert.ErrorContains(t, err, match, js)
	}
	_, opts, err := ParseConfig([]byte(`{"time_limit": null, "tables": null}`))
	require.NoError(t, err)
	assert.Zero(t, opts.TimeLimit) // null: no limit
	assert.Nil(t, opts.Tables)     // null: every table
	_, opts, err = ParseConfig([]byte(`{"time_limit": 2.5, "memory_limit": 1024}`))
	require.NoError(t, err)
	assert.Equal(t, 2.5, opts.TimeLimit)
	assert.Equal(t, int64(1024), opts.MemoryLimit)
}

// The time limit bounds the whole call: with a limit far shorter than building the model of many
// GPUs takes, Make still returns the warm start as a plan ("time limit"), not after the build.
func TestMakeTimeLimitCoversModelBuilding(t *testing.T) {
	m := tinyModel(t, 21, 60, 2, 4, 10)
	p, err := Make(profileOf(m), m.Topo, Options{Strategy: StrategyMILP, TimeLimit: 1e-9, MILP: MILPOptions{Symmetry: true}})
	require.NoError(t, err)
	require.NotNil(t, p.Solver)
	assert.Equal(t, "time limit", p.Solver.Status)
	assert.Zero(t, p.Solver.Columns)
	assert.Empty(t, p.Eval.Violation)
}

func TestRemapPutsHotRowsFirst(t *testing.T) {
	prof := countedProfile(t)
	p, err := Make(prof, smallTopo(), Options{Strategy: StrategyRowGreedy})
	require.NoError(t, err)
	r, err := NewRemap(p, prof)
	require.NoError(t, err)
	for ti, tp := range p.Tables {
		pt, err := prof.Table(tp.Name)
		require.NoError(t, err)
		ids := make([]int64, tp.Rows)
		for i := range ids {
			ids[i] = int64(i)
		}
		out := make([]int64, len(ids))
		require.NoError(t, r.Apply(ti, ids, out))
		seen := make([]bool, tp.Rows) // a bijection on [0, rows)
		for _, v := range out {
			require.True(t, v >= 0 && v < tp.Rows)
			require.False(t, seen[v])
			seen[v] = true
		}
		for k, id := range pt.Ranked { // profiled rows hottest first
			assert.Equal(t, int64(k), out[id])
		}
		prev := int64(-1) // unseen rows keep their order after the profiled ones
		for id, v := range out {
			if v >= pt.Touched {
				assert.Greater(t, v, prev, "id %d", id)
				prev = v
			}
		}
	}
	assert.ErrorIs(t, r.Apply(0, []int64{1 << 40}, make([]int64, 1)), errs.ErrInvalid)
	_, err = r.Lookup("nope")
	assert.ErrorIs(t, err, errs.ErrNotFound)

	dir := t.TempDir()
	require.NoError(t, p.Save(dir, prof))
	back, err := LoadRemap(filepath.Join(dir, "remap.bin"), 0)
	require.NoError(t, err)
	for i := range r.Tables {
		assert.Equal(t, r.Tables[i].Ranked, back.Tables[i].Ranked)
		assert.Equal(t, r.Tables[i].Hot, back.Tables[i].Hot)
	}
	lp, err := LoadPlan(dir)
	require.NoError(t, err)
	assert.Equal(t, p.Tables, lp.Tables)
	assert.Equal(t, p.Assign, lp.Assign)
	report, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "slowest GPU")
	i := strings.Index(string(report), "## Next steps")
	require.Greater(t, i, 0, "report.md ends with what to do next")
	assert.NotContains(t, string(report[i+1:]), "\n## ", "Next steps is the last section")
	assert.Contains(t, string(report[i:]), "PlannedEmbeddingBagCollection")
}

func TestParsePlanRejects(t *testing.T) {
	for name, js := range map[string]string{
		"syntax":    "{",
		"version":   `{"version": 7}`,
		"topo":      `{"version": 2, "topology": {"nodes": 0}}`,
		"rank":      `{"version": 2, "topology": {"nodes":1,"gpus_per_node":1,"hbm_bandwidth":1,"uvm_bandwidth":1,"batch_size":1}, "tables":[{"name":"a","rank":3,"rows":5}]}`,
		"duplicate": `{"version": 2, "topology": {"nodes":1,"gpus_per_node":1,"hbm_bandwidth":1,"uvm_bandwidth":1,"batch_size":1}, "tables":[{"name":"a","rank":0,"rows":5},{"name":"a","rank":0,"rows":5}]}`,
	} {
		_, err := ParsePlan([]byte(js))
		assert.ErrorIs(t, err, errs.ErrInvalid, name)
	}
}

func FuzzReadRemap(f *testing.F) {
	_, data := smallRemapFile(f)
	f.Add(data)
	f.Add([]byte(remapMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ReadRemap(bytes.NewReader(data), int64(len(data)), 1<<20)
		if err != nil {
			return
		}
		for ti, tab := range r.Tables {
			ids := make([]int64, min(tab.Rows, 64))
			for i := range ids {
				ids[i] = int64(i)
			}
			out := make([]int64, len(ids))
			if err := r.Apply(ti, ids, out); err != nil {
				t.Fatal(err)
			}
			for _, v := range out {
				if v < 0 || v >= tab.Rows {
					t.Fatalf("remapped id %d outside [0, %d)", v, tab.Rows)
				}
			}
		}
	})
}

func TestLocalTopologyFallsBack(t *testing.T) {
	base := smallTopo()
	_, _, err := LocalTopology(base, 0)
	assert.ErrorIs(t, err, errs.ErrInvalid)
	got, gpus, err := LocalTopology(base, 0.8)
	if err != nil { // no driver on this machine: the given topology stands
		assert.ErrorIs(t, err, errs.ErrNotFound)
		assert.Equal(t, base, got)
		return
	}
	assert.Equal(t, len(gpus), got.GPUsPerNode)
	assert.Equal(t, 1, got.Nodes)
}

func FuzzParsePlan(f *testing.F) {
	f.Add([]byte(`{"version": 2, "topology": {"nodes":1,"gpus_per_node":2,"hbm_bytes":10,"host_bytes":10,"hbm_bandwidth":1,"uvm_bandwidth":1,"batch_size":1}, "tables":[{"name":"a","rank":1,"rows":5,"hot_rows":2}]}`))
	f.Add([]byte(`{"topology": {}, "strategy": "milp", "cost_model": "cdf", "time_limit": -1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if p, err := ParsePlan(data); err == nil {
			for i, a := range p.Assign {
				if a.GPU < 0 || a.GPU >= p.Topology.NumGPUs() || a.Hot < 0 || a.Hot > p.Tables[i].Rows {
					t.Fatalf("accepted an out-of-range assignment %+v", a)
				}
			}
		}
		if topo, opts, err := ParseConfig(data); err == nil {
			if opts.MILP.TimeLimit < 0 || opts.MILP.MipRelGap < 0 || opts.Weights < cost.CDFOnly || opts.Weights > cost.Full {
				t.Fatalf("accepted bad options %+v for %+v", opts, topo)
			}
		}
	})
}

func TestSolverInfoIsJSONSafe(t *testing.T) {
	info := solverInfo(&MILPResult{Status: "time limit", Objective: 2, DualBound: math.Inf(-1), Gap: math.Inf(1),
		StartObjective: math.NaN()})
	assert.Equal(t, 0.0, info.DualBound)
	assert.Equal(t, 1.0, info.Gap)
	assert.Equal(t, 0.0, info.StartObjective)
	_, err := json.Marshal(info)
	assert.NoError(t, err)
	kept := solverInfo(&MILPResult{Objective: 2, DualBound: 1.5, Gap: 0.25, StartObjective: 3})
	assert.Equal(t, SolverInfo{Objective: 2, DualBound: 1.5, Gap: 0.25, StartObjective: 3}, *kept)
}

// A table that fits no GPU at any of its splits gets an error saying why: with room left for its
// bytes split between two of the profile's CDF steps, that a split between steps may fit; without,
// how much it needs and how much the roomiest GPU has. Both greedy strategies say the same.
func TestNoRoomSaysWhetherASplitBetweenStepsMightFit(t *testing.T) {
	m := tinyModel(t, 3, 1, 1, 1, 4)
	opts := m.Tables[0].Options
	require.GreaterOrEqual(t, len(opts), 2)
	require.Zero(t, opts[0].HotBytes)
	total := opts[0].ColdBytes
	between := opts[1].HotBytes / 2 // HBM for half the first step's hot rows: no step fits, a split would
	for _, tc := range []struct {
		name      string
		hbm, host int64
		want      string
	}{
		{"between steps", between, total - between, "so a split between two steps may fit"},
		{"too big", between, total - between - 1, "more than any GPU has left (the most: GPU 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.Topo.HBMBytes, m.Topo.HostBytes = tc.hbm, tc.host
			_, err := RowGreedy(m)
			assert.ErrorIs(t, err, errs.ErrCapacity)
			assert.ErrorContains(t, err, "row greedy: table \"t0\"")
			assert.ErrorContains(t, err, tc.want)
			_, err = WholeTableGreedy(m, BySize)
			assert.ErrorIs(t, err, errs.ErrCapacity)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// A time limit past what a time.Duration holds means no limit: converted as it was, it wrapped to a
// negative duration and the MILP stopped at once ("time limit", with only the warm start).
func TestHugeTimeLimitIsNoLimit(t *testing.T) {
	tests := []struct {
		name     string
		seconds  float64
		deadline bool
	}{
		{"none", 0, false},
		{"an hour", 3600, true},
		{"just within a Duration", 9e9, true},
		{"past a Duration", 1e10, false},
		{"far past a Duration", 1e300, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tinyModel(t, 2, 4, 1, 2, 2)
			p, err := Make(profileOf(m), m.Topo, Options{Strategy: StrategyMILP, TimeLimit: tc.seconds,
				MILP: MILPOptions{MipRelGap: 1e-9, Symmetry: true, Threads: 1}})
			require.NoError(t, err)
			assert.Equal(t, "optimal", p.Solver.Status)
			assert.Empty(t, p.Warning)
			res, err := SolveMILP(m, MILPOptions{TimeLimit: tc.seconds, MipRelGap: 1e-9, Symmetry: true, Threads: 1})
			require.NoError(t, err)
			assert.Equal(t, "optimal", res.Status)
			ctx, cancel := withTimeLimit(context.Background(), tc.seconds)
			defer cancel()
			dl, ok := ctx.Deadline()
			require.Equal(t, tc.deadline, ok)
			if ok {
				assert.InDelta(t, tc.seconds, time.Until(dl).Seconds(), 1)
			}
		})
	}
}

// A thread count HiGHS cannot take is refused by name: before, any count went through and HiGHS's
// narrower integer option cut a huge one down to a small or negative one.
func TestThreadsAreBounded(t *testing.T) {
	m := tinyModel(t, 2, 4, 1, 2, 2)
	tests := []struct {
		threads int
		ok      bool
	}{
		{0, true}, {1, true},
		{highs.MaxThreads + 1, false}, {1 << 31, false}, {1<<32 + 2, false}, {-1, false},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.threads), func(t *testing.T) {
			_, _, err := ParseConfig([]byte(fmt.Sprintf(`{"threads": %d}`, tc.threads)))
			_, merr := Make(profileOf(m), m.Topo, Options{Strategy: StrategyMILP,
				MILP: MILPOptions{Threads: tc.threads, Symmetry: true}})
			_, serr := SolveMILP(m, MILPOptions{Threads: tc.threads, Symmetry: true})
			for _, e := range []error{err, merr, serr} {
				if tc.ok {
					assert.NoError(t, e)
					continue
				}
				assert.ErrorIs(t, e, errs.ErrInvalid)
				assert.ErrorContains(t, e, strconv.Itoa(tc.threads))
			}
			if !tc.ok && tc.threads > 0 {
				assert.ErrorContains(t, merr, fmt.Sprintf("threads %d outside [0, %d]", tc.threads, highs.MaxThreads))
			}
		})
	}
}
