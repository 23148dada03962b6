package reader

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeFile writes text to name in a fresh temporary directory (gzip-compressed when name ends in
// .gz) and returns its path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if strings.HasSuffix(name, ".gz") {
		gzipFile(t, path, []byte(text))
	} else {
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	}
	return path
}

// A line longer than the 1 MiB read buffer (up to maxLine) is read exactly, in plain and gzip files,
// and so are the lines around it; a longer one is an error.
func TestLongLines(t *testing.T) {
	seqCols := []Column{{Name: "id", Role: RoleSparse}, {Name: "seq", Role: RoleSequence, Type: "string"},
		{Name: "n", Role: RoleSparse}}
	for _, n := range []int{150_000, 300_000} { // about 1.3 and 2.8 MiB
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf("item%d", i)
		}
		text := "id,seq,n\n1,a|b,7\n2," + strings.Join(items, "|") + ",8\n3,c,9\n"
		for _, name := range []string{"long.csv", "long.csv.gz"} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				src, err := NewCSV([]string{writeFile(t, name, text)}, CSVOptions{Columns: seqCols, Header: true})
				require.NoError(t, err)
				bs := readAll(t, src, 10)
				require.Len(t, bs, 1)
				b := bs[0]
				assert.Equal(t, []int64{1, 2, 3}, b.Inputs[0].Ints)
				assert.Equal(t, []int64{7, 8, 9}, b.Inputs[2].Ints)
				require.Equal(t, []int64{2, int64(n), 1}, b.Inputs[1].Lengths)
				assert.Equal(t, "ab"+strings.Join(items, "")+"c", string(b.Inputs[1].Bytes))
			})
		}
	}
	path := writeFile(t, "huge.csv", "id,seq,n\n1,"+strings.Repeat("x|", 2_200_000)+"x,2\n")
	src, err := NewCSV([]string{path}, CSVOptions{Columns: seqCols, Header: true})
	require.NoError(t, err)
	var b Batch
	_, err = src.Read(&b, 10)
	assert.ErrorContains(t, err, path+" line 2: line longer than 4 MiB")
}

// Under SkipBad a line longer than maxLine is one malformed row of the rank it falls to: the reader
// goes past it (plain or gzip) and a position after it resumes; a truncated gzip file gives up its
// damaged tail as one malformed row and the next file is read.
func TestSkipBadGoesPastLongLinesAndTruncatedGzip(t *testing.T) {
	cols := []Column{{Name: "id", Role: RoleSparse}, {Name: "seq", Role: RoleSequence, Type: "string"}}
	text := "id,seq\n1,a\n2," + strings.Repeat("x|", 2_200_000) + "x\n3,c\n"
	for _, name := range []string{"long.csv", "long.csv.gz"} {
		path := writeFile(t, name, text)
		open := func(rank, world int) Source {
			src, err := NewCSV([]string{path}, CSVOptions{Columns: cols, Header: true,
				Options: Options{SkipBad: true, Rank: rank, WorldSize: world}})
			require.NoError(t, err)
			return src
		}
		for _, c := range []struct {
			rank, world int
			ids         []int64
			skipped     int64
		}{{0, 1, []int64{1, 3}, 1}, {0, 2, []int64{1, 3}, 0}, {1, 2, nil, 1}} {
			src := open(c.rank, c.world)
			var ids []int64
			for _, b := range readAll(t, src, 1) {
				ids = append(ids, b.Inputs[0].Ints...)
			}
			assert.Equal(t, c.ids, ids, "%s rank %d of %d", name, c.rank, c.world)
			assert.Equal(t, c.skipped, src.Position().Skipped, "%s rank %d of %d", name, c.rank, c.world)
		}
		src := open(0, 1)
		var b Batch
		_, err := src.Read(&b, 1)
		require.NoError(t, err)
		_, err = src.Read(&b, 1) // past the long line, to row 3
		require.NoError(t, err)
		require.Equal(t, []int64{3}, b.Inputs[0].Ints)
		again := open(0, 1)
		require.NoError(t, again.Seek(src.Position()), name)
		_, err = again.Read(&b, 1)
		assert.ErrorIs(t, err, io.EOF, name)
	}

	var rows strings.Builder
	rows.WriteString("id,seq\n")
	for i := range 2000 {
		fmt.Fprintf(&rows, "%d,item%d|item%d\n", i, i, i+1)
	}
	var zipped bytes.Buffer
	w := gzip.NewWriter(&zipped)
	_, err := w.Write([]byte(rows.String()))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	dir := t.TempDir()
	cut := filepath.Join(dir, "a.csv.gz")
	require.NoError(t, os.WriteFile(cut, zipped.Bytes()[:zipped.Len()/2], 0o644))
	next := writeFile(t, "b.csv", "id,seq\n5000,z\n5001,y\n")
	for _, skip := range []bool{false, true} {
		src, err := NewCSV([]string{cut, next}, CSVOptions{Columns: cols, Header: true, Options: Options{SkipBad: skip}})
		require.NoError(t, err)
		if !skip {
			var b Batch
			_, err = src.Read(&b, 5000)
			assert.ErrorContains(t, err, "truncated or corrupt gzip stream")
			continue
		}
		var ids []int64
		for _, b := range readAll(t, src, 300) {
			ids = append(ids, b.Inputs[0].Ints...)
		}
		require.Greater(t, len(ids), 100)
		n := len(ids) - 2
		for i := range n {
			require.Equal(t, int64(i), ids[i]) // every whole row before the damage, in order
		}
		assert.Equal(t, []int64{5000, 5001}, ids[n:])
		assert.Equal(t, int64(1), src.Position().Skipped)
		// positions at and after the damaged tail resume: the next file's rows, then nothing
		src, err = NewCSV([]string{cut, next}, CSVOptions{Columns: cols, Header: true, Options: Options{SkipBad: true}})
		require.NoError(t, err)
		var b Batch
		_, err = src.Read(&b, n) // every whole row of the damaged file
		require.NoError(t, err)
		_, err = src.Read(&b, 1) // past the damage: 5000
		require.NoError(t, err)
		require.Equal(t, []int64{5000}, b.Inputs[0].Ints)
		again, err := NewCSV([]string{cut, next}, CSVOptions{Columns: cols, Header: true, Options: Options{SkipBad: true}})
		require.NoError(t, err)
		require.NoError(t, again.Seek(src.Position()))
		rest := readAll(t, again, 10)
		require.Len(t, rest, 1)
		assert.Equal(t, []int64{5001}, rest[0].Inputs[0].Ints)
		last, err := NewCSV([]string{cut}, CSVOptions{Columns: cols, Header: true, Options: Options{SkipBad: true}})
		require.NoError(t, err)
		readAll(t, last, 300)
		end := last.Position()
		last, err = NewCSV([]string{cut}, CSVOptions{Columns: cols, Header: true, Options: Options{SkipBad: true}})
		require.NoError(t, err)
		require.NoError(t, last.Seek(end), "the end of a damaged last file")
		assert.Empty(t, readAll(t, last, 10))
	}
}

// textCase is a one-file source whose first data row is malformed: the error names want, and under
// SkipBad the row is dropped and the others are read.
type textCase struct {
	name, text, want string
	open             func(path string, skip bool) (Source, error)
	good             int // rows read under SkipBad
}

func csvOpener(cols []Column, header bool) func(string, bool) (Source, error) {
	return func(path string, skip bool) (Source, error) {
		return NewCSV([]string{path}, CSVOptions{Options: Options{SkipBad: skip}, Columns: cols, Header: header})
	}
}

func criteoOpener(path string, skip bool) (Source, error) {
	return NewCriteo([]string{path}, CriteoOptions{Options: Options{SkipBad: skip}})
}

func checkTextCases(t *testing.T, cases []textCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, "bad.txt", c.text)
			src, err := c.open(path, false)
			require.NoError(t, err)
			err = requireMalformed(t, src)
			assert.Contains(t, err.Error(), path+" "+c.want)
			src, err = c.open(path, true)
			require.NoError(t, err)
			n := 0
			for _, b := range readAll(t, src, 10) {
				n += b.Size
			}
			assert.Equal(t, c.good, n)
			assert.Equal(t, int64(1), src.Position().Skipped)
		})
	}
}

// Labels and dense values beyond float32's range are rejected like NaN, not turned into ±Inf.
func TestFloat32Range(t *testing.T) {
	cols := []Column{{Name: "y", Role: RoleLabel}, {Name: "d", Role: RoleDense}}
	csv := csvOpener(cols, true)
	criteoLine := strings.Replace(goodLine, "0\t", "1e39\t", 1)
	checkTextCases(t, []textCase{
		{"csv label", "y,d\n1e39,1\n0,3.4e38\n", `line 2 column 1 (y): label "1e39" is out of float32 range`, csv, 1},
		{"csv dense", "y,d\n1,1e39\n0,-3.4e38\n", `line 2 column 2 (d): "1e39" is out of float32 range`, csv, 1},
		{"csv negative dense", "y,d\n1,-1e39\n0,1\n", `line 2 column 2 (d): "-1e39" is out of float32 range`, csv, 1},
		{"criteo label", criteoLine + "\n" + goodLine + "\n",
			`line 1 column 1 (label): label "1e39" is out of float32 range`, criteoOpener, 1},
		{"criteo empty line", goodLine + "\n\n" + goodLine + "\n", "line 2: empty line", criteoOpener, 2},
	})
	// The largest float32 values still pass.
	src, err := NewCSV([]string{writeFile(t, "ok.csv", "y,d\n3.4e38,-3.4e38\n")}, CSVOptions{Columns: cols, Header: true})
	require.NoError(t, err)
	b := readAll(t, src, 10)[0]
	assert.Equal(t, []float32{3.4e38}, b.Labels)
	assert.Equal(t, []float32{-3.4e38}, b.Dense)
}

type pqSpecial struct {
	Label float64 `parquet:"label"`
	D     float64 `parquet:"d"`
	F32   float32 `parquet:"f32"`
}

func writeSpecial(t *testing.T, rows []pqSpecial) string {
	return saveFile(t, "s.parquet", writeGroups(t, [][]pqSpecial{rows}))
}

// Parquet labels and dense values must be finite float32s, as in CSV; a FLOAT column read as ints
// takes its values (not a DOUBLE reading of its bits).
func TestParquetValues(t *testing.T) {
	ok := pqSpecial{Label: 1, D: 2, F32: 3}
	dense := []Column{{Name: "label", Role: RoleLabel}, {Name: "d", Role: RoleDense}}
	cases := []struct {
		name string
		bad  pqSpecial
		cols []Column
		want string
	}{
		{"dense NaN", pqSpecial{D: math.NaN()}, dense, "row 1 column 2 (d): DOUBLE value NaN is not a number"},
		{"dense +Inf", pqSpecial{D: math.Inf(1)}, dense, "row 1 column 2 (d): DOUBLE value +Inf is not a number"},
		{"dense 1e39", pqSpecial{D: 1e39}, dense, "row 1 column 2 (d): DOUBLE value 1e+39 is out of float32 range"},
		{"label -Inf", pqSpecial{Label: math.Inf(-1)}, dense, "row 1 column 1 (label): DOUBLE value -Inf is not a number"},
		{"label 1e39", pqSpecial{Label: -1e39}, dense, "row 1 column 1 (label): DOUBLE value -1e+39 is out of float32 range"},
		{"float sparse NaN", pqSpecial{D: math.NaN()}, []Column{{Name: "d", Role: RoleSparse, Type: "float"}},
			"row 1 column 1 (d): DOUBLE value NaN is not a number"},
		{"FLOAT not integral", pqSpecial{F32: 1.5}, []Column{{Name: "f32", Role: RoleSparse}},
			"row 1 column 1 (f32): FLOAT value 1.5 is not a valid int value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeSpecial(t, []pqSpecial{ok, c.bad, ok})
			src, err := NewParquet([]string{path}, ParquetOptions{Columns: c.cols})
			require.NoError(t, err)
			var b Batch
			_, err = src.Read(&b, 10)
			require.Error(t, err)
			assert.True(t, errors.Is(err, errs.ErrInvalid))
			assert.Contains(t, err.Error(), path+" "+c.want)
			src, err = NewParquet([]string{path}, ParquetOptions{Columns: c.cols, Options: Options{SkipBad: true}})
			require.NoError(t, err)
			bs := readAll(t, src, 10)
			require.Len(t, bs, 1)
			assert.Equal(t, 2, bs[0].Size)
			assert.Equal(t, int64(1), src.Position().Skipped)
		})
	}
	rows := []pqSpecial{{F32: 0}, {F32: 1}, {F32: -2}, {F32: 1 << 24}}
	f32 := []Column{{Name: "f32", Role: RoleSparse}}
	src, err := NewParquet([]string{writeSpecial(t, rows)}, ParquetOptions{Columns: f32})
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 1, -2, 1 << 24}, readAll(t, src, 10)[0].Inputs[0].Ints)
}

// Value kinds a column cannot take give an error naming the kind; integral DOUBLEs of any size
// inside int64 are ints.
func TestParquetAppendKinds(t *testing.T) {
	intCol := &Column{Name: "x", Role: RoleSparse}
	cases := []struct {
		v    parquet.Value
		uns  bool // the column's integers are unsigned
		want int64
		err  string
	}{
		{parquet.Int32Value(-1294967296), false, -1294967296, ""},
		{parquet.Int32Value(-1294967296), true, 3000000000, ""}, // uint32 3e9 stored in an INT32
		{parquet.Int64Value(5), true, 5, ""},
		{parquet.Int64Value(-1), true, 0, "unsigned value 18446744073709551615 is past int64, the IDs' type"},
		{parquet.DoubleValue(1e6), false, 1e6, ""},
		{parquet.DoubleValue(-1 << 62), false, -1 << 62, ""},
		{parquet.FloatValue(7), false, 7, ""},
		{parquet.DoubleValue(1 << 63), false, 0, "DOUBLE value 9.223372036854776e+18 is not a valid int value"},
		{parquet.DoubleValue(math.Inf(1)), false, 0, "DOUBLE value +Inf is not a valid int value"},
		{parquet.Int96Value(deprecated.Int96{1, 2, 3}), false, 0, "INT96 values cannot be read as int values"},
	}
	for _, c := range cases {
		in := feature.Input{Kind: feature.KindInt64}
		err := parquetAppend(intCol, &in, c.v, leafType{unsigned: c.uns})
		if c.err != "" {
			assert.EqualError(t, err, c.err)
			continue
		}
		require.NoError(t, err, c.v.String())
		assert.Equal(t, []int64{c.want}, in.Ints)
	}
	_, err := parquetFloat(parquet.Int96Value(deprecated.Int96{1, 2, 3}), leafType{})
	assert.EqualError(t, err, "INT96 values cannot be read as numbers")
	for _, c := range []struct {
		v    parquet.Value
		uns  bool
		want float64
	}{
		{parquet.Int32Value(-2), false, -2}, {parquet.Int32Value(-2), true, 1<<32 - 2},
		{parquet.Int64Value(-1), true, 1 << 64}, {parquet.Int64Value(-1), false, -1},
	} {
		x, err := parquetFloat(c.v, leafType{unsigned: c.uns})
		require.NoError(t, err)
		assert.Equal(t, c.want, x, "%v unsigned=%v", c.v, c.uns)
	}
}

// TestSkipBadGoesPastADamagedParquetRowGroup: a row group whose page header is garbage fails alone.
// Before, rows were read 256 at a time across groups, so the error named the file's first row, the
// good groups before the damage were lost with it, and skip_bad did not apply.
func TestSkipBadGoesPastADamagedParquetRowGroup(t *testing.T) {
	dir := t.TempDir()
	rows := pqRows(40) // row groups of 7 rows (writeParquet flushes every 7)
	bad, good := filepath.Join(dir, "bad.parquet"), filepath.Join(dir, "good.parquet")
	writeParquet(t, bad, rows[:35])
	writeParquet(t, good, rows[35:])
	f, err := os.Open(bad)
	require.NoError(t, err)
	st, err := f.Stat()
	require.NoError(t, err)
	pf, err := parquet.OpenFile(f, st.Size())
	require.NoError(t, err)
	off := pf.Metadata().RowGroups[2].Columns[0].MetaData.DataPageOffset // rows 14..20
	require.NoError(t, f.Close())
	data, err := os.ReadFile(bad)
	require.NoError(t, err)
	copy(data[off:off+8], bytes.Repeat([]byte{0xff}, 8))
	require.NoError(t, os.WriteFile(bad, data, 0o644))

	open := func(skip bool, rank, world int) Source {
		src, err := NewParquet([]string{bad, good}, ParquetOptions{Columns: pqCols,
			Options: Options{SkipBad: skip, Rank: rank, WorldSize: world}})
		require.NoError(t, err)
		return src
	}
	var b Batch
	_, err = open(false, 0, 1).Read(&b, 100)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "row 14")
	for _, c := range []struct{ rank, world, skipped int }{{0, 1, 7}, {0, 2, 4}, {1, 2, 3}} {
		src := open(true, c.rank, c.world)
		var users []int64
		for _, b := range readAll(t, src, 5) {
			users = append(users, b.Inputs[0].Ints...)
		}
		var want []int64
		for g := c.rank; g < 40; g += c.world {
			if g < 14 || g > 20 {
				want = append(want, rows[g].User)
			}
		}
		assert.Equal(t, want, users, "rank %d of %d", c.rank, c.world)
		assert.Equal(t, int64(c.skipped), src.Position().Skipped, "rank %d of %d", c.rank, c.world)
	}
}

// TestOpenRefusesWhatIsNotATextOrGzipFile: a FIFO blocked the open until a writer came (Ctrl-C
// could not stop it); bzip2, zstd and xz files were parsed as text into per-line errors (or, under
// skip_bad, silently into no rows).
func TestOpenRefusesWhatIsNotATextOrGzipFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	cases := map[string]struct {
		path, want string
	}{
		"fifo":        {fifo, "is not a regular file"},
		"bzip2":       {writeFile(t, "a.bz2", "BZh91AY&SY\x01\x02garbage\n"), "is a bzip2 file"},
		"empty bzip2": {writeFile(t, "e.bz2", "BZh9\x17\x72\x45\x38\x50\x90\x00\x00\x00\x00"), "is a bzip2 file"},
		"zstd":        {writeFile(t, "a.zst", "\x28\xb5\x2f\xfd\x00\x58rest\n"), "is a zstd file"},
		"xz":          {writeFile(t, "a.xz", "\xfd7zXZ\x00rest\n"), "is a xz file"},
	}
	for name, c := range cases {
		done := make(chan error, 1)
		go func() {
			_, err := NewCSV([]string{c.path}, CSVOptions{Columns: []Column{{Name: "id", Role: RoleSparse}},
				Options: Options{SkipBad: true}})
			done <- err
		}()
		select {
		case err := <-done:
			assert.ErrorContains(t, err, c.want, name)
			assert.ErrorIs(t, err, errs.ErrIO, name)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the open blocked", name)
		}
	}
	_, err := NewParquet([]string{fifo}, ParquetOptions{Columns: []Column{{Name: "id", Role: RoleSparse}}})
	assert.ErrorContains(t, err, "is not a regular file")
	// text that merely starts like one is read as text
	plain := writeFile(t, "b.csv", "BZh9 tea\n")
	src, err := NewCSV([]string{plain}, CSVOptions{Columns: []Column{{Name: "id", Role: RoleSparse, Type: "string"}}})
	require.NoError(t, err)
	assert.Len(t, readAll(t, src, 10), 1)
}

// TestGzipZeroPaddingEndsTheFile: zeros after the last member (as tape and block devices pad) end
// the file, as for Python's gzip; they raised "invalid header" and failed the last batch.
func TestGzipZeroPaddingEndsTheFile(t *testing.T) {
	var z bytes.Buffer
	for _, part := range []string{"1\n2\n", "3\n"} { // two members, then padding
		w := gzip.NewWriter(&z)
		_, err := w.Write([]byte(part))
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	z.Write(make([]byte, 512))
	path := filepath.Join(t.TempDir(), "pad.csv.gz")
	require.NoError(t, os.WriteFile(path, z.Bytes(), 0o644))
	src, err := NewCSV([]string{path}, CSVOptions{Columns: []Column{{Name: "id", Role: RoleSparse}}})
	require.NoError(t, err)
	var ids []int64
	for _, b := range readAll(t, src, 10) {
		ids = append(ids, b.Inputs[0].Ints...)
	}
	assert.Equal(t, []int64{1, 2, 3}, ids)
	assert.Zero(t, src.Position().Skipped)
	// bytes other than zeros after a member are still a damaged stream
	require.NoError(t, os.WriteFile(path, append(z.Bytes(), 'x'), 0o644))
	src, err = NewCSV([]string{path}, CSVOptions{Columns: []Column{{Name: "id", Role: RoleSparse}}})
	require.NoError(t, err)
	var b Batch
	_, err = src.Read(&b, 10)
	assert.ErrorContains(t, err, "truncated or corrupt gzip stream")
}
