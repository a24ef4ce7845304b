// wgmma_gemm.cu: a warp-specialised Hopper GEMM, the skeleton of CUTLASS's sm_90 "KernelTmaWarpSpecialized"
// mainloop and of FlashAttention-3's: TMA loads with the 128-byte swizzle feed wgmma.mma_async from shared
// memory through a GG_STAGES-deep mbarrier pipeline; one producer warp, GG_CONSUMERS consumer warpgroups.
//
//   C (M x N, f32, row-major) = A (M x K, bf16, row-major: K-major) * B^T (B: N x K, bf16, row-major: K-major)
//
// M a multiple of GG_BM = 64 * GG_CONSUMERS, N of GG_BN = 128, K of GG_BK = 64 (K = 0 allowed: C = +0).
// Grid: (N / GG_BN, M / GG_BM), one CTA per output tile (no persistent loop). Block: 128 * (1 +
// GG_CONSUMERS) threads: warpgroup 0 is the producer (warp 0, one elected lane, issues every TMA load;
// warps 1..3 only take part in setmaxnreg), warpgroup 1 + i (i < GG_CONSUMERS) computes rows 64 i .. 64 i + 63
// of the tile with wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 (64 f32 accumulator registers a
// thread) and stores them to C with plain stores through the accumulator fragment (wgmma.cuh d_f32_row /
// d_f32_col).
//
// Shared memory (dynamic, GG_SMEM_BYTES, aligned here to 1024 bytes): GG_STAGES stages of A (GG_BM x 64
// bf16: rows of 128 bytes) and B (128 x 64 bf16), then full[GG_STAGES] and empty[GG_STAGES] mbarriers.
// Every tile starts on a 1024-byte boundary. The TMA's CU_TENSOR_MAP_SWIZZLE_128B writes row r of a box whose
// inner extent is 64 bf16 = 128 bytes at tile + 128 r with its 16-byte chunk j at chunk j ^ (r % 8) (the
// address bits [4,7) XOR bits [7,10)), which is wgmma's canonical K-major layout with the 128-byte swizzle
// (PTX ISA, "Asynchronous Warpgroup Level Matrix Shared Memory Layout": 8-row core groups 1024 bytes apart,
// stride byte offset 1024, leading byte offset unused for a swizzled K-major operand). k-step j (16 of the
// 64 K columns, 32 bytes) of a tile is the descriptor of start address tile + 32 j (wg::tile_desc(SW128, ...)
// with 128 bytes of K, as CUTLASS and DeepGEMM advance the descriptor's low word), base offset 0.
//
// Protocol (PTX ISA 8.x, "mbarrier", "cp.async.bulk.tensor", "wgmma.fence / mma_async / commit_group /
// wait_group", "setmaxnreg"):
//   full[s]   init count 1: the producer's mbarrier.arrive.expect_tx of GG_A_BYTES + GG_B_BYTES, then the two
//             TMA loads (A box {64, GG_BM} at {kt*64, m0}, B box {64, 128} at {kt*64, n0}) complete_tx them.
//   empty[s]  init count GG_CONSUMERS: one arrival per consumer warpgroup, by its thread 0, once the
//             wgmmas that read stage s have retired (CUTLASS's PipelineTmaAsync::consumer_release with a
//             cluster of one CTA: one signalling thread per consumer warpgroup).
//   (stage, phase) on each side advance per K tile and flip phase at the wrap (gg_advance); consumers wait on
//   full[stage] for parity `phase`, the producer on empty[stage] for `phase ^ 1` (a fresh barrier's phase
//   before phase 0 counts as completed, so round 0 does not wait).
//   Consumer K loop (CUTLASS's one-tile lag, K_PIPE_MMAS = 1): the first K tile is peeled: wait full,
//   wgmma.fence, 4 wgmmas (the first with scale-d 0), commit_group. Then per K tile kt >= 1: wait full,
//   wgmma.fence, 4 wgmmas, commit_group, wgmma.wait_group 1 (every group but the newest has retired, so the
//   wgmmas of tile kt - 1 no longer read their stage), thread 0 arrives on empty[stage of kt - 1]. After the
//   loop: wgmma.wait_group 0, the last stage released, the accumulators read by the epilogue. With K = 0
//   (no K tile) neither side touches a barrier and C = +0.
//   Registers (GG_CONSUMERS == 2 only, the 3-warpgroup split of FlashAttention-3 and CUTLASS): ptxas gives
//   each thread 168 registers (__launch_bounds__(384, 1)); the producer warpgroup executes setmaxnreg.dec 40,
//   each consumer warpgroup setmaxnreg.inc 232 (40 + 2 * 232 = 3 * 168). With one consumer warpgroup no
//   setmaxnreg is executed.
//
// wgmma, setmaxnreg need the architecture-specific target sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); built for
// plain sm_90 (the compile check of every kernel) they are replaced by traps, so a wrong build fails loudly.
//
// GG_MUTANT plants one bug (0: none). Each is a one-line change marked "MUTANT n" on the changed line; "@name"
// marks lines the reports point at. What a simulator should report:
//   1  the consumer's in-loop wait on full[stage] uses parity `phase ^ 1` (the producer's parity): it
//      returns at once (the phase before the current one has completed), so wgmma reads stages the TMA has
//      not filled. race (RAW: TMA write at @gg_tma_a / @gg_tma_b, wgmma read at @gg_mma; no completed
//      phase of full[stage] orders them); on the GPU C is wrong whenever a load is late (timing).
//   2  early release: thread 0 arrives on empty[prev] before wgmma.wait_group 1 (the two lines swapped):
//      the producer may refill a stage that in-flight wgmmas still read. race (WAR: wgmma read at @gg_mma,
//      TMA write at @gg_tma_a / @gg_tma_b; the release at MUTANT 2 precedes the wgmma's retirement).
//   3  the last wgmma.wait_group is 1 instead of 0 (copied from the loop): the epilogue reads accumulator
//      registers that the newest wgmma-group may still write. hazard (register: accumulator read at
//      @gg_epilogue while the group committed at @gg_commit is pending; MUTANT 3 the wait that should
//      have retired it).
//   4  empty[s] initialised with count 1 while GG_CONSUMERS = 2 warpgroups arrive: the first warpgroup's
//      release completes the phase, the producer refills the stage while the other warpgroup's wgmmas may
//      still read it, and the surplus arrivals complete later phases early. race (WAR: wgmma read at
//      @gg_mma of warpgroup 2, TMA write at @gg_tma_a / @gg_tma_b); a deadlock may follow (phase drift).
//   5  zero-work CTA: the peeled first K tile is guarded by k_tiles >= 0 instead of > 0, so with K = 0 the
//      consumers wait on full[0] for a tile that no producer loads (the producer's loop is empty).
//      deadlock (K = 0 only): consumers parked at @gg_wait_first, producer warp exited.
//   6  the producer calls mbarrier.try_wait.parity on empty[stage] once and ignores the predicate (the
//      retry loop forgotten): it refills stages without waiting for their release. race (WAR: wgmma read
//      at @gg_mma, TMA write at @gg_tma_a / @gg_tma_b); possibly an mbarrier misuse first (arrive.expect_tx
//      on full[stage] while that phase's arrivals are complete and its bytes still pending).
//   7  consumers setmaxnreg.inc 240 (GG_CONSUMERS = 2): the producer's dec to 40 frees 128 * 128 registers,
//      two increases from 168 to 240 need 2 * 128 * 72; the second warpgroup blocks in setmaxnreg forever.
//      deadlock: one consumer warpgroup parked at MUTANT 7 (setmaxnreg.inc waiting for the CTA's register
//      pool), the other at @gg_wait_full or @gg_wait_first, the producer at @gg_wait_empty.
//   8  expect_tx counts only the A tile (GG_A_BYTES; the B bytes forgotten): full[stage] completes when A
//      (or B) has landed, wgmma reads the other before it lands, and the surplus complete_tx (negative
//      tx-count) completes a later phase early; with K tiles > 2 * GG_STAGES a phase is left waiting on
//      bytes that never come. race (RAW: TMA write at @gg_tma_b / @gg_tma_a, wgmma read at @gg_mma), then
//      deadlock (consumers at @gg_wait_full).

#include "mbarrier.cuh"
#include "wgmma.cuh"

#ifndef GG_CONSUMERS
#define GG_CONSUMERS 2
#endif
#ifndef GG_STAGES
#define GG_STAGES 4
#endif
#ifndef GG_MUTANT
#define GG_MUTANT 0
#endif
#if GG_CONSUMERS < 1 || GG_CONSUMERS > 2
#error "GG_CONSUMERS must be 1 or 2"
#endif
#if GG_STAGES < 2 || GG_STAGES > 4
#error "GG_STAGES must be 2, 3 or 4"
#endif

#define GG_BM (64 * GG_CONSUMERS)
#define GG_BN 128
#define GG_BK 64
#define GG_A_BYTES (GG_BM * GG_BK * 2)
#define GG_B_BYTES (GG_BN * GG_BK * 2)
#define GG_THREADS (128 * (GG_CONSUMERS + 1))
// dynamic shared memory the host must pass: the stages, the barriers, and 1024 bytes of alignment slack
#define GG_SMEM_BYTES (GG_STAGES * (GG_A_BYTES + GG_B_BYTES) + 16 * GG_STAGES + 1024)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GG_ASM(...) asm volatile(__VA_ARGS__)
#else
#define GG_ASM(...) __trap()
#endif

// The driver's CUtensorMap (cuda.h; NVRTC cannot include it): 128 opaque bytes, 64-byte aligned.
struct alignas(64) CUtensorMap {
    unsigned long long opaque[16];
};

// PTX ISA, "cp.async.bulk.tensor": global -> shared, tile mode, box origin {c0 (K), c1 (row)}
__device__ __forceinline__ void gg_tma_load_2d(unsigned dst, const CUtensorMap* map, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}

// the accumulator operands of m64n128k16 .f32: 64 registers
#define GG_F1(i) "+f"(d[i])
#define GG_F2(i) GG_F1(i), GG_F1((i) + 1)
#define GG_F4(i) GG_F2(i), GG_F2((i) + 2)
#define GG_F8(i) GG_F4(i), GG_F4((i) + 4)
#define GG_F16(i) GG_F8(i), GG_F8((i) + 8)
#define GG_F32(i) GG_F16(i), GG_F16((i) + 16)
#define GG_F64(i) GG_F32(i), GG_F32((i) + 32)
#define GG_LIST64                                                                                              \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
    "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// D (64 x 128, f32) = A (desc da, 64 x 16) * B (desc db, 16 x 128) + (sd ? D : 0); imm-scale-a = imm-scale-b = 1,
// imm-trans-a = imm-trans-b = 0 (both K-major)
__device__ __forceinline__ void gg_wgmma(float (&d)[64], unsigned long long da, unsigned long long db, int sd) {
    GG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
           "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" GG_LIST64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
           : GG_F64(0)
           : "l"(da), "l"(db), "r"(sd)
           : "memory");
}

__device__ __forceinline__ void gg_fence() { GG_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void gg_commit() { GG_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void gg_wait() {
    GG_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// keep the compiler from moving accumulator accesses across the wgmma fences (CUTLASS's warpgroup_fence_operand)
__device__ __forceinline__ void gg_fence_operand(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// one K tile (64 columns of K, 4 k-steps of 16) of this warpgroup: A rows at a_tile, B at b_tile; the first
// k-step takes scale-d `sd`, the others accumulate
__device__ __forceinline__ void gg_mma_tile(float (&d)[64], unsigned a_tile, unsigned b_tile, int sd) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const unsigned long long da = wg::tile_desc(wg::SW128, a_tile, 64, 128, j);
        const unsigned long long db = wg::tile_desc(wg::SW128, b_tile, GG_BN, 128, j);
        gg_wgmma(d, da, db, j == 0 ? sd : 1);
    }
}

__device__ __forceinline__ void gg_advance(int& stage, unsigned& phase) {
    if (++stage == GG_STAGES) {
        stage = 0;
        phase ^= 1u;
    }
}

extern "C" __global__ void __launch_bounds__(GG_THREADS, 1) wgmma_gemm(const __grid_constant__ CUtensorMap tm_a,
                                                                      const __grid_constant__ CUtensorMap tm_b,
                                                                      float* __restrict__ c, int n, int k) {
    extern __shared__ __align__(1024) unsigned char gg_smem_raw[];
    const unsigned raw = mbar::smem(gg_smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;  // the tiles' 1024-byte boundary (the 128B swizzle's repeat)
    unsigned char* smem = gg_smem_raw + (base - raw);
    unsigned long long* full = (unsigned long long*)(smem + GG_STAGES * (GG_A_BYTES + GG_B_BYTES));
    unsigned long long* empty = full + GG_STAGES;
    const unsigned a_smem = base, b_smem = base + GG_STAGES * GG_A_BYTES;  // stage s: + s * GG_{A,B}_BYTES

    const int wgi = threadIdx.x / 128, tid = threadIdx.x % 128, warp = threadIdx.x / 32;
    const int k_tiles = k / GG_BK;
    const int m0 = blockIdx.y * GG_BM, n0 = blockIdx.x * GG_BN;

    if (threadIdx.x == 0) {
        for (int s = 0; s < GG_STAGES; ++s) {
            mbar::init(mbar::smem(&full[s]), 1);  // the producer's arrive.expect_tx
#if GG_MUTANT == 4
            mbar::init(mbar::smem(&empty[s]), 1);  // MUTANT 4
#else
            mbar::init(mbar::smem(&empty[s]), GG_CONSUMERS);  // one arrival per consumer warpgroup
#endif
        }
        mbar::fence_init();
    }
    __syncthreads();

    if (wgi == 0) {
        // producer warpgroup: gives registers back, then warp 0's elected lane loads every K tile
#if GG_CONSUMERS == 2
        GG_ASM("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
#endif
        if (warp == 0) {
            unsigned leader;
            if (mbar::elect(0xFFFFFFFFu, &leader)) {
                int stage = 0;
                unsigned phase = 0;
                for (int kt = 0; kt < k_tiles; ++kt) {
#if GG_MUTANT == 6
                    (void)mbar::try_parity(mbar::smem(&empty[stage]), phase ^ 1u);  // MUTANT 6
#else
                    mbar::wait(mbar::smem(&empty[stage]), phase ^ 1u);  // @gg_wait_empty
#endif
#if GG_MUTANT == 8
                    mbar::arrive_expect_tx(mbar::smem(&full[stage]), GG_A_BYTES);  // MUTANT 8
#else
                    mbar::arrive_expect_tx(mbar::smem(&full[stage]), GG_A_BYTES + GG_B_BYTES);
#endif
                    const unsigned bar = mbar::smem(&full[stage]);
                    gg_tma_load_2d(a_smem + stage * GG_A_BYTES, &tm_a, kt * GG_BK, m0, bar);  // @gg_tma_a
                    gg_tma_load_2d(b_smem + stage * GG_B_BYTES, &tm_b, kt * GG_BK, n0, bar);  // @gg_tma_b
                    gg_advance(stage, phase);
                }
            }
        }
    } else {
        // consumer warpgroup ci: rows 64 ci .. 64 ci + 63 of the tile
#if GG_CONSUMERS == 2
#if GG_MUTANT == 7
        GG_ASM("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");  // MUTANT 7
#else
        GG_ASM("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
#endif
#endif
        const int ci = wgi - 1;
        const unsigned a_rows = a_smem + ci * (64 * GG_BK * 2);  // this warpgroup's 64 rows of the A tile
        float d[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) d[i] = 0.0f;
        int stage = 0;
        unsigned phase = 0;
#if GG_MUTANT == 5
        if (k_tiles >= 0) {  // MUTANT 5
#else
        if (k_tiles > 0) {
#endif
            mbar::wait(mbar::smem(&full[stage]), phase);  // @gg_wait_first
            gg_fence_operand(d);
            gg_fence();
            gg_mma_tile(d, a_rows + stage * GG_A_BYTES, b_smem + stage * GG_B_BYTES, 0);  // @gg_mma_first
            gg_commit();
            gg_fence_operand(d);
            int prev = stage;
            gg_advance(stage, phase);
            for (int kt = 1; kt < k_tiles; ++kt) {
#if GG_MUTANT == 1
                mbar::wait(mbar::smem(&full[stage]), phase ^ 1u);  // MUTANT 1
#else
                mbar::wait(mbar::smem(&full[stage]), phase);  // @gg_wait_full
#endif
                gg_fence_operand(d);
                gg_fence();
                gg_mma_tile(d, a_rows + stage * GG_A_BYTES, b_smem + stage * GG_B_BYTES, 1);  // @gg_mma
                gg_commit();  // @gg_commit
#if GG_MUTANT == 2
                if (tid == 0) mbar::arrive(mbar::smem(&empty[prev]));  // MUTANT 2
                gg_wait<1>();
#else
                gg_wait<1>();  // the wgmmas of K tile kt - 1 have retired: stage prev is no longer read
                if (tid == 0) mbar::arrive(mbar::smem(&empty[prev]));  // @gg_release
#endif
                gg_fence_operand(d);
                prev = stage;
                gg_advance(stage, phase);
            }
#if GG_MUTANT == 3
            gg_wait<1>();  // MUTANT 3
#else
            gg_wait<0>();
#endif
            gg_fence_operand(d);
            if (tid == 0) mbar::arrive(mbar::smem(&empty[prev]));  // @gg_release_last
        }
        // epilogue: the accumulator fragment to C with plain stores
        float* crow = c + (size_t)(m0 + 64 * ci) * n + n0;
#pragma unroll
        for (int i = 0; i < 64; ++i)
            crow[(size_t)wg::d_f32_row(tid, i) * n + wg::d_f32_col(tid, i)] = d[i];  // @gg_epilogue
    }
}
