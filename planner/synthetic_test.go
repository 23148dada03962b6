package planner

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func validSyntheticSpec() SyntheticSpec {
	return SyntheticSpec{Tables: 3, Dim: 8, ElemBytes: 4, TotalBytes: 1e6, MinRows: 10, MaxRows: 1000,
		Alphas: []float64{1}, Coverages: []float64{0.5}, Poolings: []float64{2}, TouchedMin: 0.5, Steps: 4, Seed: 1}
}

func TestSyntheticNamesTheBadField(t *testing.T) {
	for _, tc := range []struct {
		edit func(*SyntheticSpec)
		want string
	}{
		{func(s *SyntheticSpec) { s.Tables = 0 }, "synthetic: tables must be positive, got 0"},
		{func(s *SyntheticSpec) { s.Dim = -1 }, "synthetic: dim must be positive, got -1"},
		{func(s *SyntheticSpec) { s.MaxRows = 5 }, "synthetic: max_rows must be at least min_rows, got 5"},
		{func(s *SyntheticSpec) { s.Alphas = nil }, "synthetic: alphas must not be empty"},
		{func(s *SyntheticSpec) { s.TouchedMin = 1.5 }, "synthetic: touched_min must lie in (0, 1], got 1.5"},
		{func(s *SyntheticSpec) { s.Steps = 0 }, "synthetic: steps must be positive, got 0"},
	} {
		spec := validSyntheticSpec()
		tc.edit(&spec)
		_, err := Synthetic(spec)
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
	}
	p, err := Synthetic(validSyntheticSpec())
	require.NoError(t, err)
	assert.Len(t, p.Tables, 3)
}
