package reader

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sharedData is ../shared/data seen from the repository root (tests skip when it is absent).
func sharedData(t *testing.T, rel string) string {
	t.Helper()
	p := filepath.Join("..", "..", "..", "..", "shared", "data", rel)
	if _, err := os.Stat(p); err != nil {
		p = filepath.Join("/work/shared/data", rel)
		if _, err := os.Stat(p); err != nil {
			t.Skipf("sample %s not present", rel)
		}
	}
	return p
}

// readAll drains src in batches of n.
func readAll(t *testing.T, src Source, n int) []Batch {
	t.Helper()
	var out []Batch
	for {
		var b Batch
		_, err := src.Read(&b, n)
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out = append(out, b)
	}
}

// refCriteo parses Criteo lines with strings.Split/strconv: the independent reference.
type refRow struct {
	label float32
	ints  [13]*int64
	cats  [26]*int64
}

func refCriteo(t *testing.T, text string) []refRow {
	var rows []refRow
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		f := strings.Split(line, "\t")
		require.Len(t, f, 40)
		var r refRow
		l, err := strconv.ParseFloat(f[0], 64)
		require.NoError(t, err)
		r.label = float32(l)
		for i := 0; i < 13; i++ {
			if f[1+i] != "" {
				v, err := strconv.ParseInt(f[1+i], 10, 64)
				require.NoError(t, err)
				r.ints[i] = &v
			}
		}
		for i := 0; i < 26; i++ {
			if f[14+i] != "" {
				v, err := strconv.ParseUint(f[14+i], 16, 64)
				require.NoError(t, err)
				x := int64(v)
				r.cats[i] = &x
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// flatten turns batches into per-sample rows to compare with the reference.
func flatten(bs []Batch) []refRow {
	var rows []refRow
	for _, b := range bs {
		at := make([]int64, len(b.Inputs))
		for s := 0; s < b.Size; s++ {
			var r refRow
			r.label = b.Labels[s]
			for f := range b.Inputs {
				in := &b.Inputs[f]
				if in.Lengths[s] == 1 {
					v := in.Ints[at[f]]
					if f < 13 {
						r.ints[f] = &v
					} else {
						r.cats[f-13] = &v
					}
				}
				at[f] += in.Lengths[s]
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func criteoSample(t *testing.T) (string, string) {
	p := sharedData(t, "criteo/criteo_dac_train_head10109.txt")
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	return p, string(data)
}

func TestCriteoMatchesReference(t *testing.T) {
	p, text := criteoSample(t)
	src, err := NewCriteo([]string{p}, CriteoOptions{})
	require.NoError(t, err)
	defer src.Close()
	got := flatten(readAll(t, src, 1000))
	want := refCriteo(t, text)
	require.Equal(t, len(want), len(got))
	assert.Equal(t, want, got)
}

func TestCriteoDenseTransform(t *testing.T) {
	dir := t.TempDir()
	line := "1\t" + strings.Repeat("\t", 12) + "7" + "\t" + strings.Repeat("a\t", 25) + "ff\n"
	line = strings.Replace(line, "1\t\t", "1\t-3\t", 1)
	path := filepath.Join(dir, "x.txt")
	require.NoError(t, os.WriteFile(path, []byte(line), 0o644))
	for _, raw := range []bool{false, true} {
		src, err := NewCriteo([]string{path}, CriteoOptions{RawDense: raw})
		require.NoError(t, err)
		bs := readAll(t, src, 4)
		require.Len(t, bs, 1)
		d := bs[0].Dense
		if raw {
			assert.Equal(t, float32(-3), d[0])
			assert.Equal(t, float32(7), d[12])
		} else {
			assert.Equal(t, float32(0), d[0]) // log1p(max(-3, 0))
			assert.InDelta(t, 2.0794415, d[12], 1e-6)
		}
		assert.Equal(t, float32(0), d[5]) // missing
		assert.Equal(t, []int64{0}, bs[0].Inputs[5].Lengths)
		assert.Equal(t, []int64{255}, bs[0].Inputs[38].Ints)
	}
}

func gzipFile(t *testing.T, path string, data []byte) {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, err := w.Write(data)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

func TestShardingAndResume(t *testing.T) {
	_, text := criteoSample(t)
	text = strings.Join(strings.SplitAfter(text, "\n")[:4000], "")
	p := filepath.Join(t.TempDir(), "c.txt")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	gz := filepath.Join(t.TempDir(), "c.txt.gz")
	gzipFile(t, gz, []byte(text))
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	half := filepath.Join(t.TempDir(), "half.txt")
	require.NoError(t, os.WriteFile(half, []byte(strings.Join(lines[:1501], "\n")+"\n"), 0o644))
	rest := filepath.Join(t.TempDir(), "rest.txt.gz")
	gzipFile(t, rest, []byte(strings.Join(lines[1501:], "\n")+"\n"))
	for name, paths := range map[string][]string{"plain": {p}, "gzip": {gz}, "two files": {half, rest}} {
		t.Run(name, func(t *testing.T) {
			all, err := NewCriteo(paths, CriteoOptions{})
			require.NoError(t, err)
			want := flatten(readAll(t, all, 777))
			require.Len(t, want, len(lines))
			// Ranks partition the rows: row g is rank g mod 3's.
			for r := 0; r < 3; r++ {
				src, err := NewCriteo(paths, CriteoOptions{Options: Options{Rank: r, WorldSize: 3}})
				require.NoError(t, err)
				got := flatten(readAll(t, src, 500))
				var exp []refRow
				for g := r; g < len(want); g += 3 {
					exp = append(exp, want[g])
				}
				require.Equal(t, exp, got, "rank %d", r)
			}
			// Stop after some batches, resume from the position in a new source.
			src, err := NewCriteo(paths, CriteoOptions{Options: Options{Rank: 1, WorldSize: 2}})
			require.NoError(t, err)
			var first []Batch
			for range 3 {
				var b Batch
				_, err := src.Read(&b, 700)
				require.NoError(t, err)
				first = append(first, b)
			}
			pos := src.Position()
			require.NoError(t, src.Close())
			again, err := NewCriteo(paths, CriteoOptions{Options: Options{Rank: 1, WorldSize: 2}})
			require.NoError(t, err)
			require.NoError(t, again.Seek(pos))
			got := append(flatten(first), flatten(readAll(t, again, 700))...)
			var exp []refRow
			for g := 1; g < len(want); g += 2 {
				exp = append(exp, want[g])
			}
			require.Equal(t, exp, got)
		})
	}
}

const goodLine = "0\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t" +
	"a\tb\tc\td\te\tf\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t14\t15\t16\t17\t18\t19\t1a"

func TestCriteoMalformed(t *testing.T) {
	bad := map[string]struct {
		line string
		want string
	}{
		"short line":    {"1\t2\t3", "line 2: short line: 3 fields, expected 40"},
		"bad integer":   {strings.Replace(goodLine, "\t5\t", "\t5x\t", 1), "line 2 column 6 (I5): \"5x\" is not an integer"},
		"bad hex":       {strings.Replace(goodLine, "\te\t", "\tzz\t", 1), "line 2 column 19 (C5): \"zz\" is not a hex"},
		"bad label":     {"x" + goodLine[1:], "line 2 column 1 (label): label \"x\" is not a number"},
		"long line":     {goodLine + "\t1", "line 2: long line: more than 40 fields"},
		"int overflow":  {strings.Replace(goodLine, "\t5\t", "\t99999999999999999999\t", 1), "column 6 (I5)"},
		"hex too long":  {strings.Replace(goodLine, "\te\t", "\t11112222333344445\t", 1), "column 19 (C5)"},
		"empty line":    {"", "line 2: empty line"},
		"spaces in int": {strings.Replace(goodLine, "\t5\t", "\t 5\t", 1), "column 6 (I5)"},
	}
	for name, c := range bad {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.txt")
			require.NoError(t, os.WriteFile(path, []byte(goodLine+"\n"+c.line+"\n"+goodLine+"\n"), 0o644))
			src, err := NewCriteo([]string{path}, CriteoOptions{})
			require.NoError(t, err)
			err = requireMalformed(t, src)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), c.want)
			// Skipped and counted on request.
			src, err = NewCriteo([]string{path}, CriteoOptions{Options: Options{SkipBad: true}})
			require.NoError(t, err)
			bs := readAll(t, src, 10)
			require.Len(t, bs, 1)
			assert.Equal(t, 2, bs[0].Size)
			assert.Equal(t, int64(1), src.Position().Skipped)
			assert.Equal(t, []int64{1, 1}, bs[0].Inputs[0].Ints)
		})
	}
}

// A line with the other Criteo layout's field count says so and what to do: a test file (39 fields)
// read with labels, a training file (40) without. Before, the error named only its symptom (label ""
// is not a number, a hex value that is not an integer, a long line). Other counts keep the plain error.
// A caller that trains on the labels (NeedsLabels) is asked for a labelled file, not told labels=False
// (recgo train rewrote the reader's wording in Python, which a rewording would have broken in silence).
func TestCriteoLabelLayoutHint(t *testing.T) {
	test := goodLine[2:] // no label: I1..I13, C1..C26
	const noLabels = "(the line has 39 fields, as Criteo's unlabelled test files do: I1..I13 and C1..C26, no label; if the file has no label column, read it with labels=False)"
	const needed = "(the line has 39 fields, as Criteo's unlabelled test files do: I1..I13 and C1..C26, no label; training needs the clicks: give a Criteo training file, a label first on each line)"
	const withLabels = "(the line has 40 fields, as Criteo's training files do: a label, then I1..I13 and C1..C26; if the file has a label column, read it with labels=True, the default)"
	cases := []struct {
		name string
		opt  CriteoOptions
		line string
		want string // the error, hint included where there is one
	}{
		{"test file, I1 missing", CriteoOptions{}, "\t" + test[2:], `line 1 column 1 (label): label "" is not a number ` + noLabels},
		{"test file, I1 given", CriteoOptions{}, test, `line 1 column 14 (I13): "a" is not an integer ` + noLabels},
		{"test file, I2.. missing", CriteoOptions{}, "1" + strings.Repeat("\t", 38), "line 1: short line: 39 fields, expected 40 " + noLabels},
		{"test file for training", CriteoOptions{NeedsLabels: true}, test, `line 1 column 14 (I13): "a" is not an integer ` + needed},
		{"training file", CriteoOptions{NoLabel: true}, goodLine, "line 1: long line: more than 39 fields " + withLabels},
		{"38 fields with labels", CriteoOptions{}, goodLine[:strings.LastIndexByte(goodLine, '\t')-3], "line 1: short line: 38 fields, expected 40"},
		{"38 fields for training", CriteoOptions{NeedsLabels: true}, goodLine[:strings.LastIndexByte(goodLine, '\t')-3], "line 1: short line: 38 fields, expected 40"},
		{"41 fields with labels", CriteoOptions{}, goodLine + "\t1", "line 1: long line: more than 40 fields"},
		{"41 fields without", CriteoOptions{NoLabel: true}, goodLine + "\t1", "line 1: long line: more than 39 fields"},
		{"38 fields without", CriteoOptions{NoLabel: true}, test[:strings.LastIndexByte(test, '\t')], "line 1: short line: 38 fields, expected 39"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "day.txt")
			require.NoError(t, os.WriteFile(path, []byte(c.line+"\n"), 0o644))
			src, err := NewCriteo([]string{path}, c.opt)
			require.NoError(t, err)
			err = requireMalformed(t, src)
			assert.True(t, strings.HasSuffix(err.Error(), c.want), "%v\nwant the suffix %s", err, c.want)
		})
	}
}

// NeedsLabels with NoLabel is a contradiction, refused by name (from a spec too).
func TestCriteoNeedsLabelsWithoutLabels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "day.txt")
	require.NoError(t, os.WriteFile(path, []byte(goodLine+"\n"), 0o644))
	_, err := NewCriteo([]string{path}, CriteoOptions{NoLabel: true, NeedsLabels: true})
	require.ErrorIs(t, err, errs.ErrInvalid)
	assert.Contains(t, err.Error(), "NeedsLabels")
	spec, err := ParseSpec([]byte(`{"kind": "criteo", "paths": ["` + path + `"], "world_size": 1, "needs_labels": true}`))
	require.NoError(t, err)
	assert.True(t, spec.NeedsLabels)
}

func TestTruncatedGzip(t *testing.T) {
	var text strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintln(&text, strings.Replace(goodLine, "\t1\t", "\t"+strconv.Itoa(i)+"\t", 1))
	}
	path := filepath.Join(t.TempDir(), "t.gz")
	gzipFile(t, path, []byte(text.String()))
	data, _ := os.ReadFile(path)
	require.NoError(t, os.WriteFile(path, data[:len(data)/2], 0o644))
	src, err := NewCriteo([]string{path}, CriteoOptions{})
	require.NoError(t, err)
	var b Batch
	for err == nil {
		_, err = src.Read(&b, 256)
	}
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	assert.True(t, errors.Is(err, errs.ErrIO))
	assert.Contains(t, err.Error(), path+" line ")
	assert.Contains(t, err.Error(), "truncated or corrupt gzip stream")
}

func TestBadOptions(t *testing.T) {
	_, err := NewCriteo([]string{"/nonexistent/x"}, CriteoOptions{})
	assert.True(t, errors.Is(err, errs.ErrIO))
	_, err = NewCriteo(nil, CriteoOptions{})
	assert.True(t, errors.Is(err, errs.ErrInvalid))
	_, err = NewCriteo([]string{"x"}, CriteoOptions{Options: Options{Rank: 2, WorldSize: 2}})
	assert.ErrorContains(t, err, "rank 2 outside a world of 2")
}

// requireMalformed reads src's first batch and requires a ParseError classed invalid input; it
// returns the error for the caller's checks of its text.
func requireMalformed(t *testing.T, src Source) error {
	t.Helper()
	var b Batch
	_, err := src.Read(&b, 10)
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	assert.True(t, errors.Is(err, errs.ErrInvalid))
	return err
}

// Blank lines that end a file are no rows (as csv and pandas read them), plain or gzip, LF or CRLF,
// before another file; a blank line with rows after it is still malformed (TestCriteoMalformed).
func TestTrailingBlankLinesEndTheFile(t *testing.T) {
	for _, tc := range []struct {
		name, tail string
		gz         bool
	}{
		{"one", "\n", false}, {"several", "\n\n\n", false}, {"crlf", "\r\n\r\n", false}, {"gzip", "\n\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			first := filepath.Join(dir, "a.txt")
			data := []byte(strings.Repeat(goodLine+"\n", 3) + tc.tail)
			if tc.gz {
				first += ".gz"
				var buf bytes.Buffer
				w := gzip.NewWriter(&buf)
				_, _ = w.Write(data)
				require.NoError(t, w.Close())
				data = buf.Bytes()
			}
			require.NoError(t, os.WriteFile(first, data, 0o644))
			second := filepath.Join(dir, "b.txt")
			require.NoError(t, os.WriteFile(second, []byte(goodLine+"\n\n"), 0o644))
			src, err := NewCriteo([]string{first, second}, CriteoOptions{})
			require.NoError(t, err)
			rows := 0
			for _, b := range readAll(t, src, 2) {
				rows += b.Size
			}
			assert.Equal(t, 4, rows)
			csv := filepath.Join(dir, "x.csv")
			require.NoError(t, os.WriteFile(csv, []byte("label,a\n1,2\n0,3\n"+tc.tail), 0o644))
			cs, err := NewCSV([]string{csv}, CSVOptions{Header: true, Columns: []Column{{Name: "label", Role: RoleLabel}, {Name: "a", Role: RoleSparse}}})
			require.NoError(t, err)
			assert.Equal(t, 2, readAll(t, cs, 10)[0].Size)
		})
	}
}
