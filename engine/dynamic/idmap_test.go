package dynamic

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShardMatchesGoMap runs random inserts, deletes (present and absent) and lookups on one shard
// against a Go map. In the "wrapping" case every ID's hash ends in ten bits >= 1020, so for every
// table size the shard reaches (up to 1024 slots) all IDs home to the last slots: probe runs wrap
// around the table and backward-shift deletion has to move entries across the wrap.
func TestShardMatchesGoMap(t *testing.T) {
	pool := func(n int, keep func(h uint64) bool) []int64 {
		var ids []int64
		for id := int64(-1 << 20); len(ids) < n; id++ {
			if keep(hashID(id, 0)) {
				ids = append(ids, id)
			}
		}
		return ids
	}
	cases := []struct {
		name string
		ids  []int64
	}{
		{"spread", pool(500, func(uint64) bool { return true })},
		{"wrapping", pool(150, func(h uint64) bool { return h&1023 >= 1020 })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s shard // seed 0
			ref := map[int64]int32{}
			rng := rand.New(rand.NewPCG(4, 2))
			for op := range 20000 {
				id := tc.ids[rng.IntN(len(tc.ids))]
				h := hashID(id, 0)
				_, present := ref[id]
				switch rng.IntN(3) {
				case 0:
					if !present {
						s.put(h, id, int32(op))
						ref[id] = int32(op)
					}
				case 1:
					require.Equal(t, present, s.del(h, id), "op %d: del(%d)", op, id)
					delete(ref, id)
				}
				want, ok := ref[id]
				if !ok {
					want = -1
				}
				require.Equal(t, want, s.get(h, id), "op %d: get(%d)", op, id)
				require.Equal(t, len(ref), s.n)
			}
			for id, row := range ref {
				require.Equal(t, row, s.get(hashID(id, 0), id))
			}
			assert.LessOrEqual(t, s.n*4, len(s.slots)*3, "load factor kept at most 3/4")
		})
	}
	var empty shard
	assert.False(t, empty.del(1, 1))
	assert.Equal(t, int32(-1), empty.get(1, 1))
}

func TestSketchCountsAndForgets(t *testing.T) {
	s := newSketch(minSketchShardWidth, 3, true)
	ids := []int64{1, 2, 3, 1 << 40, -9}
	for round := 1; round <= 5; round++ {
		for i, id := range ids {
			if i < round {
				s.add(hashID(id, 3))
			}
		}
	}
	for i, id := range ids {
		assert.GreaterOrEqual(t, s.estimate(hashID(id, 3)), 5-i, "never under-counts id %d", id)
	}
	assert.Equal(t, 0, s.estimate(hashID(12345, 3)), "an unseen id in a nearly empty sketch")
	before := s.estimate(hashID(1, 3))
	for id := int64(1000); s.adds != 0 && s.adds < s.resetEvery()-1; id++ { // distinct ids up to a halving
		s.add(hashID(id, 3))
	}
	s.add(hashID(999_999, 3))
	assert.Equal(t, s.resetEvery()/2, s.adds, "halved")
	assert.LessOrEqual(t, s.estimate(hashID(1, 3)), before/2+1, "old sightings halved")
	for range 300 {
		s.add(hashID(5, 3))
	}
	assert.Equal(t, 255, s.estimate(hashID(5, 3)), "saturates")
}

// The sketch's rows are independent: two IDs meet in all rows of a 64-wide sketch about once in 64^4
// pairs. With one mix's halves combined per row (lo + d·hi), meeting in rows 0 and 1 meant meeting in
// every row, about one pair in 2048 (some 2,200 of the 4.5 million pairs of 3,000 IDs), and such a
// pair was admitted at half its min_count.
func TestSketchRowsAreIndependent(t *testing.T) {
	s := newSketch(minSketchShardWidth, 7, true)
	const n = 3000
	full := map[[sketchDepth]int]int{} // the cells of all rows → IDs that have them
	pairs := [sketchDepth]int{}        // pairs meeting in row d
	rows := make([]map[int]int, sketchDepth)
	for d := range rows {
		rows[d] = map[int]int{}
	}
	for id := range int64(n) {
		idx := s.indices(hashID(id, 7))
		full[idx]++
		for d, i := range idx {
			assert.Equal(t, d, i/s.width, "row %d's cell lies in row %d", d, i/s.width)
			pairs[d] += rows[d][i]
			rows[d][i]++
		}
	}
	met := 0
	for _, c := range full {
		met += c * (c - 1) / 2
	}
	assert.LessOrEqual(t, met, 5, "pairs meeting in every row (0.27 expected)")
	want := n * (n - 1) / 2 / minSketchShardWidth // pairs meeting in one row: about 70,000
	for d, p := range pairs {
		assert.InDelta(t, want, p, float64(want)/20, "row %d", d)
	}
}
