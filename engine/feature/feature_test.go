package feature

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

func TestApplyMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for trial := range 60 {
		spec, batch, named := randomCase(r, 1+r.IntN(12), r.IntN(40))
		eng, err := Compile(spec)
		require.NoError(t, err, "trial %d", trial)
		for _, in := range eng.Inputs() {
			batch.Inputs = append(batch.Inputs, named[in.Name])
		}
		res, err := eng.Apply(batch)
		require.NoError(t, err, "trial %d", trial)
		spec.Unfused = true
		unfused, err := Compile(spec)
		require.NoError(t, err)
		require.Equal(t, unfused.Plan().CallsBefore, unfused.Plan().CallsAfter)
		res2, err := unfused.Apply(batch)
		require.NoError(t, err)
		require.Equal(t, res.vals, res2.vals, "trial %d: fused and unfused differ", trial)
		ref := &naive{spec: spec, batch: named, size: batch.Size, memo: map[string]naiveFeature{}}
		for _, key := range res.Keys() {
			vals, lens, err := res.Feature(key)
			require.NoError(t, err)
			wts, err := res.Weights(key)
			require.NoError(t, err)
			want := ref.feature(key)
			wantVals, wantLens, wantW := []int64{}, []int64{}, []float32{}
			for _, bag := range want.bags {
				for _, e := range bag {
					wantVals = append(wantVals, e.i)
					wantW = append(wantW, e.w)
				}
				wantLens = append(wantLens, int64(len(bag)))
			}
			assert.Equal(t, wantVals, append([]int64{}, vals...), "trial %d feature %s", trial, key)
			assert.Equal(t, wantLens, append([]int64{}, lens...), "trial %d feature %s", trial, key)
			if assert.Equal(t, want.weighted, wts != nil, "trial %d feature %s: weighted", trial, key) && wts != nil {
				assert.Equal(t, wantW, append([]float32{}, wts...), "trial %d feature %s: weights", trial, key)
			}
		}
		values := make([]int64, res.NumValues())
		lengths := make([]int64, len(res.Keys())*res.Size())
		require.NoError(t, res.CopyTo(values, lengths))
		out, err := res.Assemble()
		require.NoError(t, err)
		assert.Equal(t, values, out.Values)
		assert.Equal(t, lengths, out.Lengths)
		require.NoError(t, out.Close())
		res = res2
		res2, err = unfused.Apply(batch)
		require.NoError(t, err)
		// Recycle the buffers: later trials run on reused, dirty memory, so a transform that
		// leaves part of its output unwritten shows up as a mismatch.
		res.Release()
		res2.Release()
		for i := range values {
			values[i] = -12345
		}
	}
}

// TestTilesSpanFields runs groups large enough to be cut into several tiles, with fields of very
// different lengths, so tiles start and end inside fields.
func TestTilesSpanFields(t *testing.T) {
	spec := &Spec{}
	batch := Batch{Size: 9000} // 36,000 bags and ~390,000 values: several tiles of each kind
	for f, per := range []int{1, 37, 0, 5} {
		spec.Features = append(spec.Features, FeatureSpec{Name: fmt.Sprint("s", f), Ops: []OpSpec{
			{Op: "truncate", N: ptr(int64(30)), Keep: ptr("last")}, {Op: "hash"}, {Op: "mod", N: ptr(int64(1000))},
		}})
		in := Input{Kind: KindInt64}
		for b := range batch.Size {
			l := per * (b % 3)
			in.Lengths = append(in.Lengths, int64(l))
			for k := range l {
				in.Ints = append(in.Ints, int64(b*100+k))
			}
		}
		batch.Inputs = append(batch.Inputs, in)
	}
	eng, err := Compile(spec)
	require.NoError(t, err)
	assert.Equal(t, 12, eng.Plan().CallsBefore)
	assert.Equal(t, 3, eng.Plan().CallsAfter)
	res, err := eng.Apply(batch)
	require.NoError(t, err)
	vals, lens, err := res.Feature("s1")
	require.NoError(t, err)
	pos := 0
	for b, l := range lens {
		full := int64(37 * (b % 3))
		require.Equal(t, min(full, 30), l)
		for k := full - l; k < full; k++ {
			want := int64(kernels.HashID(int64(b*100)+k, 0)) % 1000
			if want < 0 {
				want += 1000
			}
			require.Equal(t, want, vals[pos])
			pos++
		}
	}
}

func TestPlanFusesAcrossFields(t *testing.T) {
	spec := &Spec{Features: []FeatureSpec{
		{Name: "a", Ops: []OpSpec{{Op: "hash"}, {Op: "mod", N: ptr(int64(10))}}},
		{Name: "b", Ops: []OpSpec{{Op: "hash"}, {Op: "mod", N: ptr(int64(10))}}},
		{Name: "c", Ops: []OpSpec{{Op: "truncate", N: ptr(int64(2))}, {Op: "hash"}, {Op: "mod", N: ptr(int64(10))}}},
		{Name: "x", Ops: []OpSpec{{Op: "cross", Fields: []string{"a", "c"}}, {Op: "mod", N: ptr(int64(10))}}},
	}}
	eng, err := Compile(spec)
	require.NoError(t, err)
	p := eng.Plan()
	assert.Equal(t, 9, p.CallsBefore)
	var got []string
	for _, g := range p.Groups {
		got = append(got, fmt.Sprintf("%s%v", g.Op, g.Features))
	}
	// truncate(c) heads the longest remaining path (c -> x), so it runs first and every later
	// kind fuses across all fields that have it.
	assert.Equal(t, []string{"truncate[c]", "hash[a b c]", "mod[a b c]", "cross[x]", "mod[x]"}, got)
	assert.Equal(t, 5, p.CallsAfter)
	assert.InDelta(t, 1-5.0/9, p.Reduction(), 1e-12)
	assert.Equal(t, []string{"a", "b", "c", "x"}, eng.OutputKeys())
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name, json, want string
	}{
		{"unknown op", `{"features":[{"name":"a","ops":[{"op":"sqrt"}]}]}`, `unknown op "sqrt"`},
		{"unknown key", `{"features":[{"name":"a","ops":[{"op":"hash","salt":1}]}]}`, `unknown field "salt"`},
		{"truncate 0", `{"features":[{"name":"a","ops":[{"op":"truncate","n":0}]}]}`, "length n >= 1"},
		{"unsorted", `{"features":[{"name":"a","dtype":"float","ops":[{"op":"bucketize","boundaries":[1,0]}]}]}`, "strictly increasing"},
		{"duplicate boundary", `{"features":[{"name":"a","ops":[{"op":"bucketize","boundaries":[1,1]}]}]}`, "strictly increasing"},
		{"int boundary", `{"features":[{"name":"a","ops":[{"op":"bucketize","boundaries":[0.5]}]}]}`, "not an int64"},
		{"cycle", `{"features":[{"name":"a","ops":[{"op":"cross","fields":["b","c"]}]},{"name":"b","ops":[{"op":"cross","fields":["a","c"]}]},{"name":"c","ops":[]}]}`, "cycle: a, b"},
		{"self cross", `{"features":[{"name":"a","ops":[{"op":"cross","fields":["a","a"]}]}]}`, "cycle: a"},
		{"mod on float", `{"features":[{"name":"a","dtype":"float","ops":[{"op":"mod","n":3}]}]}`, "dtype mismatch"},
		{"hash float", `{"features":[{"name":"a","dtype":"float","ops":[{"op":"hash"}]}]}`, "dtype mismatch"},
		{"truncate bytes", `{"features":[{"name":"a","dtype":"bytes","ops":[{"op":"truncate","n":3}]}]}`, "dtype mismatch"},
		{"float no ops", `{"features":[{"name":"a","dtype":"float","ops":[]}]}`, "must be bucketized"},
		{"float filter only", `{"features":[{"name":"a","dtype":"float","ops":[{"op":"filter","range":[0,1.5]}]}]}`, "must be bucketized"},
		{"float fill", `{"features":[{"name":"a","dtype":"float","ops":[{"op":"fill_missing"}]}]}`, "dtype mismatch"},
		{"int filter float value", `{"features":[{"name":"a","ops":[{"op":"filter","values":[1.5]}]}]}`, "1.5 is not an int64"},
		{"filter range of three", `{"features":[{"name":"a","ops":[{"op":"filter","range":[1,2,3]}]}]}`, "got 3 numbers"},
		{"filter value string", `{"features":[{"name":"a","ops":[{"op":"filter","values":["1"]}]}]}`, `want a number, got "1"`},
		{"cross nine", `{"features":[{"name":"a","ops":[]},{"name":"x","ops":[{"op":"cross","fields":["a","a","a","a","a","a","a","a","a"]}]}]}`, "2 to 8 fields, got 9"},
		{"cross one", `{"features":[{"name":"a","ops":[]},{"name":"x","ops":[{"op":"cross","fields":["a"]}]}]}`, "2 to 8 fields, got 1"},
		{"position from", `{"features":[{"name":"a","ops":[{"op":"position","from":"middle"}]}]}`, "first"},
		{"recency no reference", `{"features":[{"name":"a","ops":[{"op":"recency"}]}]}`, "needs a reference"},
		{"recency reference not int64", `{"features":[{"name":"a","dtype":"bytes","ops":[{"op":"hash"},{"op":"recency","reference":"t"}]},{"name":"t","dtype":"float","ops":[{"op":"bucketize","boundaries":[0]}]}]}`, `input "t" is declared float here and int64`},
		{"recency on float", `{"features":[{"name":"a","dtype":"float","ops":[{"op":"recency","reference":"t"}]}]}`, "dtype mismatch"},
		{"output string", `{"features":[{"name":"a","output":"false","ops":[]}]}`, `feature 0 ("a"): field "output": want true or false, got a JSON string`},
		{"ops string", `{"features":[{"name":"a","ops":"hash"}]}`, `feature 0 ("a"): field "ops": want a list of ops, got a JSON string`},
		{"ops object", `{"features":[{"name":"a","ops":{"hash":7}}]}`, `field "ops": want a list of ops, got a JSON object`},
		{"seed string", `{"features":[{"name":"a","ops":[{"op":"hash","seed":"7"}]}]}`, `feature 0 ("a") op 0: field "seed": want a non-negative integer, got a JSON string`},
		{"nul in name", "{\"features\":[{\"name\":\"a\\u0000b\",\"ops\":[]}]}", `feature 0: feature name "a\x00b" contains the control character U+0000`},
		{"newline in input", "{\"features\":[{\"name\":\"a\",\"input\":\"x\\ny\",\"ops\":[]}]}", `input name "x\ny" contains the control character U+000A`},
		{"line separator in name", `{"features":[{"name":"a\u2028b","ops":[]}]}`, `feature name "a\u2028b" contains the non-printable character U+2028; names must be printable`},
		{"zero-width space in name", `{"features":[{"name":"a\u200bb","ops":[]}]}`, `contains the non-printable character U+200B`},
		{"byte order mark in name", `{"features":[{"name":"\ufeffa","ops":[]}]}`, `contains the non-printable character U+FEFF`},
		{"no-break space in name", `{"features":[{"name":"a\u00a0b","ops":[]}]}`, `contains the non-printable character U+00A0`},
		{"right-to-left override in input", `{"features":[{"name":"a","input":"x\u202ey","ops":[]}]}`, `input name "x\u202ey" contains the non-printable character U+202E`},
		{"max values", `{"max_values":-1,"features":[{"name":"a","ops":[]}]}`, "max_values -1"},
		{"top-level key", `{"feature":[{"name":"a","ops":[]}]}`, `unknown field "feature"`},
		{"mod 0", `{"features":[{"name":"a","ops":[{"op":"mod","n":0}]}]}`, "n > 0"},
		{"cross late", `{"features":[{"name":"a","ops":[]},{"name":"x","ops":[{"op":"hash"},{"op":"cross","fields":["a","a"]}]}]}`, "first op"},
		{"cross unknown", `{"features":[{"name":"x","ops":[{"op":"cross","fields":["a","b"]}]}]}`, `"a" is not a feature`},
		{"extra param", `{"features":[{"name":"a","ops":[{"op":"hash","n":3}]}]}`, `does not take "n"`},
		{"duplicate name", `{"features":[{"name":"a","ops":[]},{"name":"a","ops":[]}]}`, "duplicate"},
		{"keep", `{"features":[{"name":"a","ops":[{"op":"truncate","n":2,"keep":"middle"}]}]}`, "first"},
		{"filter both", `{"features":[{"name":"a","ops":[{"op":"filter","values":[1],"range":[0,2]}]}]}`, "exactly one"},
		{"filter range", `{"features":[{"name":"a","ops":[{"op":"filter","range":[3,2]}]}]}`, "lo <= hi"},
		{"dtype", `{"features":[{"name":"a","dtype":"string","ops":[]}]}`, "unknown dtype"},
		{"conflicting input", `{"features":[{"name":"a","input":"x","ops":[]},{"name":"b","input":"x","dtype":"bytes","ops":[{"op":"hash"}]}]}`, "declared"},
		{"empty", `{"features":[]}`, "no features"},
		{"no output", `{"features":[{"name":"a","output":false,"ops":[]}]}`, "no feature has output"},
		{"syntax", `{"features":[`, "feature spec"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, err := ParseSpec([]byte(c.json))
			if err == nil {
				_, err = Compile(spec)
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, errs.ErrInvalid)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestApplyErrors(t *testing.T) {
	eng, err := Compile(&Spec{Features: []FeatureSpec{
		{Name: "i", Ops: []OpSpec{{Op: "hash"}}},
		{Name: "f", DType: Float, Ops: []OpSpec{{Op: "bucketize", Boundaries: FloatNumbers(0)}}},
		{Name: "s", DType: Bytes, Ops: []OpSpec{{Op: "hash"}}},
	}})
	require.NoError(t, err)
	good := func() Batch {
		return Batch{Size: 2, Inputs: []Input{
			{Kind: KindInt64, Ints: []int64{1, 2, 3}, Lengths: []int64{1, 2}},
			{Kind: KindFloat32, F32: []float32{0.5, -1}},
			{Kind: KindBytes, Bytes: []byte("abc"), ByteLens: []int64{1, 2}, Lengths: []int64{0, 2}},
		}}
	}
	_, err = eng.Apply(good())
	require.NoError(t, err)
	cases := []struct {
		name   string
		mutate func(b *Batch)
		want   string
	}{
		{"lengths sum", func(b *Batch) { b.Inputs[0].Lengths = []int64{1, 1} }, "lengths sum to 2 but there are 3 values"},
		{"negative length", func(b *Batch) { b.Inputs[0].Lengths = []int64{1, -1} }, "negative"},
		{"lengths count", func(b *Batch) { b.Inputs[0].Lengths = []int64{3} }, "1 entries for a batch of 2"},
		{"kind", func(b *Batch) { b.Inputs[1] = Input{Kind: KindInt64, Ints: []int64{1, 2}} }, "dtype mismatch"},
		{"dense count", func(b *Batch) { b.Inputs[1].F32 = []float32{1} }, "dense input has 1 values"},
		{"nan", func(b *Batch) { b.Inputs[1].F32[1] = float32(math.NaN()) }, "value 1 (in sample 1) is NaN"},
		{"byte lens", func(b *Batch) { b.Inputs[2].ByteLens = []int64{1, 1} }, "sum to 2 but there are 3 bytes"},
		// lengths whose int64 sum wraps around to the value count (the sum of 2^63-1, 2^63-1 and 5 is 3)
		{"lengths wrap", func(b *Batch) { b.Inputs[0].Lengths = []int64{math.MaxInt64, math.MaxInt64 - 1} },
			"lengths sum past the 3 values (at lengths[0]"},
		{"byte lens wrap", func(b *Batch) { b.Inputs[2].ByteLens = []int64{math.MaxInt64, math.MaxInt64 - 10} },
			"byte string lengths sum past the 3 bytes (at string 0"},
		{"inputs", func(b *Batch) { b.Inputs = b.Inputs[:2] }, "2 inputs given"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := good()
			c.mutate(&b)
			_, err := eng.Apply(b)
			require.Error(t, err)
			assert.ErrorIs(t, err, errs.ErrInvalid)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestResultDoesNotAliasBatch(t *testing.T) {
	eng, err := Compile(&Spec{Features: []FeatureSpec{{Name: "a", Ops: nil}}})
	require.NoError(t, err)
	in := []int64{5, 6}
	res, err := eng.Apply(Batch{Size: 2, Inputs: []Input{{Kind: KindInt64, Ints: in}}})
	require.NoError(t, err)
	in[0] = 99
	vals, lens, _ := res.Feature("a")
	assert.Equal(t, []int64{5, 6}, vals)
	assert.Equal(t, []int64{1, 1}, lens)
	_, _, err = res.Feature("nope")
	assert.ErrorIs(t, err, errs.ErrNotFound)
}

func FuzzCompile(f *testing.F) {
	f.Add([]byte(`{"features":[{"name":"a","ops":[{"op":"truncate","n":2},{"op":"hash","seed":3},{"op":"mod","n":7}]},{"name":"x","ops":[{"op":"cross","fields":["a","a"]}]}]}`))
	f.Add([]byte(`{"features":[{"name":"f","dtype":"float","ops":[{"op":"bucketize","boundaries":[0,1]}]}]}`))
	f.Add([]byte(`{"max_values":64,"features":[{"name":"f","dtype":"float","ops":[{"op":"filter","range":[0,1.5],"mode":"keep"},{"op":"truncate","n":2},{"op":"bucketize","boundaries":[0,1]}]},` +
		`{"name":"t","ops":[{"op":"recency","reference":"now"},{"op":"position","from":"last"}]},{"name":"x","ops":[{"op":"cross","fields":["f","t","f"]}]}]}`))
	f.Add([]byte(`{"features":[{"name":"a","output":"false","ops":{"hash":7}}]}`))
	f.Add([]byte(`{"features":[{"name":"t","ops":[{"op":"bucketize","boundaries":[-9223372036854775808,1700000000000000001,1.700000000000000002e18]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := ParseSpec(data)
		if err != nil {
			return
		}
		eng, err := Compile(spec)
		if err != nil {
			require.ErrorIs(t, err, errs.ErrInvalid)
			return
		}
		p := eng.Plan()
		require.LessOrEqual(t, p.CallsAfter, p.CallsBefore)
		n := 0
		for _, g := range p.Groups {
			n += len(g.members)
		}
		require.Equal(t, p.CallsBefore, n)
		// Apply an empty batch of the right shape: must not panic.
		b := Batch{Size: 0}
		for _, in := range eng.Inputs() {
			k := map[DType]Kind{Int64: KindInt64, Float: KindFloat64, Bytes: KindBytes}[in.DType]
			b.Inputs = append(b.Inputs, Input{Kind: k, Lengths: []int64{}})
		}
		_, err = eng.Apply(b)
		require.NoError(t, err)
	})
}

func TestSpecJSONRoundTrip(t *testing.T) {
	spec := &Spec{Features: []FeatureSpec{{Name: "a", Input: "raw", Ops: []OpSpec{{Op: "mod", N: ptr(int64(3))}}}}}
	data, err := json.Marshal(spec)
	require.NoError(t, err)
	back, err := ParseSpec(data)
	require.NoError(t, err)
	assert.Equal(t, spec, back)
}

func TestApplyConcurrent(t *testing.T) {
	spec, batch, named := randomCase(rand.New(rand.NewPCG(5, 5)), 10, 3000)
	eng, err := Compile(spec)
	require.NoError(t, err)
	for _, in := range eng.Inputs() {
		batch.Inputs = append(batch.Inputs, named[in.Name])
	}
	want, err := eng.Apply(batch)
	require.NoError(t, err)
	done := make(chan error, 4)
	for range 4 {
		go func() {
			for range 5 {
				got, err := eng.Apply(batch)
				if err == nil && !assert.Equal(t, want.vals, got.vals) {
					err = fmt.Errorf("concurrent results differ")
				}
				if got != nil {
					got.Release()
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		require.NoError(t, <-done)
	}
}

// FuzzApply feeds arbitrary lengths, values and kinds to a fixed engine: every batch either
// transforms or fails with ErrInvalid, never panics.
func FuzzApply(f *testing.F) {
	eng, err := Compile(&Spec{Features: []FeatureSpec{
		{Name: "i", Ops: []OpSpec{{Op: "truncate", N: ptr(int64(2))}, {Op: "hash"}, {Op: "mod", N: ptr(int64(7))}}},
		{Name: "f", DType: Float, Ops: []OpSpec{{Op: "bucketize", Boundaries: FloatNumbers(0, 1)}, {Op: "fill_missing"}}},
		{Name: "s", DType: Bytes, Ops: []OpSpec{{Op: "hash"}, {Op: "filter", Range: IntNumbers(0, 1<<62)}}},
		{Name: "x", Ops: []OpSpec{{Op: "cross", Fields: []string{"i", "s", "i"}}}},
		{Name: "r", Input: "i", Ops: []OpSpec{{Op: "recency", Reference: "now"}}},
		{Name: "g", Input: "f", DType: Float, Ops: []OpSpec{{Op: "filter", Range: FloatNumbers(-1, 0.5)}, {Op: "bucketize", Boundaries: FloatNumbers(0)}}},
	}, MaxValues: 1 << 12})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{2, 1, 1, 0, 2, 5, 6, 7}, uint8(0))
	f.Add([]byte{3, 0, 0, 0, 255, 1}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		if len(data) == 0 {
			return
		}
		size := int(data[0] % 8)
		data = data[1:]
		take := func(n int) []int64 {
			out := make([]int64, 0, n)
			for len(out) < n && len(data) > 0 {
				out = append(out, int64(int8(data[0])))
				data = data[1:]
			}
			return out
		}
		lens := take(size)
		ints := take(int(mode % 16))
		f32 := make([]float32, 0)
		for _, v := range take(int(mode>>4) + size) {
			f32 = append(f32, float32(v)/3)
		}
		blens := take(len(lens))
		var w []float32
		if mode&1 == 1 {
			w = f32
		}
		b := Batch{Size: size, Inputs: []Input{
			{Kind: KindInt64, Ints: ints, Lengths: lens, Weights: w},
			{Kind: Kind(1 + mode%4), F32: f32, F64: []float64{1, 2}, Ints: ints, Lengths: take(size)},
			{Kind: KindBytes, Bytes: data, ByteLens: blens, Lengths: lens},
		}}
		b.Inputs = append(b.Inputs, Input{Kind: KindInt64, Ints: ints}) // "now", the recency reference
		res, err := eng.Apply(b)
		if err != nil {
			require.ErrorIs(t, err, errs.ErrInvalid)
			return
		}
		out, err := res.Assemble()
		require.NoError(t, err)
		require.Len(t, out.Lengths, 6*size)
		require.NoError(t, out.Close())
	})
}
