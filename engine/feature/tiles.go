package feature

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/recgo/recgo/internal/parallel"
)

// forTiles calls body(lo, hi) over [0, n) cut into equal tiles of at least minTile items (a few
// per worker). The calling goroutine and up to Workers()-1 helpers claim tiles from a shared
// counter, and the caller waits only for tiles already claimed: on a busy machine, a helper that
// does not get a CPU in time claims nothing and nobody waits for it (a fixed split into goroutines
// measured several times slower than one thread there). A panic in any tile is re-raised in the
// caller after all claimed tiles end.
func forTiles(n, minTile int, body func(lo, hi int)) {
	if n <= 0 {
		return
	}
	workers := parallel.Workers()
	tiles := min(workers*4, (n+minTile-1)/minTile)
	if tiles <= 1 || workers == 1 {
		body(0, n)
		return
	}
	size := (n + tiles - 1) / tiles
	tiles = (n + size - 1) / size
	var next, left atomic.Int64
	left.Store(int64(tiles))
	done := make(chan struct{})
	var once sync.Once
	var panicked any
	work := func() {
		for {
			t := int(next.Add(1) - 1)
			if t >= tiles {
				return
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						once.Do(func() { panicked = r })
					}
					if left.Add(-1) == 0 {
						close(done)
					}
				}()
				body(t*size, min(n, (t+1)*size))
			}()
		}
	}
	for range min(workers, tiles) - 1 {
		go work()
	}
	work()
	<-done
	if panicked != nil {
		panic(fmt.Sprintf("feature worker: %v", panicked))
	}
}
