package kernels

import "unsafe"

// PrefetchRows asks the CPU to start loading rows of a table into cache ahead of a gather or an
// update that will touch them: for each k, the bytes of src[offs[k]·mult : +rowLen] (offs[k] < 0
// skipped). It is a hint: nothing is read architecturally, so stale or out-of-range offsets are
// harmless. Random row gathers are latency bound; issuing the next work item's rows before
// computing the current one overlaps those latencies. A no-op where there is no prefetch
// instruction (non-amd64 builds).
func PrefetchRows(src []float32, offs []int64, mult int64, rowLen int) {
	if len(src) == 0 || len(offs) == 0 || rowLen <= 0 {
		return
	}
	lines := rowLines(rowLen)
	prefetchRows(unsafe.Pointer(unsafe.SliceData(src)), unsafe.SliceData(offs), len(offs), mult*4, lines)
}

// rowLines is the number of cache lines a row of rowLen floats can touch: one more than it fills
// when its bytes are not a multiple of a line, since such rows start anywhere in a line (a 48-byte
// row of 12 floats straddles two lines every other row; prefetching only its first line left the
// second to miss).
func rowLines(rowLen int) int {
	if rowLen*4%64 == 0 {
		return rowLen * 4 / 64
	}
	return rowLen*4/64 + 2
}

// PrefetchStrided is PrefetchRows for rows at a fixed stride: src[base+i·stride : +rowLen] for
// i < n (a block of columns of consecutive rows of a row-major matrix). A hint, like PrefetchRows.
func PrefetchStrided(src []float32, base, stride, n, rowLen int) {
	if len(src) == 0 || n <= 0 || rowLen <= 0 || base < 0 {
		return
	}
	lines := rowLines(rowLen)
	prefetchStrided(unsafe.Pointer(unsafe.SliceData(src)), int64(base)*4, int64(stride)*4, n, lines)
}

// PrefetchBits asks the CPU to start loading the words of a bitmap that tests of bits ids will read
// (bit i is bits[i/64] & 1<<(i%64); ids < 0 skipped). A hint, like PrefetchRows: a bitmap of a large
// table's rows is sparse in what a batch touches, so its words miss cache when the row traffic
// between two tests evicts them.
func PrefetchBits(bits []uint64, ids []int64) {
	if len(bits) == 0 || len(ids) == 0 {
		return
	}
	prefetchBits(unsafe.Pointer(unsafe.SliceData(bits)), unsafe.SliceData(ids), len(ids))
}

// PrefetchLines asks the CPU to start loading lines cache lines at base + offs[k]·scale bytes for
// each k (offs[k] < 0 skipped): PrefetchRows for arrays of other element types (a hash index's
// slots). A hint, like PrefetchRows: base must point into live memory, offsets may run past it.
func PrefetchLines(base unsafe.Pointer, offs []int64, scale int64, lines int) {
	if base == nil || len(offs) == 0 || lines <= 0 {
		return
	}
	prefetchRows(base, unsafe.SliceData(offs), len(offs), scale, lines)
}
