package reader

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
)

// A raw batch's sparse fields are bounded (Batch.MaxValues) before their buffers grow: a file whose
// rows hold more values than a batch's bound fails the Read with a capacity error naming the field,
// the batch and the bound (a small gzip CSV of long sequences made the reader allocate until the
// process died). The tests set small bounds; the default is the feature engine's.
func TestBatchFieldLimit(t *testing.T) {
	seqCSV := writeFile(t, "seq.csv.gz", "label,seq,tag\n"+
		"1,1|2|3|4,abcdefghij\n0,5|6|7|8,klmnopqrst\n1,9|10|11|12,uvwxyzabcd\n")
	seqCols := []Column{{Name: "label", Role: RoleLabel}, {Name: "seq", Role: RoleSequence}}
	tagCols := []Column{{Name: "label", Role: RoleLabel}, {Name: "tag", Role: RoleSparse, Type: "string"}}
	csv := func(cols []Column, skip bool) func(t *testing.T) Source {
		return func(t *testing.T) Source {
			src, err := NewCSV([]string{seqCSV}, CSVOptions{Options: Options{SkipBad: skip}, Columns: cols, Header: true})
			require.NoError(t, err)
			return src
		}
	}
	pqPath := filepath.Join(t.TempDir(), "a.parquet")
	writeParquet(t, pqPath, pqRows(20)) // hist holds i%5 values in row i (see pqRows)
	pq := func(skip bool) func(t *testing.T) Source {
		return func(t *testing.T) Source {
			src, err := NewParquet([]string{pqPath}, ParquetOptions{Options: Options{SkipBad: skip}, Columns: pqCols})
			require.NoError(t, err)
			return src
		}
	}
	synthetic := func(t *testing.T) Source {
		src, err := NewSynthetic(SyntheticConfig{Samples: 10, Seed: 1,
			Fields: []SyntheticField{{Name: "a", Rows: 100, Alpha: 1, Coverage: 1, Pooling: 1}}}, Options{})
		require.NoError(t, err)
		return src
	}
	// Three rows of one value and a row of five: one shuffled window of them all, read in pairs.
	unevenCSV := writeFile(t, "uneven.csv", "label,seq\n1,1\n0,2\n1,3\n0,4|5|6|7|8\n")
	shuffled := func(window int) func(t *testing.T) Source {
		return func(t *testing.T) Source {
			inner, err := NewCSV([]string{unevenCSV}, CSVOptions{Columns: seqCols, Header: true})
			require.NoError(t, err)
			src, err := NewShuffled(inner, window, 3, 0)
			require.NoError(t, err)
			return src
		}
	}
	cases := []struct {
		name  string
		open  func(t *testing.T) Source
		limit int64
		batch int
		want  []string // the capacity error's words; none: every batch reads
	}{
		{"csv sequence at the bound", csv(seqCols, false), 8, 2, nil},
		{"csv sequence past the bound", csv(seqCols, false), 8, 3,
			[]string{`seq.csv.gz: field "seq" would hold 12 values by row 3 of a batch of 3 rows`, "limit of 8 values"}},
		{"csv sequence past the bound, skip_bad", csv(seqCols, true), 8, 3,
			[]string{`field "seq" would hold 12 values by row 3 of a batch of 3 rows`}},
		{"csv strings past the bytes bound", csv(tagCols, false), 2, 2,
			[]string{`field "tag" would hold 20 bytes of strings by row 2 of a batch of 2 rows`, "limit of 16 bytes"}},
		{"csv strings at the bytes bound", csv(tagCols, false), 2, 1, nil},
		{"parquet sequence at the bound", pq(false), 10, 5, nil},
		{"parquet sequence past the bound", pq(false), 10, 7,
			[]string{`a.parquet: field "hist" would hold 11 values by row 7 of a batch of 7 rows`, "limit of 10 values"}},
		{"parquet sequence past the bound, skip_bad", pq(true), 10, 7, []string{`field "hist" would hold 11 values`}},
		{"criteo", criteoOfThree, 1, 2, []string{`field "I1" would hold 2 values by row 2 of a batch of 2 rows`}},
		{"synthetic", synthetic, 2, 5, []string{`synthetic source: field "a" would hold`, "limit of 2 values"}},
		{"shuffled window within its batches' bounds", shuffled(4), 6, 2, nil},
		{"shuffled batch past the bound", shuffled(4), 4, 2,
			[]string{`shuffled source: field "seq" would hold`, "limit of 4 values"}},
		{"shuffled window past its batches' bounds", shuffled(4), 3, 2,
			[]string{"shuffle window of 4 rows (its fields bounded at 3 values for each batch of 2 rows it holds)",
				`field "seq" would hold 8 values by row 4 of a batch of 4 rows`, "limit of 6 values"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := c.open(t)
			defer src.Close()
			b := Batch{MaxValues: c.limit}
			var err error
			for err == nil {
				_, err = src.Read(&b, c.batch)
				if err == nil {
					for _, in := range b.Inputs {
						require.LessOrEqual(t, fieldValues(&in), c.limit)
						require.LessOrEqual(t, int64(len(in.Bytes)), 8*c.limit)
					}
				}
			}
			if c.want == nil {
				require.ErrorIs(t, err, io.EOF)
				return
			}
			require.ErrorIs(t, err, errs.ErrCapacity)
			assert.NotErrorIs(t, err, errs.ErrInvalid)
			for _, w := range c.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

// The default bound is the feature engine's default max_values, for values and for the bytes of as
// many int64s.
func TestBatchFieldLimitDefault(t *testing.T) {
	for _, c := range []struct {
		set           int64
		values, bytes int64
	}{
		{0, feature.DefaultMaxValues, 8 * feature.DefaultMaxValues},
		{-1, feature.DefaultMaxValues, 8 * feature.DefaultMaxValues},
		{5, 5, 40},
		{1 << 62, 1 << 62, (1<<63 - 1) / 8 * 8},
	} {
		v, b := (&Batch{MaxValues: c.set}).limits()
		assert.Equal(t, c.values, v, "MaxValues %d", c.set)
		assert.Equal(t, c.bytes, b, "MaxValues %d", c.set)
	}
}
