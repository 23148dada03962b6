package main

import "github.com/recgo/recgo/internal/parallel"

// panicInWorker panics inside a parallel worker, which parallel.For re-raises in the caller.
func panicInWorker() error {
	parallel.ForEach(64, 1, func(i int) {
		if i == 33 {
			var xs []int
			_ = xs[i] // index out of range
		}
	})
	return nil
}
