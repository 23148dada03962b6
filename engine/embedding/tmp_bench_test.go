package embedding

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkTmpApply(b *testing.B) {
	for _, flush := range []bool{false, true} {
		b.Run("", func(b *testing.B) {
			const T, n, k = 26, 50_000, 890
			var tbs []*Table
			var rows [][]int64
			rng := rand.New(rand.NewPCG(1, 1))
			for t := 0; t < T; t++ {
				tb, _ := NewFixedTable("t", int64(n), 64, OptimizerConfig{Kind: OptAdagrad, LR: 0.05, Eps: 1e-8})
				for i := range tb.Data {
					tb.Data[i] = 0.01
				}
				tbs = append(tbs, tb)
				perm := rng.Perm(n)[:k]
				r := make([]int64, k)
				for i, p := range perm {
					r[i] = int64(p)
				}
				rows = append(rows, r)
			}
			g := make([]float32, k*64)
			for i := range g {
				g[i] = 1e-3 * float32(i%7)
			}
			junk := make([]float32, 32<<20)
			for t := range tbs {
				_ = tbs[t].ApplyRows(rows[t], g)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if flush {
					b.StopTimer()
					for j := range junk {
						junk[j]++
					}
					b.StartTimer()
				}
				for t := range tbs {
					_ = tbs[t].ApplyRows(rows[t], g)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*T*k), "ns/row")
		})
	}
}
