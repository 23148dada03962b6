package feature

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bucketizeJSON compiles a one-feature spec, {"name":"a","dtype":dtype,"ops":[{"op":"bucketize",
// "boundaries":boundaries}]} with boundaries written as raw JSON, the way Python sends it.
func bucketizeJSON(dtype, boundaries string) (*Engine, error) {
	spec, err := ParseSpec([]byte(fmt.Sprintf(`{"features":[{"name":"a","dtype":%q,"ops":[{"op":"bucketize","boundaries":%s}]}]}`, dtype, boundaries)))
	if err != nil {
		return nil, err
	}
	return Compile(spec)
}

// applyOneBag runs eng on one sample whose bag holds in, and returns the output values.
func applyOneBag(t *testing.T, eng *Engine, in Input) []int64 {
	t.Helper()
	in.Lengths = []int64{int64(in.count())}
	res, err := eng.Apply(Batch{Size: 1, Inputs: []Input{in}})
	require.NoError(t, err)
	defer res.Release()
	vals, _, err := res.Feature("a")
	require.NoError(t, err)
	return append([]int64{}, vals...)
}

const ts = 1_700_000_000_000_000_001 // a nanosecond timestamp, far above 2^53

// TestBucketizeInt64IsExact: int64 fields compare with their boundaries in int64, so boundaries
// that one float64 cannot tell apart (above 2^53, near the int64 limits) are distinct, however the
// integer is written in JSON.
func TestBucketizeInt64IsExact(t *testing.T) {
	cases := []struct {
		name, boundaries string
		values, want     []int64
	}{
		{"2^53+1", `[9007199254740993]`, []int64{1 << 53, 1<<53 + 1, 1<<53 + 2}, []int64{0, 1, 1}},
		{"2^53+1 as 9007199254740993.0", `[9007199254740993.0]`, []int64{1 << 53, 1<<53 + 1}, []int64{0, 1}},
		{"2^53+1 with an exponent", `[9.007199254740993e15]`, []int64{1 << 53, 1<<53 + 1}, []int64{0, 1}},
		{"timestamps ts, ts+1", fmt.Sprintf(`[%d, %d]`, ts, ts+1), []int64{ts - 1, ts, ts + 1, ts + 2}, []int64{0, 1, 2, 2}},
		{"int64 limits", `[-9223372036854775808, -9223372036854775807, 9223372036854775806, 9223372036854775807]`,
			[]int64{math.MinInt64, math.MinInt64 + 1, 0, math.MaxInt64 - 1, math.MaxInt64}, []int64{1, 2, 2, 3, 4}},
		{"integral float literals (older specs)", `[-1.0, 0.0, 1e3, 2.5e3]`, []int64{-2, -1, 0, 999, 1000, 2500}, []int64{0, 1, 2, 2, 3, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eng, err := bucketizeJSON("int64", c.boundaries)
			require.NoError(t, err)
			assert.Equal(t, c.want, applyOneBag(t, eng, Input{Kind: KindInt64, Ints: c.values}))
		})
	}
}

// TestBucketizeFloatStaysFloat64: a float field's boundaries are read as float64 (correctly
// rounded), as before: 2^53+1 is the float64 2^53.
func TestBucketizeFloatStaysFloat64(t *testing.T) {
	eng, err := bucketizeJSON("float", `[-0.5, 9007199254740993]`)
	require.NoError(t, err)
	got := applyOneBag(t, eng, Input{Kind: KindFloat64, F64: []float64{-1, -0.5, 1 << 53, math.MaxFloat64}})
	assert.Equal(t, []int64{0, 1, 2, 2}, got)
}

func TestBucketizeBoundaryErrors(t *testing.T) {
	cases := []struct {
		name, dtype, boundaries, want string
	}{
		{"none", "int64", `[]`, "at least one boundary"},
		{"fraction on IDs", "int64", `[0, 0.5]`, "bucketize boundary 1: 0.5 is not an int64"},
		{"2^63", "int64", `[9223372036854775808]`, "9223372036854775808 is not an int64"},
		{"below -2^63", "int64", `[-9223372036854775809]`, "is not an int64"},
		{"1e19", "int64", `[1e19]`, "1e19 is not an int64"},
		{"equal as int64", "int64", `[5, 5.0]`, "boundary 1 (5.0) follows 5 (both are 5 in the field's type)"},
		{"decreasing", "int64", fmt.Sprintf(`[%d, %d]`, ts+1, ts), fmt.Sprintf("strictly increasing: boundary 1 (%d) follows %d", ts, ts+1)},
		{"ts, ts+1 on a float field", "float", fmt.Sprintf(`[%d, %d]`, ts, ts+1), "(both are 1.7e+18 in the field's type)"},
		{"infinite", "float", `[1e400]`, "1e400 is not a finite number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := bucketizeJSON(c.dtype, c.boundaries)
			require.ErrorIs(t, err, errs.ErrInvalid)
			assert.ErrorContains(t, err, c.want)
		})
	}
}

// TestBoundariesRoundTrip: a spec's boundaries marshal as written (Python and Go configs carry the
// same literals), so an exact boundary stays exact through JSON.
func TestBoundariesRoundTrip(t *testing.T) {
	in := &Spec{Features: []FeatureSpec{{Name: "a", Ops: []OpSpec{{Op: "bucketize", Boundaries: IntNumbers(ts, ts+1)}}}}}
	data, err := json.Marshal(in)
	require.NoError(t, err)
	assert.Contains(t, string(data), fmt.Sprintf(`"boundaries":[%d,%d]`, ts, ts+1))
	out, err := ParseSpec(data)
	require.NoError(t, err)
	assert.Equal(t, in.Features[0].Ops[0].Boundaries, out.Features[0].Ops[0].Boundaries)
	_, err = Compile(out)
	require.NoError(t, err)
}

func TestIntegerDigits(t *testing.T) {
	cases := []struct {
		lit, want string // want "" means not an integer or out of range
	}{
		{"0", "0"}, {"-0", "0"}, {"0.000", "0"}, {"0e99999999999999999999", "0"}, {"-0.0e-5", "0"},
		{"12", "12"}, {"-12", "-12"}, {"1.50e1", "15"}, {"1500e-2", "15"}, {"1e3", "1000"}, {"1E+3", "1000"},
		{"9007199254740993.0", "9007199254740993"}, {"9.007199254740993e15", "9007199254740993"},
		{"9.223372036854775807e18", "9223372036854775807"}, {"1e18", "1000000000000000000"},
		{"1e19", ""}, {"1.5", ""}, {"15e-1", ""}, {"1e-99999999999999999999", ""}, {"1e99999999999999999999", ""},
		{"", ""}, {"-", ""}, {"NaN", ""}, {"+Inf", ""}, {"1e", ""}, {"1x", ""},
	}
	for _, c := range cases {
		got, ok := integerDigits(c.lit)
		assert.Equal(t, c.want != "", ok, "%q", c.lit)
		if ok {
			assert.Equal(t, c.want, got, "%q", c.lit)
		}
	}
}

// FuzzNumberInt64 checks Number.int64 against math/big's exact rational reading of the literal, for
// every JSON number literal of modest size.
func FuzzNumberInt64(f *testing.F) {
	for _, s := range []string{"0", "-1", "9007199254740993", "9.007199254740993e15", "1.5", "1e19", "-9223372036854775808", "0.10e1", "12300e-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		if len(lit) > 40 || !json.Valid([]byte(lit)) || !isNumberLiteral(strings.TrimSpace(lit)) || lit != strings.TrimSpace(lit) {
			return
		}
		if i := strings.IndexAny(lit, "eE"); i >= 0 && len(strings.TrimLeft(lit[i+1:], "+-0")) > 3 {
			return // keep big.Rat's work small: exponents below 1000
		}
		r, ok := new(big.Rat).SetString(lit)
		require.True(t, ok, lit)
		exact := r.IsInt() && r.Num().IsInt64()
		got, err := Number{lit}.int64()
		if !exact {
			require.ErrorIs(t, err, errs.ErrInvalid, lit)
			return
		}
		require.NoError(t, err, lit)
		require.Equal(t, r.Num().Int64(), got, lit)
	})
}
