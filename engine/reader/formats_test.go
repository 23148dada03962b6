package reader

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var csvCols = []Column{
	{Name: "click", Role: RoleLabel},
	{Name: "price", Role: RoleDense},
	{Name: "user", Role: RoleSparse},
	{Name: "site", Role: RoleSparse, Type: "hex"},
	{Name: "cat", Role: RoleSparse, Type: "string"},
	{Name: "hist", Role: RoleSequence, Sep: "|"},
}

const csvText = "id,click,user,site,cat,hist,price\n" +
	"1,1,10,ff,shoes,1|2|3,2.5\n" +
	"2,0,,a0,,,\n" +
	"3,1,-4,0,hats,7,1e3\n"

func TestCSV(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.csv")
	require.NoError(t, os.WriteFile(path, []byte(csvText), 0o644))
	gz := filepath.Join(dir, "a.csv.gz")
	gzipFile(t, gz, []byte(csvText))
	for _, p := range []string{path, gz} {
		src, err := NewCSV([]string{p}, CSVOptions{Columns: slices.Clone(csvCols), Header: true})
		require.NoError(t, err)
		s := src.Schema()
		assert.Equal(t, []string{"price"}, s.Dense)
		assert.Equal(t, []Field{{"user", feature.KindInt64}, {"site", feature.KindInt64}, {"cat", feature.KindBytes}, {"hist", feature.KindInt64}}, s.Fields)
		bs := readAll(t, src, 10)
		require.Len(t, bs, 1)
		b := bs[0]
		assert.Equal(t, 3, b.Size)
		assert.Equal(t, []float32{1, 0, 1}, b.Labels)
		assert.Equal(t, []float32{2.5, 0, 1000}, b.Dense)
		assert.Equal(t, []int64{10, -4}, b.Inputs[0].Ints)
		assert.Equal(t, []int64{1, 0, 1}, b.Inputs[0].Lengths)
		assert.Equal(t, []int64{255, 160, 0}, b.Inputs[1].Ints)
		assert.Equal(t, "shoeshats", string(b.Inputs[2].Bytes))
		assert.Equal(t, []int64{5, 4}, b.Inputs[2].ByteLens)
		assert.Equal(t, []int64{1, 2, 3, 7}, b.Inputs[3].Ints)
		assert.Equal(t, []int64{3, 0, 1}, b.Inputs[3].Lengths)
	}
	// Resume after the first row.
	src, err := NewCSV([]string{path}, CSVOptions{Columns: slices.Clone(csvCols), Header: true})
	require.NoError(t, err)
	var b Batch
	_, err = src.Read(&b, 1)
	require.NoError(t, err)
	again, err := NewCSV([]string{path}, CSVOptions{Columns: slices.Clone(csvCols), Header: true})
	require.NoError(t, err)
	require.NoError(t, again.Seek(src.Position()))
	bs := readAll(t, again, 10)
	assert.Equal(t, []float32{0, 1}, bs[0].Labels)
}

func TestCSVMalformed(t *testing.T) {
	cases := map[string]struct{ text, want string }{
		"missing column": {"id,click,user,site,cat,price\n1,1,2,3,4,5\n", "line 1: missing column \"hist\""},
		"short line":     {"id,click,user,site,cat,hist,price\n1,1,2\n", "line 2: short line: 3 fields, expected 7"},
		"bad number":     {"id,click,user,site,cat,hist,price\n1,1,2x,a,b,1,2\n", "line 2 column 3 (user): \"2x\" is not a valid int value"},
		"bad sequence":   {"id,click,user,site,cat,hist,price\n1,1,2,a,b,1|q,2\n", "line 2 column 6 (hist): sequence element 2 \"q\""},
		"bad dense":      {"id,click,user,site,cat,hist,price\n1,1,2,a,b,1,nan\n", "line 2 column 7 (price)"},
		"empty file":     {"", "line 1: empty file"},
		"column twice":   {"id,click,user,site,cat,hist,user,price\n1,1,2,a,b,1,3,2\n", "column \"user\" is in the header twice (fields 3 and 7)"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "b.csv")
			require.NoError(t, os.WriteFile(path, []byte(c.text), 0o644))
			src, err := NewCSV([]string{path}, CSVOptions{Columns: slices.Clone(csvCols), Header: true})
			if err == nil {
				var b Batch
				_, err = src.Read(&b, 10)
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, errs.ErrInvalid))
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	// one column: a blank line split into one empty field and read as a row with an empty bag
	path := filepath.Join(t.TempDir(), "one.csv")
	require.NoError(t, os.WriteFile(path, []byte("id\n10\n11\n\n13\n"), 0o644))
	for _, skip := range []bool{false, true} {
		src, err := NewCSV([]string{path}, CSVOptions{Columns: []Column{{Name: "id", Role: RoleSparse}}, Header: true,
			Options: Options{SkipBad: skip}})
		require.NoError(t, err)
		if !skip {
			var b Batch
			_, err = src.Read(&b, 10)
			assert.ErrorContains(t, err, "line 4: blank line")
			continue
		}
		var ids []int64
		for _, b := range readAll(t, src, 10) {
			ids = append(ids, b.Inputs[0].Ints...)
		}
		assert.Equal(t, []int64{10, 11, 13}, ids)
		assert.Equal(t, int64(1), src.Position().Skipped)
	}
	_, err := NewCSV([]string{"x"}, CSVOptions{Columns: []Column{{Name: "a", Role: "weird"}}})
	assert.ErrorContains(t, err, "unknown role")
}

func TestRealCSVSamples(t *testing.T) {
	avazu := sharedData(t, "avazu/avazu_train_rows00001-08999.csv")
	cols := []Column{{Name: "click", Role: RoleLabel}, {Name: "hour", Role: RoleSparse},
		{Name: "site_id", Role: RoleSparse, Type: "string"}, {Name: "device_ip", Role: RoleSparse, Type: "hex"},
		{Name: "C14", Role: RoleSparse}, {Name: "C20", Role: RoleDense}}
	src, err := NewCSV([]string{avazu}, CSVOptions{Columns: cols, Header: true})
	require.NoError(t, err)
	n := 0
	for _, b := range readAll(t, src, 1000) {
		n += b.Size
	}
	assert.Equal(t, 8999, n)
}

type pqRow struct {
	Label float64  `parquet:"label"`
	Price *float32 `parquet:"price,optional"`
	User  int64    `parquet:"user"`
	Cat   *string  `parquet:"cat,optional"`
	Hist  []int32  `parquet:"hist,list"`
}

func writeParquet(t *testing.T, path string, rows []pqRow) {
	f, err := os.Create(path)
	require.NoError(t, err)
	w := parquet.NewGenericWriter[pqRow](f, parquet.PageBufferSize(256))
	for i := 0; i < len(rows); i += 7 {
		_, err = w.Write(rows[i:min(i+7, len(rows))])
		require.NoError(t, err)
		require.NoError(t, w.Flush())
	}
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
}

var pqCols = []Column{{Name: "label", Role: RoleLabel}, {Name: "price", Role: RoleDense},
	{Name: "user", Role: RoleSparse}, {Name: "cat", Role: RoleSparse, Type: "string"}, {Name: "hist", Role: RoleSequence}}

func pqRows(n int) []pqRow {
	rows := make([]pqRow, n)
	for i := range rows {
		r := &rows[i]
		r.Label = float64(i % 2)
		r.User = int64(i * 3)
		if i%3 != 0 {
			p := float32(i) / 2
			r.Price = &p
		}
		if i%4 != 0 {
			c := string(rune('a' + i%26))
			r.Cat = &c
		}
		for k := 0; k < i%5; k++ {
			r.Hist = append(r.Hist, int32(i*10+k))
		}
	}
	return rows
}

func TestParquet(t *testing.T) {
	dir := t.TempDir()
	rows := pqRows(100)
	paths := []string{filepath.Join(dir, "a.parquet"), filepath.Join(dir, "b.parquet")}
	writeParquet(t, paths[0], rows[:60])
	writeParquet(t, paths[1], rows[60:])
	check := func(bs []Batch, rank, world int, from int) {
		s := 0
		for _, b := range bs {
			at := make([]int, 4)
			for i := 0; i < b.Size; i++ {
				g := from + s*world
				s++
				r := rows[g]
				require.Equal(t, float32(r.Label), b.Labels[i], "row %d", g)
				want := float32(0)
				if r.Price != nil {
					want = *r.Price
				}
				require.Equal(t, want, b.Dense[i])
				require.Equal(t, r.User, b.Inputs[0].Ints[at[0]])
				at[0]++
				if r.Cat != nil {
					require.Equal(t, int64(1), b.Inputs[1].Lengths[i])
					require.Equal(t, int64(len(*r.Cat)), b.Inputs[1].ByteLens[at[1]])
					at[1]++
				} else {
					require.Equal(t, int64(0), b.Inputs[1].Lengths[i])
				}
				require.Equal(t, int64(len(r.Hist)), b.Inputs[2].Lengths[i], "row %d", g)
				for _, h := range r.Hist {
					require.Equal(t, int64(h), b.Inputs[2].Ints[at[2]])
					at[2]++
				}
			}
		}
		require.Equal(t, (len(rows)-from+world-1)/world, s)
	}
	for world := 1; world <= 3; world++ {
		for rank := 0; rank < world; rank++ {
			src, err := NewParquet(paths, ParquetOptions{Columns: pqCols, Options: Options{Rank: rank, WorldSize: world}})
			require.NoError(t, err)
			check(readAll(t, src, 9), rank, world, rank)
		}
	}
	// Resume mid-file and across files.
	for _, k := range []int{1, 5, 8} {
		src, err := NewParquet(paths, ParquetOptions{Columns: pqCols})
		require.NoError(t, err)
		var b Batch
		for range k {
			_, err := src.Read(&b, 9)
			require.NoError(t, err)
		}
		again, err := NewParquet(paths, ParquetOptions{Columns: pqCols})
		require.NoError(t, err)
		require.NoError(t, again.Seek(src.Position()))
		check(readAll(t, again, 9), 0, 1, 9*k)
	}
	// A position past a file's end (saved from a longer file): named, as the text readers name it
	// (it read nothing, silently). The end itself is a valid position.
	past, err := NewParquet(paths, ParquetOptions{Columns: pqCols})
	require.NoError(t, err)
	assert.ErrorContains(t, past.Seek(Position{File: 0, Row: 61, Global: 61}), "a.parquet has fewer than 61 rows (it has 60)")
	require.NoError(t, past.Seek(Position{File: 0, Row: 60, Global: 60}))
	// A group column names its leaves; a leaf is named by its dotted path.
	type inner struct {
		A int64 `parquet:"a"`
		B int64 `parquet:"b"`
	}
	type grouped struct {
		Label float64 `parquet:"label"`
		G     inner   `parquet:"g"`
	}
	gpath := filepath.Join(dir, "g.parquet")
	gf, err := os.Create(gpath)
	require.NoError(t, err)
	gw := parquet.NewGenericWriter[grouped](gf)
	_, err = gw.Write([]grouped{{1, inner{5, 6}}, {0, inner{7, 8}}})
	require.NoError(t, err)
	require.NoError(t, gw.Close())
	require.NoError(t, gf.Close())
	label := Column{Name: "label", Role: RoleLabel}
	_, err = NewParquet([]string{gpath}, ParquetOptions{Columns: []Column{label, {Name: "g", Role: RoleSparse}}})
	assert.ErrorContains(t, err, `column "g" is a group of 2 leaves (g.a, g.b)`)
	leaf, err := NewParquet([]string{gpath}, ParquetOptions{Columns: []Column{label, {Name: "g.b", Role: RoleSparse}}})
	require.NoError(t, err)
	got := readAll(t, leaf, 10)
	require.Len(t, got, 1)
	assert.Equal(t, []int64{6, 8}, got[0].Inputs[0].Ints)
	// A missing column, a repeated column declared sparse, a truncated file.
	_, err = NewParquet(paths, ParquetOptions{Columns: []Column{{Name: "nope", Role: RoleSparse}}})
	assert.ErrorContains(t, err, "a.parquet: missing column \"nope\"")
	_, err = NewParquet(paths, ParquetOptions{Columns: []Column{{Name: "hist", Role: RoleSparse}}})
	assert.ErrorContains(t, err, "declare it as a sequence")
	data, _ := os.ReadFile(paths[0])
	trunc := filepath.Join(dir, "t.parquet")
	require.NoError(t, os.WriteFile(trunc, data[:len(data)-20], 0o644))
	_, err = NewParquet([]string{trunc}, ParquetOptions{Columns: pqCols})
	require.Error(t, err)
	assert.True(t, errors.Is(err, errs.ErrIO))
	assert.Contains(t, err.Error(), trunc)
}

func TestSynthetic(t *testing.T) {
	cfg := SyntheticConfig{Samples: 20000, Seed: 7, Dense: 3, Label: &PlantedLabel{IDScale: 1.5, DenseScale: 0.5, Bias: -0.5},
		Fields: []SyntheticField{{Name: "a", Rows: 1000, Alpha: 1.1, Coverage: 1, Pooling: 1},
			{Name: "b", Rows: 50000, Alpha: 0.8, Coverage: 0.6, Pooling: 6}}}
	src, err := NewSynthetic(cfg, Options{})
	require.NoError(t, err)
	bs := readAll(t, src, 1000)
	// Statistics follow the configuration.
	var present, values, hot, total int64
	var labels, logits []float64
	g := int64(0)
	for _, b := range bs {
		for s, l := range b.Inputs[1].Lengths {
			if l > 0 {
				present++
				values += l
			}
			labels = append(labels, float64(b.Labels[s]))
			logits = append(logits, src.Logit(g))
			g++
		}
		for _, id := range b.Inputs[0].Ints {
			total++
			if id < 10 {
				hot++
			}
		}
	}
	assert.InDelta(t, 0.6, float64(present)/20000, 0.02)
	assert.InDelta(t, 6, float64(values)/float64(present), 0.3)
	assert.Greater(t, float64(hot)/float64(total), 0.3) // the 1% hottest IDs take a large share
	assert.Greater(t, auc(logits, labels), 0.75)        // labels follow the planted model
	// Sharded and sought reads equal the full stream.
	src2, err := NewSynthetic(cfg, Options{Rank: 1, WorldSize: 2})
	require.NoError(t, err)
	var b Batch
	_, err = src2.Read(&b, 100)
	require.NoError(t, err)
	src3, err := NewSynthetic(cfg, Options{Rank: 1, WorldSize: 2})
	require.NoError(t, err)
	require.NoError(t, src3.Seek(src2.Position()))
	var c, d Batch
	_, err = src2.Read(&c, 50)
	require.NoError(t, err)
	_, err = src3.Read(&d, 50)
	require.NoError(t, err)
	assert.Equal(t, c, d)
	assert.Equal(t, bs[0].Inputs[0].Ints[1], b.Inputs[0].Ints[0]) // global sample 1 is rank 1's first
	_, err = NewSynthetic(SyntheticConfig{Samples: 1, Fields: []SyntheticField{{Name: "x", Rows: 0, Pooling: 1}}}, Options{})
	assert.ErrorContains(t, err, "rows must be positive")
}

// auc is the rank-sum AUC of scores against 0/1 labels.
func auc(scores, labels []float64) float64 {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		if scores[a] < scores[b] {
			return -1
		}
		if scores[a] > scores[b] {
			return 1
		}
		return 0
	})
	var pos, rankSum float64
	for r, i := range idx {
		if labels[i] == 1 {
			pos++
			rankSum += float64(r + 1)
		}
	}
	neg := float64(len(scores)) - pos
	return (rankSum - pos*(pos+1)/2) / (pos * neg)
}

func TestFitAndWriteCriteo(t *testing.T) {
	p, _ := criteoSample(t)
	src, err := NewCriteo([]string{p}, CriteoOptions{})
	require.NoError(t, err)
	cfg, err := FitSynthetic(src, 5000)
	require.NoError(t, err)
	require.Len(t, cfg.Fields, 39)
	assert.Equal(t, 13, cfg.Dense)
	assert.Equal(t, int64(5000), cfg.Samples)
	for _, f := range cfg.Fields {
		assert.False(t, math.IsNaN(f.Alpha))
		assert.InDelta(t, 1, f.Pooling, 1e-9, f.Name)
	}
	cfg.Samples = 3000
	syn, err := NewSynthetic(cfg, Options{})
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "gen.txt")
	f, err := os.Create(out)
	require.NoError(t, err)
	n, err := WriteCriteo(f, syn, 1<<40)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, int64(3000), n)
	syn2, _ := NewSynthetic(cfg, Options{})
	want := readAll(t, syn2, 1000)
	back, err := NewCriteo([]string{out}, CriteoOptions{})
	require.NoError(t, err)
	got := readAll(t, back, 1000)
	require.Len(t, got, len(want))
	for i := range got {
		assert.Equal(t, want[i].Labels, got[i].Labels)
		for f := range got[i].Inputs {
			assert.Equal(t, want[i].Inputs[f].Lengths, got[i].Inputs[f].Lengths)
			assert.Equal(t, len(want[i].Inputs[f].Ints), len(got[i].Inputs[f].Ints))
		}
		assert.Equal(t, want[i].Inputs[20].Ints, got[i].Inputs[20].Ints)
	}
}

// A fit gives a config NewSynthetic takes: bags longer on average than the generator's longest are
// fitted at its longest (a mean of 600 made a config it refused), and a source of dense columns
// alone has an empty field list (JSON [], not null: Python's fit failed iterating it).
func TestFitGivesAConfigTheGeneratorTakes(t *testing.T) {
	dir := t.TempDir()
	var long, dense strings.Builder
	long.WriteString("label,h\n")
	dense.WriteString("label,d\n")
	for i := range 20 {
		ids := make([]string, 600)
		for j := range ids {
			ids[j] = strconv.Itoa(j)
		}
		fmt.Fprintf(&long, "%d,%s\n", i%2, strings.Join(ids, "|"))
		fmt.Fprintf(&dense, "%d,%d.5\n", i%2, i)
	}
	cases := []struct {
		name, text string
		cols       []Column
		check      func(t *testing.T, cfg SyntheticConfig)
	}{
		{"long bags", long.String(), []Column{{Name: "label", Role: RoleLabel}, {Name: "h", Role: RoleSequence}},
			func(t *testing.T, cfg SyntheticConfig) {
				require.Len(t, cfg.Fields, 1)
				assert.Equal(t, float64(maxSyntheticBag/8), cfg.Fields[0].Pooling)
			}},
		{"dense only", dense.String(), []Column{{Name: "label", Role: RoleLabel}, {Name: "d", Role: RoleDense}},
			func(t *testing.T, cfg SyntheticConfig) {
				assert.Equal(t, 1, cfg.Dense)
				js, err := json.Marshal(cfg)
				require.NoError(t, err)
				assert.Contains(t, string(js), `"fields":[]`)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".csv")
			require.NoError(t, os.WriteFile(p, []byte(tc.text), 0o644))
			src, err := NewCSV([]string{p}, CSVOptions{Columns: tc.cols, Header: true})
			require.NoError(t, err)
			defer src.Close()
			cfg, err := FitSynthetic(src, 100)
			require.NoError(t, err)
			tc.check(t, cfg)
			syn, err := NewSynthetic(cfg, Options{})
			require.NoError(t, err)
			assert.NotEmpty(t, readAll(t, syn, 5))
		})
	}
}
