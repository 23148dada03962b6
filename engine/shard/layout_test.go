package shard

import (
	"fmt"
	"math"
	"testing"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/require"
)

// checkRowRanges: rank r of l holds the IDs [first[r], first[r]+split[r]) in row order, and
// Owner, OwnerRank, OwnRows and Locate agree with that on every rank.
func checkRowRanges(t *testing.T, l *Layout, split []int64) {
	t.Helper()
	var first int64
	for r, n := range split {
		require.Equal(t, n, l.LocalRows(r), "rank %d's rows", r)
		ids := l.LocalIDs(r)
		require.Len(t, ids, int(n))
		for j, id := range ids {
			require.Equal(t, first+int64(j), id, "rank %d row %d", r, j)
		}
		first += n
	}
	require.Equal(t, l.Rows, first)
	all := make([]int64, l.Rows)
	for id := range all {
		all[id] = int64(id)
	}
	for r := range split {
		rows := make([]int64, len(all))
		require.NoError(t, l.Locate(r, all, rows))
		for id, row := range rows {
			o, orow := l.Owner(int64(id), r)
			require.Equal(t, o, l.OwnerRank(int64(id), r))
			if o == r {
				require.Equal(t, orow, row, "id %d on rank %d", id, r)
				require.Equal(t, int64(id), l.LocalIDs(r)[row])
			} else {
				require.Equal(t, int64(-1), row, "id %d on rank %d (owner %d)", id, r, o)
			}
		}
		mine := l.LocalIDs(r)
		got := make([]int64, len(mine))
		require.NoError(t, l.OwnRows(r, mine, got))
		for j := range got {
			require.Equal(t, int64(j), got[j])
		}
		if len(mine) < len(all) { // an ID of another rank is refused, naming its owner
			other := int64(0)
			if len(mine) > 0 && mine[0] == 0 {
				other = mine[len(mine)-1] + 1
			}
			require.ErrorContains(t, l.OwnRows(r, []int64{other}, make([]int64, 1)), fmt.Sprintf("id %d reached rank %d", other, r))
		}
	}
}

func TestRowWiseSplits(t *testing.T) {
	cases := []struct {
		name   string
		rows   int64
		split  []int64
		uneven bool
	}{
		{"torchrec 15/5", 20, []int64{15, 5}, true},
		{"first rank empty", 20, []int64{0, 20}, true},
		{"last rank empty", 20, []int64{20, 0}, true},
		{"middle ranks empty", 9, []int64{4, 0, 0, 5}, true},
		{"one row each and the rest", 7, []int64{1, 1, 5}, true},
		{"one rank", 11, []int64{11}, false},
		{"the even split given", 10, []int64{4, 4, 2}, false}, // ⌈10/3⌉ = 4: recgo's own, kept on its fast path
		{"even but not recgo's", 9, []int64{3, 3, 3}, false},
		{"fewer rows than ranks", 2, []int64{0, 1, 0, 1}, true},
		{"even with empty tail", 5, []int64{2, 2, 1, 0}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := NewRowWiseLayout("t", c.rows, 3, len(c.split), c.split)
			require.NoError(t, err)
			require.Equal(t, RowWise, l.Kind)
			require.Equal(t, c.uneven, l.uneven(), "uneven layout (binary search) vs even (division)")
			checkRowRanges(t, l, c.split)
		})
	}
	t.Run("nil is the even split", func(t *testing.T) {
		l, err := NewRowWiseLayout("t", 10, 3, 3, nil)
		require.NoError(t, err)
		require.False(t, l.uneven())
		checkRowRanges(t, l, []int64{4, 4, 2})
	})
}

func TestRowWiseSplitsRefused(t *testing.T) {
	cases := []struct {
		name  string
		rows  int64
		world int
		split []int64
		want  string
	}{
		{"too few ranks", 10, 3, []int64{5, 5}, `table "emb": a row split of 2 ranks for a world of 3`},
		{"too many ranks", 10, 1, []int64{5, 5}, `table "emb": a row split of 2 ranks for a world of 1`},
		{"negative", 10, 2, []int64{-2, 12}, `table "emb": the row split gives rank 0 -2 rows`},
		{"gap at the end", 10, 2, []int64{4, 4}, `table "emb": the row split covers 8 rows, the table has 10`},
		{"overlap", 10, 2, []int64{6, 6}, `table "emb": the row split's ranks 0..1 hold more than the table's 10 rows`},
		{"all zeros", 10, 2, []int64{0, 0}, `table "emb": the row split covers 0 rows, the table has 10`},
		{"overflowing sum", 10, 3, []int64{5, math.MaxInt64, math.MaxInt64}, `table "emb": the row split's ranks 0..1 hold more`},
		{"bad table first", 0, 2, []int64{0, 0}, `table "emb": num_embeddings 0 must be > 0`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewRowWiseLayout("emb", c.rows, 3, c.world, c.split)
			require.ErrorIs(t, err, errs.ErrInvalid)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// TestUnevenRowWiseStepsMatchOneCollection: training steps over row-wise tables split unevenly
// (ranks holding none included) equal the one-process collection's, on both exchanges.
func TestUnevenRowWiseStepsMatchOneCollection(t *testing.T) {
	kinds, rows, dims := []Kind{RowWise, RowWise, RowWise, DataParallel}, []int64{50, 30, 41, 7}, []int{4, 8, 3, 5}
	splits := [][]int64{{0, 40, 3, 7}, {30, 0, 0, 0}, {10, 10, 0, 21}, nil}
	opt := embedding.OptimizerConfig{Kind: embedding.OptRowwiseAdagrad, LR: 0.1, Eps: 1e-8}
	for _, mode := range []Mode{Flat, Hierarchical} {
		for _, ret := range []Return{ReturnRows, ReturnPooled} {
			t.Run(fmt.Sprintf("2x2/%s/%s", mode, ret), func(t *testing.T) {
				w := newSplitWorld(t, 2, 2, mode, kinds, rows, dims, opt, splits)
				for r, c := range w.ranks {
					require.NoError(t, c.SetReturns([]Return{ret, ret, ret, ret}))
					require.Equal(t, splits[0][r], c.Layouts[0].LocalRows(r))
				}
				checkSteps(t, w, kinds, rows, ret == ReturnPooled)
			})
		}
	}
}

// TestSplitsTellCollectionsApart: collections that differ only in a table's row split have other
// step idents and partitioners (a batch partitioned for one is not taken by the other), and an
// explicitly even split is the default layout.
func TestSplitsTellCollectionsApart(t *testing.T) {
	topo, err := NewTopology(1, 2, 2)
	require.NoError(t, err)
	feats := []embedding.Feature{{Name: "f", Table: 0}}
	build := func(split []int64) *Collection {
		l, err := NewRowWiseLayout("t", 10, 2, 2, split)
		require.NoError(t, err)
		c, err := NewCollection([]*Layout{l}, topo, 0, Flat, embedding.OptimizerConfig{Kind: embedding.OptSGD, LR: 0.1}, feats)
		require.NoError(t, err)
		return c
	}
	even, given, uneven := build(nil), build([]int64{5, 5}), build([]int64{7, 3})
	require.Equal(t, even.ident, given.ident)
	require.Equal(t, even.Partitioner().String(), given.Partitioner().String())
	require.NotEqual(t, even.ident, uneven.ident)
	require.NotEqual(t, even.Partitioner().String(), uneven.Partitioner().String())
	require.Contains(t, uneven.Partitioner().String(), "split [7 3]")
}

// BenchmarkRowWiseOwner is a requester's owner lookup per ID of a row-wise table over 64 ranks:
// the even split's division next to an uneven split's binary search.
func BenchmarkRowWiseOwner(b *testing.B) {
	const rows, world = 1 << 20, 64
	uneven := make([]int64, world)
	for r := range uneven {
		uneven[r] = rows / world
	}
	uneven[0], uneven[world-1] = uneven[0]+1000, uneven[world-1]-1000
	for name, split := range map[string][]int64{"even": nil, "uneven": uneven} {
		l, err := NewRowWiseLayout("t", rows, 4, world, split)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			var sink int
			for i := 0; b.Loop(); i++ {
				sink += l.OwnerRank(int64(i*7919)&(rows-1), 0)
			}
			_ = sink
		})
	}
}
