package kernels

import (
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
		f    Filter
		want []int64
	}{
		{"drop set", Filter{Set: []int64{-1, 3}}, []int64{0, 5, 9}},
		{"keep set", Filter{Set: []int64{-1, 3}, Keep: true}, []int64{3, -1, 3}},
		{"keep range", Filter{ByRange: true, Lo: 0, Hi: 5, Keep: true}, []int64{3, 0, 3}},
		{"drop range", Filter{ByRange: true, Lo: 0, Hi: 5}, []int64{-1, 5, 9}},
	}
	src := []int64{3, -1, 0, 5, 3, 9}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]int64, len(src))
			n := FilterCopy(dst, src, &c.f)
			assert.Equal(t, c.want, dst[:n])
			assert.Equal(t, n, FilterCount(src, &c.f))
		})
	}
	dst := make([]int64, 6)
	CrossBag(dst, []int64{1, 2}, []int64{7, 8, 9}, 5)
	assert.Equal(t, int64(HashPair(2, 8, 5)), dst[4])
	assert.Equal(t, int64(HashPair(1, 9, 5)), dst[2])
}
