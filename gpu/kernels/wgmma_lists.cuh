// wgmma_lists.cuh: operand lists for inline-asm wgmma.mma_async with M accumulator registers (M = 2..128):
// the "%0, %1, ..." lists, the operand numbers after them, and the "+f" (f32 D) / "+r" (f16 D) constraints.
// Used by probe_wgmma.cu and probe_wgmma_mn.cu.
#pragma once

// accumulator register lists "%0, %1, ..., %(M-1)"
#define WG_DEC(t) ", %" #t "0, %" #t "1, %" #t "2, %" #t "3, %" #t "4, %" #t "5, %" #t "6, %" #t "7, %" #t "8, %" #t "9"
#define WG_LIST_2 "%0, %1"
#define WG_LIST_4 WG_LIST_2 ", %2, %3"
#define WG_LIST_8 WG_LIST_4 ", %4, %5, %6, %7"
#define WG_LIST_16 WG_LIST_8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define WG_LIST_32 WG_LIST_16 ", %16, %17, %18, %19" WG_DEC(2) ", %30, %31"
#define WG_LIST_64 WG_LIST_32 ", %32, %33, %34, %35, %36, %37, %38, %39" WG_DEC(4) WG_DEC(5) ", %60, %61, %62, %63"
#define WG_LIST_128 WG_LIST_64 ", %64, %65, %66, %67, %68, %69" WG_DEC(7) WG_DEC(8) WG_DEC(9) WG_DEC(10) WG_DEC(11) \
    ", %120, %121, %122, %123, %124, %125, %126, %127"

// the operand numbers after M accumulators: %M, %M+1, ..., %M+5
#define WG_NUMS_2 2, 3, 4, 5, 6, 7
#define WG_NUMS_4 4, 5, 6, 7, 8, 9
#define WG_NUMS_8 8, 9, 10, 11, 12, 13
#define WG_NUMS_16 16, 17, 18, 19, 20, 21
#define WG_NUMS_32 32, 33, 34, 35, 36, 37
#define WG_NUMS_64 64, 65, 66, 67, 68, 69
#define WG_NUMS_128 128, 129, 130, 131, 132, 133

// accumulator operands: "+f" for .f32 D (floats), "+r" for .f16 D (f16x2 registers)
#define WG_F1(i) "+f"(d[i])
#define WG_F2(i) WG_F1(i), WG_F1((i) + 1)
#define WG_F4(i) WG_F2(i), WG_F2((i) + 2)
#define WG_F8(i) WG_F4(i), WG_F4((i) + 4)
#define WG_F16(i) WG_F8(i), WG_F8((i) + 8)
#define WG_F32(i) WG_F16(i), WG_F16((i) + 16)
#define WG_F64(i) WG_F32(i), WG_F32((i) + 32)
#define WG_F128(i) WG_F64(i), WG_F64((i) + 64)
#define WG_R1(i) "+r"(d[i])
#define WG_R2(i) WG_R1(i), WG_R1((i) + 1)
#define WG_R4(i) WG_R2(i), WG_R2((i) + 2)
#define WG_R8(i) WG_R4(i), WG_R4((i) + 4)
#define WG_R16(i) WG_R8(i), WG_R8((i) + 8)
#define WG_R32(i) WG_R16(i), WG_R16((i) + 16)
#define WG_R64(i) WG_R32(i), WG_R32((i) + 32)
