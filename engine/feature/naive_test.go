package feature

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/recgo/recgo/kernels"
)

// naive applies a spec bag by bag, one feature and one op at a time: the obvious per-field
// reference the fused engine must equal.
type naive struct {
	spec  *Spec
	batch map[string]Input
	size  int
	memo  map[string][][]int64
}

func bagsOf(in Input, size int) (ints [][]int64, floats [][]float64, strs [][][]byte) {
	lens := in.Lengths
	if lens == nil {
		lens = make([]int64, size)
		for i := range lens {
			lens[i] = 1
		}
	}
	pos, bpos := 0, int64(0)
	for _, l := range lens {
		var bi []int64
		var bf []float64
		var bs [][]byte
		for range l {
			switch in.Kind {
			case KindInt64:
				bi = append(bi, in.Ints[pos])
			case KindFloat32:
				bf = append(bf, float64(in.F32[pos]))
			case KindFloat64:
				bf = append(bf, in.F64[pos])
			case KindBytes:
				bs = append(bs, in.Bytes[bpos:bpos+in.ByteLens[pos]])
				bpos += in.ByteLens[pos]
			}
			pos++
		}
		ints, floats, strs = append(ints, bi), append(floats, bf), append(strs, bs)
	}
	return
}

func (n *naive) feature(name string) [][]int64 {
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
	var bags [][]int64
	if len(ops) > 0 && ops[0].Op == "cross" {
		a, b := n.feature(ops[0].Fields[0]), n.feature(ops[0].Fields[1])
		seed := uint64(0)
		if ops[0].Seed != nil {
			seed = *ops[0].Seed
		}
		for s := range n.size {
			var out []int64
			for _, x := range a[s] {
				for _, y := range b[s] {
					var buf [16]byte
					for k := range 8 {
						buf[k] = byte(uint64(x) >> (8 * k))
						buf[8+k] = byte(uint64(y) >> (8 * k))
					}
					out = append(out, int64(kernels.XXH64(buf[:], seed)))
				}
			}
			bags = append(bags, out)
		}
		ops = ops[1:]
	} else {
		input := fs.Input
		if input == "" {
			input = fs.Name
		}
		ints, floats, strs := bagsOf(n.batch[input], n.size)
		switch n.batch[input].Kind {
		case KindInt64:
			bags = ints
		case KindBytes:
			seed := uint64(0)
			if ops[0].Seed != nil {
				seed = *ops[0].Seed
			}
			for _, bag := range strs {
				var out []int64
				for _, s := range bag {
					out = append(out, int64(kernels.XXH64(s, seed)))
				}
				bags = append(bags, out)
			}
			ops = ops[1:]
		default:
			for _, bag := range floats {
				var out []int64
				for _, x := range bag {
					c := int64(0)
					for _, b := range ops[0].Boundaries {
						if b <= x {
							c++
						}
					}
					out = append(out, c)
				}
				bags = append(bags, out)
			}
			ops = ops[1:]
		}
	}
	for _, o := range ops {
		next := make([][]int64, len(bags))
		for s, bag := range bags {
			var out []int64
			switch o.Op {
			case "hash":
				for _, x := range bag {
					var buf [8]byte
					for k := range 8 {
						buf[k] = byte(uint64(x) >> (8 * k))
					}
					seed := uint64(0)
					if o.Seed != nil {
						seed = *o.Seed
					}
					out = append(out, int64(kernels.XXH64(buf[:], seed)))
				}
			case "mod":
				for _, x := range bag {
					out = append(out, ((x%*o.N)+*o.N)%*o.N)
				}
			case "bucketize":
				for _, x := range bag {
					c := int64(0)
					for _, b := range o.Boundaries {
						if int64(b) <= x {
							c++
						}
					}
					out = append(out, c)
				}
			case "truncate":
				out = bag
				if int64(len(bag)) > *o.N {
					if o.Keep != nil && *o.Keep == "last" {
						out = bag[int64(len(bag))-*o.N:]
					} else {
						out = bag[:*o.N]
					}
				}
			case "filter", "mask":
				for _, x := range bag {
					in := false
					if o.Range != nil {
						in = x >= o.Range[0] && x < o.Range[1]
					} else {
						for _, v := range o.Values {
							in = in || v == x
						}
					}
					keep := o.Mode != nil && *o.Mode == "keep"
					if in == keep {
						out = append(out, x)
					}
				}
			case "fill_missing":
				out = bag
				if len(bag) == 0 {
					out = []int64{*o.Default}
				}
			}
			next[s] = append([]int64{}, out...)
		}
		bags = next
	}
	n.memo[name] = bags
	return bags
}

// randomCase builds a random spec (chains of 0–5 ops, float, bytes and cross features) and batch.
func randomCase(r *rand.Rand, nfeat, size int) (*Spec, Batch, map[string]Input) {
	spec := &Spec{}
	var batch Batch
	batch.Size = size
	named := map[string]Input{}
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
	intOps := func() []OpSpec {
		var ops []OpSpec
		for range r.IntN(5) {
			switch r.IntN(7) {
			case 0:
				ops = append(ops, OpSpec{Op: "hash", Seed: ptr(r.Uint64())})
			case 1:
				ops = append(ops, OpSpec{Op: "mod", N: ptr(int64(1 + r.IntN(50)))})
			case 2:
				ops = append(ops, OpSpec{Op: "bucketize", Boundaries: []float64{-3, 0, 5, 17}})
			case 3:
				ops = append(ops, OpSpec{Op: "truncate", N: ptr(int64(1 + r.IntN(4))), Keep: ptr([]string{"first", "last"}[r.IntN(2)])})
			case 4:
				ops = append(ops, OpSpec{Op: "filter", Values: []int64{0, 3, 7}, Mode: ptr([]string{"drop", "keep"}[r.IntN(2)])})
			case 5:
				ops = append(ops, OpSpec{Op: "mask", Range: []int64{-5, 10}})
			case 6:
				ops = append(ops, OpSpec{Op: "fill_missing", Default: ptr(int64(-1))})
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
			a, b := ints[r.IntN(len(ints))], ints[r.IntN(len(ints))]
			fs.Ops = append([]OpSpec{{Op: "cross", Fields: []string{a, b}, Seed: ptr(uint64(7))}}, intOps()...)
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
			fs.Ops = append([]OpSpec{{Op: "bucketize", Boundaries: []float64{-2.5, 0, 0.25, 4}}}, intOps()...)
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
			fs.Ops = append([]OpSpec{{Op: "hash", Seed: ptr(uint64(r.IntN(3)))}}, intOps()...)
			named[name] = in
		default:
			lens := randLens()
			in := Input{Kind: KindInt64, Lengths: lens}
			for range total(lens) {
				in.Ints = append(in.Ints, int64(r.IntN(30))-10)
			}
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
