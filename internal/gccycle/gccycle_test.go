package gccycle

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEachRunsAfterEveryCollection: each registered function runs once per cycle, in order.
func TestEachRunsAfterEveryCollection(t *testing.T) {
	var a, b atomic.Int64
	var order atomic.Int64 // set to 1 by a, checked by b
	Each(func() { a.Add(1); order.Store(1) })
	Each(func() {
		if order.Load() == 1 {
			b.Add(1)
		}
	})
	for cycle := int64(1); cycle <= 3; cycle++ {
		runtime.GC()
		require.Eventually(t, func() bool { return a.Load() >= cycle && b.Load() >= cycle },
			5*time.Second, time.Millisecond, "cycle %d", cycle)
	}
}
