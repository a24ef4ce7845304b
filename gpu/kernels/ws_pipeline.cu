// ws_pipeline.cu: a small warp-specialised producer/consumer pipeline, the skeleton of FlashAttention-3's
// and CUTLASS's sm_90 mainloops, without the math: one producer warp fills WS_STAGES stages of shared memory
// with cp.async.bulk (announced with mbarrier.arrive.expect_tx on the stage's "full" barrier); two consumer
// warps wait on "full", read the stage, write their results to global memory, meet at a named barrier, and
// release the stage by arriving on its "empty" barrier (one arrival per consumer warp).
//
// Grid: one CTA per row of tiles; block: 96 threads (warp 0 produces, warps 1 and 2 consume).
// in, out: (gridDim.x, ntiles, WS_TILE) floats; out[t][i] = 2 * in[t][i] + in[t][(i + 1) % WS_TILE] (one
// FFMA: 2x is exact, so the result is the correctly rounded f32 sum, whatever the schedule).
//
// Phases: a stage's barriers complete once per round (round = t / WS_STAGES). Consumers wait on full[s]
// for the phase of parity round & 1; the producer waits on empty[s] for parity (round & 1) ^ 1, which the
// fresh barrier's phase 0 already satisfies in round 0 (the phase "before" phase 0 counts as completed).
//
// WS_MUTANT plants a bug (built only for the interpreter's deadlock tests; on a GPU each would hang):
//   1  the producer waits on empty[s] with parity round & 1 (the usual off-by-one phase): it waits for
//      phase 0 of a barrier nobody arrives on before the first tile is produced;
//   2  consumer warp 2 never arrives on empty[s]: the producer's second round waits for 2 arrivals, 1 came;
//   3  the producer announces two tiles of bytes instead of one (expect_tx off by a tile): full[s] keeps
//      WS_TILE * 4 bytes pending, its phase never completes.

#include "mbarrier.cuh"

#ifndef WS_STAGES
#define WS_STAGES 4
#endif
#ifndef WS_MUTANT
#define WS_MUTANT 0
#endif
#define WS_TILE 64
#define WS_TILE_BYTES (WS_TILE * 4)

extern "C" __global__ void __launch_bounds__(96) ws_pipeline(const float* __restrict__ in, float* __restrict__ out,
                                                             int ntiles) {
    __shared__ __align__(128) float tiles[WS_STAGES][WS_TILE];
    __shared__ __align__(8) unsigned long long full[WS_STAGES];
    __shared__ __align__(8) unsigned long long empty[WS_STAGES];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float* src = in + (size_t)blockIdx.x * ntiles * WS_TILE;
    float* dst = out + (size_t)blockIdx.x * ntiles * WS_TILE;

    if (threadIdx.x == 0) {
        for (int s = 0; s < WS_STAGES; ++s) {
            mbar::init(mbar::smem(&full[s]), 1);   // the producer's arrive.expect_tx
            mbar::init(mbar::smem(&empty[s]), 2);  // one arrival per consumer warp
        }
        mbar::fence_init();
    }
    __syncthreads();

    if (warp == 0) {
        // producer: one elected lane issues everything
        if (lane == 0) {
            for (int t = 0; t < ntiles; ++t) {
                const int s = t % WS_STAGES;
                const unsigned round = (unsigned)(t / WS_STAGES);
#if WS_MUTANT == 1
                mbar::wait(mbar::smem(&empty[s]), round & 1u);
#else
                mbar::wait(mbar::smem(&empty[s]), (round & 1u) ^ 1u);
#endif
#if WS_MUTANT == 3
                mbar::arrive_expect_tx(mbar::smem(&full[s]), 2 * WS_TILE_BYTES);
#else
                mbar::arrive_expect_tx(mbar::smem(&full[s]), WS_TILE_BYTES);
#endif
                // two bulk copies of half a tile each: two complete-tx on the same phase
                const char* g = (const char*)(src + (size_t)t * WS_TILE);
                mbar::bulk_g2s(mbar::smem(&tiles[s][0]), g, WS_TILE_BYTES / 2, mbar::smem(&full[s]));
                mbar::bulk_g2s(mbar::smem(&tiles[s][WS_TILE / 2]), g + WS_TILE_BYTES / 2, WS_TILE_BYTES / 2,
                               mbar::smem(&full[s]));
            }
        }
    } else {
        // consumers: warp 1 takes elements 0..31 of each tile, warp 2 elements 32..63
        const int c = warp - 1;
        for (int t = 0; t < ntiles; ++t) {
            const int s = t % WS_STAGES;
            const unsigned round = (unsigned)(t / WS_STAGES);
            mbar::wait(mbar::smem(&full[s]), round & 1u);
            const int i = 32 * c + lane;
            const float v = tiles[s][i];
            const float nb = tiles[s][(i + 1) % WS_TILE];
            dst[(size_t)t * WS_TILE + i] = __fmaf_rn(2.0f, v, nb);
            // both consumers are done with the stage before either releases it (named barrier 1, 64 threads)
            asm volatile("bar.sync 1, 64;" ::: "memory");
#if WS_MUTANT == 2
            if (lane == 0 && c == 0) mbar::arrive(mbar::smem(&empty[s]));
#else
            if (lane == 0) mbar::arrive(mbar::smem(&empty[s]));
#endif
        }
    }
}
