package reader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readN reads n samples from src one at a time (a pipeline's batches end anywhere).
func readN(t *testing.T, src Source, n int) {
	for range n {
		var b Batch
		got, err := src.Read(&b, 1)
		require.NoError(t, err)
		require.Equal(t, 1, got)
	}
}

// A source resumed inside a file whose last rows are malformed reads the rest as the uninterrupted
// source does, skipping them under SkipBad: the rank kept rows of the file before the position, so
// the file is not all bad. The per-file counts restarted at the seek, and the resumed source
// failed the file as "all rows read were malformed" (on one rank for any number of rows, on
// several from allBadMin), so a checkpoint taken there could not be resumed. A seek to a file's
// start still judges the whole file.
func TestSkipBadResumedInsideAFileReadsLikeTheUninterruptedRun(t *testing.T) {
	dir := t.TempDir()
	half := filepath.Join(dir, "half.txt") // good rows, then rows of the unlabelled layout
	require.NoError(t, os.WriteFile(half, []byte(criteoLines(20, true)+criteoLines(20, false)), 0o644))
	halfGz := filepath.Join(dir, "half.gz")
	gzipFile(t, halfGz, []byte(criteoLines(20, true)+criteoLines(20, false)))
	train := filepath.Join(dir, "train.txt")
	require.NoError(t, os.WriteFile(train, []byte(criteoLines(6, true)), 0o644))
	test := filepath.Join(dir, "test.txt")
	require.NoError(t, os.WriteFile(test, []byte(criteoLines(40, false)), 0o644))
	halfPq := halfParquet(t)
	cols := []Column{{Name: "label", Role: RoleLabel}, {Name: "id", Role: RoleSparse}}

	tests := []struct {
		name        string
		parquet     bool
		paths       []string
		rank, world int
		good        int    // the rank's samples
		want        string // the error of every run ("": none)
	}{
		{"plain, one rank", false, []string{half}, 0, 1, 20, ""},
		{"plain, rank 1 of 2", false, []string{half}, 1, 2, 10, ""},
		{"gzip, rank 0 of 2", false, []string{halfGz}, 0, 2, 10, ""},
		{"parquet, one rank", true, []string{halfPq}, 0, 1, 20, ""},
		{"parquet, rank 1 of 2", true, []string{halfPq}, 1, 2, 10, ""},
		{"an all-bad file after a good one", false, []string{train, test}, 0, 1, 6, "test.txt: all 40 rows read were malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			open := func() Source {
				opt := Options{Rank: tc.rank, WorldSize: tc.world, SkipBad: true}
				var src Source
				var err error
				if tc.parquet {
					src, err = NewParquet(tc.paths, ParquetOptions{Columns: cols, Options: opt})
				} else {
					src, err = NewCriteo(tc.paths, CriteoOptions{Options: opt})
				}
				require.NoError(t, err)
				t.Cleanup(func() { src.Close() })
				return src
			}
			for k := 0; k <= tc.good; k++ {
				first := open()
				readN(t, first, k)
				resumed := open()
				require.NoError(t, resumed.Seek(first.Position()))
				rest, err := drain(resumed)
				if tc.want != "" {
					require.Error(t, err, "resumed after %d samples", k)
					assert.Contains(t, err.Error(), tc.want)
					continue
				}
				require.NoError(t, err, "resumed after %d samples", k)
				assert.Equal(t, tc.good-k, rest, "resumed after %d samples", k)
				whole, err := drain(first)
				require.NoError(t, err)
				assert.Equal(t, first.Position().Skipped, resumed.Position().Skipped)
				assert.Equal(t, tc.good-k, whole)
			}
		})
	}
}

// halfParquet writes a Parquet file of 20 labelled rows, then 20 without their label.
func halfParquet(t *testing.T) string {
	return saveFile(t, "half.parquet", writeGroups(t, [][]idRow{idRows(20, 20)}, parquet.PageBufferSize(256)))
}

// rankRows counts a rank's global row indices in a range (row g belongs to rank g mod world).
func TestRankRows(t *testing.T) {
	tests := []struct {
		lo, hi      int64
		rank, world int
		want        int64
	}{
		{0, 0, 0, 1, 0},
		{0, 5, 0, 1, 5},
		{3, 5, 0, 2, 1},
		{3, 4, 0, 2, 0},
		{3, 4, 1, 2, 1},
		{0, 1, 1, 2, 0},
		{7, 20, 2, 4, 3},
	}
	for _, tc := range tests {
		want := int64(0)
		for g := tc.lo; g < tc.hi; g++ {
			if g%int64(tc.world) == int64(tc.rank) {
				want++
			}
		}
		require.Equal(t, want, tc.want, "table row %+v", tc)
		assert.Equal(t, tc.want, rankRows(tc.lo, tc.hi, tc.rank, tc.world), "%+v", tc)
	}
}
