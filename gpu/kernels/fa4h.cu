// fa4h.cu: seed 004's warp-specialised attention forward (FA4's sm100 pipeline) carried over to sm_90: one
// producer warp loads Q, K and V with TMA into mbarrier-guarded stages, two consumer warpgroups compute with
// wgmma. The arithmetic of a row is fa2.cu's (the same softmax_rescale_o and normalize, instruction for
// instruction), so flashsim/kernels/fa2.py is this kernel's twin at kBlockM = kBlockN = 128.
//
// Tensors: q (batch, seqlen_q, heads, kQK), k (batch, seqlen_k, heads_k, kQK), v (batch, seqlen_k, heads_k, kV),
// o (batch, seqlen_q, heads, kV), lse (batch, heads, seqlen_q) float32; 16-bit elements (bf16 or f16). Q, K, V
// and O are read and written through tensor maps only (rank 4, dims {d, heads, seqlen, batch} innermost first,
// boxes of 64 columns = 128 bytes with CU_TENSOR_MAP_SWIZZLE_128B, out-of-bounds fill zeros): tm_q and tm_o
// have boxes of 64 rows, tm_k and tm_v of 128. Rows past seqlen are zero-filled by the loads and dropped by the
// store of O, so seqlens need not be multiples of the tiles.
//
// Work: a work tile is 128 query rows (m_block) of one (head, batch); tiles are numbered m_block fastest, the
// last m_block first (tile t: m_block = m_blocks - 1 - t % m_blocks), and CTA b takes tiles b, b + gridDim.x, ...
// (a static persistent scheduler: the host launches min(tiles, SMs) CTAs; the bits do not depend on it).
// A tile's KV range and masked steps are fa2.cu's at kBlockM = kBlockN = 128; a tile with an empty range
// (causal/local) writes O = 0 and lse = +inf.
//
// Roles (384 threads, three warpgroups; seed 004 has 16 warps with softmax, correction, MMA, load and epilogue
// warps, here the consumer warpgroups do the MMA, softmax, correction and epilogue of their own rows):
//   warpgroup 0  producer: setmaxnreg.dec 40; warp 0's elected lane issues every TMA load, warps 1-3 exit.
//   warpgroup 1  consumer 0 (the seed's softmax warpgroup 0): Q stage 0, rows 64 c.. 64 c + 63 of the tile, c = 0
//   warpgroup 2  consumer 1 (softmax warpgroup 1): Q stage 1, rows 64..127. Both: setmaxnreg.inc 232.
// A consumer warpgroup holds S (64 x 128, f32, 64 registers a thread in wgmma's D fragment, which is the
// m16n8 C fragment fa2.cu's warps hold: warp w of the warpgroup has rows 16 w + g, 16 w + g + 8) and O (64 x kV).
// The seed's Q stage is 128 rows (a TMEM tile, one thread a row); a Hopper warpgroup's wgmma computes 64 rows.
//
// Shared memory (dynamic, aligned here to 1024 bytes): sQ[2] (64 x kQK each, in boxes of 64 columns, 8 KiB a
// box), then the K/V region, then the barriers. K/V stages (flashsim.attention.ws_plan.KVLayout): with kQK ==
// kV three even stages of one tile; with kQK 192 / kV 128 the seed's uneven layout: stride (K + V) / 2 =
// 40 KiB, stage 1 moved right by 8 KiB in even rounds and left in odd rounds (round = load index / 3), so the
// stages hold [K, V, K] ("large, small, large") in even rounds and [V, K, V] in odd ones, 128 KiB in all.
// A K tile is kQK / 64 boxes of 128 rows x 128 bytes (16 KiB), a V tile kV / 64 of them.
//
// Barriers (mbarrier, PTX ISA 8.x "mbarrier", "cp.async.bulk.tensor"):
//   q_full[c]   count 1: the producer's arrive.expect_tx of the Q stage's bytes; the TMA loads complete it.
//   q_empty[c]  count 1: consumer c's thread 0, once the TMA store of the tile's O (staged in sQ[c]) has read it.
//   kv_full[s]  count 1: arrive.expect_tx of the K (or V) tile's bytes; its TMA loads complete it.
//   kv_empty[s] count 2: thread 0 of each consumer warpgroup, after wgmma.wait_group 0 retired the wgmmas that
//               read the stage (the seed's MMA warp releases it with tcgen05.commit on the empty barrier).
//   The producer waits on an empty barrier with parity (round & 1) ^ 1 (a fresh barrier passes at once), the
//   consumers on a full one with parity round & 1. With the uneven layout a K tile loaded into stage 0 covers
//   bytes stage 1 held in the round before, so its load also waits on kv_empty[1] (the seed's extra wait).
//   Load order per tile (the seed's): Q0, K of the last KV block, Q1, V of that block, then K, V leftwards.
//   Q is loaded for every tile, also one with no work (its consumers wait for it and release it).
// s0/s1 ordering (the seed's mbar_s0_s1_sequence, here two named barriers of 256 threads, ids 1 and 2): the
//   consumer warpgroups take turns issuing S = Q K^T: consumer c waits on barrier 1 + c before its S wgmmas and
//   arrives on barrier 2 - c after committing them; consumer 1 arrives on barrier 1 at the start of a tile and
//   not after its tile's last S, so every barrier generation has 128 waiting and 128 arriving threads.
// Handshakes of the seed without a Hopper counterpart: S, P and O live in registers, not TMEM, so there is no
// S-full / P-full / O-full barrier between MMA and softmax/correction warps and no early P V start after 3/4 of
// P is written (each consumer warpgroup issues its own wgmmas and waits for them with wgmma.wait_group).
//
// Per KV step of a consumer (block n_block, from the last to the first):
//   wait kv_full (K); ordering wait; S = Q K^T: kQK / 16 wgmma m64n128k16 (A = sQ, B = K, both K-major with the
//   128-byte swizzle; the first with scale-d 0); commit; ordering arrive; wait_group 0; release K;
//   softcap (tanh.approx), masks (-inf), softmax_rescale_o and the rescale of O exactly as fa2.cu;
//   P -> 16 bits in registers (the A fragment of wgmma, the m16n8k16 A fragment); wait kv_full (V);
//   O += P V: 8 wgmma m64n{kV}k16 with A from registers and B = V MN-major (imm-trans-b 1; V's rows of 128
//   bytes: LBO 16 KiB from one 64-column box to the next, SBO 1024 bytes per 8 keys); commit; wait_group 0;
//   release V.
// Epilogue of a tile: normalize_softmax_lse as fa2.cu; O -> 16 bits written into sQ[c] in the TMA store's
// layout (boxes of 64 columns, 128-byte swizzle; the tile's last S wgmmas have retired, so Q is dead);
// fence.proxy.async.shared::cta; named barrier 3 + c (the warpgroup's 128 threads); thread 0 issues the TMA
// stores (cp.async.bulk.tensor.4d.global.shared::cta.bulk_group), commit_group, wait_group.read 0, and arrives
// on q_empty[c]; lse by the lane with column 0 of its quad.
//
// Built with --use_fast_math (fa2.cu's arithmetic). wgmma and setmaxnreg need sm_90a (__CUDA_ARCH_FEAT_SM90_ALL);
// built for plain sm_90 (the compile check of every kernel) they become traps.
//
// FH_MUTANT plants one protocol bug (0: none), each a one-line change marked "MUTANT n" on the changed line;
// "@name" marks the lines reports point at. What a simulator should find:
//   1  the producer waits on q_empty with parity q_round & 1 (not flipped): it waits for a release that needs
//      the tile it has not loaded. deadlock: producer at MUTANT 1, consumers at @fh_wait_q_full.
//   2  stage 1's offset with the wrong sign (qk 192 / v 128 only): V of an even round lands in bytes of the K
//      tile in stage 0 that the consumers are still reading. race (TMA write at @fh_tma_kv, wgmma read at
//      @fh_mma_qk). With even head dims the offset is 0 and the build is correct.
//   3  the extra wait on kv_empty[1] before a K load into stage 0 left out (qk 192 / v 128 only): that K tile
//      covers bytes stage 1 held in the round before. race (TMA write at @fh_tma_kv, wgmma read at
//      @fh_mma_qk of the older tile).
//   4  expect_tx of a K tile announced for V too: with qk 192 / v 128 full[s] waits for 16 KiB that never
//      come. deadlock: consumers at @fh_wait_v_full. With even head dims the bytes agree: correct.
//   5  kv_empty[s] initialised with count 1 while both consumer warpgroups arrive: the first release lets the
//      producer refill a stage the other still reads. race (TMA write at @fh_tma_kv, wgmma read at @fh_mma_qk
//      or @fh_mma_pv).
//   6  a zero-work tile (causal/local, empty KV range) skips the Q release: the producer's next Q load into
//      that stage waits forever. deadlock: producer at @fh_wait_q_empty (a CTA with a later tile).
//   7  the s0/s1 ordering barrier: consumer 1 never gives consumer 0 the first turn. deadlock: consumer 0 at
//      @fh_order_wait (barrier 1), consumer 1 at @fh_order_wait (barrier 2).
//   8  a consumer waits on kv_full (K) with parity round & 1 ^ 1: it passes before the load lands. race (TMA
//      write at @fh_tma_kv, wgmma read at @fh_mma_qk).
//   9  K released before wgmma.wait_group retired the S wgmmas: the producer may refill the stage while they
//      read it. race (wgmma read at @fh_mma_qk, TMA write at @fh_tma_kv).
//   10 the V stage of a tile's last KV block is never released: later rounds wait for it. deadlock: producer
//      at @fh_wait_kv_empty (a CTA with more KV loads after it).
//   11 __threadfence_block (generic proxy only) where fence.proxy.async.shared::cta belongs before the TMA
//      store of O. race (generic write at @fh_write_o, async-proxy read by the store at @fh_tma_o).
//   12 q_empty arrived before cp.async.bulk.wait_group.read 0: the next tile's Q load may overwrite sO while
//      the store reads it. race (store read at @fh_tma_o, TMA write at @fh_tma_q).

#include "mbarrier.cuh"
#include "warp_ops.cuh"
#include "wgmma.cuh"
#include "wgmma_lists.cuh"

#ifndef FH_MUTANT
#define FH_MUTANT 0
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FH_ASM(...) asm volatile(__VA_ARGS__)
#else
#define FH_ASM(...) __trap()
#endif

// The driver's CUtensorMap (cuda.h; NVRTC cannot include it): 128 opaque bytes, 64-byte aligned.
struct alignas(64) CUtensorMap {
    unsigned long long opaque[16];
};

namespace fa4h {

constexpr int kBlockM = 128;  // query rows of a work tile
constexpr int kRows = 64;     // rows of a consumer warpgroup (one Q stage)
constexpr int kBlockN = 128;  // keys of a KV block
constexpr int kKVStages = 3;
constexpr int kThreads = 384;
constexpr int kBox = 128 * 64 * 2;  // bytes of a K/V box (128 rows of 64 columns)
constexpr int kQBox = 64 * 64 * 2;  // bytes of a Q/O box (64 rows)

struct Params {
    float* __restrict__ lse;
    int seqlen_q, seqlen_k, heads, heads_k;
    float scale_softmax, scale_softmax_log2, softcap;  // softcap: softmax_scale / cap, 0 when off
    int window_left, window_right;                     // -1: unbounded (causal is (-1, 0))
    int is_causal, is_local;
    int m_blocks, tiles;
};

__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// The shared-memory plan of an instance (flashsim.attention.ws_plan.KVLayout)
template <int kQK, int kV>
struct Smem {
    static_assert(kQK % 64 == 0 && kV % 64 == 0 && kV <= kQK, "head dims: multiples of 64, kV <= kQK");
    static constexpr int kQBytes = kRows * kQK * 2;  // one Q stage
    static constexpr int kKBytes = kBlockN * kQK * 2;
    static constexpr int kVBytes = kBlockN * kV * 2;
    static constexpr bool kUneven = kQK != kV;
    static constexpr int kStage = kUneven ? (kKBytes + kVBytes) / 2 : kKBytes;
    static constexpr int kShift = kBlockN * (kQK - kV) / 2 * 2;
    static constexpr int kKVBytes = 2 * kStage + kKBytes;
    static constexpr int kKV = 2 * kQBytes;         // offset of the K/V region
    static constexpr int kBars = kKV + kKVBytes;   // offset of the barriers
    static constexpr int kBytes = kBars + 8 * 10 + 1024;  // what the host passes (1024 bytes of alignment slack)
    static_assert(kBytes <= 227 * 1024, "more shared memory than an sm_90 CTA has");

    // the tile of stage s in a round of parity `parity` (bytes from the K/V region's start)
    __device__ static __forceinline__ unsigned stage_offset(int s, unsigned parity) {
        int off = s * kStage;
        if (kUneven && s == 1) {
#if FH_MUTANT == 2
            off += parity ? kShift : -kShift;  // MUTANT 2
#else
            off += parity ? -kShift : kShift;  // @fh_stage_offset
#endif
        }
        return (unsigned)off;
    }
};

// PTX ISA, "cp.async.bulk.tensor": global -> shared, tile mode, box origin {c0 (column), c1 (head), c2 (row), c3}
__device__ __forceinline__ void tma_load(unsigned dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                         unsigned bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst), "l"((unsigned long long)map), "r"(c0), "r"(c1),
                 "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void tma_store(const CUtensorMap* map, unsigned src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];"
                 ::"l"((unsigned long long)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
                 : "memory");
}

__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void wg_sync(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }

__device__ __forceinline__ void wg_fence() { FH_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { FH_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { FH_ASM("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void fence_operand(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// S (64 x 128, f32) = A (desc da, 64 x 16) * B (desc db, 16 x 128) + (sd ? S : 0); both K-major
template <bool kBF16>
__device__ __forceinline__ void wgmma_qk(float (&d)[64], unsigned long long da, unsigned long long db, int sd) {
    if constexpr (kBF16) {
        FH_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_LIST_64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : WG_F64(0)
               : "l"(da), "l"(db), "r"(sd)
               : "memory");
    } else {
        FH_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" WG_LIST_64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : WG_F64(0)
               : "l"(da), "l"(db), "r"(sd)
               : "memory");
    }
}

// O (64 x kV, f32) += P (registers a, 64 x 16) * V (desc db, 16 x kV, MN-major: imm-trans-b 1)
template <bool kBF16, int kV>
__device__ __forceinline__ void wgmma_pv(float (&d)[kV / 2], const unsigned (&a)[4], unsigned long long db) {
    if constexpr (kV == 128 && kBF16) {
        FH_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_LIST_64 "}, {%64, %65, %66, %67}, %68, "
               "1, 1, 1, 1;\n"
               : WG_F64(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
               : "memory");
    } else if constexpr (kV == 128) {
        FH_ASM("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" WG_LIST_64 "}, {%64, %65, %66, %67}, %68, "
               "1, 1, 1, 1;\n"
               : WG_F64(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
               : "memory");
    } else if constexpr (kV == 64 && kBF16) {
        FH_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_LIST_32 "}, {%32, %33, %34, %35}, %36, "
               "1, 1, 1, 1;\n"
               : WG_F32(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
               : "memory");
    } else {
        static_assert(kV == 64, "kV is 64 or 128");
        FH_ASM("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" WG_LIST_32 "}, {%32, %33, %34, %35}, %36, "
               "1, 1, 1, 1;\n"
               : WG_F32(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
               : "memory");
    }
}

// (m_block, head, batch) of work tile t
__device__ __forceinline__ void tile_coords(const Params& p, int t, int& m_block, int& head, int& bidb) {
    m_block = p.m_blocks - 1 - t % p.m_blocks;
    head = (t / p.m_blocks) % p.heads;
    bidb = t / (p.m_blocks * p.heads);
}

// fa2.cu's KV range of an m_block (kBlockM = kBlockN = 128)
__device__ __forceinline__ void n_range(const Params& p, int m_block, int& lo, int& hi) {
    lo = !p.is_local ? 0 : imax(0, (m_block * kBlockM + p.seqlen_k - p.seqlen_q - p.window_left) / kBlockN);
    hi = ceil_div(p.seqlen_k, kBlockN);
    if (p.is_causal || p.is_local)
        hi = imin(hi, ceil_div((m_block + 1) * kBlockM + p.seqlen_k - p.seqlen_q + p.window_right, kBlockN));
}

template <int kQK, int kV, bool kBF16>
__device__ __forceinline__ void forward(const CUtensorMap* tm_q, const CUtensorMap* tm_k, const CUtensorMap* tm_v,
                                        const CUtensorMap* tm_o, const Params& p) {
    using L = Smem<kQK, kV>;
    constexpr int kNT = kBlockN / 8;  // n-tiles of S
    constexpr int kDT = kV / 8;       // n-tiles of O
    constexpr int kKS = kQK / 16;     // k-steps of Q K^T
    constexpr int kKP = kBlockN / 16; // k-steps of P V
    const float kNegInf = -__int_as_float(0x7f800000);

    extern __shared__ __align__(1024) unsigned char fh_smem_raw[];
    const unsigned raw = mbar::smem(fh_smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;  // the 128-byte swizzle's repeat boundary
    unsigned long long* bars = (unsigned long long*)(fh_smem_raw + (base - raw) + L::kBars);
    const unsigned q_full = mbar::smem(bars), q_empty = q_full + 16, kv_full = q_full + 32, kv_empty = q_full + 56;
    const unsigned sq = base, skv = base + L::kKV;

    const int wgi = threadIdx.x / 128, tid = threadIdx.x % 128, warp = threadIdx.x / 32;

    if (threadIdx.x == 0) {
        for (int c = 0; c < 2; ++c) {
            mbar::init(q_full + 8 * c, 1);   // the producer's arrive.expect_tx
            mbar::init(q_empty + 8 * c, 1);  // consumer c's thread 0 after its store of O read sQ[c]
        }
        for (int s = 0; s < kKVStages; ++s) {
            mbar::init(kv_full + 8 * s, 1);
#if FH_MUTANT == 5
            mbar::init(kv_empty + 8 * s, 1);  // MUTANT 5
#else
            mbar::init(kv_empty + 8 * s, 2);  // thread 0 of each consumer warpgroup
#endif
        }
        mbar::fence_init();
    }
    __syncthreads();

    if (wgi == 0) {
        // ---------------------------------------------------------------- producer
        FH_ASM("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (warp != 0) return;
        unsigned leader;
        if (!mbar::elect(0xFFFFFFFFu, &leader)) return;
        int kv_i = 0;          // K/V loads issued: stage kv_i % 3, round kv_i / 3
        unsigned q_round = 0;  // work tiles begun
        for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
            int m_block, head, bidb, lo, hi;
            tile_coords(p, t, m_block, head, bidb);
            n_range(p, m_block, lo, hi);
            const int head_k = head / (p.heads / p.heads_k);
            auto load_q = [&](int c) {
#if FH_MUTANT == 1
                mbar::wait(q_empty + 8 * c, q_round & 1u);  // MUTANT 1
#else
                mbar::wait(q_empty + 8 * c, (q_round & 1u) ^ 1u);  // @fh_wait_q_empty
#endif
                mbar::arrive_expect_tx(q_full + 8 * c, L::kQBytes);
#pragma unroll
                for (int b = 0; b < kQK / 64; ++b)
                    tma_load(sq + c * L::kQBytes + b * kQBox, tm_q, 64 * b, head, m_block * kBlockM + kRows * c, bidb,
                             q_full + 8 * c);  // @fh_tma_q
            };
            auto load_kv = [&](bool is_k, int n_block) {
                const int s = kv_i % kKVStages;
                const unsigned parity = (unsigned)(kv_i / kKVStages) & 1u;
                mbar::wait(kv_empty + 8 * s, parity ^ 1u);  // @fh_wait_kv_empty
#if FH_MUTANT == 3
                (void)is_k;  // MUTANT 3
#else
                if (L::kUneven && is_k && s == 0) mbar::wait(kv_empty + 8, parity ^ 1u);  // @fh_wait_extra
#endif
#if FH_MUTANT == 4
                mbar::arrive_expect_tx(kv_full + 8 * s, L::kKBytes);  // MUTANT 4
#else
                mbar::arrive_expect_tx(kv_full + 8 * s, is_k ? L::kKBytes : L::kVBytes);
#endif
                const unsigned dst = skv + L::stage_offset(s, parity);
                const int boxes = (is_k ? kQK : kV) / 64;
                for (int b = 0; b < boxes; ++b)
                    tma_load(dst + b * kBox, is_k ? tm_k : tm_v, 64 * b, head_k, n_block * kBlockN, bidb,
                             kv_full + 8 * s);  // @fh_tma_kv
                ++kv_i;
            };
            load_q(0);
            if (lo < hi) load_kv(true, hi - 1);
            load_q(1);
            if (lo < hi) load_kv(false, hi - 1);
            for (int n_block = hi - 2; n_block >= lo; --n_block) {
                load_kv(true, n_block);
                load_kv(false, n_block);
            }
            ++q_round;
        }
        return;
    }

    // -------------------------------------------------------------------- consumers
    FH_ASM("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int c = wgi - 1;
    const int lane = tid % 32, wq = tid / 32, g = lane / 4, tq = lane % 4;
    const unsigned my_q = sq + c * L::kQBytes;
    const bool even_mn = p.seqlen_q % kBlockM == 0 && p.seqlen_k % kBlockN == 0;
    const int n_masking_steps = (!p.is_causal && !p.is_local) ? 1 : (even_mn ? 1 : 2);
    int kv_i = 0;
    unsigned q_round = 0;

    for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
        int m_block, head, bidb, lo, hi;
        tile_coords(p, t, m_block, head, bidb);
        n_range(p, m_block, lo, hi);
        const int row_base = m_block * kBlockM + kRows * c + 16 * wq + g;  // + 8 i
        float acc_o[kV / 2];
#pragma unroll
        for (int i = 0; i < kV / 2; ++i) acc_o[i] = 0.0f;
        float row_max[2], row_sum[2], lse[2];

        mbar::wait(q_full + 8 * c, q_round & 1u);  // @fh_wait_q_full
        if (lo < hi) {
#if FH_MUTANT == 7
            (void)c;  // MUTANT 7
#else
            if (c == 1) named_arrive(1);  // consumer 0 issues the tile's first S
#endif
            int step = 0;
            for (int n_block = hi - 1; n_block >= lo; --n_block, ++step) {
                const bool masking = step < n_masking_steps;
                const bool is_first = step == 0;
                // ---- S = Q K^T
                int s = kv_i % kKVStages;
                unsigned parity = (unsigned)(kv_i / kKVStages) & 1u;
#if FH_MUTANT == 8
                mbar::wait(kv_full + 8 * s, parity ^ 1u);  // MUTANT 8
#else
                mbar::wait(kv_full + 8 * s, parity);  // @fh_wait_k_full
#endif
                const unsigned sk = skv + L::stage_offset(s, parity);
                float acc_s[kNT * 4];
                named_sync(1 + c);  // @fh_order_wait
                fence_operand(acc_s);
                wg_fence();
#pragma unroll
                for (int j = 0; j < kKS; ++j) {
                    const unsigned long long da = wg::tile_desc(wg::SW128, my_q + (j / 4) * kQBox, kRows, 128, j % 4);
                    const unsigned long long db = wg::tile_desc(wg::SW128, sk + (j / 4) * kBox, kBlockN, 128, j % 4);
                    wgmma_qk<kBF16>(acc_s, da, db, j > 0);  // @fh_mma_qk
                }
                wg_commit();
                if (c == 0 || n_block > lo) named_arrive(2 - c);  // @fh_order_arrive
#if FH_MUTANT == 9
                if (tid == 0) mbar::arrive(kv_empty + 8 * s);  // MUTANT 9
                wg_wait0();
#else
                wg_wait0();
                fence_operand(acc_s);
                if (tid == 0) mbar::arrive(kv_empty + 8 * s);  // @fh_release_k
#endif
                fence_operand(acc_s);
                ++kv_i;

                if (p.softcap > 0.0f) {
#pragma unroll
                    for (int i = 0; i < kNT * 4; ++i) acc_s[i] = wops::tanh_approx(acc_s[i] * p.softcap);
                }
                // fa2.cu's masks, line for line (its recorded cubins keep fa2.cu as it is)
                if ((masking && (p.is_causal || p.is_local || !even_mn)) || (!masking && p.is_local)) {
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        const int row = row_base + i * 8;
                        int right = p.seqlen_k, left = 0;
                        if (p.is_causal || p.is_local) {
                            if (p.is_causal || p.window_right >= 0)
                                right = imin(p.seqlen_k, row + 1 + p.seqlen_k - p.seqlen_q + p.window_right);
                            if (p.is_local && p.window_left >= 0)
                                left = imax(0, row + p.seqlen_k - p.seqlen_q - p.window_left);
                        }
#pragma unroll
                        for (int n = 0; n < kNT; ++n) {
#pragma unroll
                            for (int j = 0; j < 2; ++j) {
                                const int col = n_block * kBlockN + n * 8 + 2 * tq + j;
                                if (col >= right || col < left) acc_s[4 * n + 2 * i + j] = kNegInf;
                            }
                        }
                    }
                }

                // ---- softmax_rescale_o (fa2.cu, one m-tile)
                const bool check_inf = masking ? (p.is_causal || p.is_local) : p.is_local;
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const float prev = row_max[i];
                    float mx = is_first ? acc_s[2 * i] : fmaxf(row_max[i], acc_s[2 * i]);
                    mx = fmaxf(mx, acc_s[2 * i + 1]);
#pragma unroll
                    for (int n = 1; n < kNT; ++n) {
                        mx = fmaxf(mx, acc_s[4 * n + 2 * i]);
                        mx = fmaxf(mx, acc_s[4 * n + 2 * i + 1]);
                    }
                    mx = fmaxf(mx, wops::shfl_xor(mx, 2));
                    mx = fmaxf(mx, wops::shfl_xor(mx, 1));
                    row_max[i] = mx;
                    if (!is_first) {
                        const float cur = !check_inf ? mx : (mx == kNegInf ? 0.0f : mx);
                        const float cs = exp2f((prev - cur) * p.scale_softmax_log2);
                        row_sum[i] *= cs;
#pragma unroll
                        for (int n = 0; n < kDT; ++n) {
                            acc_o[4 * n + 2 * i] *= cs;
                            acc_o[4 * n + 2 * i + 1] *= cs;
                        }
                    }
                    const float max_scaled = mx == kNegInf ? 0.0f : mx * p.scale_softmax_log2;
#pragma unroll
                    for (int n = 0; n < kNT; ++n) {
                        acc_s[4 * n + 2 * i] = exp2f(acc_s[4 * n + 2 * i] * p.scale_softmax_log2 - max_scaled);
                        acc_s[4 * n + 2 * i + 1] = exp2f(acc_s[4 * n + 2 * i + 1] * p.scale_softmax_log2 - max_scaled);
                    }
                    float sum = is_first ? acc_s[2 * i] : row_sum[i] + acc_s[2 * i];
                    sum = sum + acc_s[2 * i + 1];
#pragma unroll
                    for (int n = 1; n < kNT; ++n) {
                        sum = sum + acc_s[4 * n + 2 * i];
                        sum = sum + acc_s[4 * n + 2 * i + 1];
                    }
                    row_sum[i] = sum;
                }

                // ---- P -> 16 bits: the A fragments of the 8 k-steps of P V
                unsigned pf[kKP][4];
#pragma unroll
                for (int ks = 0; ks < kKP; ++ks) {
                    pf[ks][0] = wops::cvt_pair<kBF16>(acc_s[8 * ks + 0], acc_s[8 * ks + 1]);
                    pf[ks][1] = wops::cvt_pair<kBF16>(acc_s[8 * ks + 2], acc_s[8 * ks + 3]);
                    pf[ks][2] = wops::cvt_pair<kBF16>(acc_s[8 * ks + 4], acc_s[8 * ks + 5]);
                    pf[ks][3] = wops::cvt_pair<kBF16>(acc_s[8 * ks + 6], acc_s[8 * ks + 7]);
                }

                // ---- O += P V
                s = kv_i % kKVStages;
                parity = (unsigned)(kv_i / kKVStages) & 1u;
                mbar::wait(kv_full + 8 * s, parity);  // @fh_wait_v_full
                const unsigned sv = skv + L::stage_offset(s, parity);
                fence_operand(acc_o);
                wg_fence();
#pragma unroll
                for (int ks = 0; ks < kKP; ++ks) {
                    // MN-major, 128-byte swizzle: 16 keys = 2048 bytes; LBO: the next 64 columns (box); SBO: 8 keys
                    const unsigned long long db = wg::desc_encode(sv + ks * 16 * 128, kBox, 1024, 1, 0);
                    wgmma_pv<kBF16, kV>(acc_o, pf[ks], db);  // @fh_mma_pv
                }
                wg_commit();
                wg_wait0();
                fence_operand(acc_o);
#if FH_MUTANT == 10
                if (tid == 0 && n_block > lo) mbar::arrive(kv_empty + 8 * s);  // MUTANT 10
#else
                if (tid == 0) mbar::arrive(kv_empty + 8 * s);  // @fh_release_v
#endif
                ++kv_i;
            }

            // ---- normalize_softmax_lse (fa2.cu)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                float sum = row_sum[i];
                sum = sum + wops::shfl_xor(sum, 2);
                sum = sum + wops::shfl_xor(sum, 1);
                const bool empty = sum == 0.0f || sum != sum;
                const float inv = empty ? 1.0f : 1.0f / sum;
                lse[i] = empty ? __int_as_float(0x7f800000) : row_max[i] * p.scale_softmax + __logf(sum);
#pragma unroll
                for (int n = 0; n < kDT; ++n) {
                    acc_o[4 * n + 2 * i] *= inv;
                    acc_o[4 * n + 2 * i + 1] *= inv;
                }
            }
        } else {
            lse[0] = lse[1] = __int_as_float(0x7f800000);  // a tile with no work: O = 0, lse = +inf
        }

        // ---- epilogue: O into sQ[c] (the store's layout), then one TMA store per 64 columns
#pragma unroll
        for (int n = 0; n < kDT; ++n) {
            const int col = n * 8 + 2 * tq;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int r = 16 * wq + g + 8 * i;
                const unsigned addr = wg::swizzle(my_q + (col / 64) * kQBox + r * 128 + (col % 64) * 2, 128);
                const unsigned v = wops::cvt_pair<kBF16>(acc_o[4 * n + 2 * i], acc_o[4 * n + 2 * i + 1]);
                asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");  // @fh_write_o
            }
        }
#if FH_MUTANT == 11
        __threadfence_block();  // MUTANT 11
#else
        mbar::fence_proxy_async_shared();  // @fh_fence_o
#endif
        wg_sync(3 + c);
        if (tid == 0) {
#pragma unroll
            for (int b = 0; b < kV / 64; ++b)
                tma_store(tm_o, my_q + b * kQBox, 64 * b, head, m_block * kBlockM + kRows * c, bidb);  // @fh_tma_o
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#if FH_MUTANT == 12
            mbar::arrive(q_empty + 8 * c);  // MUTANT 12
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#elif FH_MUTANT == 6
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            if (lo < hi) mbar::arrive(q_empty + 8 * c);  // MUTANT 6
#else
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            mbar::arrive(q_empty + 8 * c);  // @fh_release_q
#endif
        }
        if (tq == 0) {
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int row = row_base + 8 * i;
                if (row < p.seqlen_q) p.lse[((long long)bidb * p.heads + head) * p.seqlen_q + row] = lse[i];
            }
        }
        ++q_round;
    }
}

}  // namespace fa4h

// Scalars one by one (cupy's RawKernel takes no structs); the tensor maps by value (__grid_constant__).
#define FA4H_KERNEL(name, qk, v, bf16)                                                                          \
    extern "C" __global__ void __launch_bounds__(fa4h::kThreads, 1)                                             \
    name(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,                   \
         const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o, float* lse,        \
         int seqlen_q, int seqlen_k, int heads, int heads_k, float scale_softmax, float scale_softmax_log2,     \
         float softcap, int window_left, int window_right, int is_causal, int is_local, int m_blocks,           \
         int tiles) {                                                                                           \
        const fa4h::Params p{lse, seqlen_q, seqlen_k, heads, heads_k, scale_softmax, scale_softmax_log2,      \
                             softcap, window_left, window_right, is_causal, is_local, m_blocks, tiles};        \
        fa4h::forward<qk, v, bf16>(&tm_q, &tm_k, &tm_v, &tm_o, p);                                              \
    }

FA4H_KERNEL(fa4h_hdim64_f16, 64, 64, false)
FA4H_KERNEL(fa4h_hdim64_bf16, 64, 64, true)
FA4H_KERNEL(fa4h_hdim128_f16, 128, 128, false)
FA4H_KERNEL(fa4h_hdim128_bf16, 128, 128, true)
// the seed's DeepSeek shape: qk 192, v 128, with the uneven K/V stages
FA4H_KERNEL(fa4h_hdim192_f16, 192, 128, false)
FA4H_KERNEL(fa4h_hdim192_bf16, 192, 128, true)
