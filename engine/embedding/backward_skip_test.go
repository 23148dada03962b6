package embedding

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBackwardSomeLeavesSkippedTablesAlone: a fused backward that skips some tables (frozen ones)
// leaves their rows, optimizer state and step counters exactly as they were, and updates every other
// table bit for bit as a backward of all tables does (tables are independent within a step), on
// every backward path, for an optimizer whose zero-gradient step would still move rows (AdamW).
func TestBackwardSomeLeavesSkippedTablesAlone(t *testing.T) {
	opt := OptimizerConfig{Kind: OptAdamW, LR: 0.1, Eps: 1e-8, Beta1: 0.9, Beta2: 0.99, WeightDecay: 0.3}
	bothPaths(t, Options{}, func(t *testing.T, o Options) {
		for seed := uint64(0); seed < 12; seed++ {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				all, some := newSetup(t, seed, true, opt, o), newSetup(t, seed, true, opt, o)
				T := len(all.c.Tables)
				skip := make([]bool, T)
				for i := range skip {
					skip[i] = (int(seed)+i)%2 == 0
				}
				before, states := make([][]float32, T), make([][]float32, T)
				for i, tb := range some.c.Tables {
					before[i] = append([]float32(nil), tb.Data...)
					states[i] = append([]float32(nil), tb.State...)
				}
				out := make([]float32, all.B*all.c.Width())
				g := make([]float32, len(out))
				for i := range g {
					g[i] = float32(i%9) - 4
				}
				for _, s := range []*setup{all, some} {
					ctx, err := s.c.Forward(s.b, out, true, true)
					require.NoError(t, err)
					if s == some {
						require.ErrorContains(t, s.c.BackwardSome(ctx, g, nil, nil, make([]bool, T+1)),
							fmt.Sprintf("%d skip flags for %d tables", T+1, T))
						require.NoError(t, s.c.BackwardSome(ctx, g, nil, nil, skip))
					} else {
						require.NoError(t, s.c.Backward(ctx, g, nil, nil))
					}
					s.c.Release(ctx)
				}
				for i, tb := range some.c.Tables {
					if skip[i] {
						require.Equal(t, before[i], tb.Data, "skipped table %d moved", i)
						require.Equal(t, states[i], tb.State, "skipped table %d's optimizer state moved", i)
						require.Zero(t, tb.Step[0], "skipped table %d took a step", i)
						continue
					}
					require.Equal(t, all.c.Tables[i].Data, tb.Data, "table %d", i)
					require.Equal(t, all.c.Tables[i].State, tb.State, "table %d", i)
					require.Equal(t, int64(1), tb.Step[0])
				}
			})
		}
	})
}
