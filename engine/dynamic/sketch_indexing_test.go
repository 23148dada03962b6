package dynamic

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/kernels"
)

// withIndexing makes the table's sketches place counts by indexing i, as a table restored from a
// checkpoint of that indexing (with counts) does.
func withIndexing(tab *Table, i SketchIndexing) {
	for k := range tab.shards {
		tab.shards[k].sketch.indexing = i
	}
}

// refSketch is the admission sketch written out from its definition, one per shard: conservative
// update, halving after 10 × the shard width additions, and each indexing's formula (SketchV1 as
// engine/dynamic/sketch.go had it before c662e56).
type refSketch struct {
	indexing SketchIndexing
	width    int // per shard
	seed     uint64
	cells    [numShards][]uint8
	adds     [numShards]int
}

func newRefSketch(indexing SketchIndexing, sketchWidth int, seed uint64, adds int) *refSketch {
	r := &refSketch{indexing: indexing, width: sketchWidth / numShards, seed: seed}
	for i := range r.cells {
		r.cells[i], r.adds[i] = make([]uint8, sketchDepth*r.width), adds
	}
	return r
}

func (r *refSketch) indices(h uint64) [sketchDepth]int {
	var idx [sketchDepth]int
	switch r.indexing {
	case SketchV1:
		g := kernels.Mix64(h ^ 0x9e3779b97f4a7c15)
		lo, hi := uint32(g), uint32(g>>32)|1
		for d := range sketchDepth {
			idx[d] = d*r.width + int((lo+uint32(d)*hi)&uint32(r.width-1))
		}
	case SketchV2:
		a, b := kernels.Mix64(h^0x9e3779b97f4a7c15), kernels.Mix64(h^0xc2b2ae3d27d4eb4f)
		for d, v := range [sketchDepth]uint64{a, a >> 32, b, b >> 32} {
			idx[d] = d*r.width + int(v&uint64(r.width-1))
		}
	default:
		panic("no such indexing")
	}
	return idx
}

// add counts a sighting of id and returns its new estimate.
func (r *refSketch) add(id int64) int {
	h := kernels.Mix64(uint64(id) ^ r.seed)
	sh := int(h >> (64 - shardBits))
	c, idx := r.cells[sh], r.indices(h)
	m := uint8(255)
	for _, i := range idx {
		m = min(m, c[i])
	}
	if m == 255 {
		return 255
	}
	for _, i := range idx {
		if c[i] == m {
			c[i]++
		}
	}
	if r.adds[sh]++; r.adds[sh] >= 10*r.width {
		for i := range c {
			c[i] /= 2
		}
		r.adds[sh] /= 2
	}
	return int(m) + 1
}

// state returns the counters and addition counts in a snapshot's order.
func (r *refSketch) state() ([]uint8, []int64) {
	var cells []uint8
	adds := make([]int64, numShards)
	for i := range r.cells {
		cells = append(cells, r.cells[i]...)
		adds[i] = int64(r.adds[i])
	}
	return cells, adds
}

// TestOldSketchLoadsWhereItWasWritten: a checkpoint's sketch keeps counting its pending IDs on the
// counters that wrote it. Its counts come from the reference of the indexing that wrote it (SketchV1
// for files of version 1 and 2, which do not say: the indexing until c662e56), and after the load
// the table's counters, addition counts and admissions equal the reference's sighting by sighting,
// across a halving too. Before the marker a version-2 file's counts were read by SketchV2 and landed
// on other counters: its pending IDs counted from about zero again (some 400 counters differ here
// after one more sighting).
func TestOldSketchLoadsWhereItWasWritten(t *testing.T) {
	cases := []struct {
		name        string
		version     uint32 // of the file
		seedKnown   bool
		marked      SketchIndexing // in the file
		written     SketchIndexing // what placed its counters
		adds        int            // per shard before the first sighting: 636 halves during the run
		tableBefore SketchIndexing // the destination table's indexing before the load
	}{
		{"version 1", 1, false, SketchUnmarked, SketchV1, 0, SketchV2},
		{"version 2", 2, true, SketchUnmarked, SketchV1, 0, SketchV2},
		{"version 2, halving", 2, true, SketchUnmarked, SketchV1, 636, SketchV2},
		{"version 3 of v1", 3, true, SketchV1, SketchV1, 636, SketchV2},
		{"version 3 of v2", 3, true, SketchV2, SketchV2, 0, SketchV2},
		{"version 3 of v2 into a v1 table", 3, true, SketchV2, SketchV2, 636, SketchV1},
		{"version 2 into a v1 table", 2, true, SketchUnmarked, SketchV1, 0, SketchV1},
	}
	const minCount, saved, seed = 5, 3, 3
	ids := make([]int64, 60)
	for i := range ids {
		ids[i] = int64(1000 + 7*i)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Name: "t", Dim: 2, MaxRows: 100, MinCount: minCount, Seed: seed}
			ref := newRefSketch(tc.written, 4096, seed, tc.adds) // the default width of 100 rows
			for range saved {
				for _, id := range ids {
					require.Less(t, ref.add(id), minCount, "no ID reaches min_count before the save")
				}
			}
			snap, err := newTable(t, cfg).Export()
			require.NoError(t, err)
			snap.Sketch, snap.SketchAdds = ref.state()
			snap.SeedKnown, snap.SketchIndexing = tc.seedKnown, tc.marked
			data := (&Checkpoint{Snapshot: snap}).Encode()
			require.Equal(t, tc.version, binary.LittleEndian.Uint32(data[len(fileMagic):]), "file version")
			ck, err := DecodeCheckpoint(data)
			require.NoError(t, err)
			require.Equal(t, tc.marked, ck.Snapshot.SketchIndexing)

			dst := newTable(t, cfg)
			withIndexing(dst, tc.tableBefore)
			require.NoError(t, dst.Import(ck.Snapshot))
			admittedAt := map[int]int{} // total sightings → IDs admitted at it
			admitted := map[int64]bool{}
			for k := saved + 1; k <= minCount+1; k++ {
				rows := resolve(t, dst, true, ids...)
				want, got := make([]bool, len(ids)), make([]bool, len(ids))
				for i, id := range ids {
					if !admitted[id] && ref.add(id) >= minCount {
						admitted[id] = true
						admittedAt[k]++
					}
					want[i], got[i] = admitted[id], rows[i] >= 0
				}
				require.Equal(t, want, got, "IDs holding a row after %d sightings", k)
				back, err := dst.Export()
				require.NoError(t, err)
				cells, adds := ref.state()
				require.Len(t, back.Sketch, len(cells))
				differ := 0
				for i := range cells {
					if cells[i] != back.Sketch[i] {
						differ++
					}
				}
				require.Zero(t, differ, "counters unlike the reference's after %d sightings", k)
				require.Equal(t, adds, back.SketchAdds, "additions after %d sightings", k)
				require.Equal(t, tc.written, back.SketchIndexing, "saved back marked")
			}
			if tc.adds == 0 { // no halving: every ID at exactly min_count (60 IDs over 64 shards do not meet)
				assert.Equal(t, map[int]int{minCount: len(ids)}, admittedAt)
			} else { // the halving ran (the table matched it above) and held some IDs back
				halved := 0
				for _, a := range ref.adds {
					if a < tc.adds {
						halved++
					}
				}
				assert.Positive(t, halved, "shards that halved their counters")
				assert.Less(t, len(admitted), len(ids))
			}
		})
	}
}

// TestSketchIndexingOfAnEmptySketch: a sketch with no count depends on no indexing, so a table that
// loads one (an old checkpoint's, or none at all) takes the current indexing and saves it so.
func TestSketchIndexingOfAnEmptySketch(t *testing.T) {
	for _, minCount := range []int{1, 3} {
		tab := newTable(t, Config{Name: "t", Dim: 2, MaxRows: 50, MinCount: minCount})
		snap, err := tab.Export()
		require.NoError(t, err)
		require.Equal(t, SketchV2, snap.SketchIndexing, "a new table")
		snap.SketchIndexing = SketchUnmarked
		withIndexing(tab, SketchV1)
		require.NoError(t, tab.Import(snap))
		back, err := tab.Export()
		require.NoError(t, err)
		assert.Equal(t, SketchV2, back.SketchIndexing, "min_count %d", minCount)
	}
}

// setHeader returns b with header int64 i set to v and the header checksum recomputed.
func setHeader(b []byte, i int, v int64) []byte {
	b = append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(b[len(fileMagic)+4+8*i:], uint64(v))
	hb := headerBytes(binary.LittleEndian.Uint32(b[len(fileMagic):]))
	binary.LittleEndian.PutUint32(b[hb:], crc32.Checksum(b[:hb], castagnoli))
	return b
}

// TestCheckpointFileVersions: each version's file reads back to its snapshot and writes back the same
// bytes (version 1 without the seed, 2 without the sketch indexing, 3 with both); a version-3 file
// names an indexing this recgo knows, or it is refused as damaged.
func TestCheckpointFileVersions(t *testing.T) {
	_, _, s := smallCheckpoint(t, true)
	cases := []struct {
		seedKnown bool
		indexing  SketchIndexing
		version   uint32
	}{
		{false, SketchUnmarked, 1}, {true, SketchUnmarked, 2}, {true, SketchV1, 3}, {true, SketchV2, 3},
	}
	for _, tc := range cases {
		c := *s
		c.SeedKnown, c.SketchIndexing = tc.seedKnown, tc.indexing
		if !tc.seedKnown {
			c.Seed = 0
		}
		data := (&Checkpoint{Snapshot: &c, OptimizerStep: 5}).Encode()
		require.Equal(t, tc.version, binary.LittleEndian.Uint32(data[len(fileMagic):]))
		got, err := DecodeCheckpoint(data)
		require.NoError(t, err)
		require.Equal(t, &c, got.Snapshot)
		require.Equal(t, data, got.Encode(), "version %d is written back as read", tc.version)
	}
	v3 := (&Checkpoint{Snapshot: s}).Encode()
	for _, bad := range []int64{int64(SketchUnmarked), 3, -1} {
		_, err := DecodeCheckpoint(setHeader(v3, 13, bad))
		require.True(t, errors.Is(err, errs.ErrIO), "%v", err)
		require.ErrorContains(t, err, "sketch indexing")
	}
	bad := *s
	bad.SketchIndexing = 3
	require.ErrorContains(t, newTable(t, Config{Name: "ck", Dim: 2, StateWidth: 1, MaxRows: 6, MinCount: 2,
		Seed: 3}).Import(&bad), "sketch indexing 3 is unknown")
}
