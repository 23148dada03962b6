package embedding

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStreamRows: the work covers [0, n) once, in order, in chunks of rowChunk; each row is
// prefetched once, a chunk's rows before its work runs, and the prefetches run up to rowLag chunks
// past the last one (within ahead), no further.
func TestStreamRows(t *testing.T) {
	for _, tc := range []struct{ n, ahead int }{{0, 0}, {0, 5}, {3, 3}, {8, 8}, {9, 9}, {50, 50}, {50, 70}, {17, 100}} {
		t.Run(fmt.Sprintf("n%d_ahead%d", tc.n, tc.ahead), func(t *testing.T) {
			fetched := make([]int, tc.ahead) // times each row was prefetched
			next := 0
			streamRows(tc.n, tc.ahead, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					fetched[i]++
				}
			}, func(lo, hi int) {
				require.Equal(t, next, lo)
				require.Equal(t, min(lo+rowChunk, tc.n), hi)
				for i := lo; i < hi; i++ {
					require.Equal(t, 1, fetched[i], "row %d prefetched before its work", i)
				}
				next = hi
			})
			require.Equal(t, tc.n, next)
			end := 0 // rows a stream of n rows prefetches: its chunks and rowLag more (within ahead)
			if tc.n > 0 {
				end = min(tc.ahead, ((tc.n-1)/rowChunk+1+rowLag)*rowChunk)
			}
			for i, c := range fetched {
				require.Equal(t, map[bool]int{true: 1, false: 0}[i < end], c, "row %d", i)
			}
		})
	}
}
