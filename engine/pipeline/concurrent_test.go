package pipeline

import (
	"context"
	"io"
	"sync"
	"testing"

	"github.com/recgo/recgo/engine/reader"
	"github.com/stretchr/testify/require"
)

// TestBatchesReleasedOnOtherGoroutines frees every batch on goroutines of its own while the pipeline
// runs and then closes (as Python's collector frees a batch's handle on whatever thread drops it):
// under -race the pool's hand-backs, the stages' takes and Close share no unguarded state, and
// every batch read equals the serial run's.
func TestBatchesReleasedOnOtherGoroutines(t *testing.T) {
	eng := synthEngine(t)
	syn, err := reader.NewSynthetic(synthCfg(3000), reader.Options{})
	require.NoError(t, err)
	want := serialRun(t, syn, eng, 64)
	for _, stopAt := range []int{len(want), 10} {
		src, err := reader.NewSynthetic(synthCfg(3000), reader.Options{})
		require.NoError(t, err)
		p, err := New(context.Background(), src, eng, Config{BatchSize: 64, Depth: 3, Workers: 2, Tables: synthTables})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for step := 0; step < stopAt; step++ {
			b, err := p.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			require.Equal(t, want[step].values, b.Values, "step %d", step)
			require.Equal(t, want[step].dense, b.Dense, "step %d", step)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = b.Close()
			}()
		}
		require.NoError(t, p.Close())
		wg.Wait()
	}
}
