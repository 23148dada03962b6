package embedding

// rowChunk is the number of scattered table rows one kernel call gathers or updates, and rowLag the
// number of chunks between a chunk's prefetch and its use: small chunks issued a few ahead keep a
// steady stream of row misses in flight, where one large chunk prefetched just ahead overflows the
// core's miss queue (measured on the sequence benchmark's random rows).
const (
	rowChunk = 8
	rowLag   = 2
)

// streamRows calls work(lo, hi) over [0, n) in chunks of rowChunk, after prefetch(lo, hi) was
// called for that chunk rowLag chunks earlier. Prefetching runs up to rowLag chunks past n, within
// ahead (>= n): a caller whose row list goes on past its part (the next work item's rows) passes
// its length, so those rows are hinted early.
func streamRows(n, ahead int, prefetch, work func(lo, hi int)) {
	if n > 0 {
		prefetch(0, min(rowLag*rowChunk, ahead))
	}
	for lo := 0; lo < n; lo += rowChunk {
		if p := lo + rowLag*rowChunk; p < ahead {
			prefetch(p, min(p+rowChunk, ahead))
		}
		work(lo, min(lo+rowChunk, n))
	}
}
