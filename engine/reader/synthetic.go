package reader

import (
	"io"
	"math"
	"runtime"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// SyntheticField is one generated sparse field.
type SyntheticField struct {
	Name string `json:"name"`
	// Rows bounds the IDs: [0, Rows). ID r-1 is the r-th most popular.
	Rows int64 `json:"rows"`
	// Alpha is the power-law exponent of ID popularity: rank r is drawn with weight r^-Alpha.
	Alpha float64 `json:"alpha"`
	// Coverage is the probability that a sample has the field (an empty bag otherwise).
	Coverage float64 `json:"coverage"`
	// Pooling is the mean bag length of a present field (>= 1; lengths are 1 + geometric).
	Pooling float64 `json:"pooling"`
}

// PlantedLabel is a ground-truth label model: a hidden weight w(f, id) ~ N(0, IDScale²) per ID of
// every field and v_j ~ N(0, DenseScale²) per dense column, and
//
//	logit = Bias + Σ_f mean_{id in bag f} w(f, id) + Σ_j v_j·dense_j,   label ~ Bernoulli(sigmoid(logit)),
//
// so a model that learns the embeddings can reach the AUC of the true logit (see [Synthetic.Logit]).
type PlantedLabel struct {
	IDScale    float64 `json:"id_scale"`
	DenseScale float64 `json:"dense_scale"`
	Bias       float64 `json:"bias"`
}

// SyntheticConfig configures [NewSynthetic].
type SyntheticConfig struct {
	// Samples is the number of samples over all ranks.
	Samples int64            `json:"samples"`
	Seed    uint64           `json:"seed"`
	Fields  []SyntheticField `json:"fields"`
	// Dense is the number of dense columns (standard normal values).
	Dense int `json:"dense"`
	// Label plants a label model; nil draws labels independently with probability 1/4.
	Label *PlantedLabel `json:"label,omitempty"`
}

const maxSyntheticBag = 1 << 12

func (c *SyntheticConfig) check() error {
	if c.Samples <= 0 {
		return errs.Invalidf("synthetic: samples must be positive, got %d", c.Samples)
	}
	if len(c.Fields) == 0 && c.Dense <= 0 {
		return errs.Invalidf("synthetic: no fields and no dense columns")
	}
	if c.Dense < 0 || c.Dense > 1<<12 || len(c.Fields) > 1<<14 {
		return errs.Invalidf("synthetic: %d dense columns and %d fields (limits 4096, 16384)", c.Dense, len(c.Fields))
	}
	names := map[string]bool{}
	for _, f := range c.Fields {
		switch {
		case f.Name == "" || names[f.Name]:
			return errs.Invalidf("synthetic: field name %q is empty or repeated", f.Name)
		case f.Rows <= 0:
			return errs.Invalidf("synthetic: field %q: rows must be positive, got %d", f.Name, f.Rows)
		case !(f.Alpha >= 0 && f.Alpha <= 10):
			return errs.Invalidf("synthetic: field %q: alpha %v outside [0, 10]", f.Name, f.Alpha)
		case !(f.Coverage >= 0 && f.Coverage <= 1):
			return errs.Invalidf("synthetic: field %q: coverage %v outside [0, 1]", f.Name, f.Coverage)
		case !(f.Pooling >= 1 && f.Pooling <= maxSyntheticBag/8):
			return errs.Invalidf("synthetic: field %q: pooling %v outside [1, %d]", f.Name, f.Pooling, maxSyntheticBag/8)
		}
		names[f.Name] = true
	}
	if l := c.Label; l != nil && !(l.IDScale >= 0 && l.DenseScale >= 0 && !math.IsInf(l.Bias, 0) && !math.IsNaN(l.Bias)) {
		return errs.Invalidf("synthetic: label scales must be non-negative and the bias finite")
	}
	return nil
}

// Synthetic is the generated source: sample i is a pure function of (Seed, i), so any position is
// reached in constant time and every rank draws the same data set.
type Synthetic struct {
	cfg    SyntheticConfig
	opt    Options
	schema Schema
	next   int64 // global index of the next sample to consider
	closed bool
	ids    []int64
}

// NewSynthetic validates cfg and returns the generator. Its sparse fields are int64; dense columns
// are named d0, d1, ...
func NewSynthetic(cfg SyntheticConfig, opt Options) (*Synthetic, error) {
	if err := opt.check(); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Synthetic{cfg: cfg, opt: opt}
	for _, f := range cfg.Fields {
		s.schema.Fields = append(s.schema.Fields, Field{Name: f.Name, Kind: feature.KindInt64})
	}
	for j := 0; j < cfg.Dense; j++ {
		s.schema.Dense = append(s.schema.Dense, "d"+itoa(j))
	}
	s.schema.HasLabel = true
	return s, nil
}

func itoa(i int) string {
	return string(appendInt(nil, int64(i)))
}

// Config returns the generator's configuration.
func (s *Synthetic) Config() SyntheticConfig { return s.cfg }

// Schema describes the generated batches.
func (s *Synthetic) Schema() Schema { return s.schema }

// rng is splitmix64: tiny, fast, and seedable per sample.
type rng struct{ s uint64 }

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) u64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix(r.s)
}

// uniform returns a float64 in (0, 1).
func (r *rng) uniform() float64 { return (float64(r.u64()>>11) + 0.5) / (1 << 53) }

func (r *rng) normal() float64 {
	return math.Sqrt(-2*math.Log(r.uniform())) * math.Cos(2*math.Pi*r.uniform())
}

// powerLaw maps u in (0,1) to a 0-based rank in [0, n) with P(rank r-1) ∝ r^-alpha (continuous
// inverse CDF over [1, n+1), floored).
func powerLaw(u float64, n int64, alpha float64) int64 {
	N := float64(n) + 1
	var r float64
	if math.Abs(alpha-1) < 1e-9 {
		r = math.Pow(N, u)
	} else {
		a := 1 - alpha
		r = math.Pow(u*math.Pow(N, a)+(1-u), 1/a)
	}
	id := int64(r) - 1
	return min(max(id, 0), n-1)
}

// sample draws sample i: per field its IDs (into ids, with per-field counts in lens), its dense
// values, and returns its label draw u and the logit the planted model gives it.
func (s *Synthetic) sample(i int64, ids []int64, lens []int64, dense []float64) ([]int64, float64, float64) {
	r := rng{s: mix(s.cfg.Seed ^ mix(uint64(i)+0x632be59bd9b4e019))}
	logit := 0.0
	pl := s.cfg.Label
	for f, fc := range s.cfg.Fields {
		n := int64(0)
		if r.uniform() < fc.Coverage {
			n = 1
			if fc.Pooling > 1 {
				p := 1 / fc.Pooling
				n += int64(math.Log(r.uniform()) / math.Log1p(-p))
				n = min(n, maxSyntheticBag)
			}
		}
		w := 0.0
		for k := int64(0); k < n; k++ {
			id := powerLaw(r.uniform(), fc.Rows, fc.Alpha)
			ids = append(ids, id)
			if pl != nil {
				w += s.hiddenWeight(f, id)
			}
		}
		if n > 0 {
			logit += w / float64(n)
		}
		lens[f] = n
	}
	for j := range dense {
		dense[j] = r.normal()
		if pl != nil {
			logit += s.denseWeight(j) * dense[j]
		}
	}
	if pl != nil {
		logit += pl.Bias
	}
	return ids, r.uniform(), logit
}

func (s *Synthetic) hashNormal(a, b uint64) float64 {
	r := rng{s: mix(s.cfg.Seed*0x9e3779b97f4a7c15 ^ mix(a<<40^b^0x5851f42d4c957f2d))}
	return r.normal()
}

// hiddenWeight is the planted weight of ID id of field f.
func (s *Synthetic) hiddenWeight(f int, id int64) float64 {
	return s.cfg.Label.IDScale * s.hashNormal(uint64(f)+1, uint64(id))
}

func (s *Synthetic) denseWeight(j int) float64 {
	return s.cfg.Label.DenseScale * s.hashNormal(0, uint64(j))
}

// Logit returns the planted model's logit of global sample i (0 without a planted label).
func (s *Synthetic) Logit(i int64) float64 {
	lens := make([]int64, len(s.cfg.Fields))
	dense := make([]float64, s.cfg.Dense)
	_, _, logit := s.sample(i, nil, lens, dense)
	return logit
}

// Read generates up to n of this rank's next samples.
func (s *Synthetic) Read(b *Batch, n int) (int, error) {
	if s.closed {
		return 0, errs.Invalidf("reader: source is closed")
	}
	b.Reset(s.schema, n)
	F := len(s.cfg.Fields)
	lens := make([]int64, F)
	dense := make([]float64, s.cfg.Dense)
	W, R := int64(s.opt.WorldSize), int64(s.opt.Rank)
	for b.Size < n && s.next < s.cfg.Samples {
		g := s.next
		s.next++
		if g%W != R {
			continue
		}
		if b.Size%yieldEvery == yieldEvery-1 {
			runtime.Gosched()
		}
		var u, logit float64
		s.ids, u, logit = s.sample(g, s.ids[:0], lens, dense)
		at := 0
		for f := 0; f < F; f++ {
			in := &b.Inputs[f]
			if !b.fits(in, lens[f], 0) {
				return 0, b.overLimit("synthetic source", s.cfg.Fields[f].Name, in, lens[f], 0)
			}
			in.Ints = append(in.Ints, s.ids[at:at+int(lens[f])]...)
			in.Lengths = append(in.Lengths, lens[f])
			at += int(lens[f])
		}
		for _, d := range dense {
			b.Dense = append(b.Dense, float32(d))
		}
		p := 0.25
		if s.cfg.Label != nil {
			p = 1 / (1 + math.Exp(-logit))
		}
		label := float32(0)
		if u < p {
			label = 1
		}
		b.Labels = append(b.Labels, label)
		b.Size++
	}
	if b.Size == 0 {
		return 0, io.EOF
	}
	return b.Size, nil
}

// Position is the global index of the next sample.
func (s *Synthetic) Position() Position {
	return Position{Row: s.next, Global: s.next, Offset: -1}
}

// Seek continues at a position's sample index.
func (s *Synthetic) Seek(p Position) error {
	if p.Global < 0 || p.Global > s.cfg.Samples {
		return errs.Invalidf("synthetic: position %d outside [0, %d]", p.Global, s.cfg.Samples)
	}
	s.next = p.Global
	return nil
}

// Close ends the source.
func (s *Synthetic) Close() error {
	s.closed = true
	return nil
}
