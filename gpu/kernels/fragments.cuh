// fragments.cuh: pack and unpack mma.sync fragments from/to row-major tiles in global memory.
//
// Each fragment is an index function (lane, register, half) -> (row, col) of its tile, copied from the
// PTX ISA tables, and one generic loop per direction (load = pack, store = unpack) that uses it.
// Notation of the PTX ISA: g = groupID = lane >> 2, t = threadID_in_group = lane % 4.
// A 32-bit register holding two 16-bit elements keeps the lower-indexed element (the one with the
// smaller column for A and C/D, the smaller k for B) in bits 0-15:
//
//     31            16 15             0
//    +----------------+----------------+
//    | element [.. +1]| element [..]   |     pack_b16x2(lo, hi) = lo | hi << 16
//    +----------------+----------------+
//
// Tiles are plain arrays of bit patterns (unsigned short for f16/bf16, unsigned int for f32) with a row
// stride `ld` in elements, so the same functions serve the probes (ld = tile width) and bigger kernels.
// No CUDA headers are used: NVRTC compiles this without an include path to the toolkit.

#pragma once

// Index functions are also host functions, so a CPU test can enumerate them (tests/test_gpu_runtime.py).
#define FRAG_HD __host__ __device__ __forceinline__

namespace frag {

__device__ __forceinline__ unsigned int pack_b16x2(unsigned short lo, unsigned short hi) {
    return (unsigned int)lo | ((unsigned int)hi << 16);
}
__device__ __forceinline__ unsigned short lo_b16(unsigned int r) { return (unsigned short)(r & 0xFFFFu); }
__device__ __forceinline__ unsigned short hi_b16(unsigned int r) { return (unsigned short)(r >> 16); }

FRAG_HD int group_id(int lane) { return lane >> 2; }   // g
FRAG_HD int thread_in_group(int lane) { return lane & 3; }  // t

// ---------------------------------------------------------------------------------------------------
// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", multiplicand A (.f16/.bf16,
// 16x16, .row), 4 registers a0..a3 of two elements each:
//   reg0 (g, 2t..2t+1), reg1 (g+8, 2t..2t+1), reg2 (g, 2t+8..2t+9), reg3 (g+8, 2t+8..2t+9)
// ---------------------------------------------------------------------------------------------------
FRAG_HD int a_m16k16_row(int lane, int reg) { return group_id(lane) + 8 * (reg & 1); }
FRAG_HD int a_m16k16_col(int lane, int reg, int half) {
    return 2 * thread_in_group(lane) + half + 8 * (reg >> 1);
}

// PTX ISA, "Matrix Fragments for mma.m16n8k8", multiplicand A (.f16/.bf16, 16x8, .row), 2 registers:
//   reg0 (g, 2t..2t+1), reg1 (g+8, 2t..2t+1)
FRAG_HD int a_m16k8_row(int lane, int reg) { return group_id(lane) + 8 * reg; }
FRAG_HD int a_m16k8_col(int lane, int /*reg*/, int half) {
    return 2 * thread_in_group(lane) + half;
}

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", multiplicand B (16x8, K x N,
// .col), 2 registers:  reg0 (k = 2t..2t+1, n = g), reg1 (k = 2t+8..2t+9, n = g)
FRAG_HD int b_k16n8_k(int lane, int reg, int half) {
    return 2 * thread_in_group(lane) + half + 8 * reg;
}
FRAG_HD int b_k16n8_n(int lane) { return group_id(lane); }

// PTX ISA, "Matrix Fragments for mma.m16n8k8", multiplicand B (8x8, K x N, .col), 1 register:
//   reg0 (k = 2t..2t+1, n = g)
FRAG_HD int b_k8n8_k(int lane, int half) { return 2 * thread_in_group(lane) + half; }
FRAG_HD int b_k8n8_n(int lane) { return group_id(lane); }

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (and the same table for
// mma.m16n8k8), accumulators C/D (16x8):
//   .f32: 4 registers of one element: c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
//   .f16: 2 registers of two elements: reg0 {(g, 2t), (g, 2t+1)}, reg1 {(g+8, 2t), (g+8, 2t+1)}
FRAG_HD int c_f32_row(int lane, int i) { return group_id(lane) + 8 * (i >> 1); }
FRAG_HD int c_f32_col(int lane, int i) { return 2 * thread_in_group(lane) + (i & 1); }
FRAG_HD int c_f16_row(int lane, int reg) { return group_id(lane) + 8 * reg; }
FRAG_HD int c_f16_col(int lane, int /*reg*/, int half) {
    return 2 * thread_in_group(lane) + half;
}

// ------------------------------------------ A ------------------------------------------------------
__device__ __forceinline__ void load_a_m16k16(const unsigned short* a, int lda, int lane, unsigned int (&r)[4]) {
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
        const unsigned short* row = a + a_m16k16_row(lane, reg) * lda;
        r[reg] = pack_b16x2(row[a_m16k16_col(lane, reg, 0)], row[a_m16k16_col(lane, reg, 1)]);
    }
}
__device__ __forceinline__ void store_a_m16k16(unsigned short* a, int lda, int lane, const unsigned int (&r)[4]) {
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
        unsigned short* row = a + a_m16k16_row(lane, reg) * lda;
        row[a_m16k16_col(lane, reg, 0)] = lo_b16(r[reg]);
        row[a_m16k16_col(lane, reg, 1)] = hi_b16(r[reg]);
    }
}
__device__ __forceinline__ void load_a_m16k8(const unsigned short* a, int lda, int lane, unsigned int (&r)[2]) {
#pragma unroll
    for (int reg = 0; reg < 2; ++reg) {
        const unsigned short* row = a + a_m16k8_row(lane, reg) * lda;
        r[reg] = pack_b16x2(row[a_m16k8_col(lane, reg, 0)], row[a_m16k8_col(lane, reg, 1)]);
    }
}
__device__ __forceinline__ void store_a_m16k8(unsigned short* a, int lda, int lane, const unsigned int (&r)[2]) {
#pragma unroll
    for (int reg = 0; reg < 2; ++reg) {
        unsigned short* row = a + a_m16k8_row(lane, reg) * lda;
        row[a_m16k8_col(lane, reg, 0)] = lo_b16(r[reg]);
        row[a_m16k8_col(lane, reg, 1)] = hi_b16(r[reg]);
    }
}

// ------------------------------------------ B (K x N, row-major in memory) -------------------------
__device__ __forceinline__ void load_b_k16n8(const unsigned short* b, int ldb, int lane, unsigned int (&r)[2]) {
    const int n = b_k16n8_n(lane);
#pragma unroll
    for (int reg = 0; reg < 2; ++reg) {
        r[reg] = pack_b16x2(b[b_k16n8_k(lane, reg, 0) * ldb + n], b[b_k16n8_k(lane, reg, 1) * ldb + n]);
    }
}
__device__ __forceinline__ void store_b_k16n8(unsigned short* b, int ldb, int lane, const unsigned int (&r)[2]) {
    const int n = b_k16n8_n(lane);
#pragma unroll
    for (int reg = 0; reg < 2; ++reg) {
        b[b_k16n8_k(lane, reg, 0) * ldb + n] = lo_b16(r[reg]);
        b[b_k16n8_k(lane, reg, 1) * ldb + n] = hi_b16(r[reg]);
    }
}
__device__ __forceinline__ unsigned int load_b_k8n8(const unsigned short* b, int ldb, int lane) {
    const int n = b_k8n8_n(lane);
    return pack_b16x2(b[b_k8n8_k(lane, 0) * ldb + n], b[b_k8n8_k(lane, 1) * ldb + n]);
}
__device__ __forceinline__ void store_b_k8n8(unsigned short* b, int ldb, int lane, unsigned int r) {
    const int n = b_k8n8_n(lane);
    b[b_k8n8_k(lane, 0) * ldb + n] = lo_b16(r);
    b[b_k8n8_k(lane, 1) * ldb + n] = hi_b16(r);
}

// ------------------------------------------ C/D ----------------------------------------------------
// f32 accumulators travel as bit patterns (unsigned int) in memory and as floats in registers.
__device__ __forceinline__ void load_c_f32(const unsigned int* c, int ldc, int lane, float (&r)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = __uint_as_float(c[c_f32_row(lane, i) * ldc + c_f32_col(lane, i)]);
}
__device__ __forceinline__ void store_d_f32(unsigned int* d, int ldd, int lane, const float (&r)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) d[c_f32_row(lane, i) * ldd + c_f32_col(lane, i)] = __float_as_uint(r[i]);
}
__device__ __forceinline__ void load_c_f16(const unsigned short* c, int ldc, int lane, unsigned int (&r)[2]) {
#pragma unroll
    for (int reg = 0; reg < 2; ++reg) {
        const unsigned short* row = c + c_f16_row(lane, reg) * ldc;
        r[reg] = pack_b16x2(row[c_f16_col(lane, reg, 0)], row[c_f16_col(lane, reg, 1)]);
    }
}
__device__ __forceinline__ void store_d_f16(unsigned short* d, int ldd, int lane, const unsigned int (&r)[2]) {
#pragma unroll
    for (int reg = 0; reg < 2; ++reg) {
        unsigned short* row = d + c_f16_row(lane, reg) * ldd;
        row[c_f16_col(lane, reg, 0)] = lo_b16(r[reg]);
        row[c_f16_col(lane, reg, 1)] = hi_b16(r[reg]);
    }
}

}  // namespace frag
