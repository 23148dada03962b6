package embedding

import "github.com/recgo/recgo/kernels"

// sgdPartMin is the fewest lookups a part of a split linear pass gets (below it the goroutine
// start-up outweighs the work).
const sgdPartMin = 4096

// scaledAdder applies dst[row·stride : +dim] += alpha · src[off : +dim] for queued (row, off)
// pairs in queue order, rowChunk pairs per kernel call, each batch's rows prefetched rowLag
// batches before they are updated. Rows < 0 are skipped.
type scaledAdder struct {
	dst         []float32
	src         []float32
	stride, dim int
	alpha       float32
	rows, offs  [rowLag + 1][rowChunk]int64
	lens        [rowLag + 1]int
	cur, n      int // batch being filled and its entries
	queued      int // batches filled, prefetched and not yet applied
}

func (a *scaledAdder) add(row, off int64) {
	a.rows[a.cur][a.n], a.offs[a.cur][a.n] = row, off
	if a.n++; a.n == rowChunk {
		a.push()
	}
}

// push prefetches the batch being filled, queues it, and applies the oldest when the queue is full.
func (a *scaledAdder) push() {
	kernels.PrefetchRows(a.dst, a.rows[a.cur][:a.n], int64(a.stride), a.dim)
	a.lens[a.cur] = a.n
	a.cur, a.n = (a.cur+1)%(rowLag+1), 0
	if a.queued++; a.queued > rowLag {
		a.apply(a.cur) // the slot the next batch fills holds the oldest queued batch
	}
}

func (a *scaledAdder) apply(slot int) {
	n := a.lens[slot]
	kernels.AddScaledRows(a.dst, a.stride, a.dim, a.rows[slot][:n], a.src, a.offs[slot][:n], a.alpha)
	a.queued--
}

// flush applies everything queued, oldest first.
func (a *scaledAdder) flush() {
	if a.n > 0 {
		a.push()
	}
	for a.queued > 0 {
		a.apply((a.cur + rowLag + 1 - a.queued) % (rowLag + 1))
	}
}

// gradSeg is one feature's run of a table's lookups: lookup positions [start, start+n) whose
// gradient rows start at base in the gradient buffer.
type gradSeg struct {
	start, n int
	base     int64
}
