package embedding

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// zipfCollection is 26 tables of rows×64 with Zipf(1.05) IDs, batch B, pooling 1..30.
func zipfCollection(b *testing.B, rows int64, B int) (*Collection, Batch) {
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.05, 1, uint64(rows-1))
	var tables []*Table
	var feats []Feature
	var batch Batch
	for t := 0; t < 26; t++ {
		addBenchTable(b, &tables, &feats, &batch, rows, OptimizerConfig{Kind: OptSGD, LR: 0.01})
		perm := r.Perm(int(rows))
		for i := 0; i < B; i++ {
			n := 1 + r.IntN(30)
			batch.Lengths = append(batch.Lengths, int64(n))
			for j := 0; j < n; j++ {
				batch.Values = append(batch.Values, int64(perm[z.Uint64()]))
			}
		}
	}
	c, err := NewCollection(tables, feats)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c, batch
}

// addBenchTable appends a fixed rows×64 table of 0.01s with optimizer opt, one feature on it, and
// its key to the batch (the caller appends the key's lengths and values).
func addBenchTable(b *testing.B, tables *[]*Table, feats *[]Feature, batch *Batch, rows int64, opt OptimizerConfig) {
	t := len(*tables)
	tb, err := NewFixedTable(fmt.Sprintf("t%d", t), rows, 64, opt)
	if err != nil {
		b.Fatal(err)
	}
	for i := range tb.Data {
		tb.Data[i] = 0.01
	}
	*tables = append(*tables, tb)
	*feats = append(*feats, Feature{Name: fmt.Sprintf("f%d", t), Table: t})
	batch.KeyFeature = append(batch.KeyFeature, int64(t))
}

func BenchmarkTrainStepSmall(b *testing.B) { benchTrainStep(b, 10_000, 256) }

func BenchmarkTrainStep(b *testing.B) { benchTrainStep(b, 200_000, 4096) }

func benchTrainStep(b *testing.B, rows int64, B int) {
	c, batch := zipfCollection(b, rows, B)
	out := make([]float32, B*c.Width())
	grad := make([]float32, len(out))
	for i := range grad {
		grad[i] = float32(math.Sin(float64(i)))
	}
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Forward(batch, out, true, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("forward_keep_backward", func(b *testing.B) {
		for b.Loop() {
			ctx, err := c.Forward(batch, out, true, true)
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Backward(ctx, grad, nil, nil); err != nil {
				b.Fatal(err)
			}
			c.Release(ctx)
		}
	})
}

func BenchmarkForwardPooling1(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	var tables []*Table
	var feats []Feature
	var batch Batch
	const B = 1024
	for t := 0; t < 26; t++ {
		rows := int64(3 + r.IntN(5000))
		tb, _ := NewFixedTable(fmt.Sprintf("t%d", t), rows, 64, OptimizerConfig{Kind: OptSGD, LR: 0.01})
		for i := range tb.Data {
			tb.Data[i] = 0.01
		}
		tables = append(tables, tb)
		feats = append(feats, Feature{Name: fmt.Sprintf("f%d", t), Table: t})
		batch.KeyFeature = append(batch.KeyFeature, int64(t))
		for i := 0; i < B; i++ {
			batch.Lengths = append(batch.Lengths, 1)
			batch.Values = append(batch.Values, r.Int64N(rows))
		}
	}
	c, _ := NewCollection(tables, feats)
	defer c.Close()
	out := make([]float32, B*c.Width())
	for b.Loop() {
		if _, err := c.Forward(batch, out, true, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDLRMStep is the Criteo-shaped DLRM embedding step of benchmarks/end_to_end.py in Go:
// 26 one-hot features over tables of 100 … 1M rows (dim 64, Adagrad), B 4096, Zipf(1.05) IDs;
// forward with context, then the fused backward. It reports the forward's and the backward's
// share (fwd-ms, bwd-ms).
func BenchmarkDLRMStep(b *testing.B) {
	const B = 4096
	r := rand.New(rand.NewPCG(5, 6))
	var tables []*Table
	var feats []Feature
	var batch Batch
	for t := 0; t < 26; t++ {
		rows := int64(100)
		for range t % 5 {
			rows *= 10
		}
		addBenchTable(b, &tables, &feats, &batch, rows, OptimizerConfig{Kind: OptAdagrad, LR: 0.01, Eps: 1e-8})
		z := rand.NewZipf(r, 1.05, 1, uint64(rows-1))
		for i := 0; i < B; i++ {
			batch.Lengths = append(batch.Lengths, 1)
			batch.Values = append(batch.Values, int64(z.Uint64()))
		}
	}
	c, err := NewCollection(tables, feats)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	out := make([]float32, B*c.Width())
	grad := make([]float32, len(out))
	for i := range grad {
		grad[i] = float32(math.Sin(float64(i))) * 1e-3
	}
	step := func() (fwd, bwd time.Duration) {
		t0 := time.Now()
		ctx, err := c.Forward(batch, out, true, true)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := c.Backward(ctx, grad, nil, nil); err != nil {
			b.Fatal(err)
		}
		c.Release(ctx)
		return t1.Sub(t0), time.Since(t1)
	}
	for range 40 { // the optimizer state's pages are first written now, not in the timed steps
		step()
	}
	var fwd, bwd time.Duration
	for b.Loop() {
		f, g := step()
		fwd, bwd = fwd+f, bwd+g
	}
	b.ReportMetric(float64(fwd.Microseconds())/1e3/float64(b.N), "fwd-ms")
	b.ReportMetric(float64(bwd.Microseconds())/1e3/float64(b.N), "bwd-ms")
}
