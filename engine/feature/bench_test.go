package feature

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// benchCase is a 2,000-field config shaped like recgo.feature.synthetic: categorical (hash, mod),
// long-tailed sequences (truncate, hash, mod), dense floats (bucketize, hash, mod), crosses.
func benchCase(nfeat, size int) (*Engine, Batch) {
	r := rand.New(rand.NewPCG(1, 1))
	spec := &Spec{}
	var b Batch
	b.Size = size
	for f := range nfeat {
		name := fmt.Sprint("f", f)
		switch {
		case f%10 < 6 || f < 2:
			spec.Features = append(spec.Features, FeatureSpec{Name: name, Ops: []OpSpec{{Op: "hash"}, {Op: "mod", N: ptr(int64(100000))}}})
			in := Input{Kind: KindInt64, Ints: make([]int64, size)}
			for i := range in.Ints {
				in.Ints[i] = int64(r.IntN(1 << 20))
			}
			b.Inputs = append(b.Inputs, in)
		case f%10 < 8:
			spec.Features = append(spec.Features, FeatureSpec{Name: name, Ops: []OpSpec{{Op: "truncate", N: ptr(int64(50)), Keep: ptr("last")}, {Op: "hash"}, {Op: "mod", N: ptr(int64(100000))}}})
			in := Input{Kind: KindInt64, Lengths: make([]int64, size)}
			for i := range in.Lengths {
				l := min(int64(math.Exp(r.NormFloat64()*1.2+1.35)), 500)
				in.Lengths[i] = l
				for range l {
					in.Ints = append(in.Ints, int64(r.IntN(1<<20)))
				}
			}
			b.Inputs = append(b.Inputs, in)
		case f%10 < 9:
			spec.Features = append(spec.Features, FeatureSpec{Name: name, DType: Float, Ops: []OpSpec{{Op: "bucketize", Boundaries: FloatNumbers(0, 1, 2, 5, 10, 20, 50, 100, 200, 500)}, {Op: "hash"}, {Op: "mod", N: ptr(int64(1000))}}})
			in := Input{Kind: KindFloat32, F32: make([]float32, size)}
			for i := range in.F32 {
				in.F32[i] = float32(r.NormFloat64() * 100)
			}
			b.Inputs = append(b.Inputs, in)
		default:
			spec.Features = append(spec.Features, FeatureSpec{Name: name, Ops: []OpSpec{{Op: "cross", Fields: []string{"f0", "f1"}}, {Op: "mod", N: ptr(int64(100000))}}})
		}
	}
	eng, err := Compile(spec)
	if err != nil {
		panic(err)
	}
	return eng, b
}

// benchApply times Apply on benchCase(nfeat, size).
func benchApply(b *testing.B, nfeat, size int) {
	eng, batch := benchCase(nfeat, size)
	b.ResetTimer()
	for b.Loop() {
		res, err := eng.Apply(batch)
		if err != nil {
			b.Fatal(err)
		}
		res.Release()
	}
}

func BenchmarkApply2000(b *testing.B) { benchApply(b, 2000, 4096) }

func BenchmarkApply26(b *testing.B) { benchApply(b, 26, 4096) }
