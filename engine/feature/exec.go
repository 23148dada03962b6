package feature

import (
	"fmt"
	"sort"
	"sync"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// tile is the run of elements that goes through all ops of an element-wise run while in cache.
const tile = 8192

// minChunk is the least number of elements handed to a goroutine: waking a worker on a busy machine
// costs more than hashing a small chunk, so smaller fused calls run inline.
const minChunk = 1 << 16

// minBagChunk is the same for the bag loops of structural groups.
const minBagChunk = 1 << 14

// run is the state of one Apply call.
type run struct {
	e       *Engine
	size    int
	workers int     // the parallel loops' thread budget (0: parallel.Workers())
	in      []Input // the batch's inputs (read only)
	st      []state
	mu      sync.Mutex
	err     error
	bufs    [][]int64 // every pooled buffer this run took
}

func (r *run) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

// Apply transforms one raw batch: it validates the inputs, runs the fused groups in plan order
// (one call per group, its elements cut into tiles that goroutines claim) and returns the output
// features. The batch is only read, and not referenced after Apply returns.
func (e *Engine) Apply(b Batch) (*Result, error) { return e.ApplyN(b, 0) }

// ApplyN is Apply with its parallel loops (and the returned Result's copies) on at most workers
// threads (workers <= 0: parallel.Workers()). An input pipeline passes its own thread budget, so
// preparing a batch leaves the other cores to the training step.
func (e *Engine) ApplyN(b Batch, workers int) (*Result, error) {
	if b.Size < 0 {
		return nil, errs.Invalidf("feature batch: negative size %d", b.Size)
	}
	if len(b.Inputs) != len(e.inputs) {
		return nil, errs.Invalidf("feature batch: %d inputs given, the engine reads %d", len(b.Inputs), len(e.inputs))
	}
	r := &run{e: e, size: b.Size, workers: workers, in: b.Inputs, st: make([]state, len(e.feats))}
	res, err := r.apply(b)
	if err != nil {
		for _, buf := range r.bufs {
			slabs.put(buf)
		}
		return nil, err
	}
	return res, nil
}

func (r *run) apply(b Batch) (*Result, error) {
	e := r.e
	boffs := make([][]int64, len(b.Inputs))
	verrs := make([]error, len(b.Inputs))
	parallel.ForEachN(r.workers, len(b.Inputs), 16, func(i int) {
		boffs[i], verrs[i] = validate(e.inputs[i], &b.Inputs[i], b.Size, r.alloc)
	})
	for i, err := range verrs {
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", e.inputs[i].Name, err)
		}
	}
	var ones []int64
	for f, c := range e.feats {
		if c.input < 0 {
			continue
		}
		in := &b.Inputs[c.input]
		s := state{kind: in.Kind, ints: in.Ints, f32: in.F32, f64: in.F64, data: in.Bytes, boffs: boffs[c.input], lens: in.Lengths, w: in.Weights}
		if s.lens == nil {
			if ones == nil {
				if int64(b.Size) > e.maxValues {
					return nil, r.overLimit(fmt.Sprintf("feature %q: the %d lengths (all ones) of its dense input %q", c.name, b.Size, e.inputs[c.input].Name))
				}
				ones = r.alloc(b.Size)
				for i := range ones {
					ones[i] = 1
				}
			}
			s.lens = ones
		}
		r.st[f] = s
	}
	groups := e.plan.Groups
	for gi := 0; gi < len(groups); {
		if !groups[gi].members[0].kind(e).elementwise() {
			if err := r.structural(&groups[gi]); err != nil {
				return nil, err
			}
			gi++
			continue
		}
		end := gi + 1
		for end < len(groups) && groups[end].members[0].kind(e).elementwise() {
			end++
		}
		if err := r.elementwise(groups[gi:end]); err != nil {
			return nil, err
		}
		gi = end
	}
	return r.result()
}

func (m member) kind(e *Engine) OpKind { return e.feats[m.feat].ops[m.op].kind }

// result copies whatever still aliases the caller's batch and collects the output features. Each
// copy is checked against MaxValues before any is made.
func (r *run) result() (*Result, error) {
	nout := len(r.e.outputs)
	for _, f := range r.e.outputs {
		s := &r.st[f]
		for _, c := range []struct {
			what  string
			n     int
			owned bool
		}{{"values", len(s.ints), s.owned}, {"lengths", len(s.lens), s.lensOwned}, {"weights", len(s.w), s.wOwned || s.w == nil}} {
			if !c.owned && int64(c.n) > r.e.maxValues {
				return nil, r.overLimit(fmt.Sprintf("feature %q: a copy of its %d %s", r.e.feats[f].name, c.n, c.what))
			}
		}
	}
	res := &Result{size: r.size, keys: r.e.OutputKeys(), vals: make([][]int64, nout), lens: make([][]int64, nout),
		wts: make([][]float32, nout), limit: r.e.maxValues, workers: r.workers}
	parallel.ForEachN(r.workers, nout, 16, func(i int) {
		s := &r.st[r.e.outputs[i]]
		res.vals[i], res.lens[i], res.wts[i] = s.ints, s.lens, s.w
		if s.w != nil && !s.wOwned {
			res.wts[i] = allocAs[float32](r, len(s.w))
			copy(res.wts[i], s.w)
		}
		if !s.owned {
			res.vals[i] = r.alloc(len(s.ints))
			copy(res.vals[i], s.ints)
		}
		if !s.lensOwned {
			res.lens[i] = r.alloc(len(s.lens))
			copy(res.lens[i], s.lens)
		}
	})
	res.bufs = r.bufs
	return res, nil
}

// elementwise runs consecutive groups of hash, mod or bucketize ops (a run of element-wise groups
// in plan order). The elements of all member features form one index space cut into equal tiles
// across goroutines; each tile goes through every group of the run in order while it is in cache
// (the groups' calls stay separate kernel invocations per tile, in group order).
func (r *run) elementwise(groups []Group) error {
	// segs lists each feature of the run once, with its ops in group order; the features that
	// first appear in groups[k] are segs[first[k]:first[k+1]].
	type seg struct {
		feat int
		ops  []int
	}
	var segs []seg
	pos := map[int]int{}
	first := make([]int, len(groups)+1)
	for k, g := range groups {
		for _, m := range g.members {
			i, ok := pos[m.feat]
			if !ok {
				i = len(segs)
				pos[m.feat] = i
				segs = append(segs, seg{feat: m.feat})
			}
			segs[i].ops = append(segs[i].ops, m.op)
		}
		first[k+1] = len(segs)
	}
	// Every group is checked before any is allocated: element-wise ops keep each feature's count,
	// so a group produces the values of all its members, whether written in place or not.
	for k := range groups {
		g := &groups[k]
		var total, most int64
		largest := g.members[0]
		for _, m := range g.members {
			n := int64(r.st[m.feat].count())
			total += n
			if n > most {
				largest, most = m, n
			}
		}
		if err := r.checkGroup(g, total, largest, most); err != nil {
			return err
		}
	}
	for k := range groups {
		g := &groups[k]
		if op := g.members[0].kind(r.e); op != OpPosition && op != OpRecency {
			continue
		}
		feats := make([]int, len(g.members)) // these read which bag each element is in
		for i, m := range g.members {
			feats[i] = m.feat
		}
		if err := r.ensureOffsets(fmt.Sprintf("fused %s group of %d features", g.Op, len(g.members)), feats); err != nil {
			return err
		}
	}
	prefix := make([]int, len(segs)+1)
	for i, sg := range segs {
		prefix[i+1] = prefix[i] + r.st[sg.feat].count()
	}
	// One buffer per group, for the features it is the first to write, so none passes the limit.
	dsts := make([][]int64, len(segs))
	for k := range groups {
		fresh := 0
		for _, sg := range segs[first[k]:first[k+1]] {
			if s := &r.st[sg.feat]; !s.owned {
				fresh += s.count()
			}
		}
		slab := r.alloc(fresh)
		for i := first[k]; i < first[k+1]; i++ {
			s := &r.st[segs[i].feat]
			if s.owned {
				dsts[i] = s.ints
			} else {
				n := s.count()
				dsts[i], slab = slab[:n:n], slab[n:]
			}
		}
	}
	parallel.ForN(r.workers, prefix[len(segs)], minChunk, func(lo, hi int) {
		i := sort.SearchInts(prefix, lo+1) - 1
		for ; lo < hi; i++ {
			end := min(hi, prefix[i+1])
			sg := segs[i]
			for a := lo - prefix[i]; a < end-prefix[i]; a += tile {
				b := min(a+tile, end-prefix[i])
				for k, o := range sg.ops {
					if err := r.applyOp(sg.feat, o, k > 0, dsts[i], a, b); err != nil {
						r.fail(err)
						return
					}
				}
			}
			lo = end
		}
	})
	if r.err != nil {
		return r.err
	}
	for i, sg := range segs {
		s := &r.st[sg.feat]
		s.kind, s.ints, s.owned = KindInt64, dsts[i], true
		s.f32, s.f64, s.data, s.boffs = nil, nil, nil, nil
	}
	return nil
}

// applyOp runs op oi of feature f on its elements [a, b), writing dst[a:b]. It reads the feature's
// current values, or dst itself when inDst (an earlier op of the same run already wrote it).
func (r *run) applyOp(f, oi int, inDst bool, dst []int64, a, b int) error {
	s := &r.st[f]
	o := &r.e.feats[f].ops[oi]
	d := dst[a:b]
	kind, ints := s.kind, s.ints
	if inDst {
		kind, ints = KindInt64, dst
	}
	switch o.kind {
	case OpHash:
		if kind == KindBytes {
			kernels.HashBytes(d, s.data, s.boffs[a:b+1], o.seed)
		} else {
			kernels.HashIDs(d, ints[a:b], o.seed)
		}
	case OpMod:
		kernels.ModFloorFast(d, ints[a:b], o.mod)
	case OpBucketize:
		nan := -1
		switch kind {
		case KindInt64:
			kernels.BucketizeInt64(d, ints[a:b], o.ibounds)
		case KindFloat32:
			nan = kernels.BucketizeFloat32(d, s.f32[a:b], o.fbounds)
		case KindFloat64:
			nan = kernels.BucketizeFloat64(d, s.f64[a:b], o.fbounds)
		}
		if nan >= 0 {
			return errs.Invalidf("feature %q: value %d (in sample %d) is NaN; bucketize needs numbers (leave missing values out, as empty bags, and use fill_missing)",
				r.e.feats[f].name, a+nan, s.sampleOf(a+nan))
		}
	case OpPosition, OpRecency:
		offs := s.offs
		bag := sort.Search(len(offs)-1, func(i int) bool { return offs[i+1] > int64(a) })
		var ref []int64
		if o.kind == OpRecency {
			ref = r.in[o.ref].Ints
		}
		for i := a; i < b; i++ {
			for offs[bag+1] <= int64(i) {
				bag++
			}
			switch {
			case o.kind == OpRecency:
				d[i-a] = ref[bag] - ints[i]
			case o.keepLast:
				d[i-a] = offs[bag+1] - 1 - int64(i)
			default:
				d[i-a] = int64(i) - offs[bag]
			}
		}
	default:
		panic("feature: not an element-wise op: " + o.kind.String())
	}
	return nil
}
