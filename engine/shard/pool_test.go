package shard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/stretchr/testify/require"
)

// TestDeduperMatchesHashIndex checks the deduper (dense index for small ID ranges, hash index
// otherwise) against the engine's hash-index deduplication, over ID lists that take either path,
// with one deduper reused across passes as the collection's pools do.
func TestDeduperMatchesHashIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name string
		ids  func() []int64
	}{
		{"empty", func() []int64 { return nil }},
		{"one", func() []int64 { return []int64{7} }},
		{"small range", func() []int64 { return randIDs(rng, 5000, 300) }},
		{"table rows", func() []int64 { return randIDs(rng, 20000, 100_000) }},
		{"dense bound", func() []int64 { return []int64{denseMin - 1, 0, denseMin - 1, 3} }},
		{"past the dense bound", func() []int64 { return []int64{denseMin, 0, denseMin, 5, 0} }},
		{"wide range", func() []int64 { return randIDs(rng, 3000, 1<<40) }},
		{"negative and extreme", func() []int64 { return []int64{-1, 4, math.MinInt64, -1, math.MaxInt64, 4} }},
	}
	var d deduper
	for round := 0; round < 2; round++ {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ids := tc.ids()
				var ref embedding.Deduper
				wantInv := make([]int32, len(ids))
				want := ref.Dedup(ids, nil, wantInv)
				inv := make([]int32, len(ids))
				got := d.dedup(ids, inv, maxID(ids))
				require.Equal(t, len(want), len(got))
				if len(want) > 0 {
					require.Equal(t, want, got)
				}
				require.Equal(t, wantInv, inv)
			})
		}
	}
	for _, w := range d.seen {
		require.Zero(t, w, "the bitmap is clear between passes")
	}
}

func randIDs(rng *rand.Rand, n int, hi int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = rng.Int64N(hi)
	}
	return out
}

// TestPoolsDedupConcurrent runs the collection pools' dedup from several goroutines at once (the
// per-table parallel loops do): each pass gets its own deduper.
func TestPoolsDedupConcurrent(t *testing.T) {
	var p pools
	const G = 8
	errs := make(chan error, G)
	for g := 0; g < G; g++ {
		go func(g int) {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for i := 0; i < 20; i++ {
				ids := randIDs(rng, 2000, int64(100+g*1000))
				inv := make([]int32, len(ids))
				got := p.dedup(ids, inv)
				var ref embedding.Deduper
				wantInv := make([]int32, len(ids))
				want := ref.Dedup(ids, nil, wantInv)
				if !slices.Equal(got, want) || !slices.Equal(inv, wantInv) {
					errs <- fmt.Errorf("goroutine %d pass %d: dedup differs from the hash index", g, i)
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < G; g++ {
		require.NoError(t, <-errs)
	}
}

// TestWarmStepsReuseBuffers runs the same step of a 26-table world (the DLRM shape) again and
// again: once warm, the buffers a step takes come from the collection's free lists. With a fixed
// list length of 32 about 80 of them were allocated (and zeroed) afresh every step. The tables'
// goroutines take and return buffers in an order that varies, so a warm step may still find no
// kept buffer large enough now and then: one such miss per step is allowed.
func TestWarmStepsReuseBuffers(t *testing.T) {
	const T, Bl, dim = 26, 64, 32
	kinds, rows, dims := make([]Kind, T), make([]int64, T), make([]int, T)
	for i := range kinds {
		kinds[i], rows[i], dims[i] = Hash, 5000, dim
	}
	w := newTestWorld(t, 1, 2, Flat, kinds, rows, dims, embedding.OptimizerConfig{Kind: embedding.OptAdagrad, LR: 0.1, Eps: 1e-8})
	rng := rand.New(rand.NewPCG(5, 6))
	W := w.topo.World()
	_, lens, vals := randBatch(rng, T, W*Bl, rows)
	made := func() (n int) {
		for _, c := range w.ranks {
			n += c.pools.f32.made + c.pools.i64.made + c.pools.u8.made
		}
		return n
	}
	const rounds, warmUp = 8, 2
	var warm int
	for step := 0; step < rounds; step++ {
		if step == warmUp {
			warm = made()
		}
		steps, xs := make([]*Step, W), make([]*Exchange, W)
		for r, c := range w.ranks {
			s, err := c.Begin(sliceBatch(lens, vals, r*Bl, (r+1)*Bl))
			require.NoError(t, err)
			steps[r], xs[r] = s, s.X
		}
		runLockstep(t, w.topo, xs)
		for _, s := range steps {
			out := make([]float32, Bl*w.ref.Width())
			require.NoError(t, s.Pool(out))
			require.NoError(t, s.Backward(out, true))
		}
		runLockstep(t, w.topo, xs)
	}
	require.Positive(t, warm, "the first steps fill the lists")
	require.LessOrEqual(t, made()-warm, rounds-warmUp, "warm steps allocate (almost) no pooled buffer")
}
