"""Bit-exact arithmetic on bit patterns: formats and rounding, cvt, f32 FFMA/FADD/FMUL/FMNMX, mma and wgmma models."""

from flashsim.numerics import cvt  # the module: cvt.cvt("cvt.rn.f16.f32", x) runs any PTX spelling
from flashsim.numerics.cvt import (bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16,
                                   float22bfloat162_rn, float22half2_rn)
from flashsim.numerics.formats import BF16, E4M3, E5M2, F16, F32, FloatFormat, bits_of, decode, round_exact, to_float
from flashsim.numerics.fp32 import add, fma, fmax, fmin, mul

__all__ = [
    "BF16", "E4M3", "E5M2", "F16", "F32", "FloatFormat", "MODELS", "MmaModel", "mma_m16n8k8", "mma_m16n8k16",
    "wgmma_m64nNk16", "wgmma_m64nNk32", "add", "bf16_to_f32", "bits_of", "cvt", "decode",
    "f16_to_f32", "f32_to_bf16", "f32_to_f16", "float22bfloat162_rn", "float22half2_rn", "fma", "fmax",
    "fmin", "mul", "round_exact", "to_float",
]

_LAZY_MMA = ("MODELS", "MmaModel", "mma_m16n8k8", "mma_m16n8k16")
_LAZY_WGMMA = ("wgmma_m64nNk16", "wgmma_m64nNk32")


def __getattr__(name):
    # the mma models need numba; import them on first use so that `import flashsim.numerics` stays light
    if name in _LAZY_MMA:
        from flashsim.numerics import mma

        return getattr(mma, name)
    if name in _LAZY_WGMMA:
        from flashsim.numerics import wgmma

        return getattr(wgmma, name)
    raise AttributeError(f"module 'flashsim.numerics' has no attribute {name!r}")
