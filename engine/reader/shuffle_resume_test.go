package reader

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recgo/recgo/internal/errs"
)

// A shuffled source resumed by Seek inside a window reads that window again at its next Read, bounded
// as every window is, for that Read's batches. Until session 43 Seek read it before any Read had
// given a bound, as if for batches of one row of the default bound (2^28 values a row: 2^52 for a
// window of 2^24 rows, none in practice), so a resumed window the uninterrupted run refused was
// taken, and its batches failed (or not) by other words. Now both paths fail alike, and both
// deliver alike.
func TestShuffledResumedWindowIsBoundedAsARead(t *testing.T) {
	// rows of one value and one of five; a window of 4 holds 8 values
	path := writeFile(t, "uneven.csv", "label,seq\n1,1\n0,2\n1,3\n0,4|5|6|7|8\n1,9\n0,10\n")
	open := func(t *testing.T) Source {
		inner, err := NewCSV([]string{path}, CSVOptions{Header: true,
			Columns: []Column{{Name: "label", Role: RoleLabel}, {Name: "seq", Role: RoleSequence}}})
		require.NoError(t, err)
		src, err := NewShuffled(inner, 4, 3, 0)
		require.NoError(t, err)
		return src
	}
	// the position after the first batch of 2 (inside window 0, 2 of its rows out), read unbounded
	first := open(t)
	var b Batch
	_, err := first.Read(&b, 2)
	require.NoError(t, err)
	firstIDs := b.Inputs[0].Ints
	at := first.Position()
	require.Equal(t, int64(2), at.Taken)
	require.NoError(t, first.Close())

	for _, c := range []struct {
		name  string
		limit int64
		want  string // the error of both paths; "": both read to the end
	}{
		{"a window past its batches' bound", 3, "shuffle window of 4 rows (its fields bounded at 3 values for each " +
			"batch of 2 rows it holds)"},
		{"a window within its batches' bound", 6, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			read := func(src Source) ([]int64, error) {
				defer src.Close()
				var ids []int64
				for {
					b := Batch{MaxValues: c.limit}
					_, err := src.Read(&b, 2)
					if err != nil {
						return ids, err
					}
					ids = append(ids, b.Inputs[0].Ints...)
				}
			}
			whole, errWhole := read(open(t))
			resumed := open(t)
			require.NoError(t, resumed.Seek(at))
			rest, errResumed := read(resumed)
			if c.want == "" {
				require.ErrorIs(t, errWhole, io.EOF)
				require.ErrorIs(t, errResumed, io.EOF)
				require.Len(t, whole, 10)
				assert.Equal(t, firstIDs, whole[:len(firstIDs)])
				assert.Equal(t, whole[len(firstIDs):], rest, "the resumed source delivers the rest")
				return
			}
			require.ErrorIs(t, errWhole, errs.ErrCapacity)
			require.ErrorIs(t, errResumed, errs.ErrCapacity)
			assert.ErrorContains(t, errWhole, c.want)
			assert.ErrorContains(t, errResumed, c.want)
			assert.Empty(t, rest, "no row of the refused window is handed out")
		})
	}
}

// A position Seek takes inside a window is the source's position until a Read reads the window
// again; a window that no longer holds the rows the position had handed out (the file was cut short)
// is refused by that Read, naming the position.
func TestShuffledResumeChecksTheWindowAtTheRead(t *testing.T) {
	const rows = "label,seq\n1,1\n0,2\n1,3\n0,4\n1,5\n0,6\n1,7\n0,8\n"
	cols := []Column{{Name: "label", Role: RoleLabel}, {Name: "seq", Role: RoleSequence}}
	path := writeFile(t, "rows.csv", rows)
	open := func(t *testing.T) Source {
		inner, err := NewCSV([]string{path}, CSVOptions{Header: true, Columns: cols})
		require.NoError(t, err)
		src, err := NewShuffled(inner, 4, 1, 0)
		require.NoError(t, err)
		return src
	}
	// inside window 1 (rows 5..8), 2 of its rows out
	src := open(t)
	for range 3 {
		_, err := src.Read(&Batch{}, 2)
		require.NoError(t, err)
	}
	at := src.Position()
	require.Equal(t, Position{File: 0, Row: 4, Offset: int64(len("label,seq\n1,1\n0,2\n1,3\n0,4\n")), Global: 4,
		Name: "rows.csv", Shuffle: 4, Seed: 1, Window: 1, Taken: 2}, at)
	require.NoError(t, src.Close())

	for _, c := range []struct {
		name string
		text string // the file when resumed
		want string // the first Read's error; "": it reads the rest
	}{
		{"the same file", rows, ""},
		{"a window short of the rows taken", "label,seq\n1,1\n0,2\n1,3\n0,4\n1,5\n", "its window has only 1 rows"},
		{"a window past the end", "label,seq\n1,1\n0,2\n1,3\n0,4\n", "the window it names is past the end of the data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, []byte(c.text), 0o644))
			again := open(t)
			defer again.Close()
			require.NoError(t, again.Seek(at))
			assert.Equal(t, at, again.Position(), "before a Read, the position is the one sought")
			n, err := again.Read(&Batch{}, 4)
			if c.want == "" {
				require.NoError(t, err)
				assert.Equal(t, 2, n)
				assert.Equal(t, Position{File: 0, Row: 8, Offset: int64(len(rows)), Global: 8, Name: "rows.csv",
					Shuffle: 4, Seed: 1, Window: 2}, again.Position())
				return
			}
			require.ErrorIs(t, err, errs.ErrInvalid)
			assert.ErrorContains(t, err, c.want)
			_, err = again.Read(&Batch{}, 4)
			assert.Error(t, err, "no row of the refused window is handed out")
		})
	}
}
