package pipeline

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func synthCfg(samples int64) reader.SyntheticConfig {
	return reader.SyntheticConfig{Samples: samples, Seed: 3, Dense: 2, Label: &reader.PlantedLabel{IDScale: 1},
		Fields: []reader.SyntheticField{
			{Name: "u", Rows: 500, Alpha: 1.1, Coverage: 1, Pooling: 1},
			{Name: "h", Rows: 5000, Alpha: 0.9, Coverage: 0.8, Pooling: 5},
			{Name: "i", Rows: 2000, Alpha: 1.0, Coverage: 0.9, Pooling: 1}}}
}

func synthEngine(t *testing.T) *feature.Engine {
	spec, err := feature.ParseSpec([]byte(`{"features": [
	  {"name": "u", "ops": [{"op": "hash", "seed": 1}, {"op": "mod", "n": 1000}]},
	  {"name": "h", "ops": [{"op": "truncate", "n": 8, "keep": "last"}, {"op": "mod", "n": 1000}]},
	  {"name": "i", "ops": [{"op": "fill_missing", "default": 0}, {"op": "mod", "n": 300}]},
	  {"name": "ux", "ops": [{"op": "cross", "fields": ["u", "i"]}, {"op": "mod", "n": 777}]}]}`))
	require.NoError(t, err)
	eng, err := feature.Compile(spec)
	require.NoError(t, err)
	return eng
}

var synthTables = []Table{{Name: "t_ui", Keys: []string{"u", "i"}}, {Name: "t_h", Keys: []string{"h"}}, {Name: "t_x", Keys: []string{"ux"}}}

// serialBatch is what a plain reader + FeatureEngine run gives for one step: the reference.
type serialBatch struct {
	values, lengths []int64
	labels, dense   []float32
}

func serialRun(t *testing.T, src reader.Source, eng *feature.Engine, bs int) []serialBatch {
	var out []serialBatch
	schema := src.Schema()
	for {
		var raw reader.Batch
		_, err := src.Read(&raw, bs)
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		b := feature.Batch{Size: raw.Size}
		for _, in := range eng.Inputs() {
			b.Inputs = append(b.Inputs, raw.Inputs[schema.FieldIndex(in.Name)])
		}
		res, err := eng.Apply(b)
		require.NoError(t, err)
		s := serialBatch{values: make([]int64, res.NumValues()), lengths: make([]int64, len(res.Keys())*res.Size()),
			labels: raw.Labels, dense: raw.Dense}
		require.NoError(t, res.CopyTo(s.values, s.lengths))
		out = append(out, s)
	}
}

// drain reads every batch of p, checking each table's dedup against its values.
func drain(t *testing.T, p *Pipeline, tables []Table) []serialBatch {
	var out []serialBatch
	for {
		b, err := p.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		require.Equal(t, int64(len(out)), b.Step)
		checkDedup(t, b, tables)
		out = append(out, serialBatch{values: append([]int64{}, b.Values...), lengths: append([]int64{}, b.Lengths...),
			labels: append([]float32{}, b.Labels...), dense: append([]float32{}, b.Dense...)})
		require.NoError(t, b.Close())
	}
}

// checkDedup: Uniq[Inv[p]] is the p-th lookup of the table, Uniq distinct and in first-seen order.
func checkDedup(t *testing.T, b *Prepared, tables []Table) {
	require.Len(t, b.Dedup, len(tables))
	starts := map[string][2]int{}
	at := 0
	for k, key := range b.Keys {
		n := 0
		for _, l := range b.Lengths[k*b.Size : (k+1)*b.Size] {
			n += int(l)
		}
		starts[key] = [2]int{at, at + n}
		at += n
	}
	for ti, tb := range tables {
		d := b.Dedup[ti]
		var ids []int64
		for _, k := range tb.Keys {
			r := starts[k]
			ids = append(ids, b.Values[r[0]:r[1]]...)
		}
		require.Len(t, d.Inv, len(ids))
		seen := map[int64]int32{}
		var uniq []int64
		for p, id := range ids {
			u, ok := seen[id]
			if !ok {
				u = int32(len(uniq))
				seen[id] = u
				uniq = append(uniq, id)
			}
			require.Equal(t, u, d.Inv[p])
		}
		require.Equal(t, len(uniq), len(d.Uniq))
		if len(uniq) > 0 {
			require.Equal(t, uniq, d.Uniq)
		}
	}
}

func TestMatchesSerialEveryDepthAndWorkers(t *testing.T) {
	eng := synthEngine(t)
	src, err := reader.NewSynthetic(synthCfg(3000), reader.Options{})
	require.NoError(t, err)
	want := serialRun(t, src, eng, 256)
	require.Len(t, want, 12)
	procs := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(procs)
	for _, gmp := range []int{1, 2} {
		runtime.GOMAXPROCS(gmp)
		for depth := 0; depth <= 4; depth++ {
			for workers := 1; workers <= 3; workers++ {
				src, err := reader.NewSynthetic(synthCfg(3000), reader.Options{})
				require.NoError(t, err)
				p, err := New(context.Background(), src, eng, Config{BatchSize: 256, Depth: depth, Workers: workers, Tables: synthTables})
				require.NoError(t, err)
				got := drain(t, p, synthTables)
				require.Equal(t, want, got, "GOMAXPROCS %d depth %d workers %d", gmp, depth, workers)
				require.NoError(t, p.Close())
				st := p.Stats()
				assert.Equal(t, int64(12), st.Batches)
				assert.Equal(t, int64(3000), st.Samples)
			}
		}
	}
}

func criteoEngine(t *testing.T) *feature.Engine {
	var fs []string
	for i := 1; i <= 26; i++ {
		fs = append(fs, fmt.Sprintf(`{"name": "C%d", "ops": [{"op": "hash", "seed": %d}, {"op": "mod", "n": 100000}]}`, i, i))
	}
	for i := 1; i <= 13; i++ {
		fs = append(fs, fmt.Sprintf(`{"name": "I%d", "ops": [{"op": "fill_missing", "default": -1}, {"op": "bucketize", "boundaries": [0, 1, 2, 4, 8, 16, 64, 256, 1024]}]}`, i))
	}
	spec, err := feature.ParseSpec([]byte(`{"features": [` + strings.Join(fs, ",") + `]}`))
	require.NoError(t, err)
	eng, err := feature.Compile(spec)
	require.NoError(t, err)
	return eng
}

func sample(t *testing.T, rel string) string {
	for _, p := range []string{filepath.Join("..", "..", "..", "..", "shared", "data", rel), filepath.Join("/work/shared/data", rel)} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("sample %s not present", rel)
	return ""
}

func TestCriteoSampleMatchesSerial(t *testing.T) {
	path := sample(t, "criteo/criteo_dac_train_head10109.txt")
	eng := criteoEngine(t)
	open := func() reader.Source {
		src, err := reader.NewCriteo([]string{path}, reader.CriteoOptions{})
		require.NoError(t, err)
		return src
	}
	want := serialRun(t, open(), eng, 1024)
	tables := []Table{{Name: "cats", Keys: []string{"C1", "C2", "C3"}}, {Name: "c4", Keys: []string{"C4"}}}
	for _, depth := range []int{0, 1, 3} {
		p, err := New(context.Background(), open(), eng, Config{BatchSize: 1024, Depth: depth, Workers: 2, Tables: tables})
		require.NoError(t, err)
		require.Equal(t, want, drain(t, p, tables), "depth %d", depth)
		require.NoError(t, p.Close())
	}
}

// badSource wraps a source and corrupts step failAt's batch (its first input's lengths), or fails
// its read, or panics in it (a reader's bug).
type badSource struct {
	reader.Source
	step, failAt    int
	readErr, panics bool
	reads           atomic.Int64
}

func (s *badSource) Read(b *reader.Batch, n int) (int, error) {
	s.reads.Add(1)
	if s.panics && s.step == s.failAt {
		panic("reader bug")
	}
	got, err := s.Source.Read(b, n)
	if s.step == s.failAt && err == nil {
		if s.readErr {
			err = errs.Invalidf("disk on fire")
		} else {
			b.Inputs[0].Lengths[0] += 5
		}
	}
	s.step++
	return got, err
}

// A stage's error, or its panic (a bug; in a worker goroutine it would end the process), fails its
// step: an error naming the step and the stage, the same again at the next call, earlier batches
// delivered.
func TestStageErrorsAtTheirStep(t *testing.T) {
	eng := synthEngine(t)
	for _, c := range []struct {
		name            string
		readErr, panics bool
		stage           Stage
		code            int
		message         string
	}{
		{"read error", true, false, StageRead, errs.CodeInvalid,
			"input pipeline step 3, read stage: disk on fire"},
		{"bad lengths", false, false, StageTransform, errs.CodeInvalid,
			"step 3, transform stage: input \"u\": lengths sum"},
		{"read panic", false, true, StageRead, errs.CodeInternal,
			"input pipeline step 3, read stage: internal error (a bug in recgo, please report it): reader bug"},
	} {
		for _, depth := range []int{0, 1, 4} {
			t.Run(fmt.Sprintf("%s depth %d", c.name, depth), func(t *testing.T) {
				syn, err := reader.NewSynthetic(synthCfg(3000), reader.Options{})
				require.NoError(t, err)
				src := &badSource{Source: syn, failAt: 3, readErr: c.readErr, panics: c.panics}
				p, err := New(context.Background(), src, eng, Config{BatchSize: 100, Depth: depth, Workers: 2})
				require.NoError(t, err)
				for step := 0; step < 3; step++ {
					b, err := p.Next()
					require.NoError(t, err, "step %d", step)
					b.Close()
				}
				_, err = p.Next()
				var se *StageError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, int64(3), se.Step)
				assert.Equal(t, c.stage, se.Stage)
				assert.Equal(t, c.code, errs.Code(err))
				assert.ErrorContains(t, err, c.message)
				_, again := p.Next()
				assert.Equal(t, err, again)
				require.NoError(t, p.Close())
			})
		}
	}
}

func TestMalformedFileNamesLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.txt")
	good := "0" + strings.Repeat("\t1", 13) + strings.Repeat("\tab", 26) + "\n"
	text := strings.Repeat(good, 250) + "0\t1\t2\n" + strings.Repeat(good, 10)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	src, err := reader.NewCriteo([]string{path}, reader.CriteoOptions{})
	require.NoError(t, err)
	p, err := New(context.Background(), src, criteoEngine(t), Config{BatchSize: 100, Depth: 2})
	require.NoError(t, err)
	defer p.Close()
	for range 2 {
		b, err := p.Next()
		require.NoError(t, err)
		b.Close()
	}
	_, err = p.Next()
	assert.ErrorContains(t, err, "input pipeline step 2, read stage: "+path+" line 251: short line: 3 fields, expected 40")
}

func goroutinesSettle(t *testing.T, want int) {
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), want)
}

func TestEarlyStopLeavesNoGoroutine(t *testing.T) {
	eng := synthEngine(t)
	before := runtime.NumGoroutine()
	for _, depth := range []int{1, 4} {
		syn, _ := reader.NewSynthetic(synthCfg(100000), reader.Options{})
		p, err := New(context.Background(), syn, eng, Config{BatchSize: 64, Depth: depth, Workers: 3, Tables: synthTables})
		require.NoError(t, err)
		b, err := p.Next()
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond) // let the stages fill up and block
		assert.Equal(t, int64(4), Running())
		require.NoError(t, p.Close())
		assert.Equal(t, int64(0), Running())
		require.NoError(t, b.Close()) // a batch held past Close is still freed
		_, err = p.Next()
		assert.ErrorContains(t, err, "closed")
	}
	// A cancelled context stops it too.
	ctx, cancel := context.WithCancel(context.Background())
	syn, _ := reader.NewSynthetic(synthCfg(100000), reader.Options{})
	p, err := New(ctx, syn, eng, Config{BatchSize: 64, Depth: 2})
	require.NoError(t, err)
	cancel()
	for i := 0; i < 100; i++ {
		b, err := p.Next()
		if err != nil {
			assert.ErrorContains(t, err, "cancelled")
			break
		}
		b.Close()
	}
	require.NoError(t, p.Close())
	goroutinesSettle(t, before)
}

func TestBackPressure(t *testing.T) {
	eng := synthEngine(t)
	for _, depth := range []int{1, 3} {
		syn, _ := reader.NewSynthetic(synthCfg(100000), reader.Options{})
		src := &badSource{Source: syn, failAt: -1}
		p, err := New(context.Background(), src, eng, Config{BatchSize: 64, Depth: depth, Workers: 2})
		require.NoError(t, err)
		var held []*Prepared
		for range 5 {
			b, err := p.Next()
			require.NoError(t, err)
			held = append(held, b)
		}
		time.Sleep(30 * time.Millisecond)
		// Five handed out, at most depth read ahead.
		assert.LessOrEqual(t, src.reads.Load(), int64(5+depth))
		for _, b := range held {
			b.Close()
		}
		assert.LessOrEqual(t, p.pool.pooled(), depth+2+2)
		require.NoError(t, p.Close())
	}
}

func TestResume(t *testing.T) {
	eng := synthEngine(t)
	syn, _ := reader.NewSynthetic(synthCfg(2000), reader.Options{Rank: 1, WorldSize: 2})
	want := serialRun(t, syn, eng, 100)
	for _, depth := range []int{0, 3} {
		syn, _ := reader.NewSynthetic(synthCfg(2000), reader.Options{Rank: 1, WorldSize: 2})
		p, err := New(context.Background(), syn, eng, Config{BatchSize: 100, Depth: depth})
		require.NoError(t, err)
		got := []serialBatch{}
		for range 4 {
			b, err := p.Next()
			require.NoError(t, err)
			got = append(got, serialBatch{values: append([]int64{}, b.Values...), lengths: append([]int64{}, b.Lengths...),
				labels: append([]float32{}, b.Labels...), dense: append([]float32{}, b.Dense...)})
			b.Close()
		}
		pos := p.Position()
		require.NoError(t, p.Close())
		syn2, _ := reader.NewSynthetic(synthCfg(2000), reader.Options{Rank: 1, WorldSize: 2})
		require.NoError(t, syn2.Seek(pos))
		p2, err := New(context.Background(), syn2, eng, Config{BatchSize: 100, Depth: depth})
		require.NoError(t, err)
		got = append(got, drain(t, p2, nil)...)
		require.NoError(t, p2.Close())
		require.Equal(t, want, got, "depth %d", depth)
	}
}

// The forward with the pipeline's dedup equals the forward that deduplicates itself, and so do the
// updates its backward applies.
func TestForwardWithPreparedDedup(t *testing.T) {
	eng := synthEngine(t)
	newColl := func() *embedding.Collection {
		var tables []*embedding.Table
		for _, tb := range []struct {
			name string
			rows int64
		}{{"t_ui", 1000}, {"t_h", 1000}, {"t_x", 777}} {
			tab, err := embedding.NewFixedTable(tb.name, tb.rows, 4, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1})
			require.NoError(t, err)
			for i := range tab.Data {
				tab.Data[i] = float32(i%17) * 0.01
			}
			tables = append(tables, tab)
		}
		c, err := embedding.NewCollection(tables, []embedding.Feature{{Name: "u", Table: 0}, {Name: "i", Table: 0, Pooling: embedding.PoolMean}, {Name: "h", Table: 1}, {Name: "ux", Table: 2}})
		require.NoError(t, err)
		return c
	}
	a, b := newColl(), newColl()
	defer a.Close()
	defer b.Close()
	syn, _ := reader.NewSynthetic(synthCfg(600), reader.Options{})
	p, err := New(context.Background(), syn, eng, Config{BatchSize: 200, Depth: 2, Tables: synthTables})
	require.NoError(t, err)
	defer p.Close()
	keyFeature := []int64{0, 2, 1, 3} // KJT keys u, h, i, ux -> collection features
	for {
		pb, err := p.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		d := b.MatchDedup(pb.Dedup)
		outA, outB := make([]float32, pb.Size*a.Width()), make([]float32, pb.Size*b.Width())
		ctxA, err := a.Forward(embedding.Batch{KeyFeature: keyFeature, Values: pb.Values, Lengths: pb.Lengths}, outA, true, true)
		require.NoError(t, err)
		ctxB, err := b.Forward(embedding.Batch{KeyFeature: keyFeature, Values: pb.Values, Lengths: pb.Lengths, Dedup: d}, outB, true, true)
		require.NoError(t, err)
		require.Equal(t, outA, outB)
		grad := make([]float32, len(outA))
		for i := range grad {
			grad[i] = float32(i%7) - 3
		}
		require.NoError(t, a.Backward(ctxA, grad, nil, nil))
		require.NoError(t, b.Backward(ctxB, grad, nil, nil))
		a.Release(ctxA)
		b.Release(ctxB)
		// A batch changed in place no longer matches its dedup, and a dedup that misses tables (made
		// for another collection) covers only some: the tables left deduplicate themselves.
		pb.Values[0] = (pb.Values[0] + 1) % 1000
		for _, dd := range []*embedding.PreparedDedup{d, b.MatchDedup(pb.Dedup[:1]), b.MatchDedup(nil)} {
			ctxA, err := a.Forward(embedding.Batch{KeyFeature: keyFeature, Values: pb.Values, Lengths: pb.Lengths}, outA, true, true)
			require.NoError(t, err)
			ctxB, err := b.Forward(embedding.Batch{KeyFeature: keyFeature, Values: pb.Values, Lengths: pb.Lengths, Dedup: dd}, outB, true, true)
			require.NoError(t, err)
			require.Equal(t, outA, outB)
			require.NoError(t, a.Backward(ctxA, grad, nil, nil))
			require.NoError(t, b.Backward(ctxB, grad, nil, nil))
			a.Release(ctxA)
			b.Release(ctxB)
		}
		pb.Close()
	}
	for i := range a.Tables {
		require.Equal(t, a.Tables[i].Data, b.Tables[i].Data)
	}
}

type pqRow struct {
	Label float32 `parquet:"label"`
	U     int64   `parquet:"u"`
	H     []int64 `parquet:"h,list"`
	I     *int64  `parquet:"i,optional"`
	D     float64 `parquet:"d"`
}

// Generated Parquet, CSV and gzip-CSV files of the same samples give the serial batches at every
// depth and worker count.
func TestGeneratedFilesMatchSerial(t *testing.T) {
	dir := t.TempDir()
	syn, _ := reader.NewSynthetic(synthCfg(1500), reader.Options{})
	var rows []pqRow
	var csvText strings.Builder
	csvText.WriteString("label,u,h,i,d\n")
	for {
		var b reader.Batch
		_, err := syn.Read(&b, 500)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		at := make([]int64, 3)
		for s := 0; s < b.Size; s++ {
			r := pqRow{Label: b.Labels[s], D: float64(b.Dense[2*s])}
			r.U = b.Inputs[0].Ints[at[0]]
			at[0]++
			var hs []string
			for k := int64(0); k < b.Inputs[1].Lengths[s]; k++ {
				r.H = append(r.H, b.Inputs[1].Ints[at[1]])
				hs = append(hs, fmt.Sprint(b.Inputs[1].Ints[at[1]]))
				at[1]++
			}
			is := ""
			if b.Inputs[2].Lengths[s] > 0 {
				v := b.Inputs[2].Ints[at[2]]
				r.I = &v
				is = fmt.Sprint(v)
				at[2]++
			}
			rows = append(rows, r)
			fmt.Fprintf(&csvText, "%g,%d,%s,%s,%g\n", r.Label, r.U, strings.Join(hs, "|"), is, r.D)
		}
	}
	pq := filepath.Join(dir, "x.parquet")
	f, err := os.Create(pq)
	require.NoError(t, err)
	w := parquet.NewGenericWriter[pqRow](f)
	_, err = w.Write(rows)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	csvPath := filepath.Join(dir, "x.csv")
	require.NoError(t, os.WriteFile(csvPath, []byte(csvText.String()), 0o644))
	gzPath := filepath.Join(dir, "x.csv.gz")
	var gzBuf bytes.Buffer
	gw := gzip.NewWriter(&gzBuf)
	_, _ = gw.Write([]byte(csvText.String()))
	require.NoError(t, gw.Close())
	require.NoError(t, os.WriteFile(gzPath, gzBuf.Bytes(), 0o644))
	cols := []reader.Column{{Name: "label", Role: reader.RoleLabel}, {Name: "u", Role: reader.RoleSparse},
		{Name: "h", Role: reader.RoleSequence}, {Name: "i", Role: reader.RoleSparse}, {Name: "d", Role: reader.RoleDense}}
	opens := map[string]func() (reader.Source, error){
		"parquet": func() (reader.Source, error) {
			return reader.NewParquet([]string{pq}, reader.ParquetOptions{Columns: cols})
		},
		"csv": func() (reader.Source, error) {
			return reader.NewCSV([]string{csvPath}, reader.CSVOptions{Columns: cols, Header: true})
		},
		"gzip": func() (reader.Source, error) {
			return reader.NewCSV([]string{gzPath}, reader.CSVOptions{Columns: cols, Header: true})
		},
	}
	eng := synthEngine(t)
	var first []serialBatch
	for name, open := range opens {
		src, err := open()
		require.NoError(t, err)
		want := serialRun(t, src, eng, 128)
		if first == nil {
			first = want
		}
		for i := range want { // every format reads the same samples
			require.Equal(t, first[i].values, want[i].values, name)
			require.Equal(t, first[i].labels, want[i].labels, name)
		}
		for _, depth := range []int{0, 2, 4} {
			for _, workers := range []int{1, 3} {
				src, err := open()
				require.NoError(t, err)
				p, err := New(context.Background(), src, eng, Config{BatchSize: 128, Depth: depth, Workers: workers, Tables: synthTables})
				require.NoError(t, err)
				require.Equal(t, want, drain(t, p, synthTables), "%s depth %d workers %d", name, depth, workers)
				require.NoError(t, p.Close())
			}
		}
	}
}

// The thread budget: with Workers 1 the stages never run at once (READ holds the budget while it
// parses), so their summed times fit in the wall time of the whole run.
func TestOneWorkerRunsOneStageAtATime(t *testing.T) {
	cfg := synthCfg(40_000)
	cfg.Fields[1].Pooling = 30
	src, err := reader.NewSynthetic(cfg, reader.Options{})
	require.NoError(t, err)
	t0 := time.Now()
	p, err := New(context.Background(), src, synthEngine(t), Config{BatchSize: 2000, Depth: 4, Workers: 1})
	require.NoError(t, err)
	for {
		b, err := p.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	wall := time.Since(t0)
	st := p.Stats()
	require.NoError(t, p.Close())
	busy := time.Duration(st.ReadNs + st.TransformNs + st.FormatNs)
	assert.Greater(t, st.ReadNs, int64(0))
	assert.Greater(t, st.TransformNs, int64(0))
	assert.LessOrEqual(t, busy, wall, "stage time %v over wall %v: stages overlapped", busy, wall)
}
