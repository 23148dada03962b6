package reader

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run of blank lines longer than the reader's 1 MiB buffer: at the end of a file it is no rows (it
// was named "blank line (rows follow it)"), as a short run is; before rows it is malformed rows, one
// a line, named by its first and last lines and skipped under skip_bad on every rank's share (each
// line looked a buffer ahead again: a run of 2M lines took hours); positions resume across it; in
// plain and gzip files, with "\n" and "\r\n" endings.
func TestCSVLongBlankRuns(t *testing.T) {
	const run = 1_200_000 // lines: more than 1 MiB of line endings
	for _, tc := range []struct{ name, eol string }{{"m.csv", "\n"}, {"m.csv.gz", "\n"}, {"crlf.csv", "\r\n"}} {
		rows := func(ids ...int) string {
			var b strings.Builder
			for _, id := range ids {
				fmt.Fprintf(&b, "%d,t%d%s", id, id, tc.eol)
			}
			return b.String()
		}
		blank := strings.Repeat(tc.eol, run)
		t.Run(tc.name+" trailing", func(t *testing.T) {
			path := writeFile(t, tc.name, "id,text"+tc.eol+rows(1, 2, 3)+blank)
			ids, skipped, err := readCSVIDs(t, path, false)
			require.NoError(t, err)
			assert.Equal(t, []int64{1, 2, 3}, ids)
			assert.Zero(t, skipped)
		})
		t.Run(tc.name+" before rows", func(t *testing.T) {
			path := writeFile(t, tc.name, "id,text"+tc.eol+rows(1, 2)+blank+rows(3, 4))
			_, _, err := readCSVIDs(t, path, false)
			assert.ErrorContains(t, err, fmt.Sprintf("line 4: blank lines 4 to %d (rows follow them)", 3+run))
			start := time.Now()
			ids, skipped, err := readCSVIDs(t, path, true)
			require.NoError(t, err)
			assert.Less(t, time.Since(start), time.Minute)
			assert.Equal(t, []int64{1, 2, 3, 4}, ids)
			assert.Equal(t, int64(run), skipped)
			// Two ranks: row g (blank lines counted) goes to rank g mod 2.
			total := int64(0)
			for rank := range 2 {
				src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true,
					Options: Options{Rank: rank, WorldSize: 2, SkipBad: true}})
				require.NoError(t, err)
				got, _, _ := textRows(t, src)
				total += src.Position().Skipped
				require.NoError(t, src.Close())
				want := map[int][]int64{0: {1, 3}, 1: {2, 4}}[rank] // rows 0, 1, 2+run, 3+run (run is even)
				assert.Equal(t, want, got, "rank %d", rank)
			}
			assert.Equal(t, int64(run), total)
			// Resumed from the position before each row, the rest reads as it did.
			src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true, Options: Options{SkipBad: true}})
			require.NoError(t, err)
			all, _, before := textRows(t, src)
			require.NoError(t, src.Close())
			require.Equal(t, []int64{1, 2, 3, 4}, all)
			for i, p := range before {
				src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true, Options: Options{SkipBad: true}})
				require.NoError(t, err)
				require.NoError(t, src.Seek(p))
				got, _, _ := textRows(t, src)
				require.NoError(t, src.Close())
				assert.Equal(t, all[i:], got, "resumed before row %d", i)
			}
		})
	}
}
