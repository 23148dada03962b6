package dynamic

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzResolveMatchesReference replays a fuzzed sequence of batches on a table and on the brute-force
// model, under a fuzzed configuration, and requires identical rows and a consistent final state.
func FuzzResolveMatchesReference(f *testing.F) {
	f.Add(uint8(4), uint8(1), uint8(0), uint8(0), uint64(1))
	f.Add(uint8(9), uint8(3), uint8(1), uint8(5), uint64(77))
	f.Add(uint8(1), uint8(2), uint8(1), uint8(1), uint64(5))
	f.Fuzz(func(t *testing.T, rows, minCount, policy, maxAge uint8, seed uint64) {
		c := Config{Name: "fz", Dim: 1, MaxRows: 1 + int(rows%40), MinCount: int(minCount % 4),
			Policy: Policy(policy % 2), MaxAge: int(maxAge % 10), EvictFrac: 0.2, SketchWidth: 1 << 20}
		start := int64(seed%2) * (1<<32 - 30) // odd seeds: the clock passes 2^32 half way
		checkAgainstReference(t, c, rand.New(rand.NewPCG(seed, 11)), 60, start)
	})
}

// FuzzImport feeds arbitrary snapshots to Import: it must reject or accept them without panicking,
// and an accepted one must export back unchanged and keep the map and the rows consistent.
func FuzzImport(f *testing.F) {
	f.Add([]byte{3, 1, 0, 5, 0, 2, 0, 0, 0, 7, 1, 2})
	f.Add([]byte{2, 0, 9, 1, 1, 0, 0, 0})
	f.Add([]byte{})
	c := Config{Name: "fz", Dim: 1, StateWidth: 1, MaxRows: 8}
	tab, err := New(c)
	require.NoError(f, err)
	f.Cleanup(func() { _ = tab.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int64 {
			if len(data) == 0 {
				return 0
			}
			v := int64(int8(data[0]))
			data = data[1:]
			return v
		}
		s := &Snapshot{Dim: 1, StateWidth: 1, MaxRows: 8, SketchWidth: tab.cfg.SketchWidth, Step: next()}
		hw := int(next())
		if hw < 0 || hw > 9 {
			hw = 9 // one past the bound: must be rejected
		}
		for r := range hw {
			s.IDs = append(s.IDs, next())
			s.Counts = append(s.Counts, next())
			s.LastSeen = append(s.LastSeen, next())
			s.Weights = append(s.Weights, float32(r))
			s.State = append(s.State, float32(-r))
		}
		for n := next(); n > 0 && len(data) > 0; n-- {
			s.Free = append(s.Free, next())
		}
		var buf [8]byte
		copy(buf[:], data)
		s.Admitted = int64(binary.LittleEndian.Uint16(buf[:]))
		if err := tab.Import(s); err != nil {
			return
		}
		back, err := tab.Export()
		require.NoError(t, err)
		require.Equal(t, len(s.IDs), back.HighWater())
		if len(s.IDs) > 0 {
			require.Equal(t, s.IDs, back.IDs)
			require.Equal(t, s.Counts, back.Counts)
			require.Equal(t, s.LastSeen, back.LastSeen)
			require.Equal(t, s.Weights, back.Weights)
			require.Equal(t, s.State, back.State)
		}
		for r, id := range s.IDs {
			rows := make([]int64, 1)
			require.NoError(t, tab.Resolve([]int64{id}, rows, false))
			if s.Counts[r] > 0 {
				require.Equal(t, int64(r), rows[0])
			}
		}
	})
}
