package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every size runs the public (possibly vectorised) kernel and the portable one on the same input.
var transformSizes = []int{0, 1, 7, 8, 9, 63, 1000}

func TestHashIDsBothPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range transformSizes {
		src := make([]int64, n)
		for i := range src {
			src[i] = int64(r.Uint64())
		}
		seed := r.Uint64()
		fast, slow := make([]int64, n), make([]int64, n)
		HashIDs(fast, src, seed)
		HashIDsGeneric(slow, src, seed)
		require.Equal(t, slow, fast, "n=%d", n)
		for i, x := range src {
			assert.Equal(t, int64(HashID(x, seed)), slow[i])
		}
		inPlace := slices.Clone(src)
		HashIDs(inPlace, inPlace, seed)
		assert.Equal(t, slow, inPlace)
	}
}

func randomBounds(r *rand.Rand, k int) []float64 {
	seen := map[float64]bool{}
	var b []float64
	for len(b) < k {
		v := math.Round(r.NormFloat64()*100) / 4
		if !seen[v] {
			seen[v] = true
			b = append(b, v)
		}
	}
	sort.Float64s(b)
	return b
}

func bruteBucket(bounds []float64, x float64) int64 {
	n := int64(0)
	for _, b := range bounds {
		if b <= x {
			n++
		}
	}
	return n
}

func TestBucketizeBothPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{1, 3, 32, 33, 100} {
		bounds := randomBounds(r, k)
		for _, n := range transformSizes {
			src := make([]float64, n)
			src32 := make([]float32, n)
			for i := range src {
				if r.IntN(3) == 0 && k > 0 {
					src[i] = bounds[r.IntN(k)] // exactly on a boundary
				} else {
					src[i] = math.Round(r.NormFloat64()*100) / 4
				}
				src32[i] = float32(src[i])
			}
			want := make([]int64, n)
			for i, x := range src {
				want[i] = bruteBucket(bounds, x)
			}
			for name, run := range map[string]func(dst []int64) int{
				"f64":         func(d []int64) int { return BucketizeFloat64(d, src, bounds) },
				"f64-generic": func(d []int64) int { return BucketizeFloat64Generic(d, src, bounds) },
				"f32":         func(d []int64) int { return BucketizeFloat32(d, src32, bounds) },
				"f32-generic": func(d []int64) int { return BucketizeFloat32Generic(d, src32, bounds) },
			} {
				got := make([]int64, n)
				assert.Equal(t, -1, run(got), "%s k=%d n=%d", name, k, n)
				assert.Equal(t, want, got, "%s k=%d n=%d", name, k, n)
			}
			ib := make([]int64, k)
			isrc := make([]int64, n)
			iwant := make([]int64, n)
			for i := range ib {
				ib[i] = int64(bounds[i] * 4)
			}
			for i := range isrc {
				isrc[i] = int64(src[i] * 4)
				iwant[i] = bruteBucket(bounds, float64(isrc[i])/4)
			}
			BucketizeInt64(isrc, isrc, ib)
			assert.Equal(t, iwant, isrc)
		}
	}
}

func TestBucketizeReportsFirstNaN(t *testing.T) {
	bounds := []float64{0, 1}
	for _, at := range []int{0, 5, 8, 17} {
		src := make([]float64, 20)
		src[at] = math.NaN()
		src[19] = math.NaN()
		src32 := make([]float32, 20)
		for i, v := range src {
			src32[i] = float32(v)
		}
		dst := make([]int64, 20)
		assert.Equal(t, at, BucketizeFloat64(dst, src, bounds))
		assert.Equal(t, at, BucketizeFloat64Generic(dst, src, bounds))
		assert.Equal(t, at, BucketizeFloat32(dst, src32, bounds))
		assert.Equal(t, at, BucketizeFloat32Generic(dst, src32, bounds))
	}
}

func TestModFloor(t *testing.T) {
	src := []int64{-7, -1, 0, 6, 7, math.MinInt64, math.MaxInt64}
	dst := make([]int64, len(src))
	ModFloor(dst, src, 7)
	for i, x := range src {
		want := x % 7
		if want < 0 {
			want += 7
		}
		assert.Equal(t, want, dst[i])
		assert.GreaterOrEqual(t, dst[i], int64(0))
	}
}

func TestFilterAndCross(t *testing.T) {
	cases := []struct {
		name string
		f    Filter[int64]
		want []int64
	}{
		{"drop set", Filter[int64]{Set: []int64{-1, 3}}, []int64{0, 5, 9}},
		{"keep set", Filter[int64]{Set: []int64{-1, 3}, Keep: true}, []int64{3, -1, 3}},
		{"keep range", Filter[int64]{ByRange: true, Lo: 0, Hi: 5, Keep: true}, []int64{3, 0, 3}},
		{"drop range", Filter[int64]{ByRange: true, Lo: 0, Hi: 5}, []int64{-1, 5, 9}},
	}
	src := []int64{3, -1, 0, 5, 3, 9}
	srcW := []float32{0.5, 1, 2, 3, 4, 5}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]int64, len(src))
			n := FilterCopy(dst, nil, src, nil, &c.f)
			assert.Equal(t, c.want, dst[:n])
			assert.Equal(t, n, FilterCount(src, &c.f))
			dstW := make([]float32, len(src))
			clear(dst)
			require.Equal(t, n, FilterCopy(dst, dstW, src, srcW, &c.f))
			assert.Equal(t, c.want, dst[:n])
			var wantW []float32 // each kept value keeps its own weight
			for i, x := range src {
				if c.f.Keeps(x) {
					wantW = append(wantW, srcW[i])
				}
			}
			assert.Equal(t, wantW, dstW[:n])
		})
	}
	dst := make([]int64, 6)
	CrossBag(dst, []int64{1, 2}, []int64{7, 8, 9}, 5)
	assert.Equal(t, int64(HashPair(2, 8, 5)), dst[4])
	assert.Equal(t, int64(HashPair(1, 9, 5)), dst[2])
}

func TestFilterFloat(t *testing.T) {
	nan := float32(math.NaN())
	src := []float32{0.5, nan, -1, 2.25, 7}
	f := Filter[float64]{ByRange: true, Lo: -1, Hi: 2.25, Keep: true}
	dst := make([]float32, len(src))
	n := FilterCopy(dst, nil, src, nil, &f)
	assert.Equal(t, []float32{0.5, -1}, dst[:n], "NaN is inside no range; hi is excluded")
	drop := Filter[float64]{Set: []float64{0.5, 7}}
	n = FilterCopy(dst, nil, src, nil, &drop)
	assert.Equal(t, 3, n)
	assert.True(t, math.IsNaN(float64(dst[0])), "a NaN is in no set, so drop keeps it")
	assert.Equal(t, []float32{-1, 2.25}, dst[1:n])
}

// TestHashTupleIsXXH64OfTheBytes checks the lane hash against the byte-string XXH64 for every
// tuple length up to past two 32-byte stripes.
func TestHashTupleIsXXH64OfTheBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for k := range 10 {
		for range 20 {
			xs := make([]int64, k)
			buf := make([]byte, 0, 8*k)
			for i := range xs {
				xs[i] = int64(r.Uint64())
				buf = binary.LittleEndian.AppendUint64(buf, uint64(xs[i]))
			}
			seed := r.Uint64()
			require.Equal(t, XXH64(buf, seed), HashTuple(xs, seed), "k=%d", k)
		}
	}
	assert.Equal(t, HashPair(3, -4, 9), HashTuple([]int64{3, -4}, 9))
	assert.Equal(t, HashID(-3, 9), HashTuple([]int64{-3}, 9))
}

func TestCrossBagsOrderAndWeights(t *testing.T) {
	bags := [][]int64{{1, 2}, {7}, {4, 5, 6}}
	ws := [][]float32{{0.5, 2}, nil, {1, 3, 10}}
	dst := make([]int64, 6)
	dstW := make([]float32, 6)
	CrossBags(dst, dstW, bags, ws, 11)
	k := 0
	for i, x := range bags[0] {
		for _, y := range bags[1] {
			for l, z := range bags[2] {
				assert.Equal(t, int64(HashTuple([]int64{x, y, z}, 11)), dst[k])
				assert.Equal(t, ws[0][i]*ws[2][l], dstW[k])
				k++
			}
		}
	}
	two := make([]int64, 2)
	CrossBags(two, nil, [][]int64{{1, 2}, {7}}, nil, 5)
	assert.Equal(t, []int64{int64(HashPair(1, 7, 5)), int64(HashPair(2, 7, 5))}, two)
	CrossBags(nil, nil, [][]int64{{1}, {}}, nil, 5) // an empty bag: nothing to write
}
