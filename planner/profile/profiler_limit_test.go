package profile

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// specsOf is n tables of rows rows each.
func specsOf(n int, rows int64) []Spec {
	specs := make([]Spec, n)
	for i := range specs {
		specs[i] = Spec{Name: fmt.Sprintf("t%d", i), Rows: rows, Dim: 8, ElemBytes: 4}
	}
	return specs
}

// A profiler allocated a dense count array for every table up to denseLimit rows with no limit on
// their total: two thousand specs of denseLimit rows died out of memory. The dense tables' memory,
// with the ranking a profile makes of them, is now checked against the planner's memory limit first.
func TestProfilerDenseCountsAreBounded(t *testing.T) {
	atLimit := int(MemoryLimit / (denseLimit * bytesPerDenseRow)) // tables of denseLimit rows the limit holds
	cases := []struct {
		name  string
		specs []Spec
		want  string // the capacity error's words; "": accepted
	}{
		{"at the limit", specsOf(atLimit, denseLimit), ""},
		{"one table past the limit", specsOf(atLimit+1, denseLimit),
			fmt.Sprintf("profile: %d tables counted densely (%d rows in all, the largest %d) would need %d bytes",
				atLimit+1, int64(atLimit+1)*denseLimit, denseLimit, int64(atLimit+1)*denseLimit*bytesPerDenseRow)},
		{"the reported specs", specsOf(2000, 1<<18), "profile: 2000 tables counted densely (524288000 rows in all, " +
			"the largest 262144) would need 20971520000 bytes (19.5 GiB: 40 bytes a row for its count and its ranking), " +
			"over the planner's memory limit of 8589934592 bytes (8.0 GiB); profile fewer tables at once"},
		{"tables counted in maps", specsOf(4000, denseLimit+1), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkDense(c.specs, MemoryLimit)
			if c.want == "" {
				require.NoError(t, err) // (not built: the dense counts at the limit take gigabytes)
				return
			}
			require.ErrorIs(t, err, errs.ErrCapacity)
			assert.ErrorContains(t, err, c.want)
			p, err := NewProfiler(c.specs, 1, 0, 4)
			assert.Nil(t, p)
			require.ErrorIs(t, err, errs.ErrCapacity)
			assert.ErrorContains(t, err, c.want)
		})
	}
	// Tables counted in maps allocate nothing up front: many of them build.
	p, err := NewProfiler(specsOf(4000, denseLimit+1), 1, 0, 4)
	require.NoError(t, err)
	assert.NotNil(t, p)
}
