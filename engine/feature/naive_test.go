package feature

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/recgo/recgo/kernels"
)

// naive applies a spec bag by bag, one feature and one op at a time: the obvious per-field
// reference the fused engine must equal, weights included.
type naive struct {
	spec  *Spec
	batch map[string]Input
	size  int
	memo  map[string]naiveFeature
}

// elem is one value of a bag: an ID or (float fields before bucketize) a number, with its weight.
type elem struct {
	i int64
	f float64
	w float32
}

type naiveFeature struct {
	bags     [][]elem
	weighted bool
}

func bagsOf(in Input, size int) [][]elem {
	lens := in.Lengths
	if lens == nil {
		lens = make([]int64, size)
		for i := range lens {
			lens[i] = 1
		}
	}
	var bags [][]elem
	pos := 0
	for _, l := range lens {
		bag := []elem{}
		for range l {
			e := elem{w: 1}
			if in.Weights != nil {
				e.w = in.Weights[pos]
			}
			switch in.Kind {
			case KindInt64:
				e.i = in.Ints[pos]
			case KindFloat32:
				e.f = float64(in.F32[pos])
			case KindFloat64:
				e.f = in.F64[pos]
			}
			bag = append(bag, e)
			pos++
		}
		bags = append(bags, bag)
	}
	return bags
}

func le64(xs ...int64) []byte {
	var buf []byte
	for _, x := range xs {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(x))
	}
	return buf
}

func seedOf(o OpSpec) uint64 {
	if o.Seed != nil {
		return *o.Seed
	}
	return 0
}

// cross is the Cartesian product of the sources' bags, first source most significant, each tuple
// hashed as the XXH64 of its little-endian bytes; weights multiply.
func (n *naive) cross(o OpSpec) naiveFeature {
	var srcs []naiveFeature
	out := naiveFeature{}
	for _, name := range o.Fields {
		srcs = append(srcs, n.feature(name))
		out.weighted = out.weighted || srcs[len(srcs)-1].weighted
	}
	for s := range n.size {
		tuples := [][]elem{{}}
		for _, src := range srcs {
			var next [][]elem
			for _, t := range tuples {
				for _, e := range src.bags[s] {
					next = append(next, append(append([]elem{}, t...), e))
				}
			}
			tuples = next
		}
		bag := []elem{}
		for _, t := range tuples {
			var ids []int64
			w := float32(1)
			for j, e := range t {
				ids = append(ids, e.i)
				if srcs[j].weighted {
					w *= e.w
				}
			}
			bag = append(bag, elem{i: int64(kernels.XXH64(le64(ids...), seedOf(o))), w: w})
		}
		out.bags = append(out.bags, bag)
	}
	return out
}

func (n *naive) feature(name string) naiveFeature {
	if v, ok := n.memo[name]; ok {
		return v
	}
	var fs FeatureSpec
	for _, f := range n.spec.Features {
		if f.Name == name {
			fs = f
		}
	}
	ops := fs.Ops
	var cur naiveFeature
	isFloat := false
	if len(ops) > 0 && ops[0].Op == "cross" {
		cur = n.cross(ops[0])
		ops = ops[1:]
	} else {
		input := fs.Input
		if input == "" {
			input = fs.Name
		}
		in := n.batch[input]
		cur = naiveFeature{bags: bagsOf(in, n.size), weighted: in.Weights != nil}
		isFloat = in.Kind == KindFloat32 || in.Kind == KindFloat64
		if in.Kind == KindBytes { // the first op is a hash of the strings
			pos, bpos := 0, int64(0)
			for _, bag := range cur.bags {
				for j := range bag {
					bag[j].i = int64(kernels.XXH64(in.Bytes[bpos:bpos+in.ByteLens[pos]], seedOf(ops[0])))
					bpos += in.ByteLens[pos]
					pos++
				}
			}
			ops = ops[1:]
		}
	}
	for _, o := range ops {
		next := make([][]elem, len(cur.bags))
		for s, bag := range cur.bags {
			out := []elem{}
			for j, e := range bag {
				switch o.Op {
				case "hash":
					e.i = int64(kernels.XXH64(le64(e.i), seedOf(o)))
				case "mod":
					e.i = ((e.i % *o.N) + *o.N) % *o.N
				case "bucketize":
					c := int64(0)
					for _, b := range o.Boundaries {
						bi, bf := naiveNum(b)
						if (isFloat && bf <= e.f) || (!isFloat && bi <= e.i) {
							c++
						}
					}
					e.i = c
				case "position":
					e.i = int64(j)
					if o.From != nil && *o.From == "last" {
						e.i = int64(len(bag) - 1 - j)
					}
				case "recency":
					e.i = n.batch[o.Reference].Ints[s] - e.i
				case "filter", "mask":
					if !naiveKeeps(o, e, isFloat) {
						continue
					}
				}
				out = append(out, e)
			}
			switch o.Op {
			case "truncate":
				if int64(len(bag)) > *o.N {
					if o.Keep != nil && *o.Keep == "last" {
						out = out[int64(len(bag))-*o.N:]
					} else {
						out = out[:*o.N]
					}
				}
			case "fill_missing":
				if len(bag) == 0 {
					out = []elem{{i: *o.Default, w: 1}}
				}
			}
			next[s] = out
		}
		cur.bags = next
		if o.Op == "bucketize" || o.Op == "position" {
			isFloat = false
		}
	}
	n.memo[name] = cur
	return cur
}

// naiveNum reads a filter value or a bucketize boundary both ways, as an ID field's int64 and as a
// float field's float64 (the engine has rejected a spec whose numbers do not fit its fields).
func naiveNum(x Number) (int64, float64) {
	i, _ := x.int64()
	f, _ := x.float64()
	return i, f
}

func naiveKeeps(o OpSpec, e elem, isFloat bool) bool {
	in := false
	if o.Range != nil {
		loI, loF := naiveNum(o.Range[0])
		hiI, hiF := naiveNum(o.Range[1])
		if isFloat {
			in = e.f >= loF && e.f < hiF
		} else {
			in = e.i >= loI && e.i < hiI
		}
	} else {
		for _, v := range o.Values {
			vi, vf := naiveNum(v)
			in = in || (isFloat && vf == e.f) || (!isFloat && vi == e.i)
		}
	}
	keep := o.Mode != nil && *o.Mode == "keep"
	return in == keep
}

// randomCase builds a random spec (chains of 0–5 ops; float, bytes, weighted and cross features of
// two to four fields; positions and recencies against a dense "now" input) and batch.
func randomCase(r *rand.Rand, nfeat, size int) (*Spec, Batch, map[string]Input) {
	spec := &Spec{}
	var batch Batch
	batch.Size = size
	named := map[string]Input{}
	now := Input{Kind: KindInt64, Ints: make([]int64, size)}
	for i := range now.Ints {
		now.Ints[i] = 1000 + int64(r.IntN(50))
	}
	named["now"] = now
	randLens := func() []int64 {
		if r.IntN(4) == 0 {
			return nil
		}
		l := make([]int64, size)
		for i := range l {
			l[i] = int64(r.IntN(6))
			if r.IntN(20) == 0 {
				l[i] = int64(r.IntN(40))
			}
		}
		return l
	}
	total := func(l []int64) int {
		if l == nil {
			return size
		}
		t := 0
		for _, x := range l {
			t += int(x)
		}
		return t
	}
	weights := func(n int) []float32 {
		if r.IntN(3) != 0 {
			return nil
		}
		w := make([]float32, n)
		for i := range w {
			w[i] = float32(r.IntN(16)) / 4
		}
		return w
	}
	intOps := func() []OpSpec {
		var ops []OpSpec
		for range r.IntN(5) {
			switch r.IntN(9) {
			case 0:
				ops = append(ops, OpSpec{Op: "hash", Seed: ptr(r.Uint64())})
			case 1:
				ops = append(ops, OpSpec{Op: "mod", N: ptr(int64(1 + r.IntN(50)))})
			case 2:
				ops = append(ops, OpSpec{Op: "bucketize", Boundaries: IntNumbers(-3, 0, 5, 17)})
			case 3:
				ops = append(ops, OpSpec{Op: "truncate", N: ptr(int64(1 + r.IntN(4))), Keep: ptr([]string{"first", "last"}[r.IntN(2)])})
			case 4:
				ops = append(ops, OpSpec{Op: "filter", Values: IntNumbers(0, 3, 7), Mode: ptr([]string{"drop", "keep"}[r.IntN(2)])})
			case 5:
				ops = append(ops, OpSpec{Op: "mask", Range: IntNumbers(-5, 10)})
			case 6:
				ops = append(ops, OpSpec{Op: "fill_missing", Default: ptr(int64(-1))})
			case 7:
				ops = append(ops, OpSpec{Op: "position", From: ptr([]string{"first", "last"}[r.IntN(2)])})
			case 8:
				ops = append(ops, OpSpec{Op: "recency", Reference: "now"})
			}
		}
		return ops
	}
	var ints []string
	for f := range nfeat {
		name := fmt.Sprintf("f%d", f)
		fs := FeatureSpec{Name: name}
		switch k := r.IntN(6); {
		case k == 0 && len(ints) >= 2:
			var fields []string
			for range 2 + r.IntN(3) {
				fields = append(fields, ints[r.IntN(len(ints))])
			}
			fs.Ops = append([]OpSpec{{Op: "cross", Fields: fields, Seed: ptr(uint64(7))}}, intOps()...)
			if r.IntN(2) == 0 {
				fs.Output = ptr(false)
			}
		case k == 1:
			fs.DType = Float
			lens := randLens()
			in := Input{Kind: KindFloat64, Lengths: lens}
			if r.IntN(2) == 0 {
				in.Kind = KindFloat32
			}
			for range total(lens) {
				v := math.Round(r.NormFloat64()*40) / 4
				in.F64 = append(in.F64, v)
				in.F32 = append(in.F32, float32(v))
			}
			if in.Kind == KindFloat32 {
				in.F64 = nil
			} else {
				in.F32 = nil
			}
			in.Weights = weights(total(lens))
			var pre []OpSpec
			switch r.IntN(4) {
			case 0:
				pre = append(pre, OpSpec{Op: "filter", Range: FloatNumbers(-5.5, 6.25), Mode: ptr("keep")})
			case 1:
				pre = append(pre, OpSpec{Op: "filter", Values: FloatNumbers(0, 0.25, -2.5)})
			case 2:
				pre = append(pre, OpSpec{Op: "truncate", N: ptr(int64(2)), Keep: ptr("last")})
			}
			fs.Ops = append(append(pre, OpSpec{Op: "bucketize", Boundaries: FloatNumbers(-2.5, 0, 0.25, 4)}), intOps()...)
			named[name] = in
		case k == 2:
			fs.DType = Bytes
			lens := randLens()
			in := Input{Kind: KindBytes, Lengths: lens}
			for range total(lens) {
				s := fmt.Sprintf("%x", r.IntN(1<<r.IntN(20)))
				in.Bytes = append(in.Bytes, s...)
				in.ByteLens = append(in.ByteLens, int64(len(s)))
			}
			in.Weights = weights(total(lens))
			fs.Ops = append([]OpSpec{{Op: "hash", Seed: ptr(uint64(r.IntN(3)))}}, intOps()...)
			named[name] = in
		default:
			lens := randLens()
			in := Input{Kind: KindInt64, Lengths: lens}
			for range total(lens) {
				in.Ints = append(in.Ints, int64(r.IntN(30))-10)
			}
			in.Weights = weights(total(lens))
			fs.Ops = intOps()
			named[name] = in
		}
		if fs.DType != Float && fs.DType != Bytes {
			ints = append(ints, name)
		}
		spec.Features = append(spec.Features, fs)
	}
	return spec, batch, named
}
