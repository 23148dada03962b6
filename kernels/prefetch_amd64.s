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
