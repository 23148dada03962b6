package embedding

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMergedUpdateIsOneStepOverTheSum: inside a merged-update scope two fused backwards of the same
// batch (pooled, or sequence, with gradient g each) leave rows and step counters alone until the
// scope ends, then equal one backward with gradient 2g outside a scope, bit for bit (2g's merged
// rows are exactly twice g's). An empty scope changes nothing.
func TestMergedUpdateIsOneStepOverTheSum(t *testing.T) {
	opts := []OptimizerConfig{
		{Kind: OptRowwiseAdagrad, LR: 0.3, Eps: 1e-8},
		{Kind: OptAdam, LR: 0.1, Eps: 1e-8, Beta1: 0.9, Beta2: 0.99},
		{Kind: OptSGD, LR: 0.5},
	}
	for _, opt := range opts {
		for seed := uint64(0); seed < 15; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", opt.Kind, seed), func(t *testing.T) {
				a, b := newSeqSetup(t, seed, opt), newSeqSetup(t, seed, opt)
				require.NoError(t, b.owner.c.BeginMergedUpdate())
				require.Error(t, b.owner.c.BeginMergedUpdate(), "one scope at a time")
				require.NoError(t, b.owner.c.EndMergedUpdate())
				for i, tb := range a.owner.c.Tables {
					require.Equal(t, tb.Step[0], b.owner.c.Tables[i].Step[0], "an empty scope takes no step")
				}
				// pooled
				out := make([]float32, a.owner.B*a.owner.c.Width())
				g := make([]float32, len(out))
				g2 := make([]float32, len(out))
				for i := range g {
					g[i] = float32(a.owner.rng.NormFloat64())
					g2[i] = 2 * g[i]
				}
				ctx, err := a.owner.c.Forward(a.owner.b, out, true, true)
				require.NoError(t, err)
				require.NoError(t, a.owner.c.Backward(ctx, g2, nil, nil))
				a.owner.c.Release(ctx)
				require.NoError(t, b.owner.c.BeginMergedUpdate())
				before := snapshotTables(b.owner.c)
				for k := 0; k < 2; k++ {
					ctx, err := b.owner.c.Forward(b.owner.b, out, true, true)
					require.NoError(t, err)
					require.NoError(t, b.owner.c.Backward(ctx, g, nil, nil))
					b.owner.c.Release(ctx)
				}
				require.Equal(t, before, snapshotTables(b.owner.c), "no update inside the scope")
				require.NoError(t, b.owner.c.EndMergedUpdate())
				requireSameTables(t, a.owner.c, b.owner.c)
				// sequence
				outs, ng := a.buffers(t)
				sg, sg2 := make([]float32, ng), make([]float32, ng)
				for i := range sg {
					sg[i] = float32(i%11) - 5
					sg2[i] = 2 * sg[i]
				}
				ctx, err = a.s.Forward(a.b, outs, true, true)
				require.NoError(t, err)
				require.NoError(t, a.s.Backward(ctx, sg2, nil, nil))
				a.s.Release(ctx)
				require.NoError(t, b.owner.c.BeginMergedUpdate())
				require.True(t, b.owner.c.MergedUpdateOpen())
				for k := 0; k < 2; k++ {
					ctx, err := b.s.Forward(b.b, outs, true, true)
					require.NoError(t, err)
					require.NoError(t, b.s.Backward(ctx, sg, nil, nil))
					b.s.Release(ctx)
				}
				require.NoError(t, b.owner.c.EndMergedUpdate())
				require.False(t, b.owner.c.MergedUpdateOpen())
				if opt.Kind == OptSGD { // outside the scope SGD's sequence backward is the one-pass linear update
					for i, tb := range a.owner.c.Tables {
						for j, w := range tb.Data {
							require.InDelta(t, w, b.owner.c.Tables[i].Data[j], 1e-5)
						}
					}
					return
				}
				requireSameTables(t, a.owner.c, b.owner.c)
			})
		}
	}
}

func snapshotTables(c *Collection) [][]float32 {
	var out [][]float32
	for _, t := range c.Tables {
		out = append(out, append(append([]float32(nil), t.Data...), t.State...), []float32{float32(t.Step[0])})
	}
	return out
}

func requireSameTables(t *testing.T, a, b *Collection) {
	t.Helper()
	for i, ta := range a.Tables {
		tb := b.Tables[i]
		require.Equal(t, ta.Data, tb.Data, "weights of %q", ta.Name)
		require.Equal(t, ta.State, tb.State, "state of %q", ta.Name)
		require.Equal(t, ta.Step[0], tb.Step[0], "step of %q", ta.Name)
	}
}
