package feature

import (
	"fmt"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func crossSpec(maxValues int64) *Spec {
	return &Spec{MaxValues: maxValues, Features: []FeatureSpec{
		{Name: "a", Output: ptr(false)},
		{Name: "b", Output: ptr(false)},
		{Name: "ab", Ops: []OpSpec{{Op: "cross", Fields: []string{"a", "b"}}}},
	}}
}

func bag(n int) Input {
	in := Input{Kind: KindInt64, Ints: make([]int64, n), Lengths: []int64{int64(n)}}
	for i := range in.Ints {
		in.Ints[i] = int64(i)
	}
	return in
}

// TestCrossOverLimitIsACapacityError: two bags of 60,000 IDs ask for 3.6e9 crossed values; the
// engine refuses before allocating, naming the feature and the size.
func TestCrossOverLimitIsACapacityError(t *testing.T) {
	eng, err := Compile(crossSpec(0))
	require.NoError(t, err)
	assert.Equal(t, int64(DefaultMaxValues), eng.MaxValues())
	_, err = eng.Apply(Batch{Size: 1, Inputs: []Input{bag(60000), bag(60000)}})
	require.Error(t, err)
	assert.ErrorIs(t, err, errs.ErrCapacity)
	assert.Contains(t, err.Error(), `feature "ab": cross would produce more than 268435456 values`)
	assert.Contains(t, err.Error(), "max_values")

	// Eight fields of 300 IDs: the product (6.6e19) overflows int64; still a clean error.
	many := &Spec{Features: []FeatureSpec{{Name: "a"}, {Name: "x", Ops: []OpSpec{{Op: "cross", Fields: []string{"a", "a", "a", "a", "a", "a", "a", "a"}}}}}}
	eng, err = Compile(many)
	require.NoError(t, err)
	_, err = eng.Apply(Batch{Size: 1, Inputs: []Input{bag(300)}})
	assert.ErrorIs(t, err, errs.ErrCapacity)
}

func TestMaxValuesIsConfigurable(t *testing.T) {
	small, err := Compile(crossSpec(99))
	require.NoError(t, err)
	b := Batch{Size: 2, Inputs: []Input{
		{Kind: KindInt64, Ints: make([]int64, 15), Lengths: []int64{10, 5}},
		{Kind: KindInt64, Ints: make([]int64, 15), Lengths: []int64{10, 5}},
	}} // 100 + 25 values
	_, err = small.Apply(b)
	require.ErrorIs(t, err, errs.ErrCapacity)
	assert.Contains(t, err.Error(), "more than 99 values by sample 0 of the batch of 2 (limit 99")
	big, err := Compile(crossSpec(125 + 4)) // the cross and the output (125 values + 4 lengths) fit
	require.NoError(t, err)
	res, err := big.Apply(b)
	require.NoError(t, err)
	assert.Equal(t, 125, res.NumValues())
	out, err := res.Assemble()
	require.NoError(t, err)
	require.NoError(t, out.Close())
	tight, err := Compile(crossSpec(125)) // the output buffer needs 129 words
	require.NoError(t, err)
	res, err = tight.Apply(b)
	require.NoError(t, err)
	_, err = res.Assemble()
	assert.ErrorIs(t, err, errs.ErrCapacity)
	spec, err := ParseSpec([]byte(`{"max_values": 99, "features": [{"name": "a"}]}`))
	require.NoError(t, err)
	assert.Equal(t, int64(99), spec.MaxValues)
}

// TestFusedGroupOverLimit: the limit counts a whole fused group, not only one feature. (Bags of two,
// so that the group's lengths and offsets, 6 and 8 words, fit and its 12 values do not.)
func TestFusedGroupOverLimit(t *testing.T) {
	spec := &Spec{MaxValues: 10, Features: []FeatureSpec{
		{Name: "a", Ops: []OpSpec{{Op: "fill_missing"}}},
		{Name: "b", Ops: []OpSpec{{Op: "fill_missing"}}},
	}}
	eng, err := Compile(spec)
	require.NoError(t, err)
	pairs := Input{Kind: KindInt64, Ints: make([]int64, 6), Lengths: []int64{2, 2, 2}}
	_, err = eng.Apply(Batch{Size: 3, Inputs: []Input{pairs, pairs}})
	require.ErrorIs(t, err, errs.ErrCapacity)
	assert.Contains(t, err.Error(), "fused fill_missing group of 2 features: 12 values in all")
}

// TestElementwiseGroupOverLimit: element-wise groups (hash, bucketize, position, ...) and the copies
// a result makes of its batch were never checked against MaxValues; eight hashes of one input
// allocated eight times its size past the limit and Apply succeeded.
func TestElementwiseGroupOverLimit(t *testing.T) {
	fanOut := func(op OpSpec) *Spec {
		spec := &Spec{MaxValues: 1000}
		for i := range 8 {
			spec.Features = append(spec.Features, FeatureSpec{Name: fmt.Sprintf("f%d", i), Input: "a", Ops: []OpSpec{op}})
		}
		return spec
	}
	ints := func(n int) Input { return Input{Kind: KindInt64, Ints: make([]int64, n)} }
	cases := []struct {
		name  string
		spec  *Spec
		batch Batch
		want  string // "" means Apply succeeds
	}{
		{"hash fan-out", fanOut(OpSpec{Op: "hash"}), Batch{Size: 1000, Inputs: []Input{ints(1000)}},
			`fused hash group of 8 features: 8000 values in all by feature "f0" (the largest, 1000 values) would exceed the limit of 1000 values per buffer; raise max_values`},
		{"hash fan-out at the limit", fanOut(OpSpec{Op: "hash"}), Batch{Size: 125, Inputs: []Input{ints(125)}}, ""},
		{"position fan-out", fanOut(OpSpec{Op: "position"}),
			Batch{Size: 2, Inputs: []Input{{Kind: KindInt64, Ints: make([]int64, 200), Lengths: []int64{150, 50}}}},
			"fused position group of 8 features: 1600 values in all"},
		{"bucketize names the largest", &Spec{MaxValues: 1000, Features: []FeatureSpec{
			{Name: "small", DType: Float, Ops: []OpSpec{{Op: "bucketize", Boundaries: FloatNumbers(0)}}},
			{Name: "big", DType: Float, Ops: []OpSpec{{Op: "bucketize", Boundaries: FloatNumbers(0)}}},
		}}, Batch{Size: 1, Inputs: []Input{
			{Kind: KindFloat32, F32: make([]float32, 300), Lengths: []int64{300}},
			{Kind: KindFloat64, F64: make([]float64, 800), Lengths: []int64{800}},
		}}, `fused bucketize group of 2 features: 1100 values in all by feature "big" (the largest, 800 values)`},
		{"values written in place count", &Spec{MaxValues: 1000, Features: []FeatureSpec{
			{Name: "a", Ops: []OpSpec{{Op: "truncate", N: ptr(int64(1000))}, {Op: "hash"}}},
			{Name: "b", Ops: []OpSpec{{Op: "hash"}}},
		}}, Batch{Size: 600, Inputs: []Input{ints(600), ints(600)}}, "fused hash group of 2 features: 1200 values in all"},
		{"copied values", &Spec{MaxValues: 1000, Features: []FeatureSpec{{Name: "a"}}},
			Batch{Size: 1, Inputs: []Input{{Kind: KindInt64, Ints: make([]int64, 1500), Lengths: []int64{1500}}}},
			`feature "a": a copy of its 1500 values would exceed the limit of 1000 values per buffer`},
		{"copied lengths", &Spec{MaxValues: 1000, Features: []FeatureSpec{{Name: "a"}}},
			Batch{Size: 1500, Inputs: []Input{{Kind: KindInt64, Ints: []int64{}, Lengths: make([]int64, 1500)}}},
			`feature "a": a copy of its 1500 lengths would exceed`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			applyWithin(t, c.spec, c.batch, c.want, func(r *Result) { assert.Equal(t, 1000, r.NumValues()) })
		})
	}
}

func chainSpec(n int) *Spec {
	kinds := []OpSpec{{Op: "hash"}, {Op: "mod", N: ptr(int64(1 << 40))}, {Op: "truncate", N: ptr(int64(3))}, {Op: "fill_missing"}}
	fs := FeatureSpec{Name: "a"}
	for i := range n {
		fs.Ops = append(fs.Ops, kinds[i%len(kinds)])
	}
	return &Spec{Features: []FeatureSpec{fs, {Name: "b", Ops: kinds[:2]}}}
}

// TestPlannerWorkIsLinear checks the planner's step count (its rollouts included) on one long
// chain and on specs where every step is a real choice: it grows linearly with the op count.
func TestPlannerWorkIsLinear(t *testing.T) {
	work := func(spec *Spec) (int, Plan) {
		eng, err := Compile(spec)
		require.NoError(t, err)
		return eng.plan.work, eng.plan
	}
	w1, p1 := work(chainSpec(1000))
	w10, p10 := work(chainSpec(10000))
	assert.Equal(t, 1000, p1.CallsAfter, "a chain of distinct consecutive kinds: one group per op")
	assert.Equal(t, 10000, p10.CallsAfter)
	assert.LessOrEqual(t, w10, 12*w1, "work %d for 10,000 ops vs %d for 1,000", w10, w1)
	assert.LessOrEqual(t, w10, 8*10002)

	// Two chains in opposite orders: at every step both kinds are ready and neither is safe, so
	// the planner rolls out; its budget keeps the work linear.
	opposed := func(n int) *Spec {
		a, b := FeatureSpec{Name: "a"}, FeatureSpec{Name: "b"}
		for i := range n {
			a.Ops = append(a.Ops, []OpSpec{{Op: "hash"}, {Op: "truncate", N: ptr(int64(3))}}[i%2])
			b.Ops = append(b.Ops, []OpSpec{{Op: "truncate", N: ptr(int64(3))}, {Op: "hash"}}[i%2])
		}
		return &Spec{Features: []FeatureSpec{a, b}}
	}
	wa, pa := work(opposed(200))
	wb, pb := work(opposed(20000))
	assert.Equal(t, 201, pa.CallsAfter, "the optimum: one chain lags the other by one op")
	assert.LessOrEqual(t, pb.CallsAfter, 20000+20000)
	assert.LessOrEqual(t, wb, rolloutBudget+16*(40000+2)+8*(4*40000), "work %d (%d at n=200)", wb, wa)
}

func BenchmarkCompileChain10000(b *testing.B) {
	spec := chainSpec(10000)
	for b.Loop() {
		if _, err := Compile(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWeightsStayAligned follows per-ID weights through truncate, filter, fill_missing, position
// and a three-field cross, by hand.
func TestWeightsStayAligned(t *testing.T) {
	spec := &Spec{Features: []FeatureSpec{
		{Name: "h", Ops: []OpSpec{{Op: "filter", Values: IntNumbers(3)}, {Op: "truncate", N: ptr(int64(2)), Keep: ptr("last")}, {Op: "fill_missing", Default: ptr(int64(-1))}}},
		{Name: "p", Input: "h", Ops: []OpSpec{{Op: "position", From: ptr("last")}}},
		{Name: "u"},
		{Name: "x", Ops: []OpSpec{{Op: "cross", Fields: []string{"h", "u", "u"}}}},
	}}
	eng, err := Compile(spec)
	require.NoError(t, err)
	res, err := eng.Apply(Batch{Size: 2, Inputs: []Input{
		{Kind: KindInt64, Ints: []int64{1, 3, 2, 4, 3}, Lengths: []int64{4, 1}, Weights: []float32{0.5, 9, 2, 4, 9}},
		{Kind: KindInt64, Ints: []int64{7, 8}}, // u: dense, unweighted
	}})
	require.NoError(t, err)
	v, l, _ := res.Feature("h")
	w, _ := res.Weights("h")
	assert.Equal(t, []int64{2, 4, -1}, v)
	assert.Equal(t, []int64{2, 1}, l)
	assert.Equal(t, []float32{2, 4, 1}, w, "a filled value weighs 1")
	v, _, _ = res.Feature("p")
	w, _ = res.Weights("p")
	assert.Equal(t, []int64{3, 2, 1, 0, 0}, v)
	assert.Equal(t, []float32{0.5, 9, 2, 4, 9}, w)
	w, _ = res.Weights("u")
	assert.Nil(t, w)
	w, _ = res.Weights("x")
	assert.Equal(t, []float32{2, 4, 1}, w, "a crossed tuple weighs the product of its weighted fields")
	out, err := res.Assemble()
	require.NoError(t, err)
	assert.Equal(t, []float32{2, 4, 1, 0.5, 9, 2, 4, 9, 1, 1, 2, 4, 1}, out.Weights)
	require.NoError(t, out.Close())

	_, err = eng.Apply(Batch{Size: 2, Inputs: []Input{
		{Kind: KindInt64, Ints: []int64{1, 3}, Lengths: []int64{1, 1}, Weights: []float32{1}},
		{Kind: KindInt64, Ints: []int64{7, 8}},
	}})
	assert.ErrorIs(t, err, errs.ErrInvalid)
	assert.ErrorContains(t, err, "weights has 1 entries for 2 values")
}

func TestRecencyAndPosition(t *testing.T) {
	spec, err := ParseSpec([]byte(`{"features": [
	  {"name": "age", "input": "ts", "ops": [{"op": "truncate", "n": 3, "keep": "last"}, {"op": "recency", "reference": "now"},
	                                         {"op": "bucketize", "boundaries": [60, 3600]}]},
	  {"name": "pos", "input": "ts", "ops": [{"op": "position"}]}
	]}`))
	require.NoError(t, err)
	eng, err := Compile(spec)
	require.NoError(t, err)
	require.Equal(t, []InputInfo{{Name: "ts", DType: Int64}, {Name: "now", DType: Int64, Dense: true}}, eng.Inputs())
	ts := Input{Kind: KindInt64, Ints: []int64{0, 100, 9000, 9990, 5}, Lengths: []int64{4, 0, 1}}
	now := Input{Kind: KindInt64, Ints: []int64{10000, 1, 65}}
	res, err := eng.Apply(Batch{Size: 3, Inputs: []Input{ts, now}})
	require.NoError(t, err)
	v, l, _ := res.Feature("age")
	assert.Equal(t, []int64{2, 1, 0, 1}, v, "ages 9900, 1000, 10 and 60")
	assert.Equal(t, []int64{3, 0, 1}, l)
	v, _, _ = res.Feature("pos")
	assert.Equal(t, []int64{0, 1, 2, 3, 0}, v)
	now.Lengths = []int64{1, 2, 0}
	_, err = eng.Apply(Batch{Size: 3, Inputs: []Input{ts, now}})
	assert.ErrorIs(t, err, errs.ErrInvalid)
	assert.ErrorContains(t, err, `input "now": a recency reference needs one value per sample, but sample 1 has 2`)
}

func TestFilterOnFloatFields(t *testing.T) {
	spec := &Spec{Features: []FeatureSpec{{Name: "f", DType: Float, Ops: []OpSpec{
		{Op: "filter", Range: FloatNumbers(0, 1e3), Mode: ptr("keep")},
		{Op: "truncate", N: ptr(int64(2))},
		{Op: "bucketize", Boundaries: FloatNumbers(0.5, 10)},
	}}}}
	eng, err := Compile(spec)
	require.NoError(t, err)
	for _, in := range []Input{
		{Kind: KindFloat32, F32: []float32{-1, 0.25, 20, 7, 2000, 0.5}, Lengths: []int64{4, 2}},
		{Kind: KindFloat64, F64: []float64{-1, 0.25, 20, 7, 2000, 0.5}, Lengths: []int64{4, 2}},
	} {
		res, err := eng.Apply(Batch{Size: 2, Inputs: []Input{in}})
		require.NoError(t, err, fmt.Sprint(in.Kind))
		v, l, _ := res.Feature("f")
		assert.Equal(t, []int64{0, 2, 1}, v, in.Kind.String())
		assert.Equal(t, []int64{2, 1}, l, in.Kind.String())
	}
}

// applyWithin applies batch to spec's engine on two workers: with want "" it must succeed (ok then
// checks the result), otherwise fail with a capacity error containing want and no result.
func applyWithin(t *testing.T, spec *Spec, batch Batch, want string, ok func(*Result)) {
	eng, err := Compile(spec)
	require.NoError(t, err)
	res, err := eng.ApplyN(batch, 2)
	if want == "" {
		require.NoError(t, err)
		ok(res)
		res.Release()
		return
	}
	require.ErrorIs(t, err, errs.ErrCapacity)
	assert.Contains(t, err.Error(), want)
	assert.Nil(t, res)
}
