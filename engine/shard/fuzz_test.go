package shard

import (
	"encoding/binary"
	"testing"

	dyn "github.com/recgo/recgo/engine/dynamic"
	"github.com/stretchr/testify/require"
)

func int64s(b []byte) []int64 {
	out := make([]int64, len(b)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// FuzzSplitCounts: arbitrary counts either cut the values exactly or are refused, never panic.
func FuzzSplitCounts(f *testing.F) {
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, uint8(2), uint8(1), uint8(3))
	f.Fuzz(func(t *testing.T, raw []byte, ranks, tables, nvals uint8) {
		counts := int64s(raw)
		values := make([]int64, nvals)
		out, err := SplitCounts(values, counts, int(ranks%5), int(tables%5))
		if err != nil {
			return
		}
		n := 0
		for _, r := range out {
			for _, ids := range r {
				n += len(ids)
			}
		}
		require.Equal(t, int(nvals), n)
	})
}

// FuzzExchangeFeed: a peer's announced block metadata and the IDs and bag structure it sends
// (owner pooling included), to a fixed or a dynamic-ID table, are checked, never trusted into a
// panic or an out-of-range read.
func FuzzExchangeFeed(f *testing.F) {
	// rank 0's view: its own block (1 ID, rows), then rank 1's (2 IDs, pooled: 2 bags, 3 values)
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
		[]byte{4, 6, 8, 2, 1, 0, 1, 0}, false)
	f.Fuzz(func(t *testing.T, rawCounts, rawIDs []byte, dynamic bool) {
		topo, _ := NewTopology(1, 2, 2)
		l, _ := NewLayout("t", 20, 2, Hash, 0, 2)
		if dynamic { // 8-byte IDs of any value, resolved by the owner's shard
			b, err := dyn.NewBuilder(dyn.Config{MaxRows: 8})
			require.NoError(t, err)
			l, _ = NewDynamicLayout("t", 2, Hash, 0, 2, b)
		}
		x := NewExchange([]*Layout{l}, topo, 0, Flat, nopStore{})
		bags := []Bags{{Inv: []int32{0, 1, 2, 1}, Bounds: []int64{0, 2, 4}}}
		require.NoError(t, x.ForwardBags([][]int64{{1, 2, 3}}, bags, []Return{ReturnPooled}))
		op, err := x.Next()
		require.NoError(t, err)
		counts := int64s(rawCounts)
		if err := x.Feed(counts, nil, nil); err != nil {
			return
		}
		if op, err = x.Next(); err != nil || op == nil {
			return
		}
		if err := x.Feed(nil, nil, rawIDs); err != nil { // wrong sizes, indices or IDs are errors
			return
		}
		if op, err = x.Next(); err != nil || op == nil { // the lookup runs; then the vectors go back
			return
		}
		_ = x.Feed(nil, make([]float32, op.RecvLen()), nil)
	})
}

// FuzzRowSplit: an arbitrary row split is refused or gives a layout in which every ID has one
// owner, at the row its owner's LocalIDs give it, the owners' ranges tiling the rows in rank order.
func FuzzRowSplit(f *testing.F) {
	f.Add([]byte{15, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}, uint8(20))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(3))
	f.Fuzz(func(t *testing.T, raw []byte, rows uint8) {
		split := int64s(raw)
		if len(split) == 0 || len(split) > 64 {
			return
		}
		l, err := NewRowWiseLayout("t", int64(rows), 2, len(split), split)
		if err != nil {
			return
		}
		var next int64
		for r := range split {
			for j, id := range l.LocalIDs(r) {
				require.Equal(t, next, id)
				o, row := l.Owner(id, 0)
				require.Equal(t, r, o)
				require.Equal(t, int64(j), row)
				next++
			}
		}
		require.Equal(t, int64(rows), next)
	})
}
