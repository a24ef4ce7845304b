// wgmma_hazards.cu: wgmma.mma_async with the bugs a kernel can have while a wgmma is in flight, for the
// interpreter's checks (flashsim/sass/ops_gmma.py; tests/test_sass_wgmma.py; gpu/validate_sass_wgmma.py).
//
// wgmma_hazards: one warpgroup computes D (64x8, f32) = A (64x16) * B (16x8) + C with one
// wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16, A and B in shared memory as K-major tiles without
// swizzle (wgmma.cuh: wg::tile_address, wg::tile_desc), then commit_group and wait_group 0.
// WGMMA_BUG picks a planted bug (0, the default: none):
//   1  reads an accumulator register before wgmma.wait_group (HAZARD:read_early). ptxas keeps the SASS safe:
//      it injects a WARPGROUP.DEPBAR before the read (ptxas info C7517)
//   2  overwrites B in shared memory after the wgmma, before wgmma.wait_group (HAZARD:overwrite_b): a
//      generic-proxy store to bytes the wgmma in flight reads, which stays in the SASS as written
//   3  leaves without wgmma.wait_group when flag is 0 (HAZARD:no_wait). ptxas injects the wait before the exit
//
// WGH_SCALE_A / WGH_SCALE_B (default 1) are wgmma's imm-scale-a / imm-scale-b: -1 negates A / B (SASS:
// gdesc[URx].negA / .negB).
//
// wgmma_two_groups: D0 = A * B0 + C0 and D1 = A * B1 + C1 as two groups (a commit_group after each wgmma),
// then wait_group 1 (the first group is done: D0 is stored) and wait_group 0 (then D1).
//
// wgmma_chain: D = A (64x32) * B (32x8) + C as two wgmma along K accumulating into the same registers, one
// group (SASS: an HGMMA without gsb0, then one with it, then one WARPGROUP.DEPBAR).
//
// wgmma_pipeline: D = A (64x64) * B (64x8) + C as a loop over the 4 k-steps, one group each, with
// wgmma.wait_group 1 in the loop (the mainloop of a pipelined GEMM: each wgmma accumulates into the registers
// of the group still in flight), then wait_group 0.
//
// Build with -arch=sm_90a; built for plain sm_90 (the compile check of every kernel) the wgmma are left out
// and the kernels trap. Launch one CTA of 128 threads. A (64x16), B (16x8, K x N) f16 bit patterns and
// C, D (64x8) f32 bit patterns, row-major; `early` (128 floats) gets each thread's first accumulator register
// under bug 1. PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (wgmma.fence,
// wgmma.mma_async, wgmma.commit_group, wgmma.wait_group: "Accessing the accumulator register ... before
// wgmma.wait_group ... is undefined behavior").

#include "wgmma.cuh"

#ifndef WGMMA_BUG
#define WGMMA_BUG 0
#endif

#ifndef WGH_SCALE_A
#define WGH_SCALE_A 1
#endif
#ifndef WGH_SCALE_B
#define WGH_SCALE_B 1
#endif
#define WGH_STR2(x) #x
#define WGH_STR(x) WGH_STR2(x)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGH_ASM(...) asm volatile(__VA_ARGS__)
#else
#define WGH_ASM(...) __trap()
#endif

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// D (4 f32 registers) += A (descriptor da) * B (descriptor db)
__device__ __forceinline__ void wgh_mma(float (&d)[4], u64 da, u64 db) {
    WGH_ASM("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, 1, " WGH_STR(WGH_SCALE_A)
            ", " WGH_STR(WGH_SCALE_B) ", 0, 0;\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "l"(da), "l"(db)
            : "memory");
}

__device__ __forceinline__ u32 wgh_smem_address(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// rows x K f16 (row-major in global memory; B: K x rows, stored transposed) into a K-major tile without swizzle
// at shared address `base`, K = kbytes / 2
__device__ __forceinline__ void wgh_tile(u8* tile, u32 base, int rows, const u16* src, bool transposed,
                                         int kbytes = 32) {
    for (int e = threadIdx.x; e < rows * kbytes; e += 128) {
        const int row = e / kbytes, kb = e % kbytes;
        // B^T: row n of the tile is column n of B
        const u16 v = transposed ? src[(kb / 2) * rows + row] : src[row * (kbytes / 2) + kb / 2];
        tile[wg::tile_address(wg::NONE, base, rows, kbytes, row, kb) - base] = (u8)(kb % 2 ? v >> 8 : v & 0xFF);
    }
}

__device__ __forceinline__ void wgh_load_c(float (&d)[4], const float* c) {
#pragma unroll
    for (int i = 0; i < 4; ++i) d[i] = c[wg::d_f32_row(threadIdx.x, i) * 8 + wg::d_f32_col(threadIdx.x, i)];
}

__device__ __forceinline__ void wgh_store_d(float* out, const float (&d)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[wg::d_f32_row(threadIdx.x, i) * 8 + wg::d_f32_col(threadIdx.x, i)] = d[i];
}

extern "C" __global__ void __launch_bounds__(128) wgmma_hazards(const u16* __restrict__ A, const u16* __restrict__ B,
                                                               const float* __restrict__ C, float* __restrict__ D,
                                                               float* __restrict__ early, int flag) {
    __shared__ __align__(1024) u8 sa[64 * 32];
    __shared__ __align__(1024) u8 sb[8 * 32];
    const u32 base_a = wgh_smem_address(sa), base_b = wgh_smem_address(sb);
    wgh_tile(sa, base_a, 64, A, false);
    wgh_tile(sb, base_b, 8, B, true);
    float d[4];
    wgh_load_c(d, C);
    // the shared-memory writes (generic proxy) become visible to wgmma (async proxy), then to every thread
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    WGH_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
    wgh_mma(d, wg::tile_desc(wg::NONE, base_a, 64, 32, 0), wg::tile_desc(wg::NONE, base_b, 8, 32, 0));
    WGH_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#if WGMMA_BUG == 1
    early[threadIdx.x] = d[0];  // HAZARD:read_early
#elif WGMMA_BUG == 2
    if (threadIdx.x < 64) ((u32*)sb)[threadIdx.x] = 0u;  // HAZARD:overwrite_b
#elif WGMMA_BUG == 3
    if (!flag) return;  // HAZARD:no_wait
#endif
    WGH_ASM("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    wgh_store_d(D, d);
}

extern "C" __global__ void __launch_bounds__(128)
    wgmma_two_groups(const u16* __restrict__ A, const u16* __restrict__ B0, const u16* __restrict__ B1,
                     const float* __restrict__ C0, const float* __restrict__ C1, float* __restrict__ D0,
                     float* __restrict__ D1) {
    __shared__ __align__(1024) u8 sa[64 * 32];
    __shared__ __align__(1024) u8 sb[2][8 * 32];
    const u32 base_a = wgh_smem_address(sa), base_b0 = wgh_smem_address(sb[0]), base_b1 = wgh_smem_address(sb[1]);
    wgh_tile(sa, base_a, 64, A, false);
    wgh_tile(sb[0], base_b0, 8, B0, true);
    wgh_tile(sb[1], base_b1, 8, B1, true);
    float d0[4], d1[4];
    wgh_load_c(d0, C0);
    wgh_load_c(d1, C1);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const u64 da = wg::tile_desc(wg::NONE, base_a, 64, 32, 0);
    WGH_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
    wgh_mma(d0, da, wg::tile_desc(wg::NONE, base_b0, 8, 32, 0));
    WGH_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");  // GROUP:first
    wgh_mma(d1, da, wg::tile_desc(wg::NONE, base_b1, 8, 32, 0));
    WGH_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");  // GROUP:second
    WGH_ASM("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // WAIT:one
    wgh_store_d(D0, d0);
    WGH_ASM("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");  // WAIT:zero
    wgh_store_d(D1, d1);
}

extern "C" __global__ void __launch_bounds__(128) wgmma_chain(const u16* __restrict__ A, const u16* __restrict__ B,
                                                             const float* __restrict__ C, float* __restrict__ D) {
    __shared__ __align__(1024) u8 sa[64 * 64];
    __shared__ __align__(1024) u8 sb[8 * 64];
    const u32 base_a = wgh_smem_address(sa), base_b = wgh_smem_address(sb);
    wgh_tile(sa, base_a, 64, A, false, 64);
    wgh_tile(sb, base_b, 8, B, true, 64);
    float d[4];
    wgh_load_c(d, C);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    WGH_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
    wgh_mma(d, wg::tile_desc(wg::NONE, base_a, 64, 64, 0), wg::tile_desc(wg::NONE, base_b, 8, 64, 0));
    wgh_mma(d, wg::tile_desc(wg::NONE, base_a, 64, 64, 1), wg::tile_desc(wg::NONE, base_b, 8, 64, 1));
    WGH_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    WGH_ASM("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    wgh_store_d(D, d);
}

extern "C" __global__ void __launch_bounds__(128) wgmma_pipeline(const u16* __restrict__ A, const u16* __restrict__ B,
                                                                const float* __restrict__ C, float* __restrict__ D,
                                                                int steps) {
    __shared__ __align__(1024) u8 sa[64 * 128];
    __shared__ __align__(1024) u8 sb[8 * 128];
    const u32 base_a = wgh_smem_address(sa), base_b = wgh_smem_address(sb);
    wgh_tile(sa, base_a, 64, A, false, 128);
    wgh_tile(sb, base_b, 8, B, true, 128);
    float d[4];
    wgh_load_c(d, C);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
#pragma unroll 1
    for (int s = 0; s < steps; ++s) {
        WGH_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
        wgh_mma(d, wg::tile_desc(wg::NONE, base_a, 64, 128, s), wg::tile_desc(wg::NONE, base_b, 8, 128, s));
        WGH_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        WGH_ASM("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    WGH_ASM("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    wgh_store_d(D, d);
}
