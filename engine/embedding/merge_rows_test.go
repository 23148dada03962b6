package embedding

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// snapshot copies a context's per-table dedup (distinct IDs, rows, inverse map).
func snapshot(ctx *Context) [][3][]int64 {
	out := make([][3][]int64, len(ctx.tables))
	for i, tc := range ctx.tables {
		inv := make([]int64, len(tc.inv))
		for p, x := range tc.inv {
			inv[p] = int64(x)
		}
		out[i] = [3][]int64{slices.Clone(tc.uniq), slices.Clone(tc.rows), inv}
	}
	return out
}

// TestNoDedupMergesToTheDedupContext: on fixed tables, the merge by row gives exactly the context
// deduplication gives (distinct rows in first-seen order), and the pooled outputs and backward
// (both paths, fused and not) are identical.
func TestNoDedupMergesToTheDedupContext(t *testing.T) {
	for _, path := range []BackwardPath{BackwardScatter, BackwardGrouped} {
		for seed := uint64(0); seed < 40; seed++ {
			t.Run(fmt.Sprintf("path%d/seed%d", path, seed), func(t *testing.T) {
				opt := OptimizerConfig{Kind: OptRowwiseAdagrad, LR: 0.3, Eps: 1e-8}
				on := newSetup(t, seed, seed%2 == 0, opt, Options{BackwardPath: path})
				off := newSetup(t, seed, seed%2 == 0, opt, Options{BackwardPath: path, NoDedup: true})
				out1, out2 := make([]float32, on.B*on.c.Width()), make([]float32, off.B*off.c.Width())
				for step := 0; step < 3; step++ {
					c1, err := on.c.Forward(on.b, out1, true, true)
					require.NoError(t, err)
					c2, err := off.c.Forward(off.b, out2, true, true)
					require.NoError(t, err)
					require.Equal(t, out1, out2)
					require.Equal(t, snapshot(c1), snapshot(c2))
					grad := make([]float32, len(out1))
					for i := range grad {
						grad[i] = float32(on.rng.NormFloat64())
					}
					require.NoError(t, on.c.Backward(c1, grad, nil, nil))
					require.NoError(t, off.c.Backward(c2, grad, nil, nil))
					on.c.Release(c1)
					off.c.Release(c2)
				}
				for i, tb := range on.c.Tables {
					require.Equal(t, tb.Data, off.c.Tables[i].Data, "weights")
					require.Equal(t, tb.State, off.c.Tables[i].State, "optimizer state")
				}
			})
		}
	}
}

// TestMergeRowsKeepsUnresolvedApart: with a row source that leaves IDs unresolved (−1) and maps
// two IDs to one row, the merge groups lookups by row, keeps each −1 lookup on its own, numbers
// the groups in first-seen order, and every lookup still finds its own row.
func TestMergeRowsKeepsUnresolvedApart(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 50; iter++ {
		n := r.IntN(200)
		nrows := int64(1 + r.IntN(5000))
		var tc tableCtx
		want := make([]int64, n)
		for p := 0; p < n; p++ {
			id := r.Int64N(40)
			tc.uniq = append(tc.uniq, id)
			row := (id * 7919) % nrows
			if id%5 == 0 {
				row = -1
			}
			tc.rows = append(tc.rows, row)
			tc.inv = append(tc.inv, int32(p))
			want[p] = row
		}
		ids := slices.Clone(tc.uniq)
		tc.mergeRows(nrows)
		seen := map[int64]bool{}
		next := int32(0)
		for p := 0; p < n; p++ {
			u := tc.inv[p]
			require.LessOrEqual(t, u, next, "first-seen numbering")
			if u == next {
				next++
			}
			require.Equal(t, want[p], tc.rows[u], "lookup %d finds its row", p)
			if want[p] < 0 {
				require.Equal(t, ids[p], tc.uniq[u])
			}
		}
		require.Equal(t, int(next), len(tc.rows))
		unresolved := 0
		for _, row := range tc.rows {
			if row < 0 {
				unresolved++
				continue
			}
			require.False(t, seen[row], "row %d listed twice", row)
			seen[row] = true
		}
		wantUnresolved := 0
		for _, row := range want {
			if row < 0 {
				wantUnresolved++
			}
		}
		require.Equal(t, wantUnresolved, unresolved, "each unresolved lookup stays apart")
	}
}

// TestSequenceNoDedupEqualsDedup: a sequence collection without dedup gives the same outputs, the
// same merged gradients (rows and values) and, fused, the same rows and state as with it.
func TestSequenceNoDedupEqualsDedup(t *testing.T) {
	splitMerge(t, func(t *testing.T) {
		for seed := uint64(0); seed < 30; seed++ {
			for _, opt := range []OptimizerConfig{{Kind: OptNone}, {Kind: OptAdam, LR: 0.1, Eps: 1e-8, Beta1: 0.9, Beta2: 0.99}} {
				a := newSeqSetup(t, seed, opt)
				b := newSeqSetup(t, seed, opt)
				off, err := NewSequenceCollectionWithOptions(b.owner.c, b.feats, Options{NoDedup: true})
				require.NoError(t, err)
				b.s = off
				for step := 0; step < 2; step++ {
					outs1, ng := a.buffers(t)
					outs2, _ := b.buffers(t)
					c1, err := a.s.Forward(a.b, outs1, true, true)
					require.NoError(t, err)
					c2, err := b.s.Forward(b.b, outs2, true, true)
					require.NoError(t, err)
					require.Equal(t, flatten(outs1), flatten(outs2))
					require.Equal(t, snapshot(c1), snapshot(c2))
					grad := make([]float32, ng)
					for i := range grad {
						grad[i] = float32(i%9) - 4
					}
					if opt.Kind == OptNone {
						tabs := a.s.Tables()
						grads := func(ctx *Context) ([][]int64, [][]float32) {
							rows, vals := make([][]int64, len(tabs)), make([][]float32, len(tabs))
							for j, tb := range tabs {
								rows[j] = make([]int64, ctx.Unique(j))
								vals[j] = make([]float32, ctx.Unique(j)*a.owner.c.Tables[tb].Dim)
							}
							return rows, vals
						}
						r1, v1 := grads(c1)
						r2, v2 := grads(c2)
						require.NoError(t, a.s.Backward(c1, grad, r1, v1))
						require.NoError(t, b.s.Backward(c2, grad, r2, v2))
						require.Equal(t, r1, r2)
						require.Equal(t, v1, v2)
					} else {
						require.NoError(t, a.s.Backward(c1, grad, nil, nil))
						require.NoError(t, b.s.Backward(c2, grad, nil, nil))
					}
					a.s.Release(c1)
					b.s.Release(c2)
				}
				for i, tb := range a.owner.c.Tables {
					require.Equal(t, tb.Data, b.owner.c.Tables[i].Data)
					require.Equal(t, tb.State, b.owner.c.Tables[i].State)
				}
			}
		}
	})
}
