package feature

import (
	"fmt"
	"slices"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
)

// OpKind is a transform category; ops of one kind from different fields fuse into one group.
type OpKind int

// The transform categories, in the planner's tie-break order.
const (
	OpTruncate OpKind = iota
	OpFilter
	OpFillMissing
	OpCross
	OpHash
	OpBucketize
	OpMod
	OpPosition
	OpRecency
	numOpKinds
)

// opNames are the op names of specs, by kind. This table (with the "mask" alias of filter) is the
// one list of op kinds; Python's builder (recgo.feature.spec) and reference
// (recgo.feature.reference) implement the same names.
var opNames = [numOpKinds]string{"truncate", "filter", "fill_missing", "cross", "hash", "bucketize", "mod", "position", "recency"}

// String is the op's name in specs ("hash", "mod", ...).
func (k OpKind) String() string {
	if k < 0 || k >= numOpKinds {
		return "unknown"
	}
	return opNames[k]
}

// elementwise reports whether the op maps each value to one value (bags keep their lengths).
func (k OpKind) elementwise() bool {
	return k == OpHash || k == OpMod || k == OpBucketize || k == OpPosition || k == OpRecency
}

// op is one validated transform.
type op struct {
	kind     OpKind
	in       DType // the value type this op reads
	seed     uint64
	n        int64
	mod      kernels.Modulus
	keepLast bool // truncate: keep the last n; position: count from the last
	fbounds  []float64
	ibounds  []int64
	ifilter  kernels.Filter[int64]
	ffilter  kernels.Filter[float64]
	srcs     []int // cross: feature indices
	ref      int   // recency: input index of the reference
	def      int64
}

// compiled is one validated feature.
type compiled struct {
	name   string
	input  int // index into Engine.inputs, -1 for cross features
	output bool
	ops    []op
}

// InputInfo describes one raw field a batch must supply.
type InputInfo struct {
	Name  string `json:"name"`
	DType DType  `json:"dtype"`
	// Dense marks an input that must hold exactly one value per sample (a recency reference).
	Dense bool `json:"dense,omitempty"`
}

// Engine is a compiled, validated feature spec with its fused execution plan. It is immutable and
// safe for concurrent use.
type Engine struct {
	feats     []compiled
	inputs    []InputInfo
	outputs   []int // feature indices in output key order
	plan      Plan
	maxValues int64
}

// Inputs returns the raw fields a batch must supply, in the order [Batch.Inputs] uses.
func (e *Engine) Inputs() []InputInfo { return slices.Clone(e.inputs) }

// OutputKeys returns the output features' names in key order.
func (e *Engine) OutputKeys() []string {
	keys := make([]string, len(e.outputs))
	for i, f := range e.outputs {
		keys[i] = e.feats[f].name
	}
	return keys
}

// Plan returns the fused execution plan.
func (e *Engine) Plan() Plan { return e.plan }

// MaxValues is the capacity limit in force (see [Spec.MaxValues]).
func (e *Engine) MaxValues() int64 { return e.maxValues }

// compiler holds the name tables while a spec compiles.
type compiler struct {
	index      map[string]int // feature name -> index
	inputIndex map[string]int // input name -> index into inputs
	inputs     []InputInfo
}

// input returns the index of raw input name, declaring it with dtype d on first use.
func (c *compiler) input(name string, d DType, dense bool, feature string) (int, error) {
	if err := checkName("input name", name); err != nil {
		return 0, errs.Invalidf("feature %q: %v", feature, err)
	}
	if j, ok := c.inputIndex[name]; ok {
		if c.inputs[j].DType != d {
			return 0, errs.Invalidf("feature %q: input %q is declared %s here and %s by another feature", feature, name, d, c.inputs[j].DType)
		}
		c.inputs[j].Dense = c.inputs[j].Dense || dense
		return j, nil
	}
	c.inputIndex[name] = len(c.inputs)
	c.inputs = append(c.inputs, InputInfo{Name: name, DType: d, Dense: dense})
	return len(c.inputs) - 1, nil
}

// Compile validates spec and plans its fused execution. Errors name the feature and op at fault.
func Compile(spec *Spec) (*Engine, error) {
	if spec == nil || len(spec.Features) == 0 {
		return nil, errs.Invalidf("feature spec: no features")
	}
	e := &Engine{maxValues: spec.MaxValues}
	if e.maxValues == 0 {
		e.maxValues = DefaultMaxValues
	}
	if e.maxValues < 0 || e.maxValues > 1<<40 {
		return nil, errs.Invalidf("feature spec: max_values %d is outside [1, 2^40]", spec.MaxValues)
	}
	c := &compiler{index: map[string]int{}, inputIndex: map[string]int{}}
	for i, fs := range spec.Features {
		if fs.Name == "" {
			return nil, errs.Invalidf("feature spec: feature %d has no name", i)
		}
		if err := checkName("feature name", fs.Name); err != nil {
			return nil, errs.Invalidf("feature spec: feature %d: %v", i, err)
		}
		if _, dup := c.index[fs.Name]; dup {
			return nil, errs.Invalidf("feature spec: duplicate feature name %q", fs.Name)
		}
		c.index[fs.Name] = i
	}
	for _, fs := range spec.Features {
		f, err := c.feature(fs)
		if err != nil {
			return nil, err
		}
		e.feats = append(e.feats, f)
		if f.output {
			e.outputs = append(e.outputs, len(e.feats)-1)
		}
	}
	e.inputs = c.inputs
	if len(e.outputs) == 0 {
		return nil, errs.Invalidf("feature spec: no feature has output enabled")
	}
	plan, err := buildPlan(e.feats, spec.Unfused)
	if err != nil {
		return nil, err
	}
	e.plan = plan
	return e, nil
}

func (c *compiler) feature(fs FeatureSpec) (compiled, error) {
	f := compiled{name: fs.Name, input: -1, output: fs.Output == nil || *fs.Output}
	isCross := len(fs.Ops) > 0 && (fs.Ops[0].Op == "cross")
	cur := fs.DType
	if isCross {
		if fs.Input != "" || fs.DType != "" {
			return f, errs.Invalidf("feature %q: a cross feature reads the features it crosses, not an input or dtype", fs.Name)
		}
		cur = Int64
	} else {
		if cur == "" {
			cur = Int64
		}
		if cur != Int64 && cur != Float && cur != Bytes {
			return f, errs.Invalidf("feature %q: unknown dtype %q (want int64, float or bytes)", fs.Name, fs.DType)
		}
		name := fs.Input
		if name == "" {
			name = fs.Name
		}
		j, err := c.input(name, cur, false, fs.Name)
		if err != nil {
			return f, err
		}
		f.input = j
	}
	for i := range fs.Ops {
		o, err := c.op(&fs.Ops[i], i, cur, fs.Name)
		if err != nil {
			return f, wrapOp(fs.Name, i, fs.Ops[i].Op, err)
		}
		f.ops = append(f.ops, o)
		if o.kind != OpFilter && o.kind != OpTruncate { // those keep a float field's values
			cur = Int64
		}
	}
	if cur != Int64 {
		if cur == Bytes {
			return f, errs.Invalidf("feature %q: a bytes field needs a transform chain starting with hash (outputs are int64 IDs)", fs.Name)
		}
		return f, errs.Invalidf("feature %q: a float field must be bucketized (after any filter or truncate) to become int64 IDs", fs.Name)
	}
	return f, nil
}

func (c *compiler) op(s *OpSpec, pos int, in DType, feature string) (op, error) {
	o := op{in: in}
	needInt := func() error {
		if in != Int64 {
			return errs.Invalidf("dtype mismatch: %s needs int64 values but the field holds %s at this point", s.Op, in)
		}
		return nil
	}
	notBytes := func() error {
		if in == Bytes {
			return errs.Invalidf("dtype mismatch: %s takes IDs or numbers, not byte strings (hash them first)", s.Op)
		}
		return nil
	}
	switch s.Op {
	case "hash":
		o.kind = OpHash
		if err := s.onlyParams("seed"); err != nil {
			return o, err
		}
		if in == Float {
			return o, errs.Invalidf("dtype mismatch: hash takes int64 IDs or byte strings, not float values (bucketize them first)")
		}
		if s.Seed != nil {
			o.seed = *s.Seed
		}
	case "mod":
		o.kind = OpMod
		if err := s.onlyParams("n"); err != nil {
			return o, err
		}
		if err := needInt(); err != nil {
			return o, err
		}
		n, err := s.positiveN("a bucket count n > 0")
		if err != nil {
			return o, err
		}
		o.n = n
		o.mod = kernels.NewModulus(o.n)
	case "bucketize":
		o.kind = OpBucketize
		if err := s.onlyParams("boundaries"); err != nil {
			return o, err
		}
		if err := notBytes(); err != nil {
			return o, err
		}
		if err := compileBoundaries(s.Boundaries, &o); err != nil {
			return o, err
		}
	case "truncate":
		o.kind = OpTruncate
		if err := s.onlyParams("n", "keep"); err != nil {
			return o, err
		}
		if err := notBytes(); err != nil {
			return o, err
		}
		n, err := s.positiveN("a length n >= 1")
		if err != nil {
			return o, err
		}
		o.n = n
		if s.Keep != nil {
			switch *s.Keep {
			case "first":
			case "last":
				o.keepLast = true
			default:
				return o, errs.Invalidf("truncate keep must be \"first\" or \"last\", got %q", *s.Keep)
			}
		}
	case "filter", "mask":
		o.kind = OpFilter
		if err := s.onlyParams("values", "range", "mode"); err != nil {
			return o, err
		}
		if err := notBytes(); err != nil {
			return o, err
		}
		if err := compileFilter(s, &o); err != nil {
			return o, err
		}
	case "cross":
		o.kind = OpCross
		if err := s.onlyParams("fields", "seed"); err != nil {
			return o, err
		}
		if pos != 0 {
			return o, errs.Invalidf("cross must be the first op of its feature")
		}
		if len(s.Fields) < 2 || len(s.Fields) > kernels.MaxCrossFields {
			return o, errs.Invalidf("cross needs 2 to %d fields, got %d", kernels.MaxCrossFields, len(s.Fields))
		}
		for _, name := range s.Fields {
			j, ok := c.index[name]
			if !ok {
				return o, errs.Invalidf("cross field %q is not a feature of this spec", name)
			}
			o.srcs = append(o.srcs, j)
		}
		if s.Seed != nil {
			o.seed = *s.Seed
		}
	case "fill_missing":
		o.kind = OpFillMissing
		if err := s.onlyParams("default"); err != nil {
			return o, err
		}
		if err := needInt(); err != nil {
			return o, err
		}
		if s.Default != nil {
			o.def = *s.Default
		}
	case "position":
		o.kind = OpPosition
		if err := s.onlyParams("from"); err != nil {
			return o, err
		}
		if err := notBytes(); err != nil {
			return o, err
		}
		if s.From != nil {
			switch *s.From {
			case "first":
			case "last":
				o.keepLast = true
			default:
				return o, errs.Invalidf("position from must be \"first\" or \"last\", got %q", *s.From)
			}
		}
	case "recency":
		o.kind = OpRecency
		if err := s.onlyParams("reference"); err != nil {
			return o, err
		}
		if err := needInt(); err != nil {
			return o, err
		}
		if s.Reference == "" {
			return o, errs.Invalidf("recency needs a reference: the input holding each sample's reference time")
		}
		j, err := c.input(s.Reference, Int64, true, feature)
		if err != nil {
			return o, err
		}
		o.ref = j
	case "":
		return o, errs.Invalidf("op has no \"op\" name")
	default:
		return o, errs.Invalidf("unknown op %q (known: hash, mod, bucketize, truncate, filter, mask, cross, fill_missing, position, recency)", s.Op)
	}
	return o, nil
}

// positiveN is the op's parameter n, which must be given and at least 1 (mod's bucket count,
// truncate's length); need says so in the op's words, and the error adds the value given.
func (o *OpSpec) positiveN(need string) (int64, error) {
	if o.N == nil {
		return 0, errs.Invalidf("%s needs %s", o.Op, need)
	}
	if *o.N < 1 {
		return 0, errs.Invalidf("%s needs %s, got %d", o.Op, need, *o.N)
	}
	return *o.N, nil
}

// compileFilter reads a filter's values or range in the field's type: int64 for IDs, float64 for
// float fields.
func compileFilter(s *OpSpec, o *op) error {
	if (s.Values != nil) == (s.Range != nil) {
		return errs.Invalidf("%s needs exactly one of values or range", s.Op)
	}
	keep := false
	if s.Mode != nil {
		switch *s.Mode {
		case "drop":
		case "keep":
			keep = true
		default:
			return errs.Invalidf("%s mode must be \"drop\" or \"keep\", got %q", s.Op, *s.Mode)
		}
	}
	nums := s.Values
	if s.Range != nil {
		if len(s.Range) != 2 {
			return errs.Invalidf("%s range must be [lo, hi], got %d numbers", s.Op, len(s.Range))
		}
		nums = s.Range
	}
	if o.in == Float {
		vals, err := readNumbers(nums, Number.float64)
		if err != nil {
			return err
		}
		f, err := newFilter(s, vals, keep)
		o.ffilter = f
		return err
	}
	vals, err := readNumbers(nums, Number.int64)
	if err != nil {
		return err
	}
	f, err := newFilter(s, vals, keep)
	o.ifilter = f
	return err
}

func readNumbers[T kernels.Bound](nums []Number, read func(Number) (T, error)) ([]T, error) {
	out := make([]T, len(nums))
	for i, n := range nums {
		v, err := read(n)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func newFilter[T kernels.Bound](s *OpSpec, vals []T, keep bool) (kernels.Filter[T], error) {
	f := kernels.Filter[T]{Keep: keep}
	if s.Range != nil {
		if vals[0] > vals[1] {
			return f, errs.Invalidf("%s range must be [lo, hi] with lo <= hi, got %v", s.Op, vals)
		}
		f.ByRange, f.Lo, f.Hi = true, vals[0], vals[1]
		return f, nil
	}
	slices.Sort(vals)
	f.Set = slices.Compact(vals)
	return f, nil
}

// compileBoundaries reads bucketize's boundaries in the field's type, as compileFilter reads its
// numbers: exactly as int64 for IDs (so boundaries above 2^53 keep every bit), as float64 for float
// fields. They must be strictly increasing in that type.
func compileBoundaries(nums []Number, o *op) error {
	if len(nums) == 0 {
		return errs.Invalidf("bucketize needs at least one boundary")
	}
	var err error
	if o.in == Float {
		o.fbounds, err = readBoundaries(nums, Number.float64)
	} else {
		o.ibounds, err = readBoundaries(nums, Number.int64)
	}
	return err
}

// readBoundaries reads each boundary with read and checks that they strictly increase.
func readBoundaries[T kernels.Bound](nums []Number, read func(Number) (T, error)) ([]T, error) {
	b := make([]T, len(nums))
	for i, n := range nums {
		v, err := read(n)
		if err != nil {
			return nil, fmt.Errorf("bucketize boundary %d: %w", i, err)
		}
		b[i] = v
		if i > 0 && !(b[i-1] < v) {
			same := ""
			if b[i-1] == v && nums[i-1].lit != n.lit {
				same = fmt.Sprintf(" (both are %v in the field's type)", v)
			}
			return nil, errs.Invalidf("bucketize boundaries must be strictly increasing: boundary %d (%s) follows %s%s", i, n.lit, nums[i-1].lit, same)
		}
	}
	return b, nil
}
