package embedding

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// A sequence collection's fused backward is atomic and its training forwards over dynamic tables
// exclusive, as a pooled collection's are: the view took only read locks, so concurrent fused steps
// lost step counts (even on disjoint rows) and a forward could read a row halfway through an update.
func TestSequenceFusedStepsAreAtomic(t *testing.T) {
	const G, M, span, dim = 4, 2000, 20, 64
	for _, tc := range []struct {
		name string
		opt  OptimizerConfig
	}{
		{"sgd", OptimizerConfig{Kind: OptSGD, LR: 0.5}},
		{"adagrad", OptimizerConfig{Kind: OptAdagrad, LR: 0.5, Eps: 1e-8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, err := NewFixedTable("t", G*span+1, dim, tc.opt)
			require.NoError(t, err)
			owner, err := NewCollection([]*Table{tb}, []Feature{{Name: "x", Table: 0}})
			require.NoError(t, err)
			defer owner.Close()
			s, err := NewSequenceCollection(owner, []Feature{{Name: "hist", Table: 0}})
			require.NoError(t, err)
			probe := int64(G * span) // trained by every writer, read by the reader: its values stay equal
			var wg sync.WaitGroup
			var torn atomic.Int64
			stop := make(chan struct{})
			wg.Add(1)
			go func() { // reads the shared row while the writers train it
				defer wg.Done()
				out := make([]float32, dim)
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, err := s.Forward(Batch{KeyFeature: []int64{0}, Values: []int64{probe}, Lengths: []int64{1}},
						[][]float32{out}, false, false)
					if err != nil {
						t.Error(err)
						return
					}
					s.Release(ctx)
					for _, v := range out[1:] {
						if v != out[0] {
							torn.Add(1)
							break
						}
					}
				}
			}()
			var writers sync.WaitGroup
			for g := range G {
				writers.Add(1)
				go func() {
					defer writers.Done()
					vals := make([]int64, 16)
					for i := range vals {
						vals[i] = int64(g*span + i%span)
					}
					vals[0] = probe
					b := Batch{KeyFeature: []int64{0}, Values: vals, Lengths: []int64{8, 8}}
					out, grad := make([]float32, 16*dim), make([]float32, 16*dim)
					for i := range grad {
						grad[i] = 1
					}
					for range M {
						ctx, err := s.Forward(b, [][]float32{out}, true, true)
						if err != nil {
							t.Error(err)
							return
						}
						if err := s.Backward(ctx, grad, nil, nil); err != nil {
							t.Error(err)
							return
						}
						s.Release(ctx)
					}
				}()
			}
			writers.Wait()
			close(stop)
			wg.Wait()
			require.Equal(t, int64(G*M), tb.Step[0], "every fused step counted")
			require.Zero(t, torn.Load(), "a forward read a row halfway through a fused update")
		})
	}
}
