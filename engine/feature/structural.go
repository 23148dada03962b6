package feature

import (
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// structural runs one group of truncate, filter, fill_missing or cross ops, which change bag
// lengths. The bags of all member features form one index space (member-major) cut into equal
// tiles: first every new bag length, then per-feature offsets, then the values.
func (r *run) structural(g *Group) error {
	B, M := r.size, len(g.members)
	var need []int // features whose offsets the group reads, each once
	seen := map[int]bool{}
	for _, m := range g.members {
		for _, f := range r.sources(m) {
			if !seen[f] {
				seen[f] = true
				need = append(need, f)
			}
		}
	}
	for _, f := range need {
		r.st[f].ensureOffs(r.alloc)
	}
	newLens := r.alloc(M * B)
	r.eachBag(M, func(i, b0, b1 int) {
		r.bagLengths(g.members[i], newLens[i*B+b0:i*B+b1], b0)
	})
	newOffs := r.alloc(M * (B + 1))
	starts := make([]int64, M+1)
	for i := range g.members {
		offs := newOffs[i*(B+1) : (i+1)*(B+1)]
		offs[0] = 0
		for b, l := range newLens[i*B : (i+1)*B] {
			offs[b+1] = offs[b] + l
		}
		if offs[B] > maxFeatureValues {
			return errs.Capacityf("feature %q: %s would produce %d values (limit %d)",
				r.e.feats[g.members[i].feat].name, g.Op, offs[B], int64(maxFeatureValues))
		}
		starts[i+1] = starts[i] + offs[B]
	}
	slab := r.alloc(int(starts[M]))
	r.eachBag(M, func(i, b0, b1 int) {
		dst := slab[starts[i]:starts[i+1]]
		r.bagValues(g.members[i], dst, newOffs[i*(B+1):(i+1)*(B+1)], b0, b1)
	})
	for i, m := range g.members {
		s := &r.st[m.feat]
		*s = state{
			kind: KindInt64, ints: slab[starts[i]:starts[i+1]:starts[i+1]],
			lens: newLens[i*B : (i+1)*B : (i+1)*B], offs: newOffs[i*(B+1) : (i+1)*(B+1)],
			owned: true, lensOwned: true,
		}
	}
	return nil
}

// sources are the features whose values member m reads.
func (r *run) sources(m member) []int {
	o := &r.e.feats[m.feat].ops[m.op]
	if o.kind == OpCross {
		return o.srcs[:]
	}
	return []int{m.feat}
}

// eachBag calls body(member, b0, b1) over the M·B bags of a group in parallel tiles.
func (r *run) eachBag(M int, body func(i, b0, b1 int)) {
	B := r.size
	parallel.For(M*B, minBagChunk, func(lo, hi int) {
		for lo < hi {
			i, b0 := lo/B, lo%B
			b1 := min(B, b0+(hi-lo))
			body(i, b0, b1)
			lo += b1 - b0
		}
	})
}

// bagLengths writes the new lengths of bags [b0, b0+len(out)) of member m.
func (r *run) bagLengths(m member, out []int64, b0 int) {
	o := &r.e.feats[m.feat].ops[m.op]
	s := &r.st[m.feat]
	switch o.kind {
	case OpTruncate:
		for j := range out {
			out[j] = min(s.lens[b0+j], o.n)
		}
	case OpFillMissing:
		for j := range out {
			out[j] = max(s.lens[b0+j], 1)
		}
	case OpFilter:
		for j := range out {
			b := b0 + j
			out[j] = int64(kernels.FilterCount(s.ints[s.offs[b]:s.offs[b+1]], &o.filter))
		}
	case OpCross:
		a, c := &r.st[o.srcs[0]], &r.st[o.srcs[1]]
		for j := range out {
			out[j] = a.lens[b0+j] * c.lens[b0+j]
		}
	default:
		panic("feature: not a structural op: " + o.kind.String())
	}
}

// bagValues writes the values of bags [b0, b1) of member m into dst at the new offsets. Bags that
// keep all their values are contiguous in both source and destination, so runs of them move with
// one copy.
func (r *run) bagValues(m member, dst, offs []int64, b0, b1 int) {
	o := &r.e.feats[m.feat].ops[m.op]
	s := &r.st[m.feat]
	switch o.kind {
	case OpTruncate:
		runSrc, runDst := s.offs[b0], offs[b0]
		for b := b0; b < b1; b++ {
			if s.lens[b] <= o.n {
				continue
			}
			copy(dst[runDst:offs[b]], s.ints[runSrc:s.offs[b]])
			lo := s.offs[b]
			if o.keepLast {
				lo = s.offs[b+1] - o.n
			}
			copy(dst[offs[b]:offs[b+1]], s.ints[lo:lo+o.n])
			runSrc, runDst = s.offs[b+1], offs[b+1]
		}
		copy(dst[runDst:offs[b1]], s.ints[runSrc:s.offs[b1]])
	case OpFillMissing:
		runSrc, runDst := s.offs[b0], offs[b0]
		for b := b0; b < b1; b++ {
			if s.lens[b] != 0 {
				continue
			}
			copy(dst[runDst:offs[b]], s.ints[runSrc:s.offs[b]])
			dst[offs[b]] = o.def
			runSrc, runDst = s.offs[b+1], offs[b+1]
		}
		copy(dst[runDst:offs[b1]], s.ints[runSrc:s.offs[b1]])
	case OpFilter:
		// Kept values of consecutive bags are consecutive: one pass over the whole range.
		kernels.FilterCopy(dst[offs[b0]:offs[b1]], s.ints[s.offs[b0]:s.offs[b1]], &o.filter)
	case OpCross:
		a, c := &r.st[o.srcs[0]], &r.st[o.srcs[1]]
		for b := b0; b < b1; b++ {
			kernels.CrossBag(dst[offs[b]:offs[b+1]], a.ints[a.offs[b]:a.offs[b+1]], c.ints[c.offs[b]:c.offs[b+1]], o.seed)
		}
	}
}
