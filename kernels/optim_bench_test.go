package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkOptimizerRows times each row update on 4,096 scattered rows of a 100k-row table over
// widths around the vector widths (a width the vector kernels do not take runs the portable ones).
func BenchmarkOptimizerRows(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	const tableRows, n = 100_000, 4096
	rows := make([]int64, n)
	for i, k := range r.Perm(tableRows)[:n] {
		rows[i] = int64(k)
	}
	for _, dim := range []int{8, 12, 16, 20, 24, 40, 44, 48} {
		w, g := randVec(r, tableRows*dim), randVec(r, n*dim)
		s := randVec(r, tableRows*2*dim)
		for i := range s {
			s[i] *= s[i]
		}
		adam := NewAdamParams(0.01, 0.9, 0.999, 1e-8, 0, false, 3)
		for _, c := range []struct {
			name string
			run  func()
		}{
			{"sgd", func() { SGDRows(w, dim, dim, rows, g, 1e-3) }},
			{"adagrad", func() { AdagradRows(w, dim, s, dim, dim, rows, g, 1e-3, 1e-8) }},
			{"adam", func() { AdamRows(w, dim, s, 2*dim, dim, rows, g, adam) }},
		} {
			b.Run(fmt.Sprintf("%s/dim%d", c.name, dim), func(b *testing.B) {
				for b.Loop() {
					c.run()
				}
			})
		}
	}
}

// BenchmarkSegmentScatter times the backward's per-row merge of 4,096 bags of 1 to 10 entries into
// their distinct rows (numbered in first-touch order, as the engine numbers them) over widths around
// the vector widths.
func BenchmarkSegmentScatter(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	const bags, tableRows = 4096, 100_000
	bounds := bagBounds(r, bags, 10)
	idx := make([]int32, bounds[bags])
	seen := map[int]int32{}
	for j := range idx {
		id := r.IntN(tableRows)
		u, ok := seen[id]
		if !ok {
			u = int32(len(seen))
			seen[id] = u
		}
		idx[j] = u
	}
	for _, dim := range []int{8, 12, 16, 20, 24, 32, 64} {
		src, dst := randVec(r, bags*dim), make([]float32, len(seen)*dim)
		b.Run(fmt.Sprintf("dim%d", dim), func(b *testing.B) {
			for b.Loop() {
				SegmentScatter(dst, dim, idx, 0, src, 0, dim, bounds, nil, nil)
			}
		})
	}
}
