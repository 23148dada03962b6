package reader

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A position decodes only as a source gives it: a missing or null field read as 0 and resumed from
// the data's start, and counts no source gives (negative, a skipped count past the rows read) were
// taken as they came.
func TestPositionDecoding(t *testing.T) {
	good := Position{File: 1, Row: 5, Offset: 80, Global: 12, Skipped: 2}
	data, err := json.Marshal(good)
	require.NoError(t, err)
	var p Position
	require.NoError(t, json.Unmarshal(data, &p))
	require.Equal(t, good, p)
	shuffled := Position{Row: 3, Offset: -1, Global: 3, Shuffle: 8, Seed: 4, Window: 2, Taken: 8}
	data, err = json.Marshal(shuffled)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &p))
	require.Equal(t, shuffled, p)
	for _, tc := range []struct{ name, doc, want string }{
		{"null file", `{"file":null,"row":5,"offset":80,"global":12,"skipped":2}`, `"file" is missing or null`},
		{"missing row", `{"file":1,"offset":80,"global":12,"skipped":2}`, `"row" is missing or null`},
		{"unknown field", `{"file":1,"row":5,"offset":80,"global":12,"skipped":2,"rows":3}`, `unknown field "rows"`},
		{"negative skipped", `{"file":1,"row":5,"offset":80,"global":12,"skipped":-1}`, "negative"},
		{"offset below -1", `{"file":1,"row":5,"offset":-2,"global":12,"skipped":2}`, "byte offset -2"},
		{"row past global", `{"file":1,"row":50,"offset":80,"global":12,"skipped":2}`, "50 rows read in the file but 12"},
		{"skipped past global", `{"file":1,"row":5,"offset":80,"global":12,"skipped":13}`, "13 rows skipped of 12"},
		{"null taken", `{"file":0,"row":3,"offset":-1,"global":3,"skipped":0,"shuffle":8,"window":2,"taken":null}`, `"taken" is null`},
		{"null window", `{"file":0,"row":3,"offset":-1,"global":3,"skipped":0,"shuffle":8,"window":null,"taken":8}`, `"window" is null`},
		{"taken past window", `{"file":0,"row":0,"offset":-1,"global":0,"skipped":0,"shuffle":4,"taken":5}`, "5 rows taken"},
		{"not an object", `[1,2]`, "position:"},
		{"fraction", `{"file":1.5,"row":5,"offset":80,"global":12,"skipped":2}`, "position:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, json.Unmarshal([]byte(tc.doc), &p), tc.want)
		})
	}
}

// FuzzPositionDecoding: any document decodes to a position that passes Check, or is refused; a
// decoded one encodes and decodes to itself.
func FuzzPositionDecoding(f *testing.F) {
	f.Add(`{"file":1,"row":5,"offset":80,"global":12,"skipped":2}`)
	f.Add(`{"file":0,"row":0,"offset":-1,"global":0,"skipped":0,"shuffle":4,"seed":3,"window":1,"taken":2}`)
	f.Add(`{"file":null}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var p Position
		if json.Unmarshal([]byte(doc), &p) != nil {
			return
		}
		require.NoError(t, p.Check())
		data, err := json.Marshal(p)
		require.NoError(t, err)
		var q Position
		require.NoError(t, json.Unmarshal(data, &q))
		require.Equal(t, p, q)
	})
}

// A position names the file it stands in: resuming it over other files, or the same files in
// another order, is refused by name instead of reading other rows (a plain file's offset was
// taken as a line start of whatever file stood at its index, a gzip or Parquet file's row as
// that file's row). The same files in another folder resume, and so does a position saved
// without the name.
func TestPositionNamesItsFile(t *testing.T) {
	dir, moved := t.TempDir(), t.TempDir()
	write := func(name string, data []byte) {
		for _, d := range []string{dir, moved} {
			require.NoError(t, os.WriteFile(filepath.Join(d, name), data, 0o644))
		}
	}
	var csvA, csvB bytes.Buffer
	csvA.WriteString("a\n")
	csvB.WriteString("a\n")
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&csvA, "%d\n", i)
		fmt.Fprintf(&csvB, "%d\n", 100+i)
	}
	write("a.csv", csvA.Bytes())
	write("b.csv", csvB.Bytes())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(csvB.Bytes())
	require.NoError(t, zw.Close())
	write("b.csv.gz", gz.Bytes())
	for _, name := range []string{"a.parquet", "b.parquet"} {
		writeParquet(t, filepath.Join(dir, name), pqRows(30))
		writeParquet(t, filepath.Join(moved, name), pqRows(30))
	}
	csv := func(paths []string, shuffle int) (Source, error) {
		src, err := NewCSV(paths, CSVOptions{Columns: []Column{{Name: "a", Role: RoleSparse}}, Header: true})
		if err != nil || shuffle == 0 {
			return src, err
		}
		return NewShuffled(src, shuffle, 7, 0)
	}
	pq := func(paths []string, _ int) (Source, error) {
		return NewParquet(paths, ParquetOptions{Columns: pqCols})
	}
	in := func(d string, names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, filepath.Join(d, n))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		open    func([]string, int) (Source, error)
		shuffle int
		a, b    string
	}{
		{"csv", csv, 0, "a.csv", "b.csv"},
		{"csv gzip", csv, 0, "a.csv", "b.csv.gz"},
		{"csv shuffled", csv, 8, "a.csv", "b.csv"},
		{"parquet", pq, 0, "a.parquet", "b.parquet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := func(src Source, n int) []int64 {
				var b Batch
				var ids []int64
				for len(ids) < n {
					got, err := src.Read(&b, min(5, n-len(ids)))
					if err == io.EOF {
						break
					}
					require.NoError(t, err)
					ids = append(ids, b.Inputs[0].Ints[:got]...)
				}
				return ids
			}
			src, err := tc.open(in(dir, tc.a, tc.b), tc.shuffle)
			require.NoError(t, err)
			head := read(src, 45)
			pos := src.Position()
			require.Equal(t, tc.b, pos.Name)
			rest := read(src, 100)
			require.NoError(t, src.Close())
			require.Len(t, append(head, rest...), 60)

			swapped, err := tc.open(in(dir, tc.b, tc.a), tc.shuffle)
			require.NoError(t, err)
			require.ErrorContains(t, swapped.Seek(pos), fmt.Sprintf(`taken in file %q (number 2 of the files), but file 2 of this source is %q`, tc.b, tc.a))
			for _, p := range []Position{pos, func() Position { p := pos; p.Name = ""; return p }()} {
				again, err := tc.open(in(moved, tc.a, tc.b), tc.shuffle)
				require.NoError(t, err)
				require.NoError(t, again.Seek(p))
				require.Equal(t, rest, read(again, 100))
			}
		})
	}
}

// Files that share a base name (day1/part-0.csv, day2/part-0.csv) are named by as many trailing path
// elements as tell them apart: listed in another order their positions are refused (they resumed in
// the other file, losing and repeating rows), and moved to another folder they resume. A position of
// a base name alone (taken before session 40) is compared by base name, as it was.
func TestPositionNamesFilesThatShareABaseName(t *testing.T) {
	assert.Equal(t, []string{"a.csv", filepath.FromSlash("day1/part-0.csv"), filepath.FromSlash("day2/part-0.csv"),
		filepath.FromSlash("x/y/p.csv"), filepath.FromSlash("z/y/p.csv"), "q.csv"},
		fileNames([]string{"/d/a.csv", "/d/day1/part-0.csv", "/d/day2/part-0.csv", "/x/y/p.csv", "/z/y/p.csv", "q.csv"}))
	assert.Equal(t, []string{"f.csv", "f.csv"}, fileNames([]string{"/d/f.csv", "/d/./f.csv"}), "one file listed twice")

	dir, moved := t.TempDir(), t.TempDir()
	for _, root := range []string{dir, moved} {
		for k, day := range []string{"day1", "day2"} {
			require.NoError(t, os.MkdirAll(filepath.Join(root, day), 0o755))
			var b bytes.Buffer
			b.WriteString("a\n")
			for i := range 6 {
				fmt.Fprintf(&b, "%d\n", 10*(k+1)+i)
			}
			require.NoError(t, os.WriteFile(filepath.Join(root, day, "part-0.csv"), b.Bytes(), 0o644))
		}
	}
	open := func(root string, days ...string) Source {
		var paths []string
		for _, d := range days {
			paths = append(paths, filepath.Join(root, d, "part-0.csv"))
		}
		src, err := NewCSV(paths, CSVOptions{Columns: []Column{{Name: "a", Role: RoleSparse}}, Header: true})
		require.NoError(t, err)
		t.Cleanup(func() { src.Close() })
		return src
	}
	src := open(dir, "day1", "day2")
	var b Batch
	_, err := src.Read(&b, 2)
	require.NoError(t, err)
	pos := src.Position()
	assert.Equal(t, filepath.FromSlash("day1/part-0.csv"), pos.Name)
	assert.ErrorContains(t, open(dir, "day2", "day1").Seek(pos), `taken in file "day1`)
	again := open(moved, "day1", "day2")
	require.NoError(t, again.Seek(pos))
	_, err = again.Read(&b, 1)
	require.NoError(t, err)
	assert.Equal(t, []int64{12}, b.Inputs[0].Ints)
	old := pos
	old.Name = "part-0.csv"
	assert.NoError(t, open(dir, "day2", "day1").Seek(old), "a base name alone: compared as before")
}

// Both file readers refuse a seek alike (checkSeek): a position outside the files, with a negative
// row, with fewer rows before it than its row, or on a closed source.
func TestSeekRefusals(t *testing.T) {
	dir := t.TempDir()
	csvPath, pqPath := filepath.Join(dir, "a.csv"), filepath.Join(dir, "a.parquet")
	require.NoError(t, os.WriteFile(csvPath, []byte("a\n1\n2\n"), 0o644))
	writeParquet(t, pqPath, pqRows(3))
	open := map[string]func() (Source, error){
		"csv": func() (Source, error) {
			return NewCSV([]string{csvPath}, CSVOptions{Columns: []Column{{Name: "a", Role: RoleSparse}}, Header: true})
		},
		"parquet": func() (Source, error) { return NewParquet([]string{pqPath}, ParquetOptions{Columns: pqCols}) },
	}
	cases := []struct {
		name  string
		pos   Position
		close bool
		want  string
	}{
		{"file past the end", Position{File: 1}, false, "does not fit 1 files"},
		{"negative file", Position{File: -1}, false, "does not fit 1 files"},
		{"negative row", Position{Row: -1}, false, "does not fit 1 files"},
		{"global before row", Position{Row: 2, Global: 1}, false, "does not fit 1 files"},
		{"closed", Position{}, true, "source is closed"},
	}
	for kind, mk := range open {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				src, err := mk()
				require.NoError(t, err)
				if tc.close {
					require.NoError(t, src.Close())
				} else {
					defer src.Close()
				}
				err = src.Seek(tc.pos)
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
			})
		}
	}
}
