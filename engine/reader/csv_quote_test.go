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

// Quoted CSV fields read as Python's csv module and pandas read them (MovieLens' movies.csv quotes
// every title with a comma, tags.csv writes a tag "artsy" as """artsy"""). Before, a quoted comma
// split the field (a "long line" error) and quotes stayed in the values, changing their hashes.
func TestCSVQuotedFields(t *testing.T) {
	cols := []Column{{Name: "id", Role: RoleSparse}, {Name: "title", Role: RoleSparse, Type: "string"},
		{Name: "genres", Role: RoleSequence, Type: "string"}}
	text := "\"id\",title,\"genres\"\n" +
		"11,\"American President, The (1995)\",Comedy|Drama\n" +
		"\"12\",\"\"\"artsy\"\"\",\"Action|Sci-Fi\"\n" +
		"13,\"\",\n" +
		"14,ab\"c,\"a,b|c\"\n"
	path := filepath.Join(t.TempDir(), "movies.csv")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	src, err := NewCSV([]string{path}, CSVOptions{Columns: cols, Header: true})
	require.NoError(t, err)
	bs := readAll(t, src, 10)
	require.Len(t, bs, 1)
	b := bs[0]
	assert.Equal(t, []int64{11, 12, 13, 14}, b.Inputs[0].Ints)
	assert.Equal(t, `American President, The (1995)"artsy"ab"c`, string(b.Inputs[1].Bytes))
	assert.Equal(t, []int64{1, 1, 0, 1}, b.Inputs[1].Lengths)
	assert.Equal(t, "ComedyDramaActionSci-Fia,bc", string(b.Inputs[2].Bytes))
	assert.Equal(t, []int64{2, 2, 0, 2}, b.Inputs[2].Lengths)

	for name, c := range map[string]struct{ text, want string }{
		"unclosed":      {"id,title,genres\n1,\"Heat (1995),Action\n2,x,y\n", "line 2: a quoted field that starts on this line is not closed by the end of the file"},
		"after quote":   {"id,title,genres\n1,\"Heat\" (1995),Action\n", "line 2 column 2 (title): text \" (1995)\" after the closing quote"},
		"header":        {"id,\"title,genres\n", "line 1: a quoted field that starts on this line is not closed by the end of the file"},
		"quoted delims": {"id,title,genres\n1,\"a,b\",c,d\n", "line 2: long line: 4 fields, expected 3"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.csv")
			require.NoError(t, os.WriteFile(path, []byte(c.text), 0o644))
			src, err := NewCSV([]string{path}, CSVOptions{Columns: cols, Header: true})
			if err == nil {
				var b Batch
				_, err = src.Read(&b, 10)
			}
			assert.ErrorContains(t, err, c.want)
		})
	}
}

// FuzzCSVSplitFields: a line Go's csv writer makes of any fields (without line breaks) splits back
// into those fields.
func FuzzCSVSplitFields(f *testing.F) {
	f.Add("a", "b,c", `"q"`, "")
	f.Add(`""`, " x", "\"a\"\"b", ",")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		fields := []string{a, b, c, d}
		for _, s := range fields {
			if strings.ContainsAny(s, "\r\n") {
				return
			}
		}
		var buf bytes.Buffer
		w := csv.NewWriter(&buf)
		require.NoError(t, w.Write(fields))
		w.Flush()
		line := bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
		p := &csvParser{delim: ','}
		bad, why := p.splitFields(line)
		require.Equal(t, -1, bad, why)
		got := make([]string, len(p.fields))
		for i, g := range p.fields {
			got[i] = string(g)
		}
		require.Equal(t, fields, got, "%q", line)
	})
}
