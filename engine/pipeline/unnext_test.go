package pipeline

import (
	"context"
	"io"
	"testing"

	"github.com/recgo/recgo/engine/reader"
	"github.com/stretchr/testify/require"
)

// A batch given back with Unnext comes out of the next Next unchanged, with the position and step
// before it in between; the stream then goes on as if it had never been given back.
func TestUnnextHandsTheBatchOutAgain(t *testing.T) {
	eng := synthEngine(t)
	syn, _ := reader.NewSynthetic(synthCfg(1000), reader.Options{})
	want := serialRun(t, syn, eng, 100)
	for _, depth := range []int{0, 2} {
		syn, _ := reader.NewSynthetic(synthCfg(1000), reader.Options{})
		p, err := New(context.Background(), syn, eng, Config{BatchSize: 100, Depth: depth})
		require.NoError(t, err)
		require.Error(t, p.Unnext(nil), "nothing handed out yet")
		first, err := p.Next()
		require.NoError(t, err)
		first.Close()
		before, step := p.Position(), p.Step()
		b, err := p.Next()
		require.NoError(t, err)
		require.NoError(t, p.Unnext(b))
		require.Error(t, p.Unnext(b), "once")
		require.Equal(t, before, p.Position(), "depth %d", depth)
		require.Equal(t, step, p.Step())
		got := []serialBatch{want[0]}
		for {
			b, err := p.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			require.Equal(t, int64(len(got)), b.Step)
			got = append(got, serialBatch{values: append([]int64{}, b.Values...), lengths: append([]int64{}, b.Lengths...),
				labels: append([]float32{}, b.Labels...), dense: append([]float32{}, b.Dense...)})
			require.NoError(t, b.Close())
		}
		require.NoError(t, p.Close())
		require.Equal(t, want, got, "depth %d", depth)
	}
	// a batch given back and never taken again is freed by Close
	syn, _ = reader.NewSynthetic(synthCfg(1000), reader.Options{})
	p, err := New(context.Background(), syn, eng, Config{BatchSize: 100, Depth: 1})
	require.NoError(t, err)
	b, err := p.Next()
	require.NoError(t, err)
	require.NoError(t, p.Unnext(b))
	require.NoError(t, p.Close())
	require.Nil(t, b.Values)
}
