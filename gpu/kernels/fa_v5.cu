// fa_v5.cu: FlashAttention-2 forward kernels v5 and v6 of seed 001 (ldmatrix + mma.m16n8k16, f16 accumulation).
//
// Layout: Q, O (batch, heads, N, d) and K, V (batch, heads, M, d), row-major fp16 bit patterns; O must be
// zero on entry (it is read back at every KV step). Preconditions (checked by gpu/fa_kernels.py):
// M % 16 == 0, N % 64 == 0, d % 16 == 0. Grid (N / 64, heads, batch), 128 threads, dynamic smem of
// fa_smem_bytes(d) bytes.
//
// Each of the 4 warps owns 16 query rows and works alone on them; K and V tiles of 16 rows are shared by
// the CTA. Per KV step j (16 keys):
//   load_kv      the CTA copies K[j], V[j] (16 x d) to smem, 16 B per thread per access; __syncthreads
//   mma_qk       S = Q K^T in four f16 registers: for each 16-wide slice of d, ldmatrix.x4 of Q (A) and of
//                K (B, no .trans: K rows are B's columns), two mma.m16n8k16 f16 (n = 0..7, 8..15)
//   store_s      the C fragments go to the warp's 16x16 s_QK tile, 32 bits per store
//   softmax      two rows per pass (lanes 0-15 and 16-31), 8 passes: each lane takes one score times the
//                scale as MD_F {m, d=1}, a butterfly over its 16-lane group merges them with __expf; lane 0
//                of the group stores the tile's {m, l} and its merge with the running {m, l}; every lane
//                writes P = __expf(x*scale - m_tile) as f16 to s_S
//   mma_pv       A = P from s_S (ldmatrix.x4), then for each 16-wide slice of d: B = V (ldmatrix.x4.trans),
//                two mma f16 from zero, C fragments to s_O
//   update_o     O_new = (l_prev e^(m_prev-m_new) O_old + e^(m_tile-m_new) PV) / l_new, in global memory,
//                one element per lane, two rows per pass
//   next_ml      running {m, l} <- merged; __syncthreads before K/V are overwritten
// v6 is the same kernel with the seed's swizzles: swizzle<3,3,4> on s_Q/s_K/s_V (every write and every
// ldmatrix address) and swizzle<1,3,3> on the 16-wide tiles s_QK/s_S/s_O. The softmax reads s_QK and
// writes s_S at the swizzled address of the logical element, so each lane holds the same logical column
// in v5 and v6 and the 16-lane reductions combine the same values in the same order: swizzling changes
// addresses only, never arithmetic (v5 and v6 outputs are bit-identical).
//
// Fragment facts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" and "ldmatrix"):
// g = lane >> 2, t = lane & 3; a C/D f16 fragment is {c0,c1} at row g, cols 2t..2t+1 and {c2,c3} at
// row g+8; ldmatrix lanes 8j..8j+7 give the row addresses of matrix j, lane T receives row T/4, columns
// 2(T%4), 2(T%4)+1 (.trans: the transpose).
//
// No CUDA headers: fp16 conversions are inline PTX cvt, so NVRTC needs no include path to the toolkit.

#include "trace.cuh"
#include "warp_ops.cuh"

namespace fa5 {

constexpr int kBr = 16;      // query rows per warp
constexpr int kBc = 16;      // keys per KV step
constexpr int kBd = kBc;     // slice of d per m16n16k16 step
constexpr int kWarps = 4;

struct MD_F {
    float m;  // running max of the scaled scores
    float d;  // sum of exp(score - m)
};

// cvt.f32.f16 is exact; cvt.rn.f16.f32 rounds to nearest even (PTX ISA, "cvt").
__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Merge two {m, d}: the larger max wins, the other sum is rescaled by __expf(smaller - larger).
__device__ __forceinline__ MD_F md_merge(MD_F a, MD_F b) {
    const bool a_wins = a.m > b.m;
    const MD_F big = a_wins ? a : b;
    const MD_F small = a_wins ? b : a;
    MD_F r;
    r.d = big.d + small.d * __expf(small.m - big.m);
    r.m = big.m;
    return r;
}

// Butterfly all-reduce of {m, d} over a group of 16 lanes (xor masks 8, 4, 2, 1).
__device__ __forceinline__ MD_F md_allreduce16(MD_F v) {
#pragma unroll
    for (int mask = 8; mask > 0; mask >>= 1) {
        const float other_m = __shfl_xor_sync(0xffffffffu, v.m, mask, 16);
        const float other_d = __shfl_xor_sync(0xffffffffu, v.d, mask, 16);
        const float m = fmaxf(v.m, other_m);
        v.d = v.d * __expf(v.m - m) + other_d * __expf(other_m - m);
        v.m = m;
    }
    return v;
}

template <bool kSwizzle>
__device__ __forceinline__ unsigned qkv_addr(unsigned off) {  // s_Q, s_K, s_V (row stride d)
    return kSwizzle ? wops::swz<3, 3, 4>(off) : off;
}
template <bool kSwizzle>
__device__ __forceinline__ unsigned tile_addr(unsigned off) {  // s_QK, s_S, s_O (row stride 16)
    return kSwizzle ? wops::swz<1, 3, 3>(off) : off;
}

// D = A B + C, f16 accumulator: {d0, d1} = mma.m16n8k16.row.col.f16.f16.f16.f16
__device__ __forceinline__ void mma_f16(unsigned& d0, unsigned& d1, const unsigned (&a)[4], unsigned b0,
                                        unsigned b1, unsigned c0, unsigned c1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};"
                 : "=r"(d0), "=r"(d1)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0), "r"(c1));
}

// The 16x16 C tile (registers c[0..3] = rows g / g+8 of n 0-7, rows g / g+8 of n 8-15) to a 16-wide tile.
template <bool kSwizzle>
__device__ __forceinline__ void store_c16(unsigned short* tile, const unsigned (&c)[4], int lane) {
    const unsigned row = lane >> 2, col = (lane & 3) * 2;
    *reinterpret_cast<unsigned*>(tile + tile_addr<kSwizzle>(row * 16 + col)) = c[0];
    *reinterpret_cast<unsigned*>(tile + tile_addr<kSwizzle>((row + 8) * 16 + col)) = c[1];
    *reinterpret_cast<unsigned*>(tile + tile_addr<kSwizzle>(row * 16 + col + 8)) = c[2];
    *reinterpret_cast<unsigned*>(tile + tile_addr<kSwizzle>((row + 8) * 16 + col + 8)) = c[3];
}

template <bool kSwizzle>
__device__ __forceinline__ void forward(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
                                        const unsigned short* __restrict__ V, unsigned short* __restrict__ O,
                                        int N, int M, int d, float softmax_scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned short* s_Q = reinterpret_cast<unsigned short*>(smem);  // [4*Br, d]
    unsigned short* s_K = s_Q + kWarps * kBr * d;                   // [Bc, d]
    unsigned short* s_V = s_K + kBc * d;                            // [Bc, d]
    unsigned short* s_QK = s_V + kBc * d;                           // [4*Br, Bc]
    unsigned short* s_S = s_QK + kWarps * kBr * kBc;                // [4*Br, Bc]
    unsigned short* s_O = s_S + kWarps * kBr * kBc;                 // [4*Br, Bd]
    MD_F* ml_prev = reinterpret_cast<MD_F*>(s_O + kWarps * kBr * kBd);  // running {m, l} up to step j-1
    MD_F* ml_tile = ml_prev + kWarps * kBr;                             // this step's tile
    MD_F* ml_new = ml_tile + kWarps * kBr;                              // running {m, l} up to step j

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const size_t head = (size_t)blockIdx.z * gridDim.y + blockIdx.y;
    const size_t qo_off = head * N * d + ((size_t)blockIdx.x * kWarps + warp) * kBr * d;
    const size_t kv_off = head * M * d;

    unsigned short* w_Q = s_Q + warp * kBr * d;
    unsigned short* w_QK = s_QK + warp * kBr * kBc;
    unsigned short* w_S = s_S + warp * kBr * kBc;
    unsigned short* w_O = s_O + warp * kBr * kBd;
    MD_F* w_prev = ml_prev + warp * kBr;
    MD_F* w_tile = ml_tile + warp * kBr;
    MD_F* w_new = ml_new + warp * kBr;
    FS_TRACE_INIT();

    for (int r = lane; r < kBr; r += 32) {
        w_prev[r] = MD_F{-1e20f, 0.0f};
        w_tile[r] = MD_F{-1e20f, 0.0f};
    }
    FS_TRACE(init_ml, 0, );
    for (int i = lane * 8; i < kBr * d; i += 32 * 8) {
        *reinterpret_cast<uint4*>(w_Q + qkv_addr<kSwizzle>(i)) = *reinterpret_cast<const uint4*>(Q + qo_off + i);
    }
    __syncwarp();
    FS_TRACE(load_q, 0, );

    unsigned ra[4], rb[4];
    for (int kv = 0; kv < M; kv += kBc) {
        unsigned rc[4] = {0u, 0u, 0u, 0u};

        for (int i = threadIdx.x * 8; i < kBc * d; i += blockDim.x * 8) {
            const size_t g = kv_off + (size_t)kv * d + i;
            *reinterpret_cast<uint4*>(s_K + qkv_addr<kSwizzle>(i)) = *reinterpret_cast<const uint4*>(K + g);
            *reinterpret_cast<uint4*>(s_V + qkv_addr<kSwizzle>(i)) = *reinterpret_cast<const uint4*>(V + g);
        }
        __syncthreads();
        FS_TRACE(load_kv, 0, );

        for (int k = 0; k < d; k += kBd) {
            // A = Q[:, k:k+16]: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)
            wops::ldmatrix_x4(ra, w_Q + qkv_addr<kSwizzle>(k + (lane % 16) * d + (lane / 16) * 8));
            // B = K[kv:kv+16, k:k+16]^T: matrices (keys 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15)
            wops::ldmatrix_x4(rb, s_K + qkv_addr<kSwizzle>(k + (lane % 8) * d + ((lane / 8) % 2) * 8 + (lane / 16) * 8 * d));
            mma_f16(rc[0], rc[1], ra, rb[0], rb[1], rc[0], rc[1]);
            mma_f16(rc[2], rc[3], ra, rb[2], rb[3], rc[2], rc[3]);
        }
        FS_TRACE(mma_qk, 4, FS_PUT(rc));
        store_c16<kSwizzle>(w_QK, rc, lane);
        __syncwarp();
        FS_TRACE(store_s, 0, );

#ifdef FS_TRACE_BUILD
        float md_m[kBr / 2], md_d[kBr / 2];
        unsigned short p_h[kBr / 2];
#endif
#pragma unroll
        for (int p = 0; p < kBr / 2; ++p) {
            const int row = p * 2 + lane / 16;  // row in the warp's tile
            const unsigned at = tile_addr<kSwizzle>(row * kBc + lane % 16);
            MD_F v{h2f(w_QK[at]) * softmax_scale, 1.0f};
            __syncwarp();
            v = md_allreduce16(v);
            if (lane % 16 == 0) {
                w_tile[row] = v;
                w_new[row] = md_merge(w_prev[row], v);
            }
            __syncwarp();
            const unsigned short ph = f2h(__expf(h2f(w_QK[at]) * softmax_scale - w_tile[row].m));
            w_S[at] = ph;
            __syncwarp();
#ifdef FS_TRACE_BUILD
            md_m[p] = v.m;
            md_d[p] = v.d;
            p_h[p] = ph;
#endif
        }
        FS_TRACE(softmax, 3 * (kBr / 2), FS_PUT(md_m); FS_PUT(md_d); FS_PUT(p_h));

        wops::ldmatrix_x4(ra, w_S + tile_addr<kSwizzle>((lane % 16) * kBc + (lane / 16) * 8));
        for (int k = 0; k < d; k += kBd) {
            rc[0] = rc[1] = rc[2] = rc[3] = 0u;
            // B = V[kv:kv+16, k:k+16] (K x N row-major): addressed like A, transposed by ldmatrix
            wops::ldmatrix_x4_trans(rb, s_V + qkv_addr<kSwizzle>(k + (lane % 16) * d + (lane / 16) * 8));
            mma_f16(rc[0], rc[1], ra, rb[0], rb[1], rc[0], rc[1]);
            mma_f16(rc[2], rc[3], ra, rb[2], rb[3], rc[2], rc[3]);
            FS_TRACE(mma_pv, 4, FS_PUT(rc));
            store_c16<kSwizzle>(w_O, rc, lane);
            __syncwarp();
            FS_TRACE(store_o, 0, );

#ifdef FS_TRACE_BUILD
            unsigned short o_h[kBr / 2];
#endif
#pragma unroll
            for (int p = 0; p < kBr / 2; ++p) {
                const int row = p * 2 + lane / 16;
                const size_t out = qo_off + (size_t)row * d + k + lane % 16;
                const unsigned so = tile_addr<kSwizzle>(row * kBd + lane % 16);
                const MD_F prev = w_prev[row], tile = w_tile[row], nw = w_new[row];
                const float e_prev = __expf(prev.m - nw.m);
                const float e_tile = __expf(tile.m - nw.m);
                const float inv_l = 1.0f / nw.d;
                const unsigned short oh = f2h(inv_l * (prev.d * e_prev * h2f(O[out]) + e_tile * h2f(w_O[so])));
                O[out] = oh;
#ifdef FS_TRACE_BUILD
                o_h[p] = oh;
#endif
            }
            __syncwarp();  // s_O is rewritten by the next slice
            FS_TRACE(update_o, kBr / 2, FS_PUT(o_h));
        }

        if (lane < kBr) w_prev[lane] = w_new[lane];
#ifdef FS_TRACE_BUILD
        const MD_F nm = lane < kBr ? w_new[lane] : MD_F{0.0f, 0.0f};
#endif
        FS_TRACE(next_ml, 2, FS_PUT(nm.m); FS_PUT(nm.d));
        __syncthreads();
    }
}

}  // namespace fa5

extern "C" __global__ void
fa_v5(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K, const unsigned short* __restrict__ V,
      unsigned short* __restrict__ O, int N, int M, int d, float softmax_scale) {
    fa5::forward<false>(Q, K, V, O, N, M, d, softmax_scale);
}

extern "C" __global__ void
fa_v6(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K, const unsigned short* __restrict__ V,
      unsigned short* __restrict__ O, int N, int M, int d, float softmax_scale) {
    fa5::forward<true>(Q, K, V, O, N, M, d, softmax_scale);
}
