"""Bit-exact arithmetic on bit patterns: formats and rounding, cvt, f32 FFMA/FADD/FMUL/FMNMX, mma models."""

from flashsim.numerics import cvt  # the module: cvt.cvt("cvt.rn.f16.f32", x) runs any PTX spelling
from flashsim.numerics.cvt import (bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16,
                                   float22bfloat162_rn, float22half2_rn)
from flashsim.numerics.formats import BF16, F16, F32, FloatFormat, bits_of, decode, round_exact, to_float
from flashsim.numerics.fp32 import add, fma, fmax, fmin, mul

__all__ = [
    "BF16", "F16", "F32", "FloatFormat", "add", "bf16_to_f32", "bits_of", "cvt", "decode",
    "f16_to_f32", "f32_to_bf16", "f32_to_f16", "float22bfloat162_rn", "float22half2_rn", "fma", "fmax",
    "fmin", "mul", "round_exact", "to_float",
]
