package feature

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/recgo/recgo/internal/errs"
)

// DType is the type of a raw input field.
type DType string

// The raw input types a feature may declare.
const (
	Int64 DType = "int64" // int64 IDs
	Float DType = "float" // float32 or float64 values (filter/truncate, then bucketize)
	Bytes DType = "bytes" // byte strings (hash first)
)

// DefaultMaxValues is the default of [Spec.MaxValues]: 2^28 values (2 GiB of int64).
const DefaultMaxValues = 1 << 28

// Spec is the declarative description of every feature: the JSON that Python's FeatureEngine sends
// once at construction, and the format of recgo's JSON/YAML feature configs.
type Spec struct {
	Features []FeatureSpec `json:"features"`
	// Unfused, when true, plans one group per op (field by field, each chain in order): the
	// baseline that fusion is measured against. Results are identical either way.
	Unfused bool `json:"unfused,omitempty"`
	// MaxValues bounds every buffer whose size comes from a batch: the values one fused group of
	// transforms produces (all its features together), the lengths and offsets sized by the batch
	// size alone (a structural group's, the offsets a group reads, a dense input's all-ones
	// lengths) and the assembled output. A batch that would need more fails with a capacity error
	// naming the feature or group, the size and the limit, before anything is allocated. Zero means
	// DefaultMaxValues.
	MaxValues int64 `json:"max_values,omitempty"`
}

// FeatureSpec declares one output (or intermediate) feature and its transform chain.
type FeatureSpec struct {
	// Name is the feature's key in the output batch.
	Name string `json:"name"`
	// Input names the raw batch field it reads; empty means Name. Not allowed for cross features.
	Input string `json:"input,omitempty"`
	// DType is the raw input's type (default int64).
	DType DType `json:"dtype,omitempty"`
	// Output, when false, computes the feature only for use by cross features (default true).
	Output *bool `json:"output,omitempty"`
	// Ops is the transform chain, applied in order.
	Ops []OpSpec `json:"ops"`
}

// OpSpec is one transform with its parameters; which parameters apply depends on Op.
type OpSpec struct {
	Op         string   `json:"op"`
	Seed       *uint64  `json:"seed,omitempty"`       // hash, cross
	N          *int64   `json:"n,omitempty"`          // mod, truncate
	Keep       *string  `json:"keep,omitempty"`       // truncate: "first" | "last"
	Boundaries []Number `json:"boundaries,omitempty"` // bucketize (read in the field's type, as filter's numbers)
	Values     []Number `json:"values,omitempty"`     // filter
	Range      []Number `json:"range,omitempty"`      // filter: [lo, hi)
	Mode       *string  `json:"mode,omitempty"`       // filter: "drop" | "keep"
	Fields     []string `json:"fields,omitempty"`     // cross: 2 to kernels.MaxCrossFields features
	Default    *int64   `json:"default,omitempty"`    // fill_missing
	Reference  string   `json:"reference,omitempty"`  // recency: the raw input holding each sample's reference
	From       *string  `json:"from,omitempty"`       // position: "first" | "last"
}

// Number is a filter value or a bucketize boundary exactly as written: read as an int64 on ID
// fields and as a float64 on float fields, so large IDs (and nanosecond timestamps) keep every bit.
// Build one with [IntNumber] or [FloatNumber]; in JSON it is a plain number, integer or not.
type Number struct{ lit string }

// IntNumber is the Number v.
func IntNumber(v int64) Number { return Number{strconv.FormatInt(v, 10)} }

// FloatNumber is the Number v.
func FloatNumber(v float64) Number { return Number{strconv.FormatFloat(v, 'g', -1, 64)} }

// IntNumbers is a list of integer Numbers, e.g. a filter's Values or Range or bucketize's
// Boundaries.
func IntNumbers(vs ...int64) []Number {
	out := make([]Number, len(vs))
	for i, v := range vs {
		out[i] = IntNumber(v)
	}
	return out
}

// FloatNumbers is a list of float Numbers.
func FloatNumbers(vs ...float64) []Number {
	out := make([]Number, len(vs))
	for i, v := range vs {
		out[i] = FloatNumber(v)
	}
	return out
}

// String is the number as written.
func (n Number) String() string { return n.lit }

// MarshalJSON writes the number as written.
func (n Number) MarshalJSON() ([]byte, error) {
	if !json.Valid([]byte(n.lit)) || !isNumberLiteral(n.lit) {
		return nil, fmt.Errorf("feature: %q is not a JSON number", n.lit)
	}
	return []byte(n.lit), nil
}

// UnmarshalJSON accepts a JSON number only (not a string, boolean or null).
func (n *Number) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if !isNumberLiteral(s) {
		return errs.Invalidf("want a number, got %s", s)
	}
	n.lit = s
	return nil
}

func isNumberLiteral(s string) bool {
	return s != "" && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))
}

// int64 reads the number as an exact int64. A literal with a fraction or an exponent (1e3, 2.0,
// 1.5e1) is accepted when its decimal value is an integer in range; it is read digit by digit, never
// through float64, so 9007199254740993.0 is 2^53+1 and 0.5 is refused.
func (n Number) int64() (int64, error) {
	if v, err := strconv.ParseInt(n.lit, 10, 64); err == nil {
		return v, nil
	}
	if digits, ok := integerDigits(n.lit); ok {
		if v, err := strconv.ParseInt(digits, 10, 64); err == nil {
			return v, nil
		}
	}
	return 0, errs.Invalidf("%s is not an int64, but the field holds int64 IDs", n.lit)
}

// integerDigits rewrites a JSON number literal whose value is an integer as plain decimal digits
// ("-1.50e1" is "-15", "0e9" is "0"). ok is false when the value is not an integer, when it has more
// than 19 digits (outside int64 whatever they are), or when lit is not a JSON number.
func integerDigits(lit string) (digits string, ok bool) {
	sign, s := "", lit
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	mant, exp := s, int64(0)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.ParseInt(s[i+1:], 10, 64) // out of range: clamped, with ErrRange
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return "", false
		}
		// A literal is far shorter than 2^40 characters: past that exponent the value is out of
		// range or not an integer (unless it is zero, which the digits below tell), and clamping
		// keeps the sums below from overflowing.
		mant, exp = s[:i], max(min(e, 1<<40), -1<<40)
	}
	whole, frac, _ := strings.Cut(mant, ".")
	all := whole + frac
	if all == "" || strings.Trim(all, "0123456789") != "" {
		return "", false
	}
	noTrail := strings.TrimRight(all, "0")
	sig := strings.TrimLeft(noTrail, "0") // the significant digits
	if sig == "" {
		return "0", true
	}
	// The value is sig * 10^exp once exp counts the trailing zeros trimmed and the fraction's digits.
	exp += int64(len(all)-len(noTrail)) - int64(len(frac))
	if exp < 0 || int64(len(sig))+exp > 19 {
		return "", false
	}
	return sign + sig + strings.Repeat("0", int(exp)), true
}

// float64 reads the number as a finite float64.
func (n Number) float64() (float64, error) {
	f, err := strconv.ParseFloat(n.lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, errs.Invalidf("%s is not a finite number", n.lit)
	}
	return f, nil
}

// ParseSpec decodes a JSON spec, rejecting unknown keys and values of the wrong JSON type with an
// error that names the feature and the field. It checks syntax only; [Compile] validates.
func ParseSpec(data []byte) (*Spec, error) {
	var top struct {
		Features  []json.RawMessage `json:"features"`
		Unfused   bool              `json:"unfused"`
		MaxValues int64             `json:"max_values"`
	}
	if err := decodeStrict(data, &top); err != nil {
		return nil, errs.Invalidf("feature spec: %s", describeJSONError(err))
	}
	s := &Spec{Unfused: top.Unfused, MaxValues: top.MaxValues, Features: make([]FeatureSpec, len(top.Features))}
	for i, raw := range top.Features {
		if err := decodeStrict(raw, &s.Features[i]); err != nil {
			return nil, errs.Invalidf("feature spec: feature %d%s%s: %s", i, nameOf(raw), badOp(raw, &err), describeJSONError(err))
		}
	}
	return s, nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// badOp names the first op of a feature object that fails to decode on its own (" op 2"), and
// replaces *err with that op's error, whose field path is then relative to the op.
func badOp(raw json.RawMessage, err *error) string {
	var f struct {
		Ops []json.RawMessage `json:"ops"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return ""
	}
	for i, o := range f.Ops {
		var op OpSpec
		if e := decodeStrict(o, &op); e != nil {
			*err = e
			return fmt.Sprintf(" op %d", i)
		}
	}
	return ""
}

// nameOf is ` ("name")` for a feature object whose name is a string, for error messages.
func nameOf(raw json.RawMessage) string {
	var f struct {
		Name any `json:"name"`
	}
	if json.Unmarshal(raw, &f) == nil {
		if s, ok := f.Name.(string); ok {
			return fmt.Sprintf(" (%q)", s)
		}
	}
	return ""
}

// describeJSONError rewrites the decoder's errors in the spec's terms: which field, what it wants.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Sprintf("field %q: want %s, got a JSON %s", field, describeType(te.Type), te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func describeType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
		return "a non-negative integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Slice:
		if t.Elem() == reflect.TypeOf(OpSpec{}) {
			return "a list of ops"
		}
		return "a list of " + strings.TrimPrefix(describeType(t.Elem()), "a ")
	case reflect.Struct:
		if t == reflect.TypeOf(Number{}) {
			return "a number"
		}
		return "an object"
	}
	return t.String()
}

// checkName rejects names that cannot travel as KeyedJaggedTensor keys: invalid UTF-8, or holding a
// rune that is not printable (a control character such as NUL or newline, a line separator, a
// zero-width or bidirectional format character). unicode.IsPrint agrees with Python's
// str.isprintable: the ASCII space is the one separator allowed. Python's recgo.feature.spec.check_name
// is the same rule, in the same words, for the names the embedding configs check in Python.
func checkName(what, name string) error {
	if !utf8.ValidString(name) {
		return errs.Invalidf("%s %q is not valid UTF-8", what, name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			kind := "non-printable"
			if unicode.IsControl(r) {
				kind = "control"
			}
			return errs.Invalidf("%s %q contains the %s character %U; names must be printable (no control characters, format characters, or separators other than the space)", what, name, kind, r)
		}
	}
	return nil
}

var paramNames = []string{"seed", "n", "keep", "boundaries", "values", "range", "mode", "fields", "default", "reference", "from"}

// params lists the parameters an op was given, for "does not take" errors.
func (o *OpSpec) params() map[string]bool {
	p := map[string]bool{}
	set := func(name string, ok bool) {
		if ok {
			p[name] = true
		}
	}
	set("seed", o.Seed != nil)
	set("n", o.N != nil)
	set("keep", o.Keep != nil)
	set("boundaries", o.Boundaries != nil)
	set("values", o.Values != nil)
	set("range", o.Range != nil)
	set("mode", o.Mode != nil)
	set("fields", o.Fields != nil)
	set("default", o.Default != nil)
	set("reference", o.Reference != "")
	set("from", o.From != nil)
	return p
}

// onlyParams returns an error naming the first parameter of o outside allowed.
func (o *OpSpec) onlyParams(allowed ...string) error {
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	given := o.params()
	for _, name := range paramNames {
		if given[name] && !ok[name] {
			return errs.Invalidf("%s does not take %q", o.Op, name)
		}
	}
	return nil
}

func wrapOp(feature string, i int, op string, err error) error {
	return fmt.Errorf("feature %q op %d (%s): %w", feature, i, op, err)
}
