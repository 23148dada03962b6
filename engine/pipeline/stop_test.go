package pipeline

import (
	"context"
	"io"
	"testing"

	"github.com/recgo/recgo/engine/reader"
	"github.com/stretchr/testify/require"
)

// A pipeline read to its end stops its goroutines and frees its buffers at once, not at Close (a
// caller keeping finished pipelines around piled up two goroutines and ~0.9 MB each); its position,
// step and counters stay readable, the batches handed out stay valid, and Next keeps saying io.EOF.
func TestTheEndStopsTheGoroutines(t *testing.T) {
	eng := synthEngine(t)
	for _, depth := range []int{0, 1, 3} {
		syn, err := reader.NewSynthetic(synthCfg(300), reader.Options{})
		require.NoError(t, err)
		p, err := New(context.Background(), syn, eng, Config{BatchSize: 64, Depth: depth, Workers: 2, Tables: synthTables})
		require.NoError(t, err)
		var held []*Prepared
		for {
			b, err := p.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			held = append(held, b)
		}
		require.Equal(t, int64(0), Running(), "depth %d", depth)
		require.Len(t, held, 5)
		require.Equal(t, int64(5), p.Step())
		require.Equal(t, int64(300), p.Stats().Samples)
		require.Equal(t, int64(300), p.Position().Global)
		require.Equal(t, 300-4*64, held[4].Size) // the short last batch, still readable
		_, err = p.Next()
		require.ErrorIs(t, err, io.EOF)
		require.NoError(t, p.Close())
		for _, b := range held {
			require.NoError(t, b.Close())
		}
	}
}

// closeCounter counts its source's Close calls.
type closeCounter struct {
	badSource
	closes int
}

func (s *closeCounter) Close() error { s.closes++; return s.Source.Close() }

// A stream that ends, or fails at a bad batch, closes its source at once (a pipeline stopped by a
// malformed line kept its file open until Close), and Close does not close it again.
func TestTheEndClosesTheSourceOnce(t *testing.T) {
	eng := synthEngine(t)
	for _, failAt := range []int{-1, 2} {
		for _, depth := range []int{0, 2} {
			syn, err := reader.NewSynthetic(synthCfg(300), reader.Options{})
			require.NoError(t, err)
			src := &closeCounter{badSource: badSource{Source: syn, failAt: failAt, readErr: true}}
			p, err := New(context.Background(), src, eng, Config{BatchSize: 64, Depth: depth, Tables: synthTables})
			require.NoError(t, err)
			for err == nil {
				var b *Prepared
				if b, err = p.Next(); b != nil {
					require.NoError(t, b.Close())
				}
			}
			if failAt < 0 {
				require.ErrorIs(t, err, io.EOF)
			} else {
				require.ErrorContains(t, err, "disk on fire")
			}
			require.Equal(t, 1, src.closes, "fail at %d, depth %d", failAt, depth)
			require.Equal(t, 2, p.DenseWidth()) // the schema stays readable
			require.NoError(t, p.Close())
			require.Equal(t, 1, src.closes)
		}
	}
}
