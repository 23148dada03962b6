package reader

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every file is checked when a source opens, not when the reader reaches it.
func TestOpenChecksEveryFile(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, "good.txt", goodLine+"\n")
	h1 := writeFile(t, "h1.csv", "label,s\n1,2\n")
	h1b := writeFile(t, "h1.csv", "label,s\n1,2\n")
	h2 := writeFile(t, "h2.csv", "label,t\n1,2\n")
	badGz := writeFile(t, "bad.gz", "")
	require.NoError(t, os.WriteFile(badGz, []byte{0x1f, 0x8b, 0, 0}, 0o644))
	pq := filepath.Join(dir, "a.parquet")
	writeParquet(t, pq, pqRows(5))
	missing := filepath.Join(dir, "missing.txt")
	csvCols := []Column{{Name: "label", Role: RoleLabel}, {Name: "s", Role: RoleSparse}}
	cases := []struct {
		name string
		open func() (Source, error)
		io   bool
		want string
	}{
		{"criteo missing", func() (Source, error) { return NewCriteo([]string{good, missing}, CriteoOptions{}) }, true,
			"open " + missing},
		{"criteo directory", func() (Source, error) { return NewCriteo([]string{good, dir}, CriteoOptions{}) }, true,
			dir + " is a directory"},
		{"criteo bad gzip", func() (Source, error) { return NewCriteo([]string{good, badGz}, CriteoOptions{}) }, true,
			badGz + " line 1: bad gzip header"},
		{"csv missing", func() (Source, error) {
			return NewCSV([]string{h1, missing}, CSVOptions{Columns: csvCols, Header: true})
		}, true, "open " + missing},
		{"csv header", func() (Source, error) {
			return NewCSV([]string{h1, h1b, h2}, CSVOptions{Columns: csvCols, Header: true})
		}, false, h2 + ` line 1: missing column "s" (the header has "label", "t")`},
		{"parquet missing", func() (Source, error) {
			return NewParquet([]string{pq, missing}, ParquetOptions{Columns: pqCols})
		}, true, "open " + missing},
		{"parquet not parquet", func() (Source, error) {
			return NewParquet([]string{pq, good}, ParquetOptions{Columns: pqCols})
		}, true, good + ": not a readable Parquet file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.open()
			require.Error(t, err)
			assert.Equal(t, c.io, errors.Is(err, errs.ErrIO), err.Error())
			assert.Contains(t, err.Error(), c.want)
		})
	}
	// With every file good, reading starts at the first (the parser follows each file's header).
	h3 := writeFile(t, "h3.csv", "s,label\n5,0\n")
	src, err := NewCSV([]string{h1, h3}, CSVOptions{Columns: csvCols, Header: true})
	require.NoError(t, err)
	b := readAll(t, src, 10)[0]
	assert.Equal(t, []int64{2, 5}, b.Inputs[0].Ints)
	assert.Equal(t, []float32{1, 0}, b.Labels)
}

// A saved byte offset that cannot be a line start of the file (changed since) is refused.
func TestSeekChecksOffset(t *testing.T) {
	const text = "y,s\n1,10\n0,11\n1,12\n"
	cols := []Column{{Name: "y", Role: RoleLabel}, {Name: "s", Role: RoleSparse}}
	open := func(t *testing.T, path string) Source {
		src, err := NewCSV([]string{path}, CSVOptions{Columns: cols, Header: true})
		require.NoError(t, err)
		return src
	}
	path := writeFile(t, "a.csv", text)
	var b Batch
	src := open(t, path)
	_, err := src.Read(&b, 2)
	require.NoError(t, err)
	pos := src.Position()
	require.Equal(t, int64(len("y,s\n1,10\n0,11\n")), pos.Offset)
	cases := []struct {
		name   string
		text   string
		offset int64
		want   string // "" resumes
		rest   []int64
	}{
		{"same file", text, pos.Offset, "", []int64{12}},
		{"at the end", text, int64(len(text)), "", nil},
		{"end without newline", strings.TrimSuffix(text, "\n"), int64(len(text)) - 1, "", nil},
		{"shorter file", "y,s\n1,10\n", pos.Offset, "lies past the end of the file (the file has 9 bytes", nil},
		{"mid-line", "y,s\n1,100\n0,11\n1,12\n", pos.Offset, "is not at the start of a line", nil},
		{"before the data", text, 2, "lies before the first data line (byte 4)", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, "a.csv", c.text)
			again := open(t, p)
			q := pos
			q.Offset = c.offset
			err := again.Seek(q)
			if c.want != "" {
				require.Error(t, err)
				assert.True(t, errors.Is(err, errs.ErrInvalid))
				assert.Contains(t, err.Error(), p+": the position's byte offset ")
				assert.Contains(t, err.Error(), c.want)
				return
			}
			require.NoError(t, err)
			var got []int64
			for _, b := range readAll(t, again, 10) {
				got = append(got, b.Inputs[0].Ints...)
			}
			assert.Equal(t, c.rest, got)
		})
	}
}

// A UTF-8 byte order mark before the first line is skipped, and offsets past it still resume.
func TestByteOrderMark(t *testing.T) {
	const bom = "\xef\xbb\xbf"
	cols := []Column{{Name: "label", Role: RoleLabel}, {Name: "s", Role: RoleSparse}}
	for _, name := range []string{"b.csv", "b.csv.gz"} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, name, bom+"label,s\n1,2\n0,3\n")
			src, err := NewCSV([]string{path}, CSVOptions{Columns: cols, Header: true})
			require.NoError(t, err)
			var b Batch
			_, err = src.Read(&b, 1)
			require.NoError(t, err)
			assert.Equal(t, []int64{2}, b.Inputs[0].Ints)
			again, err := NewCSV([]string{path}, CSVOptions{Columns: cols, Header: true})
			require.NoError(t, err)
			require.NoError(t, again.Seek(src.Position()))
			assert.Equal(t, []int64{3}, readAll(t, again, 10)[0].Inputs[0].Ints)
		})
	}
	path := writeFile(t, "c.txt", bom+goodLine+"\n")
	src, err := NewCriteo([]string{path}, CriteoOptions{})
	require.NoError(t, err)
	b := readAll(t, src, 10)[0]
	assert.Equal(t, []float32{0}, b.Labels)
	// Without a header the first column's name keeps no mark either.
	path = writeFile(t, "n.csv", bom+"1,2\n")
	src, err = NewCSV([]string{path}, CSVOptions{Columns: cols})
	require.NoError(t, err)
	assert.Equal(t, []float32{1}, readAll(t, src, 10)[0].Labels)
}

func TestCSVSequenceSeparator(t *testing.T) {
	for _, c := range []struct {
		sep   string
		delim byte
	}{{",", 0}, {"\t", '\t'}, {"|,", ','}} {
		_, err := NewCSV([]string{"unused.csv"}, CSVOptions{Delimiter: c.delim,
			Columns: []Column{{Name: "q", Role: RoleSequence, Sep: c.sep}}})
		require.Error(t, err)
		assert.True(t, errors.Is(err, errs.ErrInvalid))
		assert.Contains(t, err.Error(), `column "q": the sequence separator`)
		assert.Contains(t, err.Error(), "contains the delimiter")
	}
}
