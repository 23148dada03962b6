#include "textflag.h"

// func prefetchRows(base unsafe.Pointer, offs *int64, n int, scale int64, lines int)
TEXT ·prefetchRows(SB), NOSPLIT, $0-40
	MOVQ base+0(FP), AX
	MOVQ offs+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ scale+24(FP), R9
	MOVQ lines+32(FP), DX
loop:
	TESTQ CX, CX
	JLE done
	MOVQ (BX), SI
	TESTQ SI, SI
	JL next
	IMULQ R9, SI
	LEAQ (AX)(SI*1), DI
	MOVQ DX, R8
line:
	PREFETCHT0 (DI)
	ADDQ $64, DI
	DECQ R8
	JG line
next:
	ADDQ $8, BX
	DECQ CX
	JMP loop
done:
	RET

// func prefetchStrided(base unsafe.Pointer, off, stride int64, n int, lines int)
TEXT ·prefetchStrided(SB), NOSPLIT, $0-40
	MOVQ base+0(FP), AX
	ADDQ off+8(FP), AX
	MOVQ stride+16(FP), R9
	MOVQ n+24(FP), CX
	MOVQ lines+32(FP), DX
srow:
	TESTQ CX, CX
	JLE sdone
	MOVQ AX, DI
	MOVQ DX, R8
sline:
	PREFETCHT0 (DI)
	ADDQ $64, DI
	DECQ R8
	JG sline
	ADDQ R9, AX
	DECQ CX
	JMP srow
sdone:
	RET

// func prefetchBits(base unsafe.Pointer, ids *int64, n int)
TEXT ·prefetchBits(SB), NOSPLIT, $0-24
	MOVQ base+0(FP), AX
	MOVQ ids+8(FP), BX
	MOVQ n+16(FP), CX
bloop:
	TESTQ CX, CX
	JLE bdone
	MOVQ (BX), SI
	TESTQ SI, SI
	JL bnext
	SHRQ $6, SI
	PREFETCHT0 (AX)(SI*8)
bnext:
	ADDQ $8, BX
	DECQ CX
	JMP bloop
bdone:
	RET
