package feature

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/recgo/recgo/internal/errs"
)

// DType is the type of a raw input field.
type DType string

// The raw input types a feature may declare.
const (
	Int64 DType = "int64" // int64 IDs
	Float DType = "float" // float32 or float64 values (bucketize first)
	Bytes DType = "bytes" // byte strings (hash first)
)

// Spec is the declarative description of every feature: the JSON that Python's FeatureEngine sends
// once at construction, and the format of recgo's JSON/YAML feature configs.
type Spec struct {
	Features []FeatureSpec `json:"features"`
	// Unfused, when true, plans one group per op (field by field, each chain in order): the
	// baseline that fusion is measured against. Results are identical either way.
	Unfused bool `json:"unfused,omitempty"`
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
	Op         string    `json:"op"`
	Seed       *uint64   `json:"seed,omitempty"`       // hash, cross
	N          *int64    `json:"n,omitempty"`          // mod, truncate
	Keep       *string   `json:"keep,omitempty"`       // truncate: "first" | "last"
	Boundaries []float64 `json:"boundaries,omitempty"` // bucketize
	Values     []int64   `json:"values,omitempty"`     // filter
	Range      []int64   `json:"range,omitempty"`      // filter: [lo, hi)
	Mode       *string   `json:"mode,omitempty"`       // filter: "drop" | "keep"
	Fields     []string  `json:"fields,omitempty"`     // cross
	Default    *int64    `json:"default,omitempty"`    // fill_missing
}

// ParseSpec decodes a JSON spec, rejecting unknown keys. It checks syntax only; [Compile] validates.
func ParseSpec(data []byte) (*Spec, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, errs.Invalidf("feature spec: %v", err)
	}
	if dec.More() {
		return nil, errs.Invalidf("feature spec: trailing data after the JSON object")
	}
	return &s, nil
}

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
	return p
}

// onlyParams returns an error naming the first parameter of o outside allowed.
func (o *OpSpec) onlyParams(allowed ...string) error {
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	for _, name := range []string{"seed", "n", "keep", "boundaries", "values", "range", "mode", "fields", "default"} {
		if o.params()[name] && !ok[name] {
			return errs.Invalidf("%s does not take %q", o.Op, name)
		}
	}
	return nil
}

func wrapOp(feature string, i int, op string, err error) error {
	return fmt.Errorf("feature %q op %d (%s): %w", feature, i, op, err)
}
