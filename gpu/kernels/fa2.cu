// fa2.cu: the FlashAttention-2 forward kernel of seed 000 (flash_fwd_kernel.h, compute_attn_1rowblock),
// written out without CuTe: every copy, ldmatrix and mma of the CuTe version is an explicit instruction here.
//
// Kernel traits (seed 000, hdim 128): kBlockM = 128 query rows, kBlockN = 32 keys per step, 4 warps, each warp
// owning rows 16w + 64m + (0..15) for m < kBlockM / 64 (TiledMMA: 4 warps along M over SM80_16x8x16, 16 x
// kBlockN per warp and m). The hdim-64 instance uses kBlockN = 64. The tiles are template parameters: the
// instances at the end of the file are the configurations flashsim.kernels.spec describes. So are the warps
// (kNWarps, default 4: warp w owns rows 16w + 16 kNWarps m + (0..15), and 32 kNWarps threads copy kRowStep =
// 4 kNWarps rows per pass); the hdim-192 instances without dropout have 8 (flash-attn's traits), the others 4.
// Tensors: q, o (batch, seqlen_q, heads, kHeadDim); k, v (batch, seqlen_k, heads_k, kHeadDim); lse
// (batch, heads, seqlen_q) float32. Head dims below kHeadDim are zero-padded by the host, which gives the
// shared memory the kernel with Is_even_K = false builds with its zero-filling predicated copy.
// Grid (ceil(seqlen_q / kBlockM), heads, batch), 32 kNWarps threads, dynamic smem (kBlockM + 2 kBlockN) kHeadDim
// 16-bit elements (48 KiB for hdim 128).
//
// Shared memory: sQ (kBlockM x kHeadDim), sK and sV (kBlockN x kHeadDim), each tile_to_shape of the atom
// Swizzle<3,3,3> o (8, 64):(64, 1): element (r, c) sits at swz(512 (r/8 + rows/8 (c/64)) + 64 (r%8) + c%64)
// with swz(x) = x ^ ((x >> 3) & 0x38), i.e. its 16-byte chunk c%64/8 is xored with r%8
// (flashsim.kernels.fa2.smem_layout builds the same layout with flashsim.layout). sO reuses sQ.
//
// GMEM -> SMEM: cp.async.cg 16 bytes, thread layout 16 x 8 (thread t: row t/8 + 16i, columns
// 8(t%8) + 64j). Rows past the sequence end are zero-filled with a 16-byte store (FA2: Clear_OOB_MN for
// K and V; for Q too here, so that no row of the tile holds stale data).
// SMEM -> RF: ldmatrix.x4 for Q (A) and K (B), ldmatrix.x4.trans for V (B of P V).
//
// The KV loop runs backwards from n_block_max - 1 to n_block_min (FA2's order): the first
// n_masking_steps blocks (1 without causal/local masks, else ceil(kBlockM / kBlockN) [+1 when the
// seqlens are not multiples of the blocks]) are masked; after them, only a local window masks. Each
// step: wait for K; start V's copy; S = Q K^T (mma, f32, from zero); softcap (tanh.approx); mask (-inf);
// wait for V; start the next K's copy; softmax_rescale_o; P -> 16 bits; O += P V (mma, f32).
// softmax_rescale_o (softmax.h), per row, Check_inf = causal || local in the masked steps, local after:
//   first step: m = max(row); max_scaled = m == -inf ? 0 : m * scale_log2;
//               P = exp2f(S * scale_log2 - max_scaled); l = sum(P) (the lane's values in order)
//   later:      m_prev = m; m = max(m, row); cur = (Check_inf && m == -inf) ? 0 : m;
//               c = exp2f((m_prev - cur) * scale_log2); l *= c; O *= c; P and l += sum(P) as above
// row maxima are reduced over the quad (__shfl_xor 2, then 1); sums stay per lane until the end.
// normalize_softmax_lse: l summed over the quad (xor 2, then 1); l == 0 or NaN -> inv = 1, lse = +inf;
// else inv = 1 / l, lse = m * scale_softmax + __logf(l). O *= inv; O -> 16 bits; RF -> sO (32-bit stores);
// __syncthreads; sO -> GMEM 16 bytes per thread (rows < seqlen_q); lse by the lane with column 0 of its quad.
// A CTA whose KV range is empty (causal/local) writes O = 0 and lse = +inf for its rows.
//
// Chunked attention (the kChunked instances, "fa2_chunked", with the extra parameter attention_chunk = C; C = 0
// is plain attention): FlashAttention-3's attention_chunk (Llama 4's chunked attention), from
// Dao-AILab/flash-attention at 0251105a2fb19d2957484b7f023cd8c115286ced:
//   hopper/mask.h:116-120   per row, with chunk_start = round_down(C, row + seqlen_k - seqlen_q):
//                           left = max(left, chunk_start), right = min(right, chunk_start + C);
//   hopper/utils.h:103-117  round_down / round_up through div_floor (floor division, also of negatives);
//   hopper/block.h:24-45    n_block_max = min(.., ceil_div(round_up(C, (m_block + 1) kBlockM + seqlen_k -
//                           seqlen_q), kBlockN)); n_block_min = max(.., round_down(C, m_block kBlockM +
//                           seqlen_k - seqlen_q) / kBlockN);
//   hopper/flash_api.cpp:148-160  C > 0 makes the call local (is_causal false, is_local true: every KV step is
//                           masked) and clamps the window sides to C - 1 (which the chunk bounds imply);
//   hopper/test_util.py:193-224   construct_chunk_mask, the reference: a key is masked when it is left of the
//                           row's chunk start or at/after chunk start + C, ORed with the causal/local mask.
// So query row i (bottom-right aligned: key position i + seqlen_k - seqlen_q) attends the keys of its own chunk
// [chunk_start, chunk_start + C) that its causal/local window also allows: the chunk bounds both sides (a
// non-causal call attends the whole chunk, later keys of it included). Here causal/local keep FA2's meaning
// and the chunk intersects them; FA2_LOCAL_MASK (is_local || C > 0) plays FA2's is_local in the step logic.
//
// Dropout, ALiBi and the returned probabilities (the kExt instances, "fa2_ext_*": the same kernel with the
// parameters after attention_chunk below; flashsim.numerics.philox lists the flash-attn lines of each fact).
// flash-attn makes them template flags (Is_dropout, Has_alibi, Return_softmax); here they are launch
// parameters of one more build per instance, so the plain instances keep their code.
//   ALiBi (mask.h:143-186, flash_fwd_kernel.h:294): slope = alibi_slopes[bidb * batch_stride + head] /
//     scale_softmax, added to the (softcapped) scores of every KV step before the masks: with causal
//     S += slope * col, else S -= slope * |row + seqlen_k - seqlen_q - col|.
//   Dropout (dropout.h, flash_fwd_kernel.h:354-368): after P is converted to 16 bits, one Philox4x32-10 call
//     per m-tile and 32 keys with subsequence (row / 16) | (col / 32) << 32 and offset philox_offset +
//     (bidb * heads + head) * 32 + lane; byte 4 (n % 4) + e of its 16 decides element e of n-tile n (kept
//     when <= p_dropout_u8, the set.le.u32.f16x2 compare of flash-attn); a dropped P becomes 0 for P V, the
//     row sums keep it, and O is scaled by inv_sum * rp_dropout at the end (softmax.h:181).
//   Returned probabilities (flash_fwd_kernel.h:357-365): the 16-bit P of every KV step the CTA visits, with
//     the dropped ones' sign bit flipped, into s_dmask (batch, heads, seqlen_q_rounded, seqlen_k_rounded) at
//     the lane's accumulator positions.
//
// Built with --use_fast_math (FA2's flags): exp2f is ex2.approx.ftz.f32, __logf is lg2.approx.ftz.f32 *
// ln 2, 1.f / l is MUFU.RCP, all f32 arithmetic .FTZ. The twin is flashsim/kernels/fa2.py.

#include "trace.cuh"
#include "warp_ops.cuh"

namespace fa2 {

constexpr int kNThreads = 128;  // 4 warps

struct Params {
    const unsigned short* __restrict__ q;
    const unsigned short* __restrict__ k;
    const unsigned short* __restrict__ v;
    unsigned short* __restrict__ o;
    float* __restrict__ lse;
    int seqlen_q, seqlen_k, heads, heads_k;
    float scale_softmax, scale_softmax_log2, softcap;  // softcap: softmax_scale / cap, 0 when off
    int window_left, window_right;                     // -1: unbounded (causal is (-1, 0))
    int is_causal, is_local;
    int attention_chunk;                               // kChunked instances only: C > 0, or 0 (off)
    // kExt instances only (see the header)
    const float* __restrict__ alibi_slopes;            // nullptr: no ALiBi
    int alibi_batch_stride;
    int is_dropout;
    unsigned p_dropout_u8;                             // keep when the random byte is <= this
    float rp_dropout;
    unsigned long long philox_seed, philox_offset;
    unsigned short* __restrict__ s_dmask;              // nullptr: no probabilities returned
    int seqlen_q_rounded, seqlen_k_rounded;
    // kExt and kSplit instances: packed sequences (see the header)
    const int* __restrict__ cu_seqlens_q;               // nullptr: q is (batch, seqlen_q, heads, d)
    const int* __restrict__ cu_seqlens_k;               // nullptr: k, v are (batch, seqlen_k, heads_k, d)
    int total_q;                                        // rows of the packed q (the LSE is (heads, total_q))
    // kSplit instances only
    float* __restrict__ oaccum;                         // nullptr: one split, O and LSE written directly
    float* __restrict__ lse_accum;
    int is_even_mn;                                     // flash-attn's Is_even_MN of the launch (kExt too)
    int batch;
    // kSplit instances, the KV cache (flash_attn_with_kvcache; see the header)
    const int* __restrict__ seqlens_k;                  // each entry's cache length (not cumulative); nullptr: none
    const int* __restrict__ cache_batch_idx;            // the cache entry of batch entry b; nullptr: b
    const int* __restrict__ block_table;                // paged: (batch, block_table_stride) pages; nullptr: off
    int block_table_stride, page_block_size;
    long long kv_batch_stride;                          // elements from one cache entry (or page) to the next
    const unsigned short* __restrict__ knew;            // keys and values to append, (batch, seqlen_knew, heads_k,
    const unsigned short* __restrict__ vnew;            // kHeadDim); nullptr: none
    int seqlen_knew;
    const unsigned short* __restrict__ rotary_cos;      // (seqlen_ro, rotary_dim / 2); rotary_dim 0: off
    const unsigned short* __restrict__ rotary_sin;
    int rotary_dim, rotary_interleaved;
    unsigned short* kc;                                 // k and v again, written by an append
    unsigned short* vc;
};

// 16 bits -> f32 (exact): bf16 is the high half of an f32, f16 converts (cvt.f32.f16)
template <bool kBF16>
__device__ __forceinline__ float to_f32(unsigned short x) {
    if (kBF16) return __uint_as_float(unsigned(x) << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}

// Rotary embedding of the 8 elements at column c of a 16-bit row (flash-attn's rotary.h), at the cos/sin table
// row `cs`/`sn` (rotary_dim / 2 entries), columns c < rotary_dim only:
//   interleaved: pairs (2i, 2i + 1): x0 c - x1 s, x0 s + x1 c with c, s at column c / 2 + i;
//   otherwise: column j pairs with j +- rotary_dim / 2: x c + x_other (-s for the left half, +s for the right)
//   at column j of the left half; the results rounded (cvt.rn) back to 16 bits.
template <bool kBF16>
__device__ __forceinline__ uint4 rotate8(const unsigned short* row, int c, const unsigned short* cs,
                                         const unsigned short* sn, int rotary_dim, bool interleaved) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c);
    const unsigned short* xs = reinterpret_cast<const unsigned short*>(&raw);
    float y[8];
    if (interleaved) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float x0 = to_f32<kBF16>(xs[2 * i]), x1 = to_f32<kBF16>(xs[2 * i + 1]);
            const float co = to_f32<kBF16>(cs[c / 2 + i]), si = to_f32<kBF16>(sn[c / 2 + i]);
            y[2 * i] = x0 * co - x1 * si;
            y[2 * i + 1] = x0 * si + x1 * co;
        }
    } else {
        const int half = rotary_dim / 2;
        const bool left = c < half;
        const uint4 oraw = *reinterpret_cast<const uint4*>(row + (left ? c + half : c - half));
        const unsigned short* os = reinterpret_cast<const unsigned short*>(&oraw);
        const int j0 = left ? c : c - half;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const float si = to_f32<kBF16>(sn[j0 + e]);
            y[e] = to_f32<kBF16>(xs[e]) * to_f32<kBF16>(cs[j0 + e]) + to_f32<kBF16>(os[e]) * (left ? -si : si);
        }
    }
    return uint4{wops::cvt_pair<kBF16>(y[0], y[1]), wops::cvt_pair<kBF16>(y[2], y[3]),
                 wops::cvt_pair<kBF16>(y[4], y[5]), wops::cvt_pair<kBF16>(y[6], y[7])};
}

// Philox4x32-10 of counter (offset, subsequence) under key seed (flashsim.numerics.philox).
__device__ __forceinline__ uint4 philox(unsigned long long seed, unsigned long long sub, unsigned long long off) {
    unsigned c0 = unsigned(off), c1 = unsigned(off >> 32), c2 = unsigned(sub), c3 = unsigned(sub >> 32);
    unsigned k0 = unsigned(seed), k1 = unsigned(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
        const unsigned n0 = unsigned(p1 >> 32) ^ c1 ^ k0, n2 = unsigned(p0 >> 32) ^ c3 ^ k1;
        c0 = n0; c1 = unsigned(p1); c2 = n2; c3 = unsigned(p0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return make_uint4(c0, c1, c2, c3);
}

// The keep mask of a pair of 16-bit P values: halves of 0xffff (kept) or 0 from bytes 2 ip and 2 ip + 1 of
// word w, each zero-extended to 16 bits and compared (<=) with the threshold in both halves (flash-attn's
// set.le.u32.f16x2: the f16 order of such patterns is their integer order).
__device__ __forceinline__ unsigned keep_pair(unsigned w, int ip, unsigned threshold2) {
    const unsigned rnd = __byte_perm(w, 0u, ip ? 0x4342u : 0x4140u);
    unsigned mask;
    asm("set.le.u32.f16x2 %0, %1, %2;" : "=r"(mask) : "r"(rnd), "r"(threshold2));
    return mask;
}

__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }  // C++ truncation, as cute
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
// floor(a / b) for b > 0 (FA3's div_floor): C++ division truncates toward 0
__device__ __forceinline__ int div_floor(int a, int b) { return a >= 0 ? a / b : -1 - (-1 - a) / b; }

// Swizzle<3,3,3> over tile_to_shape((8, 64):(64, 1), (rows, kHeadDim)): see the header.
template <int kRows>
__device__ __forceinline__ int smem_off(int r, int c) {
    return wops::swz<3, 3, 3>(512 * (r / 8 + (kRows / 8) * (c / 64)) + 64 * (r % 8) + c % 64);
}

// GMEM (row stride ld) -> SMEM tile of kRows x kHeadDim with the 16 x 8 thread layout; rows >= valid_rows
// are zero-filled. Issues cp.async only: the caller fences and waits.
template <int kRows, int kHeadDim, int kThreads = kNThreads>
__device__ __forceinline__ void copy_tile(unsigned short* s, const unsigned short* g, long long ld, int valid_rows,
                                          int tid) {
#pragma unroll
    for (int i = 0; i < kRows / (kThreads / 8); ++i) {
#pragma unroll
        for (int j = 0; j < kHeadDim / 64; ++j) {
            const int r = tid / 8 + (kThreads / 8) * i, c = (tid % 8) * 8 + 64 * j;
            unsigned short* dst = s + smem_off<kRows>(r, c);
            if (r < valid_rows) {
                wops::cp_async_16(dst, g + r * ld + c);
            } else {
                *reinterpret_cast<uint4*>(dst) = uint4{0u, 0u, 0u, 0u};
            }
        }
    }
}

template <int kHeadDim, int kBlockM, int kBlockN, bool kBF16, bool kChunked = false, bool kExt = false,
          bool kSplit = false, int kNWarps = 4>
__device__ __forceinline__ void forward(const Params& p) {
    constexpr bool kVar = kExt || kSplit;  // the instances that take packed sequences
    constexpr int kThreads = 32 * kNWarps;
    constexpr int kRowsPerM = 16 * kNWarps;  // rows of an m-tile of the CTA: 16 per warp
    constexpr int kRowStep = kThreads / 8;   // rows of a GMEM <-> SMEM pass (8 threads of 16 bytes per 64 columns)
    static_assert(kBlockM % kRowsPerM == 0 && kBlockN % 16 == 0, "kNWarps warps of 16 rows per m-tile; 16-key slices");
    constexpr int kMT = kBlockM / kRowsPerM;  // m-tiles per warp (warp w: rows 16 w + kRowsPerM m + 0..15)
    constexpr int kNT = kBlockN / 8;      // n-tiles of S per warp and m
    constexpr int kKS = kHeadDim / 16;    // k-slices of Q K^T
    constexpr int kKP = kBlockN / 16;     // k-slices of P V
    constexpr int kDT = kHeadDim / 8;     // n-tiles of O per warp and m
    const float kNegInf = -__int_as_float(0x7f800000);

    extern __shared__ __align__(16) unsigned char smem[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(smem);
    unsigned short* sK = sQ + kBlockM * kHeadDim;
    unsigned short* sV = sK + kBlockN * kHeadDim;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    FS_TRACE_INIT();
    // kSplit: grid (m_blocks, splits, batch * heads); the others (m_blocks, heads, batch)
    const int m_block = blockIdx.x, head = kSplit ? int(blockIdx.z % p.heads) : blockIdx.y,
              bidb = kSplit ? int(blockIdx.z / p.heads) : blockIdx.z;
    const int n_split = kSplit ? blockIdx.y : 0, num_splits = kSplit ? gridDim.y : 1;
    // kVar: this sequence's lengths and first rows (flash-attn's BlockInfo)
    const bool varlen_q = kVar && p.cu_seqlens_q != nullptr, varlen_k = kVar && p.cu_seqlens_k != nullptr;
    const int seqlen_q_ = varlen_q ? p.cu_seqlens_q[bidb + 1] - p.cu_seqlens_q[bidb] : p.seqlen_q;
    // kSplit's KV cache: the entry's cache length (seqlens_k), its cache entry (cache_batch_idx), keys appended
    const bool kv_lens = kVar && p.seqlens_k != nullptr, paged = kSplit && p.block_table != nullptr;
    const bool append = kSplit && p.knew != nullptr;
    const int seqlen_k_cache = kv_lens ? p.seqlens_k[bidb]
        : varlen_k ? p.cu_seqlens_k[bidb + 1] - p.cu_seqlens_k[bidb] : p.seqlen_k;
    const int seqlen_k_ = append ? seqlen_k_cache + p.seqlen_knew : seqlen_k_cache;
    const int bidb_cache = (kSplit && p.cache_batch_idx != nullptr) ? p.cache_batch_idx[bidb] : bidb;
    const long long first_q = varlen_q ? (long long)p.cu_seqlens_q[bidb] : (long long)bidb * p.seqlen_q;
    const long long first_k = paged ? 0LL : varlen_k ? (long long)p.cu_seqlens_k[bidb]
                                                     : (long long)bidb_cache * p.seqlen_k;
#define FA2_SQ (kVar ? seqlen_q_ : p.seqlen_q)
#define FA2_SK (kVar ? seqlen_k_ : p.seqlen_k)
    if (kVar && m_block * kBlockM >= seqlen_q_) return;  // past a packed sequence's end
    const int head_k = head / (p.heads / p.heads_k);
    const long long q_row = (long long)p.heads * kHeadDim, k_row = (long long)p.heads_k * kHeadDim;
    const unsigned short* gQ = kVar ? p.q + (first_q + (long long)m_block * kBlockM) * q_row + head * kHeadDim
        : p.q + ((long long)bidb * p.seqlen_q + (long long)m_block * kBlockM) * q_row + head * kHeadDim;
    const unsigned short* gK = kVar ? (kSplit ? p.kc : p.k) + first_k * k_row + head_k * kHeadDim
        : p.k + (long long)bidb * p.seqlen_k * k_row + head_k * kHeadDim;
    const unsigned short* gV = kVar ? (kSplit ? p.vc : p.v) + first_k * k_row + head_k * kHeadDim
        : p.v + (long long)bidb * p.seqlen_k * k_row + head_k * kHeadDim;
    // the first element of KV block n from gK / gV: n kBlockN rows on, or (paged) in its page of the block table
    auto kv_block = [&](int n) -> long long {
        if (!paged) return (long long)n * kBlockN * k_row;
        const int row = n * kBlockN;
        return (long long)p.block_table[bidb * p.block_table_stride + row / p.page_block_size] * p.kv_batch_stride
               + (long long)(row % p.page_block_size) * k_row;
    };
#define FA2_KV_BLOCK(n) (kSplit ? kv_block(n) : (long long)(n) * kBlockN * k_row)
    unsigned short* gO = kVar ? p.o + (first_q + (long long)m_block * kBlockM) * q_row + head * kHeadDim
        : p.o + ((long long)bidb * p.seqlen_q + (long long)m_block * kBlockM) * q_row + head * kHeadDim;
    // the LSE rows: (batch, heads, seqlen_q), or (heads, total_q) for packed q (unpadded_lse); kSplit with
    // splits: lse_accum (splits, batch, heads, seqlen_q) and oaccum (splits, batch, heads, seqlen_q, kHeadDim) f32
    const bool split_out = kSplit && p.oaccum != nullptr;
    const long long lse_row0 = split_out ? (((long long)n_split * p.batch + bidb) * p.heads + head) * p.seqlen_q
        : varlen_q ? (long long)head * p.total_q + first_q : ((long long)bidb * p.heads + head) * p.seqlen_q;
    float* gLSE = kVar ? (split_out ? p.lse_accum : p.lse) + lse_row0 + (long long)m_block * kBlockM
        : p.lse + ((long long)bidb * p.heads + head) * p.seqlen_q + (long long)m_block * kBlockM;
    float* gOacc = split_out ? p.oaccum + (lse_row0 + (long long)m_block * kBlockM) * kHeadDim : nullptr;
    const int rows_left = FA2_SQ - m_block * kBlockM;

    // flash-attn's Is_even_MN: kExt and kSplit take the launch's (run_flash_fwd and run_flash_splitkv_fwd fold into
    // it packed sequences, per-entry lengths, d != kHeadDim, local windows, ALiBi, returned probabilities and head
    // dims above 128: flash_fwd_launch_template.h:79 and 120); the others, both seqlens multiples of the tiles at
    // head dims up to 128 (they assume d == kHeadDim)
    const bool even_mn = kVar ? p.is_even_mn != 0
        : kHeadDim <= 128 && p.seqlen_q % kBlockM == 0 && p.seqlen_k % kBlockN == 0;
    const int chunk = kChunked ? p.attention_chunk : 0;  // C (see the header); 0: off
    // FA2's is_local in the step logic: a local window or (kChunked) a chunk, every KV step is masked. A macro, so
    // that the other instances read p.is_local at each use as before (a bool variable reorders their SASS)
#define FA2_LOCAL_MASK (kChunked ? (p.is_local || chunk > 0) : p.is_local)
    // kSplit: split n_split of num_splits takes its share of ceil(seqlen_k / kBlockN) blocks, seqlen_k the launch's
    const int split_min = kSplit ? n_split * ((ceil_div(p.seqlen_k, kBlockN) + num_splits - 1) / num_splits) : 0;
    int n_block_min = !p.is_local ? split_min
        : imax(split_min, (m_block * kBlockM + FA2_SK - FA2_SQ - p.window_left) / kBlockN);
    int n_block_max = ceil_div(FA2_SK, kBlockN);
    if (kSplit) n_block_max = imin(n_block_max, split_min + (ceil_div(p.seqlen_k, kBlockN) + num_splits - 1) / num_splits);
    if (p.is_causal || p.is_local) {
        n_block_max = imin(n_block_max,
                          ceil_div((m_block + 1) * kBlockM + FA2_SK - FA2_SQ + p.window_right, kBlockN));
    }
    if (chunk > 0) {  // block.h: from the chunk start of the CTA's first row to the chunk end of its last
        n_block_min = imax(n_block_min, div_floor(m_block * kBlockM + FA2_SK - FA2_SQ, chunk) * chunk / kBlockN);
        n_block_max = imin(n_block_max, ceil_div(div_floor((m_block + 1) * kBlockM + FA2_SK - FA2_SQ - 1, chunk)
                                                 * chunk + chunk, kBlockN));
    }

    // an empty KV range: O = 0 and LSE +inf (a split: Oaccum = 0 and its LSE -inf, so that the combine skips it)
    if ((kSplit || p.is_causal || FA2_LOCAL_MASK || !even_mn) && n_block_max <= n_block_min) {
        if (split_out) {
#pragma unroll
            for (int i = 0; i < kBlockM / kRowStep; ++i) {
#pragma unroll
                for (int j = 0; j < kHeadDim / 64; ++j) {
                    const int r = tid / 8 + kRowStep * i, c = (tid % 8) * 8 + 64 * j;
                    if (r < rows_left) {
                        *reinterpret_cast<float4*>(gOacc + r * kHeadDim + c) = float4{0.f, 0.f, 0.f, 0.f};
                        *reinterpret_cast<float4*>(gOacc + r * kHeadDim + c + 4) = float4{0.f, 0.f, 0.f, 0.f};
                    }
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < kBlockM / kRowStep; ++i) {
#pragma unroll
                for (int j = 0; j < kHeadDim / 64; ++j) {
                    const int r = tid / 8 + kRowStep * i, c = (tid % 8) * 8 + 64 * j;
                    if (r < rows_left) *reinterpret_cast<uint4*>(gO + r * q_row + c) = uint4{0u, 0u, 0u, 0u};
                }
            }
        }
        if (tid < kBlockM && tid < rows_left) gLSE[tid] = split_out ? kNegInf : __int_as_float(0x7f800000);
        FS_TRACE(empty, 0, );
        return;
    }

    // kSplit: append knew and vnew (rotated keys) at rows [seqlen_k_cache, seqlen_k) of the cache, the blocks of the
    // CTA's KV range from the one of seqlen_k_cache on (flash_fwd_kernel.h:719-793): every CTA of a kv head writes
    // the same bytes; a row no CTA's range reaches stays as it was
    const bool rotary = append && p.rotary_dim > 0;
    if (append) {
        unsigned short* kw = p.kc + (gK - p.kc);
        unsigned short* vw = p.vc + (gV - p.vc);
        for (int n = n_block_max - 1; n >= imax(n_block_min, seqlen_k_cache / kBlockN); --n) {
#pragma unroll
            for (int i = 0; i < kBlockN / kRowStep; ++i) {
#pragma unroll
                for (int j = 0; j < kHeadDim / 64; ++j) {
                    const int r = tid / 8 + kRowStep * i, c = (tid % 8) * 8 + 64 * j, key = n * kBlockN + r;
                    if (key >= seqlen_k_cache && key < seqlen_k_) {
                        const long long src = ((long long)bidb * p.seqlen_knew + key - seqlen_k_cache) * k_row
                                              + head_k * kHeadDim + c;
                        const long long dst = FA2_KV_BLOCK(n) + r * k_row + c;
                        *reinterpret_cast<uint4*>(vw + dst) = *reinterpret_cast<const uint4*>(p.vnew + src);
                        *reinterpret_cast<uint4*>(kw + dst) = (rotary && c < p.rotary_dim)
                            ? rotate8<kBF16>(p.knew + src - c, c, p.rotary_cos + (long long)key * (p.rotary_dim / 2),
                                             p.rotary_sin + (long long)key * (p.rotary_dim / 2), p.rotary_dim,
                                             p.rotary_interleaved != 0)
                            : *reinterpret_cast<const uint4*>(p.knew + src);
                    }
                }
            }
        }
        __syncthreads();
    }

    // Prologue: Q and the last K block in flight. kSplit with rotary: Q rotated at key position seqlen_k_cache (+ its
    // row with causal or local masks) through registers
    if (rotary) {
#pragma unroll
        for (int i = 0; i < kBlockM / kRowStep; ++i) {
#pragma unroll
            for (int j = 0; j < kHeadDim / 64; ++j) {
                const int r = tid / 8 + kRowStep * i, c = (tid % 8) * 8 + 64 * j;
                uint4 x = uint4{0u, 0u, 0u, 0u};
                if (r < rows_left) {
                    const long long pos = seqlen_k_cache + ((p.is_causal || p.is_local) ? m_block * kBlockM + r : 0);
                    x = c < p.rotary_dim
                        ? rotate8<kBF16>(gQ + r * q_row, c, p.rotary_cos + pos * (p.rotary_dim / 2),
                                         p.rotary_sin + pos * (p.rotary_dim / 2), p.rotary_dim, p.rotary_interleaved != 0)
                        : *reinterpret_cast<const uint4*>(gQ + r * q_row + c);
                }
                *reinterpret_cast<uint4*>(sQ + smem_off<kBlockM>(r, c)) = x;
            }
        }
    } else {
        copy_tile<kBlockM, kHeadDim, kThreads>(sQ, gQ, q_row, rows_left, tid);
    }
    FS_TRACE(load_q, 0, );
    int n_block = n_block_max - 1;
    copy_tile<kBlockN, kHeadDim, kThreads>(sK, gK + FA2_KV_BLOCK(n_block), k_row, FA2_SK - n_block * kBlockN, tid);
    wops::cp_async_fence();
    FS_TRACE(load_k, 0, );

    float acc_o[kMT][kDT][4];
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int n = 0; n < kDT; ++n) acc_o[m][n][0] = acc_o[m][n][1] = acc_o[m][n][2] = acc_o[m][n][3] = 0.0f;
    float row_max[kMT][2], row_sum[kMT][2];  // [m][i]: row 16 warp + kRowsPerM m + g + 8 i

    const int n_masking_steps = (!p.is_causal && !FA2_LOCAL_MASK) ? 1
        : (even_mn ? ceil_div(kBlockM, kBlockN) : ceil_div(kBlockM, kBlockN) + 1);
    const int row_base = m_block * kBlockM + warp * 16 + g;
    // kExt: the ALiBi slope in the scores' units, and the lane's philox offset
    const float alibi_slope = (kVar && p.alibi_slopes != nullptr)
        ? p.alibi_slopes[bidb * p.alibi_batch_stride + head] / p.scale_softmax : 0.0f;
    const unsigned long long philox_off = kExt ? p.philox_offset + (unsigned long long)((bidb * p.heads + head) * 32 + lane) : 0ull;

    for (int step = 0; n_block >= n_block_min; ++step, --n_block) {
        const bool masking = step < n_masking_steps;
        const bool is_first = step == 0;
        float acc_s[kMT][kNT][4];
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
            for (int n = 0; n < kNT; ++n) acc_s[m][n][0] = acc_s[m][n][1] = acc_s[m][n][2] = acc_s[m][n][3] = 0.0f;
        wops::cp_async_wait_all();
        __syncthreads();
        copy_tile<kBlockN, kHeadDim, kThreads>(sV, gV + FA2_KV_BLOCK(n_block), k_row,
                                     FA2_SK - n_block * kBlockN, tid);
        wops::cp_async_fence();
        FS_TRACE(load_v, 0, );

#pragma unroll
        for (int ks = 0; ks < kKS; ++ks) {
            unsigned qf[kMT][4];
#pragma unroll
            for (int m = 0; m < kMT; ++m)
                wops::ldmatrix_x4(qf[m], sQ + smem_off<kBlockM>(warp * 16 + m * kRowsPerM + lane % 16, ks * 16 + (lane / 16) * 8));
#pragma unroll
            for (int n = 0; n < kNT; n += 2) {
                unsigned kf[4];
                wops::ldmatrix_x4(kf, sK + smem_off<kBlockN>(n * 8 + lane % 8 + (lane / 16) * 8, ks * 16 + ((lane / 8) % 2) * 8));
#pragma unroll
                for (int m = 0; m < kMT; ++m) {
                    wops::mma_f32<kBF16>(acc_s[m][n], qf[m], kf[0], kf[1]);
                    wops::mma_f32<kBF16>(acc_s[m][n + 1], qf[m], kf[2], kf[3]);
                }
            }
        }

        FS_TRACE(mma_qk, kMT * kNT * 4, FS_PUT(acc_s));

        if (p.softcap > 0.0f) {
#pragma unroll
            for (int m = 0; m < kMT; ++m)
#pragma unroll
                for (int n = 0; n < kNT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc_s[m][n][e] = wops::tanh_approx(acc_s[m][n][e] * p.softcap);
        }
        if (kVar && p.alibi_slopes != nullptr) {  // every step, before the masks (mask.h applies it first)
#pragma unroll
            for (int m = 0; m < kMT; ++m)
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int row = row_base + m * kRowsPerM + i * 8;
#pragma unroll
                    for (int n = 0; n < kNT; ++n)
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            const int col = n_block * kBlockN + n * 8 + 2 * t + j;
                            if (p.is_causal) acc_s[m][n][2 * i + j] += alibi_slope * col;
                            else acc_s[m][n][2 * i + j] -= alibi_slope * abs(row + FA2_SK - FA2_SQ - col);
                        }
                }
        }
        if ((masking && (p.is_causal || FA2_LOCAL_MASK || !even_mn)) || (!masking && FA2_LOCAL_MASK)) {
#pragma unroll
            for (int m = 0; m < kMT; ++m) {
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int row = row_base + m * kRowsPerM + i * 8;
                    int right = FA2_SK, left = 0;
                    if (p.is_causal || p.is_local) {
                        if (p.is_causal || p.window_right >= 0)
                            right = imin(FA2_SK, row + 1 + FA2_SK - FA2_SQ + p.window_right);
                        if (p.is_local && p.window_left >= 0)
                            left = imax(0, row + FA2_SK - FA2_SQ - p.window_left);
                    }
                    // mask.h: the row's chunk [start, start + C) bounds both sides (one unsigned compare: with
                    // left = max(left, start), right = min(right, start + C), NVRTC 13.0 fuses the three-way
                    // min into a VIMNMX3, which the interpreter does not model)
                    int start = 0;
                    if (kChunked && chunk > 0) start = div_floor(row + FA2_SK - FA2_SQ, chunk) * chunk;
#pragma unroll
                    for (int n = 0; n < kNT; ++n) {
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            const int col = n_block * kBlockN + n * 8 + 2 * t + j;
                            if (col >= right || col < left) acc_s[m][n][2 * i + j] = kNegInf;
                            if (kChunked && chunk > 0 && unsigned(col - start) >= unsigned(chunk))
                                acc_s[m][n][2 * i + j] = kNegInf;
                        }
                    }
                }
            }
        }

        FS_TRACE(mask, kMT * kNT * 4, FS_PUT(acc_s));

        wops::cp_async_wait_all();
        __syncthreads();
        if (n_block > n_block_min) {
            copy_tile<kBlockN, kHeadDim, kThreads>(sK, gK + FA2_KV_BLOCK(n_block - 1), k_row, kBlockN, tid);
            wops::cp_async_fence();
            FS_TRACE(load_k, 0, );
        }

        const bool check_inf = masking ? (p.is_causal || FA2_LOCAL_MASK || (kSplit && !even_mn)) : FA2_LOCAL_MASK;
#pragma unroll
        for (int m = 0; m < kMT; ++m) {
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const float prev = row_max[m][i];
                float mx = is_first ? acc_s[m][0][2 * i] : fmaxf(row_max[m][i], acc_s[m][0][2 * i]);
                mx = fmaxf(mx, acc_s[m][0][2 * i + 1]);
#pragma unroll
                for (int n = 1; n < kNT; ++n) {
                    mx = fmaxf(mx, acc_s[m][n][2 * i]);
                    mx = fmaxf(mx, acc_s[m][n][2 * i + 1]);
                }
                mx = fmaxf(mx, wops::shfl_xor(mx, 2));
                mx = fmaxf(mx, wops::shfl_xor(mx, 1));
                row_max[m][i] = mx;
                if (!is_first) {
                    const float cur = !check_inf ? mx : (mx == kNegInf ? 0.0f : mx);
                    const float c = exp2f((prev - cur) * p.scale_softmax_log2);
                    row_sum[m][i] *= c;
#pragma unroll
                    for (int n = 0; n < kDT; ++n) {
                        acc_o[m][n][2 * i] *= c;
                        acc_o[m][n][2 * i + 1] *= c;
                    }
                }
                const float max_scaled = mx == kNegInf ? 0.0f : mx * p.scale_softmax_log2;
#pragma unroll
                for (int n = 0; n < kNT; ++n) {
                    acc_s[m][n][2 * i] = exp2f(acc_s[m][n][2 * i] * p.scale_softmax_log2 - max_scaled);
                    acc_s[m][n][2 * i + 1] = exp2f(acc_s[m][n][2 * i + 1] * p.scale_softmax_log2 - max_scaled);
                }
                float sum = is_first ? acc_s[m][0][2 * i] : row_sum[m][i] + acc_s[m][0][2 * i];
                sum = sum + acc_s[m][0][2 * i + 1];
#pragma unroll
                for (int n = 1; n < kNT; ++n) {
                    sum = sum + acc_s[m][n][2 * i];
                    sum = sum + acc_s[m][n][2 * i + 1];
                }
                row_sum[m][i] = sum;
            }
        }

        FS_TRACE(softmax, 4 * kMT + kMT * kNT * 4 + kMT * kDT * 4, FS_PUT(row_max); FS_PUT(row_sum); FS_PUT(acc_s); FS_PUT(acc_o));

        uint4 rnd[kMT];  // kExt with dropout: the philox block of the m-tile's current 32 keys
#pragma unroll
        for (int ks = 0; ks < kKP; ++ks) {
            unsigned pf[kMT][4];
#pragma unroll
            for (int m = 0; m < kMT; ++m) {
                pf[m][0] = wops::cvt_pair<kBF16>(acc_s[m][2 * ks][0], acc_s[m][2 * ks][1]);
                pf[m][1] = wops::cvt_pair<kBF16>(acc_s[m][2 * ks][2], acc_s[m][2 * ks][3]);
                pf[m][2] = wops::cvt_pair<kBF16>(acc_s[m][2 * ks + 1][0], acc_s[m][2 * ks + 1][1]);
                pf[m][3] = wops::cvt_pair<kBF16>(acc_s[m][2 * ks + 1][2], acc_s[m][2 * ks + 1][3]);
            }
            if (kExt && (p.is_dropout || p.s_dmask != nullptr)) {
                const unsigned thr2 = p.p_dropout_u8 | (p.p_dropout_u8 << 16);
#pragma unroll
                for (int m = 0; m < kMT; ++m) {
                    if (ks % 2 == 0) {
                        const unsigned long long row16 = (unsigned long long)((m_block * kBlockM + warp * 16 + m * kRowsPerM) / 16);
                        const unsigned long long col32 = (unsigned long long)(n_block * (kBlockN / 32) + ks / 2);
                        rnd[m] = philox(p.philox_seed, row16 | (col32 << 32), philox_off);
                    }
                    // n-tiles 2 ks and 2 ks + 1 use words (2 ks) % 4 and (2 ks + 1) % 4
                    const unsigned w0 = (ks % 2 == 0) ? rnd[m].x : rnd[m].z, w1 = (ks % 2 == 0) ? rnd[m].y : rnd[m].w;
                    const unsigned keep[4] = {keep_pair(w0, 0, thr2), keep_pair(w0, 1, thr2), keep_pair(w1, 0, thr2),
                                              keep_pair(w1, 1, thr2)};
                    if (p.s_dmask != nullptr) {
                        const int r = m_block * kBlockM + warp * 16 + m * kRowsPerM + g, c = n_block * kBlockN + ks * 16 + 2 * t;
                        unsigned short* sp = p.s_dmask + ((long long)(bidb * p.heads + head) * p.seqlen_q_rounded + r)
                                             * p.seqlen_k_rounded + c;
                        const long long r8 = 8LL * p.seqlen_k_rounded;
                        *reinterpret_cast<unsigned*>(sp) = pf[m][0] ^ (~keep[0] & 0x80008000u);
                        *reinterpret_cast<unsigned*>(sp + r8) = pf[m][1] ^ (~keep[1] & 0x80008000u);
                        *reinterpret_cast<unsigned*>(sp + 8) = pf[m][2] ^ (~keep[2] & 0x80008000u);
                        *reinterpret_cast<unsigned*>(sp + r8 + 8) = pf[m][3] ^ (~keep[3] & 0x80008000u);
                    }
                    if (p.is_dropout) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) pf[m][e] &= keep[e];
                    }
                }
            }
#pragma unroll
            for (int n = 0; n < kDT; n += 2) {
                unsigned vf[4];
                wops::ldmatrix_x4_trans(vf, sV + smem_off<kBlockN>(ks * 16 + lane % 16, n * 8 + (lane / 16) * 8));
#pragma unroll
                for (int m = 0; m < kMT; ++m) {
                    wops::mma_f32<kBF16>(acc_o[m][n], pf[m], vf[0], vf[1]);
                    wops::mma_f32<kBF16>(acc_o[m][n + 1], pf[m], vf[2], vf[3]);
                }
            }
        }
        FS_TRACE(mma_pv, kMT * kDT * 4, FS_PUT(acc_o));
    }

    // Epilogue: normalize_softmax_lse, then O through sO (= sQ) to GMEM.
    float lse[kMT][2];
#pragma unroll
    for (int m = 0; m < kMT; ++m) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float sum = row_sum[m][i];
            sum = sum + wops::shfl_xor(sum, 2);
            sum = sum + wops::shfl_xor(sum, 1);
            const bool empty = sum == 0.0f || sum != sum;
            const float inv_sum = empty ? 1.0f : 1.0f / sum;
            const float inv = (kExt && p.is_dropout) ? inv_sum * p.rp_dropout : inv_sum;
            lse[m][i] = empty ? (split_out ? kNegInf : __int_as_float(0x7f800000)) : row_max[m][i] * p.scale_softmax + __logf(sum);
#pragma unroll
            for (int n = 0; n < kDT; ++n) {
                acc_o[m][n][2 * i] *= inv;
                acc_o[m][n][2 * i + 1] *= inv;
            }
        }
    }
    FS_TRACE(normalize, 2 * kMT + kMT * kDT * 4, FS_PUT(lse); FS_PUT(acc_o));

    if (split_out) {  // the split's f32 O (flash-attn stages it through smem: the same values) and LSE
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int r = warp * 16 + m * kRowsPerM + g + 8 * i;
                if (r < rows_left) {
#pragma unroll
                    for (int n = 0; n < kDT; ++n)
                        *reinterpret_cast<float2*>(gOacc + r * kHeadDim + n * 8 + 2 * t) =
                            float2{acc_o[m][n][2 * i], acc_o[m][n][2 * i + 1]};
                    if (t == 0) gLSE[r] = lse[m][i];
                }
            }
        FS_TRACE(store_o, 0, );
        return;
    }

#pragma unroll
    for (int m = 0; m < kMT; ++m) {
#pragma unroll
        for (int n = 0; n < kDT; ++n) {
            const int r = warp * 16 + m * kRowsPerM + g, c = n * 8 + 2 * t;
            *reinterpret_cast<unsigned*>(sQ + smem_off<kBlockM>(r, c)) = wops::cvt_pair<kBF16>(acc_o[m][n][0], acc_o[m][n][1]);
            *reinterpret_cast<unsigned*>(sQ + smem_off<kBlockM>(r + 8, c)) = wops::cvt_pair<kBF16>(acc_o[m][n][2], acc_o[m][n][3]);
        }
    }
    if (t == 0) {
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int r = warp * 16 + m * kRowsPerM + g + 8 * i;
                if (r < rows_left) gLSE[r] = lse[m][i];
            }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kBlockM / kRowStep; ++i) {
#pragma unroll
        for (int j = 0; j < kHeadDim / 64; ++j) {
            const int r = tid / 8 + kRowStep * i, c = (tid % 8) * 8 + 64 * j;
            if (r < rows_left)
                *reinterpret_cast<uint4*>(gO + r * q_row + c) = *reinterpret_cast<const uint4*>(sQ + smem_off<kBlockM>(r, c));
        }
    }
    FS_TRACE(store_o, 0, );
#undef FA2_LOCAL_MASK
#undef FA2_SQ
#undef FA2_SK
#undef FA2_KV_BLOCK
}

}  // namespace fa2

// Scalars are passed one by one (cupy's RawKernel takes no structs).
// Every entry point takes these first, then its build's own (fa2::Params in this order).
#define FA2_PARAMS                                                                                              \
    const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* o, float* lse,    \
        int seqlen_q, int seqlen_k, int heads, int heads_k, float scale_softmax, float scale_softmax_log2,      \
        float softcap, int window_left, int window_right, int is_causal, int is_local
#define FA2_ARGS                                                                                                \
    q, k, v, o, lse, seqlen_q, seqlen_k, heads, heads_k, scale_softmax, scale_softmax_log2, softcap,            \
        window_left, window_right, is_causal, is_local
#define FA2_KERNEL(name, hdim, block_m, block_n, bf16, warps)                                                  \
    extern "C" __global__ void __launch_bounds__(32 * (warps))                                                  \
    name(FA2_PARAMS) {                                                                                          \
        const fa2::Params p{FA2_ARGS};                                                                          \
        fa2::forward<hdim, block_m, block_n, bf16, false, false, false, warps>(p);                              \
    }

// The configurations (flashsim.kernels.spec): "fa2", seed 000's tiles (hdim 128: 128 x 32, hdim 64: 128 x 64)
FA2_KERNEL(fa2_hdim128_f16, 128, 128, 32, false, 4)
FA2_KERNEL(fa2_hdim128_bf16, 128, 128, 32, true, 4)
FA2_KERNEL(fa2_hdim64_f16, 64, 128, 64, false, 4)
FA2_KERNEL(fa2_hdim64_bf16, 64, 128, 64, true, 4)
// "fa2_sm8x", the tiles flash-attn's sm8x traits choose for causal attention (hdim 128: 64 x 64, one m-tile
// per warp; hdim 64: 128 x 64)
FA2_KERNEL(fa2_sm8x_hdim128_f16, 128, 64, 64, false, 4)
FA2_KERNEL(fa2_sm8x_hdim128_bf16, 128, 64, 64, true, 4)
FA2_KERNEL(fa2_sm8x_hdim64_f16, 64, 128, 64, false, 4)
FA2_KERNEL(fa2_sm8x_hdim64_bf16, 64, 128, 64, true, 4)

// The entry points of the head dims above 128: flash-attn's sm80 traits for sm90 (flash_fwd_launch_template.h
// at the commit above: run_mha_fwd_hdim192 without dropout, line 286, <192, 128, 64, 8>, and with dropout, line
// 288, <192, 64, 64, 4> (the kExt instance fa2_ext_hdim192_dropout_*: dropout runs only on the ext build);
// run_mha_fwd_hdim256 on a GPU whose SM has less than 4 * 256 * (64 + 2 * 64) bytes of smem, line 318,
// <256, 64, 64, 4>)
FA2_KERNEL(fa2_hdim192_f16, 192, 128, 64, false, 8)
FA2_KERNEL(fa2_hdim192_bf16, 192, 128, 64, true, 8)
FA2_KERNEL(fa2_hdim256_f16, 256, 64, 64, false, 4)
FA2_KERNEL(fa2_hdim256_bf16, 256, 64, 64, true, 4)

// The chunked entry points take one more parameter, attention_chunk (after is_local).
#define FA2_CHUNKED_KERNEL(name, hdim, block_m, block_n, bf16)                                                 \
    extern "C" __global__ void __launch_bounds__(fa2::kNThreads)                                                \
    name(FA2_PARAMS, int attention_chunk) {                                                                     \
        const fa2::Params p{FA2_ARGS,                                                                           \
                            attention_chunk};                                                                   \
        fa2::forward<hdim, block_m, block_n, bf16, true>(p);                                                    \
    }

// "fa2_chunked": chunked attention with the tiles of flash-attn's sm80 Flash_fwd_kernel_traits without dropout
// (csrc/flash_attn/src/flash_fwd_launch_template.h at the commit above: run_mha_fwd_hdim64, line 210,
// <Headdim, 128, 128, 4>; run_mha_fwd_hdim128 off sm8x, line 262, <Headdim, 128, 64, 4>)
FA2_CHUNKED_KERNEL(fa2_chunked_hdim128_f16, 128, 128, 64, false)
FA2_CHUNKED_KERNEL(fa2_chunked_hdim128_bf16, 128, 128, 64, true)
FA2_CHUNKED_KERNEL(fa2_chunked_hdim64_f16, 64, 128, 128, false)
FA2_CHUNKED_KERNEL(fa2_chunked_hdim64_bf16, 64, 128, 128, true)

// The kExt entry points ("fa2_ext_*", fa2's instances again): attention_chunk is 0; after is_local they take
// alibi_slopes (nullptr: off), alibi_batch_stride, is_dropout, p_dropout_u8, rp_dropout, philox_seed,
// philox_offset, s_dmask (nullptr: off), seqlen_q_rounded, seqlen_k_rounded, then cu_seqlens_q, cu_seqlens_k
// (nullptr: off) and total_q of packed sequences (seqlen_q and seqlen_k are then the longest sequence's), and
// seqlens_k (nullptr: off), the KV cache's lengths per batch entry (not cumulative; seqlen_k is the cache's), and
// is_even_mn, flash-attn's Is_even_MN of the launch.
#define FA2_EXT_KERNEL(name, hdim, block_m, block_n, bf16, warps)                                              \
    extern "C" __global__ void __launch_bounds__(32 * (warps))                                                  \
    name(FA2_PARAMS, const float* alibi_slopes, int alibi_batch_stride, int is_dropout, unsigned p_dropout_u8,  \
         float rp_dropout, unsigned long long philox_seed, unsigned long long philox_offset,                    \
         unsigned short* s_dmask, int seqlen_q_rounded, int seqlen_k_rounded, const int* cu_seqlens_q,          \
         const int* cu_seqlens_k, int total_q, const int* seqlens_k, int is_even_mn) {                          \
        const fa2::Params p{FA2_ARGS, 0,                                                                        \
                            alibi_slopes, alibi_batch_stride, is_dropout, p_dropout_u8, rp_dropout,             \
                            philox_seed, philox_offset, s_dmask, seqlen_q_rounded, seqlen_k_rounded,            \
                            cu_seqlens_q, cu_seqlens_k, total_q, nullptr, nullptr, is_even_mn, 0, seqlens_k};   \
        fa2::forward<hdim, block_m, block_n, bf16, false, true, false, warps>(p);                               \
    }

FA2_EXT_KERNEL(fa2_ext_hdim64_f16, 64, 128, 64, false, 4)
FA2_EXT_KERNEL(fa2_ext_hdim64_bf16, 64, 128, 64, true, 4)
FA2_EXT_KERNEL(fa2_ext_hdim128_f16, 128, 128, 32, false, 4)
FA2_EXT_KERNEL(fa2_ext_hdim128_bf16, 128, 128, 32, true, 4)
FA2_EXT_KERNEL(fa2_ext_hdim192_f16, 192, 128, 64, false, 8)
FA2_EXT_KERNEL(fa2_ext_hdim192_bf16, 192, 128, 64, true, 8)
FA2_EXT_KERNEL(fa2_ext_hdim192_dropout_f16, 192, 64, 64, false, 4)
FA2_EXT_KERNEL(fa2_ext_hdim192_dropout_bf16, 192, 64, 64, true, 4)
FA2_EXT_KERNEL(fa2_ext_hdim256_f16, 256, 64, 64, false, 4)
FA2_EXT_KERNEL(fa2_ext_hdim256_bf16, 256, 64, 64, true, 4)

// The kSplit entry points ("fa2_splitkv_*", flash-attn's compute_attn_1rowblock_splitkv): grid (m_blocks,
// num_splits, batch * heads); after is_local they take alibi_slopes (nullptr: off), alibi_batch_stride, oaccum
// and lse_accum (nullptr: one split, O and LSE written as fa2 writes them), is_even_mn, batch, then the KV cache's
// seqlens_k, cache_batch_idx, block_table (each nullptr: off), block_table_stride, page_block_size,
// kv_batch_stride, knew, vnew (nullptr: nothing appended), seqlen_knew, rotary_cos, rotary_sin, rotary_dim (0:
// off) and rotary_interleaved. k and v are written by an append.
#define FA2_SPLIT_KERNEL(name, hdim, block_m, block_n, bf16)                                                   \
    extern "C" __global__ void __launch_bounds__(fa2::kNThreads)                                                \
    name(FA2_PARAMS, const float* alibi_slopes, int alibi_batch_stride, float* oaccum, float* lse_accum,        \
         int is_even_mn, int batch, const int* seqlens_k, const int* cache_batch_idx, const int* block_table,     \
         int block_table_stride, int page_block_size, long long kv_batch_stride, const unsigned short* knew,     \
         const unsigned short* vnew, int seqlen_knew, const unsigned short* rotary_cos,                         \
         const unsigned short* rotary_sin, int rotary_dim, int rotary_interleaved) {                            \
        const fa2::Params p{FA2_ARGS, 0,                                                                        \
                            alibi_slopes, alibi_batch_stride, 0, 255u, 1.0f, 0ull, 0ull, nullptr, 0, 0,         \
                            nullptr, nullptr, 0, oaccum, lse_accum, is_even_mn, batch, seqlens_k,              \
                            cache_batch_idx, block_table, block_table_stride, page_block_size,                  \
                            kv_batch_stride, knew, vnew, seqlen_knew, rotary_cos, rotary_sin, rotary_dim,      \
                            rotary_interleaved, const_cast<unsigned short*>(k),                                 \
                            const_cast<unsigned short*>(v)};                                                    \
        fa2::forward<hdim, block_m, block_n, bf16, false, false, true>(p);                                      \
    }

// flash-attn's run_mha_fwd_splitkv_dispatch with more than one split: 64 x 256 at head dim 64, 64 x 128 up to
// 128, 64 x 64 above (flash_fwd_launch_template.h:179-191), 4 warps
FA2_SPLIT_KERNEL(fa2_splitkv_hdim64_f16, 64, 64, 256, false)
FA2_SPLIT_KERNEL(fa2_splitkv_hdim64_bf16, 64, 64, 256, true)
FA2_SPLIT_KERNEL(fa2_splitkv_hdim128_f16, 128, 64, 128, false)
FA2_SPLIT_KERNEL(fa2_splitkv_hdim128_bf16, 128, 64, 128, true)
FA2_SPLIT_KERNEL(fa2_splitkv_hdim192_f16, 192, 64, 64, false)
FA2_SPLIT_KERNEL(fa2_splitkv_hdim192_bf16, 192, 64, 64, true)
FA2_SPLIT_KERNEL(fa2_splitkv_hdim256_f16, 256, 64, 64, false)
FA2_SPLIT_KERNEL(fa2_splitkv_hdim256_bf16, 256, 64, 64, true)
// run_mha_fwd_splitkv_align, the split-KV kernel with one split (the KV cache's calls that do not split): 64 x 128
// at head dim 64, else 64 x 64 (flash_fwd_launch_template.h:172-177); above 128 the instances are those above
FA2_SPLIT_KERNEL(fa2_splitkv1_hdim64_f16, 64, 64, 128, false)
FA2_SPLIT_KERNEL(fa2_splitkv1_hdim64_bf16, 64, 64, 128, true)
FA2_SPLIT_KERNEL(fa2_splitkv1_hdim128_f16, 128, 64, 64, false)
FA2_SPLIT_KERNEL(fa2_splitkv1_hdim128_bf16, 128, 64, 64, true)
FA2_SPLIT_KERNEL(fa2_splitkv1_hdim192_f16, 192, 64, 64, false)
FA2_SPLIT_KERNEL(fa2_splitkv1_hdim192_bf16, 192, 64, 64, true)
FA2_SPLIT_KERNEL(fa2_splitkv1_hdim256_f16, 256, 64, 64, false)
FA2_SPLIT_KERNEL(fa2_splitkv1_hdim256_bf16, 256, 64, 64, true)

namespace fa2 {

// flash-attn's combine_attn_seqk_parallel (flash_fwd_kernel.h:1117-1299): kBlockM rows of the flattened
// (batch, heads, seqlen_q) per CTA of 128 threads, the splits' LSEs through smem. max_splits (kMaxSplits, the
// power of two >= num_splits, at least 2) is a launch parameter here, a template parameter there: it sets which
// thread sums which splits, R = min(128 / kBlockM, max_splits) threads per row, each summing the splits r, r + R,
// r + 2 R... in order, then a butterfly over the R threads (xor R / 2 down to 1).
//   lse_max = max of the splits' LSEs (0 when all are -inf); sum = sum of expf(lse_s - lse_max);
//   lse = sum == 0 or NaN ? +inf : logf(sum) + lse_max; scale_s = expf(lse_s - lse);
//   O = the splits' Oaccum in order, o = scale_s * oaccum_s + o from o = 0 (FFMA), then cvt.rn to 16 bits.
template <int kHeadDim, int kBlockM, bool kBF16>
__device__ __forceinline__ void combine(const float* __restrict__ oaccum, const float* __restrict__ lse_accum,
                                        unsigned short* __restrict__ o, float* __restrict__ lse, int batch, int heads,
                                        int seqlen_q, int num_splits, int max_splits) {
    __shared__ float sLSE[128][kBlockM + 1];
    const int tid = threadIdx.x, bidx = blockIdx.x;
    const long long lse_size = (long long)batch * heads * seqlen_q;
    const int rows_per_load = kNThreads / kBlockM;
    const int n_lse = (max_splits * kBlockM + kNThreads - 1) / kNThreads;
    for (int l = 0; l < n_lse; ++l) {
        const int row = l * rows_per_load + tid / kBlockM, col = tid % kBlockM;
        const float x = (row < num_splits && col < lse_size - (long long)bidx * kBlockM)
            ? lse_accum[row * lse_size + (long long)bidx * kBlockM + col] : -__int_as_float(0x7f800000);
        if (row < max_splits) sLSE[row][col] = x;
    }
    __syncthreads();
    const int R = imin(rows_per_load, max_splits);
    float acc[8];  // n_lse <= 128 * kBlockM / 128 / R... at most 8 for kBlockM 4..16 and max_splits <= 128
    float lse_max = -__int_as_float(0x7f800000);
    for (int l = 0; l < n_lse; ++l) {
        const int row = l * R + tid % R, col = tid / R;
        acc[l] = (row < max_splits && col < kBlockM) ? sLSE[row][col] : -__int_as_float(0x7f800000);
        lse_max = l == 0 ? acc[0] : fmaxf(lse_max, acc[l]);
    }
    for (int off = R / 2; off >= 1; off /= 2) lse_max = fmaxf(lse_max, wops::shfl_xor(lse_max, off));
    lse_max = lse_max == -__int_as_float(0x7f800000) ? 0.0f : lse_max;
    float lse_sum = expf(acc[0] - lse_max);
    for (int l = 1; l < n_lse; ++l) lse_sum += expf(acc[l] - lse_max);
    for (int off = R / 2; off >= 1; off /= 2) lse_sum = lse_sum + wops::shfl_xor(lse_sum, off);
    const float lse_logsum = (lse_sum == 0.f || lse_sum != lse_sum) ? __int_as_float(0x7f800000)
                                                                    : logf(lse_sum) + lse_max;
    if (tid % R == 0 && tid / R < kBlockM && (long long)bidx * kBlockM + tid / R < lse_size)
        lse[(long long)bidx * kBlockM + tid / R] = lse_logsum;
    for (int l = 0; l < n_lse; ++l) {
        const int row = l * R + tid % R, col = tid / R;
        if (row < num_splits && col < kBlockM) sLSE[row][col] = expf(acc[l] - lse_logsum);
    }
    __syncthreads();

    // O: thread t holds 4 consecutive columns of row t / (128 / kBlockM), every 4 * 128 / kBlockM columns
    constexpr int kThreadsPerRow = kNThreads / kBlockM, kCols = kHeadDim / (4 * kThreadsPerRow);
    const int r = tid / kThreadsPerRow, c0 = (tid % kThreadsPerRow) * 4;
    const long long idx = (long long)bidx * kBlockM + r;
    if (idx >= lse_size) return;
    float acc_o[kCols][4];
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc_o[j][0] = acc_o[j][1] = acc_o[j][2] = acc_o[j][3] = 0.0f;
    for (int split = 0; split < num_splits; ++split) {
        const float scale = sLSE[split][r];
        const float* src = oaccum + (split * lse_size + idx) * kHeadDim + c0;
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
            const float4 x = *reinterpret_cast<const float4*>(src + j * 4 * kThreadsPerRow);
            acc_o[j][0] += scale * x.x;
            acc_o[j][1] += scale * x.y;
            acc_o[j][2] += scale * x.z;
            acc_o[j][3] += scale * x.w;
        }
    }
    const int bidb = int(idx / ((long long)heads * seqlen_q)), head = int(idx / seqlen_q % heads),
              row = int(idx % seqlen_q);
    unsigned short* dst = o + (((long long)bidb * seqlen_q + row) * heads + head) * kHeadDim + c0;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
        uint2 w{wops::cvt_pair<kBF16>(acc_o[j][0], acc_o[j][1]), wops::cvt_pair<kBF16>(acc_o[j][2], acc_o[j][3])};
        *reinterpret_cast<uint2*>(dst + j * 4 * kThreadsPerRow) = w;
    }
}

}  // namespace fa2

// The combine entry points ("fa2_combine_*"): grid ceil(batch * heads * seqlen_q / kBlockM), 128 threads; kBlockM
// is 4 at head dims that are multiples of 128, else 8 (flash_fwd_launch_template.h:140).
#define FA2_COMBINE_KERNEL(name, hdim, block_m, bf16)                                                          \
    extern "C" __global__ void __launch_bounds__(fa2::kNThreads)                                                \
    name(const float* oaccum, const float* lse_accum, unsigned short* o, float* lse, int batch, int heads,     \
         int seqlen_q, int num_splits, int max_splits) {                                                        \
        fa2::combine<hdim, block_m, bf16>(oaccum, lse_accum, o, lse, batch, heads, seqlen_q, num_splits,        \
                                          max_splits);                                                          \
    }

FA2_COMBINE_KERNEL(fa2_combine_hdim64_f16, 64, 8, false)
FA2_COMBINE_KERNEL(fa2_combine_hdim64_bf16, 64, 8, true)
FA2_COMBINE_KERNEL(fa2_combine_hdim128_f16, 128, 4, false)
FA2_COMBINE_KERNEL(fa2_combine_hdim128_bf16, 128, 4, true)
FA2_COMBINE_KERNEL(fa2_combine_hdim192_f16, 192, 8, false)
FA2_COMBINE_KERNEL(fa2_combine_hdim192_bf16, 192, 8, true)
FA2_COMBINE_KERNEL(fa2_combine_hdim256_f16, 256, 4, false)
FA2_COMBINE_KERNEL(fa2_combine_hdim256_bf16, 256, 4, true)
