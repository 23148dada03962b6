package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/internal/errs"
)

// seqCSV writes rows rows of a 40-value sequence "seq" (0..39) and an int "n".
func seqCSV(t *testing.T, rows int) reader.Source {
	var text strings.Builder
	text.WriteString("seq,n\n")
	vals := make([]string, 40)
	for i := range vals {
		vals[i] = fmt.Sprint(i)
	}
	for r := range rows {
		fmt.Fprintf(&text, "%s,%d\n", strings.Join(vals, "|"), r)
	}
	path := filepath.Join(t.TempDir(), "seq.csv")
	require.NoError(t, os.WriteFile(path, []byte(text.String()), 0o644))
	src, err := reader.NewCSV([]string{path}, reader.CSVOptions{Header: true,
		Columns: []reader.Column{{Name: "seq", Role: reader.RoleSequence}, {Name: "n", Role: reader.RoleSparse}}})
	require.NoError(t, err)
	return src
}

func engineOf(t *testing.T, spec string) *feature.Engine {
	s, err := feature.ParseSpec([]byte(spec))
	require.NoError(t, err)
	eng, err := feature.Compile(s)
	require.NoError(t, err)
	return eng
}

// A raw batch is bounded for the reader's memory, not at the engine's max_values: a field that a
// transform shrinks before the engine checks its buffers (truncate, filter), or that no feature
// reads, may hold more raw values than max_values, and the engine takes the batch. Until session 43
// the pipeline handed the reader max_values itself, and the reader refused such batches. A field
// the engine maps value by value past max_values is still refused, by the engine, naming the feature.
func TestRawBatchPastMaxValuesIsTheEnginesToRefuse(t *testing.T) {
	for _, c := range []struct {
		name    string
		spec    string
		depth   int
		lengths []int64 // the output's lengths of the first batch (feature-major); nil: refused
		want    string  // the refusal's words
	}{
		{"truncate first", `{"max_values": 10, "features": [{"name": "seq", "ops": [{"op": "truncate", "n": 2}, {"op": "mod", "n": 7}]}]}`,
			0, []int64{2, 2, 2, 2, 2}, ""},
		{"truncate first, read ahead", `{"max_values": 10, "features": [{"name": "seq", "ops": [{"op": "truncate", "n": 2, "keep": "last"}]}]}`,
			2, []int64{2, 2, 2, 2, 2}, ""},
		{"filter first", `{"max_values": 10, "features": [{"name": "seq", "ops": [{"op": "filter", "values": [3], "mode": "keep"}, {"op": "hash", "seed": 1}]}]}`,
			0, []int64{1, 1, 1, 1, 1}, ""},
		{"a field no feature reads", `{"max_values": 10, "features": [{"name": "n", "ops": [{"op": "mod", "n": 3}]}]}`,
			1, []int64{1, 1, 1, 1, 1}, ""},
		{"mapped value by value", `{"max_values": 10, "features": [{"name": "seq", "ops": [{"op": "mod", "n": 7}]}]}`,
			0, nil, "200 values"},
		{"copied as it is", `{"max_values": 10, "features": [{"name": "seq", "ops": []}]}`,
			2, nil, `feature "seq"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := New(context.Background(), seqCSV(t, 10), engineOf(t, c.spec), Config{BatchSize: 5, Depth: c.depth})
			require.NoError(t, err)
			defer p.Close()
			b, err := p.Next()
			if c.lengths == nil {
				require.ErrorIs(t, err, errs.ErrCapacity)
				var se *StageError
				require.True(t, errors.As(err, &se), "%v", err)
				assert.Equal(t, StageTransform, se.Stage, "%v", err)
				assert.ErrorContains(t, err, c.want)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.lengths, b.Lengths)
			require.NoError(t, b.Close())
			b, err = p.Next()
			require.NoError(t, err)
			require.NoError(t, b.Close())
			_, err = p.Next()
			require.ErrorIs(t, err, io.EOF)
		})
	}
}

// boundSource records the bound each Read is given.
type boundSource struct {
	reader.Source
	bounds []int64
}

func (s *boundSource) Read(b *reader.Batch, n int) (int, error) {
	s.bounds = append(s.bounds, b.MaxValues)
	return s.Source.Read(b, n)
}

// The pipeline hands its reader the larger of the reader's default bound and the engine's
// max_values: raising max_values raises it (a field mapped value by value needs as many raw values),
// lowering it does not.
func TestPipelineHandsTheReaderItsMemoryBound(t *testing.T) {
	for _, c := range []struct {
		maxValues int64 // 0: the default
		want      int64
	}{
		{0, reader.DefaultMaxValues},
		{10, reader.DefaultMaxValues},
		{1 << 30, 1 << 30},
	} {
		t.Run(fmt.Sprint(c.maxValues), func(t *testing.T) {
			src := &boundSource{Source: seqCSV(t, 3)}
			eng := engineOf(t, fmt.Sprintf(`{"max_values": %d, "features": [{"name": "n", "ops": [{"op": "mod", "n": 3}]}]}`, c.maxValues))
			p, err := New(context.Background(), src, eng, Config{BatchSize: 2})
			require.NoError(t, err)
			defer p.Close()
			drain(t, p, nil)
			require.NotEmpty(t, src.bounds)
			for _, got := range src.bounds {
				assert.Equal(t, c.want, got)
			}
		})
	}
}
