// probe_mma.cu: one mma.sync per tile, to measure the tensor-core arithmetic bit for bit.
//
// One warp per tile, many tiles per launch: tile = global warp id, warps past n_tiles return (the test
// is warp-uniform, so every lane of a running warp reaches mma.sync, as .aligned requires). blockDim.x
// must be a multiple of 32; the host wrapper (gpu/probes.py) uses 256.
// Inputs, row-major bit patterns:  A (n_tiles, 16, K) u16,  B (n_tiles, K, 8) u16 (K x N),
// C (n_tiles, 16, 8) u32 for an f32 accumulator or u16 for an f16 one;  D has C's layout and type.
// Each kernel issues exactly one `mma.sync.aligned.m16n8kK.row.col.<d>.<a>.<b>.<c>` (PTX ISA,
// "Warp-level matrix multiply-accumulate instructions: mma"); fragments come from fragments.cuh.

#include "fragments.cuh"

#define PROBE_TILE_AND_LANE()                                                                         \
    const unsigned long long tile = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) >> 5; \
    if (tile >= n_tiles) return;                                                                      \
    const int lane = (int)(threadIdx.x & 31u)

// D (f32) = A (16x16) * B (16x8) + C (f32)
#define PROBE_MMA_K16_F32(NAME, AB)                                                                   \
    extern "C" __global__ void NAME(const unsigned short* __restrict__ A,                             \
                                    const unsigned short* __restrict__ B,                             \
                                    const unsigned int* __restrict__ C, unsigned int* __restrict__ D, \
                                    unsigned long long n_tiles) {                                     \
        PROBE_TILE_AND_LANE();                                                                        \
        unsigned int a[4], b[2];                                                                      \
        float c[4], d[4];                                                                             \
        frag::load_a_m16k16(A + tile * 256, 16, lane, a);                                             \
        frag::load_b_k16n8(B + tile * 128, 8, lane, b);                                               \
        frag::load_c_f32(C + tile * 128, 8, lane, c);                                                 \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." AB "." AB ".f32 "                       \
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"            \
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                 \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),              \
                       "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));                                   \
        frag::store_d_f32(D + tile * 128, 8, lane, d);                                                \
    }

// D (f32) = A (16x8) * B (8x8) + C (f32)
#define PROBE_MMA_K8_F32(NAME, AB)                                                                    \
    extern "C" __global__ void NAME(const unsigned short* __restrict__ A,                             \
                                    const unsigned short* __restrict__ B,                             \
                                    const unsigned int* __restrict__ C, unsigned int* __restrict__ D, \
                                    unsigned long long n_tiles) {                                     \
        PROBE_TILE_AND_LANE();                                                                        \
        unsigned int a[2], b;                                                                         \
        float c[4], d[4];                                                                             \
        frag::load_a_m16k8(A + tile * 128, 8, lane, a);                                               \
        b = frag::load_b_k8n8(B + tile * 64, 8, lane);                                                \
        frag::load_c_f32(C + tile * 128, 8, lane, c);                                                 \
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32." AB "." AB ".f32 "                        \
                     "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"                           \
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                 \
                     : "r"(a[0]), "r"(a[1]), "r"(b), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));     \
        frag::store_d_f32(D + tile * 128, 8, lane, d);                                                \
    }

PROBE_MMA_K16_F32(mma_m16n8k16_f32_f16_f16_f32, "f16")
PROBE_MMA_K16_F32(mma_m16n8k16_f32_bf16_bf16_f32, "bf16")
PROBE_MMA_K8_F32(mma_m16n8k8_f32_f16_f16_f32, "f16")
PROBE_MMA_K8_F32(mma_m16n8k8_f32_bf16_bf16_f32, "bf16")

// D (f16) = A (16x16, f16) * B (16x8, f16) + C (f16); C/D are two f16x2 registers.
extern "C" __global__ void mma_m16n8k16_f16_f16_f16_f16(const unsigned short* __restrict__ A,
                                                        const unsigned short* __restrict__ B,
                                                        const unsigned short* __restrict__ C,
                                                        unsigned short* __restrict__ D,
                                                        unsigned long long n_tiles) {
    PROBE_TILE_AND_LANE();
    unsigned int a[4], b[2], c[2], d[2];
    frag::load_a_m16k16(A + tile * 256, 16, lane, a);
    frag::load_b_k16n8(B + tile * 128, 8, lane, b);
    frag::load_c_f16(C + tile * 128, 8, lane, c);
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
                 "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};"
                 : "=r"(d[0]), "=r"(d[1])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
    frag::store_d_f16(D + tile * 128, 8, lane, d);
}
