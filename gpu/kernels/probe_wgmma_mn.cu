// probe_wgmma_mn.cu: where wgmma.mma_async reads an MN-major operand (imm-trans-a / imm-trans-b = 1) from
// shared memory, for any descriptor (host side gpu/validate_wgmma_mn.py; model flashsim/warp/matrix_desc.py).
//
// One CTA of 128 threads (one warpgroup) per case, blockIdx.x = case. Each case brings a whole image of the
// CTA's 48 KiB of shared memory (img: MN_IMG_WORDS words per case) and two descriptors whose start-address
// fields are relative to the image (the kernel adds the shared address of its array, reported in info[0]).
// Then one m64nNk16.f32.f16.f16 wgmma with scale-d false (D = A * B), and D (64 x N f32, row-major) goes to
// global memory. The host fills the operand it probes with small integers that name their own address and
// the other operand with a one-hot selector, so D spells out the address of every element read.
// PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (wgmma.mma_async: the
// imm-trans-a / imm-trans-b immediates), "Asynchronous Warpgroup Level Matrix Shared Memory Layout"
// ("Matrix Descriptor"); "fence.proxy.async" (generic-proxy writes made visible to the async proxy).

#include "wgmma.cuh"
#include "wgmma_lists.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MN_ASM(...) asm volatile(__VA_ARGS__)
#else
#define MN_ASM(...) __trap()
#endif

typedef unsigned int u32;
typedef unsigned long long u64;

#define MN_IMG_WORDS (48 * 1024 / 4)
#define MN_CALL(m, ...) m(__VA_ARGS__)

// D (M f32 registers) = A (descriptor da) * B (descriptor db), imm-trans-a TA, imm-trans-b TB; the
// accumulator operands come last (...): they hold commas
#define MN_ASM_OP(SHAPE, LIST, TA, TB, I0, I1, I2, I3, I4, I5, ...)                                          \
    MN_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %" #I2 ", 0;\nwgmma.mma_async.sync.aligned." SHAPE " {" LIST        \
           "}, %" #I0 ", %" #I1 ", p, 1, 1, " #TA ", " #TB ";\n}\n"                                            \
           : __VA_ARGS__                                                                                      \
           : "l"(da), "l"(db), "r"(0)                                                                         \
           : "memory")

__device__ __forceinline__ u32 mn_smem_address(const void* p) {
    u32 a;
    asm("{\n.reg .u64 t;\ncvta.to.shared.u64 t, %1;\ncvt.u32.u64 %0, t;\n}\n" : "=r"(a) : "l"(p));
    return a;
}

#define MN_KERNEL(NAME, N_, M_, TA, TB)                                                                       \
    extern "C" __global__ void __launch_bounds__(128) NAME(const u32* __restrict__ img, u64 da, u64 db,      \
                                                          u32* __restrict__ D, u32* __restrict__ info) {     \
        __shared__ __align__(1024) u32 mn_smem[MN_IMG_WORDS];                                                 \
        const int tid = threadIdx.x;                                                                          \
        const u32* src = img + (u64)blockIdx.x * MN_IMG_WORDS;                                               \
        for (int i = tid; i < MN_IMG_WORDS; i += 128) mn_smem[i] = src[i];                                    \
        const u32 base = mn_smem_address(mn_smem);                                                            \
        da += base >> 4;                                                                                      \
        db += base >> 4;                                                                                      \
        float d[M_];                                                                                          \
        _Pragma("unroll") for (int i = 0; i < M_; ++i) d[i] = 0.0f;                                           \
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");                                        \
        __syncthreads();                                                                                      \
        MN_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");                                                   \
        MN_CALL(MN_ASM_OP, "m64n" #N_ "k16.f32.f16.f16", WG_LIST_##M_, TA, TB, WG_NUMS_##M_, WG_F##M_(0));    \
        MN_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");                                            \
        MN_ASM("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");                                            \
        u32* o = D + (u64)blockIdx.x * 64 * N_;                                                               \
        _Pragma("unroll") for (int i = 0; i < M_; ++i) o[wg::d_f32_row(tid, i) * N_ + wg::d_f32_col(tid, i)] = \
            __float_as_uint(d[i]);                                                                            \
        if (tid == 0 && blockIdx.x == 0) info[0] = base;                                                      \
    }

// Kernel names: wgmma_mn_<t>_n<N>: t = a (A M-major), b (B N-major), ab (both)
MN_KERNEL(wgmma_mn_a_n64, 64, 32, 1, 0)
MN_KERNEL(wgmma_mn_b_n64, 64, 32, 0, 1)
MN_KERNEL(wgmma_mn_ab_n64, 64, 32, 1, 1)
MN_KERNEL(wgmma_mn_a_n128, 128, 64, 1, 0)
MN_KERNEL(wgmma_mn_b_n128, 128, 64, 0, 1)
MN_KERNEL(wgmma_mn_ab_n128, 128, 64, 1, 1)
