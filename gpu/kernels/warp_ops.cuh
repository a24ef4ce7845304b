// warp_ops.cuh: the PTX instructions the attention kernels (fa_v5.cu, kernel1.cu, fa2.cu) are built
// from, one inline-asm wrapper each, so every data movement and every tensor-core operation in them is a
// named instruction that the Python twins replay.
//
// 16-bit elements travel as their bit patterns (unsigned short); `kBF16` picks bf16 over f16 wherever the
// type matters (mma operands, f32 -> 16-bit conversion). No CUDA headers: NVRTC needs no include path.

#pragma once

namespace wops {

// Swizzle<B, M, S> on an element offset: bits [M, M+B) ^= bits [M+S, M+S+B) (CuTe's Swizzle).
template <int B, int M, int S>
__host__ __device__ __forceinline__ constexpr unsigned swz(unsigned off) {
    return off ^ ((off >> S) & (((1u << B) - 1u) << M));
}

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ldmatrix: lanes 8j..8j+7 give the row addresses of matrix j; lane T receives row T/4, columns
// 2(T%4), 2(T%4)+1 of each matrix (.trans: of its transpose). PTX ISA, "ldmatrix".
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const unsigned short* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const unsigned short* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

// D = A B + D with f32 accumulators: mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32.
// d[0..3] = (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) with g = lane / 4, t = lane % 4.
template <bool kBF16>
__device__ __forceinline__ void mma_f32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (kBF16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two f32 -> one register of two 16-bit values, round to nearest even (cvt.rn.{f16,bf16}x2.f32; what
// __float22half2_rn / __float22bfloat162_rn compile to). `lo` lands in bits 0-15.
template <bool kBF16>
__device__ __forceinline__ unsigned cvt_pair(float lo, float hi) {
    unsigned r;
    if constexpr (kBF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

// cp.async.cg.shared.global, 16 bytes (L2 only), and its group fence / wait.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_fence() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// tanh.approx.f32 (cutlass::fast_tanh on sm_75+).
__device__ __forceinline__ float tanh_approx(float x) {
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

}  // namespace wops
