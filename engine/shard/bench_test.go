package shard

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
)

// BenchmarkStepWorld2 is one training step (forward exchange, pooling, backward exchange, SGD) of
// both ranks of a loopback world of 2: 8 tables × 100k × 64, 512 samples per rank, Zipf IDs, bags
// of 1–30 — the shape of benchmarks/distributed.py, without the transport — hash-sharded and
// table-wise (tables alternating between the ranks), owner pooling auto.
func BenchmarkStepWorld2(b *testing.B) {
	for _, kind := range []Kind{Hash, TableWise} {
		b.Run(kind.String(), func(b *testing.B) { benchStepWorld2(b, kind) })
	}
}

func benchStepWorld2(b *testing.B, kind Kind) {
	const T, rows, dim, B = 8, 100_000, 64, 512
	topo, _ := NewTopology(1, 2, 2)
	opt := embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.05}
	var feats []embedding.Feature
	for t := 0; t < T; t++ {
		feats = append(feats, embedding.Feature{Name: fmt.Sprintf("f%d", t), Table: t})
	}
	cs := make([]*Collection, 2)
	for r := range cs {
		var ls []*Layout
		for t := 0; t < T; t++ {
			l, _ := NewLayout(fmt.Sprintf("t%d", t), rows, dim, kind, t%2, 2)
			ls = append(ls, l)
		}
		cs[r], _ = NewCollection(ls, topo, r, Flat, opt, feats)
		for _, sh := range cs[r].Shards {
			for i := range sh.Data {
				sh.Data[i] = 0.01 // touch the pages, as initial weights do
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	z := rand.NewZipf(rng, 1.05, 1, rows-1)
	batches := make([]embedding.Batch, 2)
	for r := range batches {
		bt := embedding.Batch{}
		for t := 0; t < T; t++ {
			bt.KeyFeature = append(bt.KeyFeature, int64(t))
			for i := 0; i < B; i++ {
				n := 1 + rng.IntN(30)
				bt.Lengths = append(bt.Lengths, int64(n))
				for j := 0; j < n; j++ {
					bt.Values = append(bt.Values, int64(z.Uint64()))
				}
			}
		}
		batches[r] = bt
	}
	out := make([]float32, B*T*dim)
	grad := make([]float32, B*T*dim)
	tb := &testing.T{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		steps := make([]*Step, 2)
		xs := make([]*Exchange, 2)
		for r := range steps {
			steps[r], _ = cs[r].Begin(batches[r])
			xs[r] = steps[r].X
		}
		runLockstep(tb, topo, xs)
		for _, s := range steps {
			_ = s.Pool(out)
			_ = s.Backward(grad, true)
		}
		runLockstep(tb, topo, xs)
	}
}
