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
				got := d.dedup(ids, inv)
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
