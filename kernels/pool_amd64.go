//go:build goexperiment.simd

package kernels

import "unsafe"

// sumSegs writes each segment's (weighted) sum of its rows' first 16 × blocks floats (blocks: 1 to
// 4, or 8; no other count), times its scale, prefetching entry j+dist's row while adding entry j's;
// see pool_amd64.s. The caller checks the offsets.
//
//go:noescape
func sumSegs(dst unsafe.Pointer, dstStride int64, src unsafe.Pointer, offs, bounds *int64, nseg int, scale int64,
	dist int, scales, weights *float32, blocks int)

// sumSegsMasked is sumSegs for a column group of blocks (0 to 3) 16-float blocks and a masked
// last one (tail: its byte offset; last: the row's last byte); see pool_masked_amd64.s.
//
//go:noescape
func sumSegsMasked(dst unsafe.Pointer, dstStride int64, src unsafe.Pointer, offs, bounds *int64, nseg int,
	scale int64, dist int, scales, weights *float32, tail int, mask uint16, last int)

// inLoopMinBag is the mean bag length from which SegmentReduce pools bags of widths that are a
// multiple of 16 with the in-loop prefetching kernel (see InLoop): shorter bags keep the Go kernels,
// whose callers prefetch a whole call's rows ahead (cheaper per row when a row is one of a few per
// bag).
const inLoopMinBag = 32

// prefetchAheadBytes is how far ahead of the row being added the in-loop kernels prefetch: 16
// rows of 512 bytes (measured best on a 1M-row table: 8 rows left misses exposed, 48 evicted).
const prefetchAheadBytes = 8192

// InLoop reports whether SegmentReduce pools bags of width dim, entries long over bags, with the
// in-loop prefetching kernels (AVX-512, dim a multiple of 16, one maskedTail takes, or D=8, a mean
// bag length of inLoopMinBag or more): its callers need to prefetch only the first
// InLoopAhead(dim) rows of a call.
func InLoop(dim int, entries int64, bags int) bool {
	return hasAVX512 && (dim%16 == 0 || maskedTail(dim) || dim == 8) && bags > 0 && entries >= int64(inLoopMinBag*bags)
}

// InLoopAhead is how many rows ahead the in-loop kernels prefetch for width dim.
func InLoopAhead(dim int) int { return max(4, prefetchAheadBytes/(4*min(dim, 128))) }

// segmentReduceInLoop is segmentReduce for bags of a mean length of at least inLoopMinBag when
// InLoop takes dim, on the assembly kernels (groups of 128 columns, then 64, then the rest, below
// 64, masked when not a multiple of 16); it reports false, having written nothing, when the
// arguments are not ones it can trust blindly (the Go kernels then run and check them).
func segmentReduceInLoop(dst []float32, dstBase, dstStride, dim int, src []float32, offs []int64, mult int64,
	bounds []int64, weights, scales []float32) bool {
	nseg := len(bounds) - 1
	if nseg <= 0 || !InLoop(dim, bounds[nseg]-bounds[0], nseg) ||
		!trustedArgs(dst, dstBase, dstStride, dim, src, offs, mult, bounds, weights, scales) {
		return false
	}
	for c := 0; c < dim; {
		w := columnGroup(dim - c)
		sumSegsAt(dst, dstBase+c, dstStride, w, src[c:], offs, mult, bounds, weights, scales, InLoopAhead(w))
		c += w
	}
	return true
}

// trustedArgs reports whether the assembly kernels can pool dim columns of these arguments
// blindly: at least one entry, every bound and offset in range, dst long enough, scales and
// weights for every segment and entry.
func trustedArgs(dst []float32, dstBase, dstStride, dim int, src []float32, offs []int64, mult int64,
	bounds []int64, weights, scales []float32) bool {
	nseg := len(bounds) - 1
	if nseg <= 0 || len(src) < dim || mult <= 0 || dstBase < 0 || dstStride < dim ||
		dstBase+(nseg-1)*dstStride+dim > len(dst) || (scales != nil && len(scales) < nseg) {
		return false
	}
	lo, hi := bounds[0], bounds[nseg]
	if lo < 0 || hi <= lo || hi > int64(len(offs)) || (weights != nil && int64(len(weights)) < hi) {
		return false
	}
	for i := range nseg {
		if bounds[i] > bounds[i+1] {
			return false
		}
	}
	limit := int64(len(src)-dim) / mult // the largest offset whose row fits
	for _, o := range offs[lo:hi] {
		if o > limit {
			return false
		}
	}
	return true
}

// sumSegsAt runs the assembly kernel for w columns (from src's start, at dstBase in dst) of
// arguments trustedArgs accepted, prefetching dist entries ahead (no prefetches when dist is at
// least the entry count): sumSegs when w is a multiple of 16, sumSegsMasked when it is not.
func sumSegsAt(dst []float32, dstBase, dstStride, w int, src []float32, offs []int64, mult int64,
	bounds []int64, weights, scales []float32, dist int) {
	sp, wp := firstOrNil(scales), firstOrNil(weights)
	nseg := len(bounds) - 1
	d, s := unsafe.Pointer(&dst[dstBase]), unsafe.Pointer(&src[0])
	if w%16 == 0 {
		sumSegs(d, int64(4*dstStride), s, &offs[0], &bounds[0], nseg, 4*mult, dist, sp, wp, w/16)
		return
	}
	sumSegsMasked(d, int64(4*dstStride), s, &offs[0], &bounds[0], nseg, 4*mult, dist, sp, wp, 64*(w/16),
		uint16(1)<<(w%16)-1, 4*w-1)
}

// sumSegsHalf is the AVX2 kernel for rows of 8 × blocks + 4 columns (blocks: 2 to 7; tail: the
// last 4 floats' byte offset); see pool_half_amd64.s.
//
//go:noescape
func sumSegsHalf(dst unsafe.Pointer, dstStride int64, src unsafe.Pointer, offs, bounds *int64, nseg int,
	scale int64, scales, weights *float32, tail int)

// halfTail reports whether SegmentReduce pools rows of width dim in one pass on the AVX2 kernel
// with a 4-float last block (CPUs without AVX-512, whose masked kernels take these widths).
func halfTail(dim int) bool { return hasAVX2 && !hasAVX512 && dim%8 == 4 && dim > 16 && dim < 64 }

// segmentReduceHalf is segmentReduce for a width halfTail takes (20 to 60), on arguments
// trustedArgs accepted.
func segmentReduceHalf(dst []float32, dstBase, dstStride, dim int, src []float32, offs []int64, mult int64,
	bounds []int64, weights, scales []float32) {
	sumSegsHalf(unsafe.Pointer(&dst[dstBase]), int64(4*dstStride), unsafe.Pointer(&src[0]), &offs[0], &bounds[0],
		len(bounds)-1, 4*mult, firstOrNil(scales), firstOrNil(weights), 32*(dim/8))
}

// firstOrNil is x's first element's address, nil for a nil x (the kernels' "no scales/weights").
func firstOrNil(x []float32) *float32 {
	if x == nil {
		return nil
	}
	return &x[0]
}
