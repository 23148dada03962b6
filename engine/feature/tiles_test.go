package feature

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestForTilesCoversEachIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 7, 100, 1000, 12345} {
		for _, minTile := range []int{1, 3, 64, 100000} {
			hits := make([]atomic.Int32, n)
			forTiles(n, minTile, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					hits[i].Add(1)
				}
			})
			for i := range hits {
				assert.Equal(t, int32(1), hits[i].Load(), "n=%d minTile=%d i=%d", n, minTile, i)
			}
		}
	}
}

func TestForTilesReraisesPanics(t *testing.T) {
	assert.Panics(t, func() {
		forTiles(1000, 10, func(lo, hi int) {
			if lo <= 500 && 500 < hi {
				panic("boom")
			}
		})
	})
}
