package dynamic

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkResolve measures training-mode Resolve of 4096 distinct IDs per batch: "hot" when every ID
// already has a row, "churn" when the IDs are mostly new and the table evicts constantly.
func BenchmarkResolve(b *testing.B) {
	for _, bc := range []struct {
		name  string
		space int64
	}{{"hot", 50_000}, {"churn", 1 << 40}} {
		b.Run(bc.name, func(b *testing.B) {
			tab, err := New(Config{Name: "b", Dim: 64, MaxRows: 100_000, EvictFrac: 0.05})
			if err != nil {
				b.Fatal(err)
			}
			defer tab.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			ids, rows := make([]int64, 4096), make([]int64, 4096)
			fill := func() {
				seen := map[int64]bool{}
				for i := range ids {
					for {
						id := rng.Int64N(bc.space)
						if !seen[id] {
							seen[id] = true
							ids[i] = id
							break
						}
					}
				}
			}
			fill()
			if err := tab.Resolve(ids, rows, true); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(ids)) * 8)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				fill()
				b.StartTimer()
				if err := tab.Resolve(ids, rows, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
