"""The tensor-core dot-product rule of mma.sync and its candidate semantics: :class:`MmaModel`, ``MODELS``.

What the hardware computes for one element of D (sm_90, both public models agree):

    d = round( C + sum_k A[i,k] * B[k,j] )   in ONE fused step, with
      - every product of significands exact and not renormalised (it may lie in [2, 4)), its exponent
        the sum of the input exponents (a subnormal reads as 0.f * 2^emin: no flush);
      - E = the largest exponent among the terms (C included);
      - every term truncated toward zero in sign-magnitude to ``frac_bits`` (25) fractional bits
        below 2^E, then summed exactly;
      - one rounding of the exact sum: toward zero for an f32 D, to nearest-even for an f16 D;
        overflow gives +-Inf; NaN in / Inf*0 / Inf-Inf give the canonical NaN.
sm_80 (A100) is the published chained model: 8 products per step with 24 fractional bits, the
rounded result of one step being the C of the next (modelled, not verifiable here).

The edge cases on which the public models differ (do zero terms take part in E, a lower clamp of E,
zero signs) are fields of ``MmaModel``; ``MODELS`` holds the named candidates so the hardware
validation can pick the one the H100 agrees with.

Sources of facts (no code copied):
  - PTX ISA, 9.7.14 "Warp-level matrix multiply-accumulate instructions" (mma): shapes, types, the
    variants that exist (e.g. no bf16 inputs with an f16 accumulator).
  - microsoft/MMA-Sim (Xie et al., arXiv 2511.10909): fractional bits (Volta 23, Ampere 24, Hopper 25),
    split-k of k16 f16/bf16 on Ampere into two halves rounded through D's format, RZ for f32 D, RNE
    for f16 D, canonical NaNs 0x7FFFFFFF / 0x7FFF, a zero operand taking exponent -126.
  - Khattak & Mikaitis, "Accurate Models of NVIDIA Tensor Cores", arXiv 2512.07004 (MATLAB models,
    north-numerical-computing/MATLAB-tensor-core): 2 (H100) / 1 (A100) extra alignment bits over
    binary32's 23, FMA size 16 (H100) / 8 (A100), zero products and a zero C left out of the
    alignment, E clamped below ("min_exp_limit") at -133 / -21 for an f32 / f16 D on H100 and
    -132 / -20 on A100, i.e. emin(D) - 7 and emin(D) - 6.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics.formats import FloatFormat

_ZERO_POLICIES = ("exclude", "exponent_field")
_OVERFLOWS = ("inf", "saturate")
_ZERO_SIGNS = ("+0", "ieee")
_UNDERFLOW_SIGNS = ("keep", "+0")
_ROUNDINGS = ("rz", "rn")


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


@dataclass(frozen=True)
class MmaModel:
    """One candidate semantics of the tensor-core dot product; each field is an open hardware question."""

    name: str
    # alignment width: every term is truncated to a multiple of 2^(E - frac_bits) (sm_90 25, sm_80 24)
    frac_bits: int = 25
    # products fused per step: None = all K in one step (sm_90); 8 = k16 runs as two chained k8 steps
    # whose first result, rounded to D's format with D's rounding, is the C of the second (sm_80)
    products_per_step: int | None = None
    # "exclude": a zero product / zero C does not take part in E;
    # "exponent_field": a zero operand counts with its format's emin (or ``zero_exp``), so a zero
    # product has exponent ea + eb and can raise E and truncate the other terms
    zero_policy: str = "exclude"
    # with "exponent_field": the exponent a zero operand reads as (None = its format's emin;
    # MMA-Sim uses -126 for every format, i.e. zeros live in an 8-bit-exponent internal format)
    zero_exp: int | None = None
    # lower clamp of E relative to D's format: E = max(E, emin(D) + e_floor); None = no clamp
    # (Khattak & Mikaitis: -7 on H100, i.e. -133 for an f32 D and -21 for an f16 D)
    e_floor: int | None = -7
    # |sum| >= 2^(emax+1) of D: "inf" gives +-Inf even under RZ (the device), "saturate" max finite
    overflow: str = "inf"
    # sign of an exact-zero sum: "+0" always, or "ieee" (-0 only when every term is a -0)
    zero_sign: str = "+0"
    # a nonzero sum that rounds to zero: "keep" its sign (-0 for negative), or "+0"
    underflow_sign: str = "keep"
    # the single final rounding of an f32 D ("rz" on the device) and of an f16 D ("rn")
    round_f32: str = "rz"
    round_f16: str = "rn"
    # where the semantics come from and whether it was checked on hardware
    provenance: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise bad_argument("name", self.name, "must be a non-empty string")
        if not _is_int(self.frac_bits) or not 1 <= self.frac_bits <= 40:
            raise bad_argument("frac_bits", self.frac_bits, "must be an int in [1, 40] (the int64 sum needs headroom)")
        if self.products_per_step is not None and (not _is_int(self.products_per_step) or self.products_per_step < 1):
            raise bad_argument("products_per_step", self.products_per_step, "must be None or a positive int")
        if self.zero_policy not in _ZERO_POLICIES:
            raise bad_argument("zero_policy", self.zero_policy, f"expected one of {_ZERO_POLICIES}")
        if self.zero_exp is not None:
            if not _is_int(self.zero_exp) or not -300 <= self.zero_exp <= 0:
                raise bad_argument("zero_exp", self.zero_exp, "must be None or an int in [-300, 0]")
            if self.zero_policy != "exponent_field":
                raise bad_argument("zero_exp", self.zero_exp, "only meaningful with zero_policy='exponent_field'")
        if self.e_floor is not None and (not _is_int(self.e_floor) or not -200 <= self.e_floor <= 200):
            raise bad_argument("e_floor", self.e_floor, "must be None or an int in [-200, 200] (relative to emin of D)")
        if self.overflow not in _OVERFLOWS:
            raise bad_argument("overflow", self.overflow, f"expected one of {_OVERFLOWS}")
        if self.zero_sign not in _ZERO_SIGNS:
            raise bad_argument("zero_sign", self.zero_sign, f"expected one of {_ZERO_SIGNS}")
        if self.underflow_sign not in _UNDERFLOW_SIGNS:
            raise bad_argument("underflow_sign", self.underflow_sign, f"expected one of {_UNDERFLOW_SIGNS}")
        if self.round_f32 not in _ROUNDINGS:
            raise bad_argument("round_f32", self.round_f32, f"expected one of {_ROUNDINGS}")
        if self.round_f16 not in _ROUNDINGS:
            raise bad_argument("round_f16", self.round_f16, f"expected one of {_ROUNDINGS}")
        if not isinstance(self.provenance, str):
            raise bad_argument("provenance", self.provenance, "must be a string")


_UNVERIFIED = "not checked on hardware"
_SM90_MEASURED = ("measured on sm_90 (NVIDIA H200, driver 580.159.04): bit-exact on every validation case, "
                  "see traces/numerics/report.json")

MODELS = types.MappingProxyType({
    # sm_90 as the device computes it (settled with directed tests, gpu/cases.py):
    #  - zero products and a zero C are left out of E (the "zero_product"/"zero_c" sets reject the
    #    alternatives); - E is clamped below at emin(D) - 7 (-133 for an f32 D: "below_floor" and
    #    "floor_sweep" reject -8 and -6 and no clamp); - a nonzero sum that rounds to zero gives +0
    #    (the device never returned -0 from a nonzero sum); - an exact zero sum gives +0 even when
    #    every term is -0; - overflow gives +-Inf even under RZ.
    "sm_90": MmaModel("sm_90", underflow_sign="+0", provenance=_SM90_MEASURED),
    # alternatives kept for comparison; each disagrees with the device on some validation set
    "sm_90_mmasim": MmaModel("sm_90_mmasim", zero_policy="exponent_field", zero_exp=-126, e_floor=None,
                             underflow_sign="+0", provenance="MMA-Sim's Hopper edge cases; rejected by the device"),
    "sm_90_plain": MmaModel("sm_90_plain", e_floor=None,
                            provenance="zeros excluded, no clamp, IEEE underflow sign; rejected by the device"),
    # A100: two chained steps of 8 products (k16), 24 fractional bits
    "sm_80": MmaModel("sm_80", frac_bits=24, products_per_step=8, e_floor=-6, underflow_sign="+0",
                      provenance="published model (MMA-Sim, Khattak & Mikaitis A100), unverified: no sm_80 GPU"),
    "sm_80_mmasim": MmaModel("sm_80_mmasim", frac_bits=24, products_per_step=8, zero_policy="exponent_field",
                             zero_exp=-126, e_floor=None, underflow_sign="+0",
                             provenance="published model (MMA-Sim Ampere), unverified: no sm_80 GPU"),
})


_EXCLUDED = -(1 << 40)  # E-exponent of a term left out of E: far below every real exponent, no overflow


def _zero_e(fmt: FloatFormat, model: MmaModel) -> int:
    """The exponent a zero operand contributes to E under ``model`` (``_EXCLUDED`` when it does not)."""
    if model.zero_policy == "exclude":
        return _EXCLUDED
    return fmt.emin if model.zero_exp is None else model.zero_exp
