package feature

import (
	"fmt"
	"math/big"
	"math/bits"
	"unsafe"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/internal/parallel"
	"github.com/recgo/recgo/kernels"
)

// structural runs one group of truncate, filter, fill_missing or cross ops, which change bag
// lengths. The bags of all member features form one index space (member-major) cut into equal
// tiles: first every new bag length, then per-feature offsets (checked against the engine's
// MaxValues before anything is allocated for the values), then the values and, for weighted
// features, their weights alongside. The lengths and offsets, whose size the batch size alone
// sets, are checked against MaxValues before any is allocated.
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
	// The group's new lengths (M·B words) and offsets (M·(B+1)) and the offsets it reads are sized by
	// the batch alone, whatever the values: checked before any is allocated.
	whose := fmt.Sprintf("fused %s group of %d features", g.Op, M)
	if err := r.checkOffsets(whose, M); err != nil {
		return err
	}
	if err := r.ensureOffsets(whose, need); err != nil {
		return err
	}
	limit := r.e.maxValues
	newLens := r.alloc(M * B)
	r.eachBag(M, func(i, b0, b1 int) {
		r.bagLengths(g.members[i], newLens[i*B+b0:i*B+b1], b0, limit+1)
	})
	newOffs := r.alloc(M * (B + 1))
	starts := make([]int64, M+1)  // each member's values in the slab, in int64 words
	wstarts := make([]int64, M+1) // each member's weights in the weight slab
	kinds := make([]Kind, M)
	weighted := make([]bool, M)
	largest := 0
	for i, m := range g.members {
		offs := newOffs[i*(B+1) : (i+1)*(B+1)]
		offs[0] = 0
		for b, l := range newLens[i*B : (i+1)*B] {
			offs[b+1] = offs[b] + l // each l <= limit+1 and offs[b] <= limit: no overflow
			if offs[b+1] > limit {
				return r.capacityError(m, g.Op, offs[b+1], b+1, newLens[i*B:(i+1)*B])
			}
		}
		n := offs[B]
		kinds[i] = r.outKind(m)
		words := n
		if kinds[i] == KindFloat32 {
			words = (n + 1) / 2
		}
		starts[i+1] = starts[i] + words
		wstarts[i+1] = wstarts[i]
		if weighted[i] = r.weighted(m); weighted[i] {
			wstarts[i+1] += n
		}
		if n > newOffs[largest*(B+1)+B] {
			largest = i
		}
		if err := r.checkGroup(g, max(starts[i+1], wstarts[i+1]), g.members[largest], newOffs[largest*(B+1)+B]); err != nil {
			return err
		}
	}
	slab := r.alloc(int(starts[M]))
	wslab := allocAs[float32](r, int(wstarts[M]))
	dst := func(i int) memberOut {
		n := int(newOffs[i*(B+1)+B])
		words := slab[starts[i]:starts[i+1]:starts[i+1]]
		out := memberOut{kind: kinds[i], offs: newOffs[i*(B+1) : (i+1)*(B+1) : (i+1)*(B+1)]}
		switch kinds[i] {
		case KindFloat32:
			out.f32 = viewAs[float32](words, n)
		case KindFloat64:
			out.f64 = viewAs[float64](words, n)
		default:
			out.ints = words
		}
		if weighted[i] { // not nil even when empty: the feature stays weighted
			out.w = wslab[wstarts[i]:wstarts[i+1]:wstarts[i+1]]
		}
		return out
	}
	r.eachBag(M, func(i, b0, b1 int) {
		out := dst(i)
		r.bagValues(g.members[i], &out, b0, b1)
	})
	for i, m := range g.members {
		out := dst(i)
		s := &r.st[m.feat]
		*s = state{
			kind: out.kind, ints: out.ints, f32: out.f32, f64: out.f64, w: out.w,
			lens: newLens[i*B : (i+1)*B : (i+1)*B], offs: out.offs,
			owned: out.kind == KindInt64, lensOwned: true, wOwned: true,
		}
	}
	return nil
}

// checkGroup refuses a fused group whose values, total in all (largest the biggest member so far,
// with n values), would not fit one buffer of MaxValues. Structural and element-wise groups share
// it, so both fail before their buffer is allocated and with the same words.
func (r *run) checkGroup(g *Group, total int64, largest member, n int64) error {
	if total <= r.e.maxValues {
		return nil
	}
	return r.overLimit(fmt.Sprintf("fused %s group of %d features: %d values in all by feature %q (the largest, %d values)",
		g.Op, len(g.members), total, r.e.feats[largest.feat].name, n))
}

// overLimit is the capacity error for a buffer past MaxValues; what says whose it is and its size.
func (r *run) overLimit(what string) error {
	return errs.Capacityf("%s would exceed the limit of %d values per buffer; raise max_values or split the batch", what, r.e.maxValues)
}

// checkOffsets refuses n offset buffers of B+1 words each (a group's per-sample buffers: lengths
// take one word less) past MaxValues in all, before any is allocated; whose names their group.
func (r *run) checkOffsets(whose string, n int) error {
	per := int64(r.size) + 1
	if n == 0 || per <= r.e.maxValues/int64(n) {
		return nil
	}
	total := new(big.Int).Mul(big.NewInt(int64(n)), big.NewInt(per))
	return r.overLimit(fmt.Sprintf("%s: %s offsets in all (%d per feature for the batch of %d)", whose, total, per, r.size))
}

// ensureOffsets gives each of feats its offsets (see state.ensureOffs), checking those it must
// allocate against MaxValues in all first; whose names the group that reads them.
func (r *run) ensureOffsets(whose string, feats []int) error {
	missing := 0
	for _, f := range feats {
		if r.st[f].offs == nil {
			missing++
		}
	}
	if err := r.checkOffsets(whose, missing); err != nil {
		return err
	}
	for _, f := range feats {
		r.st[f].ensureOffs(r.alloc)
	}
	return nil
}

// capacityError reports that member m's op would give its feature n values (counting samples
// [0, upTo) so far) in one batch; lens are its new bag lengths, all B of them, from which it also
// names the values the whole batch needs.
func (r *run) capacityError(m member, op string, n int64, upTo int, lens []int64) error {
	what := "values"
	if upTo < r.size {
		what = "values by sample " + itoa(upTo-1)
	}
	return errs.Capacityf("feature %q: %s would produce more than %d %s of the batch of %d (limit %d values per buffer; the batch needs %s in all); raise max_values or split the batch",
		r.e.feats[m.feat].name, op, n-1, what, r.size, r.e.maxValues, r.needed(m, lens))
}

// needed is the exact number of values member m's op makes for the whole batch, given its new bag
// lengths. A cross's lengths saturate (see bagLengths), so its count is the sum over the samples of
// the product of its fields' lengths, which may pass int64: computed in 128 bits, and with big
// integers for a sample whose product passes 64 bits. The others' lengths are exact and sum within
// int64 (each is at most its input's values, or one for an empty bag).
func (r *run) needed(m member, lens []int64) *big.Int {
	o := &r.e.feats[m.feat].ops[m.op]
	total := new(big.Int)
	if o.kind != OpCross {
		var sum int64
		for _, l := range lens {
			sum += l
		}
		return total.SetInt64(sum)
	}
	var hi, lo uint64 // the 128-bit sum of the products that fit 64 bits
	for b := range r.size {
		p, fits := uint64(1), true
		for _, src := range o.srcs {
			l := uint64(r.st[src].lens[b])
			if l == 0 { // an empty bag: no tuples, whatever the others hold
				p, fits = 0, true
				break
			}
			h, low := bits.Mul64(p, l)
			p, fits = low, fits && h == 0
		}
		if fits {
			var c uint64
			lo, c = bits.Add64(lo, p, 0)
			hi += c
			continue
		}
		prod := big.NewInt(1)
		for _, src := range o.srcs {
			prod.Mul(prod, big.NewInt(r.st[src].lens[b]))
		}
		total.Add(total, prod)
	}
	sum := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
	return total.Add(total, sum.Add(sum, new(big.Int).SetUint64(lo)))
}

func itoa(v int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// memberOut is where one member of a structural group writes: its new offsets, values of its kind
// and (weighted features) weights.
type memberOut struct {
	kind Kind
	offs []int64
	ints []int64
	f32  []float32
	f64  []float64
	w    []float32
}

// viewAs views n float32 or float64 values in int64 words (no pointers in either type).
func viewAs[T float32 | float64](words []int64, n int) []T {
	if n == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(words))), n)
}

// outKind is the element kind a member's op leaves: filter and truncate keep a float field's
// values; everything else makes int64 IDs.
func (r *run) outKind(m member) Kind {
	o := &r.e.feats[m.feat].ops[m.op]
	if o.kind == OpFilter || o.kind == OpTruncate {
		return r.st[m.feat].kind
	}
	return KindInt64
}

// weighted reports whether a member's output carries weights: its input did, or (cross) any of
// the crossed features did.
func (r *run) weighted(m member) bool {
	for _, f := range r.sources(m) {
		if r.st[f].w != nil {
			return true
		}
	}
	return false
}

// sources are the features whose values member m reads.
func (r *run) sources(m member) []int {
	o := &r.e.feats[m.feat].ops[m.op]
	if o.kind == OpCross {
		return o.srcs
	}
	return []int{m.feat}
}

// eachBag calls body(member, b0, b1) over the M·B bags of a group in parallel tiles.
func (r *run) eachBag(M int, body func(i, b0, b1 int)) {
	B := r.size
	parallel.ForN(r.workers, M*B, minBagChunk, func(lo, hi int) {
		for lo < hi {
			i, b0 := lo/B, lo%B
			b1 := min(B, b0+(hi-lo))
			body(i, b0, b1)
			lo += b1 - b0
		}
	})
}

// bagLengths writes the new lengths of bags [b0, b0+len(out)) of member m; a cross product's length
// saturates at ceiling (beyond any allowed size), so it never overflows.
func (r *run) bagLengths(m member, out []int64, b0 int, ceiling int64) {
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
			lo, hi := s.offs[b0+j], s.offs[b0+j+1]
			switch s.kind {
			case KindFloat32:
				out[j] = int64(kernels.FilterCount(s.f32[lo:hi], &o.ffilter))
			case KindFloat64:
				out[j] = int64(kernels.FilterCount(s.f64[lo:hi], &o.ffilter))
			default:
				out[j] = int64(kernels.FilterCount(s.ints[lo:hi], &o.ifilter))
			}
		}
	case OpCross:
		for j := range out {
			p := int64(1)
			for _, src := range o.srcs {
				l := r.st[src].lens[b0+j]
				if l == 0 {
					p = 0
					break
				}
				if p > ceiling/l {
					p = ceiling
				} else {
					p *= l
				}
			}
			out[j] = min(p, ceiling)
		}
	default:
		panic("feature: not a structural op: " + o.kind.String())
	}
}

// bagValues writes the values (and weights) of bags [b0, b1) of member m into out.
func (r *run) bagValues(m member, out *memberOut, b0, b1 int) {
	o := &r.e.feats[m.feat].ops[m.op]
	s := &r.st[m.feat]
	offs := out.offs
	switch o.kind {
	case OpTruncate:
		switch s.kind {
		case KindFloat32:
			truncateBags(out.f32, s.f32, s.offs, offs, s.lens, o, b0, b1)
		case KindFloat64:
			truncateBags(out.f64, s.f64, s.offs, offs, s.lens, o, b0, b1)
		default:
			truncateBags(out.ints, s.ints, s.offs, offs, s.lens, o, b0, b1)
		}
		if out.w != nil {
			truncateBags(out.w, s.w, s.offs, offs, s.lens, o, b0, b1)
		}
	case OpFillMissing:
		fillBags(out.ints, s.ints, s.offs, offs, s.lens, o.def, b0, b1)
		if out.w != nil {
			fillBags(out.w, s.w, s.offs, offs, s.lens, 1, b0, b1)
		}
	case OpFilter:
		// Kept values of consecutive bags are consecutive: one pass over the whole range.
		lo, hi := s.offs[b0], s.offs[b1]
		var sw, dw []float32
		if out.w != nil {
			sw, dw = s.w[lo:hi], out.w[offs[b0]:offs[b1]]
		}
		switch s.kind {
		case KindFloat32:
			kernels.FilterCopy(out.f32[offs[b0]:offs[b1]], dw, s.f32[lo:hi], sw, &o.ffilter)
		case KindFloat64:
			kernels.FilterCopy(out.f64[offs[b0]:offs[b1]], dw, s.f64[lo:hi], sw, &o.ffilter)
		default:
			kernels.FilterCopy(out.ints[offs[b0]:offs[b1]], dw, s.ints[lo:hi], sw, &o.ifilter)
		}
	case OpCross:
		var bagsArr [kernels.MaxCrossFields][]int64
		var wsArr [kernels.MaxCrossFields][]float32
		bags := bagsArr[:len(o.srcs)]
		var ws [][]float32
		if out.w != nil {
			ws = wsArr[:len(o.srcs)]
		}
		for b := b0; b < b1; b++ {
			for j, src := range o.srcs {
				a := &r.st[src]
				bags[j] = a.ints[a.offs[b]:a.offs[b+1]]
				if ws != nil {
					ws[j] = nil
					if a.w != nil {
						ws[j] = a.w[a.offs[b]:a.offs[b+1]]
					}
				}
			}
			var dw []float32
			if out.w != nil {
				dw = out.w[offs[b]:offs[b+1]]
			}
			kernels.CrossBags(out.ints[offs[b]:offs[b+1]], dw, bags, ws, o.seed)
		}
	}
}

// truncateBags copies bags [b0, b1) of src (offsets soffs, lengths lens) into dst (offsets doffs),
// each cut to its first or last o.n elements. Bags that keep all their elements are contiguous in
// both source and destination, so runs of them move with one copy.
func truncateBags[T any](dst, src []T, soffs, doffs, lens []int64, o *op, b0, b1 int) {
	runSrc, runDst := soffs[b0], doffs[b0]
	for b := b0; b < b1; b++ {
		if lens[b] <= o.n {
			continue
		}
		copy(dst[runDst:doffs[b]], src[runSrc:soffs[b]])
		lo := soffs[b]
		if o.keepLast {
			lo = soffs[b+1] - o.n
		}
		copy(dst[doffs[b]:doffs[b+1]], src[lo:lo+o.n])
		runSrc, runDst = soffs[b+1], doffs[b+1]
	}
	copy(dst[runDst:doffs[b1]], src[runSrc:soffs[b1]])
}

// fillBags copies bags [b0, b1) of src into dst, an empty bag becoming the one-element bag [def].
func fillBags[T any](dst, src []T, soffs, doffs, lens []int64, def T, b0, b1 int) {
	runSrc, runDst := soffs[b0], doffs[b0]
	for b := b0; b < b1; b++ {
		if lens[b] != 0 {
			continue
		}
		copy(dst[runDst:doffs[b]], src[runSrc:soffs[b]])
		dst[doffs[b]] = def
		runSrc, runDst = soffs[b+1], doffs[b+1]
	}
	copy(dst[runDst:doffs[b1]], src[runSrc:soffs[b1]])
}
