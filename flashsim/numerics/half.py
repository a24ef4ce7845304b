"""Packed 16-bit arithmetic (HFMA2 / HADD2 / HMUL2 and their .BF16_V2 forms): ``fma.rn{.ftz}{.sat}
{.relu}.{f16,bf16}`` on each half, on 16-bit patterns (PTX ISA, "Half Precision Floating Point
Instructions": fma, add, mul).

Each half is one fused operation rounded once: f16/bf16 operands are exact in float64, their product
is exact (22 / 16 significand bits), the sum is formed in float64 rounded to odd (>= 26 bits, so a
single final rounding to 11 / 8 bits is correct) and rounded with the instruction's mode. Subnormals are
kept unless .ftz; a NaN result is 0x7FFF (the PTX ISA leaves it unspecified). ``add`` is ``fma(a, 1, b)``
and ``mul`` is ``fma(a, b, -0)``: one rounding each, exactly as the separate operations.
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics.formats import BF16, F16, FloatFormat, decode, round_exact
from flashsim.numerics.fp32 import _round_to_odd_sum

__all__ = ["CANONICAL_NAN", "fma", "add", "mul", "fma_x2", "to_bits"]

CANONICAL_NAN = np.uint16(0x7FFF)
_FMTS = {"f16": F16, "bf16": BF16}


def _fmt(name: str) -> FloatFormat:
    if name not in _FMTS:
        raise bad_argument("fmt", name, "expected 'f16' or 'bf16'")
    return _FMTS[name]


def _round(r: np.ndarray, fmt: FloatFormat, mode: str, ftz: bool) -> np.ndarray:
    finite = np.isfinite(r)
    safe = np.where(finite, r, 0.0)
    m, e = np.frexp(np.abs(safe))
    neg = (safe < 0) | ((safe == 0) & np.signbit(safe))
    out = np.asarray(round_exact(neg, (m * 2.0**53).astype(np.int64), e - 53, fmt, mode), np.uint16)
    sign = np.uint16(1 << 15)
    out = np.where(np.isinf(r), np.where(r > 0, np.uint16(fmt.inf), np.uint16(fmt.inf) | sign), out)
    if ftz:  # flush results below the smallest normal to a zero of their sign
        exp_mask = np.uint16(((1 << fmt.ebits) - 1) << fmt.mbits)
        out = np.where(((out & exp_mask) == 0) & finite, out & sign, out)
    return np.where(np.isnan(r), CANONICAL_NAN, out).astype(np.uint16)


def fma(a, b, c, *, fmt: str = "f16", rnd: str = "rn", ftz: bool = False, sat: bool = False,
        relu: bool = False) -> np.ndarray:
    """One half: ``fma.<rnd>{.ftz}{.sat}{.relu}.<fmt>`` on uint16 bit patterns."""
    f = _fmt(fmt)
    va, vb, vc = (to_value(x, f, ftz) for x in (a, b, c))
    with np.errstate(all="ignore"):
        r = _round_to_odd_sum(va * vb, vc)
    out = _round(r, f, rnd, ftz)
    if sat:  # clamp to [0, 1]; NaN -> +0
        v = to_value(out, f, False)
        one = np.uint16(0x3C00 if fmt == "f16" else 0x3F80)
        out = np.where(v > 1.0, one, np.where(~(v > 0.0), np.uint16(0), out)).astype(np.uint16)
    if relu:  # negative results become +0; a NaN result is the canonical NaN (PTX ISA, fma: ".relu clamps the
        # result to 0 if negative. NaN result is converted to canonical NaN"); -0 is kept (unmeasured)
        v = to_value(out, f, False)
        out = np.where(v < 0, np.uint16(0), out).astype(np.uint16)
    return out


def to_value(bits, fmt: FloatFormat, ftz: bool = False) -> np.ndarray:
    """16-bit patterns as exact float64 values (subnormals flushed to signed zero with ``ftz``)."""
    b = np.asarray(bits).astype(np.int64)
    mb, eb = fmt.mbits, fmt.ebits
    sign = np.where((b >> (mb + eb)) & 1, -1.0, 1.0)
    e = (b >> mb) & ((1 << eb) - 1)
    man = (b & ((1 << mb) - 1)).astype(np.float64)
    bias = (1 << (eb - 1)) - 1
    normal = np.ldexp(1.0 + man / (1 << mb), (e - bias).astype(np.int64))
    sub = np.ldexp(man / (1 << mb), 1 - bias)
    val = np.where(e == 0, 0.0 if ftz else sub, normal)
    top = (1 << eb) - 1
    val = np.where(e == top, np.where(man == 0, np.inf, np.nan), val)
    return sign * val


def add(a, b, *, fmt: str = "f16", rnd: str = "rn", ftz: bool = False, sat: bool = False) -> np.ndarray:
    one = np.full(np.shape(a), 0x3C00 if fmt == "f16" else 0x3F80, np.uint16)
    return fma(a, one, b, fmt=fmt, rnd=rnd, ftz=ftz, sat=sat)


def mul(a, b, *, fmt: str = "f16", rnd: str = "rn", ftz: bool = False, sat: bool = False) -> np.ndarray:
    mzero = np.full(np.broadcast(a, b).shape, 0x8000, np.uint16)
    return fma(a, b, mzero, fmt=fmt, rnd=rnd, ftz=ftz, sat=sat)


def fma_x2(a, b, c, **kw) -> np.ndarray:
    """Both halves of 32-bit registers (uint32 arrays): ``fma.rn.{f16x2,bf16x2}``."""
    a, b, c = (np.asarray(x, np.uint32) for x in (a, b, c))
    lo = fma(a & 0xFFFF, b & 0xFFFF, c & 0xFFFF, **kw).astype(np.uint32)
    hi = fma(a >> 16, b >> 16, c >> 16, **kw).astype(np.uint32)
    return (hi << np.uint32(16)) | lo


def to_bits(value: float, fmt: str = "f16") -> int:
    """The pattern of a decimal value exactly representable in ``fmt`` (nvdisasm's immediates)."""
    f = _fmt(fmt)
    r = np.array([float(value)])
    out = int(_round(r, f, "rn", False)[0])
    if not np.isnan(value) and to_value(np.array([out]), f)[0] != float(value):
        raise ValueError(f"{value!r} is not exactly representable in {fmt}")
    return out
