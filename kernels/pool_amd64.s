//go:build goexperiment.simd

#include "textflag.h"

// Segment sums (AVX-512) of 16 to 64, or 128, columns (blocks: 1 to 4, or 8 16-float blocks) with the prefetch
// inside the loop: while entry j is added, the lines of entry j+dist's row are requested (across
// segment ends, up to the last entry), so a steady stream of misses stays in flight. A prefetch of
// a whole kernel call's rows ahead of it asked for hundreds of lines at once, more than the core's
// miss queue holds, and the core waited for them before it summed anything. Each segment's rows are
// summed in entry order, as segmentReduce64/128 sum them (weighted: one fused multiply-add per
// entry, as theirs), so the results are the same bit for bit. The caller checks every offset
// against the source's length; entries with offs[j] < 0 are skipped. Arguments: dst (the first
// segment's output; dstStride bytes to the next), src (the group's first column), offs and bounds
// (segment i is entries bounds[i]..bounds[i+1]-1 of offs), nseg segments, scale (bytes per offset
// unit), dist (entries ahead to prefetch), scales (one per segment, or nil), weights (one per
// entry, indexed as offs, or nil), blocks.

// func sumSegs(dst unsafe.Pointer, dstStride int64, src unsafe.Pointer, offs, bounds *int64, nseg int, scale int64,
//	dist int, scales, weights *float32, blocks int)
TEXT ·sumSegs(SB), NOSPLIT, $0-88
	MOVQ dst+0(FP), DX
	MOVQ src+16(FP), AX
	MOVQ offs+24(FP), BX
	MOVQ bounds+32(FP), R8
	MOVQ nseg+40(FP), R13
	MOVQ (R8)(R13*8), CX // the last entry: prefetches stop there
	MOVQ scale+48(FP), R9
	MOVQ dist+56(FP), R10
seg:
	DECQ nseg+40(FP)
	JL done
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ (R8), R11 // j: the segment's first entry
	MOVQ 8(R8), R13 // its end
loop:
	CMPQ R11, R13
	JGE store
	LEAQ (R11)(R10*1), R12
	CMPQ R12, CX
	JGE sum
	MOVQ (BX)(R12*8), SI
	TESTQ SI, SI
	JL sum
	IMULQ R9, SI
	LEAQ (AX)(SI*1), DI
	PREFETCHT0 0(DI)
	MOVQ blocks+80(FP), R12
	CMPQ R12, $2
	JL pflast
	PREFETCHT0 64(DI)
	CMPQ R12, $3
	JL pflast
	PREFETCHT0 128(DI)
	CMPQ R12, $4
	JL pflast
	PREFETCHT0 192(DI)
	CMPQ R12, $4
	JLE pflast
	PREFETCHT0 256(DI)
	PREFETCHT0 320(DI)
	PREFETCHT0 384(DI)
	PREFETCHT0 448(DI)
pflast:
	SHLQ $6, R12 // the row's last byte: a row that does not start on a line touches one more
	PREFETCHT0 -1(DI)(R12*1)
sum:
	MOVQ (BX)(R11*8), SI
	TESTQ SI, SI
	JL next
	IMULQ R9, SI
	LEAQ (AX)(SI*1), DI
	MOVQ weights+72(FP), R12
	TESTQ R12, R12
	JNZ weighted
	VADDPS 0(DI), Z0, Z0
	CMPQ blocks+80(FP), $2
	JL next
	VADDPS 64(DI), Z1, Z1
	CMPQ blocks+80(FP), $3
	JL next
	VADDPS 128(DI), Z2, Z2
	CMPQ blocks+80(FP), $4
	JL next
	VADDPS 192(DI), Z3, Z3
	CMPQ blocks+80(FP), $4
	JLE next
	VADDPS 256(DI), Z4, Z4
	VADDPS 320(DI), Z5, Z5
	VADDPS 384(DI), Z6, Z6
	VADDPS 448(DI), Z7, Z7
	JMP next
weighted:
	VBROADCASTSS (R12)(R11*4), Z8
	VFMADD231PS 0(DI), Z8, Z0
	CMPQ blocks+80(FP), $2
	JL next
	VFMADD231PS 64(DI), Z8, Z1
	CMPQ blocks+80(FP), $3
	JL next
	VFMADD231PS 128(DI), Z8, Z2
	CMPQ blocks+80(FP), $4
	JL next
	VFMADD231PS 192(DI), Z8, Z3
	CMPQ blocks+80(FP), $4
	JLE next
	VFMADD231PS 256(DI), Z8, Z4
	VFMADD231PS 320(DI), Z8, Z5
	VFMADD231PS 384(DI), Z8, Z6
	VFMADD231PS 448(DI), Z8, Z7
next:
	INCQ R11
	JMP loop
store:
	MOVQ scales+64(FP), DI
	TESTQ DI, DI
	JZ write
	VBROADCASTSS (DI), Z8
	VMULPS Z8, Z0, Z0
	VMULPS Z8, Z1, Z1
	VMULPS Z8, Z2, Z2
	VMULPS Z8, Z3, Z3
	VMULPS Z8, Z4, Z4
	VMULPS Z8, Z5, Z5
	VMULPS Z8, Z6, Z6
	VMULPS Z8, Z7, Z7
	ADDQ $4, DI
	MOVQ DI, scales+64(FP)
write:
	VMOVUPS Z0, 0(DX)
	CMPQ blocks+80(FP), $2
	JL advance
	VMOVUPS Z1, 64(DX)
	CMPQ blocks+80(FP), $3
	JL advance
	VMOVUPS Z2, 128(DX)
	CMPQ blocks+80(FP), $4
	JL advance
	VMOVUPS Z3, 192(DX)
	CMPQ blocks+80(FP), $4
	JLE advance
	VMOVUPS Z4, 256(DX)
	VMOVUPS Z5, 320(DX)
	VMOVUPS Z6, 384(DX)
	VMOVUPS Z7, 448(DX)
advance:
	ADDQ dstStride+8(FP), DX
	ADDQ $8, R8
	JMP seg
done:
	VZEROUPPER
	RET
