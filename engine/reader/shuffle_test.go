package reader

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rowsOf reads src to the end in batches of n: per row its id, and its tag (a byte string).
func rowsOf(t *testing.T, src Source, n int) (ids []int64, tags []string) {
	t.Helper()
	for _, b := range readAll(t, src, n) {
		ids = append(ids, b.Inputs[0].Ints...)
		at := 0
		for _, l := range b.Inputs[1].ByteLens {
			tags = append(tags, string(b.Inputs[1].Bytes[at:at+int(l)]))
			at += int(l)
		}
	}
	return ids, tags
}

// TestShuffledDeliversEveryRowOnceAndResumesExactly: every row of a 2-rank sharded CSV exactly once
// per rank, in a seeded order that is not the file's (rows keep their fields together), the same
// for the same seed and another for another; from every batch boundary's position a new source
// delivers exactly the rest.
func TestShuffledDeliversEveryRowOnceAndResumesExactly(t *testing.T) {
	var text strings.Builder
	text.WriteString("id,tag\n")
	for i := range 203 {
		fmt.Fprintf(&text, "%d,t%d|u%d\n", i, i, i%7)
	}
	path := writeFile(t, "rows.csv", text.String())
	cols := []Column{{Name: "id", Role: RoleSparse}, {Name: "tag", Role: RoleSequence, Type: "string"}}
	open := func(rank, world, window int, seed uint64) Source {
		src, err := NewCSV([]string{path}, CSVOptions{Columns: cols, Header: true, Options: Options{Rank: rank, WorldSize: world}})
		require.NoError(t, err)
		sh, err := NewShuffled(src, window, seed, rank)
		require.NoError(t, err)
		return sh
	}
	for _, c := range []struct{ rank, world, window, batch int }{{0, 1, 16, 5}, {1, 2, 7, 3}, {0, 2, 1000, 8}} {
		name := fmt.Sprintf("rank%d_of%d_window%d", c.rank, c.world, c.window)
		ids, tags := rowsOf(t, open(c.rank, c.world, c.window, 9), c.batch)
		var want []int64
		for g := c.rank; g < 203; g += c.world {
			want = append(want, int64(g))
		}
		require.NotEqual(t, want, ids, name)
		require.ElementsMatch(t, want, ids, name)
		for i, id := range ids { // the row's fields stay together
			require.Equal(t, fmt.Sprintf("t%du%d", id, id%7), tags[2*i]+tags[2*i+1], name)
		}
		again, _ := rowsOf(t, open(c.rank, c.world, c.window, 9), c.batch)
		require.Equal(t, ids, again, name)
		other, _ := rowsOf(t, open(c.rank, c.world, c.window, 10), c.batch)
		require.NotEqual(t, ids, other, name)

		src := open(c.rank, c.world, c.window, 9)
		var got []int64
		for {
			pos := src.Position()
			rest := open(c.rank, c.world, c.window, 9)
			require.NoError(t, rest.Seek(pos), name)
			tail, _ := rowsOf(t, rest, c.batch)
			require.True(t, slices.Equal(ids[len(got):], tail), "%s: resumed after %d rows: %v", name, len(got), tail)
			var b Batch
			if _, err := src.Read(&b, c.batch); err != nil {
				break
			}
			got = append(got, b.Inputs[0].Ints...)
		}
		require.Equal(t, ids, got, name)
	}
	// a position of another window or seed, or an unshuffled source's, is refused
	src := open(0, 1, 16, 9)
	var b Batch
	_, err := src.Read(&b, 5)
	require.NoError(t, err)
	require.ErrorContains(t, open(0, 1, 8, 9).Seek(src.Position()), "taken with shuffle window 16 and seed 9")
	require.ErrorContains(t, open(0, 1, 16, 1).Seek(src.Position()), "taken with shuffle window 16 and seed 9")
	_, err = NewShuffled(src, 0, 1, 0)
	require.ErrorContains(t, err, "shuffle window 0 outside")
}

// TestShuffledRanksDrawTheirOwnOrderAndCountSkippedRows: ranks drew the same permutation, so rank 1's
// k-th row was always rank 0's plus one (a data-parallel step paired neighbouring rows); the skipped
// count stood at the window's start until the window ended, and a resumed source counted the
// window's malformed rows twice.
func TestShuffledRanksDrawTheirOwnOrderAndCountSkippedRows(t *testing.T) {
	var text strings.Builder
	text.WriteString("id\n")
	for i := range 120 {
		if i%9 == 4 {
			text.WriteString("bad\n")
		} else {
			fmt.Fprintf(&text, "%d\n", i)
		}
	}
	path := writeFile(t, "rows.csv", text.String())
	open := func(rank, world int) Source {
		src, err := NewCSV([]string{path}, CSVOptions{Columns: []Column{{Name: "id", Role: RoleSparse}}, Header: true,
			Options: Options{Rank: rank, WorldSize: world, SkipBad: true}})
		require.NoError(t, err)
		sh, err := NewShuffled(src, 30, 3, rank)
		require.NoError(t, err)
		return sh
	}
	ids := func(src Source) []int64 {
		var out []int64
		for _, b := range readAll(t, src, 4) {
			out = append(out, b.Inputs[0].Ints...)
		}
		return out
	}
	r0, r1 := ids(open(0, 2)), ids(open(1, 2))
	paired := 0
	for i := range min(len(r0), len(r1)) {
		if r1[i] == r0[i]+1 {
			paired++
		}
	}
	require.Less(t, paired, len(r0)/4, "rank orders: %v / %v", r0, r1)

	src := open(0, 1)
	var b Batch
	_, err := src.Read(&b, 4) // inside the first window of 30 rows, which read past 4 malformed ones (4, 13, 22, 31)
	require.NoError(t, err)
	require.Equal(t, int64(4), src.Position().Skipped)
	again := open(0, 1)
	require.NoError(t, again.Seek(src.Position()))
	require.Equal(t, int64(4), again.Position().Skipped)
	for {
		if _, err := src.Read(&b, 4); err != nil {
			break
		}
	}
	for {
		if _, err := again.Read(&b, 4); err != nil {
			break
		}
	}
	require.Equal(t, int64(13), src.Position().Skipped) // 120 rows, every 9th from row 4
	require.Equal(t, int64(13), again.Position().Skipped)
}
