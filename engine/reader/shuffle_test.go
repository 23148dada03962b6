package reader

import (
	"encoding/json"
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

// seekAndRead seeks src to p and reads a batch of n: the first error, or nil.
func seekAndRead(src Source, p Position, n int) error {
	if err := src.Seek(p); err != nil {
		return err
	}
	_, err := src.Read(&Batch{}, n)
	return err
}

// TestShuffledSkipBadPositionsResumeThroughJSON: a position taken inside a shuffle window counts the
// window's skipped rows but names the window's start (Global), so its Skipped may pass Global; it
// was refused when decoded ("rows skipped of 0 read"). From every batch boundary's position,
// encoded and decoded as a checkpoint carries it, a new source delivers exactly the rest and ends
// with the uninterrupted run's skipped count; a forged skipped count is still refused (by the Read
// that reads its window again, since session 43; by Seek before).
func TestShuffledSkipBadPositionsResumeThroughJSON(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rows        int
		bad         func(i int) bool
		window, bat int
	}{
		{"bad rows at the first window's start", 20, func(i int) bool { return i == 0 || i == 1 || i == 2 }, 10, 4},
		{"bad rows in the first window", 20, func(i int) bool { return i == 3 || i == 5 }, 10, 4},
		{"bad rows in every window", 60, func(i int) bool { return i%4 == 1 }, 7, 3},
		{"a window of bad rows", 40, func(i int) bool { return i < 15 }, 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var text strings.Builder
			text.WriteString("id\n")
			skippedAll := int64(0)
			for i := range tc.rows {
				if tc.bad(i) {
					text.WriteString("bad\n")
					skippedAll++
				} else {
					fmt.Fprintf(&text, "%d\n", i)
				}
			}
			path := writeFile(t, "rows.csv", text.String())
			open := func() Source {
				src, err := NewCSV([]string{path}, CSVOptions{Columns: []Column{{Name: "id", Role: RoleSparse}},
					Header: true, Options: Options{SkipBad: true}})
				require.NoError(t, err)
				sh, err := NewShuffled(src, tc.window, 5, 0)
				require.NoError(t, err)
				return sh
			}
			var all []int64
			var positions []Position
			var at []int // rows delivered at each position
			src := open()
			positions, at = append(positions, src.Position()), append(at, 0)
			var b Batch
			for {
				if _, err := src.Read(&b, tc.bat); err != nil {
					break
				}
				all = append(all, b.Inputs[0].Ints...)
				positions, at = append(positions, src.Position()), append(at, len(all))
			}
			require.Equal(t, skippedAll, src.Position().Skipped)
			require.Len(t, all, tc.rows-int(skippedAll))
			past := 0
			for i, p := range positions {
				if p.Skipped > p.Global {
					past++
				}
				data, err := json.Marshal(p)
				require.NoError(t, err)
				var q Position
				require.NoError(t, json.Unmarshal(data, &q), "position %d: %s", i, data)
				again := open()
				require.NoError(t, again.Seek(q), "position %d: %s", i, data)
				require.Equal(t, p.Skipped, again.Position().Skipped, "position %d", i)
				var rest []int64
				for _, b := range readAll(t, again, tc.bat) {
					rest = append(rest, b.Inputs[0].Ints...)
				}
				require.Equal(t, all[at[i]:], append([]int64{}, rest...), "position %d: %s", i, data)
				require.Equal(t, skippedAll, again.Position().Skipped, "position %d", i)
			}
			require.Positive(t, past, "no position's skipped count passed its Global: the case tests nothing")
			for _, p := range positions {
				if p.Taken == 0 {
					continue
				}
				forged := p
				forged.Skipped = p.Skipped + p.Global + 1 // more than the window's and all rows before it
				data, err := json.Marshal(forged)
				require.NoError(t, err)
				var q Position
				if json.Unmarshal(data, &q) == nil { // Seek takes it; the Read that reads its window again refuses it
					require.ErrorContains(t, seekAndRead(open(), q, tc.bat), "rows skipped", "forged %s", data)
				}
			}
		})
	}
	// outside a window (Taken 0) Skipped past Global is still refused when decoded
	var p Position
	require.ErrorContains(t, json.Unmarshal([]byte(`{"file":0,"row":2,"offset":-1,"global":2,"skipped":3,"shuffle":4,"seed":5,"window":1}`), &p),
		"3 rows skipped of 2")
}
