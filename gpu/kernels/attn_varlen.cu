// attn_varlen.cu: a variable-length (packed batch) attention forward with data-dependent loops, warps that
// exit early, and no block-wide barrier at all: every reduction is a warp shuffle.
//
// Written to test the SASS interpreter on a structure the seed kernels do not have (gpu/attn_extra.py runs
// it; tests/test_sass_attention.py checks it against the float64 reference and the GPU).
//
// Inputs as flash_attn_varlen_func takes them: q (total_q, heads, 64), k, v (total_k, heads, 64), fp16 or
// bf16, row-major; cu_seqlens_q, cu_seqlens_k (batch + 1 int32, from 0, non-decreasing): sequence b owns
// packed rows [cu[b], cu[b + 1]). Out o (total_q, heads, 64) and lse (heads, total_q) float32 (natural log).
// Optional causal mask, bottom-right aligned per sequence (key j <= row + len_k - len_q, as FA2). A row with
// no key (len_k == 0, or causal with len_q > len_k) gets O = 0 and lse = +inf.
//
// Grid (n_blocks, heads) with n_blocks >= sum over sequences of ceil(len_q / 64) (the host passes
// ceil(total_q / 64) + batch); 128 threads; a 4 KiB SMEM slice per warp for its Q rows (f32), 16 KiB static.
//   1. The CTA finds its (sequence, query block) by walking cu_seqlens_q: a loop whose trip count is data;
//      a CTA past the last block returns at once.
//   2. Warp w owns query rows 16w..16w+15 of the block; a warp whose first row is past the sequence's
//      length returns (after step 1, before touching memory). No __syncthreads anywhere: the warps that
//      stay synchronise among themselves with __syncwarp only.
//   3. The warp loads its 16 Q rows to SMEM as f32 (rows past the length as 0); __syncwarp.
//   4. KV loop over chunks of 32 keys, up to the warp's last visible key (data-dependent trip count):
//      lane j holds key kb + j (its 64 values as f32 in registers, loaded by 16-byte global loads) and
//      computes s_r = q_r . k (f32 FMA over d in order, q from SMEM by broadcast) for the 16 rows; masked
//      keys are -inf. Per row: chunk max by a shfl.bfly butterfly (16, 8, 4, 2, 1), m = max(m, that),
//      ms = m == -inf ? 0 : m log2e scale, c = exp2f(m_prev log2e scale - ms), p = exp2f(s log2e scale
//      - ms) (0 for masked keys), l = l c + (sum of p by the butterfly), O_r *= c. Then lane l, owner of
//      output columns 2l, 2l+1, walks the chunk's keys (a loop of data-dependent length): v_j[2l..2l+1] by
//      a 32-bit global load, and for each row p_rj comes from lane j by shfl.idx; O_r += p_rj v_j (FMA).
//   5. Epilogue per row (rows < len_q): l == 0: O = 0, lse = +inf; else O *= 1 / l, lse = m scale +
//      logf(l). 32-bit stores of O; lane 0 writes lse.
//
// NVRTC with cupy's options (-ftz=true): exp2f and logf are the library functions.

#include "warp_ops.cuh"

namespace attn_varlen {

constexpr int kD = 64, kRows = 16, kWarps = 4, kThreads = 32 * kWarps, kBlockM = kRows * kWarps, kChunk = 32;

template <bool kBF16>
__device__ __forceinline__ float to_f32(unsigned x16) {
    if constexpr (kBF16) {
        return __uint_as_float(x16 << 16);
    } else {
        float f;
        const unsigned short h = static_cast<unsigned short>(x16);
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
    }
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int s = 16; s >= 1; s >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, s));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int s = 16; s >= 1; s >>= 1) x += __shfl_xor_sync(0xffffffffu, x, s);
    return x;
}

template <bool kBF16>
__device__ __forceinline__ void forward(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
                                        const unsigned short* __restrict__ V, unsigned short* __restrict__ O,
                                        float* __restrict__ LSE, const int* __restrict__ cu_seqlens_q,
                                        const int* __restrict__ cu_seqlens_k, int batch, int heads, int total_q,
                                        float scale, float scale_log2, int causal) {
    __shared__ __align__(16) float sQ[kWarps][kRows][kD];
    const float kNegInf = -__int_as_float(0x7f800000);

    // 1. which sequence and which 64-row block of it
    int blk = blockIdx.x, seq = 0;
    for (; seq < batch; ++seq) {
        const int nb = (cu_seqlens_q[seq + 1] - cu_seqlens_q[seq] + kBlockM - 1) / kBlockM;
        if (blk < nb) break;
        blk -= nb;
    }
    if (seq == batch) return;  // past the last block: the whole CTA leaves
    const int q0 = cu_seqlens_q[seq], len_q = cu_seqlens_q[seq + 1] - q0;
    const int k0 = cu_seqlens_k[seq], len_k = cu_seqlens_k[seq + 1] - k0;

    // 2. warps with no row in the sequence leave
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, head = blockIdx.y;
    const int r0 = blk * kBlockM + warp * kRows;  // the warp's first row, within the sequence
    if (r0 >= len_q) return;
    const int n_rows = min(kRows, len_q - r0);
    const int diag = len_k - len_q;
    const int key_end = causal ? min(len_k, r0 + n_rows - 1 + diag + 1) : len_k;  // keys the warp can see

    const long long ld = (long long)heads * kD;
    const unsigned short* q_base = Q + (q0 + r0) * ld + head * kD;
    const unsigned short* k_base = K + k0 * ld + head * kD;
    const unsigned short* v_base = V + k0 * ld + head * kD;

    // 3. Q rows -> SMEM (f32): lane covers row lane / 2, columns 32 (lane % 2) .. + 31
    {
        const int r = lane >> 1, c0 = (lane & 1) * 32;
#pragma unroll
        for (int c = 0; c < 32; c += 8) {
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if (r < n_rows) u = *reinterpret_cast<const uint4*>(q_base + r * ld + c0 + c);
            const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                sQ[warp][r][c0 + c + 2 * i] = to_f32<kBF16>(w[i] & 0xffffu);
                sQ[warp][r][c0 + c + 2 * i + 1] = to_f32<kBF16>(w[i] >> 16);
            }
        }
    }
    __syncwarp();

    float m[kRows], l[kRows], o[kRows][2];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        m[r] = kNegInf;
        l[r] = 0.0f;
        o[r][0] = o[r][1] = 0.0f;
    }

    // 4. the KV loop
    for (int kb = 0; kb < key_end; kb += kChunk) {
        const int key = kb + lane;
        float kf[kD];
        {
            const bool ok = key < key_end;
#pragma unroll
            for (int c = 0; c < kD; c += 8) {
                uint4 u = make_uint4(0u, 0u, 0u, 0u);
                if (ok) u = *reinterpret_cast<const uint4*>(k_base + key * ld + c);
                const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    kf[c + 2 * i] = to_f32<kBF16>(w[i] & 0xffffu);
                    kf[c + 2 * i + 1] = to_f32<kBF16>(w[i] >> 16);
                }
            }
        }
        float p[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            float acc = 0.0f;
#pragma unroll
            for (int c = 0; c < kD; c += 4) {
                const float4 qv = *reinterpret_cast<const float4*>(&sQ[warp][r][c]);
                acc = fmaf(qv.x, kf[c], acc);
                acc = fmaf(qv.y, kf[c + 1], acc);
                acc = fmaf(qv.z, kf[c + 2], acc);
                acc = fmaf(qv.w, kf[c + 3], acc);
            }
            const bool visible = key < key_end && (!causal || key <= r0 + r + diag);
            const float s = visible ? acc : kNegInf;
            const float mx = fmaxf(m[r], warp_max(s));
            const float ms = mx == kNegInf ? 0.0f : mx * scale_log2;
            const float c = exp2f(m[r] * scale_log2 - ms);
            p[r] = exp2f(fmaf(s, scale_log2, -ms));
            m[r] = mx;
            l[r] = fmaf(l[r], c, warp_sum(p[r]));
            o[r][0] *= c;
            o[r][1] *= c;
        }
        const int n_keys = min(kChunk, key_end - kb);
        for (int j = 0; j < n_keys; ++j) {
            const unsigned vv = *reinterpret_cast<const unsigned*>(v_base + (kb + j) * ld + 2 * lane);
            const float v0 = to_f32<kBF16>(vv & 0xffffu), v1 = to_f32<kBF16>(vv >> 16);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const float pr = __shfl_sync(0xffffffffu, p[r], j);
                o[r][0] = fmaf(pr, v0, o[r][0]);
                o[r][1] = fmaf(pr, v1, o[r][1]);
            }
        }
    }

    // 5. epilogue
    unsigned short* o_base = O + (q0 + r0) * ld + head * kD + 2 * lane;
    float* lse_base = LSE + (long long)head * total_q + q0 + r0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (r < n_rows) {
            const bool empty = !(l[r] > 0.0f);
            const float inv = empty ? 0.0f : 1.0f / l[r];
            *reinterpret_cast<unsigned*>(o_base + r * ld) = wops::cvt_pair<kBF16>(o[r][0] * inv, o[r][1] * inv);
            if (lane == 0) lse_base[r] = empty ? __int_as_float(0x7f800000) : m[r] * scale + logf(l[r]);
        }
    }
}

}  // namespace attn_varlen

#define ATTN_VARLEN_ENTRY(NAME, BF16)                                                                          \
    extern "C" __global__ void __launch_bounds__(attn_varlen::kThreads)                                       \
    NAME(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,                           \
         const unsigned short* __restrict__ v, unsigned short* __restrict__ o, float* __restrict__ lse,        \
         const int* __restrict__ cu_seqlens_q, const int* __restrict__ cu_seqlens_k, int batch, int heads,     \
         int total_q, float scale, float scale_log2, int causal) {                                             \
        attn_varlen::forward<BF16>(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, batch, heads, total_q, scale,  \
                                   scale_log2, causal);                                                        \
    }

ATTN_VARLEN_ENTRY(attn_varlen_f16, false)
ATTN_VARLEN_ENTRY(attn_varlen_bf16, true)
