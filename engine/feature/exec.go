package feature

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// tile is the smallest run of elements (or bags) one goroutine takes in a fused call.
const tile = 8192

// maxFeatureValues caps one feature's values after a transform (cross products can explode).
const maxFeatureValues = 1 << 32

// run is the state of one Apply call.
type run struct {
	e    *Engine
	size int
	st   []state
	mu   sync.Mutex
	err  error
}

func (r *run) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

// Apply transforms one raw batch: it validates the inputs, runs the fused groups in plan order
// (one parallel call per group) and returns the output features. The batch is only read, and not
// referenced after Apply returns.
func (e *Engine) Apply(b Batch) (*Result, error) {
	if b.Size < 0 {
		return nil, errs.Invalidf("feature batch: negative size %d", b.Size)
	}
	if len(b.Inputs) != len(e.inputs) {
		return nil, errs.Invalidf("feature batch: %d inputs given, the engine reads %d", len(b.Inputs), len(e.inputs))
	}
	boffs := make([][]int64, len(b.Inputs))
	verrs := make([]error, len(b.Inputs))
	parallel.ForEach(len(b.Inputs), 16, func(i int) {
		boffs[i], verrs[i] = validate(e.inputs[i], &b.Inputs[i], b.Size)
	})
	for i, err := range verrs {
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", e.inputs[i].Name, err)
		}
	}
	var ones []int64
	r := &run{e: e, size: b.Size, st: make([]state, len(e.feats))}
	for f, c := range e.feats {
		if c.input < 0 {
			continue
		}
		in := &b.Inputs[c.input]
		s := state{kind: in.Kind, ints: in.Ints, f32: in.F32, f64: in.F64, data: in.Bytes, boffs: boffs[c.input], lens: in.Lengths}
		if s.lens == nil {
			if ones == nil {
				ones = make([]int64, b.Size)
				for i := range ones {
					ones[i] = 1
				}
			}
			s.lens = ones
		}
		r.st[f] = s
	}
	for gi := range e.plan.Groups {
		g := &e.plan.Groups[gi]
		var err error
		if g.members[0].kind(e).elementwise() {
			err = r.elementwise(g)
		} else {
			err = r.structural(g)
		}
		if err != nil {
			return nil, err
		}
	}
	return r.result(), nil
}

func (m member) kind(e *Engine) OpKind { return e.feats[m.feat].ops[m.op].kind }

// result copies whatever still aliases the caller's batch and collects the output features.
func (r *run) result() *Result {
	res := &Result{size: r.size, keys: r.e.OutputKeys(), vals: make([][]int64, len(r.e.outputs)), lens: make([][]int64, len(r.e.outputs))}
	parallel.ForEach(len(r.e.outputs), 16, func(i int) {
		s := &r.st[r.e.outputs[i]]
		res.vals[i], res.lens[i] = s.ints, s.lens
		if !s.owned {
			res.vals[i] = slices.Clone(s.ints)
		}
		if !s.lensOwned {
			res.lens[i] = slices.Clone(s.lens)
		}
	})
	return res
}

// elementwise runs one group of hash, mod or bucketize ops: the elements of all member features
// form one index space, cut into equal tiles across goroutines.
func (r *run) elementwise(g *Group) error {
	prefix := make([]int, len(g.members)+1)
	fresh := 0
	for i, m := range g.members {
		s := &r.st[m.feat]
		prefix[i+1] = prefix[i] + s.count()
		if !s.owned {
			fresh += s.count()
		}
	}
	slab := make([]int64, fresh)
	dsts := make([][]int64, len(g.members))
	for i, m := range g.members {
		s := &r.st[m.feat]
		if s.owned {
			dsts[i] = s.ints
		} else {
			n := s.count()
			dsts[i], slab = slab[:n:n], slab[n:]
		}
	}
	parallel.For(prefix[len(g.members)], tile, func(lo, hi int) {
		i := sort.SearchInts(prefix, lo+1) - 1
		for ; lo < hi; i++ {
			end := min(hi, prefix[i+1])
			a, b := lo-prefix[i], end-prefix[i]
			if a < b {
				m := g.members[i]
				if err := r.apply(m, dsts[i], a, b); err != nil {
					r.fail(err)
					return
				}
			}
			lo = end
		}
	})
	if r.err != nil {
		return r.err
	}
	for i, m := range g.members {
		s := &r.st[m.feat]
		s.kind, s.ints, s.owned = KindInt64, dsts[i], true
		s.f32, s.f64, s.data, s.boffs = nil, nil, nil, nil
	}
	return nil
}

// apply runs member m's element-wise op on elements [a, b) of its feature, writing dst[a:b].
func (r *run) apply(m member, dst []int64, a, b int) error {
	s := &r.st[m.feat]
	o := &r.e.feats[m.feat].ops[m.op]
	d := dst[a:b]
	switch o.kind {
	case OpHash:
		if s.kind == KindBytes {
			kernels.HashBytes(d, s.data, s.boffs[a:b+1], o.seed)
		} else {
			kernels.HashIDs(d, s.ints[a:b], o.seed)
		}
	case OpMod:
		kernels.ModFloor(d, s.ints[a:b], o.n)
	case OpBucketize:
		nan := -1
		switch s.kind {
		case KindInt64:
			kernels.BucketizeInt64(d, s.ints[a:b], o.ibounds)
		case KindFloat32:
			nan = kernels.BucketizeFloat32(d, s.f32[a:b], o.fbounds)
		case KindFloat64:
			nan = kernels.BucketizeFloat64(d, s.f64[a:b], o.fbounds)
		}
		if nan >= 0 {
			return errs.Invalidf("feature %q: value %d is NaN; bucketize needs numbers (drop missing values, leaving an empty bag, and use fill_missing)",
				r.e.feats[m.feat].name, a+nan)
		}
	default:
		panic("feature: not an element-wise op: " + o.kind.String())
	}
	return nil
}
