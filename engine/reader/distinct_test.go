package reader

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A file listed twice, by any spelling, is refused when any source opens (every format, shuffled or
// not, on any rank), naming the file and both entries; distinct files of equal bytes are read.
func TestFileListedTwiceIsRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	write := func(name string, data []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	write("a.txt", []byte(goodLine+"\n"+goodLine+"\n"))
	write("twin.txt", []byte(goodLine+"\n"+goodLine+"\n")) // same bytes, another file
	gzipFile(t, filepath.Join(dir, "a.gz"), []byte(goodLine+"\n"))
	write("a.csv", []byte("label,s\n1,2\n0,3\n"))
	writeParquet(t, filepath.Join(dir, "a.parquet"), pqRows(4))
	require.NoError(t, os.Symlink(filepath.Join(dir, "a.csv"), filepath.Join(dir, "link.csv")))
	require.NoError(t, os.Link(filepath.Join(dir, "a.csv"), filepath.Join(dir, "hard.csv")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))

	csvCols := []Column{{Name: "label", Role: RoleLabel}, {Name: "s", Role: RoleSparse}}
	spec := func(kind string, paths ...string) *Spec {
		s := &Spec{Kind: kind, Paths: paths, WorldSize: 1}
		switch kind {
		case "csv":
			s.Columns, s.Header = csvCols, true
		case "parquet":
			s.Columns = pqCols
		}
		return s
	}
	shuffled := func(s *Spec) *Spec { s.Shuffle, s.Seed = 8, 3; return s }
	rank1 := func(s *Spec) *Spec { s.Rank, s.WorldSize = 1, 2; return s }
	cases := []struct {
		name   string
		spec   *Spec
		second string // the second entry, as the error quotes it
	}{
		{"criteo same path", spec("criteo", "a.txt", "twin.txt", "a.txt"), "a.txt"},
		{"criteo gzip, ./ spelling", spec("criteo", "a.gz", "./a.gz"), "./a.gz"},
		{"criteo absolute and relative", spec("criteo", filepath.Join(dir, "a.txt"), "a.txt"), "a.txt"},
		{"csv symlink", spec("csv", "a.csv", "link.csv"), "link.csv"},
		{"csv hard link", spec("csv", "hard.csv", "a.csv"), "a.csv"},
		{"csv through a folder", spec("csv", "a.csv", "sub/../a.csv"), "sub/../a.csv"},
		{"parquet", spec("parquet", "a.parquet", "./a.parquet"), "./a.parquet"},
		{"shuffled csv", shuffled(spec("csv", "a.csv", "a.csv")), "a.csv"},
		{"shuffled parquet", shuffled(spec("parquet", "./a.parquet", "a.parquet")), "a.parquet"},
		{"rank 1 of 2, criteo", rank1(spec("criteo", "a.txt", "./a.txt")), "./a.txt"},
		{"rank 1 of 2, parquet", rank1(spec("parquet", "a.parquet", "a.parquet")), "a.parquet"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, err := Open(c.spec)
			if src != nil {
				_ = src.Close()
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, errs.ErrInvalid), err.Error())
			assert.Contains(t, err.Error(), "are the same file, which would be read twice")
			assert.Contains(t, err.Error(), `"`+c.second+`"`)
		})
	}
	// Files of equal bytes that are distinct files are read, both of them.
	src, err := NewCriteo([]string{"a.txt", "twin.txt"}, CriteoOptions{})
	require.NoError(t, err)
	defer src.Close()
	assert.Len(t, flatten(readAll(t, src, 16)), 4)
}
