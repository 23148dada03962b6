package embedding

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
)

// setup is a random collection and batch with a float64 brute-force reference.
type setup struct {
	c     *Collection
	b     Batch
	B     int
	seg   [][]int64 // per collection feature f and sample: ids (row f*B+b)
	segW  [][]float32
	perm  []int64
	rng   *rand.Rand
	fixed bool
}

func newSetup(t *testing.T, seed uint64, weighted bool, opt OptimizerConfig, o ...Options) *setup {
	r := rand.New(rand.NewPCG(seed, 99))
	nt := 1 + r.IntN(3)
	var tables []*Table
	for i := 0; i < nt; i++ {
		dim := []int{4, 16, 64, 19}[r.IntN(4)]
		tb, err := NewFixedTable(fmt.Sprintf("t%d", i), int64(5+r.IntN(40)), dim, opt)
		require.NoError(t, err)
		for j := range tb.Data {
			tb.Data[j] = float32(r.NormFloat64())
		}
		tables = append(tables, tb)
	}
	var feats []Feature
	for f := 0; f < nt+r.IntN(3); f++ {
		feats = append(feats, Feature{Name: fmt.Sprintf("f%d", f), Table: f % nt, Pooling: Pooling(r.IntN(2))})
	}
	var opts Options
	if len(o) > 0 {
		opts = o[0]
	}
	c, err := NewCollectionWithOptions(tables, feats, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	s := &setup{c: c, B: 1 + r.IntN(6), rng: r}
	F := len(feats)
	s.perm = make([]int64, F)
	for i, p := range r.Perm(F) {
		s.perm[i] = int64(p)
	}
	s.seg = make([][]int64, F*s.B)
	s.segW = make([][]float32, F*s.B)
	for k := 0; k < F; k++ {
		f := int(s.perm[k])
		rows := tables[feats[f].Table].Rows()
		for bi := 0; bi < s.B; bi++ {
			n := r.IntN(5) // includes empty bags
			for j := 0; j < n; j++ {
				id := r.Int64N(min(rows, 6)) // duplicates likely
				s.seg[f*s.B+bi] = append(s.seg[f*s.B+bi], id)
				s.b.Values = append(s.b.Values, id)
				w := float32(r.Float64() + 0.5)
				s.segW[f*s.B+bi] = append(s.segW[f*s.B+bi], w)
				s.b.Weights = append(s.b.Weights, w)
			}
			s.b.Lengths = append(s.b.Lengths, int64(n))
		}
	}
	if !weighted {
		s.b.Weights = nil
		for i := range s.segW {
			s.segW[i] = nil
		}
	}
	s.b.KeyFeature = s.perm
	return s
}

func (s *setup) scale(f, bi, j int) float64 {
	w := 1.0
	if s.segW[f*s.B+bi] != nil {
		w = float64(s.segW[f*s.B+bi][j])
	}
	if s.c.Features[f].Pooling == PoolMean {
		w /= float64(len(s.seg[f*s.B+bi]))
	}
	return w
}

func (s *setup) refForward() []float64 {
	out := make([]float64, s.B*s.c.Width())
	for f, ft := range s.c.Features {
		t := s.c.Tables[ft.Table]
		for bi := 0; bi < s.B; bi++ {
			for j, id := range s.seg[f*s.B+bi] {
				for d, x := range t.Row(id) {
					out[bi*s.c.Width()+s.c.ColumnOffset(f)+d] += s.scale(f, bi, j) * float64(x)
				}
			}
		}
	}
	return out
}

// refGrads returns, per table, row → gradient.
func (s *setup) refGrads(gradOut []float32) []map[int64][]float64 {
	g := make([]map[int64][]float64, len(s.c.Tables))
	for i := range g {
		g[i] = map[int64][]float64{}
	}
	for f, ft := range s.c.Features {
		dim := s.c.Tables[ft.Table].Dim
		for bi := 0; bi < s.B; bi++ {
			for j, id := range s.seg[f*s.B+bi] {
				if g[ft.Table][id] == nil {
					g[ft.Table][id] = make([]float64, dim)
				}
				for d := 0; d < dim; d++ {
					g[ft.Table][id][d] += s.scale(f, bi, j) * float64(gradOut[bi*s.c.Width()+s.c.ColumnOffset(f)+d])
				}
			}
		}
	}
	return g
}

func close32(t *testing.T, want float64, got float32, msg string) {
	t.Helper()
	require.InDelta(t, want, float64(got), 1e-5*(1+math.Abs(want)), msg)
}

// bothPaths runs body with the collection options that force each backward path (sample-order
// scatter, grouped by row) and each pooling order (sample-major, feature-major), on top of base.
func bothPaths(t *testing.T, base Options, body func(t *testing.T, o Options)) {
	for _, p := range []struct {
		name  string
		path  BackwardPath
		order PoolOrder
	}{
		{"scatter_by_sample", BackwardScatter, PoolSampleMajor}, {"grouped_by_sample", BackwardGrouped, PoolSampleMajor},
		{"scatter_by_feature", BackwardScatter, PoolFeatureMajor}, {"grouped_by_feature", BackwardGrouped, PoolFeatureMajor},
	} {
		t.Run(p.name, func(t *testing.T) {
			o := base
			o.BackwardPath, o.PoolOrder = p.path, p.order
			body(t, o)
		})
	}
}

func TestForwardBackwardMatchesBruteForce(t *testing.T) {
	bothPaths(t, Options{}, func(t *testing.T, o Options) {
		for seed := uint64(0); seed < 40; seed++ {
			for _, weighted := range []bool{false, true} {
				t.Run(fmt.Sprintf("seed%d_w%v", seed, weighted), func(t *testing.T) {
					checkStep(t, newSetup(t, seed, weighted, OptimizerConfig{Kind: OptNone}, o))
				})
			}
		}
	})
}

func TestLargeFixedTablesDedupWithAMap(t *testing.T) {
	// Fixed tables past the slot-array bound deduplicate with a hash map but still pool straight
	// from their IDs; the results must not change, and out-of-range IDs must still fail.
	mapOnly := Options{DenseDedupMaxRows: -1}
	bothPaths(t, mapOnly, func(t *testing.T, o Options) {
		for seed := uint64(0); seed < 10; seed++ {
			checkStep(t, newSetup(t, seed, seed%2 == 0, OptimizerConfig{Kind: OptNone}, o))
		}
	})
	s := newSetup(t, 1, false, OptimizerConfig{Kind: OptNone}, mapOnly)
	if len(s.b.Values) == 0 {
		t.Skip("empty batch")
	}
	s.b.Values[0] = 1 << 40
	_, err := s.c.Forward(s.b, make([]float32, s.B*s.c.Width()), true, true)
	require.ErrorContains(t, err, "out of range")
}

func TestPlanScatterFallsBackForOneDominantTable(t *testing.T) {
	// Two workers: a table past total/P falls back, so with P >= 3 even the balanced pair (each half
	// the lookups) would (the test failed on machines of 3 or more cores).
	if prev := parallel.Workers(); prev > 1 {
		parallel.SetWorkers(2)
		defer parallel.SetWorkers(prev)
	}
	big, err := NewFixedTable("big", 100, 4, OptimizerConfig{Kind: OptSGD, LR: 0.1})
	require.NoError(t, err)
	small, err := NewFixedTable("small", 100, 4, OptimizerConfig{Kind: OptSGD, LR: 0.1})
	require.NoError(t, err)
	c, err := NewCollection([]*Table{big, small}, []Feature{{Name: "a", Table: 0}, {Name: "b", Table: 1}})
	require.NoError(t, err)
	defer c.Close()
	batch := func(na, nb int) Batch {
		b := Batch{KeyFeature: []int64{0, 1}, Lengths: []int64{int64(na), int64(nb)}}
		for i := 0; i < na+nb; i++ {
			b.Values = append(b.Values, int64(i%100))
		}
		return b
	}
	cases := []struct {
		name        string
		na, nb      int
		wantScatter bool
	}{
		{"balanced", 50, 50, true},
		{"one table holds most lookups", 90, 10, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, err := c.Forward(batch(tc.na, tc.nb), make([]float32, c.Width()), true, true)
			require.NoError(t, err)
			defer c.Release(ctx)
			if parallel.Workers() == 1 {
				require.True(t, ctx.scatter, "one worker always scatters")
				return
			}
			require.Equal(t, tc.wantScatter, ctx.scatter)
		})
	}
}

// checkStep runs forward and gradient backward on s and compares both with the brute force.
func checkStep(t *testing.T, s *setup) *Context {
	out := make([]float32, s.B*s.c.Width())
	ctx, err := s.c.Forward(s.b, out, true, true)
	require.NoError(t, err)
	for i, w := range s.refForward() {
		close32(t, w, out[i], fmt.Sprintf("out[%d]", i))
	}
	gradOut := make([]float32, len(out))
	for i := range gradOut {
		gradOut[i] = float32(s.rng.NormFloat64())
	}
	rows, vals := make([][]int64, len(s.c.Tables)), make([][]float32, len(s.c.Tables))
	for i, tb := range s.c.Tables {
		rows[i], vals[i] = make([]int64, ctx.Unique(i)), make([]float32, ctx.Unique(i)*tb.Dim)
	}
	require.NoError(t, s.c.Backward(ctx, gradOut, rows, vals))
	ref := s.refGrads(gradOut)
	for i, tb := range s.c.Tables {
		require.Len(t, ref[i], ctx.Unique(i), "distinct rows of %s", tb.Name)
		for u := 0; u < ctx.Unique(i); u++ {
			want := ref[i][rows[i][u]]
			require.NotNil(t, want, "row %d of %s", rows[i][u], tb.Name)
			for d := range want {
				close32(t, want[d], vals[i][u*tb.Dim+d], "grad")
			}
		}
	}
	return ctx
}

func TestReleasedContextsAreReusedCorrectly(t *testing.T) {
	for _, seed := range []uint64{3, 4, 5} {
		a := newSetup(t, seed, true, OptimizerConfig{Kind: OptNone})
		b := newSetup(t, seed+100, false, OptimizerConfig{Kind: OptNone})
		for round := 0; round < 3; round++ {
			for _, x := range []*setup{a, b} {
				x.c.Release(checkStep(t, x))
				// a pooled context also serves forwards that keep nothing
				_, err := x.c.Forward(x.b, make([]float32, x.B*x.c.Width()), false, false)
				require.NoError(t, err)
			}
		}
	}
}

func TestConcurrentForwards(t *testing.T) {
	s := newSetup(t, 11, true, OptimizerConfig{Kind: OptNone})
	want := s.refForward()
	var wg sync.WaitGroup
	errCh := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				out := make([]float32, s.B*s.c.Width())
				ctx, err := s.c.Forward(s.b, out, true, i%2 == 0)
				if err != nil {
					errCh <- err
					return
				}
				s.c.Release(ctx)
				for k, w := range want {
					if math.Abs(w-float64(out[k])) > 1e-5*(1+math.Abs(w)) {
						errCh <- fmt.Errorf("out[%d] = %g, want %g", k, out[k], w)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errCh)
	for err := range errCh {
		require.NoError(t, err)
	}
}

func TestFusedSGDAppliesMergedGradient(t *testing.T) { bothPaths(t, Options{}, testFusedSGD) }

func testFusedSGD(t *testing.T, o Options) {
	s := newSetup(t, 7, true, OptimizerConfig{Kind: OptSGD, LR: 0.1}, o)
	before := make([][]float32, len(s.c.Tables))
	for i, tb := range s.c.Tables {
		before[i] = append([]float32(nil), tb.Data...)
	}
	out := make([]float32, s.B*s.c.Width())
	ctx, err := s.c.Forward(s.b, out, true, true)
	require.NoError(t, err)
	gradOut := make([]float32, len(out))
	for i := range gradOut {
		gradOut[i] = float32(i%7) - 3
	}
	require.NoError(t, s.c.Backward(ctx, gradOut, nil, nil))
	ref := s.refGrads(gradOut)
	for i, tb := range s.c.Tables {
		require.Equal(t, int64(1), tb.Step[0])
		for r := int64(0); r < tb.Rows(); r++ {
			for d := 0; d < tb.Dim; d++ {
				want := float64(before[i][r*int64(tb.Stride)+int64(d)])
				if g := ref[i][r]; g != nil {
					want -= 0.1 * g[d]
				}
				close32(t, want, tb.Row(r)[d], "weight")
			}
		}
	}
}

// mapSource resolves only the IDs it knows, like a dynamic table in eval mode.
type mapSource map[int64]int64

func (m mapSource) Resolve(ids, rows []int64, train bool) error {
	for i, id := range ids {
		r, ok := m[id]
		if !ok {
			r = -1
		}
		rows[i] = r
	}
	return nil
}

// newMapTable is a 3-row table (stride 8, dim 5, values 0…23 in row order) whose IDs 1000 and 7 map
// to rows 2 and 0 through a mapSource, and every other ID to no row; row-wise Adagrad.
func newMapTable(t *testing.T) *Table {
	data := make([]float32, 3*8)
	for i := range data {
		data[i] = float32(i)
	}
	tb, err := NewTable(TableSpec{Name: "dyn", Source: mapSource{1000: 2, 7: 0}, Data: data, Stride: 8, Dim: 5,
		State: make([]float32, 3), Opt: OptimizerConfig{Kind: OptRowwiseAdagrad, LR: 0.1, Eps: 1e-8}})
	require.NoError(t, err)
	return tb
}

func TestCustomRowSourceWithStride(t *testing.T) {
	tb := newMapTable(t)
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0, Pooling: PoolSum}})
	require.NoError(t, err)
	out := make([]float32, 10)
	ctx, err := c.Forward(Batch{KeyFeature: []int64{0}, Values: []int64{1000, 5, 7, 1000}, Lengths: []int64{2, 2}}, out, true, true)
	require.NoError(t, err)
	require.Equal(t, []float32{16, 17, 18, 19, 20, 16, 18, 20, 22, 24}, out)
	require.Equal(t, 3, ctx.Unique(0))
	require.Equal(t, 4, ctx.Lookups(0))
	require.NoError(t, c.Backward(ctx, make([]float32, 10), nil, nil))
	require.Equal(t, float32(5), tb.Data[5], "padding untouched")
	require.NoError(t, tb.ResetRows([]int64{2}, func(r int64, w []float32) { w[0] = 1 }))
	require.Equal(t, []float32{1, 0, 0, 0, 0}, tb.Row(2))
}

func TestRangeSourceThroughMapDedup(t *testing.T) {
	// A RangeSource narrower than its storage takes the hash-map dedup path; Resolve still range-checks.
	data := make([]float32, 10*2)
	for i := range data {
		data[i] = float32(i)
	}
	tb, err := NewTable(TableSpec{Name: "narrow", Source: RangeSource{Table: "narrow", Rows: 5}, Data: data, Stride: 2, Dim: 2})
	require.NoError(t, err)
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0, Pooling: PoolMean}})
	require.NoError(t, err)
	defer c.Close()
	out := make([]float32, 4)
	for round := 0; round < 2; round++ { // the reused map must start empty
		_, err = c.Forward(Batch{KeyFeature: []int64{0}, Values: []int64{4, 1, 4}, Lengths: []int64{1, 2}}, out, true, false)
		require.NoError(t, err)
		require.Equal(t, []float32{8, 9, 5, 6}, out)
	}
	_, err = c.Forward(Batch{KeyFeature: []int64{0}, Values: []int64{5}, Lengths: []int64{1, 0}}, out, true, false)
	require.ErrorContains(t, err, `table "narrow": id 5 out of range [0, 5)`)
}

func FuzzValidateBatch(f *testing.F) {
	f.Add([]byte{2, 0, 1, 3, 1, 2, 0, 5, 9})
	f.Add([]byte{1, 0, 200, 1, 1})
	tb, err := NewFixedTable("fz", 16, 3, OptimizerConfig{Kind: OptSGD, LR: 0.5})
	require.NoError(f, err)
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "a", Table: 0}, {Name: "b", Table: 0, Pooling: PoolMean}})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		nk, nl := int(data[0]%4), int(data[1]%9)
		data = data[2:]
		take := func() int64 {
			if len(data) == 0 {
				return 0
			}
			v := int64(int8(data[0]))
			data = data[1:]
			return v
		}
		var b Batch
		for i := 0; i < nk; i++ {
			b.KeyFeature = append(b.KeyFeature, take()%3)
		}
		for i := 0; i < nl; i++ {
			b.Lengths = append(b.Lengths, take()%4)
		}
		for len(data) > 0 {
			b.Values = append(b.Values, take()%20)
		}
		if len(b.Values)%2 == 1 {
			b.Weights = make([]float32, len(b.Values))
		}
		B, err := ValidateBatch(b, 2)
		if err != nil {
			require.True(t, errors.Is(err, errs.ErrInvalid))
			return
		}
		out := make([]float32, B*c.Width())
		ctx, err := c.Forward(b, out, true, true)
		if err != nil {
			require.ErrorContains(t, err, "out of range")
			return
		}
		require.NoError(t, c.Backward(ctx, out, nil, nil))
	})
}

func Example() {
	users, _ := NewFixedTable("users", 100, 4, OptimizerConfig{Kind: OptSGD, LR: 0.5})
	copy(users.Row(7), []float32{1, 2, 3, 4})
	c, _ := NewCollection([]*Table{users}, []Feature{{Name: "user_id", Table: 0, Pooling: PoolSum}})
	defer c.Close()
	// One feature, batch of two: sample 0 looks up id 7 twice, sample 1 nothing.
	out := make([]float32, 2*c.Width())
	ctx, _ := c.Forward(Batch{KeyFeature: []int64{0}, Values: []int64{7, 7}, Lengths: []int64{2, 0}}, out, true, true)
	fmt.Println(out, ctx.Unique(0))
	grad := []float32{1, 1, 1, 1, 0, 0, 0, 0}
	_ = c.Backward(ctx, grad, nil, nil) // fused SGD: row 7 -= 0.5 · (1+1)
	fmt.Println(users.Row(7))
	// Output:
	// [2 4 6 8 0 0 0 0] 1
	// [0 1 2 3]
}

func FuzzOptimizerConfig(f *testing.F) {
	f.Add(int8(4), 0.01, 1e-8, 0.9, 0.999, 0.0)
	f.Add(int8(3), -1.0, 0.0, 1.0, 2.0, -1.0)
	f.Fuzz(func(t *testing.T, kind int8, lr, eps, b1, b2, wd float64) {
		opt := OptimizerConfig{Kind: OptimizerKind(kind), LR: lr, Eps: eps, Beta1: b1, Beta2: b2, WeightDecay: wd}
		tb, err := NewFixedTable("fz", 3, 4, opt)
		if err != nil {
			require.True(t, errors.Is(err, errs.ErrInvalid), "%v", err)
			require.Error(t, opt.Validate())
			return
		}
		defer tb.Close()
		require.NoError(t, opt.Validate())
		require.Len(t, tb.State, 3*opt.StateWidth(4))
		c, err := NewCollection([]*Table{tb}, []Feature{{Name: "a", Table: 0}})
		require.NoError(t, err)
		out := make([]float32, 4)
		ctx, err := c.Forward(Batch{KeyFeature: []int64{0}, Values: []int64{1, 1}, Lengths: []int64{2}}, out, true, true)
		require.NoError(t, err)
		err = c.Backward(ctx, []float32{1, -1, 0.5, 0}, nil, nil)
		if opt.Kind == OptNone {
			require.ErrorContains(t, err, "no fused optimizer")
		} else {
			require.NoError(t, err)
		}
	})
}

// TestForwardWithoutContextMatches: a forward that keeps no context (fixed tables skip
// deduplication) pools exactly what a keeping forward pools, and rejects the same out-of-range ID.
func TestForwardWithoutContextMatches(t *testing.T) {
	bothPaths(t, Options{}, testForwardWithoutContext)
}

func testForwardWithoutContext(t *testing.T, o Options) {
	for seed := uint64(0); seed < 40; seed++ {
		s := newSetup(t, seed, seed%2 == 0, OptimizerConfig{Kind: OptSGD, LR: 0.1}, o)
		want := make([]float32, s.B*s.c.Width())
		ctx, err := s.c.Forward(s.b, want, true, true)
		require.NoError(t, err)
		s.c.Release(ctx)
		got := make([]float32, len(want))
		for i := range got {
			got[i] = float32(math.NaN())
		}
		_, err = s.c.Forward(s.b, got, false, false)
		require.NoError(t, err)
		require.Equal(t, want, got, "seed %d", seed)
		if len(s.b.Values) == 0 {
			continue
		}
		bad := s.b
		bad.Values = append([]int64(nil), s.b.Values...)
		bad.Values[len(bad.Values)-1] = 1 << 40
		_, errKeep := s.c.Forward(bad, got, true, true)
		_, errNoKeep := s.c.Forward(bad, got, true, false)
		require.Error(t, errKeep)
		require.Equal(t, errKeep.Error(), errNoKeep.Error(), "seed %d", seed)
	}
}
