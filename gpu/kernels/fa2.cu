// fa2.cu: the FlashAttention-2 forward kernel of seed 000 (flash_fwd_kernel.h, compute_attn_1rowblock),
// written out without CuTe: every copy, ldmatrix and mma of the CuTe version is an explicit instruction here.
//
// Kernel traits (seed 000, hdim 128): kBlockM = 128 query rows, kBlockN = 32 keys per step, 4 warps, each warp
// owning rows 16w + 64m + (0..15) for m < kBlockM / 64 (TiledMMA: 4 warps along M over SM80_16x8x16, 16 x
// kBlockN per warp and m). The hdim-64 instance uses kBlockN = 64. The tiles are template parameters: the
// instances at the end of the file are the configurations flashsim.kernels.spec describes.
// Tensors: q, o (batch, seqlen_q, heads, kHeadDim); k, v (batch, seqlen_k, heads_k, kHeadDim); lse
// (batch, heads, seqlen_q) float32. Head dims below kHeadDim are zero-padded by the host, which gives the
// shared memory the kernel with Is_even_K = false builds with its zero-filling predicated copy.
// Grid (ceil(seqlen_q / kBlockM), heads, batch), 128 threads, dynamic smem (kBlockM + 2 kBlockN) kHeadDim
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
};

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
template <int kRows, int kHeadDim>
__device__ __forceinline__ void copy_tile(unsigned short* s, const unsigned short* g, long long ld, int valid_rows,
                                          int tid) {
#pragma unroll
    for (int i = 0; i < kRows / 16; ++i) {
#pragma unroll
        for (int j = 0; j < kHeadDim / 64; ++j) {
            const int r = tid / 8 + 16 * i, c = (tid % 8) * 8 + 64 * j;
            unsigned short* dst = s + smem_off<kRows>(r, c);
            if (r < valid_rows) {
                wops::cp_async_16(dst, g + r * ld + c);
            } else {
                *reinterpret_cast<uint4*>(dst) = uint4{0u, 0u, 0u, 0u};
            }
        }
    }
}

template <int kHeadDim, int kBlockM, int kBlockN, bool kBF16, bool kChunked = false, bool kExt = false>
__device__ __forceinline__ void forward(const Params& p) {
    static_assert(kBlockM % 64 == 0 && kBlockN % 16 == 0, "4 warps of 16 rows per m-tile; 16-key slices");
    constexpr int kMT = kBlockM / 64;     // m-tiles per warp (warp w: rows 16 w + 64 m + 0..15)
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
    const int m_block = blockIdx.x, head = blockIdx.y, bidb = blockIdx.z;
    const int head_k = head / (p.heads / p.heads_k);
    const long long q_row = (long long)p.heads * kHeadDim, k_row = (long long)p.heads_k * kHeadDim;
    const unsigned short* gQ = p.q + ((long long)bidb * p.seqlen_q + (long long)m_block * kBlockM) * q_row + head * kHeadDim;
    const unsigned short* gK = p.k + (long long)bidb * p.seqlen_k * k_row + head_k * kHeadDim;
    const unsigned short* gV = p.v + (long long)bidb * p.seqlen_k * k_row + head_k * kHeadDim;
    unsigned short* gO = p.o + ((long long)bidb * p.seqlen_q + (long long)m_block * kBlockM) * q_row + head * kHeadDim;
    float* gLSE = p.lse + ((long long)bidb * p.heads + head) * p.seqlen_q + (long long)m_block * kBlockM;
    const int rows_left = p.seqlen_q - m_block * kBlockM;

    const bool even_mn = p.seqlen_q % kBlockM == 0 && p.seqlen_k % kBlockN == 0;
    const int chunk = kChunked ? p.attention_chunk : 0;  // C (see the header); 0: off
    // FA2's is_local in the step logic: a local window or (kChunked) a chunk, every KV step is masked. A macro, so
    // that the other instances read p.is_local at each use as before (a bool variable reorders their SASS)
#define FA2_LOCAL_MASK (kChunked ? (p.is_local || chunk > 0) : p.is_local)
    int n_block_min = !p.is_local ? 0
        : imax(0, (m_block * kBlockM + p.seqlen_k - p.seqlen_q - p.window_left) / kBlockN);
    int n_block_max = ceil_div(p.seqlen_k, kBlockN);
    if (p.is_causal || p.is_local) {
        n_block_max = imin(n_block_max,
                          ceil_div((m_block + 1) * kBlockM + p.seqlen_k - p.seqlen_q + p.window_right, kBlockN));
    }
    if (chunk > 0) {  // block.h: from the chunk start of the CTA's first row to the chunk end of its last
        n_block_min = imax(n_block_min, div_floor(m_block * kBlockM + p.seqlen_k - p.seqlen_q, chunk) * chunk / kBlockN);
        n_block_max = imin(n_block_max, ceil_div(div_floor((m_block + 1) * kBlockM + p.seqlen_k - p.seqlen_q - 1, chunk)
                                                 * chunk + chunk, kBlockN));
    }

    if ((p.is_causal || FA2_LOCAL_MASK || !even_mn) && n_block_max <= n_block_min) {
#pragma unroll
        for (int i = 0; i < kBlockM / 16; ++i) {
#pragma unroll
            for (int j = 0; j < kHeadDim / 64; ++j) {
                const int r = tid / 8 + 16 * i, c = (tid % 8) * 8 + 64 * j;
                if (r < rows_left) *reinterpret_cast<uint4*>(gO + r * q_row + c) = uint4{0u, 0u, 0u, 0u};
            }
        }
        if (tid < kBlockM && tid < rows_left) gLSE[tid] = __int_as_float(0x7f800000);
        FS_TRACE(empty, 0, );
        return;
    }

    // Prologue: Q and the last K block in flight.
    copy_tile<kBlockM, kHeadDim>(sQ, gQ, q_row, rows_left, tid);
    FS_TRACE(load_q, 0, );
    int n_block = n_block_max - 1;
    copy_tile<kBlockN, kHeadDim>(sK, gK + (long long)n_block * kBlockN * k_row, k_row, p.seqlen_k - n_block * kBlockN, tid);
    wops::cp_async_fence();
    FS_TRACE(load_k, 0, );

    float acc_o[kMT][kDT][4];
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int n = 0; n < kDT; ++n) acc_o[m][n][0] = acc_o[m][n][1] = acc_o[m][n][2] = acc_o[m][n][3] = 0.0f;
    float row_max[kMT][2], row_sum[kMT][2];  // [m][i]: row 16 warp + 64 m + g + 8 i

    const int n_masking_steps = (!p.is_causal && !FA2_LOCAL_MASK) ? 1
        : (even_mn ? ceil_div(kBlockM, kBlockN) : ceil_div(kBlockM, kBlockN) + 1);
    const int row_base = m_block * kBlockM + warp * 16 + g;
    // kExt: the ALiBi slope in the scores' units, and the lane's philox offset
    const float alibi_slope = (kExt && p.alibi_slopes != nullptr)
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
        copy_tile<kBlockN, kHeadDim>(sV, gV + (long long)n_block * kBlockN * k_row, k_row,
                                     p.seqlen_k - n_block * kBlockN, tid);
        wops::cp_async_fence();
        FS_TRACE(load_v, 0, );

#pragma unroll
        for (int ks = 0; ks < kKS; ++ks) {
            unsigned qf[kMT][4];
#pragma unroll
            for (int m = 0; m < kMT; ++m)
                wops::ldmatrix_x4(qf[m], sQ + smem_off<kBlockM>(warp * 16 + m * 64 + lane % 16, ks * 16 + (lane / 16) * 8));
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
        if (kExt && p.alibi_slopes != nullptr) {  // every step, before the masks (mask.h applies it first)
#pragma unroll
            for (int m = 0; m < kMT; ++m)
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int row = row_base + m * 64 + i * 8;
#pragma unroll
                    for (int n = 0; n < kNT; ++n)
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            const int col = n_block * kBlockN + n * 8 + 2 * t + j;
                            if (p.is_causal) acc_s[m][n][2 * i + j] += alibi_slope * col;
                            else acc_s[m][n][2 * i + j] -= alibi_slope * abs(row + p.seqlen_k - p.seqlen_q - col);
                        }
                }
        }
        if ((masking && (p.is_causal || FA2_LOCAL_MASK || !even_mn)) || (!masking && FA2_LOCAL_MASK)) {
#pragma unroll
            for (int m = 0; m < kMT; ++m) {
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int row = row_base + m * 64 + i * 8;
                    int right = p.seqlen_k, left = 0;
                    if (p.is_causal || p.is_local) {
                        if (p.is_causal || p.window_right >= 0)
                            right = imin(p.seqlen_k, row + 1 + p.seqlen_k - p.seqlen_q + p.window_right);
                        if (p.is_local && p.window_left >= 0)
                            left = imax(0, row + p.seqlen_k - p.seqlen_q - p.window_left);
                    }
                    // mask.h: the row's chunk [start, start + C) bounds both sides (one unsigned compare: with
                    // left = max(left, start), right = min(right, start + C), NVRTC 13.0 fuses the three-way
                    // min into a VIMNMX3, which the interpreter does not model)
                    int start = 0;
                    if (kChunked && chunk > 0) start = div_floor(row + p.seqlen_k - p.seqlen_q, chunk) * chunk;
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
            copy_tile<kBlockN, kHeadDim>(sK, gK + (long long)(n_block - 1) * kBlockN * k_row, k_row, kBlockN, tid);
            wops::cp_async_fence();
            FS_TRACE(load_k, 0, );
        }

        const bool check_inf = masking ? (p.is_causal || FA2_LOCAL_MASK) : FA2_LOCAL_MASK;
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
                        const unsigned long long row16 = (unsigned long long)((m_block * kBlockM + warp * 16 + m * 64) / 16);
                        const unsigned long long col32 = (unsigned long long)(n_block * (kBlockN / 32) + ks / 2);
                        rnd[m] = philox(p.philox_seed, row16 | (col32 << 32), philox_off);
                    }
                    // n-tiles 2 ks and 2 ks + 1 use words (2 ks) % 4 and (2 ks + 1) % 4
                    const unsigned w0 = (ks % 2 == 0) ? rnd[m].x : rnd[m].z, w1 = (ks % 2 == 0) ? rnd[m].y : rnd[m].w;
                    const unsigned keep[4] = {keep_pair(w0, 0, thr2), keep_pair(w0, 1, thr2), keep_pair(w1, 0, thr2),
                                              keep_pair(w1, 1, thr2)};
                    if (p.s_dmask != nullptr) {
                        const int r = m_block * kBlockM + warp * 16 + m * 64 + g, c = n_block * kBlockN + ks * 16 + 2 * t;
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
            lse[m][i] = empty ? __int_as_float(0x7f800000) : row_max[m][i] * p.scale_softmax + __logf(sum);
#pragma unroll
            for (int n = 0; n < kDT; ++n) {
                acc_o[m][n][2 * i] *= inv;
                acc_o[m][n][2 * i + 1] *= inv;
            }
        }
    }
    FS_TRACE(normalize, 2 * kMT + kMT * kDT * 4, FS_PUT(lse); FS_PUT(acc_o));

#pragma unroll
    for (int m = 0; m < kMT; ++m) {
#pragma unroll
        for (int n = 0; n < kDT; ++n) {
            const int r = warp * 16 + m * 64 + g, c = n * 8 + 2 * t;
            *reinterpret_cast<unsigned*>(sQ + smem_off<kBlockM>(r, c)) = wops::cvt_pair<kBF16>(acc_o[m][n][0], acc_o[m][n][1]);
            *reinterpret_cast<unsigned*>(sQ + smem_off<kBlockM>(r + 8, c)) = wops::cvt_pair<kBF16>(acc_o[m][n][2], acc_o[m][n][3]);
        }
    }
    if (t == 0) {
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int r = warp * 16 + m * 64 + g + 8 * i;
                if (r < rows_left) gLSE[r] = lse[m][i];
            }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kBlockM / 16; ++i) {
#pragma unroll
        for (int j = 0; j < kHeadDim / 64; ++j) {
            const int r = tid / 8 + 16 * i, c = (tid % 8) * 8 + 64 * j;
            if (r < rows_left)
                *reinterpret_cast<uint4*>(gO + r * q_row + c) = *reinterpret_cast<const uint4*>(sQ + smem_off<kBlockM>(r, c));
        }
    }
    FS_TRACE(store_o, 0, );
#undef FA2_LOCAL_MASK
}

}  // namespace fa2

// Scalars are passed one by one (cupy's RawKernel takes no structs).
#define FA2_KERNEL(name, hdim, block_m, block_n, bf16)                                                         \
    extern "C" __global__ void __launch_bounds__(fa2::kNThreads)                                                \
    name(const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* o,          \
         float* lse, int seqlen_q, int seqlen_k, int heads, int heads_k, float scale_softmax,                  \
         float scale_softmax_log2, float softcap, int window_left, int window_right, int is_causal,             \
         int is_local) {                                                                                        \
        const fa2::Params p{q, k, v, o, lse, seqlen_q, seqlen_k, heads, heads_k, scale_softmax,                 \
                            scale_softmax_log2, softcap, window_left, window_right, is_causal, is_local};      \
        fa2::forward<hdim, block_m, block_n, bf16>(p);                                                          \
    }

// The configurations (flashsim.kernels.spec): "fa2", seed 000's tiles (hdim 128: 128 x 32, hdim 64: 128 x 64)
FA2_KERNEL(fa2_hdim128_f16, 128, 128, 32, false)
FA2_KERNEL(fa2_hdim128_bf16, 128, 128, 32, true)
FA2_KERNEL(fa2_hdim64_f16, 64, 128, 64, false)
FA2_KERNEL(fa2_hdim64_bf16, 64, 128, 64, true)
// "fa2_sm8x", the tiles flash-attn's sm8x traits choose for causal attention (hdim 128: 64 x 64, one m-tile
// per warp; hdim 64: 128 x 64)
FA2_KERNEL(fa2_sm8x_hdim128_f16, 128, 64, 64, false)
FA2_KERNEL(fa2_sm8x_hdim128_bf16, 128, 64, 64, true)
FA2_KERNEL(fa2_sm8x_hdim64_f16, 64, 128, 64, false)
FA2_KERNEL(fa2_sm8x_hdim64_bf16, 64, 128, 64, true)

// The entry points of the head dims above 128: flash-attn's sm80 traits for sm90 (flash_fwd_launch_template.h
// at the commit above: run_mha_fwd_hdim192 with dropout, line 288, <192, 64, 64, 4>; run_mha_fwd_hdim256 on a
// GPU whose SM has less than 4 * 256 * (64 + 2 * 64) bytes of smem, line 318, <256, 64, 64, 4>)
FA2_KERNEL(fa2_hdim192_f16, 192, 64, 64, false)
FA2_KERNEL(fa2_hdim192_bf16, 192, 64, 64, true)
FA2_KERNEL(fa2_hdim256_f16, 256, 64, 64, false)
FA2_KERNEL(fa2_hdim256_bf16, 256, 64, 64, true)

// The chunked entry points take one more parameter, attention_chunk (after is_local).
#define FA2_CHUNKED_KERNEL(name, hdim, block_m, block_n, bf16)                                                 \
    extern "C" __global__ void __launch_bounds__(fa2::kNThreads)                                                \
    name(const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* o,          \
         float* lse, int seqlen_q, int seqlen_k, int heads, int heads_k, float scale_softmax,                  \
         float scale_softmax_log2, float softcap, int window_left, int window_right, int is_causal,             \
         int is_local, int attention_chunk) {                                                                   \
        const fa2::Params p{q, k, v, o, lse, seqlen_q, seqlen_k, heads, heads_k, scale_softmax,                 \
                            scale_softmax_log2, softcap, window_left, window_right, is_causal, is_local,        \
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
// philox_offset, s_dmask (nullptr: off), seqlen_q_rounded and seqlen_k_rounded.
#define FA2_EXT_KERNEL(name, hdim, block_m, block_n, bf16)                                                     \
    extern "C" __global__ void __launch_bounds__(fa2::kNThreads)                                                \
    name(const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* o,          \
         float* lse, int seqlen_q, int seqlen_k, int heads, int heads_k, float scale_softmax,                  \
         float scale_softmax_log2, float softcap, int window_left, int window_right, int is_causal,             \
         int is_local, const float* alibi_slopes, int alibi_batch_stride, int is_dropout, unsigned p_dropout_u8, \
         float rp_dropout, unsigned long long philox_seed, unsigned long long philox_offset,                    \
         unsigned short* s_dmask, int seqlen_q_rounded, int seqlen_k_rounded) {                                 \
        const fa2::Params p{q, k, v, o, lse, seqlen_q, seqlen_k, heads, heads_k, scale_softmax,                 \
                            scale_softmax_log2, softcap, window_left, window_right, is_causal, is_local, 0,     \
                            alibi_slopes, alibi_batch_stride, is_dropout, p_dropout_u8, rp_dropout,             \
                            philox_seed, philox_offset, s_dmask, seqlen_q_rounded, seqlen_k_rounded};           \
        fa2::forward<hdim, block_m, block_n, bf16, false, true>(p);                                             \
    }

FA2_EXT_KERNEL(fa2_ext_hdim64_f16, 64, 128, 64, false)
FA2_EXT_KERNEL(fa2_ext_hdim64_bf16, 64, 128, 64, true)
FA2_EXT_KERNEL(fa2_ext_hdim128_f16, 128, 128, 32, false)
FA2_EXT_KERNEL(fa2_ext_hdim128_bf16, 128, 128, 32, true)
FA2_EXT_KERNEL(fa2_ext_hdim192_f16, 192, 64, 64, false)
FA2_EXT_KERNEL(fa2_ext_hdim192_bf16, 192, 64, 64, true)
FA2_EXT_KERNEL(fa2_ext_hdim256_f16, 256, 64, 64, false)
FA2_EXT_KERNEL(fa2_ext_hdim256_bf16, 256, 64, 64, true)
