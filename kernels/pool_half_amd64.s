//go:build goexperiment.simd

#include "textflag.h"

// Segment sums (AVX2) of rows of 8 × blocks + 4 columns (blocks: 2 to 7): the 8-float blocks in
// 256-bit accumulators and the last 4 floats in a 128-bit one, in one pass over each row (split
// into the 8-column blocks and the rest, these widths read every row twice). As sumSegs
// (pool_amd64.s): rows summed in entry order (weighted: one fused multiply-add per entry), entries
// with offs[j] < 0 skipped, every offset checked by the caller. tail is the last 4 floats' byte
// offset in the row (32 × blocks).

// func sumSegsHalf(dst unsafe.Pointer, dstStride int64, src unsafe.Pointer, offs, bounds *int64, nseg int,
//	scale int64, scales, weights *float32, tail int)
TEXT ·sumSegsHalf(SB), NOSPLIT, $0-80
	MOVQ dst+0(FP), DX
	MOVQ src+16(FP), AX
	MOVQ offs+24(FP), BX
	MOVQ bounds+32(FP), R8
	MOVQ scale+48(FP), R9
	MOVQ tail+72(FP), R12
hseg:
	DECQ nseg+40(FP)
	JL hdone
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ (R8), R11 // j: the segment's first entry
	MOVQ 8(R8), R13 // its end
	MOVQ weights+64(FP), R10
hloop:
	CMPQ R11, R13
	JGE hstore
	MOVQ (BX)(R11*8), SI
	TESTQ SI, SI
	JL hnext
	IMULQ R9, SI
	LEAQ (AX)(SI*1), DI
	TESTQ R10, R10
	JNZ hweighted
	VADDPS (DI)(R12*1), X7, X7
	VADDPS 0(DI), Y0, Y0
	VADDPS 32(DI), Y1, Y1
	CMPQ R12, $96
	JL hnext
	VADDPS 64(DI), Y2, Y2
	CMPQ R12, $128
	JL hnext
	VADDPS 96(DI), Y3, Y3
	CMPQ R12, $160
	JL hnext
	VADDPS 128(DI), Y4, Y4
	CMPQ R12, $192
	JL hnext
	VADDPS 160(DI), Y5, Y5
	CMPQ R12, $224
	JL hnext
	VADDPS 192(DI), Y6, Y6
	JMP hnext
hweighted:
	VBROADCASTSS (R10)(R11*4), Y8
	VFMADD231PS (DI)(R12*1), X8, X7
	VFMADD231PS 0(DI), Y8, Y0
	VFMADD231PS 32(DI), Y8, Y1
	CMPQ R12, $96
	JL hnext
	VFMADD231PS 64(DI), Y8, Y2
	CMPQ R12, $128
	JL hnext
	VFMADD231PS 96(DI), Y8, Y3
	CMPQ R12, $160
	JL hnext
	VFMADD231PS 128(DI), Y8, Y4
	CMPQ R12, $192
	JL hnext
	VFMADD231PS 160(DI), Y8, Y5
	CMPQ R12, $224
	JL hnext
	VFMADD231PS 192(DI), Y8, Y6
hnext:
	INCQ R11
	JMP hloop
hstore:
	MOVQ scales+56(FP), DI
	TESTQ DI, DI
	JZ hwrite
	VBROADCASTSS (DI), Y8
	VMULPS Y8, Y0, Y0
	VMULPS Y8, Y1, Y1
	VMULPS Y8, Y2, Y2
	VMULPS Y8, Y3, Y3
	VMULPS Y8, Y4, Y4
	VMULPS Y8, Y5, Y5
	VMULPS Y8, Y6, Y6
	VMULPS X8, X7, X7
	ADDQ $4, DI
	MOVQ DI, scales+56(FP)
hwrite:
	VMOVUPS X7, (DX)(R12*1)
	VMOVUPS Y0, 0(DX)
	VMOVUPS Y1, 32(DX)
	CMPQ R12, $96
	JL hadvance
	VMOVUPS Y2, 64(DX)
	CMPQ R12, $128
	JL hadvance
	VMOVUPS Y3, 96(DX)
	CMPQ R12, $160
	JL hadvance
	VMOVUPS Y4, 128(DX)
	CMPQ R12, $192
	JL hadvance
	VMOVUPS Y5, 160(DX)
	CMPQ R12, $224
	JL hadvance
	VMOVUPS Y6, 192(DX)
hadvance:
	ADDQ dstStride+8(FP), DX
	ADDQ $8, R8
	JMP hseg
hdone:
	VZEROUPPER
	RET
