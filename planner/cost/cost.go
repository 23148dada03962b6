// Package cost is RecShard's cost model (§4): the per-step time of each embedding table on a GPU
// given how many of its hottest rows sit in HBM, the rest reached over UVM in host memory.
//
// Per training step a table moves pooling × coverage × batch rows of dim × elem_bytes bytes; the
// share CDF(h) of those accesses hits the h rows in HBM and is priced at HBM bandwidth, the rest at
// UVM bandwidth. A GPU's time is the sum over its tables; a placement is as fast as its slowest GPU.
package cost

import (
	"fmt"
	"math"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/profile"
)

// GB is 10^9 bytes.
const GB = 1e9

// FormatBytes renders a byte count with a decimal unit (B, kB, MB, GB, TB).
func FormatBytes(b int64) string {
	v := float64(b)
	for _, u := range []string{"B", "kB", "MB", "GB"} {
		if math.Abs(v) < 1000 {
			return fmt.Sprintf("%.4g %s", v, u)
		}
		v /= 1000
	}
	return fmt.Sprintf("%.4g TB", v)
}

// Topology describes the training cluster the plan is for.
type Topology struct {
	Nodes       int `json:"nodes"`
	GPUsPerNode int `json:"gpus_per_node"`
	// HBMBytes is each GPU's HBM budget for embeddings; HostBytes each node's host budget for UVM rows.
	HBMBytes  int64 `json:"hbm_bytes"`
	HostBytes int64 `json:"host_bytes"`
	// Bandwidths in bytes per second for embedding row reads from HBM and over UVM.
	HBMBandwidth float64 `json:"hbm_bandwidth"`
	UVMBandwidth float64 `json:"uvm_bandwidth"`
	// BatchSize is the global batch: every table's GPU looks its IDs up for all of it.
	BatchSize int `json:"batch_size"`
}

// DefaultTopology is RecShard's evaluation set-up: 2 nodes × 8 GPUs with 24 GB HBM for embeddings,
// 1.5 TB of host memory per node, ~850 GB/s HBM and ~22 GB/s UVM row-read bandwidth, batch 16,384.
func DefaultTopology() Topology {
	return Topology{Nodes: 2, GPUsPerNode: 8, HBMBytes: 24 * GB, HostBytes: 1500 * GB,
		HBMBandwidth: 850 * GB, UVMBandwidth: 22 * GB, BatchSize: 16384}
}

// MaxGPUs bounds Nodes × GPUsPerNode, so GPU counts and per-GPU sums stay far inside int.
const MaxGPUs = 1 << 24

// MinBandwidth is the least bandwidth a topology may declare, in bytes per second: at or above it a
// table's seconds never exceed its bytes per step, so finite bytes give finite costs (a denormal
// bandwidth would turn 1/bandwidth, and zero traffic times it, into infinities and NaNs).
const MinBandwidth = 1.0

// NumGPUs is Nodes × GPUsPerNode.
func (t Topology) NumGPUs() int { return t.Nodes * t.GPUsPerNode }

// Node returns the node of global GPU rank g.
func (t Topology) Node(g int) int { return g / t.GPUsPerNode }

// Validate rejects non-positive counts, negative budgets and bandwidths.
func (t Topology) Validate() error {
	switch {
	case t.Nodes <= 0 || t.GPUsPerNode <= 0:
		return errs.Invalidf("topology: nodes %d and gpus_per_node %d must be positive", t.Nodes, t.GPUsPerNode)
	case t.HBMBytes < 0 || t.HostBytes < 0:
		return errs.Invalidf("topology: negative budget (hbm_bytes %d, host_bytes %d)", t.HBMBytes, t.HostBytes)
	case !(t.HBMBandwidth >= MinBandwidth) || !(t.UVMBandwidth >= MinBandwidth) || math.IsInf(t.HBMBandwidth, 0) || math.IsInf(t.UVMBandwidth, 0):
		return errs.Invalidf("topology: bandwidths must be finite and at least %g byte per second (hbm %g, uvm %g)",
			MinBandwidth, t.HBMBandwidth, t.UVMBandwidth)
	case t.BatchSize <= 0:
		return errs.Invalidf("topology: batch_size %d must be positive", t.BatchSize)
	case t.Nodes > MaxGPUs || t.GPUsPerNode > MaxGPUs || t.Nodes*t.GPUsPerNode > MaxGPUs:
		return errs.Capacityf("topology: %d nodes × %d GPUs is past the planner's %d GPUs", t.Nodes, t.GPUsPerNode, MaxGPUs)
	case t.HBMBytes > 1<<56 || t.HostBytes > 1<<56:
		return errs.Capacityf("topology: budgets (hbm_bytes %d, host_bytes %d) past 2^56 bytes", t.HBMBytes, t.HostBytes)
	}
	return nil
}

// Weights selects which profile facts the model prices (the paper's ablation); Full is the model.
type Weights int

// Cost model variants, from the CDF alone to the full model.
const (
	// CDFOnly counts the UVM share 1 - CDF(h) of a table as if every table had one access per sample.
	CDFOnly Weights = iota
	// WithCoverage multiplies by coverage.
	WithCoverage
	// WithPooling multiplies by coverage × pooling × batch: UVM accesses per step.
	WithPooling
	// Full prices both tiers' bytes by their bandwidths: seconds per step.
	Full
)

// String names the variant.
func (w Weights) String() string {
	return [...]string{"cdf", "cdf+coverage", "cdf+coverage+pooling", "full"}[w]
}

// Option is one candidate split of a table: its Hot hottest rows in HBM, the rest in host memory.
type Option struct {
	Hot       int64   `json:"hot_rows"`
	Frac      float64 `json:"hbm_access_share"`
	Cost      float64 `json:"cost"`
	HotBytes  int64   `json:"hot_bytes"`
	ColdBytes int64   `json:"cold_bytes"`
}

// Table is one table's profile and its candidate splits (ascending Hot, first all-UVM, last all-HBM
// when the whole table fits one GPU's HBM).
type Table struct {
	*profile.Table
	Options []Option
}

// Model prices the tables of a profile on a topology.
type Model struct {
	Topo    Topology
	Weights Weights
	Tables  []Table
}

// New builds the model for the named tables of prof (all when names is nil). It returns an
// ErrNotFound error for a table missing from the profile, an ErrInvalid one for a bad profile or
// topology, and an ErrCapacity one, stating the shortfall, when no placement can hold the tables.
func New(topo Topology, prof *profile.Profile, names []string, w Weights) (*Model, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	if err := prof.Validate(); err != nil {
		return nil, err
	}
	if w < CDFOnly || w > Full {
		return nil, errs.Invalidf("cost: unknown weights %d", w)
	}
	m := &Model{Topo: topo, Weights: w}
	if names == nil {
		for i := range prof.Tables {
			names = append(names, prof.Tables[i].Name)
		}
	}
	var total, traffic float64
	index := make(map[string]int, len(prof.Tables))
	for i := range prof.Tables {
		index[prof.Tables[i].Name] = i
	}
	for _, name := range names {
		ti, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("cost: table %q is missing from the profile: %w", name,
				errs.NotFoundf("profile: no table %q", name))
		}
		pt := &prof.Tables[ti]
		t := Table{Table: pt}
		rb := pt.RowBytes()
		size := pt.Rows * rb
		total += float64(size)
		if size > topo.HBMBytes+topo.HostBytes {
			return nil, errs.Capacityf("cost: table %q needs %s but one GPU's HBM plus its node's host memory hold %s: %s more needed",
				name, FormatBytes(size), FormatBytes(topo.HBMBytes+topo.HostBytes), FormatBytes(size-topo.HBMBytes-topo.HostBytes))
		}
		// Costs must be finite numbers: an infinite one breaks the MILP and the plan's JSON. With the
		// bandwidths at least MinBandwidth, a table's seconds are at most its bytes per step.
		step := pt.AccessesPerSample() * float64(topo.BatchSize) * float64(rb)
		traffic += step
		if math.IsInf(traffic, 0) {
			what := "overflows float64"
			if !math.IsInf(step, 0) {
				what = "overflows float64 once added to the tables before it"
			}
			return nil, errs.Invalidf("cost: table %q: its bytes read per step, coverage %g × pooling %g × batch %d × "+
				"%d-byte rows, %s: check its pooling and the batch size", name, pt.Coverage, pt.Pooling, topo.BatchSize, rb, what)
		}
		hots := []int64{0}
		for _, p := range pt.CDF {
			if p.Rows > 0 {
				hots = append(hots, p.Rows)
			}
		}
		if hots[len(hots)-1] != pt.Rows {
			hots = append(hots, pt.Rows)
		}
		for _, h := range hots {
			o := m.option(pt, h)
			if o.HotBytes <= topo.HBMBytes && o.ColdBytes <= topo.HostBytes {
				t.Options = append(t.Options, o)
			}
		}
		if len(t.Options) == 0 { // only splits between CDF steps fit: take the largest hot count that fits
			h := min(pt.Rows, topo.HBMBytes/rb)
			t.Options = append(t.Options, m.option(pt, h))
		}
		m.Tables = append(m.Tables, t)
	}
	capTotal := float64(topo.NumGPUs())*float64(topo.HBMBytes) + float64(topo.Nodes)*float64(topo.HostBytes)
	if total > capTotal {
		return nil, errs.Capacityf("cost: tables need %s but the topology holds %s (HBM + host): %s more needed",
			FormatBytes(int64(min(total, math.MaxInt64/2))), FormatBytes(int64(capTotal)), FormatBytes(int64(min(total-capTotal, math.MaxInt64/2))))
	}
	return m, nil
}

// option prices hot rows h of table t.
func (m *Model) option(t *profile.Table, h int64) Option {
	f := t.Frac(h)
	rb := t.RowBytes()
	return Option{Hot: h, Frac: f, Cost: m.price(t, f, m.Weights), HotBytes: h * rb, ColdBytes: (t.Rows - h) * rb}
}

// price is the cost of table t with HBM access share f under weights w.
func (m *Model) price(t *profile.Table, f float64, w Weights) float64 {
	switch w {
	case CDFOnly:
		return 1 - f
	case WithCoverage:
		return t.Coverage * (1 - f)
	case WithPooling:
		return t.AccessesPerSample() * float64(m.Topo.BatchSize) * (1 - f)
	default:
		bytes := t.AccessesPerSample() * float64(m.Topo.BatchSize) * float64(t.RowBytes())
		return bytes * (f/m.Topo.HBMBandwidth + (1-f)/m.Topo.UVMBandwidth)
	}
}

// Seconds is the full model's per-step time of table i with hot rows h.
func (m *Model) Seconds(i int, h int64) float64 {
	t := m.Tables[i].Table
	return m.price(t, t.Frac(h), Full)
}

// Assignment places one table: its GPU (global rank) and how many of its hottest rows are in HBM.
type Assignment struct {
	GPU int   `json:"gpu"`
	Hot int64 `json:"hot_rows"`
}

// Eval is a placement priced by the full model.
type Eval struct {
	GPUSeconds []float64 `json:"gpu_seconds"`
	GPUHBM     []int64   `json:"gpu_hbm_bytes"`
	NodeHost   []int64   `json:"node_host_bytes"`
	// UVMAccesses is each GPU's UVM row reads per step.
	UVMAccesses []float64 `json:"gpu_uvm_accesses"`
	MaxSeconds  float64   `json:"max_seconds"`
	// Spread is the slowest GPU's time over the mean GPU time (1 = perfectly balanced).
	Spread float64 `json:"spread"`
	// HBMAccessShare is the share of all lookups served from HBM; UVMRowShare the share of rows in host memory.
	HBMAccessShare float64 `json:"hbm_access_share"`
	UVMRowShare    float64 `json:"uvm_row_share"`
	// Violation describes the first capacity breach ("" when the placement fits).
	Violation string `json:"violation,omitempty"`
}

// Evaluate prices a placement with the full model and checks capacities.
func (m *Model) Evaluate(p []Assignment) (Eval, error) {
	G := m.Topo.NumGPUs()
	if len(p) != len(m.Tables) {
		return Eval{}, errs.Invalidf("cost: %d assignments for %d tables", len(p), len(m.Tables))
	}
	e := Eval{GPUSeconds: make([]float64, G), GPUHBM: make([]int64, G),
		NodeHost: make([]int64, m.Topo.Nodes), UVMAccesses: make([]float64, G)}
	var acc, hbmAcc, rows, uvmRows float64
	for i, a := range p {
		t := m.Tables[i].Table
		if a.GPU < 0 || a.GPU >= G || a.Hot < 0 || a.Hot > t.Rows {
			return Eval{}, errs.Invalidf("cost: table %q: gpu %d of %d, hot rows %d of %d", t.Name, a.GPU, G, a.Hot, t.Rows)
		}
		f := t.Frac(a.Hot)
		e.GPUSeconds[a.GPU] += m.Seconds(i, a.Hot)
		e.GPUHBM[a.GPU] += a.Hot * t.RowBytes()
		e.NodeHost[m.Topo.Node(a.GPU)] += (t.Rows - a.Hot) * t.RowBytes()
		n := t.AccessesPerSample() * float64(m.Topo.BatchSize)
		e.UVMAccesses[a.GPU] += n * (1 - f)
		acc += n
		hbmAcc += n * f
		rows += float64(t.Rows)
		uvmRows += float64(t.Rows - a.Hot)
	}
	sum := 0.0
	for g, s := range e.GPUSeconds {
		e.MaxSeconds = max(e.MaxSeconds, s)
		sum += s
		if e.GPUHBM[g] > m.Topo.HBMBytes && e.Violation == "" {
			e.Violation = fmt.Sprintf("gpu %d holds %d HBM bytes > budget %d", g, e.GPUHBM[g], m.Topo.HBMBytes)
		}
	}
	for n, b := range e.NodeHost {
		if b > m.Topo.HostBytes && e.Violation == "" {
			e.Violation = fmt.Sprintf("node %d holds %d host bytes > budget %d", n, b, m.Topo.HostBytes)
		}
	}
	if sum > 0 {
		e.Spread = e.MaxSeconds / (sum / float64(G))
	}
	if acc > 0 {
		e.HBMAccessShare = hbmAcc / acc
	}
	e.UVMRowShare = uvmRows / rows
	return e, nil
}

// ParseWeights reads a cost model name ("" or "full", "cdf", "cdf+coverage", "cdf+coverage+pooling").
func ParseWeights(s string) (Weights, error) {
	if s == "" {
		return Full, nil
	}
	for w := CDFOnly; w <= Full; w++ {
		if w.String() == s {
			return w, nil
		}
	}
	return Full, errs.Invalidf("cost: unknown cost model %q (full, cdf, cdf+coverage, cdf+coverage+pooling)", s)
}
