// tma_pipeline.cu: a warp-specialised TMA + mbarrier copy pipeline with a TMA store, the data path of
// FlashAttention-3's and CUTLASS's sm_90 kernels without the math. One producer warp loads 2D tiles of a
// global f32 tensor with the tensor memory accelerator (cp.async.bulk.tensor) plus one halo row with a
// plain bulk copy (cp.async.bulk); two consumer warps compute from each tile, write one result with plain
// stores and stage a second result in shared memory that one lane writes back with a TMA store.
//
// Tensors: x, out, y: (rows, cols) f32, row-major; rows a multiple of TP_BR, cols of TP_BC. Grid: one CTA
// per column strip (cols / TP_BC CTAs); CTA b walks down its strip, tile t = rows t*TP_BR.. t*TP_BR+15,
// columns b*TP_BC.. b*TP_BC+31. Block: 96 threads, warp 0 produces, warps 1 and 2 consume (warp 1 rows
// 0..7 of a tile, warp 2 rows 8..15; lane = column). With i, j global indices:
//   out[i][j] = 2 * x[i][j] + x[i][b*TP_BC + (j + 1) % TP_BC]     (right neighbour within the strip)
//   y[i][j]   = 2 * x[i][j] + x[(i + 1) % rows][j]                 (the row below; the last row wraps)
// each one FFMA (__fmaf_rn): 2x is exact, so the result is the correctly rounded f32 sum whatever the
// schedule, and numpy's float32 2*x + n gives the same bits (inputs normal, no subnormal can arise).
//
// Shared memory: TP_STAGES stages of (TP_BR + 1) rows of 128 bytes (the tile, then the halo: the first
// row of the next tile, row (t+1)*TP_BR % rows of x), a 2 KB staging tile ybuf for the TMA store, and two
// mbarriers per stage.
//
// Protocol (PTX ISA 8.x, "Parallel Synchronization and Communication Instructions: mbarrier"):
//   full[s]  init count 1: the producer's mbarrier.arrive.expect_tx of TP_TILE_BYTES + TP_HALO_BYTES, then
//            the TMA load (complete_tx of 2048 bytes) and the halo bulk copy (complete_tx of 128 bytes)
//            complete the phase when both have landed.
//   empty[s] init count 2: one mbarrier.arrive per consumer warp (lane 0, after __syncwarp: every lane of
//            the warp has read the stage into registers).
//   Stage/phase: each side keeps (stage, phase), advancing stage 0..TP_STAGES-1 and flipping phase at the
//   wrap (tp_advance). Consumers wait on full[stage] for parity `phase`; the producer waits on
//   empty[stage] for parity `phase ^ 1`, which a fresh barrier satisfies in round 0 (the phase before
//   phase 0 counts as completed).
//   TMA store (PTX ISA, "cp.async.bulk.tensor", "cp.async.bulk.commit_group", "cp.async.bulk.wait_group",
//   "membar/fence": fence.proxy.async): per tile, thread 32 (warp 1, lane 0; it issues every store) waits
//   with cp.async.bulk.wait_group.read 0 until the previous store has read ybuf; named barrier 1 (64
//   consumer threads); every consumer thread writes its part of ybuf and executes
//   fence.proxy.async.shared::cta (its generic-proxy writes become visible to the async proxy); named
//   barrier 1 again; thread 32 issues cp.async.bulk.tensor.2d.global.shared::cta.bulk_group and
//   cp.async.bulk.commit_group. At the end thread 32 waits with cp.async.bulk.wait_group 0.
//   Tensor maps (PTX ISA, "Tensor Map"): tm_x and tm_y, f32, dims {cols, rows}, row stride cols * 4
//   bytes, box {TP_BC, TP_BR}, no interleave, no swizzle, out-of-bounds fill zeros; passed as
//   const __grid_constant__ kernel parameters (the TMA reads them through their generic address).
//
// TP_MUTANT plants one bug (0: none). Each is a one-line change marked "MUTANT n" on the changed line;
// "@name" marks lines the reports point at. On a GPU the deadlocks hang (gpu/validate_hopper_kernels.py runs
// them in a subprocess with a timeout). What a simulator should report:
//   1  producer waits on empty[stage] with parity `phase` instead of `phase ^ 1` (the usual off-by-one):
//      it waits for phase 0 of empty[0], which needs the consumers, which wait for the first tile.
//      deadlock: producer parked at MUTANT 1, consumers at @tp_wait_full (tile 0).
//   2  consumer warp 2 never arrives on empty[stage]: every empty phase gets 1 of its 2 arrivals.
//      deadlock in round 1: producer parked at @tp_wait_empty (tile TP_STAGES), empty[0] pending 1.
//   3  expect_tx announces two tiles (2 * TP_TILE_BYTES + TP_HALO_BYTES, off by a tile): full[0] keeps
//      2048 bytes pending and never completes. deadlock: consumers at @tp_wait_full (tile 0).
//   4  __threadfence_block() (a fence of the generic proxy only) where fence.proxy.async.shared::cta belongs:
//      nothing orders the consumers' st.shared to ybuf before the TMA store's read of ybuf.
//      race (cross-proxy RAW: generic-proxy writes at @tp_ybuf_write, async-proxy read by the TMA store at
//      @tp_tma_store, no proxy fence). The GPU usually still writes the right bytes.
//   5  the producer advances its (stage, phase) twice per tile: tile 1 goes to stage 2 (back to stage 0,
//      phase flipped, when TP_STAGES is 2), the consumers wait for stage 1 forever.
//      deadlock: consumers at @tp_wait_full (tile 1), producer at @tp_wait_empty.
//   6  empty[s] initialised with count 3 while 2 consumer warps arrive: no empty phase completes.
//      deadlock in round 1: producer parked at @tp_wait_empty (tile TP_STAGES), empty[0] pending 1.
//   7  the halo row is (t + 1) * TP_BR without the wrap: the last tile's bulk copy reads row `rows`, 128
//      bytes past the end of x (a plain cp.async.bulk has no bounds and no fill, unlike the TMA load).
//      fault: out-of-bounds global read by the cp.async.bulk at @tp_bulk_halo (its source computed at
//      MUTANT 7), the last tile of every CTA.
//   8  the consumer reads its first value of the stage before waiting on full[stage] (a load hoisted above
//      the wait). race (RAW: the TMA write at @tp_tma_load and the read at MUTANT 8, no completed phase of
//      full[stage] orders them); on the GPU stale or uninitialised values wherever the load wins.
//   9  thread 32 waits with cp.async.bulk.wait_group.read 1 instead of 0 before ybuf is rewritten (right
//      for two staging buffers, wrong for one): the TMA store of tile t - 1 may still be reading it.
//      race (WAR: async-proxy read by the store at @tp_tma_store, generic write at @tp_ybuf_write).

#include "mbarrier.cuh"

#ifndef TP_STAGES
#define TP_STAGES 4
#endif
#ifndef TP_MUTANT
#define TP_MUTANT 0
#endif
#if TP_STAGES < 2 || TP_STAGES > 4
#error "TP_STAGES must be 2, 3 or 4"
#endif

#define TP_BR 16                                // rows per tile
#define TP_BC 32                                // columns per tile: one 128-byte row
#define TP_TILE_BYTES (TP_BR * TP_BC * 4)       // 2048: what the TMA load brings
#define TP_HALO_BYTES (TP_BC * 4)               // 128: the halo row the bulk copy brings
#define TP_STAGE_FLOATS ((TP_BR + 1) * TP_BC)   // 2176 bytes, a multiple of 128

// The driver's CUtensorMap (cuda.h; NVRTC cannot include it): 128 opaque bytes, 64-byte aligned.
struct alignas(64) CUtensorMap {
    unsigned long long opaque[16];
};

// PTX ISA, "cp.async.bulk.tensor": global -> shared, tile mode, box origin {c0 (innermost), c1}; complete_tx
// of the box's bytes on the mbarrier at `bar` when they have landed
__device__ __forceinline__ void tp_tma_load_2d(unsigned dst, const CUtensorMap* map, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}

// shared -> global, tile mode, completion tracked by the executing thread's bulk async-groups
__device__ __forceinline__ void tp_tma_store_2d(const CUtensorMap* map, int c0, int c1, unsigned src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
                 ::"l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}

__device__ __forceinline__ void tp_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void tp_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void tp_wait_read1() { asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); }
__device__ __forceinline__ void tp_wait_all0() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void tp_consumer_bar() { asm volatile("bar.sync 1, 64;" ::: "memory"); }

// the pipeline state: stage 0..TP_STAGES-1, phase flips at the wrap
__device__ __forceinline__ void tp_advance(int& stage, unsigned& phase) {
    if (++stage == TP_STAGES) {
        stage = 0;
        phase ^= 1u;
    }
}

extern "C" __global__ void __launch_bounds__(96) tma_pipeline(const __grid_constant__ CUtensorMap tm_x,
                                                              const __grid_constant__ CUtensorMap tm_y,
                                                              const float* __restrict__ x, float* __restrict__ out,
                                                              int rows, int cols) {
    __shared__ __align__(1024) float stages[TP_STAGES][TP_STAGE_FLOATS];
    __shared__ __align__(128) float ybuf[TP_BR * TP_BC];
    __shared__ __align__(8) unsigned long long full[TP_STAGES];
    __shared__ __align__(8) unsigned long long empty[TP_STAGES];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int col0 = blockIdx.x * TP_BC;
    const int ntiles = rows / TP_BR;

    if (threadIdx.x == 0) {
        for (int s = 0; s < TP_STAGES; ++s) {
            mbar::init(mbar::smem(&full[s]), 1);  // the producer's arrive.expect_tx
#if TP_MUTANT == 6
            mbar::init(mbar::smem(&empty[s]), 3);  // MUTANT 6
#else
            mbar::init(mbar::smem(&empty[s]), 2);  // one arrival per consumer warp
#endif
        }
        mbar::fence_init();
    }
    __syncthreads();

    if (warp == 0) {
        // producer: one elected lane issues every copy
        unsigned leader;
        if (mbar::elect(0xFFFFFFFFu, &leader)) {
            int stage = 0;
            unsigned phase = 0;
            for (int t = 0; t < ntiles; ++t) {
#if TP_MUTANT == 1
                mbar::wait(mbar::smem(&empty[stage]), phase);  // MUTANT 1
#else
                mbar::wait(mbar::smem(&empty[stage]), phase ^ 1u);  // @tp_wait_empty
#endif
#if TP_MUTANT == 3
                mbar::arrive_expect_tx(mbar::smem(&full[stage]), 2 * TP_TILE_BYTES + TP_HALO_BYTES);  // MUTANT 3
#else
                mbar::arrive_expect_tx(mbar::smem(&full[stage]), TP_TILE_BYTES + TP_HALO_BYTES);
#endif
                tp_tma_load_2d(mbar::smem(&stages[stage][0]), &tm_x, col0, t * TP_BR,  // @tp_tma_load
                               mbar::smem(&full[stage]));
#if TP_MUTANT == 7
                const float* halo = x + (size_t)((t + 1) * TP_BR) * cols + col0;  // MUTANT 7
#else
                const float* halo = x + (size_t)(((t + 1) * TP_BR) % rows) * cols + col0;
#endif
                mbar::bulk_g2s(mbar::smem(&stages[stage][TP_BR * TP_BC]), halo, TP_HALO_BYTES,  // @tp_bulk_halo
                               mbar::smem(&full[stage]));
#if TP_MUTANT == 5
                tp_advance(stage, phase); tp_advance(stage, phase);  // MUTANT 5
#else
                tp_advance(stage, phase);
#endif
            }
        }
    } else {
        // consumers: warp 1 rows 0..7 of each tile, warp 2 rows 8..15; lane = column
        const int c = warp - 1;
        int stage = 0;
        unsigned phase = 0;
        for (int t = 0; t < ntiles; ++t) {
            const float* st = &stages[stage][0];
#if TP_MUTANT == 8
            const float v0 = st[(8 * c) * TP_BC + lane];  // MUTANT 8
#endif
            mbar::wait(mbar::smem(&full[stage]), phase);  // @tp_wait_full
#if TP_MUTANT != 8
            const float v0 = st[(8 * c) * TP_BC + lane];
#endif
            float v[8], right[8], below[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int r = 8 * c + k;
                v[k] = k == 0 ? v0 : st[r * TP_BC + lane];
                right[k] = st[r * TP_BC + (lane + 1) % TP_BC];
                below[k] = st[(r + 1) * TP_BC + lane];  // row 16 is the halo
            }
            __syncwarp();
#if TP_MUTANT == 2
            if (lane == 0 && c == 0) mbar::arrive(mbar::smem(&empty[stage]));  // MUTANT 2
#else
            if (lane == 0) mbar::arrive(mbar::smem(&empty[stage]));  // @tp_release
#endif
            const int row0 = t * TP_BR;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int r = 8 * c + k;
                out[(size_t)(row0 + r) * cols + col0 + lane] = __fmaf_rn(2.0f, v[k], right[k]);
            }
            // the TMA store of y: ybuf is free once the previous store has read it
#if TP_MUTANT == 9
            if (threadIdx.x == 32) tp_wait_read1();  // MUTANT 9
#else
            if (threadIdx.x == 32) tp_wait_read0();
#endif
            tp_consumer_bar();
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int r = 8 * c + k;
                ybuf[r * TP_BC + lane] = __fmaf_rn(2.0f, v[k], below[k]);  // @tp_ybuf_write
            }
#if TP_MUTANT == 4
            __threadfence_block();  // MUTANT 4
#else
            mbar::fence_proxy_async_shared();
#endif
            tp_consumer_bar();
            if (threadIdx.x == 32) {
                tp_tma_store_2d(&tm_y, col0, row0, mbar::smem(&ybuf[0]));  // @tp_tma_store
                tp_commit();
            }
            tp_advance(stage, phase);
        }
        if (threadIdx.x == 32) tp_wait_all0();
    }
}
