package dynamic

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// smallCheckpoint is a trained table's encoded checkpoint (with a min-count sketch when sketch).
func smallCheckpoint(t testing.TB, sketch bool) (Config, []byte, *Snapshot) {
	c := Config{Name: "ck", Dim: 2, StateWidth: 1, MaxRows: 6, InitLow: -1, InitHigh: 1, Seed: 3}
	if sketch {
		c.MinCount = 2
	}
	tab, err := New(c)
	require.NoError(t, err)
	defer tab.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		ids := []int64{rng.Int64N(9), 10 + rng.Int64N(9)}
		require.NoError(t, tab.Resolve(ids, make([]int64, 2), true))
	}
	s, err := tab.Export()
	require.NoError(t, err)
	require.NotZero(t, s.HighWater())
	return c, (&Checkpoint{Snapshot: s, OptimizerStep: 8}).Encode(), s
}

func TestCheckpointFileRoundTrip(t *testing.T) {
	for _, sketch := range []bool{false, true} {
		c, data, s := smallCheckpoint(t, sketch)
		got, err := DecodeCheckpoint(data)
		require.NoError(t, err)
		require.Equal(t, s, got.Snapshot)
		require.Equal(t, int64(8), got.OptimizerStep)
		require.Equal(t, data, got.Encode(), "the encoding is canonical")
		tab := newTable(t, c)
		require.NoError(t, tab.Import(got.Snapshot))
		back, err := tab.Export()
		require.NoError(t, err)
		require.Equal(t, s, back)
	}
}

// TestCheckpointFileEveryBitFlipAndTruncationIsDetected flips every bit of small checkpoints (with and
// without a sketch) and cuts them at every length: each must fail to decode with an I/O error.
func TestCheckpointFileEveryBitFlipAndTruncationIsDetected(t *testing.T) {
	for _, sketch := range []bool{false, true} {
		_, data, _ := smallCheckpoint(t, sketch)
		for pos := range data {
			for bit := range 8 {
				// The sketch section is large and uniform: its middle is covered by a sample.
				if sketch && pos > 400 && pos < len(data)-600 && (pos*8+bit)%61 != 0 {
					continue
				}
				b := append([]byte(nil), data...)
				b[pos] ^= 1 << bit
				_, err := DecodeCheckpoint(b)
				require.Error(t, err, "flip of bit %d at byte %d went undetected", bit, pos)
				require.True(t, errors.Is(err, errs.ErrIO), "%v", err)
			}
		}
		for n := 0; n < len(data); n += 1 + n/64 {
			_, err := DecodeCheckpoint(data[:n])
			require.Error(t, err, "truncation to %d bytes", n)
			require.True(t, errors.Is(err, errs.ErrIO), "%v", err)
		}
	}
}

func TestSaveLoadHoldsOnlyTheRowsInUse(t *testing.T) {
	c := Config{Name: "big", Dim: 16, StateWidth: 32, MaxRows: 2_000_000, InitLow: -1, InitHigh: 1}
	a := newTable(t, c)
	require.NoError(t, a.Resolve([]int64{5, 1 << 40, -7}, make([]int64, 3), true))
	path := filepath.Join(t.TempDir(), "big.ck")
	require.NoError(t, a.Save(path, 42))
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Less(t, st.Size(), int64(4096), "three rows, not two million")
	b := newTable(t, c)
	step, err := b.Load(path)
	require.NoError(t, err)
	require.Equal(t, int64(42), step)
	sa, _ := a.Export()
	sb, _ := b.Export()
	require.Equal(t, sa, sb)

	// A damaged file names itself and the part, and leaves the table as it was.
	data, _ := os.ReadFile(path)
	data[len(data)-10] ^= 4
	require.NoError(t, os.WriteFile(path, data, 0o600))
	_, err = b.Load(path)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "checksum mismatch in section")
	sb2, _ := b.Export()
	require.Equal(t, sa, sb2)
	_, err = b.Load(filepath.Join(t.TempDir(), "missing"))
	require.True(t, errors.Is(err, errs.ErrIO), "%v", err)

	other := newTable(t, Config{Name: "other", Dim: 8, StateWidth: 32, MaxRows: 2_000_000})
	require.NoError(t, a.Save(path, 1))
	_, err = other.Load(path)
	require.ErrorContains(t, err, "does not match the table's")
}

// FuzzDecodeCheckpoint feeds arbitrary bytes (seeded with valid and damaged checkpoints) to the
// reader: it must never panic; what it accepts must re-encode to the same bytes, and importing it
// must either fail cleanly or round-trip.
func FuzzDecodeCheckpoint(f *testing.F) {
	c, data, _ := smallCheckpoint(f, false)
	f.Add(data)
	f.Add(data[:len(data)-3])
	flipped := append([]byte(nil), data...)
	flipped[20] ^= 1
	f.Add(flipped)
	f.Add([]byte(fileMagic))
	// each version's header: 3 (of either indexing), 2 (indexing unmarked), 1 (seed unknown too); on
	// the table without a sketch (16 KiB of sketch made each interesting input a minute's minimizing)
	_, _, s := smallCheckpoint(f, false)
	for _, v := range []struct {
		seedKnown bool
		indexing  SketchIndexing
	}{{true, SketchV2}, {true, SketchV1}, {true, SketchUnmarked}, {false, SketchUnmarked}} {
		old := *s
		old.SeedKnown, old.SketchIndexing = v.seedKnown, v.indexing
		f.Add((&Checkpoint{Snapshot: &old, OptimizerStep: 3}).Encode())
	}
	tab, err := New(c)
	require.NoError(f, err)
	f.Cleanup(func() { _ = tab.Close() })
	f.Fuzz(func(t *testing.T, b []byte) {
		ck, err := DecodeCheckpoint(b)
		if err != nil {
			require.True(t, errors.Is(err, errs.ErrIO), "%v", err)
			return
		}
		require.Equal(t, b, ck.Encode())
		if err := tab.Import(ck.Snapshot); err != nil {
			require.True(t, errors.Is(err, errs.ErrInvalid), "%v", err)
			return
		}
		back, err := tab.Export()
		require.NoError(t, err)
		require.Equal(t, ck.Snapshot.IDs, back.IDs)
		require.Equal(t, ck.Snapshot.Weights, back.Weights)
	})
}
