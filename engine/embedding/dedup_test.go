package embedding

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIDIndexMatchesAMap(t *testing.T) {
	// Passes of very different sizes on one index: it must grow mid-pass, shrink between passes and
	// come back empty each time.
	r := rand.New(rand.NewPCG(5, 6))
	var x idIndex
	for _, tc := range []struct{ n, span int }{{10, 5}, {5000, 100_000}, {3, 1 << 40}, {20_000, 3000}, {0, 1}, {70_000, 1 << 62}} {
		x.reset(tc.n)
		want := map[int64]int32{}
		var uniq []int64
		for i := 0; i < tc.n; i++ {
			id := r.Int64N(int64(tc.span)) - int64(tc.span/2) // negative IDs too
			u, fresh := x.find(id, int32(len(uniq)))
			if w, ok := want[id]; ok {
				require.False(t, fresh)
				require.Equal(t, w, u)
				continue
			}
			require.True(t, fresh)
			require.Equal(t, int32(len(uniq)), u)
			want[id] = u
			uniq = append(uniq, id)
			if 2*len(uniq) > len(x.slots) {
				x.grow(uniq)
			}
		}
		x.lastDistinct = len(uniq)
		x.clear()
		for _, s := range x.slots {
			require.Zero(t, s.next, "slot left filled after clear")
		}
	}
}
