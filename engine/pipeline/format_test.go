package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/planner"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// remapOf builds a planner remap of one table (ranked rows hottest first) through its file format.
func remapOf(t *testing.T, name string, rows int64, ranked []int64) *planner.Remap {
	path := filepath.Join(t.TempDir(), "remap.bin")
	src := &planner.Remap{Tables: []planner.RemapTable{{Name: name, Rows: rows, Hot: int64(len(ranked)), Ranked: ranked}}}
	require.NoError(t, src.Save(path))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := planner.ReadRemap(f, -1, 0)
	require.NoError(t, err)
	return r
}

// FORMAT renumbers the planned table's IDs (and only its) before deduplicating them.
func TestFormatAppliesRemap(t *testing.T) {
	eng := synthEngine(t)
	remap := remapOf(t, "t_h", 1000, []int64{7, 3, 999})
	open := func() reader.Source {
		syn, _ := reader.NewSynthetic(synthCfg(500), reader.Options{})
		return syn
	}
	want := serialRun(t, open(), eng, 100)
	p, err := New(context.Background(), open(), eng, Config{BatchSize: 100, Depth: 2, Tables: synthTables, Remap: remap})
	require.NoError(t, err)
	got := drain(t, p, synthTables) // dedup checked against the renumbered values
	require.NoError(t, p.Close())
	require.Len(t, got, len(want))
	hIdx := slices.Index(eng.OutputKeys(), "h")
	for i := range want {
		B := 100
		starts := []int{0}
		for k := range eng.OutputKeys() {
			n := 0
			for _, l := range want[i].lengths[k*B : (k+1)*B] {
				n += int(l)
			}
			starts = append(starts, starts[k]+n)
		}
		for k := range eng.OutputKeys() {
			w, g := want[i].values[starts[k]:starts[k+1]], got[i].values[starts[k]:starts[k+1]]
			if k != hIdx {
				require.Equal(t, w, g)
				continue
			}
			mapped := make([]int64, len(w))
			for j, id := range w {
				mapped[j] = remap.Tables[0].Map(id)
			}
			require.Equal(t, mapped, g)
		}
	}
	assert.Equal(t, int64(0), remap.Tables[0].Map(7))
	assert.Equal(t, int64(3), remap.Tables[0].Map(0))
}
