package shard

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
)

// worldBench is the shape of one loopback world-2 training-step benchmark.
type worldBench struct {
	tables, rows, dim, batch int
	maxLen                   int // bags of 1..maxLen IDs
	opt                      embedding.OptimizerConfig
}

// BenchmarkStepWorld2 is one training step (forward exchange, pooling, backward exchange, SGD) of
// both ranks of a loopback world of 2: 8 tables × 100k × 64, 512 samples per rank, Zipf IDs
// scattered by a fixed permutation per table, bags of 1–30, four batches in turn — the shape of
// benchmarks/distributed.py, without the transport — hash-sharded and table-wise (tables
// alternating between the ranks), owner pooling auto.
func BenchmarkStepWorld2(b *testing.B) {
	w := worldBench{tables: 8, rows: 100_000, dim: 64, batch: 512, maxLen: 30,
		opt: embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.05}}
	for _, kind := range []Kind{Hash, TableWise} {
		b.Run(kind.String(), func(b *testing.B) { benchStepWorld2(b, kind, w) })
	}
}

// BenchmarkStepWorld2OneHot is the same step on the DLRM shape of benchmarks/end_to_end_nproc.py:
// 26 one-hot tables × 100k × 64, 2048 samples per rank, Zipf IDs, Adagrad, hash-sharded.
func BenchmarkStepWorld2OneHot(b *testing.B) {
	benchStepWorld2(b, Hash, worldBench{tables: 26, rows: 100_000, dim: 64, batch: 2048, maxLen: 1,
		opt: embedding.OptimizerConfig{Kind: embedding.OptAdagrad, LR: 0.05, Eps: 1e-8}})
}

func benchStepWorld2(b *testing.B, kind Kind, w worldBench) {
	T, B, dim := w.tables, w.batch, w.dim
	topo, _ := NewTopology(1, 2, 2)
	var feats []embedding.Feature
	for t := 0; t < T; t++ {
		feats = append(feats, embedding.Feature{Name: fmt.Sprintf("f%d", t), Table: t})
	}
	cs := make([]*Collection, 2)
	for r := range cs {
		var ls []*Layout
		for t := 0; t < T; t++ {
			l, _ := NewLayout(fmt.Sprintf("t%d", t), int64(w.rows), dim, kind, t%2, 2)
			ls = append(ls, l)
		}
		cs[r], _ = NewCollection(ls, topo, r, Flat, w.opt, feats)
		for _, sh := range cs[r].Shards {
			for i := range sh.Data {
				sh.Data[i] = 0.01 // touch the pages, as initial weights do
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	z := rand.NewZipf(rng, 1.05, 1, uint64(w.rows-1))
	// The hot IDs are scattered over each table, as the Python benchmark's permutations scatter
	// them: unscattered, the Zipf head's rows share cache lines and pages, which flatters the
	// owner's gathers and updates.
	perms := make([][]int, T)
	for t := range perms {
		perms[t] = rng.Perm(w.rows)
	}
	const nBatches = 4 // per rank, taken in turn (as the Python benchmark does)
	batches := make([][2]embedding.Batch, nBatches)
	for k := range batches {
		for r := range batches[k] {
			bt := embedding.Batch{}
			for t := 0; t < T; t++ {
				bt.KeyFeature = append(bt.KeyFeature, int64(t))
				for i := 0; i < B; i++ {
					n := 1 + rng.IntN(w.maxLen)
					bt.Lengths = append(bt.Lengths, int64(n))
					for j := 0; j < n; j++ {
						bt.Values = append(bt.Values, int64(perms[t][z.Uint64()]))
					}
				}
			}
			batches[k][r] = bt
		}
	}
	out := make([]float32, B*T*dim)
	grad := make([]float32, B*T*dim)
	for i := range grad {
		grad[i] = 1e-3 * float32(i%7)
	}
	tb := &testing.T{}
	n := 0
	step := func() {
		steps := make([]*Step, 2)
		xs := make([]*Exchange, 2)
		bs := &batches[n%nBatches]
		n++
		for r := range steps {
			steps[r], _ = cs[r].Begin(bs[r])
			xs[r] = steps[r].X
		}
		runLockstep(tb, topo, xs)
		for _, s := range steps {
			_ = s.Pool(out)
			_ = s.Backward(grad, true)
		}
		runLockstep(tb, topo, xs)
	}
	for range nBatches { // the optimizer state's pages are first written now, not in the timed steps
		step()
	}
	// CPU time (user and system, every thread) next to the wall time: other processes sharing the
	// machine stretch the wall time, not this.
	c0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's CPU time so far (user and system), in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
