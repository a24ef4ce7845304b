// probe_sfu_trig.cu: MUFU.SIN and MUFU.COS on their own inputs.
//
// sin.approx.f32 / cos.approx.f32 (with or without .ftz) compile to FMUL.RZ x, 0.15915494 (1/2pi) and then
// MUFU.SIN / MUFU.COS (cuobjdump -sass, NVRTC 13.0, sm_90), so no PTX reaches every MUFU input. These kernels
// are those instructions; flashsim.gpu.sfu_trig.raw_cubin() rewrites the FMUL's immediate to 1.0 in the cubin
// (FMUL.RZ x, 1.0 is x for every non-NaN x, subnormals included), so the unit sees the swept bit pattern.

#include "sfu_sweep.cuh"

SWEEP(raw_sweep_sin, "sin.approx.ftz.f32")
SWEEP(raw_sweep_cos, "cos.approx.ftz.f32")
ARRAY(raw_array_sin, "sin.approx.ftz.f32")
ARRAY(raw_array_cos, "cos.approx.ftz.f32")
