// probe_wgmma.cu: wgmma.mma_async on one warpgroup per case, to measure its arithmetic and check its
// fragment and shared-memory layouts bit for bit (flashsim/numerics/wgmma.py, flashsim/warp/fragments.py,
// flashsim/warp/matrix_desc.py; host side gpu/validate_wgmma.py).
//
// wgmma needs the architecture-specific target: build with -arch=sm_90a. Built for plain sm_90 (as the
// compile check of every kernel does) the wgmma instructions are left out and every kernel traps, so a
// wrong build fails loudly instead of returning garbage.
//
// One CTA of 128 threads (one warpgroup) per case, blockIdx.x = case. Inputs, row-major bit patterns:
//   A (cases, 64, K), B (cases, K, N) (K x N), C (cases, 64, N): 2-byte elements for f16/bf16, 1 byte for
//   e4m3/e5m2; C and D 4 bytes (f32 accumulator) or 2 bytes (f16); K = k_steps * (32 / element bytes).
// Each case: A (".ss" kernels) and B are copied into shared memory as K-major tiles in arrangement
// arr_a / arr_b (wg::Arrangement: no swizzle, K- or MN-adjacent core matrices; 32B, 64B, 128B
// swizzle), C into the accumulator registers (and A into registers for the ".rs" kernels) with the
// fragment tables of wgmma.cuh; then
//   fence.proxy.async.shared::cta; bar.sync; wgmma.fence;
//   k_steps x wgmma.mma_async (step s reads bytes 32s..32s+31 of K through the tiles' descriptors;
//             scale-d = scale_d for step 0, true after: the chain accumulates in the same registers);
//   wgmma.commit_group; wgmma.wait_group 0;
// and D goes back to global memory. The tiles start on 1024-byte boundaries (the swizzles are tied to
// absolute shared-memory addresses); *err gets bit 0 if that arithmetic fails, bit 1 for bad k_steps or
// arrangements (launch with all of err's bits clear).
// PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (wgmma.fence,
// wgmma.mma_async, wgmma.commit_group, wgmma.wait_group), "Register Fragments", "Asynchronous Warpgroup
// Level Matrix Shared Memory Layout" (the canonical layouts, "Matrix Descriptor"); "Parallel Synchronization
// and Communication Instructions: fence" (fence.proxy.async: generic-proxy writes made visible to the async
// proxy).

#include "wgmma.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ASM(...) asm volatile(__VA_ARGS__)
#else
#define WG_ASM(...) __trap()
#endif

#define WG_MAX_STEPS 4

#include "wgmma_lists.cuh"

#define WG_CALL(m, ...) m(__VA_ARGS__)

// immediates after scale-d: imm-scale-a = imm-scale-b = 1 (no negation), imm-trans-a/b = 0 (K-major);
// fp8 forms have no transpose immediates, the register-A form no imm-trans-a
#define WG_TAIL_SS16 ", 1, 1, 0, 0"
#define WG_TAIL_RS16 ", 1, 1, 0"
#define WG_TAIL_FP8 ", 1, 1"

// One operation: D (M registers) += A (descriptor da) * B (descriptor db), scale-d = sd != 0; the
// accumulator operands come last (...): they hold commas
#define WG_SS_ASM(SHAPE, LIST, TAIL, I0, I1, I2, I3, I4, I5, ...)                                           \
    WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %" #I2 ", 0;\nwgmma.mma_async.sync.aligned." SHAPE " {" LIST        \
           "}, %" #I0 ", %" #I1 ", p" TAIL ";\n}\n"                                                          \
           : __VA_ARGS__                                                                                     \
           : "l"(da), "l"(db), "r"(sd)                                                                       \
           : "memory")
// D += A (registers a[0..3]) * B (descriptor db)
#define WG_RS_ASM(SHAPE, LIST, TAIL, I0, I1, I2, I3, I4, I5, ...)                                           \
    WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %" #I5 ", 0;\nwgmma.mma_async.sync.aligned." SHAPE " {" LIST        \
           "}, {%" #I0 ", %" #I1 ", %" #I2 ", %" #I3 "}, %" #I4 ", p" TAIL ";\n}\n"                         \
           : __VA_ARGS__                                                                                     \
           : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(sd)                                   \
           : "memory")

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// KIND: WG_SS or WG_RS; N; M accumulator registers; CON: F (f32 D) or R (f16 D); ESZ: input bytes;
// SHAPE: "m64n<N>k<K>.<dtype>.<atype>.<btype>"; TAIL: the immediates
#define WG_KERNEL(NAME, KIND, N_, M_, CON, ESZ_, SHAPE, TAIL)                                                \
    struct NAME##_op {                                                                                       \
        static constexpr int N = N_, M = M_, ESZ = ESZ_;                                                     \
        static constexpr bool A_REGS = KIND##_A_REGS, F16_D = WG_F16_D_##CON;                               \
        typedef WG_ACC_##CON acc_t;                                                                          \
        static __device__ __forceinline__ void mma(acc_t (&d)[M_], u64 da, const u32 (&a)[4], u64 db, int sd) { \
            (void)da;                                                                                        \
            (void)a;                                                                                         \
            WG_CALL(KIND##_ASM, SHAPE, WG_LIST_##M_, TAIL, WG_NUMS_##M_, WG_##CON##M_(0));                   \
        }                                                                                                    \
    };                                                                                                       \
    extern "C" __global__ void __launch_bounds__(128) NAME(const u8* __restrict__ A, const u8* __restrict__ B, \
                                                          const void* __restrict__ C, void* __restrict__ D,  \
                                                          int k_steps, int arr_a, int arr_b, int scale_d,    \
                                                          u32* __restrict__ err) {                           \
        probe<NAME##_op>(A, B, C, D, k_steps, arr_a, arr_b, scale_d, err);                                  \
    }

#define WG_SS_A_REGS false
#define WG_RS_A_REGS true
#define WG_F16_D_F false
#define WG_F16_D_R true
#define WG_ACC_F float
#define WG_ACC_R u32

__device__ __forceinline__ u32 smem_address(const void* p) {
    u32 a;
    asm("{\n.reg .u64 t;\ncvta.to.shared.u64 t, %1;\ncvt.u32.u64 %0, t;\n}\n" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void set_error(u32* err, u32 bits) {
    asm volatile("red.global.or.b32 [%0], %1;" ::"l"(err), "r"(bits) : "memory");
}

template <class Op>
__device__ __forceinline__ void probe(const u8* A, const u8* B, const void* C, void* D, int k_steps, int arr_a,
                                      int arr_b, int scale_d, u32* err) {
    constexpr int N = Op::N, M = Op::M, ESZ = Op::ESZ;
    // the tiles start on 1024-byte boundaries (the 128B swizzle's repeat): over-allocated and aligned here
    __shared__ __align__(128) u8 sa_raw[64 * 32 * WG_MAX_STEPS + 1024];
    __shared__ __align__(128) u8 sb_raw[N * 32 * WG_MAX_STEPS + 1024];
    const int tid = threadIdx.x;
    if (k_steps < 1 || k_steps > WG_MAX_STEPS || arr_a < 0 || arr_a > 4 || arr_b < 0 || arr_b > 4) {
        if (tid == 0) set_error(err, 2u);
        return;  // uniform over the CTA
    }
    const u32 raw_a = smem_address(sa_raw), raw_b = smem_address(sb_raw);
    const u32 base_a = (raw_a + 1023u) & ~1023u, base_b = (raw_b + 1023u) & ~1023u;
    u8* sa = sa_raw + (base_a - raw_a);
    u8* sb = sb_raw + (base_b - raw_b);
    if ((base_a | base_b) & 1023u) {
        if (tid == 0) set_error(err, 1u);
        return;
    }
    const int kbytes = 32 * k_steps, K = kbytes / ESZ;
    const u8* a_g = A + (u64)blockIdx.x * 64 * kbytes;
    const u8* b_g = B + (u64)blockIdx.x * N * kbytes;

    // operands into shared memory, byte by byte (element k of a row little-endian at bytes k*ESZ..)
    if (!Op::A_REGS) {
        for (int e = tid; e < 64 * kbytes; e += 128) {
            const int row = e / kbytes, kb = e % kbytes;
            sa[wg::tile_address(arr_a, base_a, 64, kbytes, row, kb) - base_a] = a_g[row * kbytes + kb];
        }
    }
    for (int e = tid; e < N * kbytes; e += 128) {
        const int n = e / kbytes, kb = e % kbytes;  // B^T: row n of the tile is column n of B
        sb[wg::tile_address(arr_b, base_b, N, kbytes, n, kb) - base_b] = b_g[((kb / ESZ) * N + n) * ESZ + kb % ESZ];
    }

    // C into the accumulator registers
    typename Op::acc_t d[M];
    if (Op::F16_D) {
        const u16* c = (const u16*)C + (u64)blockIdx.x * 64 * N;
#pragma unroll
        for (int r = 0; r < M; ++r) {
            const u16* p = c + wg::d_f16_row(tid, r) * N + wg::d_f16_col(tid, r, 0);
            d[r] = (u32)p[0] | ((u32)p[1] << 16);
        }
    } else {
        const u32* c = (const u32*)C + (u64)blockIdx.x * 64 * N;
#pragma unroll
        for (int i = 0; i < M; ++i) d[i] = __uint_as_float(c[wg::d_f32_row(tid, i) * N + wg::d_f32_col(tid, i)]);
    }

    // A into registers (register-A kernels): step s, register r
    u32 ar[WG_MAX_STEPS][4] = {};
    if (Op::A_REGS) {
#pragma unroll
        for (int s = 0; s < WG_MAX_STEPS; ++s) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                u32 v = 0;
                if (s < k_steps) {
                    if (ESZ == 2) {
                        const u16* a16 = (const u16*)a_g + wg::a_k16_row(tid, r) * K + 16 * s;
                        v = (u32)a16[wg::a_k16_col(tid, r, 0)] | ((u32)a16[wg::a_k16_col(tid, r, 1)] << 16);
                    } else {
                        const u8* a8 = a_g + wg::a_k32_row(tid, r) * K + 32 * s;
#pragma unroll
                        for (int q = 0; q < 4; ++q) v |= (u32)a8[wg::a_k32_col(tid, r, q)] << (8 * q);
                    }
                }
                ar[s][r] = v;
            }
        }
    }

    // the shared-memory writes (generic proxy) become visible to wgmma (async proxy), then to every thread
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    WG_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int s = 0; s < WG_MAX_STEPS; ++s) {
        if (s < k_steps) {
            const u64 da = Op::A_REGS ? 0ull : wg::tile_desc(arr_a, base_a, 64, kbytes, s);
            const u64 db = wg::tile_desc(arr_b, base_b, N, kbytes, s);
            Op::mma(d, da, ar[s], db, s == 0 ? scale_d : 1);
        }
    }
    WG_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    WG_ASM("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");

    if (Op::F16_D) {
        u16* o = (u16*)D + (u64)blockIdx.x * 64 * N;
#pragma unroll
        for (int r = 0; r < M; ++r) {
            u16* p = o + wg::d_f16_row(tid, r) * N + wg::d_f16_col(tid, r, 0);
            p[0] = (u16)((u32)d[r] & 0xFFFFu);
            p[1] = (u16)((u32)d[r] >> 16);
        }
    } else {
        u32* o = (u32*)D + (u64)blockIdx.x * 64 * N;
#pragma unroll
        for (int i = 0; i < M; ++i) o[wg::d_f32_row(tid, i) * N + wg::d_f32_col(tid, i)] = __float_as_uint(d[i]);
    }
}

// Kernel names: wgmma_<ss|rs>_m64n<N>k<K>_<dtype>_<atype>_<btype> (gpu/validate_wgmma.py: FORMS).
// .ss: A and B from shared memory; .rs: A from registers, B from shared memory.
// f16 -> f32
WG_KERNEL(wgmma_ss_m64n8k16_f32_f16_f16, WG_SS, 8, 4, F, 2, "m64n8k16.f32.f16.f16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n16k16_f32_f16_f16, WG_SS, 16, 8, F, 2, "m64n16k16.f32.f16.f16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n64k16_f32_f16_f16, WG_SS, 64, 32, F, 2, "m64n64k16.f32.f16.f16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n128k16_f32_f16_f16, WG_SS, 128, 64, F, 2, "m64n128k16.f32.f16.f16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n256k16_f32_f16_f16, WG_SS, 256, 128, F, 2, "m64n256k16.f32.f16.f16", WG_TAIL_SS16)
// bf16 -> f32
WG_KERNEL(wgmma_ss_m64n8k16_f32_bf16_bf16, WG_SS, 8, 4, F, 2, "m64n8k16.f32.bf16.bf16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n16k16_f32_bf16_bf16, WG_SS, 16, 8, F, 2, "m64n16k16.f32.bf16.bf16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n64k16_f32_bf16_bf16, WG_SS, 64, 32, F, 2, "m64n64k16.f32.bf16.bf16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n128k16_f32_bf16_bf16, WG_SS, 128, 64, F, 2, "m64n128k16.f32.bf16.bf16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n256k16_f32_bf16_bf16, WG_SS, 256, 128, F, 2, "m64n256k16.f32.bf16.bf16", WG_TAIL_SS16)
// f16 -> f16
WG_KERNEL(wgmma_ss_m64n8k16_f16_f16_f16, WG_SS, 8, 2, R, 2, "m64n8k16.f16.f16.f16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n16k16_f16_f16_f16, WG_SS, 16, 4, R, 2, "m64n16k16.f16.f16.f16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n64k16_f16_f16_f16, WG_SS, 64, 16, R, 2, "m64n64k16.f16.f16.f16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n128k16_f16_f16_f16, WG_SS, 128, 32, R, 2, "m64n128k16.f16.f16.f16", WG_TAIL_SS16)
WG_KERNEL(wgmma_ss_m64n256k16_f16_f16_f16, WG_SS, 256, 64, R, 2, "m64n256k16.f16.f16.f16", WG_TAIL_SS16)
// e4m3 -> f32
WG_KERNEL(wgmma_ss_m64n8k32_f32_e4m3_e4m3, WG_SS, 8, 4, F, 1, "m64n8k32.f32.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n16k32_f32_e4m3_e4m3, WG_SS, 16, 8, F, 1, "m64n16k32.f32.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n64k32_f32_e4m3_e4m3, WG_SS, 64, 32, F, 1, "m64n64k32.f32.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n128k32_f32_e4m3_e4m3, WG_SS, 128, 64, F, 1, "m64n128k32.f32.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n256k32_f32_e4m3_e4m3, WG_SS, 256, 128, F, 1, "m64n256k32.f32.e4m3.e4m3", WG_TAIL_FP8)
// e5m2 -> f32
WG_KERNEL(wgmma_ss_m64n8k32_f32_e5m2_e5m2, WG_SS, 8, 4, F, 1, "m64n8k32.f32.e5m2.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n16k32_f32_e5m2_e5m2, WG_SS, 16, 8, F, 1, "m64n16k32.f32.e5m2.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n64k32_f32_e5m2_e5m2, WG_SS, 64, 32, F, 1, "m64n64k32.f32.e5m2.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n128k32_f32_e5m2_e5m2, WG_SS, 128, 64, F, 1, "m64n128k32.f32.e5m2.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n256k32_f32_e5m2_e5m2, WG_SS, 256, 128, F, 1, "m64n256k32.f32.e5m2.e5m2", WG_TAIL_FP8)
// e4m3 x e5m2 -> f32
WG_KERNEL(wgmma_ss_m64n8k32_f32_e4m3_e5m2, WG_SS, 8, 4, F, 1, "m64n8k32.f32.e4m3.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n16k32_f32_e4m3_e5m2, WG_SS, 16, 8, F, 1, "m64n16k32.f32.e4m3.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n64k32_f32_e4m3_e5m2, WG_SS, 64, 32, F, 1, "m64n64k32.f32.e4m3.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n128k32_f32_e4m3_e5m2, WG_SS, 128, 64, F, 1, "m64n128k32.f32.e4m3.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n256k32_f32_e4m3_e5m2, WG_SS, 256, 128, F, 1, "m64n256k32.f32.e4m3.e5m2", WG_TAIL_FP8)
// e4m3 -> f16
WG_KERNEL(wgmma_ss_m64n8k32_f16_e4m3_e4m3, WG_SS, 8, 2, R, 1, "m64n8k32.f16.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n16k32_f16_e4m3_e4m3, WG_SS, 16, 4, R, 1, "m64n16k32.f16.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n64k32_f16_e4m3_e4m3, WG_SS, 64, 16, R, 1, "m64n64k32.f16.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n128k32_f16_e4m3_e4m3, WG_SS, 128, 32, R, 1, "m64n128k32.f16.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n256k32_f16_e4m3_e4m3, WG_SS, 256, 64, R, 1, "m64n256k32.f16.e4m3.e4m3", WG_TAIL_FP8)
// e5m2 -> f16
WG_KERNEL(wgmma_ss_m64n8k32_f16_e5m2_e5m2, WG_SS, 8, 2, R, 1, "m64n8k32.f16.e5m2.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n16k32_f16_e5m2_e5m2, WG_SS, 16, 4, R, 1, "m64n16k32.f16.e5m2.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n64k32_f16_e5m2_e5m2, WG_SS, 64, 16, R, 1, "m64n64k32.f16.e5m2.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n128k32_f16_e5m2_e5m2, WG_SS, 128, 32, R, 1, "m64n128k32.f16.e5m2.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n256k32_f16_e5m2_e5m2, WG_SS, 256, 64, R, 1, "m64n256k32.f16.e5m2.e5m2", WG_TAIL_FP8)
// e5m2 x e4m3 -> f32
WG_KERNEL(wgmma_ss_m64n8k32_f32_e5m2_e4m3, WG_SS, 8, 4, F, 1, "m64n8k32.f32.e5m2.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n16k32_f32_e5m2_e4m3, WG_SS, 16, 8, F, 1, "m64n16k32.f32.e5m2.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n64k32_f32_e5m2_e4m3, WG_SS, 64, 32, F, 1, "m64n64k32.f32.e5m2.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n128k32_f32_e5m2_e4m3, WG_SS, 128, 64, F, 1, "m64n128k32.f32.e5m2.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n256k32_f32_e5m2_e4m3, WG_SS, 256, 128, F, 1, "m64n256k32.f32.e5m2.e4m3", WG_TAIL_FP8)
// e5m2 x e4m3 -> f16
WG_KERNEL(wgmma_ss_m64n8k32_f16_e5m2_e4m3, WG_SS, 8, 2, R, 1, "m64n8k32.f16.e5m2.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n16k32_f16_e5m2_e4m3, WG_SS, 16, 4, R, 1, "m64n16k32.f16.e5m2.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n64k32_f16_e5m2_e4m3, WG_SS, 64, 16, R, 1, "m64n64k32.f16.e5m2.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n128k32_f16_e5m2_e4m3, WG_SS, 128, 32, R, 1, "m64n128k32.f16.e5m2.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n256k32_f16_e5m2_e4m3, WG_SS, 256, 64, R, 1, "m64n256k32.f16.e5m2.e4m3", WG_TAIL_FP8)
// e4m3 x e5m2 -> f16
WG_KERNEL(wgmma_ss_m64n8k32_f16_e4m3_e5m2, WG_SS, 8, 2, R, 1, "m64n8k32.f16.e4m3.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n16k32_f16_e4m3_e5m2, WG_SS, 16, 4, R, 1, "m64n16k32.f16.e4m3.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n64k32_f16_e4m3_e5m2, WG_SS, 64, 16, R, 1, "m64n64k32.f16.e4m3.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n128k32_f16_e4m3_e5m2, WG_SS, 128, 32, R, 1, "m64n128k32.f16.e4m3.e5m2", WG_TAIL_FP8)
WG_KERNEL(wgmma_ss_m64n256k32_f16_e4m3_e5m2, WG_SS, 256, 64, R, 1, "m64n256k32.f16.e4m3.e5m2", WG_TAIL_FP8)
// register A: f16 -> f32
WG_KERNEL(wgmma_rs_m64n8k16_f32_f16_f16, WG_RS, 8, 4, F, 2, "m64n8k16.f32.f16.f16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n16k16_f32_f16_f16, WG_RS, 16, 8, F, 2, "m64n16k16.f32.f16.f16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n64k16_f32_f16_f16, WG_RS, 64, 32, F, 2, "m64n64k16.f32.f16.f16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n128k16_f32_f16_f16, WG_RS, 128, 64, F, 2, "m64n128k16.f32.f16.f16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n256k16_f32_f16_f16, WG_RS, 256, 128, F, 2, "m64n256k16.f32.f16.f16", WG_TAIL_RS16)
// register A: bf16 -> f32
WG_KERNEL(wgmma_rs_m64n8k16_f32_bf16_bf16, WG_RS, 8, 4, F, 2, "m64n8k16.f32.bf16.bf16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n16k16_f32_bf16_bf16, WG_RS, 16, 8, F, 2, "m64n16k16.f32.bf16.bf16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n64k16_f32_bf16_bf16, WG_RS, 64, 32, F, 2, "m64n64k16.f32.bf16.bf16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n128k16_f32_bf16_bf16, WG_RS, 128, 64, F, 2, "m64n128k16.f32.bf16.bf16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n256k16_f32_bf16_bf16, WG_RS, 256, 128, F, 2, "m64n256k16.f32.bf16.bf16", WG_TAIL_RS16)
// register A: f16 -> f16
WG_KERNEL(wgmma_rs_m64n8k16_f16_f16_f16, WG_RS, 8, 2, R, 2, "m64n8k16.f16.f16.f16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n16k16_f16_f16_f16, WG_RS, 16, 4, R, 2, "m64n16k16.f16.f16.f16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n64k16_f16_f16_f16, WG_RS, 64, 16, R, 2, "m64n64k16.f16.f16.f16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n128k16_f16_f16_f16, WG_RS, 128, 32, R, 2, "m64n128k16.f16.f16.f16", WG_TAIL_RS16)
WG_KERNEL(wgmma_rs_m64n256k16_f16_f16_f16, WG_RS, 256, 64, R, 2, "m64n256k16.f16.f16.f16", WG_TAIL_RS16)
// register A: e4m3 -> f32
WG_KERNEL(wgmma_rs_m64n8k32_f32_e4m3_e4m3, WG_RS, 8, 4, F, 1, "m64n8k32.f32.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_rs_m64n16k32_f32_e4m3_e4m3, WG_RS, 16, 8, F, 1, "m64n16k32.f32.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_rs_m64n64k32_f32_e4m3_e4m3, WG_RS, 64, 32, F, 1, "m64n64k32.f32.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_rs_m64n128k32_f32_e4m3_e4m3, WG_RS, 128, 64, F, 1, "m64n128k32.f32.e4m3.e4m3", WG_TAIL_FP8)
WG_KERNEL(wgmma_rs_m64n256k32_f32_e4m3_e4m3, WG_RS, 256, 128, F, 1, "m64n256k32.f32.e4m3.e4m3", WG_TAIL_FP8)
