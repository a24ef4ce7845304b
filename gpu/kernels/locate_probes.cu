// Kernels for the first-divergence locator (flashsim.sass.ptxlog, gpu/locate_check.py): each writes
// registers of many PTX kinds (16-bit halves, f16x2 pairs, predicates, 64-bit addresses, vector
// destinations of ldmatrix and mma), so the instrumented builds log all of them.
#include <cuda_fp16.h>

// Half and half2 math (hexp, h2exp, __hfma2, __habs2, h2sqrt, __hmul): 16-bit registers, f16x2 pairs and
// the predicates of hexp's special cases; every thread also counts its positive inputs.
extern "C" __global__ void half_mix(__half* y, __half2* y2, const __half* x, const __half2* x2, int* pos, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half a = x[i];
    __half e = hexp(a);
    y[i] = __hmul(__hadd(e, __float2half(1.0f)), __float2half(0.5f));
    __half2 b = x2[i];
    __half2 eb = h2exp(b);
    __half2 s = __hfma2(eb, b, __floats2half2_rn(0.25f, -0.25f));
    y2[i] = h2sqrt(__habs2(s));
    pos[i] = (__half2float(a) > 0.0f ? 1 : 0) + (__low2float(b) > 0.0f ? 2 : 0);
}

// One warp: D (16x8 f32) = A (16x16 f16, row-major in global) * B (16x8 f16, stored as 8 rows of 16 = B^T)
// through shared memory, ldmatrix and mma.sync.m16n8k16; then D scaled by an FFMA.
extern "C" __global__ void mma_tile(float* d, const __half* a, const __half* bt, float scale, float bias) {
    __shared__ __align__(16) __half sa[16 * 16];
    __shared__ __align__(16) __half sb[8 * 16];
    int lane = threadIdx.x;
    for (int k = lane; k < 256; k += 32) sa[k] = a[k];
    for (int k = lane; k < 128; k += 32) sb[k] = bt[k];
    __syncwarp();
    unsigned ra[4], rb[2];
    unsigned pa = (unsigned)__cvta_generic_to_shared(&sa[(lane % 16) * 16 + (lane / 16) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(ra[0]), "=r"(ra[1]), "=r"(ra[2]), "=r"(ra[3]) : "r"(pa));
    unsigned pb = (unsigned)__cvta_generic_to_shared(&sb[(lane % 8) * 16 + ((lane / 8) % 2) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(rb[0]), "=r"(rb[1]) : "r"(pb));
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
    int g = lane >> 2, t = lane & 3;
    d[g * 8 + 2 * t] = c[0] * scale + bias;
    d[g * 8 + 2 * t + 1] = c[1] * scale + bias;
    d[(g + 8) * 8 + 2 * t] = c[2] * scale + bias;
    d[(g + 8) * 8 + 2 * t + 1] = c[3] * scale + bias;
}

// Horner's rule, one FFMA per step: the kernel the locator's planted-bug checks use (an interpreter whose
// FFMA is made wrong in one lane must be caught at the line of the Horner step).
extern "C" __global__ void poly(float* y, const float* x, const float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    float acc = c[0];
    for (int k = 1; k < 4; ++k) acc = acc * v + c[k];  // LOCATE:horner
    float w = acc * acc;
    y[i] = w - v;
}
