// attn_spill.cu: an attention forward with one query row per thread, plain f32 FMA arithmetic, and more
// live state per thread than the register budget holds, so that the SASS spills (STL/LDL) and keeps a
// dynamically indexed array in local memory.
//
// Written to test the SASS interpreter on a structure the seed kernels do not have (gpu/attn_extra.py runs
// it; tests/test_sass_attention.py checks it against the float64 reference and the GPU).
//
// Configuration: head dim 64, fp16 or bf16 in and out, 128 threads (4 warps: warp w owns rows 32w..32w+31 of
// the CTA's 128 rows, lane = row), K/V tiles of B_c = 32 keys, optional causal mask (bottom-right aligned,
// as FA2), any seqlen_q and seqlen_k >= 1. Tensors: q, o (batch, seqlen_q, heads, 64), k, v (batch,
// seqlen_k, heads, 64) row-major; lse (batch, heads, seqlen_q) float32, natural log. Grid (ceil(seqlen_q /
// 128), heads, batch); static smem: sK, sV (32 x 64 f32 each, 16 KiB); no dynamic smem.
//
// __launch_bounds__(128, 8) caps the kernel at 64 registers while each thread keeps q[64] and o[64] in f32
// (their indices are compile-time constants): ptxas spills. s[32], the scores of the current tile, is
// indexed by the loop counter (loops not unrolled), so it lives in local memory.
//
// Per tile of 32 keys: __syncthreads; K and V rows -> f32 in SMEM (rows >= seqlen_k as 0), by 16-byte
// global loads; __syncthreads. Each thread: nk = its number of keys in the tile (the causal bound makes it
// differ from lane to lane: a divergent loop), s[j] = (q . k_j) * log2e scale (f32 FMA chain over d in
// order), mx = max(m, s[0..nk)); if nk > 0: c = exp2f(m - mx), l *= c, o *= c, then for each key
// p = exp2f(s[j] - mx), l += p, o += p v_j (FMA; P stays f32). Epilogue: l == 0 (no key): O = 0, lse = +inf;
// else O *= 1 / l, lse = (m + log2f(l)) ln 2. O goes out by 16-byte stores (rows < seqlen_q).
//
// NVRTC with cupy's options (-ftz=true): exp2f and log2f are the library functions.

#include "warp_ops.cuh"

namespace attn_spill {

constexpr int kD = 64, kBc = 32, kThreads = 128;

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

// 8 16-bit values (a uint4) -> 8 floats
template <bool kBF16>
__device__ __forceinline__ void unpack8(float* dst, const uint4& u) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        dst[2 * i] = to_f32<kBF16>(w[i] & 0xffffu);
        dst[2 * i + 1] = to_f32<kBF16>(w[i] >> 16);
    }
}

template <bool kBF16>
__device__ __forceinline__ void forward(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
                                        const unsigned short* __restrict__ V, unsigned short* __restrict__ O,
                                        float* __restrict__ LSE, int seqlen_q, int seqlen_k, int heads,
                                        float scale_log2, int causal) {
    __shared__ __align__(16) float sK[kBc][kD];
    __shared__ __align__(16) float sV[kBc][kD];

    const int tid = threadIdx.x, head = blockIdx.y, batch = blockIdx.z;
    const int row = blockIdx.x * kThreads + tid;
    const bool valid = row < seqlen_q;
    const long long ld = (long long)heads * kD;
    const unsigned short* k_bh = K + (long long)batch * seqlen_k * ld + (long long)head * kD;
    const unsigned short* v_bh = V + (long long)batch * seqlen_k * ld + (long long)head * kD;
    const long long q_off = ((long long)batch * seqlen_q + row) * ld + (long long)head * kD;

    const int diag = seqlen_k - seqlen_q;
    const int last_row = min(seqlen_q, (int)(blockIdx.x + 1) * kThreads) - 1;
    const int keys_cta = causal ? min(seqlen_k, last_row + diag + 1) : seqlen_k;  // keys any row sees
    const int keys_row = causal ? min(seqlen_k, row + diag + 1) : seqlen_k;       // keys this row sees

    float q[kD], o[kD];
#pragma unroll
    for (int c = 0; c < kD; c += 8) {
        uint4 u = make_uint4(0u, 0u, 0u, 0u);
        if (valid) u = *reinterpret_cast<const uint4*>(Q + q_off + c);
        unpack8<kBF16>(q + c, u);
    }
#pragma unroll
    for (int c = 0; c < kD; ++c) o[c] = 0.0f;
    float m = -__int_as_float(0x7f800000), l = 0.0f;
    float s[kBc];

    for (int kb = 0; kb < keys_cta; kb += kBc) {
        __syncthreads();  // every thread is done with the previous tile
        {
            const int r = tid >> 2, c0 = (tid & 3) * 16;
            const bool ok = kb + r < seqlen_k;
            const long long off = (long long)(kb + r) * ld + c0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                uint4 ku = make_uint4(0u, 0u, 0u, 0u), vu = make_uint4(0u, 0u, 0u, 0u);
                if (ok) {
                    ku = *reinterpret_cast<const uint4*>(k_bh + off + 8 * h);
                    vu = *reinterpret_cast<const uint4*>(v_bh + off + 8 * h);
                }
                float kf[8], vf[8];
                unpack8<kBF16>(kf, ku);
                unpack8<kBF16>(vf, vu);
                *reinterpret_cast<float4*>(&sK[r][c0 + 8 * h]) = make_float4(kf[0], kf[1], kf[2], kf[3]);
                *reinterpret_cast<float4*>(&sK[r][c0 + 8 * h + 4]) = make_float4(kf[4], kf[5], kf[6], kf[7]);
                *reinterpret_cast<float4*>(&sV[r][c0 + 8 * h]) = make_float4(vf[0], vf[1], vf[2], vf[3]);
                *reinterpret_cast<float4*>(&sV[r][c0 + 8 * h + 4]) = make_float4(vf[4], vf[5], vf[6], vf[7]);
            }
        }
        __syncthreads();

        const int nk = min(kBc, keys_row - kb);  // this thread's keys in the tile (<= 0: none)
        float mx = m;
#pragma unroll 1
        for (int j = 0; j < nk; ++j) {
            float acc = 0.0f;
#pragma unroll
            for (int c = 0; c < kD; ++c) acc = fmaf(q[c], sK[j][c], acc);
            s[j] = acc * scale_log2;
            mx = fmaxf(mx, s[j]);
        }
        if (nk > 0) {
            const float corr = exp2f(m - mx);
            m = mx;
            l *= corr;
#pragma unroll
            for (int c = 0; c < kD; ++c) o[c] *= corr;
#pragma unroll 1
            for (int j = 0; j < nk; ++j) {
                const float p = exp2f(s[j] - mx);
                l += p;
#pragma unroll
                for (int c = 0; c < kD; ++c) o[c] = fmaf(p, sV[j][c], o[c]);
            }
        }
    }

    if (!valid) return;
    const bool empty = !(l > 0.0f);
    const float inv = empty ? 0.0f : 1.0f / l;
#pragma unroll
    for (int c = 0; c < kD; c += 8) {
        uint4 u;
        u.x = wops::cvt_pair<kBF16>(o[c] * inv, o[c + 1] * inv);
        u.y = wops::cvt_pair<kBF16>(o[c + 2] * inv, o[c + 3] * inv);
        u.z = wops::cvt_pair<kBF16>(o[c + 4] * inv, o[c + 5] * inv);
        u.w = wops::cvt_pair<kBF16>(o[c + 6] * inv, o[c + 7] * inv);
        *reinterpret_cast<uint4*>(O + q_off + c) = u;
    }
    LSE[((long long)batch * heads + head) * seqlen_q + row] =
        empty ? __int_as_float(0x7f800000) : (m + log2f(l)) * 0.693147180559945309f;
}

}  // namespace attn_spill

extern "C" __global__ void __launch_bounds__(attn_spill::kThreads, 8)
attn_spill_f16(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
               const unsigned short* __restrict__ v, unsigned short* __restrict__ o, float* __restrict__ lse,
               int seqlen_q, int seqlen_k, int heads, float scale_log2, int causal) {
    attn_spill::forward<false>(q, k, v, o, lse, seqlen_q, seqlen_k, heads, scale_log2, causal);
}

extern "C" __global__ void __launch_bounds__(attn_spill::kThreads, 8)
attn_spill_bf16(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                const unsigned short* __restrict__ v, unsigned short* __restrict__ o, float* __restrict__ lse,
                int seqlen_q, int seqlen_k, int heads, float scale_log2, int causal) {
    attn_spill::forward<true>(q, k, v, o, lse, seqlen_q, seqlen_k, heads, scale_log2, causal);
}
