package reader

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// multiLine is a CSV file whose quoted fields span lines (line endings "\n" and "\r\n" inside them,
// a blank line inside one), and its rows' (id, text) as Python's csv module reads them
// (open(newline=""): the line endings inside a field are its text).
const multiLine = "id,text\n" +
	"1,\"one\nline two\"\n" +
	"2,plain\r\n" +
	"3,\"a\r\n\r\nb, \"\"c\"\"\"\r\n" +
	"4,\"\"\n" +
	"5,\"x\ny\"\n"

var multiLineRows = []struct {
	id   int64
	text string
}{{1, "one\nline two"}, {2, "plain"}, {3, "a\r\n\r\nb, \"c\""}, {4, ""}, {5, "x\ny"}}

var textCols = []Column{{Name: "id", Role: RoleSparse}, {Name: "text", Role: RoleSparse, Type: "string"}}

// textRows reads src to its end or first error, one row per batch, and returns (id, text) per row
// and the position before each row.
func textRows(t *testing.T, src Source) (ids []int64, texts []string, before []Position) {
	t.Helper()
	for {
		before = append(before, src.Position())
		var b Batch
		if n, _ := src.Read(&b, 1); n == 0 {
			return ids, texts, before[:len(before)-1]
		}
		ids = append(ids, b.Inputs[0].Ints...)
		texts = append(texts, string(b.Inputs[1].Bytes))
	}
}

// A quoted CSV field spanning lines is read whole, as Python's csv module reads it (before session
// 37 the row was malformed, "a quoted field that its line does not close", and under skip_bad its
// other lines were read as rows of their own), in plain and gzip files, on one rank or two; a
// position taken after such a row resumes at the next row, by byte offset or, in gzip, by counting
// rows.
func TestCSVQuotedFieldsSpanningLines(t *testing.T) {
	for _, name := range []string{"m.csv", "m.csv.gz"} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, name, multiLine)
			src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true})
			require.NoError(t, err)
			ids, texts, before := textRows(t, src)
			require.NoError(t, src.Close())
			require.Len(t, ids, len(multiLineRows))
			for i, r := range multiLineRows {
				assert.Equal(t, r.id, ids[i])
				assert.Equal(t, r.text, texts[i])
			}
			// Sharded over two ranks, record g goes to rank g mod 2, however many lines it spans.
			for rank := 0; rank < 2; rank++ {
				src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true,
					Options: Options{Rank: rank, WorldSize: 2}})
				require.NoError(t, err)
				gotIDs, gotTexts, _ := textRows(t, src)
				require.NoError(t, src.Close())
				var wantIDs []int64
				var wantTexts []string
				for i := rank; i < len(ids); i += 2 {
					wantIDs, wantTexts = append(wantIDs, ids[i]), append(wantTexts, texts[i])
				}
				assert.Equal(t, wantIDs, gotIDs, "rank %d", rank)
				assert.Equal(t, wantTexts, gotTexts, "rank %d", rank)
			}
			// Shuffled in windows of three rows: every record once, whole.
			shuffled, err := Open(&Spec{Kind: "csv", Paths: []string{path}, Columns: textCols, Header: true,
				WorldSize: 1, Shuffle: 3, Seed: 5})
			require.NoError(t, err)
			gotIDs, gotTexts, _ := textRows(t, shuffled)
			require.NoError(t, shuffled.Close())
			require.Len(t, gotIDs, len(ids))
			for i, id := range gotIDs {
				assert.Equal(t, multiLineRows[id-1].text, gotTexts[i])
			}
			assert.ElementsMatch(t, ids, gotIDs)
			for i, p := range before {
				src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true})
				require.NoError(t, err)
				require.NoError(t, src.Seek(p))
				gotIDs, gotTexts, _ := textRows(t, src)
				require.NoError(t, src.Close())
				assert.Equal(t, ids[i:], gotIDs, "resumed before row %d", i)
				assert.Equal(t, texts[i:], gotTexts, "resumed before row %d", i)
			}
		})
	}
}

// Malformed records name the line they start on, also after a resume past records of several
// lines (the resume numbers lines as one per row until an error counts them); an unclosed quote
// is skipped under skip_bad as one row, not read as rows of its lines.
func TestCSVMultiLineErrors(t *testing.T) {
	bad := multiLine + "x,\"y\nz\"\n" // a bad ID on the line after the rows above
	path := writeFile(t, "bad.csv", bad)
	src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true})
	require.NoError(t, err)
	var b Batch
	_, err = src.Read(&b, 10)
	assert.ErrorContains(t, err, "bad.csv line 11 column 1 (id): \"x\" is not a valid int value")
	require.NoError(t, src.Close())
	for _, at := range []int{2, 4} { // resumed after rows of several lines
		src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true})
		require.NoError(t, err)
		_, _, before := textRows(t, mustCSV(t, path))
		require.NoError(t, src.Seek(before[at]))
		_, err = src.Read(&b, 10)
		assert.ErrorContains(t, err, "bad.csv line 11 column 1 (id)", "resumed before row %d", at)
		require.NoError(t, src.Close())
	}

	// An unclosed quote: an error naming its line, or one skipped row whose lines are not rows.
	unclosed := "id,text\n1,a\n2,\"b\n3,c\n4,d\n"
	path = writeFile(t, "unclosed.csv", unclosed)
	_, _, err = readCSVIDs(t, path, false)
	assert.ErrorContains(t, err, "unclosed.csv line 3: a quoted field that starts on this line is not closed by the end of the file")
	ids, skipped, err := readCSVIDs(t, path, true)
	require.NoError(t, err)
	assert.Equal(t, []int64{1}, ids)
	assert.Equal(t, int64(1), skipped)

	// A record past the line limit is malformed, and the reader goes on after it.
	long := "id,text\n1,\"" + strings.Repeat("a\n", maxLine/2) + "\"\n2,b\n"
	path = filepath.Join(t.TempDir(), "long.csv")
	require.NoError(t, os.WriteFile(path, []byte(long), 0o644))
	_, _, err = readCSVIDs(t, path, false)
	assert.ErrorContains(t, err, "long.csv line 2: a quoted field that starts on this line runs to line")
}

func mustCSV(t *testing.T, path string) Source {
	src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// readCSVIDs reads path's id column to its end: the IDs, the rows skipped and the error.
func readCSVIDs(t *testing.T, path string, skip bool) ([]int64, int64, error) {
	src, err := NewCSV([]string{path}, CSVOptions{Columns: textCols, Header: true, Options: Options{SkipBad: skip}})
	require.NoError(t, err)
	defer src.Close()
	var ids []int64
	for {
		var b Batch
		n, err := src.Read(&b, 4)
		if n == 0 {
			if err != nil && err.Error() == "EOF" {
				err = nil
			}
			return ids, src.Position().Skipped, err
		}
		ids = append(ids, b.Inputs[0].Ints...)
	}
}

// FuzzCSVRecords: rows Go's csv writer makes of any text fields (line breaks, quotes and delimiters
// included; "\n" or "\r\n" line endings) read back as those fields, row for row, whether the record
// is one line or several.
func FuzzCSVRecords(f *testing.F) {
	f.Add("a\nb", "c\r\nd", `"q"`, "x,y", false)
	f.Add("", "\n", " lead", "\"\n\"", true)
	path := filepath.Join(f.TempDir(), "f.csv") // one file per process, rewritten by every input
	f.Fuzz(func(t *testing.T, a, b, c, d string, crlf bool) {
		rows := [][]string{{"1", a, b}, {"2", c, d}, {"3", d + a, ""}}
		var buf bytes.Buffer
		w := csv.NewWriter(&buf)
		w.UseCRLF = crlf
		require.NoError(t, w.Write([]string{"id", "s", "t"}))
		require.NoError(t, w.WriteAll(rows))
		for _, r := range rows {
			for _, s := range r[1:] {
				if strings.ContainsRune(s, '\r') {
					return // a bare "\r" is text to recgo but a line ending to Python's csv (docs/pipeline.md)
				}
			}
		}
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
		cols := []Column{{Name: "id", Role: RoleSparse}, {Name: "s", Role: RoleSparse, Type: "string"},
			{Name: "t", Role: RoleSparse, Type: "string"}}
		src, err := NewCSV([]string{path}, CSVOptions{Columns: cols, Header: true})
		require.NoError(t, err)
		defer src.Close()
		var got Batch
		_, err = src.Read(&got, 8)
		require.NoError(t, err, "%q", buf.String())
		require.Equal(t, []int64{1, 2, 3}, got.Inputs[0].Ints)
		for k := 1; k <= 2; k++ {
			var want []byte
			var lens []int64
			for _, r := range rows {
				want = append(want, r[k]...)
				lens = append(lens, int64(min(len(r[k]), 1)))
			}
			if crlf { // the writer wrote each "\n" inside a field as "\r\n", which is the field's text
				want = bytes.ReplaceAll(want, []byte("\n"), []byte("\r\n"))
			}
			assert.Equal(t, string(want), string(got.Inputs[k].Bytes), "%q", buf.String())
			assert.Equal(t, lens, got.Inputs[k].Lengths, "%q", buf.String())
		}
	})
}
