// attn_regs.cu: an attention forward with P kept in registers and K/V double-buffered by cp.async groups.
//
// Written to test the SASS interpreter on a structure the seed kernels do not have (gpu/attn_extra.py runs
// it; tests/test_sass_attention.py checks it against the float64 reference and the GPU).
//
// Configuration: B_r = B_c = 64, 4 warps (128 threads), head dim 64 or 128 (template), fp16 or bf16 in and
// out, f32 accumulation and softmax, optional causal mask (bottom-right aligned, as FA2), any seqlen_q and
// seqlen_k >= 1 (tails are zero-filled and masked). Tensors: q, o (batch, seqlen_q, heads, d), k, v
// (batch, seqlen_k, heads, d) row-major; lse (batch, heads, seqlen_q) float32, natural log. Grid
// (ceil(seqlen_q / 64), heads, batch); dynamic smem 5 tiles of 64 x d 16-bit: sQ, sK[2], sV[2] (40 KiB at
// d = 64, 80 KiB at d = 128).
//
// Shared memory tiles are swizzled in 16-byte chunks: element (r, c) of a tile with d columns sits at
// r d + 8 ((c / 8) ^ (r % 8)) + c % 8, so the 8 rows an ldmatrix reads hit 8 different bank groups.
//
// GMEM -> SMEM: cp.async.cg 16 bytes with a register src-size: rows past the end of the sequence are
// copied with src-size 0, which zero-fills the 16 bytes (their address is clamped to the tile's first row).
// Prologue: Q and the first K, V blocks, one commit group. Step it of the KV loop: if there is a next block,
// its K and V go to the other buffer as a new group and the step waits with cp.async.wait_group 1 (the
// current block has landed, the next may be in flight); the last step waits for group 0. __syncthreads
// after the wait and at the end of the step (before the buffer is overwritten two steps later).
//
// Warp w owns query rows 16w..16w+15 of the block. Q fragments (ldmatrix.x4) are loaded once, after the
// first wait. Per step: S = Q K^T by mma.m16n8k16 (f32, from zero; K fragments by ldmatrix.x4); keys
// >= seqlen_k and (causal) keys > row + seqlen_k - seqlen_q are set to -inf in the steps that need it;
// online softmax in the log2 domain (FA2's softmax_rescale_o with Check_inf): m = max(m, row max over the
// quad by shfl.xor 1, 2); ms = (m == -inf ? 0 : m log2e scale); c = exp2f(m_prev log2e scale - ms);
// l = l c + sum p, O *= c; p = exp2f(s log2e scale - ms). P goes from the S accumulator fragment straight
// into the A fragment of the P V mma (cvt.rn.{f16,bf16}x2.f32; no shared memory), V fragments by
// ldmatrix.x4.trans. Epilogue: l summed over the quad; l == 0 (no key) or NaN: O stays as is (0), lse
// = +inf; else O *= 1 / l and lse = m scale + logf(l). O goes from registers to GMEM with 32-bit stores
// (rows < seqlen_q), lse by the lane holding column 0 of the quad. A CTA whose rows see no key at all
// (causal, seqlen_q > seqlen_k) writes O = 0 and lse = +inf and returns before its first barrier.
//
// NVRTC with cupy's options (-ftz=true): exp2f is the library exp2f, logf the accurate logf.

#include "warp_ops.cuh"

namespace attn_regs {

constexpr int kBr = 64, kBc = 64, kWarps = 4, kThreads = 32 * kWarps;
#define kInf __int_as_float(0x7f800000)
#define kNegInf (-__int_as_float(0x7f800000))
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

template <int kD>
__device__ __forceinline__ int swz(int r, int c) {
    return r * kD + (((c >> 3) ^ (r & 7)) << 3) + (c & 7);
}

// cp.async.cg 16 bytes whose source size is 16 or 0 (0: the 16 bytes are zero-filled, nothing is read).
__device__ __forceinline__ void cp_async_16_zfill(void* smem, const void* gmem, bool valid) {
    const int src_size = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(wops::smem_u32(smem)), "l"(gmem),
                 "r"(src_size));
}
template <int kN>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(kN) : "memory");
}

// A 64 x kD tile, rows [row0, row0 + 64) of a (seq, heads, kD) tensor at `g` (row stride ld), into a swizzled
// SMEM tile; rows >= n_rows are zero-filled. 128 threads, 16 bytes each per pass.
template <int kD>
__device__ __forceinline__ void load_tile(unsigned short* s, const unsigned short* g, long long ld, int row0,
                                          int n_rows, int tid) {
    constexpr int kChunks = kD / 8, kRowsPerPass = kThreads / kChunks;
#pragma unroll
    for (int p = 0; p < kBr / kRowsPerPass; ++p) {
        const int r = p * kRowsPerPass + tid / kChunks, c = (tid % kChunks) * 8;
        const bool valid = row0 + r < n_rows;
        const unsigned short* src = g + (long long)(valid ? row0 + r : row0) * ld + c;
        cp_async_16_zfill(s + swz<kD>(r, c), src, valid);
    }
}

template <int kD, bool kBF16>
__device__ __forceinline__ void forward(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
                                        const unsigned short* __restrict__ V, unsigned short* __restrict__ O,
                                        float* __restrict__ LSE, int seqlen_q, int seqlen_k, int heads,
                                        float scale, float scale_log2, int causal) {
    constexpr int kKQ = kD / 16;   // k-slices of Q K^T
    constexpr int kNS = kBc / 8;   // n-tiles of S
    constexpr int kNO = kD / 8;    // n-tiles of O
    constexpr int kKP = kBc / 16;  // k-slices of P V
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(smem);
    unsigned short* sK = sQ + kBr * kD;       // two buffers
    unsigned short* sV = sK + 2 * kBc * kD;   // two buffers

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int q_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
    const long long ld = (long long)heads * kD;
    const unsigned short* q_bh = Q + (long long)batch * seqlen_q * ld + (long long)head * kD;
    const unsigned short* k_bh = K + (long long)batch * seqlen_k * ld + (long long)head * kD;
    const unsigned short* v_bh = V + (long long)batch * seqlen_k * ld + (long long)head * kD;
    unsigned short* o_bh = O + (long long)batch * seqlen_q * ld + (long long)head * kD;
    float* lse_bh = LSE + ((long long)batch * heads + head) * seqlen_q;

    const int row_base = q_block * kBr + warp * 16;  // first row of the warp
    const int rows[2] = {row_base + g, row_base + g + 8};
    const int diag = seqlen_k - seqlen_q;            // causal: key <= row + diag
    // keys any row of the CTA can see
    const int last_row = imin(seqlen_q, (q_block + 1) * kBr) - 1;
    const int n_keys = causal ? imin(seqlen_k, last_row + diag + 1) : seqlen_k;
    if (n_keys <= 0) {
        // no row of this block has a key: O = 0, lse = +inf (no barrier has been passed yet)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            if (rows[i] < seqlen_q) {
#pragma unroll
                for (int n = 0; n < kNO; ++n)
                    *reinterpret_cast<unsigned*>(o_bh + (long long)rows[i] * ld + n * 8 + 2 * t) = 0u;
                if (t == 0) lse_bh[rows[i]] = kInf;
            }
        }
        return;
    }
    const int n_blocks = (n_keys + kBc - 1) / kBc;

    load_tile<kD>(sQ, q_bh, ld, q_block * kBr, seqlen_q, tid);
    load_tile<kD>(sK, k_bh, ld, 0, seqlen_k, tid);
    load_tile<kD>(sV, v_bh, ld, 0, seqlen_k, tid);
    wops::cp_async_fence();

    float o[kNO][4];
#pragma unroll
    for (int n = 0; n < kNO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
    unsigned qf[kKQ][4];

    for (int j = 0; j < n_blocks; ++j) {
        const int buf = j & 1;
        if (j + 1 < n_blocks) {
            const int nb = buf ^ 1;
            load_tile<kD>(sK + nb * kBc * kD, k_bh, ld, (j + 1) * kBc, seqlen_k, tid);
            load_tile<kD>(sV + nb * kBc * kD, v_bh, ld, (j + 1) * kBc, seqlen_k, tid);
            wops::cp_async_fence();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == 0) {
#pragma unroll
            for (int k = 0; k < kKQ; ++k)
                wops::ldmatrix_x4(qf[k], sQ + swz<kD>(warp * 16 + (lane % 16), k * 16 + (lane / 16) * 8));
        }
        const unsigned short* cK = sK + buf * kBc * kD;
        const unsigned short* cV = sV + buf * kBc * kD;

        // S = Q K^T
        float s[kNS][4];
#pragma unroll
        for (int n = 0; n < kNS; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int k = 0; k < kKQ; ++k) {
#pragma unroll
            for (int n = 0; n < kNS; n += 2) {
                unsigned kf[4];
                const int key = n * 8 + (lane % 8) + (lane / 16) * 8, col = k * 16 + ((lane / 8) % 2) * 8;
                wops::ldmatrix_x4(kf, cK + swz<kD>(key, col));
                wops::mma_f32<kBF16>(s[n], qf[k], kf[0], kf[1]);
                wops::mma_f32<kBF16>(s[n + 1], qf[k], kf[2], kf[3]);
            }
        }

        // masks: the key tail, and the causal diagonal where this block crosses it
        const int key0 = j * kBc;
        const bool tail = key0 + kBc > seqlen_k;
        const bool crosses = causal && key0 + kBc - 1 > q_block * kBr + diag;
        if (tail || crosses) {
#pragma unroll
            for (int n = 0; n < kNS; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = key0 + n * 8 + 2 * t + (e & 1), row = rows[e >> 1];
                    if (col >= seqlen_k || (causal && col > row + diag)) s[n][e] = kNegInf;
                }
        }

        // online softmax, per row (registers 0, 1: row g; 2, 3: row g + 8)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float mx = m[i];
#pragma unroll
            for (int n = 0; n < kNS; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
            mx = fmaxf(mx, wops::shfl_xor(mx, 1));
            mx = fmaxf(mx, wops::shfl_xor(mx, 2));
            const float ms = mx == kNegInf ? 0.0f : mx * scale_log2;
            const float c = exp2f(m[i] * scale_log2 - ms);
            m[i] = mx;
            l[i] *= c;
#pragma unroll
            for (int n = 0; n < kNO; ++n) {
                o[n][2 * i] *= c;
                o[n][2 * i + 1] *= c;
            }
#pragma unroll
            for (int n = 0; n < kNS; ++n) {
                s[n][2 * i] = exp2f(fmaf(s[n][2 * i], scale_log2, -ms));
                s[n][2 * i + 1] = exp2f(fmaf(s[n][2 * i + 1], scale_log2, -ms));
                l[i] += s[n][2 * i] + s[n][2 * i + 1];
            }
        }

        // O += P V, P straight from the S fragment: k-slice k holds keys 16k..16k+15 = S n-tiles 2k, 2k+1
#pragma unroll
        for (int k = 0; k < kKP; ++k) {
            const unsigned pf[4] = {wops::cvt_pair<kBF16>(s[2 * k][0], s[2 * k][1]),
                                    wops::cvt_pair<kBF16>(s[2 * k][2], s[2 * k][3]),
                                    wops::cvt_pair<kBF16>(s[2 * k + 1][0], s[2 * k + 1][1]),
                                    wops::cvt_pair<kBF16>(s[2 * k + 1][2], s[2 * k + 1][3])};
#pragma unroll
            for (int n = 0; n < kNO; n += 2) {
                unsigned vf[4];
                wops::ldmatrix_x4_trans(vf, cV + swz<kD>(k * 16 + (lane % 16), n * 8 + (lane / 16) * 8));
                wops::mma_f32<kBF16>(o[n], pf, vf[0], vf[1]);
                wops::mma_f32<kBF16>(o[n + 1], pf, vf[2], vf[3]);
            }
        }
        __syncthreads();  // every warp is done with buffer `buf` before step j + 2 refills it
    }

    // epilogue
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float sum = l[i];
        sum += wops::shfl_xor(sum, 1);
        sum += wops::shfl_xor(sum, 2);
        const bool empty = sum == 0.0f || sum != sum;
        const float inv = empty ? 1.0f : 1.0f / sum;
#pragma unroll
        for (int n = 0; n < kNO; ++n) {
            o[n][2 * i] *= inv;
            o[n][2 * i + 1] *= inv;
        }
        if (rows[i] < seqlen_q) {
            unsigned short* dst = o_bh + (long long)rows[i] * ld + 2 * t;
#pragma unroll
            for (int n = 0; n < kNO; ++n)
                *reinterpret_cast<unsigned*>(dst + n * 8) = wops::cvt_pair<kBF16>(o[n][2 * i], o[n][2 * i + 1]);
            if (t == 0) lse_bh[rows[i]] = empty ? kInf : m[i] * scale + logf(sum);
        }
    }
}

}  // namespace attn_regs

#define ATTN_REGS_ENTRY(NAME, D, BF16)                                                                        \
    extern "C" __global__ void __launch_bounds__(attn_regs::kThreads)                                        \
    NAME(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,                          \
         const unsigned short* __restrict__ v, unsigned short* __restrict__ o, float* __restrict__ lse,       \
         int seqlen_q, int seqlen_k, int heads, float scale, float scale_log2, int causal) {                  \
        attn_regs::forward<D, BF16>(q, k, v, o, lse, seqlen_q, seqlen_k, heads, scale, scale_log2, causal);  \
    }

ATTN_REGS_ENTRY(attn_regs_hdim64_f16, 64, false)
ATTN_REGS_ENTRY(attn_regs_hdim64_bf16, 64, true)
ATTN_REGS_ENTRY(attn_regs_hdim128_f16, 128, false)
ATTN_REGS_ENTRY(attn_regs_hdim128_bf16, 128, true)
