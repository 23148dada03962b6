package reader

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// criteoLines is n Criteo lines: with a label (40 fields), or as a test file's (39, no label).
// criteoOfThree opens a Criteo source of three labelled lines (criteoLines).
func criteoOfThree(t *testing.T) Source {
	src, err := NewCriteo([]string{writeFile(t, "c.txt", criteoLines(3, true))}, CriteoOptions{})
	require.NoError(t, err)
	return src
}

func criteoLines(n int, labelled bool) string {
	var sb strings.Builder
	for i := range n {
		if labelled {
			fmt.Fprintf(&sb, "%d\t", i%2)
		}
		for j := range 13 {
			fmt.Fprintf(&sb, "%d\t", i+j)
		}
		for j := range 26 {
			sep := "\t"
			if j == 25 {
				sep = "\n"
			}
			fmt.Fprintf(&sb, "%08x%s", i*26+j, sep)
		}
	}
	return sb.String()
}

// drain reads src to its end, returning the samples read and the error that ended it (nil at EOF).
func drain(src Source) (int, error) {
	total := 0
	for {
		var b Batch
		n, err := src.Read(&b, 7)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		total += n
	}
}

// Under SkipBad a file none of whose rows parse (Criteo read with the wrong labels=, a Parquet file
// without its labels) fails at its end, naming the file and the first bad row, instead of reading
// as nothing with every row counted as skipped; a file partly bad, a rank with fewer than allBadMin
// rows of a shared file, and a file lost to damage (truncated) are read as before, the first skip
// reported by FirstSkipped.
func TestSkipBadAllBadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, ".gz") {
			gzipFile(t, p, []byte(text))
		} else {
			require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		}
		return p
	}
	test := write("test.txt", criteoLines(40, false))
	train := write("train.txt", criteoLines(40, true))
	half := write("half.txt", criteoLines(20, true)+criteoLines(20, false))
	gz := filepath.Join(dir, "cut.gz") // one line, cut inside it: damage, not a malformed row
	gzipFile(t, gz, []byte(criteoLines(50, true)))
	data, err := os.ReadFile(gz)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(gz, data[:40], 0o644))

	tests := []struct {
		name        string
		paths       []string
		rank, world int
		want        string // error substring ("": read to the end)
		samples     int    // read to the end
		skipped     int64
	}{
		{"test file, labels=True", []string{test}, 0, 1, "test.txt: all 40 rows read were malformed", 0, 40},
		{"one rank's share of it", []string{test}, 1, 4, "test.txt: all 10 rows read were malformed", 0, 10},
		{"a share under allBadMin", []string{test}, 1, 8, "", 0, 5},
		{"after a good file", []string{train, test}, 0, 1, "test.txt: all 40 rows read were malformed", 0, 40},
		{"half bad", []string{half}, 0, 1, "", 20, 20},
		{"damage only", []string{gz, train}, 0, 1, "", 40, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, err := NewCriteo(tc.paths, CriteoOptions{Options: Options{Rank: tc.rank, WorldSize: tc.world, SkipBad: true}})
			require.NoError(t, err)
			defer src.Close()
			n, err := drain(src)
			if tc.want != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, errs.ErrInvalid)
				assert.Contains(t, err.Error(), tc.want)
				assert.Contains(t, err.Error(), "The first: "+test+" line ") // the first bad row, where it is
				assert.Contains(t, err.Error(), "if the file has no label column, read it with labels=False")
			} else {
				require.NoError(t, err)
				assert.Equal(t, tc.samples, n) // (a failed read's batch is discarded)
			}
			assert.Equal(t, tc.skipped, src.Position().Skipped)
			first := src.(SkipReporter).FirstSkipped()
			require.Error(t, first)
		})
	}
}

// idRow is a Parquet row of an optional label and an ID.
type idRow struct {
	Label *float64 `parquet:"label,optional"`
	ID    int64    `parquet:"id"`
}

// idRows is labelled rows (label 1), then unlabelled ones, with IDs 0, 1, ….
func idRows(labelled, unlabelled int) []idRow {
	one := 1.0
	rows := make([]idRow, labelled+unlabelled)
	for i := range rows {
		rows[i].ID = int64(i)
		if i < labelled {
			rows[i].Label = &one
		}
	}
	return rows
}

// A Parquet file whose labels are all missing fails under SkipBad as a text file of bad rows does.
func TestSkipBadAllBadParquet(t *testing.T) {
	path := saveFile(t, "nolabels.parquet", writeGroups(t, [][]idRow{idRows(0, 20)}))
	good := saveFile(t, "good.parquet", writeGroups(t, [][]idRow{idRows(1, 0)}))

	cols := []Column{{Name: "label", Role: RoleLabel}, {Name: "id", Role: RoleSparse}}
	src, err := NewParquet([]string{good, path}, ParquetOptions{Columns: cols, Options: Options{SkipBad: true}})
	require.NoError(t, err)
	defer src.Close()
	_, err = drain(src)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nolabels.parquet: all 20 rows read were malformed and skipped (skip_bad)")
	assert.Contains(t, err.Error(), "the label is missing")
}
