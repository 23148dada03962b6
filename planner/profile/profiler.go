package profile

import (
	"cmp"
	"math"
	"slices"
	"sync"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
)

// Spec names one embedding table to profile.
type Spec struct {
	Name      string
	Rows      int64
	Dim       int
	ElemBytes int
}

// denseLimit is the largest table counted in a dense array (8 bytes per row, 2 MB at most); larger
// ones use a map, whose memory follows the rows actually touched. Counts are 64-bit: a row read
// 2^32 times wrapped a 32-bit count to 0 (ranked cold, or dropped from the touched rows).
const denseLimit = 1 << 18

// MemoryLimit bounds the memory a profiler's dense counts may take with the ranking a profile makes
// of them (bytesPerDenseRow a row), checked before they are allocated. It is the planner's default
// memory limit (planner.DefaultMemoryLimit, which this package cannot import): the profiler has no
// limit of its own to set, and tables past denseLimit, counted in maps, take memory only as their
// rows are touched.
const MemoryLimit int64 = 8 << 30

// bytesPerDenseRow is the memory a row of a densely counted table may take: its count, and the
// entry, ranked ID and sorted count of a profile's ranking of the table (Profile ranks every
// touched row).
const bytesPerDenseRow = 8 + 32

type counter struct {
	dense   []uint64
	sparse  map[int64]uint64
	covered int64
	lookups int64
}

func (c *counter) add(id int64) {
	if c.dense != nil {
		c.dense[id]++
	} else {
		c.sparse[id]++
	}
}

// Profiler accumulates access counts over batches. It is safe for use by one goroutine at a time
// (calls are serialized by a mutex).
type Profiler struct {
	mu      sync.Mutex
	specs   []Spec
	rate    float64
	seed    uint64
	levels  []float64
	offered int64 // samples offered (before sampling)
	samples int64 // samples kept
	counts  []counter
}

// NewProfiler returns a profiler for the tables in specs that keeps each sample with probability
// rate (0 < rate ≤ 1), deterministically for a given seed, and records the CDF at steps levels.
func NewProfiler(specs []Spec, rate float64, seed uint64, steps int) (*Profiler, error) {
	if len(specs) == 0 {
		return nil, errs.Invalidf("profile: no tables to profile")
	}
	if !(rate > 0 && rate <= 1) {
		return nil, errs.Invalidf("profile: sample rate %g outside (0, 1]", rate)
	}
	if steps <= 0 || steps > 60 {
		return nil, errs.Invalidf("profile: steps %d outside [1, 60]", steps)
	}
	seen := map[string]bool{}
	for _, s := range specs {
		t := Table{Name: s.Name, Rows: s.Rows, Dim: s.Dim, ElemBytes: s.ElemBytes}
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, errs.Invalidf("profile: table %q appears twice", s.Name)
		}
		seen[s.Name] = true
	}
	if err := checkDense(specs, MemoryLimit); err != nil {
		return nil, err
	}
	p := &Profiler{specs: slices.Clone(specs), rate: rate, seed: seed, levels: Levels(steps),
		counts: make([]counter, len(specs))}
	for i, s := range specs {
		if s.Rows <= denseLimit {
			p.counts[i].dense = make([]uint64, s.Rows)
		} else {
			p.counts[i].sparse = make(map[int64]uint64)
		}
	}
	return p, nil
}

// checkDense refuses specs whose densely counted tables (rows up to denseLimit) would take more than
// limit bytes, at bytesPerDenseRow a row, before their counts are allocated.
func checkDense(specs []Spec, limit int64) error {
	tables, rows, largest := 0, int64(0), int64(0)
	for _, s := range specs {
		if s.Rows <= denseLimit {
			tables++
			rows += s.Rows
			largest = max(largest, s.Rows)
		}
	}
	if need := rows * bytesPerDenseRow; need > limit {
		return errs.Capacityf("profile: %d tables counted densely (%d rows in all, the largest %d) would need %d bytes "+
			"(%.1f GiB: %d bytes a row for its count and its ranking), over the planner's memory limit of %d bytes "+
			"(%.1f GiB); profile fewer tables at once", tables, rows, largest, need, float64(need)/(1<<30),
			bytesPerDenseRow, limit, float64(limit)/(1<<30))
	}
	return nil
}

// splitmix64 is a fast, well-mixed hash for per-sample keep decisions.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Add counts one KJT-shaped batch: tables[i] is the profiled table of the batch's i-th key,
// lengths holds len(tables)*batch counts (key-major, as in a KeyedJaggedTensor) and values the IDs
// in the same order. Keys mapped to -1 are skipped. The batch is validated fully before counting.
func (p *Profiler) Add(tables []int, batch int, lengths, values []int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if batch < 0 || len(lengths) != len(tables)*batch {
		return errs.Invalidf("profile: %d lengths for %d keys x batch %d", len(lengths), len(tables), batch)
	}
	offsets := make([]int64, len(tables)+1)
	used := make(map[int]bool, len(tables))
	for i, t := range tables {
		if t >= len(p.specs) || t < -1 {
			return errs.Invalidf("profile: key %d maps to table %d of %d", i, t, len(p.specs))
		}
		if t >= 0 && used[t] {
			return errs.Invalidf("profile: table %q is fed by two keys of one batch", p.specs[t].Name)
		}
		used[t] = true
		n := int64(0)
		for _, l := range lengths[i*batch : (i+1)*batch] {
			if l < 0 {
				return errs.Invalidf("profile: negative length %d for key %d", l, i)
			}
			n += l
		}
		offsets[i+1] = offsets[i] + n
	}
	if offsets[len(tables)] != int64(len(values)) {
		return errs.Invalidf("profile: lengths sum to %d but there are %d values", offsets[len(tables)], len(values))
	}
	var bad error
	var once sync.Once
	parallel.For(len(tables), 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if tables[i] < 0 {
				continue
			}
			rows := p.specs[tables[i]].Rows
			for _, id := range values[offsets[i]:offsets[i+1]] {
				if id < 0 || id >= rows {
					once.Do(func() {
						bad = errs.Invalidf("profile: table %q: id %d outside [0, %d)", p.specs[tables[i]].Name, id, rows)
					})
					return
				}
			}
		}
	})
	if bad != nil {
		return bad
	}
	keep := make([]bool, batch)
	threshold := uint64(math.Min(p.rate*math.Exp2(64), math.MaxUint64))
	kept := int64(0)
	for b := range keep {
		keep[b] = p.rate >= 1 || splitmix64(p.seed^uint64(p.offered+int64(b))) < threshold
		if keep[b] {
			kept++
		}
	}
	parallel.For(len(tables), 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if tables[i] < 0 {
				continue
			}
			c := &p.counts[tables[i]]
			off := offsets[i]
			for b, l := range lengths[i*batch : (i+1)*batch] {
				if keep[b] && l > 0 {
					c.covered++
					c.lookups += l
					for _, id := range values[off : off+l] {
						c.add(id)
					}
				}
				off += l
			}
		}
	})
	p.offered += int64(batch)
	p.samples += kept
	return nil
}

// Samples returns how many samples were offered and how many the sampling kept.
func (p *Profiler) Samples() (offered, kept int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.offered, p.samples
}

// Profile freezes the counts into a profile (the profiler can keep counting afterwards).
func (p *Profiler) Profile() (*Profile, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.samples == 0 {
		return nil, errs.Invalidf("profile: empty profile (no samples kept out of %d offered)", p.offered)
	}
	out := &Profile{Version: Version, SampleRate: p.rate, Tables: make([]Table, len(p.specs))}
	parallel.For(len(p.specs), 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out.Tables[i] = p.table(i)
		}
	})
	return out, nil
}

type idCount struct {
	id int64
	n  uint64
}

func (p *Profiler) table(i int) Table {
	s, c := p.specs[i], &p.counts[i]
	var rows []idCount
	if c.dense != nil {
		for id, n := range c.dense {
			if n > 0 {
				rows = append(rows, idCount{int64(id), n})
			}
		}
	} else {
		rows = make([]idCount, 0, len(c.sparse))
		for id, n := range c.sparse {
			rows = append(rows, idCount{id, n})
		}
	}
	slices.SortFunc(rows, func(a, b idCount) int {
		if a.n != b.n {
			return cmp.Compare(b.n, a.n)
		}
		return cmp.Compare(a.id, b.id)
	})
	ranked := make([]int64, len(rows))
	sorted := make([]uint64, len(rows))
	for k, r := range rows {
		ranked[k], sorted[k] = r.id, r.n
	}
	t := Table{Name: s.Name, Rows: s.Rows, Dim: s.Dim, ElemBytes: s.ElemBytes, Samples: p.samples,
		Lookups: c.lookups, Coverage: float64(c.covered) / float64(p.samples), Touched: int64(len(rows)),
		CDF: cdfFromCounts(sorted, p.levels), Ranked: ranked}
	if c.covered > 0 {
		t.Pooling = float64(c.lookups) / float64(c.covered)
	}
	return t
}
