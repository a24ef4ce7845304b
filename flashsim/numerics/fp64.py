"""binary64 (double) arithmetic as sm_90's D* instructions execute it, on uint64 bit patterns.

DADD / DMUL / DFMA are IEEE 754 binary64 operations, correctly rounded in the instruction's mode (rn, rz,
rm, rp), with subnormal operands and results kept (the PTX ISA: add/mul/fma .f64 support subnormal
numbers; there is no .ftz for .f64). Round to nearest add and mul are numpy's float64 add and mul (IEEE
binary64, round to nearest even). Everything else, fma and the directed modes, is computed exactly by
:func:`fma`'s integer kernel: the 106-bit product a*b and c aligned in a 128-bit window, a far smaller term
folded into a sticky bit (it lies at least 70 bits below the rounding position, so the jammed value rounds
as the exact one does in every mode), then one rounding to 53 bits with the binary64 subnormal floor.
``add(a, b) = fma(a, 1, b)`` and ``mul(a, b) = fma(a, b, z)`` with z the zero that adds nothing (-0, or +0
under rm) are exact identities, so one rounding kernel serves all three; tests/test_fp64.py checks every
mode against exact rational arithmetic.

NaN results here follow :data:`NAN_RULE` (a NaN operand passes through quieted, the first in argument order;
an invalid operation gives 0xFFF8000000000000). The H200 orders the operands otherwise and does not apply a
'-' or '|x|' modifier to a NaN (``probe_dnan`` of gpu/double_probes.py): the SASS interpreter applies
:func:`nan_result` to the operands as the registers hold them, in the H200's per-opcode order
(flashsim.sass.ops_double.nan_result), so only the non-NaN results come from the arithmetic here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics.formats import F32, F64, requantize

__all__ = ["CANDIDATE_RULES", "F64", "MODES", "NAN_RULE", "NanRule", "add", "fma", "from_f32", "mul",
           "nan_result", "pick_max", "pick_min", "quiet", "round_integral", "to_f32", "values"]

MODES = {"rn": 0, "rz": 1, "rm": 2, "rp": 3}

SIGN = np.uint64(1 << 63)
EXP = np.uint64(0x7FF0000000000000)
MANT = np.uint64((1 << 52) - 1)
QUIET = np.uint64(1 << 51)


@dataclass(frozen=True)
class NanRule:
    """How a binary64 instruction builds a NaN result. ``propagate``: a NaN operand passes through quieted
    (bit 51 set, payload and sign kept), the first NaN operand in SASS operand order; otherwise every NaN
    result is ``default``. ``default``: the NaN of an invalid operation (and of every NaN result when not
    propagating)."""

    propagate: bool
    default: int


#: THE rule of every binary64 NaN result in the interpreter (DADD, DMUL, DFMA, FRND.F64, F2F.F64.F32).
#: To be measured on the GPU: ``python -m flashsim.gpu.double_probes`` reports which candidate it follows.
NAN_RULE = NanRule(propagate=True, default=0xFFF8000000000000)

#: the rules the GPU record is checked against (gpu/double_probes.py's NaN census)
CANDIDATE_RULES = {
    "propagate, default 0xFFF8000000000000": NanRule(True, 0xFFF8000000000000),
    "propagate, default 0x7FF8000000000000": NanRule(True, 0x7FF8000000000000),
    "propagate, default 0x7FFFFFFFFFFFFFFF": NanRule(True, 0x7FFFFFFFFFFFFFFF),
    "canonical 0x7FFFFFFFFFFFFFFF": NanRule(False, 0x7FFFFFFFFFFFFFFF),
    "canonical 0xFFF8000000000000": NanRule(False, 0xFFF8000000000000),
    "canonical 0x7FF8000000000000": NanRule(False, 0x7FF8000000000000),
}


def _mode(rnd: str) -> int:
    try:
        return MODES[rnd]
    except (KeyError, TypeError):
        raise bad_argument("rnd", rnd, "expected 'rn', 'rz', 'rm' or 'rp'") from None


def _bits(*xs):
    arrs = [np.asarray(x, np.uint64) for x in xs]
    shape = np.broadcast_shapes(*(a.shape for a in arrs))
    return [np.array(np.broadcast_to(a, shape)) for a in arrs], shape  # copies, contiguous, 0-d kept


def values(bits) -> np.ndarray:
    """binary64 bit patterns viewed as float64 (no conversion)."""
    return np.asarray(bits, np.uint64).view(np.float64)


def is_nan(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint64) & ~SIGN) > EXP


def quiet(bits) -> np.ndarray:
    """A NaN with its quiet bit (bit 51) set: a signalling NaN becomes quiet, payload and sign kept."""
    return np.asarray(bits, np.uint64) | QUIET


def nan_result(*operands, rule: NanRule | None = None) -> np.ndarray:
    """The NaN a binary64 instruction returns for these operands (bit patterns, broadcast): the first NaN
    operand quieted when ``rule.propagate``, else (and when no operand is a NaN) ``rule.default``."""
    rule = NAN_RULE if rule is None else rule
    ops, shape = _bits(*operands)
    out = np.full(shape, np.uint64(rule.default), np.uint64)
    if rule.propagate:
        for x in reversed(ops):
            out = np.where(is_nan(x), quiet(x), out)
    return out


# ------------------------------------------------------------------------------------------ exact kernel
# 128-bit unsigned integers as (hi, lo) uint64 pairs; every shift amount is kept inside [0, 63] (LLVM leaves
# wider shifts undefined).

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_M32 = np.uint64(0xFFFFFFFF)
_IMPLICIT = np.uint64(1 << 52)
_INF = np.uint64(0x7FF0000000000000)
_MAXF = np.uint64(0x7FEFFFFFFFFFFFFF)


@numba.njit(cache=True, nogil=True)
def _bitlen(x):
    n = 0
    if x == _U0:
        return n
    n = 1
    if (x >> np.uint64(32)) != _U0:
        n += 32
        x >>= np.uint64(32)
    if (x >> np.uint64(16)) != _U0:
        n += 16
        x >>= np.uint64(16)
    if (x >> np.uint64(8)) != _U0:
        n += 8
        x >>= np.uint64(8)
    if (x >> np.uint64(4)) != _U0:
        n += 4
        x >>= np.uint64(4)
    if (x >> np.uint64(2)) != _U0:
        n += 2
        x >>= np.uint64(2)
    if (x >> np.uint64(1)) != _U0:
        n += 1
    return n


@numba.njit(cache=True, nogil=True)
def _mul128(a, b):
    """The 128-bit product of two uint64 values as (hi, lo)."""
    a0, a1 = a & _M32, a >> np.uint64(32)
    b0, b1 = b & _M32, b >> np.uint64(32)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> np.uint64(32)) + (p01 & _M32) + (p10 & _M32)
    lo = (p00 & _M32) | (mid << np.uint64(32))
    hi = p11 + (p01 >> np.uint64(32)) + (p10 >> np.uint64(32)) + (mid >> np.uint64(32))
    return hi, lo


@numba.njit(cache=True, nogil=True)
def _shl(hi, lo, s):
    """(hi, lo) << s for 0 <= s < 128 (bits above 127 are dropped)."""
    if s == 0:
        return hi, lo
    if s >= 64:
        return lo << np.uint64(s - 64), _U0
    return (hi << np.uint64(s)) | (lo >> np.uint64(64 - s)), lo << np.uint64(s)


@numba.njit(cache=True, nogil=True)
def _shr(hi, lo, s):
    """(hi, lo) >> s for s >= 0 (0 from s = 128 on)."""
    if s <= 0:
        return hi, lo
    if s >= 128:
        return _U0, _U0
    if s >= 64:
        return _U0, hi >> np.uint64(s - 64)
    return hi >> np.uint64(s), (lo >> np.uint64(s)) | (hi << np.uint64(64 - s))


@numba.njit(cache=True, nogil=True)
def _low_nonzero(hi, lo, n):
    """Is any of bits 0 .. n-1 of (hi, lo) set?"""
    if n <= 0:
        return False
    if n >= 128:
        return (hi | lo) != _U0
    if n > 64:
        return lo != _U0 or (hi & ((_U1 << np.uint64(n - 64)) - _U1)) != _U0
    if n == 64:
        return lo != _U0
    return (lo & ((_U1 << np.uint64(n)) - _U1)) != _U0


@numba.njit(cache=True, nogil=True)
def _shr_jam(hi, lo, s):
    """(hi, lo) >> s with every bit shifted out ORed into bit 0 (a sticky bit)."""
    h, l = _shr(hi, lo, s)
    if _low_nonzero(hi, lo, s):
        l |= _U1
    return h, l


@numba.njit(cache=True, nogil=True)
def _overflow(sign, mode):
    if mode == 0:
        v = _INF
    elif mode == 1:
        v = _MAXF
    elif mode == 2:
        v = _INF if sign else _MAXF
    else:
        v = _MAXF if sign else _INF
    return v | (np.uint64(sign) << np.uint64(63))


@numba.njit(cache=True, nogil=True)
def _round(sign, hi, lo, e, mode):
    """The binary64 bits of (-1)^sign * (hi * 2^64 + lo) * 2^e, nonzero, rounded once in ``mode``
    (0 rn, 1 rz, 2 rm, 3 rp), with subnormal results and IEEE overflow."""
    t = 63 + _bitlen(hi) if hi != _U0 else _bitlen(lo) - 1
    q = e + t - 52  # the quantum of a normal result: 53 bits from the top one
    if q < -1074:
        q = -1074  # the subnormal floor
    shift = q - e
    guard = False
    rest = False
    if shift <= 0:
        kept = lo << np.uint64(-shift)  # exact: at most 53 bits (then hi is 0)
    else:
        kept = _shr(hi, lo, shift)[1]
        guard = (_shr(hi, lo, shift - 1)[1] & _U1) != _U0
        rest = _low_nonzero(hi, lo, shift - 1)
    if mode == 0:
        up = guard and (rest or (kept & _U1) != _U0)
    elif mode == 1:
        up = False
    elif mode == 2:
        up = (guard or rest) and sign == 1
    else:
        up = (guard or rest) and sign == 0
    if up:
        kept += _U1
    field = q + 1074
    if field > 2046:
        return _overflow(sign, mode)
    # [sign | exponent field | fraction]: value = kept * 2^q, kept < 2^53; the sum below also covers
    # subnormals (kept < 2^52, q = -1074) and the carry of a full significand (kept = 2^53)
    body = (np.uint64(field) << np.uint64(52)) + kept
    if body >= _INF:
        return _overflow(sign, mode)
    return body | (np.uint64(sign) << np.uint64(63))


@numba.njit(cache=True, nogil=True)
def _unpack(x):
    """(sign, exponent, significand, class) with value = sig * 2^exp; the significand of a finite nonzero
    value normalised to [2^52, 2^53); class 0 zero, 1 finite, 2 inf, 3 NaN."""
    s = np.int64(x >> np.uint64(63))
    ef = np.int64((x >> np.uint64(52)) & np.uint64(0x7FF))
    m = x & np.uint64((1 << 52) - 1)
    if ef == 0x7FF:
        return s, np.int64(0), m, 3 if m != _U0 else 2
    if ef == 0:
        if m == _U0:
            return s, np.int64(0), m, 0
        n = 53 - _bitlen(m)
        return s, np.int64(-1074 - n), m << np.uint64(n), 1
    return s, ef - 1075, m | _IMPLICIT, 1


@numba.njit(cache=True, nogil=True)
def _fma1(a, b, c, mode, propagate, default):
    sa, ea, ma, ka = _unpack(a)
    sb, eb, mb, kb = _unpack(b)
    sc, ec, mc, kc = _unpack(c)
    if ka == 3 or kb == 3 or kc == 3:
        if not propagate:
            return default
        if ka == 3:
            return a | np.uint64(1 << 51)
        if kb == 3:
            return b | np.uint64(1 << 51)
        return c | np.uint64(1 << 51)
    sp = sa ^ sb
    if ka == 2 or kb == 2:
        if ka == 0 or kb == 0:
            return default  # 0 * inf
        if kc == 2 and sc != sp:
            return default  # inf - inf
        return _INF | (np.uint64(sp) << np.uint64(63))
    if kc == 2:
        return c
    if ka == 0 or kb == 0:
        if kc != 0:
            return c  # c + (+-0) is c exactly
        if sp == sc:
            return np.uint64(sp) << np.uint64(63)
        return np.uint64(1 << 63) if mode == 2 else _U0  # +0 + -0: -0 only rounding toward -inf
    ph, pl = _mul128(ma, mb)  # in [2^104, 2^106)
    ep = ea + eb
    if kc == 0:
        return _round(sp, ph, pl, ep, mode)  # a nonzero product keeps its sign, also when it rounds to 0
    # the window: the product's top bit at 124 or 125, c's at 124; the smaller-scaled term shifts right
    ph, pl = _shl(ph, pl, 20)
    ep -= 20
    ch, cl = _shl(_U0, mc, 72)
    ec -= 72
    d = ep - ec
    if d > 0:
        ch, cl = _shr_jam(ch, cl, d)  # exact up to d = 72; beyond, c < 2^53 against a product >= 2^124
        e = ep
    elif d < 0:
        ph, pl = _shr_jam(ph, pl, -d)  # exact up to -d = 20; beyond, the product < 2^105 against c >= 2^124
        e = ec
    else:
        e = ep
    if sp == sc:
        lo = pl + cl
        hi = ph + ch + (_U1 if lo < pl else _U0)
        s = sp
    else:
        if ph > ch or (ph == ch and pl >= cl):
            lo = pl - cl
            hi = ph - ch - (_U1 if pl < cl else _U0)
            s = sp
        else:
            lo = cl - pl
            hi = ch - ph - (_U1 if cl < pl else _U0)
            s = sc
        if hi == _U0 and lo == _U0:  # exact cancellation: +0, -0 rounding toward -inf
            return np.uint64(1 << 63) if mode == 2 else _U0
    return _round(s, hi, lo, e, mode)


@numba.njit(cache=True, nogil=True)
def _fma_loop(a, b, c, mode, propagate, default, out):
    for i in range(a.size):
        out[i] = _fma1(a[i], b[i], c[i], mode, propagate, default)


def _run(a, b, c, rnd, rule):
    rule = NAN_RULE if rule is None else rule
    (a, b, c), shape = _bits(a, b, c)
    out = np.empty(shape, np.uint64)
    _fma_loop(a.ravel(), b.ravel(), c.ravel(), _mode(rnd), bool(rule.propagate), np.uint64(rule.default),
              out.reshape(-1))
    return out


# ------------------------------------------------------------------------------------------ instructions
ONE = np.uint64(0x3FF0000000000000)


def fma(a, b, c, rnd: str = "rn", *, nan_rule: NanRule | None = None) -> np.ndarray:
    """``fma.<rnd>.f64`` (DFMA): a*b + c rounded once."""
    return _run(a, b, c, rnd, nan_rule)


def add(a, b, rnd: str = "rn", *, nan_rule: NanRule | None = None) -> np.ndarray:
    """``add.<rnd>.f64`` (DADD): rn is numpy's float64 sum; the directed modes are a*1 + b rounded once."""
    if _mode(rnd) == 0:
        (a, b), _ = _bits(a, b)
        with np.errstate(all="ignore"):
            r = (a.view(np.float64) + b.view(np.float64)).view(np.uint64)
        return np.where(is_nan(r), nan_result(a, b, rule=nan_rule), r)
    return _run(a, ONE, b, rnd, nan_rule)


def mul(a, b, rnd: str = "rn", *, nan_rule: NanRule | None = None) -> np.ndarray:
    """``mul.<rnd>.f64`` (DMUL): rn is numpy's float64 product; the directed modes are a*b + z rounded once,
    z the zero that leaves every product as it is (-0; +0 under rm, where +0 + -0 = -0)."""
    if _mode(rnd) == 0:
        (a, b), _ = _bits(a, b)
        with np.errstate(all="ignore"):
            r = (a.view(np.float64) * b.view(np.float64)).view(np.uint64)
        return np.where(is_nan(r), nan_result(a, b, rule=nan_rule), r)
    z = np.uint64(0) if rnd == "rm" else SIGN
    return _run(a, b, z, rnd, nan_rule)


_INTEGRAL = {"rn": np.rint, "rz": np.trunc, "rm": np.floor, "rp": np.ceil}


def round_integral(x, rnd: str = "rn", *, nan_rule: NanRule | None = None) -> np.ndarray:
    """``cvt.rni/rzi/rmi/rpi.f64.f64`` (FRND.F64): x rounded to an integral value (ties to even for rn);
    exact in float64, zeros keep their sign (ceil(-0.5) = -0)."""
    _mode(rnd)
    (x,), _ = _bits(x)
    with np.errstate(invalid="ignore"):
        r = _INTEGRAL[rnd](x.view(np.float64)).view(np.uint64)
    return np.where(is_nan(x), nan_result(x, rule=nan_rule), r)


def from_f32(bits32, *, nan_rule: NanRule | None = None) -> np.ndarray:
    """``cvt.f64.f32`` (F2F.F64.F32): exact, subnormals kept. A NaN keeps its sign and payload (the f32
    fraction in the top of the f64 fraction, quieted) when the rule propagates."""
    rule = NAN_RULE if nan_rule is None else nan_rule
    b = np.asarray(bits32, np.uint32)
    with np.errstate(invalid="ignore"):
        out = b.view(np.float32).astype(np.float64).view(np.uint64)
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    wide = (b.astype(np.uint64) & np.uint64(0x80000000)) << np.uint64(32) | EXP | QUIET | \
        ((b.astype(np.uint64) & np.uint64(0x7FFFFF)) << np.uint64(29))
    return np.where(nan, wide if rule.propagate else np.uint64(rule.default), out).astype(np.uint64)


def to_f32(bits, rnd: str = "rn") -> np.ndarray:
    """``cvt.<rnd>.f32.f64`` (F2F.F32.F64): IEEE rounding to binary32, subnormal results kept, overflow per
    the mode; a NaN keeps its sign and the top 22 bits of its payload, quieted (probe_d2f on the H200,
    traces/double, 2026-12-02: 0x7FF4000000000000 gives 0x7FE00000, not the canonical NaN)."""
    _mode(rnd)
    b = np.asarray(bits, np.uint64)
    out = np.asarray(requantize(b, F64, F32, rnd), np.uint32)
    nan = is_nan(b)
    if np.any(nan):
        kept = (((b >> np.uint64(32)) & np.uint64(0x80000000)) | np.uint64(0x7FC00000)
                | ((b >> np.uint64(29)) & np.uint64(0x007FFFFF))).astype(np.uint32)
        out = np.where(nan, kept, out).astype(np.uint32)
    return out


def _ordered(x, y):
    fx, fy = values(x), values(y)
    with np.errstate(invalid="ignore"):
        return fx, fy, np.isnan(fx), np.isnan(fy)


def pick_min(a, b):
    """DSETP.MIN's two predicates for min.f64 a, b: (take a, both NaN). ptxas selects a where the first
    holds, else b, and quiets b's NaN where the second does. -0 orders below +0 (as FMNMX does: to be
    measured for doubles); one NaN operand is ignored."""
    (a, b), _ = _bits(a, b)
    fa, fb, na, nb = _ordered(a, b)
    with np.errstate(invalid="ignore"):
        take = (fa < fb) | ((fa == fb) & ((a & SIGN) != 0) & ((b & SIGN) == 0)) | (nb & ~na)
    return take, na & nb


def pick_max(a, b):
    """DSETP.MAX's two predicates for max.f64 a, b: (take a, both NaN); +0 orders above -0."""
    (a, b), _ = _bits(a, b)
    fa, fb, na, nb = _ordered(a, b)
    with np.errstate(invalid="ignore"):
        take = (fa > fb) | ((fa == fb) & ((a & SIGN) == 0) & ((b & SIGN) != 0)) | (nb & ~na)
    return take, na & nb
