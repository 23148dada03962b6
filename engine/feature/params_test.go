package feature

import (
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCountParamsNameTheValue: mod's bucket count and truncate's length must be at least 1; the
// refusal said so without the value given (a -1 from a config's typo was not named). Booleans and
// numbers past int64 are refused by the spec reader, naming the JSON value.
func TestCountParamsNameTheValue(t *testing.T) {
	cases := []struct {
		name, ops string
		want      string // "" means the spec compiles
	}{
		{"mod -1", `[{"op":"mod","n":-1}]`, `feature "a" op 0 (mod): mod needs a bucket count n > 0, got -1`},
		{"mod 0", `[{"op":"mod","n":0}]`, "mod needs a bucket count n > 0, got 0"},
		{"mod most negative", `[{"op":"mod","n":-9223372036854775808}]`, "mod needs a bucket count n > 0, got -9223372036854775808"},
		{"mod missing", `[{"op":"mod"}]`, "mod needs a bucket count n > 0"},
		{"mod 1", `[{"op":"mod","n":1}]`, ""},
		{"truncate 0", `[{"op":"truncate","n":0}]`, `feature "a" op 0 (truncate): truncate needs a length n >= 1, got 0`},
		{"truncate -5", `[{"op":"truncate","n":-5}]`, "truncate needs a length n >= 1, got -5"},
		{"truncate missing", `[{"op":"truncate","keep":"last"}]`, "truncate needs a length n >= 1"},
		{"truncate 1", `[{"op":"truncate","n":1}]`, ""},
		{"mod true", `[{"op":"mod","n":true}]`, `field "n": want an integer, got a JSON bool`},
		{"truncate 2^63", `[{"op":"truncate","n":9223372036854775808}]`, `field "n": want an integer, got a JSON number 9223372036854775808`},
		{"fill_missing true", `[{"op":"fill_missing","default":true}]`, `field "default": want an integer, got a JSON bool`},
		{"negative seed", `[{"op":"hash","seed":-1}]`, `field "seed": want a non-negative integer, got a JSON number -1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, err := ParseSpec([]byte(`{"features":[{"name":"a","ops":` + c.ops + `}]}`))
			if err == nil {
				_, err = Compile(spec)
			}
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, errs.ErrInvalid)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}
