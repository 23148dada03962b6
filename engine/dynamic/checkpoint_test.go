package dynamic

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// trainSteps resolves random batches and scribbles on the resolved rows' weights and state, as an
// optimizer would, so that checkpoints have something to carry.
func trainSteps(t *testing.T, tab *Table, rng *rand.Rand, steps int) {
	c := tab.Config()
	for range steps {
		seen := map[int64]bool{}
		var ids []int64
		for range 12 {
			id := int64(rng.ExpFloat64() * 40)
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		rows := resolve(t, tab, true, ids...)
		for _, r := range rows {
			if r < 0 {
				continue
			}
			for j := range c.Dim {
				tab.Weights()[int(r)*c.Stride+j] += 0.01 * float32(j+1)
			}
			for j := range c.StateWidth {
				tab.State()[int(r)*c.StateWidth+j] += 1
			}
		}
	}
}

func TestCheckpointRoundTripResumesIdentically(t *testing.T) {
	cases := []Config{
		{Name: "lru-admit", Dim: 3, Stride: 4, StateWidth: 3, MaxRows: 24, MinCount: 2, InitLow: -1, InitHigh: 1},
		{Name: "lfu-age", Dim: 2, StateWidth: 4, MaxRows: 16, Policy: LFU, MaxAge: 8, InitHigh: 0.5},
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			a := newTable(t, c)
			trainSteps(t, a, rand.New(rand.NewPCG(3, 4)), 40)
			snap, err := a.Export()
			require.NoError(t, err)
			st, _ := a.Stats()
			require.Positive(t, st.Evicted, "the run must exercise eviction")

			b := newTable(t, c)
			trainSteps(t, b, rand.New(rand.NewPCG(5, 6)), 7) // state to overwrite
			require.NoError(t, b.Import(snap))
			again, err := b.Export()
			require.NoError(t, err)
			assert.Equal(t, snap, again, "export → import → export is bit-exact")

			// Both continue on the same batches and stay identical.
			trainSteps(t, a, rand.New(rand.NewPCG(7, 8)), 30)
			trainSteps(t, b, rand.New(rand.NewPCG(7, 8)), 30)
			sa, err := a.Export()
			require.NoError(t, err)
			sb, err := b.Export()
			require.NoError(t, err)
			assert.Equal(t, sa, sb, "training resumes identically")
		})
	}
}

// TestRollbackForgetsKeptCandidates imports an earlier snapshot into the table that went on from it
// (a rollback). The LRU candidates its later eviction pass kept describe the later state: there, ID 1
// had just been seen, so it was not among them; after the rollback it is again the stalest row and
// must be the one evicted, exactly as in a fresh table that imported the same snapshot.
func TestRollbackForgetsKeptCandidates(t *testing.T) {
	c := Config{Name: "lru", Dim: 2, MaxRows: 8, EvictFrac: 0.125} // one row per pass, 3 kept
	a := newTable(t, c)
	for id := int64(1); id <= 8; id++ {
		resolve(t, a, true, id) // ID i has row i-1, last seen at step i
	}
	snap, err := a.Export()
	require.NoError(t, err)
	resolve(t, a, true, 1, 100) // sees ID 1, evicts ID 2, keeps IDs 3, 4, 5 as candidates
	require.NoError(t, a.Import(snap))
	b := newTable(t, c)
	require.NoError(t, b.Import(snap))

	require.Equal(t, resolve(t, b, true, 200), resolve(t, a, true, 200))
	require.Equal(t, []int64{-1}, resolve(t, a, false, 1), "ID 1, the stalest after the rollback, is evicted")
	sa, err := a.Export()
	require.NoError(t, err)
	sb, err := b.Export()
	require.NoError(t, err)
	require.Equal(t, sb, sa)
}

func TestImportRejectsBadSnapshots(t *testing.T) {
	c := Config{Name: "t", Dim: 2, StateWidth: 2, MaxRows: 64, MinCount: 2, MaxAge: 3}
	src := newTable(t, c)
	trainSteps(t, src, rand.New(rand.NewPCG(1, 2)), 30)
	good, err := src.Export()
	require.NoError(t, err)
	require.NotEmpty(t, good.Free, "the snapshot has a free list to corrupt")
	usedRow := -1
	for r, n := range good.Counts {
		if n > 0 {
			usedRow = r
			break
		}
	}
	require.GreaterOrEqual(t, usedRow, 0)
	clone := func() *Snapshot {
		s := *good
		s.IDs = append([]int64(nil), good.IDs...)
		s.Counts = append([]int64(nil), good.Counts...)
		s.LastSeen = append([]int64(nil), good.LastSeen...)
		s.Free = append([]int64(nil), good.Free...)
		s.Sketch = append([]uint8(nil), good.Sketch...)
		s.SketchAdds = append([]int64(nil), good.SketchAdds...)
		return &s
	}
	cases := []struct {
		name string
		edit func(s *Snapshot)
		msg  string
	}{
		{"other dim", func(s *Snapshot) { s.Dim = 3 }, "does not match"},
		{"other bound", func(s *Snapshot) { s.MaxRows = 32 }, "does not match"},
		{"other state width", func(s *Snapshot) { s.StateWidth = 0 }, "does not match"},
		{"short counts", func(s *Snapshot) { s.Counts = s.Counts[1:] }, "counts"},
		{"short weights", func(s *Snapshot) { s.Weights = s.Weights[1:] }, "weights"},
		{"negative step", func(s *Snapshot) { s.Step = -1 }, "step"},
		{"free out of range", func(s *Snapshot) { s.Free[0] = 99 }, "free list entry"},
		{"free repeated", func(s *Snapshot) { s.Free = append(s.Free, s.Free[0]) }, "free list"},
		{"free row with id", func(s *Snapshot) { s.IDs[s.Free[0]] = 5 }, "free row"},
		{"zero count in use", func(s *Snapshot) { s.Counts[usedRow] = 0 }, "row"},
		{"last after step", func(s *Snapshot) { s.LastSeen[usedRow] = s.Step + 1 }, "last step"},
		{"last 2^32 steps before", func(s *Snapshot) { s.Step += 1 << 32 }, "more than 2^32 - 1 steps before"},
		{"step past the clock's range", func(s *Snapshot) { s.Step = maxStep + 1 }, "out of range [0, 4611686018427387904]"},
		{"duplicate id", func(s *Snapshot) {
			for r := range s.IDs {
				if r != usedRow && s.Counts[r] > 0 {
					s.IDs[r] = s.IDs[usedRow]
					return
				}
			}
		}, "more than one row"},
		{"sketch shape", func(s *Snapshot) { s.Sketch = s.Sketch[:10] }, "sketch"},
		{"sketch missing", func(s *Snapshot) { s.Sketch = nil }, "sketch"},
		{"sketch adds", func(s *Snapshot) { s.SketchAdds[3] = -1 }, "sketch addition"},
		{"other seed", func(s *Snapshot) { s.Seed = 12345 }, "hashed with seed 12345, the table's seed is 0"},
	}
	dst := newTable(t, c)
	before, err := dst.Export()
	require.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := clone()
			tc.edit(s)
			checked := dst.Check(s)
			err := dst.Import(s)
			require.Error(t, err)
			assert.ErrorIs(t, err, errs.ErrInvalid)
			assert.Contains(t, err.Error(), tc.msg)
			assert.Equal(t, err, checked, "Check refuses what Import refuses, with its error")
			after, err := dst.Export()
			require.NoError(t, err)
			assert.Equal(t, before, after, "a rejected import leaves the table unchanged")
		})
	}
	require.NoError(t, dst.Check(clone()), "the unedited snapshot passes the check")
	after, err := dst.Export()
	require.NoError(t, err)
	assert.Equal(t, before, after, "a check changes nothing")
	require.NoError(t, dst.Import(clone()), "the unedited snapshot loads")

	noSketch := newTable(t, Config{Name: "t", Dim: 2, StateWidth: 2, MaxRows: 64, MaxAge: 3})
	err = noSketch.Import(clone())
	assert.ErrorContains(t, err, "min_count differs")
}

// TestImportOfAnotherSeed: the admission sketch's counters sit where the saved table's seed hashed
// the pending IDs, so a checkpoint with a sketch loads only into a table of the same seed (it loaded
// into any, and its counts then counted for other IDs: a pending ID seen twice of min_count 3 was not
// admitted at its third sighting). Without a sketch nothing depends on the seed; a checkpoint from
// before the seed was saved (SeedKnown false, a version-1 file) loads as before.
// A table imported at the clock's last step refuses to step on (a step near 2^63 imported, the
// clock wrapped to negative steps and the table's own checkpoint was refused).
func TestClockStopsAtItsLastStep(t *testing.T) {
	tab := newTable(t, Config{Name: "t", Dim: 2, StateWidth: 0, MaxRows: 8, MinCount: 1})
	s, err := tab.Export()
	require.NoError(t, err)
	s.Step = maxStep - 1
	require.NoError(t, tab.Import(s))
	require.NoError(t, tab.Advance())
	assert.ErrorContains(t, tab.Advance(), "its clock is at 4611686018427387904 steps, the most it counts")
	back, err := tab.Export()
	require.NoError(t, err)
	assert.Equal(t, int64(maxStep), back.Step)
	require.NoError(t, tab.Import(back))
}

func TestImportOfAnotherSeed(t *testing.T) {
	cases := []struct {
		name         string
		minCount     int
		savedSeed    uint64
		tableSeed    uint64
		unknown      bool // a checkpoint written before the seed was saved
		wantErr      string
		wantAdmitted int // of the 60 pending IDs, at their third sighting
	}{
		{name: "same seed", minCount: 3, savedSeed: 1, tableSeed: 1, wantAdmitted: 60},
		{name: "other seed", minCount: 3, savedSeed: 1, tableSeed: 12345,
			wantErr: "admission sketch was hashed with seed 1, the table's seed is 12345"},
		{name: "seed unknown", minCount: 3, savedSeed: 1, tableSeed: 1, unknown: true, wantAdmitted: 60},
		{name: "other seed, seed unknown", minCount: 3, savedSeed: 1, tableSeed: 12345, unknown: true, wantAdmitted: -1},
		{name: "other seed, no sketch", minCount: 1, savedSeed: 1, tableSeed: 12345, wantAdmitted: 60},
	}
	ids := make([]int64, 60)
	for i := range ids {
		ids[i] = int64(100 + i)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Name: "t", Dim: 2, MaxRows: 200, MinCount: tc.minCount, Seed: tc.savedSeed}
			src := newTable(t, cfg)
			if tc.unknown { // a version-1 file's sketch was placed by the indexing of its time
				withIndexing(src, SketchV1)
			}
			for range 2 {
				resolve(t, src, true, ids...)
			}
			snap, err := src.Export()
			require.NoError(t, err)
			require.True(t, snap.SeedKnown)
			require.Equal(t, tc.savedSeed, snap.Seed)
			if tc.unknown { // as a version-1 file decodes: the canonical encoding keeps it version 1
				snap.SeedKnown, snap.Seed, snap.SketchIndexing = false, 0, SketchUnmarked
				ck, err := DecodeCheckpoint((&Checkpoint{Snapshot: snap}).Encode())
				require.NoError(t, err)
				require.False(t, ck.Snapshot.SeedKnown)
				require.Equal(t, snap.Counts, ck.Snapshot.Counts)
				require.Equal(t, snap.Sketch, ck.Snapshot.Sketch)
				snap = ck.Snapshot
			}
			cfg.Seed = tc.tableSeed
			dst := newTable(t, cfg)
			before, err := dst.Export()
			require.NoError(t, err)
			err = dst.Import(snap)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, errs.ErrInvalid)
				require.ErrorContains(t, err, tc.wantErr)
				after, err := dst.Export()
				require.NoError(t, err)
				assert.Equal(t, before, after, "a refused import leaves the table unchanged")
				return
			}
			require.NoError(t, err)
			admitted := 0
			for _, r := range resolve(t, dst, true, ids...) {
				if r >= 0 {
					admitted++
				}
			}
			if tc.wantAdmitted >= 0 { // unknown: loaded as before, its counts where the other seed put them
				assert.Equal(t, tc.wantAdmitted, admitted)
			}
		})
	}
}
