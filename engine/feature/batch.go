package feature

import (
	"fmt"
	"slices"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
)

// Kind is the element type of one raw input in a batch.
type Kind int

// The element types a batch input may hold.
const (
	KindInt64 Kind = iota + 1
	KindFloat32
	KindFloat64
	KindBytes
)

// String names the kind in error messages.
func (k Kind) String() string {
	switch k {
	case KindInt64:
		return "int64"
	case KindFloat32:
		return "float32"
	case KindFloat64:
		return "float64"
	case KindBytes:
		return "bytes"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Input is one raw field of a batch: Size bags of values. Exactly the slice matching Kind is used.
type Input struct {
	Kind Kind
	Ints []int64
	F32  []float32
	F64  []float64
	// Bytes holds the byte strings back to back; ByteLens the length of each string.
	Bytes    []byte
	ByteLens []int64
	// Lengths holds the bag length of each sample (Size entries). Nil means dense: one value per sample.
	Lengths []int64
	// Weights, when not nil, holds one per-value weight (a KeyedJaggedTensor's weights): every
	// feature reading this input carries them through its chain, aligned with its values.
	Weights []float32
}

// Batch is one raw batch: Inputs in the order of [Engine.Inputs], each with Size samples. The engine
// reads it only during [Engine.Apply].
type Batch struct {
	Size   int
	Inputs []Input
}

func (in *Input) count() int {
	switch in.Kind {
	case KindInt64:
		return len(in.Ints)
	case KindFloat32:
		return len(in.F32)
	case KindFloat64:
		return len(in.F64)
	case KindBytes:
		return len(in.ByteLens)
	}
	return 0
}

func kindFits(d DType, k Kind) bool {
	switch d {
	case Int64:
		return k == KindInt64
	case Float:
		return k == KindFloat32 || k == KindFloat64
	case Bytes:
		return k == KindBytes
	}
	return false
}

// validate checks one input against its declared dtype and the batch size and returns the byte
// strings' offsets (bytes inputs only).
func validate(info InputInfo, in *Input, size int, alloc func(int) []int64) ([]int64, error) {
	if !kindFits(info.DType, in.Kind) {
		return nil, errs.Invalidf("dtype mismatch: the field is declared %s but the batch holds %s", info.DType, in.Kind)
	}
	n := in.count()
	if in.Lengths == nil {
		if n != size {
			return nil, errs.Invalidf("dense input has %d values for a batch of %d", n, size)
		}
	} else {
		if len(in.Lengths) != size {
			return nil, errs.Invalidf("lengths has %d entries for a batch of %d", len(in.Lengths), size)
		}
		sum, past := int64(0), -1
		for b, l := range in.Lengths {
			if l < 0 {
				return nil, errs.Invalidf("lengths[%d] = %d is negative", b, l)
			}
			if past < 0 && l > int64(n)-sum { // before adding: a sum past int64 would wrap around to a plausible one
				past = b
			}
			sum += l
		}
		if past >= 0 {
			return nil, errs.Invalidf("lengths sum past the %d values (at lengths[%d] = %d)", n, past, in.Lengths[past])
		}
		if sum != int64(n) {
			return nil, errs.Invalidf("lengths sum to %d but there are %d values", sum, n)
		}
	}
	if in.Weights != nil && len(in.Weights) != n {
		return nil, errs.Invalidf("weights has %d entries for %d values", len(in.Weights), n)
	}
	if info.Dense && in.Lengths != nil {
		for b, l := range in.Lengths {
			if l != 1 {
				return nil, errs.Invalidf("a recency reference needs one value per sample, but sample %d has %d", b, l)
			}
		}
	}
	if in.Kind != KindBytes {
		return nil, nil
	}
	offs := alloc(n + 1)
	offs[0] = 0
	for i, l := range in.ByteLens {
		if l < 0 {
			return nil, errs.Invalidf("byte string %d has negative length %d", i, l)
		}
		if l > int64(len(in.Bytes))-offs[i] {
			return nil, errs.Invalidf("byte string lengths sum past the %d bytes (at string %d, of length %d)", len(in.Bytes), i, l)
		}
		offs[i+1] = offs[i] + l
	}
	if offs[n] != int64(len(in.Bytes)) {
		return nil, errs.Invalidf("byte string lengths sum to %d but there are %d bytes", offs[n], len(in.Bytes))
	}
	return offs, nil
}

// state is one feature's values while its chain runs.
type state struct {
	kind  Kind
	ints  []int64
	f32   []float32
	f64   []float64
	data  []byte
	boffs []int64
	lens  []int64
	offs  []int64   // len(lens)+1 prefix sums, nil until needed
	w     []float32 // per-value weights, nil when unweighted
	// owned marks ints, lens and w as engine memory; otherwise they alias the caller's batch.
	owned, lensOwned, wOwned bool
}

func (s *state) count() int {
	switch s.kind {
	case KindFloat32:
		return len(s.f32)
	case KindFloat64:
		return len(s.f64)
	case KindBytes:
		return len(s.boffs) - 1
	}
	return len(s.ints)
}

// sampleOf is the sample whose bag holds value v (for error messages: a linear scan).
func (s *state) sampleOf(v int) int {
	if s.lens == nil {
		return v // dense: one value per sample
	}
	end := int64(0)
	for b, l := range s.lens {
		if end += l; int64(v) < end {
			return b
		}
	}
	return len(s.lens) - 1
}

func (s *state) ensureOffs(alloc func(int) []int64) {
	if s.offs != nil {
		return
	}
	s.offs = alloc(len(s.lens) + 1)
	s.offs[0] = 0
	for b, l := range s.lens {
		s.offs[b+1] = s.offs[b] + l
	}
}

// Result is one transformed batch: the output features in key order, each Size bags of int64 IDs.
// It owns its memory.
type Result struct {
	size    int
	keys    []string
	vals    [][]int64
	lens    [][]int64
	wts     [][]float32 // per-value weights of each feature, nil entries for unweighted ones
	bufs    [][]int64   // pooled buffers behind vals, lens and wts (see Release)
	limit   int64       // the engine's MaxValues, for Assemble
	workers int         // the thread budget of the Apply that made it (see ApplyN)
}

// Size is the batch size B.
func (r *Result) Size() int { return r.size }

// Keys are the output feature names in key order.
func (r *Result) Keys() []string { return slices.Clone(r.keys) }

// NumValues is the total number of IDs over all output features.
func (r *Result) NumValues() int {
	n := 0
	for _, v := range r.vals {
		n += len(v)
	}
	return n
}

// Feature returns one output feature's values and bag lengths (views into the result).
func (r *Result) Feature(name string) (values, lengths []int64, err error) {
	i := slices.Index(r.keys, name)
	if i < 0 {
		return nil, nil, errs.NotFoundf("feature %q is not an output of this engine", name)
	}
	return r.vals[i], r.lens[i], nil
}

// Weights returns one output feature's per-value weights (a view into the result), or nil when
// the feature is unweighted (no weighted input reaches it).
func (r *Result) Weights(name string) ([]float32, error) {
	i := slices.Index(r.keys, name)
	if i < 0 {
		return nil, errs.NotFoundf("feature %q is not an output of this engine", name)
	}
	return r.wts[i], nil
}

// Weighted reports whether any output feature carries weights.
func (r *Result) Weighted() bool {
	for _, w := range r.wts {
		if w != nil {
			return true
		}
	}
	return false
}

// CopyWeightsTo writes the weights in KeyedJaggedTensor layout (NumValues entries, feature-major);
// the values of unweighted features get weight 1.
func (r *Result) CopyWeightsTo(weights []float32) error {
	if len(weights) != r.NumValues() {
		return errs.Invalidf("result: buffer of %d weights, need %d", len(weights), r.NumValues())
	}
	pos := 0
	for i, v := range r.vals {
		dst := weights[pos : pos+len(v)]
		if r.wts[i] != nil {
			copy(dst, r.wts[i])
		} else {
			for j := range dst {
				dst[j] = 1
			}
		}
		pos += len(v)
	}
	return nil
}

// CopyTo writes the result in KeyedJaggedTensor layout: values feature-major (NumValues entries)
// and lengths with entry f·B+b for sample b of feature f (len(Keys)·Size entries).
func (r *Result) CopyTo(values, lengths []int64) error {
	if len(values) != r.NumValues() || len(lengths) != len(r.keys)*r.size {
		return errs.Invalidf("result: buffers of %d values and %d lengths, need %d and %d",
			len(values), len(lengths), r.NumValues(), len(r.keys)*r.size)
	}
	starts := make([]int, len(r.vals)+1)
	for i, v := range r.vals {
		starts[i+1] = starts[i] + len(v)
	}
	parallel.ForEachN(r.workers, len(r.vals), 1, func(i int) {
		copy(values[starts[i]:starts[i+1]], r.vals[i])
		copy(lengths[i*r.size:(i+1)*r.size], r.lens[i])
	})
	return nil
}
