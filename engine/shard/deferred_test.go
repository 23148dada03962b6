package shard

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/embedding"
)

func TestDeferredFloats(t *testing.T) {
	build := func(vals []float32) func([]float32) error {
		return func(dst []float32) error { return checkBuilt("test", append(dst[:0], vals...), dst) }
	}
	cases := []struct {
		name    string
		op      *Op
		dst     int
		want    []float32
		wantErr string
	}{
		{name: "built in place", op: deferredFloats(GroupWorld, 3, build([]float32{1, 2, 3}), nil, nil), dst: 3, want: []float32{1, 2, 3}},
		{name: "empty", op: deferredFloats(GroupWorld, 0, build(nil), nil, nil), dst: 0, want: []float32{}},
		{name: "materialised op copied", op: &Op{Elem: ElemFloat32, SendF: []float32{4, 5}}, dst: 2, want: []float32{4, 5}},
		{name: "short destination", op: deferredFloats(GroupWorld, 3, build([]float32{1, 2, 3}), nil, nil), dst: 2, wantErr: "send buffer of 2 for 3 values"},
		{name: "builder writes fewer than announced", op: deferredFloats(GroupWorld, 3, build([]float32{1, 2}), nil, nil), dst: 3, wantErr: "2 values built for 3 announced"},
		{name: "builder writes more than announced", op: deferredFloats(GroupWorld, 1, build([]float32{1, 2}), nil, nil), dst: 1, wantErr: "2 values built for 1 announced"},
		{name: "not a float op", op: &Op{Elem: ElemInt64, SendI: []int64{1}}, dst: 1, wantErr: "element type 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]float32, c.dst)
			err := c.op.WriteFloats(dst)
			if c.wantErr != "" {
				require.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, dst)
			require.NoError(t, c.op.WriteFloats(dst), "a second write builds the same values")
			require.Equal(t, c.want, dst)
			got, err := c.op.Floats(nil)
			require.NoError(t, err)
			require.Equal(t, c.want, append([]float32{}, got...))
		})
	}
}

// TestDeferredSendsAgree checks, on every float op of sharded training steps (rows and partial sums
// forward, gradients backward; flat and hierarchical, owner pooling forced), that the send buffer
// written into a caller's buffer (the C ABI's path) equals the one built into an engine buffer.
func TestDeferredSendsAgree(t *testing.T) {
	for _, mode := range []Mode{Flat, Hierarchical} {
		t.Run(mode.String(), func(t *testing.T) {
			w := newTestWorld(t, 2, 2, mode, mixedKinds, mixedRows, mixedDims, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
			for _, c := range w.ranks {
				require.NoError(t, c.SetReturns([]Return{ReturnPooled, ReturnPooled, ReturnPooled, ReturnPooled}))
			}
			floats, deferred := 0, 0
			agree := func(r int, op *Op) {
				if op.Elem != ElemFloat32 {
					return
				}
				floats++
				if op.buildF != nil {
					deferred++
				}
				dst := make([]float32, op.SendLen())
				require.NoError(t, op.WriteFloats(dst))
				alt := *op // a copy: Floats on the op itself would hand its buffer to the free lists at Feed
				got, err := alt.Floats(nil)
				require.NoError(t, err)
				require.Equal(t, dst, append([]float32{}, got...), "rank %d", r)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			W, Bl := w.topo.World(), 5
			for step := 0; step < 2; step++ {
				_, lens, vals := randBatch(rng, len(mixedKinds), W*Bl, mixedRows)
				steps, xs := make([]*Step, W), make([]*Exchange, W)
				for r, c := range w.ranks {
					s, err := c.Begin(sliceBatch(lens, vals, r*Bl, (r+1)*Bl, true))
					require.NoError(t, err)
					steps[r], xs[r] = s, s.X
				}
				runLockstep(t, w.topo, xs, agree)
				for _, s := range steps {
					out := make([]float32, Bl*w.ref.Width())
					require.NoError(t, s.Pool(out))
					for i := range out {
						out[i] = float32(i%5) - 2
					}
					require.NoError(t, s.Backward(out, true))
				}
				runLockstep(t, w.topo, xs, agree)
			}
			require.Positive(t, deferred)
			require.Less(t, deferred, floats, "the data-parallel table's all-reduce sends a built buffer")
		})
	}
}
