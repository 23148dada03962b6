//go:build goexperiment.simd

#include "textflag.h"

// Segment sums (AVX-512) of a column group whose width is not a multiple of 16 (below 64): blocks
// (0 to 3) full 16-float blocks and a last block of the lanes set in mask (the row's own columns:
// the masked-out lanes are neither read nor able to fault, and are not written), in one pass over
// each row. As sumSegs (pool_amd64.s): rows summed in entry order (weighted: one fused
// multiply-add per entry), entries with offs[j] < 0 skipped, entry j+dist's row prefetched while
// entry j's is added (a dist past the last entry prefetches nothing), every offset checked by the
// caller. tail is the last block's byte offset in the row (64 × blocks), last the row's last byte.

// func sumSegsMasked(dst unsafe.Pointer, dstStride int64, src unsafe.Pointer, offs, bounds *int64, nseg int,
//	scale int64, dist int, scales, weights *float32, tail int, mask uint16, last int)
TEXT ·sumSegsMasked(SB), NOSPLIT, $0-104
	MOVQ dst+0(FP), DX
	MOVQ src+16(FP), AX
	MOVQ offs+24(FP), BX
	MOVQ bounds+32(FP), R8
	MOVQ nseg+40(FP), R13
	MOVQ (R8)(R13*8), CX // the last entry: prefetches stop there
	MOVQ scale+48(FP), R9
	MOVQ dist+56(FP), R10
	KMOVW mask+88(FP), K1
mseg:
	DECQ nseg+40(FP)
	JL mdone
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ (R8), R11 // j: the segment's first entry
	MOVQ 8(R8), R13 // its end
mloop:
	CMPQ R11, R13
	JGE mstore
	LEAQ (R11)(R10*1), R12
	CMPQ R12, CX
	JGE msum
	MOVQ (BX)(R12*8), SI
	TESTQ SI, SI
	JL msum
	IMULQ R9, SI
	LEAQ (AX)(SI*1), DI
	PREFETCHT0 0(DI)
	MOVQ last+96(FP), R12
	PREFETCHT0 (DI)(R12*1)
	CMPQ R12, $64 // a line every 64 bytes up to the last byte's: an unaligned row touches one more
	JLE msum
	PREFETCHT0 64(DI)
	CMPQ R12, $128
	JLE msum
	PREFETCHT0 128(DI)
	CMPQ R12, $192
	JLE msum
	PREFETCHT0 192(DI)
msum:
	MOVQ (BX)(R11*8), SI
	TESTQ SI, SI
	JL mnext
	IMULQ R9, SI
	LEAQ (AX)(SI*1), DI
	MOVQ tail+80(FP), R12
	MOVQ weights+72(FP), SI
	TESTQ SI, SI
	JNZ mweighted
	VADDPS (DI)(R12*1), Z3, K1, Z3
	CMPQ R12, $64
	JL mnext
	VADDPS 0(DI), Z0, Z0
	CMPQ R12, $128
	JL mnext
	VADDPS 64(DI), Z1, Z1
	CMPQ R12, $192
	JL mnext
	VADDPS 128(DI), Z2, Z2
	JMP mnext
mweighted:
	VBROADCASTSS (SI)(R11*4), Z8
	VFMADD231PS (DI)(R12*1), Z8, K1, Z3
	CMPQ R12, $64
	JL mnext
	VFMADD231PS 0(DI), Z8, Z0
	CMPQ R12, $128
	JL mnext
	VFMADD231PS 64(DI), Z8, Z1
	CMPQ R12, $192
	JL mnext
	VFMADD231PS 128(DI), Z8, Z2
mnext:
	INCQ R11
	JMP mloop
mstore:
	MOVQ scales+64(FP), DI
	TESTQ DI, DI
	JZ mwrite
	VBROADCASTSS (DI), Z8
	VMULPS Z8, Z0, Z0
	VMULPS Z8, Z1, Z1
	VMULPS Z8, Z2, Z2
	VMULPS Z8, Z3, Z3
	ADDQ $4, DI
	MOVQ DI, scales+64(FP)
mwrite:
	MOVQ tail+80(FP), R12
	VMOVUPS Z3, K1, (DX)(R12*1)
	CMPQ R12, $64
	JL madvance
	VMOVUPS Z0, 0(DX)
	CMPQ R12, $128
	JL madvance
	VMOVUPS Z1, 64(DX)
	CMPQ R12, $192
	JL madvance
	VMOVUPS Z2, 128(DX)
madvance:
	ADDQ dstStride+8(FP), DX
	ADDQ $8, R8
	JMP mseg
mdone:
	VZEROUPPER
	RET
