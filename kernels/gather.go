package kernels

// GatherRows copies rows of src into consecutive dim-wide rows of dst: row i of dst (dst[i·dim :
// (i+1)·dim]) is src[offs[i]·mult : +dim], or zeros when offs[i] < 0 (a missing row). It is
// SegmentReduce over one-entry segments without the reduction: a sequence lookup's forward.
// Out-of-range offsets panic with an index error; the caller validates its inputs.
func GatherRows(dst []float32, dim int, src []float32, offs []int64, mult int64) {
	gatherRows(dst, dim, src, offs, mult)
}

// StreamingBytes is the output size in bytes from which a gather is better written with
// GatherRowsStreaming: an output this large does not stay in the caches for its reader anyway,
// so streaming only saves the read for ownership of every line. Smaller outputs are written
// through the caches, where the model's next layer finds them.
const StreamingBytes = 8 << 20

// GatherRowsFor returns the gather to use for an output of outputBytes bytes: GatherRowsStreaming
// from StreamingBytes on, GatherRows below.
func GatherRowsFor(outputBytes int) func(dst []float32, dim int, src []float32, offs []int64, mult int64) {
	if outputBytes >= StreamingBytes {
		return GatherRowsStreaming
	}
	return GatherRows
}

// GatherRowsStreaming is GatherRows whose stores to dst bypass the caches (non-temporal) where
// the CPU and the layout allow it (AVX2, dim a multiple of 16, dst 32-byte aligned), and plain
// GatherRows elsewhere. It is for outputs larger than the last-level cache that the caller does
// not read back at once (a sequence lookup's [N, D] rows): streaming them skips the read for
// ownership of each destination line. The stores are fenced before it returns. Out-of-range
// offsets panic with an index error before anything is written.
func GatherRowsStreaming(dst []float32, dim int, src []float32, offs []int64, mult int64) {
	_ = dst[: len(offs)*dim : len(dst)]
	d := int64(dim)
	for _, off := range offs { // the assembly checks no bounds: check them all as slicing would
		if off >= 0 {
			_ = src[off*mult : off*mult+d]
		}
	}
	gatherRowsStreaming(dst, dim, src, offs, mult)
}

// GatherRowsGeneric is the portable implementation of GatherRows.
func GatherRowsGeneric(dst []float32, dim int, src []float32, offs []int64, mult int64) {
	dst = dst[:len(dst):len(dst)] // rows past len(dst) panic, even within its capacity
	_ = dst[:len(offs)*dim]
	for i, off := range offs {
		out := dst[i*dim : (i+1)*dim]
		if off < 0 {
			clear(out)
			continue
		}
		o := off * mult
		copy(out, src[o:o+int64(dim)])
	}
}

// AddScaledRows adds scaled source rows into rows of dst, in order: for each k with rows[k] ≥ 0,
//
//	dst[rows[k]·dstStride : +dim] += alpha · src[srcOffs[k] : +dim]
//
// Rows may repeat (each entry applies in turn). With alpha = −lr it is SGD applied one gradient
// row at a time, which equals the update by their merged sum (SGD is linear) up to float rounding.
// Out-of-range offsets panic with an index error; the caller validates its inputs.
func AddScaledRows(dst []float32, dstStride, dim int, rows []int64, src []float32, srcOffs []int64, alpha float32) {
	addScaledRows(dst, dstStride, dim, rows, src, srcOffs, alpha)
}

// AddScaledRowsGeneric is the portable implementation of AddScaledRows.
func AddScaledRowsGeneric(dst []float32, dstStride, dim int, rows []int64, src []float32, srcOffs []int64, alpha float32) {
	for k, r := range rows {
		if r < 0 {
			continue
		}
		out := dst[r*int64(dstStride):][:dim]
		g := src[srcOffs[k]:][:dim]
		for i := range out {
			out[i] += alpha * g[i]
		}
	}
}
