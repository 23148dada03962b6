package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

var scatterPaths = []struct {
	name string
	fn   func(dst []float32, dim int, idx []int32, fresh int32, src []float32, srcBase, srcStride int,
		bounds []int64, weights, scales []float32) int32
}{
	{"dispatch", SegmentScatter},
	{"generic", SegmentScatterGeneric},
}

// scatterCase builds segments whose entries name rows in first-touch order (as a table's dedup
// numbers them), with a rebased bounds window starting at lo.
func scatterCase(r *rand.Rand, segs int, lo int64) (idx []int32, bounds []int64, rows int32) {
	bounds = []int64{lo}
	for i := 0; i < segs; i++ {
		n := int64(r.IntN(5)) // includes empty segments
		bounds = append(bounds, bounds[i]+n)
		for j := int64(0); j < n; j++ {
			if rows == 0 || r.IntN(3) == 0 {
				idx = append(idx, rows)
				rows++
			} else {
				idx = append(idx, int32(r.IntN(int(rows))))
			}
		}
	}
	return idx, bounds, rows
}

func TestSegmentScatter(t *testing.T) {
	cases := []struct {
		dim, segs        int
		weighted, scaled bool
		zeroed           bool // fresh < 0: every entry adds into a caller-zeroed dst
	}{
		{64, 12, false, false, false}, {64, 9, true, true, false}, {64, 7, true, false, true},
		{16, 6, false, true, false}, {48, 8, true, true, true}, {8, 5, true, false, false},
		{24, 7, false, false, true}, {37, 6, true, true, false}, {3, 4, false, false, false}, {64, 0, false, false, false},
	}
	for _, p := range scatterPaths {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/d%d_s%d_w%v_s%v_z%v", p.name, c.dim, c.segs, c.weighted, c.scaled, c.zeroed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(c.dim), uint64(c.segs)))
				const lo = 5
				idx, bounds, rows := scatterCase(r, c.segs, lo)
				srcStride, srcBase := c.dim+7, 3
				src := randVec(r, srcBase+c.segs*srcStride+c.dim)
				var w, sc []float32
				if c.weighted {
					w = randVec(r, len(idx))
				}
				if c.scaled {
					sc = randVec(r, c.segs)
				}
				want := make([]float64, int(rows)*c.dim)
				for i := 0; i < c.segs; i++ {
					for j := bounds[i] - lo; j < bounds[i+1]-lo; j++ {
						s := 1.0
						if w != nil {
							s *= float64(w[j])
						}
						if sc != nil {
							s *= float64(sc[i])
						}
						for k := 0; k < c.dim; k++ {
							want[int(idx[j])*c.dim+k] += s * float64(src[srcBase+i*srcStride+k])
						}
					}
				}
				dst := randVec(r, int(rows)*c.dim) // garbage: first touches must overwrite it
				fresh := int32(0)
				if c.zeroed {
					clear(dst)
					fresh = -1
				}
				got := p.fn(dst, c.dim, idx, fresh, src, srcBase, srcStride, bounds, w, sc)
				if c.zeroed {
					require.Equal(t, int32(-1), got)
				} else {
					require.Equal(t, rows, got, "fresh after the walk")
				}
				requireClose(t, want, dst, 1e-5, "dst")
			})
		}
	}
}

func TestSegmentScatterResumesAcrossCalls(t *testing.T) {
	// A walk split into two calls (as backward splits samples into chunks) matches one call.
	r := rand.New(rand.NewPCG(7, 7))
	idx, bounds, rows := scatterCase(r, 10, 0)
	src := randVec(r, 10*64)
	one := make([]float32, int(rows)*64)
	SegmentScatter(one, 64, idx, 0, src, 0, 64, bounds, nil, nil)
	two := randVec(r, len(one))
	mid := bounds[4]
	fresh := SegmentScatter(two, 64, idx[:mid], 0, src, 0, 64, bounds[:5], nil, nil)
	SegmentScatter(two, 64, idx[mid:], fresh, src, 4*64, 64, bounds[4:], nil, nil)
	require.Equal(t, one, two)
}

func TestSegmentScatterRejectsOutOfOrderRows(t *testing.T) {
	for _, p := range scatterPaths {
		t.Run(p.name, func(t *testing.T) {
			dst := make([]float32, 3*16)
			src := make([]float32, 16)
			require.PanicsWithValue(t, notFirstTouch(2, 0), func() {
				p.fn(dst, 16, []int32{2}, 0, src, 0, 16, []int64{0, 1}, nil, nil)
			})
		})
	}
}

func TestPrefetchRowsIsOnlyAHint(t *testing.T) {
	src := randVec(rand.New(rand.NewPCG(1, 1)), 256)
	before := append([]float32(nil), src...)
	// Negative, huge and in-range offsets, empty inputs: nothing faults, nothing changes.
	PrefetchRows(src, []int64{-1, 0, 64, 1 << 40}, 1, 64)
	PrefetchRows(src, []int64{3}, 64, 64)
	PrefetchRows(nil, []int64{0}, 1, 64)
	PrefetchRows(src, nil, 1, 64)
	PrefetchRows(src, []int64{0}, 1, 0)
	require.Equal(t, before, src)
}

func TestPrefetchBitsIsOnlyAHint(t *testing.T) {
	bits := []uint64{1, 2, 3, 4}
	// Negative, huge and in-range bit numbers, empty inputs: nothing faults, nothing changes.
	PrefetchBits(bits, []int64{-1, 0, 255, 256, 1 << 50})
	PrefetchBits(nil, []int64{0})
	PrefetchBits(bits, nil)
	require.Equal(t, []uint64{1, 2, 3, 4}, bits)
}

func TestPrefetchLinesIsOnlyAHint(t *testing.T) {
	words := []int64{1, 2, 3, 4}
	base := unsafe.Pointer(&words[0])
	PrefetchLines(base, []int64{-1, 0, 3, 1 << 40}, 8, 1) // past the end: still only a hint
	PrefetchLines(nil, []int64{0}, 8, 1)
	PrefetchLines(base, nil, 8, 1)
	PrefetchLines(base, []int64{0}, 8, 0)
	require.Equal(t, []int64{1, 2, 3, 4}, words)
}

func TestPrefetchStridedIsOnlyAHint(t *testing.T) {
	src := randVec(rand.New(rand.NewPCG(2, 2)), 512)
	before := append([]float32(nil), src...)
	PrefetchStrided(src, 0, 128, 4, 64)
	PrefetchStrided(src, 1<<30, 128, 4, 64) // past the end: still only a hint
	PrefetchStrided(src, -1, 128, 4, 64)
	PrefetchStrided(nil, 0, 128, 4, 64)
	PrefetchStrided(src, 0, 128, 0, 64)
	require.Equal(t, before, src)
}
