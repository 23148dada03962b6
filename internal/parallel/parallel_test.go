package parallel

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestForCoversEveryIndexOnce(t *testing.T) {
	cases := []struct{ n, minChunk int }{{0, 1}, {1, 1}, {7, 1}, {1000, 3}, {1000, 5000}, {10, 0}, {12345, 64}, {100, 100000}}
	for _, c := range cases {
		hits := make([]int32, c.n)
		For(c.n, c.minChunk, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				atomic.AddInt32(&hits[i], 1)
			}
		})
		for i, h := range hits {
			assert.EqualValues(t, 1, h, "n=%d index %d", c.n, i)
		}
	}
}

func TestForRepanicsInCaller(t *testing.T) {
	assert.Panics(t, func() {
		ForEach(100, 1, func(i int) {
			if i == 57 {
				panic("boom")
			}
		})
	})
}
