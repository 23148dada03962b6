package planner

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/profile"
)

// SyntheticSpec describes a RecShard-style synthetic model: many tables whose sizes, pooling,
// coverage and skew are spread as the paper describes, with exponents fitted to real samples.
type SyntheticSpec struct {
	Tables    int `json:"tables"`
	Dim       int `json:"dim"`
	ElemBytes int `json:"elem_bytes"`
	// TotalBytes scales the hash sizes (log-uniform between MinRows and MaxRows before scaling).
	TotalBytes float64 `json:"total_bytes"`
	MinRows    float64 `json:"min_rows"`
	MaxRows    float64 `json:"max_rows"`
	// Alphas are power-law exponents to draw each table's skew from (e.g. fitted per real column).
	Alphas []float64 `json:"alphas"`
	// Coverages are per-table coverages to draw from; Poolings pooling factors to draw from.
	Coverages []float64 `json:"coverages"`
	Poolings  []float64 `json:"poolings"`
	// TouchedMin..1 is the range of the share of rows ever accessed.
	TouchedMin float64 `json:"touched_min"`
	Steps      int     `json:"steps"`
	Seed       uint64  `json:"seed"`
}

// check names the first field of the spec that is missing or out of range.
func (spec SyntheticSpec) check() error {
	bad := []struct {
		wrong bool
		what  string
		value any
	}{
		{spec.Tables <= 0, "tables must be positive", spec.Tables},
		{spec.Dim <= 0, "dim must be positive", spec.Dim},
		{spec.ElemBytes <= 0, "elem_bytes must be positive", spec.ElemBytes},
		{!(spec.TotalBytes > 0), "total_bytes must be positive", spec.TotalBytes},
		{!(spec.MinRows >= 1), "min_rows must be at least 1", spec.MinRows},
		{!(spec.MaxRows >= spec.MinRows), "max_rows must be at least min_rows", spec.MaxRows},
		{len(spec.Alphas) == 0, "alphas must not be empty", spec.Alphas},
		{len(spec.Coverages) == 0, "coverages must not be empty", spec.Coverages},
		{len(spec.Poolings) == 0, "poolings must not be empty", spec.Poolings},
		{spec.Steps <= 0, "steps must be positive", spec.Steps},
		{!(spec.TouchedMin > 0 && spec.TouchedMin <= 1), "touched_min must lie in (0, 1]", spec.TouchedMin},
	}
	for _, b := range bad {
		if b.wrong {
			return errs.Invalidf("synthetic: %s, got %v", b.what, b.value)
		}
	}
	return nil
}

// Synthetic builds the profile of a synthetic model from spec.
func Synthetic(spec SyntheticSpec) (*profile.Profile, error) {
	if err := spec.check(); err != nil {
		return nil, err
	}
	if spec.Tables > 1<<16 || spec.MaxRows > 1<<50 {
		return nil, errs.Capacityf("synthetic: %d tables of up to %g rows is past the generator's bounds (%d tables, 2^50 rows)",
			spec.Tables, spec.MaxRows, 1<<16)
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 0x5eed))
	raw := make([]float64, spec.Tables)
	sum := 0.0
	for i := range raw {
		raw[i] = math.Exp(math.Log(spec.MinRows) + rng.Float64()*(math.Log(spec.MaxRows)-math.Log(spec.MinRows)))
		sum += raw[i]
	}
	scale := spec.TotalBytes / (sum * float64(spec.Dim*spec.ElemBytes))
	levels := profile.Levels(spec.Steps)
	prof := &profile.Profile{Version: profile.Version, SampleRate: 1}
	for i := range raw {
		rows := max(1, int64(raw[i]*scale))
		alpha := spec.Alphas[rng.IntN(len(spec.Alphas))]
		cov := spec.Coverages[rng.IntN(len(spec.Coverages))]
		pool := spec.Poolings[rng.IntN(len(spec.Poolings))]
		touched := int64(float64(rows) * (spec.TouchedMin + (1-spec.TouchedMin)*rng.Float64()))
		prof.Tables = append(prof.Tables, profile.Zipf(fmt.Sprintf("t%03d", i), rows, spec.Dim,
			spec.ElemBytes, cov, pool, alpha, touched, levels))
	}
	return prof, prof.Validate()
}
