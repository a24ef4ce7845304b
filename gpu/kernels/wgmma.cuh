// wgmma.cuh: the register fragments and shared-memory operand layouts of wgmma.mma_async (sm_90a).
//
// The same index functions as flashsim/warp/fragments.py (wgmma_fragment) and
// flashsim/warp/matrix_desc.py (MatrixDescriptor, CanonicalTile); tests/test_wgmma.py runs these on the
// host and compares them with the Python ones element by element. No CUDA headers are used.

#pragma once

#define WG_HD __host__ __device__ __forceinline__

namespace wg {

// ---------------------------------------------------------------------------------------------------
// PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" > "Register
// Fragments": warp w = thread >> 5 of the warpgroup holds rows 16w..16w+15; g = (thread % 32) >> 2,
// t = thread % 4.
// ---------------------------------------------------------------------------------------------------
WG_HD int row_of(int thread, int reg) { return 16 * (thread >> 5) + ((thread & 31) >> 2) + 8 * (reg & 1); }

// A of m64nNk16 (.f16/.bf16), 4 registers of two elements: reg r, half h -> (16w + g + 8(r%2), 2t + h + 8(r/2))
WG_HD int a_k16_row(int thread, int reg) { return row_of(thread, reg); }
WG_HD int a_k16_col(int thread, int reg, int half) { return 2 * (thread & 3) + half + 8 * (reg >> 1); }

// A of m64nNk32 (.e4m3/.e5m2), 4 registers of four bytes: reg r, byte q -> (16w + g + 8(r%2), 4t + q + 16(r/2))
WG_HD int a_k32_row(int thread, int reg) { return row_of(thread, reg); }
WG_HD int a_k32_col(int thread, int reg, int byte) { return 4 * (thread & 3) + byte + 16 * (reg >> 1); }

// D of m64nN .f32, N/2 registers: d_i -> (16w + g + 8((i/2)%2), 8(i/4) + 2t + i%2)
WG_HD int d_f32_row(int thread, int i) { return row_of(thread, i >> 1); }
WG_HD int d_f32_col(int thread, int i) { return 8 * (i >> 2) + 2 * (thread & 3) + (i & 1); }

// D of m64nN .f16, N/4 registers of two elements: reg r, half h -> (16w + g + 8(r%2), 8(r/2) + 2t + h)
WG_HD int d_f16_row(int thread, int reg) { return row_of(thread, reg); }
WG_HD int d_f16_col(int thread, int reg, int half) { return 8 * (reg >> 1) + 2 * (thread & 3) + half; }

// ---------------------------------------------------------------------------------------------------
// PTX ISA, "Asynchronous Warpgroup Level Matrix Shared Memory Layout" > "Matrix Descriptor" (64 bits):
//   [13:0] start address >> 4, [29:16] leading dimension byte offset >> 4, [45:32] stride dimension
//   byte offset >> 4, [51:49] base offset, [63:62] swizzle (0 none, 1 128B, 2 64B, 3 32B)
// ---------------------------------------------------------------------------------------------------
WG_HD unsigned long long desc_encode(unsigned int start, unsigned int lbo, unsigned int sbo, unsigned int swizzle_field,
                                     unsigned int base_offset) {
    return (unsigned long long)((start & 0x3FFFFu) >> 4) | (unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16 |
           (unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32 | (unsigned long long)(base_offset & 7u) << 49 |
           (unsigned long long)(swizzle_field & 3u) << 62;
}

// Tile arrangements (flashsim.warp.matrix_desc.ARRANGEMENTS, in that order)
enum Arrangement { NONE = 0, NONE_MN = 1, SW32 = 2, SW64 = 3, SW128 = 4 };

WG_HD unsigned int width_of(int arr) { return arr == SW32 ? 32u : arr == SW64 ? 64u : 128u; }
WG_HD unsigned int swizzle_field_of(int arr) { return arr == SW32 ? 3u : arr == SW64 ? 2u : arr == SW128 ? 1u : 0u; }

// Swizzle<B,4,3> on byte addresses: bits [4, 4+B) ^= bits [7, 7+B), B = 1, 2, 3 for 32B, 64B, 128B
WG_HD unsigned int swizzle(unsigned int addr, unsigned int width) {
    const unsigned int mask = width / 16u - 1u;
    return addr ^ (((addr >> 7) & mask) << 4);
}

// Physical address of byte kb of K of row `row` of a K-major tile (rows x kbytes) at `base`
// (flashsim.warp.matrix_desc.CanonicalTile.address)
WG_HD unsigned int tile_address(int arr, unsigned int base, int rows, int kbytes, int row, int kb) {
    const unsigned int g = row / 8, i = row % 8;
    if (arr == NONE) return base + (g * (kbytes / 16) + kb / 16) * 128u + i * 16u + kb % 16;
    if (arr == NONE_MN) return base + ((kb / 16) * (rows / 8) + g) * 128u + i * 16u + kb % 16;
    const unsigned int w = width_of(arr);
    return swizzle(base + ((kb / w) * (rows / 8) + g) * 8u * w + i * w + kb % w, w);
}

// The descriptor of k-step `step` (bytes 32*step.. of K) of that tile (CanonicalTile.descriptor)
WG_HD unsigned long long tile_desc(int arr, unsigned int base, int rows, int kbytes, int step) {
    const unsigned int kb0 = 32u * step, groups = rows / 8, chunks = kbytes / 16;
    if (arr == NONE) return desc_encode(base + (kb0 / 16) * 128u, 128u, chunks * 128u, 0u, 0u);
    if (arr == NONE_MN) return desc_encode(base + (kb0 / 16) * groups * 128u, groups * 128u, 128u, 0u, 0u);
    const unsigned int w = width_of(arr);
    return desc_encode(base + (kb0 / w) * groups * 8u * w + kb0 % w, 16u, 8u * w, swizzle_field_of(arr), 0u);
}

}  // namespace wg
