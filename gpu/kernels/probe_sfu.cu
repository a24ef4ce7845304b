// probe_sfu.cu: the special-function unit (MUFU) and the PTX instructions built on it, for sweeps.
// (the sweep and array kernels of sfu_sweep.cuh)
// PTX ISA, "Floating Point Instructions": ex2, lg2, rcp, rsqrt, sqrt, tanh (approx forms), rcp.rn, div.rn; the
// .ftz approx forms are one MUFU each on sm_90 (cuobjdump -sass), the non-ftz forms wrap it.

#include "sfu_sweep.cuh"

#define SFU_OPS(X)                                                                                  \
    X(ex2_approx_ftz_f32, "ex2.approx.ftz.f32")                                                     \
    X(ex2_approx_f32, "ex2.approx.f32")                                                             \
    X(lg2_approx_ftz_f32, "lg2.approx.ftz.f32")                                                     \
    X(lg2_approx_f32, "lg2.approx.f32")                                                             \
    X(rcp_approx_ftz_f32, "rcp.approx.ftz.f32")                                                     \
    X(rcp_approx_f32, "rcp.approx.f32")                                                             \
    X(tanh_approx_f32, "tanh.approx.f32")                                                           \
    X(rcp_rn_f32, "rcp.rn.f32")                                                                     \
    X(rsqrt_approx_ftz_f32, "rsqrt.approx.ftz.f32")                                                 \
    X(rsqrt_approx_f32, "rsqrt.approx.f32")                                                         \
    X(sqrt_approx_ftz_f32, "sqrt.approx.ftz.f32")                                                   \
    X(sqrt_approx_f32, "sqrt.approx.f32")                                                           \
    X(sin_approx_ftz_f32, "sin.approx.ftz.f32")                                                     \
    X(sin_approx_f32, "sin.approx.f32")                                                             \
    X(cos_approx_ftz_f32, "cos.approx.ftz.f32")                                                     \
    X(cos_approx_f32, "cos.approx.f32")                                                             \
    X(ex2_approx_f16x2, "ex2.approx.f16x2")                                                         \
    X(ex2_approx_ftz_bf16x2, "ex2.approx.ftz.bf16x2")

#define SWEEP_OP(NAME, PTX) SWEEP(sweep_##NAME, PTX)
#define ARRAY_OP(NAME, PTX) ARRAY(array_##NAME, PTX)
SFU_OPS(SWEEP_OP)
SFU_OPS(ARRAY_OP)

extern "C" __global__ void array_div_rn_f32(const unsigned int* __restrict__ x, const unsigned int* __restrict__ y,
                                            unsigned int* __restrict__ out, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int r;
    asm volatile("div.rn.f32 %0, %1, %2;" : "=r"(r) : "r"(x[i]), "r"(y[i]));
    out[i] = r;
}
