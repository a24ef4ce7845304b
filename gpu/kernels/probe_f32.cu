// probe_f32.cu: elementwise f32 instruction probes over bit patterns, one kernel per PTX instruction.
//
// Kernel `probe_<op>` applies one inline-PTX instruction to n uint32 bit patterns (grid-stride loop):
//   probe_<op>(const u32* a, [const u32* b, [const u32* c,]] u32* d, unsigned long long n)
// Inline asm pins the exact instruction and its modifiers, whatever the compile flags (cupy always
// passes -ftz=true to NVRTC; that does not touch an explicit `fma.rn.f32`). The explicit .rn on
// add/mul keeps ptxas from contracting them into an FFMA (PTX ISA, "add" / "mul": "An add instruction
// with an explicit rounding modifier is treated conservatively by the code optimizer").
// PTX ISA sections: "Floating Point Instructions: fma", "...: add", "...: mul", "...: max", "...: min".
// The host wrapper is gpu/probes.py (F32_OPS); no CUDA headers are needed.

#define PROBE_F32_INDEX_LOOP                                                                    \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; \
         i += (unsigned long long)gridDim.x * blockDim.x)

#define PROBE_F32_BINARY(NAME, INSTR)                                                             \
    extern "C" __global__ void NAME(const unsigned int* __restrict__ a,                           \
                                    const unsigned int* __restrict__ b, unsigned int* __restrict__ d, \
                                    unsigned long long n) {                                       \
        PROBE_F32_INDEX_LOOP {                                                                    \
            float r;                                                                              \
            asm volatile(INSTR " %0, %1, %2;"                                                     \
                         : "=f"(r)                                                                \
                         : "f"(__uint_as_float(a[i])), "f"(__uint_as_float(b[i])));              \
            d[i] = __float_as_uint(r);                                                            \
        }                                                                                         \
    }

#define PROBE_F32_TERNARY(NAME, INSTR)                                                            \
    extern "C" __global__ void NAME(const unsigned int* __restrict__ a,                           \
                                    const unsigned int* __restrict__ b,                           \
                                    const unsigned int* __restrict__ c, unsigned int* __restrict__ d, \
                                    unsigned long long n) {                                       \
        PROBE_F32_INDEX_LOOP {                                                                    \
            float r;                                                                              \
            asm volatile(INSTR " %0, %1, %2, %3;"                                                 \
                         : "=f"(r)                                                                \
                         : "f"(__uint_as_float(a[i])), "f"(__uint_as_float(b[i])),               \
                           "f"(__uint_as_float(c[i])));                                           \
            d[i] = __float_as_uint(r);                                                            \
        }                                                                                         \
    }

// d = a * b + c, one rounding
PROBE_F32_TERNARY(probe_ffma_rn, "fma.rn.f32")
PROBE_F32_TERNARY(probe_ffma_rn_ftz, "fma.rn.ftz.f32")
// d = a + b / a * b, never contracted (explicit .rn)
PROBE_F32_BINARY(probe_fadd_rn, "add.rn.f32")
PROBE_F32_BINARY(probe_fadd_rn_ftz, "add.rn.ftz.f32")
PROBE_F32_BINARY(probe_fmul_rn, "mul.rn.f32")
PROBE_F32_BINARY(probe_fmul_rn_ftz, "mul.rn.ftz.f32")
// max.f32 / min.f32: what fmaxf / fminf compile to; a NaN operand is ignored
PROBE_F32_BINARY(probe_fmax, "max.f32")
PROBE_F32_BINARY(probe_fmin, "min.f32")
PROBE_F32_BINARY(probe_fmax_ftz, "max.ftz.f32")
PROBE_F32_BINARY(probe_fmin_ftz, "min.ftz.f32")
// max.NaN.f32 / min.NaN.f32 (sm_80+): a NaN operand gives the canonical NaN
PROBE_F32_BINARY(probe_fmax_nan, "max.NaN.f32")
PROBE_F32_BINARY(probe_fmin_nan, "min.NaN.f32")
