// kernel1.cu: "Kernel 1" of seed 002, a first complete FlashAttention-2 forward built from cp.async,
// ldmatrix.x4 and mma.m16n8k16 with f32 accumulation.
//
// Configuration (fixed, as in the seed): B_r = B_c = 64, d_head = 128, 4 warps (128 threads), forward,
// non-causal, no dropout, seqlen_q == seqlen_k, seqlen % 64 == 0, fp16 or bf16 in and out, softmax in
// f32. Tensors are (batch, seq, heads, 128) row-major; grid (seq / 64, heads, batch) so CTAs that share a
// (sample, head) and thus the same K/V blocks are launched next to each other. Dynamic smem: 48 KiB
// (s_Q, s_K, s_V, 64 x 128 each, row-major, unswizzled; s_O reuses s_Q).
//
// Warp w owns query rows 16w..16w+15 of the block: it loads them, multiplies them and writes them back on
// its own (__syncwarp). K and V blocks are loaded cooperatively, each warp its 16-row slice, and read whole
// by every warp after a __syncthreads.
//
// Per KV block j (the seed's mainloop):
//   load_k     K_j: GMEM -> SMEM, cp.async 16 B; a warp-wide op covers 4 rows x 64 columns (lane: row
//              lane/8, columns 8(lane%8)..+7); wait + __syncthreads (barrier 1)
//   mma_qk     S = Q K_j^T (f32, from zero): for each 16-wide slice of d (k), for n = 0..7, one mma; K
//              fragments by ldmatrix.x4 (no .trans: K rows are B's columns)
//   softmax    S *= scale; m_new = max(m, row) over the thread's 16 values then __shfl_xor 1, 2;
//              c = expf(m - m_new); l *= c; O *= c; P = expf(S - m_new); l += P (thread-local, column
//              order); P -> 16-bit pairs (cvt.rn.{f16,bf16}x2.f32), already laid out as A fragments
//   load_v     V_j: GMEM -> SMEM as K; wait + __syncthreads (barrier 2)
//   mma_pv     O += P V_j (f32): for each 16-key slice (k), for each 8-wide slice of d (n), one mma; V
//              fragments by ldmatrix.x4.trans
// Epilogue: l summed over the quad (__shfl_xor 1, then 2); O *= 1/l (IEEE reciprocal); O -> 16-bit
// pairs; RF -> SMEM with 4-byte stores; __syncwarp; SMEM -> GMEM with 16-byte stores.
// m starts at -inf and l at 0 (the seed's initialisation).
//
// Compiled by NVRTC with its default options (cupy adds -ftz=true), so the C++ float arithmetic above is
// FMUL/FADD/FFMA.FTZ; expf is the library's accurate expf. The twin is flashsim/kernels/kernel1.py.

#include "trace.cuh"
#include "warp_ops.cuh"

namespace k1 {

constexpr int kBr = 64, kBc = 64, kD = 128, kWarps = 4;
constexpr int kRowsPerWarp = kBr / kWarps;  // 16
constexpr int kNT = kBc / 8;                // n-tiles of S per warp: 8
constexpr int kDT = kD / 8;                 // n-tiles of O per warp: 16
constexpr int kKQ = kD / 16;                // k-slices of Q K^T: 8
constexpr int kKP = kBc / 16;               // k-slices of P V: 4

// A warp copies its 16 rows of a (rows x 128) tile between GMEM (row stride `ld`) and SMEM (row stride 128),
// 16 bytes per lane: 4 rows x 64 columns per warp-wide op.
__device__ __forceinline__ void warp_gm2sm(unsigned short* s, const unsigned short* g, long long ld, int lane) {
#pragma unroll
    for (int r0 = 0; r0 < kRowsPerWarp; r0 += 4) {
#pragma unroll
        for (int c0 = 0; c0 < kD; c0 += 64) {
            const int row = r0 + lane / 8, col = c0 + (lane % 8) * 8;
            wops::cp_async_16(s + row * kD + col, g + row * ld + col);
        }
    }
}

template <bool kBF16>
__device__ __forceinline__ void forward(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
                                        const unsigned short* __restrict__ V, unsigned short* __restrict__ O,
                                        int seq_len, int n_heads, float softmax_scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned short* s_Q = reinterpret_cast<unsigned short*>(smem);  // [64, 128]; s_O in the epilogue
    unsigned short* s_K = s_Q + kBr * kD;                           // [64, 128]
    unsigned short* s_V = s_K + kBc * kD;                           // [64, 128]

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sample = blockIdx.z, head = blockIdx.y, q_block = blockIdx.x;
    const long long seq_stride = (long long)n_heads * kD;
    const long long sample_head = (long long)sample * seq_len * seq_stride + (long long)head * kD;
    const long long qo_off = sample_head + ((long long)q_block * kBr + warp * kRowsPerWarp) * seq_stride;
    unsigned short* w_Q = s_Q + warp * kRowsPerWarp * kD;
    FS_TRACE_INIT();

    // Prologue: Q -> SMEM -> RF; m = -inf, l = 0, O = 0.
    warp_gm2sm(w_Q, Q + qo_off, seq_stride, lane);
    wops::cp_async_fence();
    float o[kDT][4];
#pragma unroll
    for (int n = 0; n < kDT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)};
    float l[2] = {0.0f, 0.0f};
    wops::cp_async_wait_all();
    __syncwarp();
    unsigned qf[kKQ][4];
#pragma unroll
    for (int k = 0; k < kKQ; ++k) wops::ldmatrix_x4(qf[k], w_Q + (lane % 16) * kD + k * 16 + (lane / 16) * 8);
    FS_TRACE(load_q, kKQ * 4, FS_PUT(qf));

    const int n_kv_blocks = seq_len / kBc;
    for (int j = 0; j < n_kv_blocks; ++j) {
        const long long kv_off = sample_head + ((long long)j * kBc + warp * kRowsPerWarp) * seq_stride;
        warp_gm2sm(s_K + warp * kRowsPerWarp * kD, K + kv_off, seq_stride, lane);
        wops::cp_async_fence();
        wops::cp_async_wait_all();
        __syncthreads();
        FS_TRACE(load_k, 0, );

        float s[kNT][4];
#pragma unroll
        for (int n = 0; n < kNT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int k = 0; k < kKQ; ++k) {
#pragma unroll
            for (int n = 0; n < kNT; n += 2) {
                // keys 8n..8n+15, d 16k..16k+15: matrices (keys 0-7, d 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15)
                unsigned kf[4];
                wops::ldmatrix_x4(kf, s_K + (n * 8 + lane % 8 + (lane / 16) * 8) * kD + k * 16 + ((lane / 8) % 2) * 8);
                wops::mma_f32<kBF16>(s[n], qf[k], kf[0], kf[1]);
                wops::mma_f32<kBF16>(s[n + 1], qf[k], kf[2], kf[3]);
            }
        }

        FS_TRACE(mma_qk, kNT * 4, FS_PUT(s));

#pragma unroll
        for (int n = 0; n < kNT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[n][e] *= softmax_scale;
        unsigned pf[kKP][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {  // row g (registers 0, 1) and row g + 8 (registers 2, 3)
            float m_new = m[i];
#pragma unroll
            for (int n = 0; n < kNT; ++n) {
                m_new = fmaxf(m_new, s[n][2 * i]);
                m_new = fmaxf(m_new, s[n][2 * i + 1]);
            }
            m_new = fmaxf(m_new, wops::shfl_xor(m_new, 1));
            m_new = fmaxf(m_new, wops::shfl_xor(m_new, 2));
            const float c = expf(m[i] - m_new);
            l[i] *= c;
#pragma unroll
            for (int n = 0; n < kDT; ++n) {
                o[n][2 * i] *= c;
                o[n][2 * i + 1] *= c;
            }
#pragma unroll
            for (int n = 0; n < kNT; ++n) {
                s[n][2 * i] = expf(s[n][2 * i] - m_new);
                s[n][2 * i + 1] = expf(s[n][2 * i + 1] - m_new);
            }
#pragma unroll
            for (int n = 0; n < kNT; ++n) {
                l[i] += s[n][2 * i];
                l[i] += s[n][2 * i + 1];
            }
            m[i] = m_new;
        }
        // P as A fragments: slice k holds keys 16k..16k+15 = S n-tiles 2k, 2k+1
#pragma unroll
        for (int k = 0; k < kKP; ++k) {
            pf[k][0] = wops::cvt_pair<kBF16>(s[2 * k][0], s[2 * k][1]);
            pf[k][1] = wops::cvt_pair<kBF16>(s[2 * k][2], s[2 * k][3]);
            pf[k][2] = wops::cvt_pair<kBF16>(s[2 * k + 1][0], s[2 * k + 1][1]);
            pf[k][3] = wops::cvt_pair<kBF16>(s[2 * k + 1][2], s[2 * k + 1][3]);
        }

        FS_TRACE(softmax, 4 + kNT * 4 + kDT * 4 + kKP * 4, FS_PUT(m); FS_PUT(l); FS_PUT(s); FS_PUT(o); FS_PUT(pf));

        warp_gm2sm(s_V + warp * kRowsPerWarp * kD, V + kv_off, seq_stride, lane);
        wops::cp_async_fence();
        wops::cp_async_wait_all();
        __syncthreads();
        FS_TRACE(load_v, 0, );

#pragma unroll
        for (int k = 0; k < kKP; ++k) {
#pragma unroll
            for (int n = 0; n < kDT; n += 2) {
                // keys 16k..16k+15, d 8n..8n+15, transposed into B fragments of n-tiles n and n+1
                unsigned vf[4];
                wops::ldmatrix_x4_trans(vf, s_V + (k * 16 + lane % 16) * kD + n * 8 + (lane / 16) * 8);
                wops::mma_f32<kBF16>(o[n], pf[k], vf[0], vf[1]);
                wops::mma_f32<kBF16>(o[n + 1], pf[k], vf[2], vf[3]);
            }
        }
        FS_TRACE(mma_pv, kDT * 4, FS_PUT(o));
    }

    // Epilogue
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += wops::shfl_xor(l[i], 1);
        l[i] += wops::shfl_xor(l[i], 2);
        const float inv = 1.0f / l[i];
#pragma unroll
        for (int n = 0; n < kDT; ++n) {
            o[n][2 * i] *= inv;
            o[n][2 * i + 1] *= inv;
        }
    }
    FS_TRACE(normalize, 2 + kDT * 4, FS_PUT(l); FS_PUT(o));

    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < kDT; ++n) {
        *reinterpret_cast<unsigned*>(w_Q + g * kD + n * 8 + 2 * t) = wops::cvt_pair<kBF16>(o[n][0], o[n][1]);
        *reinterpret_cast<unsigned*>(w_Q + (g + 8) * kD + n * 8 + 2 * t) = wops::cvt_pair<kBF16>(o[n][2], o[n][3]);
    }
    __syncwarp();
#pragma unroll
    for (int r0 = 0; r0 < kRowsPerWarp; r0 += 4) {
#pragma unroll
        for (int c0 = 0; c0 < kD; c0 += 64) {
            const int row = r0 + lane / 8, col = c0 + (lane % 8) * 8;
            *reinterpret_cast<uint4*>(O + qo_off + row * seq_stride + col) = *reinterpret_cast<const uint4*>(w_Q + row * kD + col);
        }
    }
    FS_TRACE(store_o, 0, );
}

}  // namespace k1

extern "C" __global__ void __launch_bounds__(128)
kernel1_f16(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
            const unsigned short* __restrict__ V, unsigned short* __restrict__ O, int seq_len, int n_heads,
            float softmax_scale) {
    k1::forward<false>(Q, K, V, O, seq_len, n_heads, softmax_scale);
}

extern "C" __global__ void __launch_bounds__(128)
kernel1_bf16(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
             const unsigned short* __restrict__ V, unsigned short* __restrict__ O, int seq_len, int n_heads,
             float softmax_scale) {
    k1::forward<true>(Q, K, V, O, seq_len, n_heads, softmax_scale);
}
