// probe_cvt.cu: elementwise cvt probes over bit patterns, one kernel per PTX cvt form.
//
// Kernel `probe_<op with dots replaced by underscores>` applies one inline-PTX cvt (grid-stride loop):
//   f32 -> f16/bf16:   probe_cvt_<rnd>..._f16_f32(const u32* x, u16* d, unsigned long long n)
//   f16/bf16 -> f32:   probe_cvt_f32_f16(const u16* x, u32* d, unsigned long long n)
//   two f32 -> x2:     probe_cvt_<rnd>..._f16x2_f32(const u32* a, const u32* b, u32* d, unsigned long long n)
// PTX ISA, "Data Movement and Conversion Instructions: cvt":
//   cvt.frnd{.ftz}.f16.f32 / .bf16.f32         frnd = .rn .rz .rm .rp
//   cvt.frnd2{.relu}{.satfinite}.f16.f32       frnd2 = .rn .rz  (.bf16 likewise)
//   cvt.frnd2{.relu}{.satfinite}.f16x2.f32 d, a, b    d = {a -> upper half, b -> lower half}:
//
//      31            16 15             0
//     +----------------+----------------+
//     |    cvt(a)      |    cvt(b)      |      (a is the FIRST source operand)
//     +----------------+----------------+
//
//   __float22half2_rn(v) / __floats2bfloat162_rn(x, y) compile to `cvt.rn.f16x2.f32 d, y, x`, so x lands
//   in the low half. cvt.f32.bf16 (sm_90+) is what __bfloat162float compiles to on sm_90.
// Forms that ptxas (CUDA 13.0) rejects for sm_90 and that are therefore absent: .rm/.rp with .relu or
// .satfinite, .ftz with .relu or .satfinite, .rm/.rp/.ftz on the x2 forms, .sat on bf16.
// SASS (cuobjdump, CUDA 13.0, sm_90): .rn/.rz -> F2FP.{F16,BF16}.F32.PACK_AB (or .MERGE_C with .relu),
// .rm/.rp -> F2F.{F16,BF16}.F32.{RM,RP}. ptxas drops .ftz on the f16 forms (same SASS as without it)
// but keeps it on bf16 (F2F.FTZ.BF16.F32): whether f16 flushes a subnormal f32 input is for the GPU to say.
// Keep in sync with CVT_OPS in gpu/probes.py (tests check every op there has a kernel here).

#define PROBE_CVT_INDEX_LOOP                                                                    \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; \
         i += (unsigned long long)gridDim.x * blockDim.x)

// f32 bits -> 16-bit pattern
#define PROBE_CVT_TO16(NAME, INSTR)                                                                  \
    extern "C" __global__ void NAME(const unsigned int* __restrict__ x, unsigned short* __restrict__ d, \
                                    unsigned long long n) {                                          \
        PROBE_CVT_INDEX_LOOP {                                                                       \
            unsigned short r;                                                                        \
            asm volatile(INSTR " %0, %1;" : "=h"(r) : "f"(__uint_as_float(x[i])));                 \
            d[i] = r;                                                                                \
        }                                                                                            \
    }

// 16-bit pattern -> f32 bits
#define PROBE_CVT_FROM16(NAME, INSTR)                                                                \
    extern "C" __global__ void NAME(const unsigned short* __restrict__ x, unsigned int* __restrict__ d, \
                                    unsigned long long n) {                                          \
        PROBE_CVT_INDEX_LOOP {                                                                       \
            float r;                                                                                 \
            asm volatile(INSTR " %0, %1;" : "=f"(r) : "h"(x[i]));                                   \
            d[i] = __float_as_uint(r);                                                               \
        }                                                                                            \
    }

// two f32 bits -> packed pair: a (first source) -> bits 16-31, b (second source) -> bits 0-15
#define PROBE_CVT_X2(NAME, INSTR)                                                                    \
    extern "C" __global__ void NAME(const unsigned int* __restrict__ a, const unsigned int* __restrict__ b, \
                                    unsigned int* __restrict__ d, unsigned long long n) {            \
        PROBE_CVT_INDEX_LOOP {                                                                       \
            unsigned int r;                                                                          \
            asm volatile(INSTR " %0, %1, %2;"                                                        \
                         : "=r"(r)                                                                   \
                         : "f"(__uint_as_float(a[i])), "f"(__uint_as_float(b[i])));                 \
            d[i] = r;                                                                                \
        }                                                                                            \
    }

// f32 -> f16
PROBE_CVT_TO16(probe_cvt_rn_f16_f32, "cvt.rn.f16.f32")
PROBE_CVT_TO16(probe_cvt_rz_f16_f32, "cvt.rz.f16.f32")
PROBE_CVT_TO16(probe_cvt_rm_f16_f32, "cvt.rm.f16.f32")
PROBE_CVT_TO16(probe_cvt_rp_f16_f32, "cvt.rp.f16.f32")
PROBE_CVT_TO16(probe_cvt_rn_ftz_f16_f32, "cvt.rn.ftz.f16.f32")
PROBE_CVT_TO16(probe_cvt_rz_ftz_f16_f32, "cvt.rz.ftz.f16.f32")
PROBE_CVT_TO16(probe_cvt_rm_ftz_f16_f32, "cvt.rm.ftz.f16.f32")
PROBE_CVT_TO16(probe_cvt_rp_ftz_f16_f32, "cvt.rp.ftz.f16.f32")
PROBE_CVT_TO16(probe_cvt_rn_relu_f16_f32, "cvt.rn.relu.f16.f32")
PROBE_CVT_TO16(probe_cvt_rz_relu_f16_f32, "cvt.rz.relu.f16.f32")
PROBE_CVT_TO16(probe_cvt_rn_satfinite_f16_f32, "cvt.rn.satfinite.f16.f32")
PROBE_CVT_TO16(probe_cvt_rz_satfinite_f16_f32, "cvt.rz.satfinite.f16.f32")
PROBE_CVT_TO16(probe_cvt_rn_relu_satfinite_f16_f32, "cvt.rn.relu.satfinite.f16.f32")
PROBE_CVT_TO16(probe_cvt_rz_relu_satfinite_f16_f32, "cvt.rz.relu.satfinite.f16.f32")

// f32 -> bf16
PROBE_CVT_TO16(probe_cvt_rn_bf16_f32, "cvt.rn.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rz_bf16_f32, "cvt.rz.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rm_bf16_f32, "cvt.rm.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rp_bf16_f32, "cvt.rp.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rn_ftz_bf16_f32, "cvt.rn.ftz.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rz_ftz_bf16_f32, "cvt.rz.ftz.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rm_ftz_bf16_f32, "cvt.rm.ftz.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rp_ftz_bf16_f32, "cvt.rp.ftz.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rn_relu_bf16_f32, "cvt.rn.relu.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rz_relu_bf16_f32, "cvt.rz.relu.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rn_satfinite_bf16_f32, "cvt.rn.satfinite.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rz_satfinite_bf16_f32, "cvt.rz.satfinite.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rn_relu_satfinite_bf16_f32, "cvt.rn.relu.satfinite.bf16.f32")
PROBE_CVT_TO16(probe_cvt_rz_relu_satfinite_bf16_f32, "cvt.rz.relu.satfinite.bf16.f32")

// f16 / bf16 -> f32 (exact)
PROBE_CVT_FROM16(probe_cvt_f32_f16, "cvt.f32.f16")
PROBE_CVT_FROM16(probe_cvt_f32_bf16, "cvt.f32.bf16")

// two f32 -> f16x2
PROBE_CVT_X2(probe_cvt_rn_f16x2_f32, "cvt.rn.f16x2.f32")
PROBE_CVT_X2(probe_cvt_rz_f16x2_f32, "cvt.rz.f16x2.f32")
PROBE_CVT_X2(probe_cvt_rn_relu_f16x2_f32, "cvt.rn.relu.f16x2.f32")
PROBE_CVT_X2(probe_cvt_rz_relu_f16x2_f32, "cvt.rz.relu.f16x2.f32")
PROBE_CVT_X2(probe_cvt_rn_satfinite_f16x2_f32, "cvt.rn.satfinite.f16x2.f32")
PROBE_CVT_X2(probe_cvt_rz_satfinite_f16x2_f32, "cvt.rz.satfinite.f16x2.f32")
PROBE_CVT_X2(probe_cvt_rn_relu_satfinite_f16x2_f32, "cvt.rn.relu.satfinite.f16x2.f32")
PROBE_CVT_X2(probe_cvt_rz_relu_satfinite_f16x2_f32, "cvt.rz.relu.satfinite.f16x2.f32")

// two f32 -> bf16x2
PROBE_CVT_X2(probe_cvt_rn_bf16x2_f32, "cvt.rn.bf16x2.f32")
PROBE_CVT_X2(probe_cvt_rz_bf16x2_f32, "cvt.rz.bf16x2.f32")
PROBE_CVT_X2(probe_cvt_rn_relu_bf16x2_f32, "cvt.rn.relu.bf16x2.f32")
PROBE_CVT_X2(probe_cvt_rz_relu_bf16x2_f32, "cvt.rz.relu.bf16x2.f32")
PROBE_CVT_X2(probe_cvt_rn_satfinite_bf16x2_f32, "cvt.rn.satfinite.bf16x2.f32")
PROBE_CVT_X2(probe_cvt_rz_satfinite_bf16x2_f32, "cvt.rz.satfinite.bf16x2.f32")
PROBE_CVT_X2(probe_cvt_rn_relu_satfinite_bf16x2_f32, "cvt.rn.relu.satfinite.bf16x2.f32")
PROBE_CVT_X2(probe_cvt_rz_relu_satfinite_bf16x2_f32, "cvt.rz.relu.satfinite.bf16x2.f32")
