package feature

import (
	"fmt"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fanOutSpec is n features named f0, f1, ... reading input "a", each with op.
func fanOutSpec(maxValues int64, n int, op OpSpec) *Spec {
	spec := &Spec{MaxValues: maxValues}
	for i := range n {
		spec.Features = append(spec.Features, FeatureSpec{Name: fmt.Sprintf("f%d", i), Input: "a", Ops: []OpSpec{op}})
	}
	return spec
}

// emptyBags is an int64 input of n empty bags: no values, so no values check stops it.
func emptyBags(n int) Input {
	return Input{Kind: KindInt64, Ints: []int64{}, Lengths: make([]int64, n)}
}

// TestPerSampleBuffersOverLimit: the buffers sized by the batch size alone (a structural group's
// lengths and offsets, the offsets a group reads, a dense input's all-ones lengths) were allocated
// before any check; with empty bags no values check came after either, so a large batch through a
// fan-out of features asked Go for M·B words at once (a fatal out-of-memory, not an error). Each is
// now checked against MaxValues before it is allocated, naming the group, the count and the limit.
func TestPerSampleBuffersOverLimit(t *testing.T) {
	crossAll := &Spec{MaxValues: 1000}
	var fields []string
	for i := range 8 {
		name := fmt.Sprintf("s%d", i)
		fields = append(fields, name)
		crossAll.Features = append(crossAll.Features, FeatureSpec{Name: name, Input: "a", Output: ptr(false)})
	}
	crossAll.Features = append(crossAll.Features, FeatureSpec{Name: "x", Ops: []OpSpec{{Op: "cross", Fields: fields}}})
	cases := []struct {
		name  string
		spec  *Spec
		batch Batch
		want  string // "" means Apply succeeds
	}{
		{"truncate fan-out of empty bags", fanOutSpec(1000, 8, OpSpec{Op: "truncate", N: ptr(int64(1))}), Batch{Size: 200, Inputs: []Input{emptyBags(200)}},
			"fused truncate group of 8 features: 1608 offsets in all (201 per feature for the batch of 200) would exceed the limit of 1000 values per buffer; raise max_values or split the batch"},
		{"filter fan-out within the limit", fanOutSpec(1000, 8, OpSpec{Op: "filter", Values: IntNumbers(0)}), Batch{Size: 110, Inputs: []Input{emptyBags(110)}}, ""},
		{"fill_missing fan-out", fanOutSpec(1000, 8, OpSpec{Op: "fill_missing"}), Batch{Size: 200, Inputs: []Input{emptyBags(200)}},
			"fused fill_missing group of 8 features: 1608 offsets in all"},
		{"offsets a cross reads", crossAll, Batch{Size: 200, Inputs: []Input{emptyBags(200)}},
			"fused cross group of 1 features: 1608 offsets in all (201 per feature for the batch of 200) would exceed the limit of 1000"},
		{"position fan-out of empty bags", fanOutSpec(1000, 8, OpSpec{Op: "position"}), Batch{Size: 200, Inputs: []Input{emptyBags(200)}},
			"fused position group of 8 features: 1608 offsets in all (201 per feature for the batch of 200) would exceed the limit of 1000"},
		{"a dense input's lengths", fanOutSpec(1000, 1, OpSpec{Op: "truncate", N: ptr(int64(1))}), Batch{Size: 1500, Inputs: []Input{{Kind: KindInt64, Ints: make([]int64, 1500)}}},
			`feature "f0": the 1500 lengths (all ones) of its dense input "a" would exceed the limit of 1000 values per buffer; raise max_values or split the batch`},
		{"a dense input at the limit", fanOutSpec(1000, 1, OpSpec{Op: "hash"}), Batch{Size: 999, Inputs: []Input{{Kind: KindInt64, Ints: make([]int64, 999)}}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			applyWithin(t, c.spec, c.batch, c.want, func(r *Result) { assert.Equal(t, c.batch.Size, r.Size()) })
		})
	}
}

// TestStructuralCapacityErrorNamesTheNeed: a structural op past MaxValues named the limit and a
// lower bound (a cross's lengths saturate at the limit) but not the values the batch would need.
// The need is exact, past 64 bits too.
func TestStructuralCapacityErrorNamesTheNeed(t *testing.T) {
	crossN := func(n int, maxValues int64) *Spec {
		fields := make([]string, n)
		for i := range fields {
			fields[i] = "a"
		}
		return &Spec{MaxValues: maxValues, Features: []FeatureSpec{{Name: "a", Output: ptr(false)}, {Name: "x", Ops: []OpSpec{{Op: "cross", Fields: fields}}}}}
	}
	bags := func(n, size int) Input { // n bags of size IDs
		in := Input{Kind: KindInt64, Ints: make([]int64, n*size), Lengths: make([]int64, n)}
		for i := range in.Lengths {
			in.Lengths[i] = int64(size)
		}
		return in
	}
	cases := []struct {
		name  string
		spec  *Spec
		batch Batch
		want  string
	}{
		{"two bags of 60,000", crossSpec(0), Batch{Size: 1, Inputs: []Input{bag(60000), bag(60000)}},
			`feature "ab": cross would produce more than 268435456 values of the batch of 1 (limit 268435456 values per buffer; the batch needs 3600000000 in all); raise max_values or split the batch`},
		{"past the limit by the first sample", crossSpec(99), Batch{Size: 2, Inputs: []Input{
			{Kind: KindInt64, Ints: make([]int64, 15), Lengths: []int64{10, 5}},
			{Kind: KindInt64, Ints: make([]int64, 15), Lengths: []int64{10, 5}},
		}}, "more than 99 values by sample 0 of the batch of 2 (limit 99 values per buffer; the batch needs 125 in all)"},
		{"one product past 64 bits", crossN(8, 0), Batch{Size: 1, Inputs: []Input{bag(300)}},
			"(limit 268435456 values per buffer; the batch needs 65610000000000000000 in all)"}, // 300^8
		{"a sum past 64 bits", crossN(8, 0), Batch{Size: 8, Inputs: []Input{bags(8, 200)}},
			"the batch needs 20480000000000000000 in all"}, // 8 · 200^8, each product within int64
		{"a product past 64 bits, then an empty bag", &Spec{Features: []FeatureSpec{
			{Name: "a", Output: ptr(false)}, {Name: "e", Output: ptr(false)},
			{Name: "x", Ops: []OpSpec{{Op: "cross", Fields: []string{"a", "a", "a", "a", "a", "a", "a", "e"}}}},
		}}, Batch{Size: 2, Inputs: []Input{
			{Kind: KindInt64, Ints: make([]int64, 900), Lengths: []int64{600, 300}}, // 600^7 passes 2^64
			{Kind: KindInt64, Ints: make([]int64, 2), Lengths: []int64{0, 2}},
		}}, "the batch needs 437400000000000000 in all"}, // 0 + 2 · 300^7
		{"fill_missing", &Spec{MaxValues: 10, Features: []FeatureSpec{{Name: "a", Ops: []OpSpec{{Op: "fill_missing"}}}}},
			Batch{Size: 3, Inputs: []Input{{Kind: KindInt64, Ints: make([]int64, 11), Lengths: []int64{5, 0, 6}}}},
			`feature "a": fill_missing would produce more than 11 values of the batch of 3 (limit 10 values per buffer; the batch needs 12 in all)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eng, err := Compile(c.spec)
			require.NoError(t, err)
			res, err := eng.ApplyN(c.batch, 2)
			require.ErrorIs(t, err, errs.ErrCapacity)
			assert.Contains(t, err.Error(), c.want)
			assert.Nil(t, res)
		})
	}
}
