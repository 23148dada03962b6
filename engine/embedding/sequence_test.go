package embedding

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
)

// seqSetup is a random sequence collection over a random owner's tables, a batch and its ids per
// (key, sample).
type seqSetup struct {
	owner *setup
	s     *SequenceCollection
	b     Batch
	B     int
	feats []Feature // owner-table features
}

func newSeqSetup(t *testing.T, seed uint64, opt OptimizerConfig) *seqSetup {
	o := newSetup(t, seed, false, opt)
	r := rand.New(rand.NewPCG(seed, 7))
	nt := len(o.c.Tables)
	var feats []Feature
	for f := 0; f < 1+r.IntN(4); f++ {
		feats = append(feats, Feature{Name: fmt.Sprintf("seq%d", f), Table: r.IntN(nt)})
	}
	s, err := NewSequenceCollection(o.c, feats)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	x := &seqSetup{owner: o, s: s, B: r.IntN(5), feats: feats}
	F := len(feats)
	for _, k := range r.Perm(F) {
		x.b.KeyFeature = append(x.b.KeyFeature, int64(k))
	}
	for k := 0; k < F; k++ {
		rows := o.c.Tables[feats[x.b.KeyFeature[k]].Table].Rows()
		for bi := 0; bi < x.B; bi++ {
			n := r.IntN(6) // includes empty sequences
			for j := 0; j < n; j++ {
				x.b.Values = append(x.b.Values, r.Int64N(min(rows, 5))) // repeats likely
			}
			x.b.Lengths = append(x.b.Lengths, int64(n))
		}
	}
	return x
}

// ref returns the expected output (per value, in KJT order, its table's row) and per value its
// owner table and output offset.
func (x *seqSetup) ref() (out []float64, table []int, off []int) {
	p := 0
	for k, f := range x.b.KeyFeature {
		tb := x.feats[f].Table
		var n int64
		for _, l := range x.b.Lengths[k*x.B : (k+1)*x.B] {
			n += l
		}
		for i := int64(0); i < n; i++ {
			id := x.b.Values[p]
			table = append(table, tb)
			off = append(off, len(out))
			for _, w := range x.owner.c.Tables[tb].Row(id) {
				out = append(out, float64(w))
			}
			p++
		}
	}
	return out, table, off
}

// buffers returns one output buffer per key and the gradient buffer's size.
func (x *seqSetup) buffers(t *testing.T) ([][]float32, int) {
	sizes, err := x.s.OutputSizes(x.b)
	require.NoError(t, err)
	outs := make([][]float32, len(sizes))
	for k, n := range sizes {
		outs[k] = make([]float32, n)
	}
	rows, err := x.s.GradRows(x.b)
	require.NoError(t, err)
	return outs, rows * x.s.Width()
}

func flatten(outs [][]float32) []float32 {
	var all []float32
	for _, o := range outs {
		all = append(all, o...)
	}
	return all
}

func TestSequenceForwardBackwardMatchesBruteForce(t *testing.T) {
	for seed := uint64(0); seed < 60; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			x := newSeqSetup(t, seed, OptimizerConfig{Kind: OptNone})
			want, table, off := x.ref()
			outs, ng := x.buffers(t)
			for _, o := range outs {
				for i := range o {
					o[i] = 7 // overwritten
				}
			}
			ctx, err := x.s.Forward(x.b, outs, true, true)
			require.NoError(t, err)
			out := flatten(outs)
			require.Len(t, out, len(want))
			for i, w := range want {
				close32(t, w, out[i], fmt.Sprintf("out[%d]", i))
			}
			// no-context forward gives the same rows
			outs2, _ := x.buffers(t)
			_, err = x.s.Forward(x.b, outs2, false, false)
			require.NoError(t, err)
			require.Equal(t, out, flatten(outs2))

			grad := make([]float32, ng)
			for i := range grad {
				grad[i] = float32(x.owner.rng.NormFloat64())
			}
			refG := map[[2]int64][]float64{} // (owner table, row) → merged gradient
			for v, tb := range table {
				d := x.owner.c.Tables[tb].Dim
				key := [2]int64{int64(tb), x.b.Values[v]}
				if refG[key] == nil {
					refG[key] = make([]float64, d)
				}
				for j := 0; j < d; j++ {
					refG[key][j] += float64(grad[off[v]+j])
				}
			}
			tabs := x.s.Tables()
			rows, vals := make([][]int64, len(tabs)), make([][]float32, len(tabs))
			for i, tb := range tabs {
				rows[i] = make([]int64, ctx.Unique(i))
				vals[i] = make([]float32, ctx.Unique(i)*x.owner.c.Tables[tb].Dim)
			}
			require.NoError(t, x.s.Backward(ctx, grad, rows, vals))
			seen := 0
			for i, tb := range tabs {
				d := x.owner.c.Tables[tb].Dim
				for u := 0; u < ctx.Unique(i); u++ {
					g, ok := refG[[2]int64{int64(tb), rows[i][u]}]
					require.True(t, ok, "row %d of table %d has no lookups", rows[i][u], tb)
					for j := 0; j < d; j++ {
						close32(t, g[j], vals[i][u*d+j], "grad")
					}
					seen++
				}
			}
			require.Equal(t, len(refG), seen, "one gradient per distinct row")
			x.s.Release(ctx)
		})
	}
}

func TestSequenceFusedSGDSharesTheOwnersRows(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		x := newSeqSetup(t, seed, OptimizerConfig{Kind: OptSGD, LR: 0.5})
		_, table, off := x.ref()
		before := map[[2]int64][]float64{}
		for v, tb := range table {
			before[[2]int64{int64(tb), x.b.Values[v]}] = nil
		}
		for k := range before {
			before[k] = toF64(x.owner.c.Tables[k[0]].Row(k[1]))
		}
		outs, ng := x.buffers(t)
		ctx, err := x.s.Forward(x.b, outs, true, true)
		require.NoError(t, err)
		grad := make([]float32, ng)
		for i := range grad {
			grad[i] = float32(i%5) - 2
		}
		steps := map[int]int64{}
		for _, tb := range x.s.Tables() {
			steps[tb] = x.owner.c.Tables[tb].Step[0]
		}
		require.NoError(t, x.s.Backward(ctx, grad, nil, nil))
		want := map[[2]int64][]float64{}
		for k, w := range before {
			want[k] = append([]float64(nil), w...)
		}
		for v, tb := range table {
			k := [2]int64{int64(tb), x.b.Values[v]}
			for j := range want[k] {
				want[k][j] -= 0.5 * float64(grad[off[v]+j])
			}
		}
		for k, w := range want {
			got := x.owner.c.Tables[k[0]].Row(k[1])
			for j := range w {
				close32(t, w[j], got[j], fmt.Sprintf("seed %d table %d row %d", seed, k[0], k[1]))
			}
		}
		for tb, st := range steps {
			require.Equal(t, st+1, x.owner.c.Tables[tb].Step[0], "one step per backward on used tables")
		}
		x.s.Release(ctx)
	}
}

func toF64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func TestSequenceDynamicRows(t *testing.T) {
	tb := newMapTable(t)
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0}})
	require.NoError(t, err)
	defer c.Close()
	s, err := NewSequenceCollection(c, []Feature{{Name: "hist", Table: 0}})
	require.NoError(t, err)
	b := Batch{KeyFeature: []int64{0}, Values: []int64{1000, 5, 7}, Lengths: []int64{2, 1}}
	out := make([]float32, 15)
	ctx, err := s.Forward(b, [][]float32{out}, true, true)
	require.NoError(t, err)
	require.Equal(t, []float32{16, 17, 18, 19, 20, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, out, "unresolved id 5 gives zeros")
	rows, vals := make([]int64, 3), make([]float32, 15)
	grad := make([]float32, 15)
	for i := range grad {
		grad[i] = float32(i)
	}
	require.NoError(t, s.Backward(ctx, grad, [][]int64{rows}, [][]float32{vals}))
	require.Equal(t, []int64{2, -1, 0}, rows)
	require.Equal(t, []float32{0, 1, 2, 3, 4}, vals[:5])
}

func TestSequenceBadInput(t *testing.T) {
	tb, err := NewFixedTable("t", 10, 4, OptimizerConfig{Kind: OptSGD, LR: 0.1})
	require.NoError(t, err)
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0}})
	require.NoError(t, err)
	_, err = NewSequenceCollection(c, []Feature{{Name: "h", Table: 1}})
	require.ErrorContains(t, err, "references table 1")
	_, err = NewSequenceCollection(c, []Feature{{Name: "h", Table: 0}, {Name: "h", Table: 0}})
	require.ErrorContains(t, err, "duplicate feature")
	_, err = NewSequenceCollection(c, nil)
	require.ErrorContains(t, err, "no features")
	s, err := NewSequenceCollection(c, []Feature{{Name: "h", Table: 0}})
	require.NoError(t, err)
	good := Batch{KeyFeature: []int64{0}, Values: []int64{1, 2, 3}, Lengths: []int64{2, 1}}
	for _, tc := range []struct {
		name string
		b    Batch
		out  int
		msg  string
	}{
		{"out of range", Batch{KeyFeature: []int64{0}, Values: []int64{1, 20}, Lengths: []int64{2}}, 8, "out of range"},
		{"negative", Batch{KeyFeature: []int64{0}, Values: []int64{-1, 2}, Lengths: []int64{2}}, 8, "out of range"},
		{"weights", Batch{KeyFeature: []int64{0}, Values: []int64{1}, Lengths: []int64{1}, Weights: []float32{1}}, 4, "weights"},
		{"short output", good, 8, "output 0 has 8 values, need 12"},
		{"lengths", Batch{KeyFeature: []int64{0}, Values: []int64{1}, Lengths: []int64{2}}, 4, "lengths"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, keep := range []bool{true, false} { // the gather range-checks fixed IDs itself
				_, err := s.Forward(tc.b, [][]float32{make([]float32, tc.out)}, true, keep)
				require.ErrorContains(t, err, tc.msg)
				require.True(t, errors.Is(err, errs.ErrInvalid))
			}
		})
	}
	_, err = s.Forward(good, [][]float32{make([]float32, 8), make([]float32, 4)}, true, true)
	require.ErrorContains(t, err, "2 output buffers for 1 keys")
	ctx, err := s.Forward(good, [][]float32{make([]float32, 12)}, true, true)
	require.NoError(t, err)
	require.ErrorContains(t, s.Backward(ctx, make([]float32, 11), nil, nil), "gradient has 11 values")
	require.ErrorContains(t, s.Backward(ctx, make([]float32, 12), [][]int64{make([]int64, 1)}, [][]float32{make([]float32, 4)}), "need 3 / 12")
	require.NoError(t, s.Backward(ctx, make([]float32, 12), nil, nil))
	require.NoError(t, c.Close())
	_, err = s.Forward(good, [][]float32{make([]float32, 12)}, true, true)
	require.ErrorContains(t, err, "after close", "the owner's close ends the sequence collection too")
}

// FuzzSequenceForward feeds arbitrary batches: every outcome is a result or an invalid-input error.
func FuzzSequenceForward(f *testing.F) {
	f.Add([]byte{2, 1, 3, 0, 1, 2, 3, 4}, uint8(0))
	f.Add([]byte{0, 0, 9, 200}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, extra uint8) {
		tb, err := NewFixedTable("t", 8, 4, OptimizerConfig{Kind: OptSGD, LR: 0.1})
		require.NoError(t, err)
		c, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0}})
		require.NoError(t, err)
		defer c.Close()
		s, err := NewSequenceCollection(c, []Feature{{Name: "a", Table: 0}, {Name: "b", Table: 0}})
		require.NoError(t, err)
		var b Batch
		b.KeyFeature = []int64{int64(extra % 3), 1}
		half := len(data) / 2
		for _, x := range data[:half] {
			b.Lengths = append(b.Lengths, int64(int8(x))%4)
		}
		for _, x := range data[half:] {
			b.Values = append(b.Values, int64(int8(x))%10)
		}
		rows, err := s.GradRows(b)
		if err != nil {
			require.True(t, errors.Is(err, errs.ErrInvalid), err.Error())
			return
		}
		sizes, err := s.OutputSizes(b)
		require.NoError(t, err)
		outs := make([][]float32, len(sizes))
		for k, n := range sizes {
			outs[k] = make([]float32, int(n)+int(extra%2)*k)
		}
		ctx, err := s.Forward(b, outs, true, true)
		if err != nil {
			require.True(t, errors.Is(err, errs.ErrInvalid), err.Error())
			return
		}
		require.NoError(t, s.Backward(ctx, make([]float32, rows*s.Width()), nil, nil))
	})
}

// BenchmarkSequenceStep is a behaviour-sequence step (forward with context + fused backward) of
// 1024 histories of 1..180 Zipf(1.05) IDs over 1M rows of dim 64, cycling over four batches and
// gradients (so the gradient is read from memory, as in a training step, not from cache). It
// reports the forward's and the backward's share per step (fwd-ms, bwd-ms). With RECGO_BENCH_COLD
// set, a 96 MiB sweep between steps (untimed) evicts the table's hot rows, as the dense part of a
// training step (or benchmarks/sequence.py's other variants) does.
func BenchmarkSequenceStep(b *testing.B) {
	for _, opt := range []OptimizerConfig{{Kind: OptSGD, LR: 0.01}, {Kind: OptRowwiseAdagrad, LR: 0.01, Eps: 1e-8}} {
		b.Run(opt.Kind.String(), func(b *testing.B) { benchSequenceStep(b, opt) })
	}
}

func benchSequenceStep(b *testing.B, opt OptimizerConfig) {
	const rows = 1 << 20
	tb, err := NewFixedTable("item", rows, 64, opt)
	require.NoError(b, err)
	for i := range tb.Data {
		tb.Data[i] = float32(i%13) * 1e-3 // commit the pages, as an initialised table has them
	}
	c, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0}})
	require.NoError(b, err)
	defer c.Close()
	s, err := NewSequenceCollection(c, []Feature{{Name: "hist", Table: 0}})
	require.NoError(b, err)
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.05, 1, rows-1)
	perm := r.Perm(rows)
	type step struct {
		batch     Batch
		out, grad []float32
	}
	steps := make([]step, 4)
	for k := range steps {
		x := &steps[k]
		x.batch.KeyFeature = []int64{0}
		for i := 0; i < 1024; i++ {
			n := 1 + r.IntN(180)
			x.batch.Lengths = append(x.batch.Lengths, int64(n))
			for j := 0; j < n; j++ {
				x.batch.Values = append(x.batch.Values, int64(perm[z.Uint64()]))
			}
		}
		sizes, err := s.OutputSizes(x.batch)
		require.NoError(b, err)
		x.out, x.grad = make([]float32, sizes[0]), make([]float32, sizes[0])
		for i := range x.grad {
			x.grad[i] = float32(i%7) * 1e-3
		}
	}
	var fwd, bwd time.Duration
	var flush []float32
	if os.Getenv("RECGO_BENCH_COLD") != "" {
		flush = make([]float32, 24<<20) // 96 MiB: what other work does to the caches between steps
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x := &steps[i%len(steps)]
		if flush != nil {
			b.StopTimer()
			for j := 0; j < len(flush); j += 16 {
				flush[j]++
			}
			b.StartTimer()
		}
		t0 := time.Now()
		ctx, err := s.Forward(x.batch, [][]float32{x.out}, true, true)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.Backward(ctx, x.grad, nil, nil); err != nil {
			b.Fatal(err)
		}
		bwd += time.Since(t1)
		fwd += t1.Sub(t0)
		s.Release(ctx)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms")
	b.ReportMetric(float64(fwd.Microseconds())/1e3/float64(b.N), "fwd-ms")
	b.ReportMetric(float64(bwd.Microseconds())/1e3/float64(b.N), "bwd-ms")
}

// cpuTime is the process's CPU time so far (user + system): on a shared machine a per-step CPU
// time varies less than the wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSequenceConcurrentWithOwner runs sequence forwards/backwards and the owner's pooled forwards
// on the same tables from several goroutines (no fused update, so the rows stay fixed): every
// result equals the serial one.
func TestSequenceConcurrentWithOwner(t *testing.T) {
	x := newSeqSetup(t, 3, OptimizerConfig{Kind: OptNone})
	for len(x.b.Values) == 0 {
		x = newSeqSetup(t, uint64(len(x.b.Lengths))+100, OptimizerConfig{Kind: OptNone})
	}
	want, _ := x.buffers(t)
	_, err := x.s.Forward(x.b, want, false, false)
	require.NoError(t, err)
	pooledWant := make([]float32, x.owner.B*x.owner.c.Width())
	_, err = x.owner.c.Forward(x.owner.b, pooledWant, true, false)
	require.NoError(t, err)
	sizes, err := x.s.OutputSizes(x.b)
	require.NoError(t, err)
	_, ng := x.buffers(t)
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if g%2 == 0 {
					out := make([]float32, len(pooledWant))
					if _, err := x.owner.c.Forward(x.owner.b, out, true, false); err != nil || !slices.Equal(out, pooledWant) {
						errc <- fmt.Errorf("pooled forward differs (err %v)", err)
						return
					}
					continue
				}
				outs := make([][]float32, len(sizes))
				for k, n := range sizes {
					outs[k] = make([]float32, n)
				}
				ctx, err := x.s.Forward(x.b, outs, true, true)
				if err != nil || !slices.Equal(flatten(outs), flatten(want)) {
					errc <- fmt.Errorf("sequence forward differs (err %v)", err)
					return
				}
				tabs := x.s.Tables()
				rows, vals := make([][]int64, len(tabs)), make([][]float32, len(tabs))
				for j, tb := range tabs {
					rows[j] = make([]int64, ctx.Unique(j))
					vals[j] = make([]float32, ctx.Unique(j)*x.owner.c.Tables[tb].Dim)
				}
				if err := x.s.Backward(ctx, make([]float32, ng), rows, vals); err != nil {
					errc <- err
					return
				}
				x.s.Release(ctx)
			}
		}(g)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
}

// TestSequenceStreamedForwardMatchesRows: an output past kernels.StreamingBytes is written with
// non-temporal stores (dim 64, a multiple of 16, 32-byte aligned) or through the caches (dim 24;
// the second key's misaligned start): across item boundaries every row equals its table row.
func TestSequenceStreamedForwardMatchesRows(t *testing.T) {
	for _, dim := range []int{64, 24} {
		t.Run(fmt.Sprintf("dim%d", dim), func(t *testing.T) {
			tb, err := NewFixedTable("item", 5000, dim, OptimizerConfig{Kind: OptNone})
			require.NoError(t, err)
			for i := range tb.Data {
				tb.Data[i] = float32(i)
			}
			c, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0}})
			require.NoError(t, err)
			defer c.Close()
			s, err := NewSequenceCollection(c, []Feature{{Name: "a", Table: 0}, {Name: "b", Table: 0}})
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(5, 6))
			n := kernels.StreamingBytes/4/dim + 777 // past the threshold, not a multiple of the chunks
			b := Batch{KeyFeature: []int64{1, 0}, Lengths: []int64{int64(n - 3), 3, 2, 0}}
			for range n + 2 {
				b.Values = append(b.Values, r.Int64N(5000))
			}
			sizes, err := s.OutputSizes(b)
			require.NoError(t, err)
			flat := make([]float32, sizes[0]+sizes[1]+8+1)
			lead := int((32 - uintptr(unsafe.Pointer(&flat[0]))%32) % 32 / 4)
			big := flat[lead : lead+int(sizes[0])]                           // 32-byte aligned: the streamed path
			outs := [][]float32{big, flat[lead+int(sizes[0])+1:][:sizes[1]]} // the small key's start is not
			_, err = s.Forward(b, outs, true, false)
			require.NoError(t, err)
			for v, id := range b.Values {
				k, i := 0, v
				if v >= n {
					k, i = 1, v-n
				}
				require.Equal(t, tb.Row(id), outs[k][i*dim:(i+1)*dim], "lookup %d", v)
			}
		})
	}
}
