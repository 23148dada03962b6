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
	lines := (rowLen*4 + 63) / 64
	prefetchRows(unsafe.Pointer(unsafe.SliceData(src)), unsafe.SliceData(offs), len(offs), mult*4, lines)
}
