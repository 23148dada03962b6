package feature

import (
	"math"
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
	numOpKinds
)

var opNames = [numOpKinds]string{"truncate", "filter", "fill_missing", "cross", "hash", "bucketize", "mod"}

// String is the op's name in specs ("hash", "mod", ...).
func (k OpKind) String() string {
	if k < 0 || k >= numOpKinds {
		return "unknown"
	}
	return opNames[k]
}

// elementwise reports whether the op maps each value to one value (bags keep their lengths).
func (k OpKind) elementwise() bool { return k == OpHash || k == OpMod || k == OpBucketize }

// op is one validated transform.
type op struct {
	kind     OpKind
	in       DType // the value type this op reads
	seed     uint64
	n        int64
	mod      kernels.Modulus
	keepLast bool
	fbounds  []float64
	ibounds  []int64
	filter   kernels.Filter
	srcs     [2]int // cross: feature indices
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
}

// Engine is a compiled, validated feature spec with its fused execution plan. It is immutable and
// safe for concurrent use.
type Engine struct {
	feats   []compiled
	inputs  []InputInfo
	outputs []int // feature indices in output key order
	plan    Plan
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

// Compile validates spec and plans its fused execution. Errors name the feature and op at fault.
func Compile(spec *Spec) (*Engine, error) {
	if spec == nil || len(spec.Features) == 0 {
		return nil, errs.Invalidf("feature spec: no features")
	}
	e := &Engine{}
	index := map[string]int{}
	for i, fs := range spec.Features {
		if fs.Name == "" {
			return nil, errs.Invalidf("feature spec: feature %d has no name", i)
		}
		if _, dup := index[fs.Name]; dup {
			return nil, errs.Invalidf("feature spec: duplicate feature name %q", fs.Name)
		}
		index[fs.Name] = i
	}
	inputIndex := map[string]int{}
	for _, fs := range spec.Features {
		c, err := compileFeature(fs, index, inputIndex, &e.inputs)
		if err != nil {
			return nil, err
		}
		e.feats = append(e.feats, c)
		if c.output {
			e.outputs = append(e.outputs, len(e.feats)-1)
		}
	}
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

func compileFeature(fs FeatureSpec, index, inputIndex map[string]int, inputs *[]InputInfo) (compiled, error) {
	c := compiled{name: fs.Name, input: -1, output: fs.Output == nil || *fs.Output}
	isCross := len(fs.Ops) > 0 && (fs.Ops[0].Op == "cross")
	cur := fs.DType
	if isCross {
		if fs.Input != "" || fs.DType != "" {
			return c, errs.Invalidf("feature %q: a cross feature reads the features it crosses, not an input or dtype", fs.Name)
		}
		cur = Int64
	} else {
		if cur == "" {
			cur = Int64
		}
		if cur != Int64 && cur != Float && cur != Bytes {
			return c, errs.Invalidf("feature %q: unknown dtype %q (want int64, float or bytes)", fs.Name, fs.DType)
		}
		name := fs.Input
		if name == "" {
			name = fs.Name
		}
		if j, ok := inputIndex[name]; ok {
			if (*inputs)[j].DType != cur {
				return c, errs.Invalidf("feature %q: input %q is declared %s here and %s by another feature", fs.Name, name, cur, (*inputs)[j].DType)
			}
			c.input = j
		} else {
			c.input = len(*inputs)
			inputIndex[name] = c.input
			*inputs = append(*inputs, InputInfo{Name: name, DType: cur})
		}
	}
	for i := range fs.Ops {
		o, err := compileOp(&fs.Ops[i], i, cur, fs.Name, index)
		if err != nil {
			return c, wrapOp(fs.Name, i, fs.Ops[i].Op, err)
		}
		c.ops = append(c.ops, o)
		cur = Int64
	}
	if cur != Int64 {
		first := "bucketize"
		if cur == Bytes {
			first = "hash"
		}
		return c, errs.Invalidf("feature %q: a %s field needs a transform chain starting with %s (outputs are int64 IDs)", fs.Name, cur, first)
	}
	return c, nil
}

func compileOp(s *OpSpec, pos int, in DType, feature string, index map[string]int) (op, error) {
	o := op{in: in}
	needInt := func() error {
		if in != Int64 {
			return errs.Invalidf("dtype mismatch: %s needs int64 values but the field holds %s at this point", s.Op, in)
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
		if s.N == nil || *s.N <= 0 {
			return o, errs.Invalidf("mod needs a bucket count n > 0")
		}
		o.n = *s.N
		o.mod = kernels.NewModulus(o.n)
	case "bucketize":
		o.kind = OpBucketize
		if err := s.onlyParams("boundaries"); err != nil {
			return o, err
		}
		if in == Bytes {
			return o, errs.Invalidf("dtype mismatch: bucketize takes numbers, not byte strings")
		}
		if err := checkBoundaries(s.Boundaries); err != nil {
			return o, err
		}
		o.fbounds = slices.Clone(s.Boundaries)
		if in == Int64 {
			o.ibounds = make([]int64, len(s.Boundaries))
			for i, b := range s.Boundaries {
				if b != math.Trunc(b) || b < -(1<<63) || b >= 1<<63 {
					return o, errs.Invalidf("boundary %d (%v) is not an int64, but the field holds int64 IDs", i, b)
				}
				o.ibounds[i] = int64(b)
			}
		}
	case "truncate":
		o.kind = OpTruncate
		if err := s.onlyParams("n", "keep"); err != nil {
			return o, err
		}
		if err := needInt(); err != nil {
			return o, err
		}
		if s.N == nil || *s.N <= 0 {
			return o, errs.Invalidf("truncate needs a length n >= 1")
		}
		o.n = *s.N
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
		if err := needInt(); err != nil {
			return o, err
		}
		if (s.Values != nil) == (s.Range != nil) {
			return o, errs.Invalidf("%s needs exactly one of values or range", s.Op)
		}
		if s.Range != nil {
			if len(s.Range) != 2 || s.Range[0] > s.Range[1] {
				return o, errs.Invalidf("%s range must be [lo, hi] with lo <= hi, got %v", s.Op, s.Range)
			}
			o.filter = kernels.Filter{ByRange: true, Lo: s.Range[0], Hi: s.Range[1]}
		} else {
			set := slices.Clone(s.Values)
			slices.Sort(set)
			o.filter = kernels.Filter{Set: slices.Compact(set)}
		}
		if s.Mode != nil {
			switch *s.Mode {
			case "drop":
			case "keep":
				o.filter.Keep = true
			default:
				return o, errs.Invalidf("%s mode must be \"drop\" or \"keep\", got %q", s.Op, *s.Mode)
			}
		}
	case "cross":
		o.kind = OpCross
		if err := s.onlyParams("fields", "seed"); err != nil {
			return o, err
		}
		if pos != 0 {
			return o, errs.Invalidf("cross must be the first op of its feature")
		}
		if len(s.Fields) != 2 {
			return o, errs.Invalidf("cross needs exactly two fields, got %d", len(s.Fields))
		}
		for i, name := range s.Fields {
			j, ok := index[name]
			if !ok {
				return o, errs.Invalidf("cross field %q is not a feature of this spec", name)
			}
			o.srcs[i] = j
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
	case "":
		return o, errs.Invalidf("op has no \"op\" name")
	default:
		return o, errs.Invalidf("unknown op %q (known: hash, mod, bucketize, truncate, filter, mask, cross, fill_missing)", s.Op)
	}
	return o, nil
}

func checkBoundaries(b []float64) error {
	if len(b) == 0 {
		return errs.Invalidf("bucketize needs at least one boundary")
	}
	for i, v := range b {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return errs.Invalidf("bucketize boundary %d is %v", i, v)
		}
	}
	for i := 1; i < len(b); i++ {
		if !(b[i-1] < b[i]) {
			return errs.Invalidf("bucketize boundaries must be strictly increasing: boundary %d (%v) follows %v", i, b[i], b[i-1])
		}
	}
	return nil
}
