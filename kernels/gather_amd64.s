#include "textflag.h"

// func gatherRowsNT(dst, src unsafe.Pointer, offs *int64, n int, scale int64, rowBytes int)
//
// Row k of dst (rowBytes apart from dst) is the rowBytes at src + offs[k]·scale, or zeros when
// offs[k] < 0, written with VMOVNTPS (dst 32-byte aligned, rowBytes a multiple of 64). SFENCE
// at the end orders the streamed stores before any later store, so another thread that sees a
// later release sees the rows.
TEXT ·gatherRowsNT(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), AX
	MOVQ offs+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ scale+32(FP), R9
	MOVQ rowBytes+40(FP), DX
	VXORPS Y2, Y2, Y2
row:
	TESTQ CX, CX
	JLE done
	MOVQ (BX), SI
	XORQ R8, R8
	TESTQ SI, SI
	JL zero
	IMULQ R9, SI
	ADDQ AX, SI
copy:
	VMOVUPS (SI)(R8*1), Y0
	VMOVUPS 32(SI)(R8*1), Y1
	VMOVNTPS Y0, (DI)(R8*1)
	VMOVNTPS Y1, 32(DI)(R8*1)
	ADDQ $64, R8
	CMPQ R8, DX
	JL copy
	JMP next
zero:
	VMOVNTPS Y2, (DI)(R8*1)
	VMOVNTPS Y2, 32(DI)(R8*1)
	ADDQ $64, R8
	CMPQ R8, DX
	JL zero
next:
	ADDQ DX, DI
	ADDQ $8, BX
	DECQ CX
	JMP row
done:
	SFENCE
	VZEROUPPER
	RET
