package profile

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomBatch makes a KJT-shaped batch over the given table sizes with skewed IDs.
func randomBatch(rng *rand.Rand, rows []int64, batch int) (lengths, values []int64) {
	for _, r := range rows {
		for b := 0; b < batch; b++ {
			l := int64(rng.IntN(4)) // 0..3 ids, some samples uncovered
			lengths = append(lengths, l)
			for k := int64(0); k < l; k++ {
				u := rng.Float64()
				values = append(values, int64(float64(r)*u*u*u)) // skewed toward low ids
			}
		}
	}
	return lengths, values
}

func TestProfilerMatchesDirectCount(t *testing.T) {
	specs := []Spec{{"a", 50, 8, 4}, {"b", 1000, 16, 4}, {"big", denseLimit + 10, 4, 2}}
	rows := []int64{50, 1000, denseLimit + 10}
	p, err := NewProfiler(specs, 1, 0, 8)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]map[int64]int, 3)
	covered, lookups := make([]int, 3), make([]int, 3)
	for i := range counts {
		counts[i] = map[int64]int{}
	}
	const batch, batches = 64, 5
	for range batches {
		lengths, values := randomBatch(rng, rows, batch)
		off := 0
		for i := range rows {
			for b := 0; b < batch; b++ {
				l := int(lengths[i*batch+b])
				if l > 0 {
					covered[i]++
					lookups[i] += l
				}
				for _, id := range values[off : off+l] {
					counts[i][id]++
				}
				off += l
			}
		}
		require.NoError(t, p.Add([]int{0, 1, 2}, batch, lengths, values))
	}
	prof, err := p.Profile()
	require.NoError(t, err)
	require.NoError(t, prof.Validate())
	for i, tab := range prof.Tables {
		assert.Equal(t, int64(batch*batches), tab.Samples)
		assert.InDelta(t, float64(covered[i])/float64(batch*batches), tab.Coverage, 1e-12)
		assert.InDelta(t, float64(lookups[i])/float64(covered[i]), tab.Pooling, 1e-12)
		assert.Equal(t, int64(len(counts[i])), tab.Touched)
		// Ranked: counts non-increasing, ties by id, every touched id once.
		sorted := make([]int, len(tab.Ranked))
		for k, id := range tab.Ranked {
			sorted[k] = counts[i][id]
			if k > 0 {
				prev := tab.Ranked[k-1]
				assert.True(t, counts[i][prev] > counts[i][id] || (counts[i][prev] == counts[i][id] && prev < id))
			}
		}
		// Every CDF point is the exact share of the hottest Rows rows.
		for _, pt := range tab.CDF {
			s := 0
			for _, c := range sorted[:pt.Rows] {
				s += c
			}
			assert.InDelta(t, float64(s)/float64(lookups[i]), pt.Frac, 1e-12)
		}
		// The level-q point is the fewest rows reaching q.
		for _, q := range Levels(8) {
			h := sort.Search(len(sorted), func(h int) bool {
				s := 0
				for _, c := range sorted[:h+1] {
					s += c
				}
				return float64(s) >= q*float64(lookups[i])-1e-9
			}) + 1
			found := false
			for _, pt := range tab.CDF {
				found = found || pt.Rows == int64(h)
			}
			assert.True(t, found, "table %s level %g: %d rows not a CDF step", tab.Name, q, h)
		}
	}
}

func TestSamplingRate(t *testing.T) {
	p, err := NewProfiler([]Spec{{"a", 10, 4, 4}}, 0.25, 42, 4)
	require.NoError(t, err)
	lengths := make([]int64, 4000)
	values := make([]int64, 4000)
	for i := range lengths {
		lengths[i] = 1
		values[i] = int64(i % 10)
	}
	require.NoError(t, p.Add([]int{0}, 4000, lengths, values))
	offered, kept := p.Samples()
	assert.Equal(t, int64(4000), offered)
	assert.InDelta(t, 1000, kept, 120)
	prof, err := p.Profile()
	require.NoError(t, err)
	assert.Equal(t, kept, prof.Tables[0].Lookups)
	assert.InDelta(t, 1.0, prof.Tables[0].Coverage, 1e-12)
}

func TestProfilerBadInput(t *testing.T) {
	specs := []Spec{{"a", 10, 4, 4}, {"b", 5, 4, 4}}
	tests := []struct {
		name    string
		tables  []int
		batch   int
		lengths []int64
		values  []int64
		match   string
	}{
		{"id range", []int{0}, 1, []int64{1}, []int64{10}, "outside [0, 10)"},
		{"negative id", []int{1}, 1, []int64{1}, []int64{-1}, "outside"},
		{"lengths count", []int{0, 1}, 2, []int64{1}, []int64{1}, "lengths for 2 keys"},
		{"lengths sum", []int{0}, 1, []int64{2}, []int64{1}, "sum to 2"},
		{"negative length", []int{0}, 1, []int64{-1}, nil, "negative length"},
		{"table index", []int{2}, 1, []int64{0}, nil, "maps to table 2"},
		{"duplicate table", []int{0, 0}, 1, []int64{0, 0}, nil, "two keys"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewProfiler(specs, 1, 0, 4)
			require.NoError(t, err)
			err = p.Add(tc.tables, tc.batch, tc.lengths, tc.values)
			assert.ErrorIs(t, err, errs.ErrInvalid)
			assert.ErrorContains(t, err, tc.match)
			_, err = p.Profile()
			assert.ErrorContains(t, err, "empty profile")
		})
	}
	for _, bad := range []struct {
		specs []Spec
		rate  float64
		steps int
	}{{nil, 1, 4}, {specs, 0, 4}, {specs, 1.5, 4}, {specs, 1, 0}, {[]Spec{{"a", 0, 4, 4}}, 1, 4},
		{[]Spec{{"a", 3, 4, 4}, {"a", 3, 4, 4}}, 1, 4}} {
		_, err := NewProfiler(bad.specs, bad.rate, 0, bad.steps)
		assert.ErrorIs(t, err, errs.ErrInvalid)
	}
}

func TestZipfMatchesExactSum(t *testing.T) {
	for _, tc := range []struct {
		touched int64
		alpha   float64
	}{{500, 1.1}, {300000, 0.8}, {300000, 1.0}, {300000, 1.4}} {
		tab := Zipf("z", tc.touched*2, 64, 4, 0.5, 3, tc.alpha, tc.touched, Levels(12))
		require.NoError(t, tab.Validate())
		prefix := make([]float64, tc.touched+1)
		for k := int64(1); k <= tc.touched; k++ {
			prefix[k] = prefix[k-1] + math.Pow(float64(k), -tc.alpha)
		}
		for _, pt := range tab.CDF {
			assert.InDelta(t, prefix[pt.Rows]/prefix[tc.touched], pt.Frac, 1e-6, "alpha %g rows %d", tc.alpha, pt.Rows)
		}
		for _, q := range Levels(12) {
			assert.GreaterOrEqual(t, tab.Frac(tab.CDF[len(tab.CDF)-1].Rows), q)
		}
	}
}

func TestFracInterpolates(t *testing.T) {
	tab := Table{Name: "t", Rows: 100, Dim: 1, ElemBytes: 4, Touched: 10, CDF: []Point{{0, 0}, {2, 0.5}, {10, 1}}}
	require.NoError(t, tab.Validate())
	for _, c := range []struct {
		h    int64
		want float64
	}{{0, 0}, {1, 0.25}, {2, 0.5}, {6, 0.75}, {10, 1}, {50, 1}, {-3, 0}} {
		assert.InDelta(t, c.want, tab.Frac(c.h), 1e-12, "h=%d", c.h)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	p, err := NewProfiler([]Spec{{"a", 10, 4, 4}, {"b", 7, 8, 2}}, 1, 0, 6)
	require.NoError(t, err)
	require.NoError(t, p.Add([]int{0, 1}, 3, []int64{1, 2, 0, 1, 1, 1}, []int64{3, 3, 4, 1, 6, 0}))
	prof, err := p.Profile()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "profile.json")
	require.NoError(t, prof.Save(path))
	back, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, prof, back)
	assert.Equal(t, []int64{3, 4}, back.Tables[0].Ranked)
	_, err = back.Table("zzz")
	assert.ErrorIs(t, err, errs.ErrNotFound)
	_, err = Load(filepath.Join(t.TempDir(), "missing.json"))
	assert.ErrorIs(t, err, errs.ErrIO)
}

func TestParseRejects(t *testing.T) {
	for name, js := range map[string]string{
		"syntax":    `{`,
		"version":   `{"version": 9, "tables": []}`,
		"empty":     `{"version": 1, "tables": []}`,
		"coverage":  `{"version": 1, "tables": [{"name":"a","rows":5,"dim":4,"elem_bytes":4,"coverage":2}]}`,
		"touched":   `{"version": 1, "tables": [{"name":"a","rows":5,"dim":4,"elem_bytes":4,"touched":9}]}`,
		"cdf order": `{"version": 1, "tables": [{"name":"a","rows":5,"dim":4,"elem_bytes":4,"touched":2,"cdf":[{"rows":0,"frac":0},{"rows":2,"frac":0.5},{"rows":1,"frac":1}]}]}`,
		"ranked":    `{"version": 1, "tables": [{"name":"a","rows":5,"dim":4,"elem_bytes":4,"touched":0,"ranked":"!!"}]}`,
		// counts and a rate no profiler writes (a negative lookup count read as a thin table's)
		"samples":     `{"version": 1, "tables": [{"name":"a","rows":5,"dim":4,"elem_bytes":4,"samples":-1}]}`,
		"lookups":     `{"version": 1, "tables": [{"name":"a","rows":5,"dim":4,"elem_bytes":4,"lookups":-1}]}`,
		"sample rate": `{"version": 1, "sample_rate": -1, "tables": [{"name":"a","rows":5,"dim":4,"elem_bytes":4}]}`,
		"rate past 1": `{"version": 1, "sample_rate": 1.5, "tables": [{"name":"a","rows":5,"dim":4,"elem_bytes":4}]}`,
	} {
		_, err := Parse([]byte(js))
		assert.ErrorIs(t, err, errs.ErrInvalid, name)
	}
}

// The touched rows take every access, so a CDF must end at share 1 (within rounding).
func TestValidateCDFEndsAtOne(t *testing.T) {
	tests := []struct {
		name    string
		touched int64
		cdf     []Point
		wantErr string
	}{
		{"ends at 1", 4, []Point{{}, {2, 0.7}, {4, 1}}, ""},
		{"rounding below 1", 4, []Point{{}, {2, 0.7}, {4, 1 - 1e-12}}, ""},
		{"ends at 0.5", 4, []Point{{}, {2, 0.3}, {4, 0.5}}, "not to (4, 0.5)"},
		{"ends at 0", 4, []Point{{}, {4, 0}}, "not to (4, 0)"},
		{"ends short of touched", 4, []Point{{}, {3, 1}}, "not to (3, 1)"},
		{"nothing touched", 0, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := Table{Name: "a", Rows: 100, Dim: 8, ElemBytes: 4, Coverage: 1, Pooling: 1, Touched: tc.touched, CDF: tc.cdf}
			err := tab.Validate()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, errs.ErrInvalid)
			assert.ErrorContains(t, err, `table "a": CDF must run from (0, 0) to (touched=4, 1), `+tc.wantErr)
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"version": 1, "tables": [{"name":"a","rows":5,"dim":4,"elem_bytes":4,"touched":2,"coverage":0.5,"pooling":2,"cdf":[{"rows":0,"frac":0},{"rows":2,"frac":1}],"ranked":"AQAAAAAAAAACAAAAAAAAAA=="}]}`))
	f.Add([]byte(`{"version": 1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		if !(p.SampleRate >= 0 && p.SampleRate <= 1) {
			t.Fatalf("sample rate %g taken", p.SampleRate)
		}
		for i := range p.Tables {
			tab := &p.Tables[i]
			if tab.Samples < 0 || tab.Lookups < 0 {
				t.Fatalf("table %q: negative counts taken (%d samples, %d lookups)", tab.Name, tab.Samples, tab.Lookups)
			}
			prev := 0.0
			for h := int64(0); h <= tab.Touched && h < 50; h++ {
				f := tab.Frac(h)
				if f < prev-1e-12 || f > 1+1e-9 {
					t.Fatalf("Frac not monotone in [0,1]: %g after %g", f, prev)
				}
				prev = f
			}
		}
	})
}

// A row read 2^32 times stays the hottest: counts were 32-bit and wrapped (the row ranked below one
// read 10 times, or, at exactly 2^32, dropped from the touched rows). The counts stand where 2^32
// reads would leave them (adding them one by one takes seconds), for a dense and a sparse table.
func TestCountsPastTwoToThe32(t *testing.T) {
	p, err := NewProfiler([]Spec{{Name: "dense", Rows: 100, Dim: 4, ElemBytes: 4},
		{Name: "sparse", Rows: denseLimit + 1, Dim: 4, ElemBytes: 4}}, 1, 0, 10)
	require.NoError(t, err)
	p.counts[0].dense[0] = math.MaxUint32
	p.counts[1].sparse[0] = math.MaxUint32
	ids := []int64{0}
	for range 10 {
		ids = append(ids, 1)
	}
	// one sample: key 0 (dense) and key 1 (sparse) each read row 0 once and row 1 ten times
	require.NoError(t, p.Add([]int{0, 1}, 1, []int64{11, 11}, append(append([]int64{}, ids...), ids...)))
	prof, err := p.Profile()
	require.NoError(t, err)
	for _, tab := range prof.Tables {
		assert.Equal(t, []int64{0, 1}, tab.Ranked, tab.Name)
		assert.Equal(t, int64(2), tab.Touched, tab.Name)
		found := false
		for _, pt := range tab.CDF {
			if pt.Rows == 1 { // the hottest row takes nearly every read
				found = true
				assert.Greater(t, pt.Frac, 0.99, tab.Name)
			}
		}
		assert.True(t, found, "%s: %v", tab.Name, tab.CDF)
	}
}
