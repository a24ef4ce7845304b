// probe_sfu64.cu: the special-function unit's double-precision seeds, MUFU.RCP64H and MUFU.RSQ64H, for sweeps
// (gpu/validate_sfu64.py). rcp.approx.ftz.f64 and rsqrt.approx.ftz.f64 are one MUFU each on sm_90: the
// instruction reads the high word of its double and writes the high word of the result (ptxas zeroes the low
// word itself). Double division, rcp.rn.f64, sqrt.rn.f64 and rsqrt build on them.
//
// Sweep kernels: element i evaluates the instruction on the double whose high word is start + i and whose
// low word is lo, and writes the result's high word, so all 2^32 high words are covered without host
// traffic. Array kernels: whole doubles in, whole doubles out (the result's low word, the source's low word).

typedef unsigned int u32;
typedef unsigned long long u64;

#define SWEEP64(NAME, PTX)                                                                          \
    extern "C" __global__ void sweep_##NAME(u32 start, u32 lo, u32* __restrict__ out, u64 n) {      \
        u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x;                                        \
        if (i >= n) return;                                                                        \
        const u32 hi = start + (u32)i;                                                             \
        u64 r;                                                                                     \
        asm volatile("{ .reg .f64 t, v; mov.b64 t, {%1, %2}; " PTX " v, t; mov.b64 %0, v; }"       \
                     : "=l"(r) : "r"(lo), "r"(hi));                                                \
        out[i] = (u32)(r >> 32);                                                                   \
    }

#define ARRAY64(NAME, PTX)                                                                          \
    extern "C" __global__ void array_##NAME(const u64* __restrict__ x, u64* __restrict__ out, u64 n) { \
        u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x;                                        \
        if (i >= n) return;                                                                        \
        u64 r;                                                                                     \
        asm volatile("{ .reg .f64 t, v; mov.b64 t, %1; " PTX " v, t; mov.b64 %0, v; }"             \
                     : "=l"(r) : "l"(x[i]));                                                       \
        out[i] = r;                                                                                \
    }

SWEEP64(rcp64h, "rcp.approx.ftz.f64")
SWEEP64(rsq64h, "rsqrt.approx.ftz.f64")
ARRAY64(rcp64h, "rcp.approx.ftz.f64")
ARRAY64(rsq64h, "rsqrt.approx.ftz.f64")
