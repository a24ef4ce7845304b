"""f32 FFMA / FADD / FMUL / FMNMX as the SM executes them, on uint32 bit patterns.

Exactness argument (no double rounding): f32 operands are exact in float64 and so is an f32
product (48 significant bits). The sum p + c is computed in float64 with round-to-odd (TwoSum
gives the exact error; an even result with a nonzero error moves one ulp toward it). Rounding a
round-to-odd value of >= 24 + 2 bits to f32 with round-to-nearest-even equals rounding the exact
value once (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums", 2008); this also holds
for f32 subnormal results, which float64 represents with 53 bits.

Every semantic here matched an sm_90 GPU on 10 million cases per instruction
(traces/numerics/report.json): canonical NaN results, .ftz flushing subnormal inputs, and flushing results
that are tiny after rounding to 24 bits with an unbounded exponent (not the subnormal-format
rounding), FMNMX ordering -0 below +0.
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics.formats import F32, as_bits, round_exact

_CANON_NAN = np.uint32(F32.canonical_nan)  # FFMA/FADD/FMUL produce 0x7FFFFFFF for every NaN result
_SIGN = np.uint32(0x80000000)
_EXP = np.uint32(0x7F800000)


def _operand(x, name: str, ftz: bool) -> np.ndarray:
    bits = as_bits(x, F32, name)
    if ftz:
        # .ftz: a subnormal operand reads as a zero of the same sign
        bits = np.where((bits & _EXP) == 0, bits & _SIGN, bits)
    return bits.view(np.float32).astype(np.float64)


def _same_shape(**arrays):
    shapes = {n: np.shape(a) for n, a in arrays.items()}
    first = next(iter(shapes.values()))
    for n, s in shapes.items():
        if s != first:
            raise bad_argument(n, s, f"shape differs from the other operands' {first}")


def _round_to_odd_sum(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float64 p + c rounded to odd (exact error from TwoSum; finite sums only are adjusted)."""
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    sbits = s.view(np.uint64)
    fix = np.isfinite(s) & (err != 0) & ((sbits & np.uint64(1)) == 0)
    toward = np.where(err > 0, np.inf, -np.inf)
    return np.where(fix, np.nextafter(s, toward), s)


def _to_f32(r: np.ndarray, ftz: bool) -> np.ndarray:
    out = r.astype(np.float32).view(np.uint32)  # one round-to-nearest-even step
    if ftz:
        # .ftz on the result (measured on sm_90, "ftz_boundary" set): the result is flushed to a zero of
        # its sign when, rounded to 24 bits with an unbounded exponent, it is below 2^-126 (IEEE
        # tininess after rounding). So 2^-126 - 2^-150, which rounds to 2^-126 in the subnormal
        # format, is still flushed; a value just below 2^-126 that 24-bit rounding lifts to 2^-126 is not.
        small = np.abs(r) < 2.0**-125
        scaled = np.where(small, r * 2.0**64, 1.0).astype(np.float32)  # 24-bit RNE, now in normal range
        tiny = small & (np.abs(scaled) < np.float32(2.0**-62))
        out = np.where(tiny, out & _SIGN, out)
    return np.where(np.isnan(r), _CANON_NAN, out).astype(np.uint32)


def _to_f32_directed(r: np.ndarray, mode: str, ftz: bool = False) -> np.ndarray:
    """Round a round-to-odd float64 (>= 26 bits) to f32 with a directed mode; exact by the same theorem.
    ``ftz``: the same tininess rule as round-to-nearest's (the result rounded to 24 bits in the mode with
    an unbounded exponent, flushed to a zero of its sign below 2^-126); measured only inside expf's
    FFMA.FTZ.RM, whose results are never tiny, so the rule is assumed to carry over."""
    if ftz:
        out = _to_f32_directed(r, mode)
        small = np.isfinite(r) & (np.abs(r) < 2.0**-125)
        scaled = _to_f32_directed(np.where(small, r * 2.0**64, 1.0), mode).view(np.float32)
        tiny = small & (np.abs(scaled) < np.float32(2.0**-62))
        return np.where(tiny, out & _SIGN, out).astype(np.uint32)
    finite = np.isfinite(r)
    safe = np.where(finite, r, 0.0)
    m, e = np.frexp(np.abs(safe))
    out = round_exact((safe < 0) | ((safe == 0) & np.signbit(safe)), (m * 2.0**53).astype(np.int64), e - 53, F32, mode)
    out = np.where(np.isinf(r), np.where(r > 0, np.uint32(0x7F800000), np.uint32(0xFF800000)), out)
    return np.where(np.isnan(r), _CANON_NAN, out).astype(np.uint32)


def _saturate(bits: np.ndarray) -> np.ndarray:
    # .sat (FFMA.SAT): clamp to [+0, 1]; NaN and -0 become +0 (PTX ISA, "fma": saturation)
    f = bits.view(np.float32)
    with np.errstate(invalid="ignore"):
        out = np.where(f > 1.0, np.uint32(0x3F800000), bits)
        out = np.where(~(f > 0.0), np.uint32(0), out)
    return out.astype(np.uint32)


def fma(a, b, c, *, ftz: bool = False, rnd: str = "rn", sat: bool = False) -> np.ndarray:
    """``fma.<rnd>{.ftz}{.sat}.f32`` (FFMA): a*b + c rounded once (rn, rz, rm, rp); .sat clamps to [0, 1]."""
    _same_shape(a=a, b=b, c=c)
    if rnd not in ("rn", "rz", "rm", "rp"):
        raise bad_argument("rnd", rnd, "expected 'rn', 'rz', 'rm' or 'rp'")
    with np.errstate(all="ignore"):
        p = _operand(a, "a", ftz) * _operand(b, "b", ftz)  # exact: 24 x 24 bits fit in 53
        z = _operand(c, "c", ftz)
        r = _round_to_odd_sum(p, z)
        if rnd == "rm":
            # IEEE 754: an exact zero sum is -0 under round-toward-negative unless both addends are +0
            # (x - x, +0 + -0); the float64 sum above is round-to-nearest, where it is +0
            both_pos = (p == 0) & (z == 0) & ~np.signbit(p) & ~np.signbit(z)
            r = np.where((r == 0) & np.isfinite(p) & np.isfinite(z) & ~both_pos, -0.0, r)
        out = _to_f32(r, ftz) if rnd == "rn" else _to_f32_directed(r, rnd, ftz)
    return _saturate(out) if sat else out


def add(a, b, *, ftz: bool = False) -> np.ndarray:
    """``add.rn{.ftz}.f32`` (FADD)."""
    _same_shape(a=a, b=b)
    with np.errstate(all="ignore"):
        return _to_f32(_round_to_odd_sum(_operand(a, "a", ftz), _operand(b, "b", ftz)), ftz)


def mul(a, b, *, ftz: bool = False) -> np.ndarray:
    """``mul.rn{.ftz}.f32`` (FMUL): the float64 product is exact, so one cast rounds correctly."""
    _same_shape(a=a, b=b)
    with np.errstate(all="ignore"):
        return _to_f32(_operand(a, "a", ftz) * _operand(b, "b", ftz), ftz)


def _minmax(a, b, ftz: bool, nan: bool, want_max: bool) -> np.ndarray:
    _same_shape(a=a, b=b)
    x = as_bits(a, F32, "a")
    y = as_bits(b, F32, "b")
    if ftz:
        x = np.where((x & _EXP) == 0, x & _SIGN, x)
        y = np.where((y & _EXP) == 0, y & _SIGN, y)
    fx, fy = x.view(np.float32), y.view(np.float32)
    # order -0 below +0: compare (value, sign) so max(-0, +0) = +0 and min(-0, +0) = -0
    with np.errstate(all="ignore"):
        x_wins = (fx > fy) | ((fx == fy) & ((x & _SIGN) == 0))
        if not want_max:
            x_wins = (fx < fy) | ((fx == fy) & ((x & _SIGN) != 0))
    out = np.where(x_wins, x, y)
    nx, ny = np.isnan(fx), np.isnan(fy)
    if nan:
        # max.NaN / min.NaN: any NaN operand gives the canonical NaN
        out = np.where(nx | ny, _CANON_NAN, out)
    else:
        # max / min (fmaxf / fminf): a NaN operand is ignored; two NaNs give the canonical NaN
        out = np.where(nx & ~ny, y, np.where(ny & ~nx, x, out))
        out = np.where(nx & ny, _CANON_NAN, out)
    return out.astype(np.uint32)


def fmax(a, b, *, ftz: bool = False, nan: bool = False) -> np.ndarray:
    """``max{.ftz}{.NaN}.f32`` (FMNMX), what ``fmaxf`` compiles to."""
    return _minmax(a, b, ftz, nan, True)


def fmin(a, b, *, ftz: bool = False, nan: bool = False) -> np.ndarray:
    """``min{.ftz}{.NaN}.f32`` (FMNMX), what ``fminf`` compiles to."""
    return _minmax(a, b, ftz, nan, False)


# The f32 instructions the GPU probes execute: name -> (PTX spelling, operands taken from (a, b, c), model).
# fadd/fmax/fmin take (a, c) so that one operand set also exercises addition with cancellation.
OPS = {
    "ffma_rn": ("fma.rn.f32", "abc", lambda a, b, c: fma(a, b, c)),
    "ffma_rn_ftz": ("fma.rn.ftz.f32", "abc", lambda a, b, c: fma(a, b, c, ftz=True)),
    "fadd_rn": ("add.rn.f32", "ac", lambda a, c: add(a, c)),
    "fadd_rn_ftz": ("add.rn.ftz.f32", "ac", lambda a, c: add(a, c, ftz=True)),
    "fmul_rn": ("mul.rn.f32", "ab", lambda a, b: mul(a, b)),
    "fmul_rn_ftz": ("mul.rn.ftz.f32", "ab", lambda a, b: mul(a, b, ftz=True)),
    "fmax": ("max.f32", "ac", lambda a, c: fmax(a, c)),
    "fmin": ("min.f32", "ac", lambda a, c: fmin(a, c)),
    "fmax_ftz": ("max.ftz.f32", "ac", lambda a, c: fmax(a, c, ftz=True)),
    "fmin_ftz": ("min.ftz.f32", "ac", lambda a, c: fmin(a, c, ftz=True)),
    "fmax_nan": ("max.NaN.f32", "ac", lambda a, c: fmax(a, c, nan=True)),
    "fmin_nan": ("min.NaN.f32", "ac", lambda a, c: fmin(a, c, nan=True)),
}
