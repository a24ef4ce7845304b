"""Probes of double precision: gpu/kernels/probe_double.cu built as gpu/form_probes.py builds its own file (NVRTC
13.0; NVRTC's PTX through ptxas 13.0, and through Triton's ptxas 12.8), run on the GPU and in the interpreter
from the same cubin bytes, every output bit compared, and against exact references.

The probe table uses gpu/sass_probes.py's :class:`Probe` / :func:`make_case` / :func:`compare` and
gpu/form_probes.py's builds and runners. Inputs are binary64 bit patterns drawn toward what IEEE 754 makes
hard: signed zeros, subnormals, the smallest normal, the largest finite value, infinities, quiet and
signalling NaNs with payloads, sums and products that land exactly on a rounding boundary or halfway
between two doubles, exact cancellation, huge and tiny exponent differences, fma addends that cancel the
rounded product, integer boundaries of every conversion (+-2^31, 2^32, 2^63, 2^64, halves) and the f32
boundaries (the subnormal range, 2^-126, overflow). The references are exact rational arithmetic
(``fractions.Fraction``, independent of flashsim.numerics) of what C and the PTX ISA define; NaN payloads,
fmin/fmax of zeros of both signs and the window where cvt.ftz's flush is the implementation's are left to
the GPU (the ``defined`` mask).

``probe_dnan`` measured the NaN rule: the record's ``nan_census`` counts, per output, how many of the GPU's
NaNs each candidate rule reproduces; the interpreter's rule (flashsim.sass.ops_double.nan_result: the first
NaN operand in a per-opcode order, quieted, modifiers not applied; 0xFFF8000000000000 for an invalid
operation) reproduces every one. ``probe_ddiv`` and ``probe_dsqrt`` (a / b, sqrt) run MUFU.RCP64H /
MUFU.RSQ64H, modelled from gpu/validate_sfu64.py's sweep.

``python -m flashsim.gpu.double_probes --out DIR`` writes ``double_probes.npz`` / ``.json``; recorded into the
repository's ``double`` trace folder (:data:`TRACE`), tests/test_double_probes.py replays them.
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from math import isqrt
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim.gpu import form_probes as fp
from flashsim.gpu import sass_probes as sp
from flashsim.gpu.sass_probes import I, O, P, Probe

__all__ = ["BUILDS", "KERNEL_FILE", "PROBES", "TRACE", "case_strategy", "main", "nan_census", "probe", "record",
           "replay", "run_gpu", "run_interp"]

KERNEL_FILE = "probe_double.cu"
TRACE = Path(__file__).resolve().parent.parent / "traces" / "double" / "double_probes.npz"
BUILDS = fp.BUILDS
M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
SIGN = 1 << 63
INF = 0x7FF0000000000000
MAXF = 0x7FEFFFFFFFFFFFFF


def _b(x: float) -> int:
    return int(np.array(x, np.float64).view(np.uint64))


# ================================================================================================ inputs
_SPECIAL_VALUES = (0.0, 5e-324, 2.0**-1022 - 5e-324, 2.0**-1022, 2.0**-1023, 2.0**-1022 + 5e-324, 1.0,
                   1.0 + 2.0**-52, 1.0 - 2.0**-53, 2.0, 0.5, 1.5, 2.5, 3.0, 0.1, 2.0**1023,
                   float(np.finfo(np.float64).max), 2.0**31, 2.0**32, 2.0**63, 2.0**64, 2.0**53, 2.0**52,
                   2.0**-53, 2.0**-52, 2.0**-126, 2.0**-149, 2.0**-150, float(np.finfo(np.float32).max),
                   2.0**128 - 2.0**103, 2.0**128, float("inf"))
_NANS = (0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF4000000000000, 0x7FF8000000000123,
         0xFFF0000000000BAD, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 0x7FF7FFFFFFFFFFFF, 0x7FFC000000000000)
F64_SPECIALS = tuple(sorted({v for x in _SPECIAL_VALUES for v in (_b(x), _b(x) | SIGN)} | set(_NANS)))


def _pick(rng, values, size):
    return np.asarray(values, np.uint64)[rng.integers(0, len(values), size)]


def _sign(rng, size):
    return rng.integers(0, 2, size).astype(np.uint64) << np.uint64(63)


def _field(rng, lo, hi, size):
    return rng.integers(lo, hi + 1, size).astype(np.uint64) << np.uint64(52)


def _mant(rng, size):
    return rng.integers(0, 1 << 52, size, dtype=np.uint64)


def _f64_np(rng, size):
    r = rng.random(size)
    s = _sign(rng, size)
    spec = _pick(rng, F64_SPECIALS, size)
    sub = s | rng.integers(1, 1 << 52, size, dtype=np.uint64)
    mid = s | _field(rng, 1023 - 40, 1023 + 40, size) | _mant(rng, size)  # |x| in 2^-40 .. 2^41
    short = s | _field(rng, 1023 - 10, 1023 + 30, size) | (_mant(rng, size) & np.uint64(0xFF00000000000))  # 9 bits
    normal = s | _field(rng, 1, 2046, size) | _mant(rng, size)
    anyb = rng.integers(0, 1 << 63, size, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, size).astype(np.uint64)
    return np.where(r < 0.22, spec, np.where(r < 0.32, sub, np.where(r < 0.6, mid, np.where(
        r < 0.72, short, np.where(r < 0.9, normal, anyb))))).astype(np.uint64)


_CVT_BASES = (2.0**31, 2.0**32, 2.0**63, 2.0**64, 2.0**53, 2.0**52, 2.0**24, 1.0, 0.5, 1.5, 2.5, 3.5,
              2147483647.5, 4294967295.5, 2.0**31 - 1, 2.0**62, 1e-300, 0.49999999999999994)


def _f64cvt_np(rng, size):
    """Doubles at the integer boundaries of the conversions: +-2^31, 2^32, 2^63, 2^64 and their neighbours,
    halves (ties of rni), integers scaled by 2^-k, and the f32 boundaries (_f64f32_np)."""
    r = rng.random(size)
    base = np.asarray(_CVT_BASES, np.float64)[rng.integers(0, len(_CVT_BASES), size)]
    near = (base * np.where(rng.integers(0, 2, size) == 1, -1.0, 1.0)).view(np.uint64).astype(np.int64) + \
        rng.integers(-3, 4, size)
    ints = rng.integers(-(1 << 62), 1 << 62, size).astype(np.float64) / np.exp2(rng.integers(0, 64, size))
    halves = rng.integers(-80, 81, size).astype(np.float64) * 0.5 + rng.choice([0.0, 0.25, -0.25, 1e-9, -1e-9], size)
    out = np.where(r < 0.3, near.view(np.uint64), np.where(r < 0.45, ints.view(np.uint64), np.where(
        r < 0.6, halves.view(np.uint64), np.where(r < 0.8, _f64f32_np(rng, size), _f64_np(rng, size)))))
    return out.astype(np.uint64)


def _f64f32_np(rng, size):
    """Doubles where rounding to f32 is hard: f32 values with the 29 bits below f32 precision at the tie and
    its neighbours, the f32 subnormal range at and between its quanta, the band around 2^-126 where cvt.ftz
    flushes, the overflow threshold."""
    r = rng.random(size)
    s = _sign(rng, size)
    f32 = (rng.integers(1, 255, size).astype(np.uint32) << np.uint32(23)) | \
        rng.integers(0, 1 << 23, size).astype(np.uint32)
    wide = f32.view(np.float32).astype(np.float64).view(np.uint64)
    low = _pick(rng, (0, 1, 0x0FFFFFFF, 0x10000000, 0x10000001, 0x1FFFFFFF, 0x08000000), size)
    ties = s | wide | low
    k = rng.integers(0, 1 << 23, size).astype(np.float64)
    frac = rng.choice([0.0, 0.5, 0.25, 0.75, 0.5 + 2.0**-30, 0.5 - 2.0**-30], size)
    subn = s | ((k + frac) * 2.0**-149).view(np.uint64)
    band = s | (2.0**-126 - rng.integers(-4, 9, size).astype(np.float64) * 2.0**-151).view(np.uint64)
    over = s | (2.0**128 - rng.integers(-2, 5, size).astype(np.float64) * 2.0**103).view(np.uint64)
    return np.where(r < 0.4, ties, np.where(r < 0.65, subn, np.where(r < 0.85, band, over))).astype(np.uint64)


def _i64r_np(rng, size):
    """64-bit integers that need rounding to 53 bits: every length from 54 to 64 bits, the dropped bits at the
    tie, next to it, all ones, zero or random; signed ones included (two's complement), and the u64 edges."""
    r = rng.random(size)
    length = rng.integers(54, 65, size)
    drop = (length - 53).astype(np.uint64)
    top = (np.uint64(1 << 52) | _mant(rng, size)) << drop
    half = np.uint64(1) << (drop - np.uint64(1))
    ones = (np.uint64(1) << drop) - np.uint64(1)
    patt = rng.integers(0, 6, size)
    low = np.choose(patt, [np.zeros(size, np.uint64), half, half + np.uint64(1), half - np.uint64(1), ones,
                           rng.integers(0, 1 << 62, size, dtype=np.uint64) & ones])
    v = top | low
    neg = rng.random(size) < 0.4
    v = np.where(neg & (length < 64), (~v + np.uint64(1)), v)
    return np.where(r < 0.3, sp._u64_np(rng, size), v).astype(np.uint64)


def _f64nan_np(rng, size):
    """NaN-heavy doubles: NaNs of both signs, quiet and signalling, with small, large and random payloads;
    infinities, zeros, ordinary values."""
    r = rng.random(size)
    payload = np.choose(rng.integers(0, 4, size), [np.ones(size, np.uint64), np.full(size, 0x123, np.uint64),
                                                   np.full(size, (1 << 51) - 1, np.uint64),
                                                   _mant(rng, size) >> np.uint64(1)])
    payload = np.where(payload == 0, np.uint64(1), payload)
    quiet = (rng.random(size) < 0.5).astype(np.uint64) << np.uint64(51)
    nan = _sign(rng, size) | np.uint64(INF) | quiet | payload
    inf = _sign(rng, size) | np.uint64(INF)
    zero = _sign(rng, size)
    out = np.where(r < 0.45, nan, np.where(r < 0.6, inf, np.where(r < 0.7, zero, _f64_np(rng, size))))
    return out.astype(np.uint64)


_DRAWS = {"f64": _f64_np, "f64cvt": _f64cvt_np, "f64f32": _f64f32_np, "i64r": _i64r_np, "f64nan": _f64nan_np}
sp.DRAWS.update(_DRAWS)  # the draw kinds of this table, beside sass_probes' own (make_case looks them up there)


def _elements(kind: str):
    """hypothesis element strategy of a draw kind of this table (None: drawn by numpy only)."""
    from hypothesis import strategies as st

    from flashsim.numerics.formats import F64
    from flashsim.strategies import float_bits

    f64 = st.one_of(st.sampled_from(F64_SPECIALS), float_bits(F64))
    return {
        "f64": f64, "f64nan": f64,
        "f64cvt": st.one_of(st.tuples(st.sampled_from(_CVT_BASES), st.sampled_from([1.0, -1.0]), st.integers(-3, 3))
                            .map(lambda t: (_b(t[0] * t[1]) + t[2]) & M64),
                            st.integers(-(1 << 40), 1 << 40).map(lambda v: _b(v / 4)), f64),
        "i64r": st.one_of(st.integers(0, M64), st.integers(-(1 << 63), (1 << 63) - 1).map(lambda v: v & M64),
                          st.sampled_from(sp.EDGE64)),
    }.get(kind)


def case_strategy(pr: Probe, max_n: int = 256):
    """hypothesis strategy of cases: n and a seed (make_case, the probe's partners included), then the first
    elements of each input drawn element by element by hypothesis (so they shrink)."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    @st.composite
    def build(draw):
        n = draw(st.integers(1, max_n))
        case = sp.make_case(pr, draw(st.integers(0, 2**32 - 1)), n)
        for arr, a in zip(case.inputs, pr.ins):
            elem = _elements(a.draw)
            elem = sp._elements(a.draw) if elem is None else elem
            if elem is None:
                continue
            k = draw(st.integers(0, min(16, len(arr))))
            if k:
                arr[:k] = draw(hnp.arrays(np.uint64, k, elements=elem)).astype(arr.dtype)
        return case
    return build()


# ------------------------------------------------------------------------------------------------ partners
def _finite(x):
    return (x & np.uint64(0x7FFFFFFFFFFFFFFF)) < np.uint64(INF)


def _vals(x):
    return np.ascontiguousarray(x).view(np.float64)


def _prep_add(case, rng):
    """y a partner of x: -x (exact cancellation), -x a few ulps off, x, half an ulp of x and its neighbours (ties
    of the sum), x scaled by 2^-k (exponent differences up to 1100)."""
    x, y = case.inputs[0], case.inputs[1]
    n = x.size
    r = rng.random(n)
    fx = _vals(x)
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.where(np.isfinite(fx), fx, 1.0))
        half_ulp = np.ldexp(rng.choice([1.0, 1.0 + 2.0**-52, 1.0 - 2.0**-53, 3.0, 0.5], n), e - 54)
        half_ulp *= np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
        scaled = np.ldexp(fx, -rng.choice([1, 20, 52, 53, 54, 55, 60, 100, 600, 1100], n))
        scaled *= np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
    delta = rng.integers(-3, 4, n).astype(np.int64).view(np.uint64)
    cand = np.where(r < 0.1, x ^ np.uint64(SIGN), np.where(r < 0.2, (x ^ np.uint64(SIGN)) + delta, np.where(
        r < 0.26, x, np.where(r < 0.42, half_ulp.view(np.uint64), np.where(r < 0.52, scaled.view(np.uint64), y)))))
    y[:] = np.where(_finite(x), cand, y)


def _odd_pairs(rng, n):
    """Odd integers A, B below 2^28 whose product has exactly 54 bits: A * B rounds to 53 bits at a tie."""
    a = rng.integers(1 << 25, 1 << 27, n) * 2 + 1
    lo, hi = ((1 << 53) + a - 1) // a, ((1 << 54) - 1) // a
    b = rng.integers(lo, hi + 1) | 1
    b = np.where(b > hi, b - 2, b)
    return a.astype(np.float64), b.astype(np.float64)


def _prep_mul(case, rng):
    """x, y whose product is a tie (odd A * B of 54 bits, scaled), near the subnormal range or the overflow
    threshold, or near 1 (x * RN(1/x))."""
    x, y = case.inputs[0], case.inputs[1]
    n = x.size
    r = rng.random(n)
    a, b = _odd_pairs(rng, n)
    k = rng.integers(-1128, 968, n)  # the product A * B * 2^k: from below the subnormal range to overflow
    ea = k // 2 + rng.integers(-100, 100, n)
    with np.errstate(all="ignore"):
        sgn = np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
        tx, ty = np.ldexp(a, ea) * sgn, np.ldexp(b, k - ea)
        target = rng.choice([-1074, -1073, -1060, -1030, -1023, -1022, -1021, 1022, 1023, 1024], n)
        fx = _vals(x).copy()
        _, ex = np.frexp(np.where(np.isfinite(fx) & (fx != 0), fx, 1.0))
        edge_y = np.ldexp(1.0 + rng.random(n), target - ex)
        recip = 1.0 / np.where(np.isfinite(fx) & (fx != 0), fx, 3.0)
    x[:] = np.where(r < 0.25, tx.view(np.uint64), x)
    y[:] = np.where(r < 0.25, ty.view(np.uint64), np.where(r < 0.4, edge_y.view(np.uint64), np.where(
        r < 0.48, recip.view(np.uint64), y)))


def _prep_fma(case, rng):
    """z a partner of x*y: -RN(x*y) (the result is the product's exact rounding error), a few ulps off it,
    RN(x*y) scaled by 2^-k or 2^k (the other term is a sticky bit), products that tie, tiny products."""
    x, y, z = case.inputs
    n = x.size
    r = rng.random(n)
    a, b = _odd_pairs(rng, n)
    ea = rng.integers(-400, 400, n)
    tie = r < 0.12
    with np.errstate(all="ignore"):
        x[:] = np.where(tie, (np.ldexp(a, ea) * np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)).view(np.uint64), x)
        y[:] = np.where(tie, np.ldexp(b, -ea + rng.integers(-300, 300, n)).view(np.uint64), y)
        p = _vals(x) * _vals(y)
        ok = np.isfinite(p)
        pb = p.view(np.uint64)
        k = rng.choice([53, 54, 55, 60, 106, 107, 110, 200], n)
        small = (np.ldexp(p, -k) * np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)).view(np.uint64)
        big = (np.ldexp(p, rng.choice([53, 54, 60, 110, 200], n)) *
               np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)).view(np.uint64)
    delta = rng.integers(-3, 4, n).astype(np.int64).view(np.uint64)
    cand = np.where(r < 0.3, pb ^ np.uint64(SIGN), np.where(r < 0.42, (pb ^ np.uint64(SIGN)) + delta, np.where(
        r < 0.55, small, np.where(r < 0.65, big, np.where(r < 0.7, np.uint64(0) | _sign(rng, n), z)))))
    z[:] = np.where(ok & (r >= 0.12) | tie & ok & (rng.random(n) < 0.5), cand, z)


def _prep_cmp(case, rng):
    """Equal operands, negated ones (+0 against -0), NaN pairs."""
    x, y = case.inputs[0], case.inputs[1]
    n = x.size
    r = rng.random(n)
    y[:] = np.where(r < 0.15, x, np.where(r < 0.22, x ^ np.uint64(SIGN), y))
    zeros = _sign(rng, n)
    x[:] = np.where((r >= 0.22) & (r < 0.27), zeros, x)
    y[:] = np.where((r >= 0.22) & (r < 0.27), zeros ^ np.uint64(SIGN), y)
    nan2 = _pick(rng, _NANS, n)
    y[:] = np.where((r >= 0.27) & (r < 0.32) & ~_finite(x) & ((x & np.uint64((1 << 52) - 1)) != 0), nan2, y)
    if len(case.inputs) > 2:
        z = case.inputs[2]
        z[:] = np.where(rng.random(n) < 0.15, x, z)


def _prep_nan(case, rng):
    """Invalid operations beside the NaN operands: inf - inf, 0 * inf, fma(inf, 0, z), fma(inf, y, -inf)."""
    x, y, z = case.inputs
    n = x.size
    r = rng.random(n)
    inf = np.uint64(INF) | _sign(rng, n)
    x[:] = np.where(r < 0.2, inf, x)
    y[:] = np.where(r < 0.08, inf ^ np.uint64(SIGN), np.where(r < 0.14, _sign(rng, n), y))
    z[:] = np.where((r >= 0.14) & (r < 0.2), x ^ np.uint64(SIGN), z)


def _prep_div(case, rng):
    x, y = case.inputs[0], case.inputs[1]
    n = x.size
    r = rng.random(n)
    y[:] = np.where(r < 0.2, x ^ (rng.integers(0, 2, n).astype(np.uint64) << np.uint64(63)) +
                    rng.integers(-3, 4, n).astype(np.int64).view(np.uint64), np.where(r < 0.25, _sign(rng, n), y))


# ================================================================================================ references
# Exact IEEE binary64 on Fractions (independent of flashsim.numerics): bits -> ('nan',) | ('inf', s) |
# ('num', s, value); a result is an int (bits) or None (a NaN: its payload is the hardware's).
_MAX64 = Fraction((1 << 53) - 1) * Fraction(2) ** 971


def dec(b: int):
    s, e, m = b >> 63, (b >> 52) & 0x7FF, b & ((1 << 52) - 1)
    if e == 0x7FF:
        return ("nan",) if m else ("inf", s)
    v = Fraction(m, 1 << 1074) if e == 0 else Fraction(m | (1 << 52)) * Fraction(2) ** (e - 1075)
    return ("num", s, -v if s else v)


def _exp2(a: Fraction) -> int:
    """floor(log2(a)) of a > 0."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > a else e


def enc(q: Fraction, mode: str = "rn", zero_sign: int = 0) -> int:
    """An exact value rounded to binary64 bits (subnormals, IEEE overflow); ``zero_sign`` for an exact 0."""
    if q == 0:
        return zero_sign << 63
    neg = int(q < 0)
    r = sp._round_sig(q, 53, mode, -1074)
    if abs(r) > _MAX64:
        to_inf = mode == "rn" or (mode == "rp" and not neg) or (mode == "rm" and neg)
        return (neg << 63) | (INF if to_inf else MAXF)
    if r == 0:
        return neg << 63
    a = abs(r)
    e = _exp2(a)
    body = int(a * (1 << 1074)) if e < -1022 else ((e + 1023) << 52) | (int(a / Fraction(2) ** (e - 52)) - (1 << 52))
    return (neg << 63) | body


def _zero_sum_sign(mode: str) -> int:
    return 1 if mode == "rm" else 0


def add64(a: int, b: int, mode: str = "rn"):
    x, y = dec(a), dec(b)
    if x[0] == "nan" or y[0] == "nan":
        return None
    if x[0] == "inf" or y[0] == "inf":
        if x[0] == "inf" and y[0] == "inf" and x[1] != y[1]:
            return None
        return ((x[1] if x[0] == "inf" else y[1]) << 63) | INF
    q = x[2] + y[2]
    if q == 0:
        return enc(q, mode, x[1] if (x[2] == 0 and y[2] == 0 and x[1] == y[1]) else _zero_sum_sign(mode))
    return enc(q, mode)


def mul64(a: int, b: int, mode: str = "rn"):
    x, y = dec(a), dec(b)
    if x[0] == "nan" or y[0] == "nan":
        return None
    s = x[1] ^ y[1]
    if x[0] == "inf" or y[0] == "inf":
        if (x[0] == "num" and x[2] == 0) or (y[0] == "num" and y[2] == 0):
            return None
        return (s << 63) | INF
    return enc(x[2] * y[2], mode, s)


def fma64(a: int, b: int, c: int, mode: str = "rn"):
    x, y, z = dec(a), dec(b), dec(c)
    if "nan" in (x[0], y[0], z[0]):
        return None
    ps = x[1] ^ y[1]
    if x[0] == "inf" or y[0] == "inf":
        if (x[0] == "num" and x[2] == 0) or (y[0] == "num" and y[2] == 0):
            return None
        if z[0] == "inf" and z[1] != ps:
            return None
        return (ps << 63) | INF
    if z[0] == "inf":
        return (z[1] << 63) | INF
    p = x[2] * y[2]
    q = p + z[2]
    if q == 0:
        return enc(q, mode, ps if (p == 0 and z[2] == 0 and ps == z[1]) else _zero_sum_sign(mode))
    return enc(q, mode)


def div64(a: int, b: int, mode: str = "rn"):
    x, y = dec(a), dec(b)
    if x[0] == "nan" or y[0] == "nan":
        return None
    s = x[1] ^ y[1]
    if x[0] == "inf":
        return None if y[0] == "inf" else (s << 63) | INF
    if y[0] == "inf":
        return s << 63
    if y[2] == 0:
        return None if x[2] == 0 else (s << 63) | INF
    return enc(x[2] / y[2], mode, s)


def sqrt64(a: int, mode: str = "rn"):
    x = dec(a)
    if x[0] == "nan" or (x[1] == 1 and not (x[0] == "num" and x[2] == 0)):
        return None  # NaN, or below zero (-0 is not)
    if x[0] == "inf":
        return INF
    if x[2] == 0:
        return x[1] << 63
    q = x[2]
    k = 2 * (q.denominator.bit_length() + 70)  # even: sqrt(N * 2^k) / 2^(k/2), exact in the integer part
    num = q.numerator * (1 << k) // q.denominator
    assert num * q.denominator == q.numerator * (1 << k)  # q is dyadic
    root = isqrt(num)
    val = Fraction(root) if root * root == num else Fraction(2 * root + 1, 2)  # inexact: a sticky half
    return enc(val / (1 << (k // 2)), mode)


def neg64(a: int):
    return None if dec(a)[0] == "nan" else a ^ SIGN


def abs64(a: int):
    return None if dec(a)[0] == "nan" else a & ~SIGN & M64


def _integral(q: Fraction, mode: str) -> int:
    fl = q.numerator // q.denominator
    if q == fl or mode == "rm":
        return fl
    if mode == "rp":
        return fl + 1
    if mode == "rz":
        return fl if q > 0 else fl + 1
    if mode == "rna":  # half away from zero (C round)
        r = q - fl
        return fl + (1 if (r > Fraction(1, 2) or (r == Fraction(1, 2) and q > 0)) else 0)
    r = q - fl
    return fl + (1 if r > Fraction(1, 2) or (r == Fraction(1, 2) and fl % 2) else 0)


def rnd64(a: int, mode: str):
    """cvt.r*i.f64.f64 / trunc / floor / ceil / rint / round: integral, zeros keep the input's sign."""
    x = dec(a)
    if x[0] == "nan":
        return None
    if x[0] == "inf":
        return a
    v = _integral(x[2], mode)
    return enc(Fraction(v), "rn", x[1]) if v != 0 else x[1] << 63


def d2i(a: int, mode: str, lo: int, hi: int, wide: bool):
    """cvt.r*i.{s,u}{32,64}.f64: round, saturate. A NaN is left to the hardware: the PTX ISA's 0 for the
    32-bit forms is not what the H200 gives (0x80000000, probe_d2i, traces/double)."""
    x = dec(a)
    if x[0] == "nan":
        return None
    if x[0] == "inf":
        return (hi if x[1] == 0 else lo) & M64
    return min(max(_integral(x[2], mode), lo), hi) & M64


def d2f(a: int, mode: str, ftz: bool):
    """cvt.<mode>{.ftz}.f32.f64 (f32 bits). With .ftz the results are defined where the flush is not in
    question: |a| >= 2^-126 (IEEE), |a| <= the largest f32 subnormal (a zero of a's sign)."""
    x = dec(a)
    if x[0] == "nan":
        return None
    if x[0] == "inf":
        return (x[1] << 31) | 0x7F800000
    if ftz:
        m = abs(x[2])
        if m <= Fraction(2) ** -126 - Fraction(2) ** -149:
            return x[1] << 31
        if m < Fraction(2) ** -126:
            return None  # whether a value that rounds up to 2^-126 is flushed is the implementation's
    return sp._enc(x[2], x[1], mode, False)


def f2d(f: int, ftz: bool):
    """cvt{.ftz}.f64.f32: exact (a subnormal f32 is flushed with .ftz)."""
    d = sp._dec(f, ftz)
    if d[0] == "nan":
        return None
    if d[0] == "inf":
        return (d[1] << 63) | INF
    return enc(d[2], "rn", d[1] if d[2] == 0 else 0)


def _minmax(a: int, b: int, want_max: bool):
    """fmin / fmax / min.f64 / max.f64: one NaN operand is ignored; two NaNs, and +0 against -0, are the
    hardware's (C allows either zero)."""
    x, y = dec(a), dec(b)
    if x[0] == "nan" and y[0] == "nan":
        return None
    if x[0] == "nan":
        return b
    if y[0] == "nan":
        return a
    vx = x[2] if x[0] == "num" else Fraction((-1) ** x[1]) * _MAX64 * 2
    vy = y[2] if y[0] == "num" else Fraction((-1) ** y[1]) * _MAX64 * 2
    if vx == vy:
        return a if a == b else None
    return a if (vx > vy) == want_max else b


def _table(rows, dtype=np.uint64):
    """Per-element lists of column values (int, or None where undefined) -> (flat bits, defined)."""
    vals = np.array([[0 if v is None else v for v in row] for row in rows], dtype=object)
    defined = np.array([[v is not None for v in row] for row in rows], bool)
    return np.array([int(v) for v in vals.ravel()], dtype), defined.ravel()


_MODES = ("rn", "rz", "rm", "rp")
NEG_OP = lambda v: v ^ SIGN  # noqa: E731 - a negated operand (bit 63)
ABS_OP = lambda v: v & ~SIGN & M64  # noqa: E731


def _param(case) -> int:
    return int(case.params[0])


def _r_dadd(c):
    p = _param(c)
    rows = []
    for x, y in zip(*(map(int, a) for a in c.inputs)):
        rows.append([add64(x, y), add64(x, NEG_OP(y)), add64(x, y, "rz"), add64(x, y, "rm"), add64(x, y, "rp"),
                     add64(x, NEG_OP(y), "rz"), add64(x, NEG_OP(y), "rm"), add64(x, NEG_OP(y), "rp"), neg64(x),
                     abs64(x), None if dec(y)[0] == "nan" else y | SIGN, add64(x, _b(1.5)), add64(x, p),
                     add64(ABS_OP(x), NEG_OP(y)), add64(x, y), add64(x, _b(-0.75), "rz")])
    return [_table(rows)]


def _r_dmul(c):
    p = _param(c)
    rows = []
    for x, y in zip(*(map(int, a) for a in c.inputs)):
        xy = mul64(x, y)
        rows.append([xy, mul64(x, y, "rz"), mul64(x, y, "rm"), mul64(x, y, "rp"), None if xy is None else xy ^ SIGN,
                     mul64(x, _b(3.0)), mul64(ABS_OP(x), _b(0.1)), mul64(x, p), xy, mul64(NEG_OP(x), ABS_OP(y), "rm"),
                     mul64(x, _b(2.0**54)), mul64(x, _b(2.0**-1022), "rp")])
    return [_table(rows)]


def _r_dfma(c):
    p = _param(c)
    rows = []
    for x, y, z in zip(*(map(int, a) for a in c.inputs)):
        rows.append([fma64(x, y, z), fma64(x, y, z), fma64(x, y, z, "rz"), fma64(x, y, z, "rm"), fma64(x, y, z, "rp"),
                     fma64(NEG_OP(x), y, z), fma64(x, y, NEG_OP(z)), fma64(x, NEG_OP(y), _b(1.0)), fma64(x, p, z),
                     fma64(x, y, _b(0.5), "rz")])
    return [_table(rows)]


def _cmp(x: float, y: float) -> dict:
    nan = np.isnan(x) or np.isnan(y)
    return {"lt": x < y, "eq": x == y, "le": x <= y, "gt": x > y, "ne": (x != y) and not nan, "ge": x >= y,
            "ltu": not (x >= y), "equ": x == y or nan, "leu": not (x > y), "gtu": not (x <= y), "neu": x != y,
            "geu": not (x < y), "num": not nan, "nan": nan}


_BOPS = {"and": lambda a, b: a and b, "or": lambda a, b: a or b, "xor": lambda a, b: a != b}
_SETPI = (("lt", 1.0), ("le", 2.0), ("ltu", 1.5), ("leu", -2.0), ("equ", 0.0), ("num", 1.0), ("gt", float("inf")),
          ("eq", float("-inf")))
_SETPB = (("eq", "and", 0), ("ne", "or", 0), ("gtu", "xor", 0), ("nan", "or", 0), ("lt", "and", 0), ("le", "xor", 0),
          ("ltu", "or", 0), ("leu", "and", 0), ("equ", "xor", 0), ("num", "or", 0), ("lt", "and", 1), ("le", "or", 1),
          ("equ", "and", 1), ("num", "xor", 1), ("geu", "or", 1), ("nan", "and", 1), ("gt", "xor", 1),
          ("neu", "and", 1))


def _r_dsetp(c):
    p = float(np.array(_param(c), np.uint64).view(np.float64))
    xs, ys, zs = (_vals(a) for a in c.inputs)
    out = []
    with np.errstate(invalid="ignore"):
        for x, y, z in zip(xs, ys, zs):
            x, y, z = float(x), float(y), float(z)
            r = _cmp(x, y)
            bits = [r["eq"], x != y, r["lt"], r["le"], r["gt"], r["ge"], np.isnan(x), not r["lt"], not r["ge"],
                    np.isinf(y), x < 1.0, x == 0.0, x >= p, abs(x) > 4.0]
            bits += [r[k] for k in ("lt", "eq", "le", "gt", "ne", "ge", "ltu", "equ", "leu", "gtu", "neu", "geu", "num",
                                    "nan")]
            bits += [_cmp(x, v)[k] for k, v in _SETPI]
            s = x < z
            bits += [_BOPS[bop](_cmp(x, y)[k], s != bool(negs)) for k, bop, negs in _SETPB]
            bits += [False] * (64 - len(bits))
            m = sum(int(bool(b)) << j for j, b in enumerate(bits))
            out += [m & M32, m >> 32]
    return [np.array(out, np.uint32)]


def _r_dminmax(c):
    rows = []
    for x, y in zip(*(map(int, a) for a in c.inputs)):
        fx, fy = (float(np.array(v, np.uint64).view(np.float64)) for v in (x, y))
        rows.append([_minmax(x, y, False), _minmax(x, y, True), _minmax(x, y, False), _minmax(x, y, True),
                     x if fx < fy else y, (x & ~SIGN & M64) | (y & SIGN), _minmax(ABS_OP(x), NEG_OP(y), True), x])
    return [_table(rows)]


def _r_d2f(c):
    rows = []
    for x, f in zip(map(int, c.inputs[0]), map(int, c.inputs[1])):
        rows.append([d2f(x, m, True) for m in _MODES] + [d2f(x, m, False) for m in _MODES] +
                    [f2d(f, True), f2d(f, False)])
    return [_table(rows)]


_S32, _U32, _S64, _U64 = (-(1 << 31), (1 << 31) - 1), (0, M32), (-(1 << 63), (1 << 63) - 1), (0, M64)


def _r_d2i(c):
    rows = []
    for x in map(int, c.inputs[0]):
        row = [d2i(x, m, *_S32, False) for m in _MODES]
        row = [None if v is None else v & M32 for v in row]
        row += [d2i(x, m, *_U32, False) for m in _MODES]
        row += [d2i(x, m, *_S64, True) for m in _MODES] + [d2i(x, m, *_U64, True) for m in _MODES]
        nx = neg64(x)
        neg = None if nx is None else d2i(nx, "rz", *_S32, False)
        row += [None if neg is None else neg & M32, x >> 32, x & M32,
                None if dec(x)[0] == "nan" else d2i(ABS_OP(x), "rz", *_S64, True)]
        rows.append(row)
    return [_table(rows)]


def _s(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _r_i2d(c):
    rows = []
    for v in map(int, c.inputs[0]):
        s64, s32, u32 = _s(v, 64), _s(v, 32), v & M32
        row = [enc(Fraction(s32)), enc(Fraction(u32))] + [enc(Fraction(s64), m) for m in _MODES] + \
              [enc(Fraction(v), m) for m in _MODES]
        row += [enc(Fraction(s64)), enc(Fraction(v)), enc(Fraction(_s(v, 16))), enc(Fraction(v & 0xFFFF)),
                enc(Fraction(_s(v, 8))), v]
        rows.append(row)
    return [_table(rows)]


def _r_drnd(c):
    rows = []
    for x in map(int, c.inputs[0]):
        rows.append([rnd64(x, "rz"), rnd64(x, "rm"), rnd64(x, "rp"), rnd64(x, "rn"), rnd64(x, "rn"), rnd64(x, "rna"),
                     rnd64(x, "rn"), rnd64(x, "rz"), rnd64(x, "rm"), rnd64(x, "rp")])
    return [_table(rows)]


def _r_dnan(c):
    rows = []
    for x, y, z in zip(*(map(int, a) for a in c.inputs)):
        lo = x & M32
        rows.append([add64(x, y), add64(x, y, "rz"), add64(x, NEG_OP(y)), mul64(x, y), mul64(x, y, "rp"),
                     fma64(x, y, z), fma64(x, y, z, "rm"), neg64(x), abs64(x), rnd64(x, "rn"), rnd64(x, "rz"),
                     f2d(lo, False), d2f(x, "rn", False), _minmax(x, y, False), _minmax(x, y, True), add64(x, y)])
    return [_table(rows)]


def _r_ddiv(c):
    rows = []
    for x, y in zip(*(map(int, a) for a in c.inputs)):
        rows.append([div64(x, y), div64(x, y, "rz"), div64(_b(1.0), y), None])  # rcp.approx: no reference
    return [_table(rows)]


def _r_dsqrt(c):
    rows = []
    for x in map(int, c.inputs[0]):
        rows.append([sqrt64(x), sqrt64(x, "rp"), None, None])  # rsqrt and rsqrt.approx are approximations
    return [_table(rows)]


PROBES: tuple[Probe, ...] = (
    Probe("probe_dadd", ("DADD", "DADD.RZ", "DADD.RM", "DADD.RP", "DADD|-RZ, ?-R", "DADD|\\|R\\d+\\|", "DADD|, ?1\\.5$",
                         "DADD|UR\\d+$"),
          (I("u64", "f64"), I("u64", "f64"), O("u64", per=16), P("u64", "f64")), _r_dadd, prepare=_prep_add),
    Probe("probe_dmul", ("DMUL", "DMUL.RZ", "DMUL.RM", "DMUL.RP", "DMUL|, ?3$", "DMUL|UR\\d+$", "DMUL|e\\+16$"),
          (I("u64", "f64"), I("u64", "f64"), O("u64", per=12), P("u64", "f64")), _r_dmul, prepare=_prep_mul),
    Probe("probe_dfma", ("DFMA", "DFMA.RZ", "DFMA.RM", "DFMA.RP", "DFMA|-R\\d+", "DFMA|, ?1$"),
          (I("u64", "f64"), I("u64", "f64"), I("u64", "f64"), O("u64", per=10), P("u64", "f64")), _r_dfma,
          prepare=_prep_fma),
    Probe("probe_dsetp", tuple(f"DSETP.{k}" for k in ("LT.AND", "EQ.AND", "GT.AND", "NE.AND", "GE.AND", "LTU.OR",
                                                      "EQU.AND", "EQU.XOR", "LEU.AND", "GTU.AND", "GTU.XOR", "NEU.AND",
                                                      "GEU.AND", "GEU.OR", "NUM.OR", "NUM.XOR", "NAN.AND", "NAN.OR",
                                                      "LE.OR", "LE.XOR", "GT.XOR", "NE.OR")) +
          ("DSETP|INF", "DSETP|, ?RZ, ?PT$", "DSETP|!P\\d$"),
          (I("u64", "f64"), I("u64", "f64"), I("u64", "f64"), O("u32", per=2), P("u64", "f64")), _r_dsetp,
          prepare=_prep_cmp),
    Probe("probe_dminmax", ("DSETP.MIN.AND", "DSETP.MAX.AND", "FSEL"),
          (I("u64", "f64"), I("u64", "f64"), O("u64", per=8)), _r_dminmax, prepare=_prep_cmp),
    Probe("probe_d2f", ("F2F.F32.F64", "F2F.F32.F64.RZ", "F2F.F32.F64.RM", "F2F.F32.F64.RP", "F2F.F64.F32", "FMUL.FTZ"),
          (I("u64", "f64cvt"), I("u32", "f32"), O("u64", per=10)), _r_d2f),
    Probe("probe_d2i", tuple("F2I." + f for f in ("F64", "F64.TRUNC", "F64.FLOOR", "F64.CEIL", "U32.F64",
                                                  "U32.F64.TRUNC", "U32.F64.FLOOR", "U32.F64.CEIL", "S64.F64",
                                                  "S64.F64.TRUNC", "S64.F64.FLOOR", "S64.F64.CEIL", "U64.F64",
                                                  "U64.F64.TRUNC", "U64.F64.FLOOR", "U64.F64.CEIL")),
          (I("u64", "f64cvt"), O("u64", per=20)), _r_d2i),
    Probe("probe_i2d", tuple("I2F." + f for f in ("F64", "F64.U32", "F64.S64", "F64.S64.RZ", "F64.S64.RM", "F64.S64.RP",
                                                  "F64.U64", "F64.U64.RZ", "F64.U64.RM", "F64.U64.RP", "F64.S16",
                                                  "F64.U16")),
          (I("u64", "i64r"), O("u64", per=16)), _r_i2d),
    Probe("probe_drnd", ("FRND.F64", "FRND.F64.TRUNC", "FRND.F64.FLOOR", "FRND.F64.CEIL", "DADD.RZ"),
          (I("u64", "f64cvt"), O("u64", per=10)), _r_drnd),
    Probe("probe_dnan", ("DADD", "DADD.RZ", "DMUL", "DMUL.RP", "DFMA", "DFMA.RM", "FRND.F64", "FRND.F64.TRUNC",
                         "F2F.F64.F32", "F2F.F32.F64", "DSETP.MIN.AND", "DSETP.MAX.AND"),
          (I("u64", "f64nan"), I("u64", "f64nan"), I("u64", "f64nan"), O("u64", per=16)), _r_dnan, prepare=_prep_nan,
          note="the NaN outputs are the hardware's: see the record's nan_census"),
    Probe("probe_ddiv", ("MUFU.RCP64H", "DFMA"), (I("u64", "f64"), I("u64", "f64"), O("u64", per=4)), _r_ddiv,
          prepare=_prep_div),
    Probe("probe_dsqrt", ("MUFU.RSQ64H", "DFMA"), (I("u64", "f64"), O("u64", per=4)), _r_dsqrt),
)

_BY_NAME = {p.name: p for p in PROBES}


def probe(name: str) -> Probe:
    return _BY_NAME[name]


# ================================================================================================ running
def build(which: str):
    return fp.build(which, KERNEL_FILE)


def missing_forms(which: str, pr: Probe) -> list[str]:
    return fp.missing_forms(which, pr, KERNEL_FILE)


def run_interp(case, which: str = "nvrtc13", module=None) -> list[np.ndarray]:
    return fp.run_interp(case, which, module=module, kernel_file=KERNEL_FILE)


def run_gpu(case, which: str = "nvrtc13", cubin: bytes | None = None) -> list[np.ndarray]:
    return fp.run_gpu(case, which, cubin=cubin, kernel_file=KERNEL_FILE)


def available_builds() -> tuple[str, ...]:
    """BUILDS, less ptxas128 where Triton (its ptxas) is not installed."""
    import importlib.util

    return tuple(b for b in BUILDS if b != "ptxas128" or importlib.util.find_spec("triton") is not None)


# ------------------------------------------------------------------------------------------------ NaN census
def _census_models():
    """Per probe_dnan output: (label, {candidate: fn(x, y, z, rule) -> bits}) in SASS operand terms; the
    binary ones in both operand orders (ptxas may swap them)."""
    from flashsim.numerics import fp64

    S = np.uint64(SIGN)
    z0 = np.uint64(SIGN)  # -RZ
    both = lambda f: {"(x, y)": lambda x, y, z, r: f(x, y, r), "(y, x)": lambda x, y, z, r: f(y, x, r)}  # noqa: E731
    return {
        0: ("add.rn.f64", both(lambda a, b, r: fp64.add(a, b, "rn", nan_rule=r))),
        1: ("add.rz.f64", both(lambda a, b, r: fp64.add(a, b, "rz", nan_rule=r))),
        2: ("sub.rn.f64", {"(x, -y)": lambda x, y, z, r: fp64.add(x, y ^ S, "rn", nan_rule=r),
                           "(-y, x)": lambda x, y, z, r: fp64.add(y ^ S, x, "rn", nan_rule=r)}),
        3: ("mul.rn.f64", both(lambda a, b, r: fp64.mul(a, b, "rn", nan_rule=r))),
        4: ("mul.rp.f64", both(lambda a, b, r: fp64.mul(a, b, "rp", nan_rule=r))),
        5: ("fma.rn.f64", {"(x, y, z)": lambda x, y, z, r: fp64.fma(x, y, z, "rn", nan_rule=r),
                           "(y, x, z)": lambda x, y, z, r: fp64.fma(y, x, z, "rn", nan_rule=r)}),
        6: ("fma.rm.f64", {"(x, y, z)": lambda x, y, z, r: fp64.fma(x, y, z, "rm", nan_rule=r),
                           "(y, x, z)": lambda x, y, z, r: fp64.fma(y, x, z, "rm", nan_rule=r)}),
        7: ("neg.f64 (DADD -RZ, -x)", {"": lambda x, y, z, r: fp64.add(np.full_like(x, z0), x ^ S, "rn", nan_rule=r)}),
        8: ("abs.f64 (DADD -RZ, |x|)",
            {"": lambda x, y, z, r: fp64.add(np.full_like(x, z0), x & ~S, "rn", nan_rule=r)}),
        9: ("cvt.rni.f64.f64", {"": lambda x, y, z, r: fp64.round_integral(x, "rn", nan_rule=r)}),
        10: ("cvt.rzi.f64.f64", {"": lambda x, y, z, r: fp64.round_integral(x, "rz", nan_rule=r)}),
        11: ("cvt.f64.f32", {"": lambda x, y, z, r: fp64.from_f32((x & np.uint64(M32)).astype(np.uint32), nan_rule=r)}),
    }


def _f32_nan_candidates(x):
    """cvt.rn.f32.f64 of NaNs: the canonical f32 NaN, or the payload's top bits kept."""
    keep = ((x >> np.uint64(32)) & np.uint64(0x80000000)) | np.uint64(0x7FC00000) | \
        ((x >> np.uint64(29)) & np.uint64(0x7FFFFF))
    return {"canonical 0x7FFFFFFF": np.full(x.shape, np.uint64(0x7FFFFFFF)), "sign and payload kept, quieted": keep}


def nan_census(items) -> dict:
    """For each probe_dnan output: among the elements where the GPU returned a NaN, how many each candidate
    NaN rule (flashsim.numerics.fp64.CANDIDATE_RULES, in each operand order) reproduces. ``items``:
    [(case, gpu outputs)] of probe_dnan."""
    from flashsim.numerics import fp64

    models = _census_models()
    per = probe("probe_dnan").outs[0].per
    out: dict[str, Any] = {}
    if not items:
        return out
    xs = np.concatenate([c.inputs[0] for c, _ in items])
    ys = np.concatenate([c.inputs[1] for c, _ in items])
    zs = np.concatenate([c.inputs[2] for c, _ in items])
    g = np.concatenate([o[0] for _, o in items]).reshape(-1, per)
    for col, (label, orders) in models.items():
        nan = fp64.is_nan(g[:, col])
        entry = {"gpu_nans": int(nan.sum()), "distinct_gpu_nans": sorted({hex(int(v)) for v in g[nan, col]})[:12],
                 "rules": {}}
        for rname, rule in fp64.CANDIDATE_RULES.items():
            for oname, fn in orders.items():
                got = fn(xs, ys, zs, rule)
                entry["rules"][f"{rname} {oname}".strip()] = int(np.sum(got[nan] == g[nan, col]))
        current = next((k for k, v in fp64.CANDIDATE_RULES.items() if v == fp64.NAN_RULE), None)
        if current is not None:
            entry["interpreter_rule"] = f"{current} {next(iter(orders))}".strip()
        out[f"{col} {label}"] = entry
    nan32 = (g[:, 12] & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000)
    out["12 cvt.rn.f32.f64"] = {"gpu_nans": int(nan32.sum()),
                                "distinct_gpu_nans": sorted({hex(int(v)) for v in g[nan32, 12]})[:12],
                                "rules": {k: int(np.sum(v[nan32] == g[nan32, 12])) for k, v in
                                          _f32_nan_candidates(xs).items()}}
    for col, name in ((13, "min.f64"), (14, "max.f64")):
        both_nan = fp64.is_nan(xs) & fp64.is_nan(ys)
        out[f"{col} {name} of two NaNs"] = {
            "cases": int(both_nan.sum()), "distinct_gpu": sorted({hex(int(v)) for v in g[both_nan, col]})[:12],
            "rules": {"quiet y (the interpreter: DSETP's second predicate quiets b)":
                      int(np.sum(g[both_nan, col] == fp64.quiet(ys[both_nan]))),
                      "quiet x": int(np.sum(g[both_nan, col] == fp64.quiet(xs[both_nan])))}}
    return out


# ------------------------------------------------------------------------------------------------ record
_key = fp._key


def record(out_dir: Path, *, cases: int = 4, seed: int = 0, builds: Sequence[str] | None = None,
           probes: Sequence[Probe] = PROBES) -> dict:
    """Every probe in every build on the GPU and in the interpreter (``cases`` seeded launches each): writes
    ``double_probes.npz`` (cubins, inputs, GPU outputs) and ``double_probes.json`` (per build and probe:
    forms missing, mismatches against the interpreter and against the references, the forms executed; the
    NaN census; toolchain and device)."""
    from flashsim.numerics import fp64
    from flashsim.sass.toolchain import ptxas_version, versions

    builds = tuple(builds or available_builds())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    report: dict[str, Any] = {"device": sp._device_info(), "toolchain": versions(), "ptxas130": ptxas_version(),
                              "builds": {}, "nan_rule": {"propagate": fp64.NAN_RULE.propagate,
                                                         "default": hex(fp64.NAN_RULE.default)}}
    if "ptxas128" in builds:
        report["ptxas128"] = ptxas_version(fp.triton_ptxas())
    refs: dict[tuple[str, int], list] = {}
    nan_items: list = []
    for which in builds:
        mod = build(which)
        arrays[f"{which}/__cubin__"] = np.frombuffer(mod.cubin, np.uint8)
        rep: dict[str, Any] = {"cubin_sha256": mod.sha256, "probes": {}}
        for pr in probes:
            prog = mod.get_function(pr.name)._prog()
            before = prog.executed_forms()
            entry: dict[str, Any] = {"forms_missing": missing_forms(which, pr), "cases": 0, "equal": True,
                                     "mismatches": [], "interp_error": None, "reference_mismatches": [],
                                     "pending": pr.pending}
            for k in range(cases):
                case = sp.make_case(pr, sp._seed(pr, k, seed))
                gpu_out = run_gpu(case, which)
                for j, a in enumerate(case.inputs):
                    arrays[_key(which, pr, k, f"in{j}")] = a
                for j, a in enumerate(case.outs0):
                    arrays[_key(which, pr, k, f"init{j}")] = a
                for j, a in enumerate(gpu_out):
                    arrays[_key(which, pr, k, f"out{j}")] = a
                arrays[_key(which, pr, k, "params")] = np.array([int(p) for p in case.params], np.uint64)
                arrays[_key(which, pr, k, "n")] = np.array(case.n, np.int64)
                entry["cases"] += 1
                if which == "ptxas130":  # the same PTX JIT-compiled by the driver: the same outputs?
                    jit = run_gpu(case, "driver-jit")
                    entry.setdefault("driver_jit_mismatches", [])
                    entry["driver_jit_mismatches"] += sp.compare(case, jit, gpu_out, "the driver's JIT of the PTX")
                if (pr.name, k) not in refs:
                    refs[(pr.name, k)] = sp.reference(case)
                entry["reference_mismatches"] += sp.compare(case, gpu_out, refs[(pr.name, k)], "the exact reference")
                if pr.name == "probe_dnan" and which == builds[0]:
                    nan_items.append((case, gpu_out))
                try:
                    msgs = sp.compare(case, run_interp(case, which), gpu_out, "the GPU")
                except Exception as exc:  # an unmodelled instruction (pending probes), or an interpreter fault
                    entry["interp_error"] = f"{type(exc).__name__}: {exc}"
                    entry["equal"] = False
                    continue
                if msgs:
                    entry["equal"] = False
                    entry["mismatches"] += msgs
            after = prog.executed_forms()
            entry["executed"] = {f: c - before.get(f, 0) for f, c in after.items() if c > before.get(f, 0)}
            rep["probes"][pr.name] = entry
        report["builds"][which] = rep
    report["nan_census"] = nan_census(nan_items)
    np.savez_compressed(out_dir / "double_probes.npz", **arrays)
    (out_dir / "double_probes.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def replay(path: Path = TRACE):
    """{build: (cubin, [(case, gpu outputs)])} of a record."""
    return fp.replay(path, PROBES)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.double_probes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for double_probes.npz / .json (traces/double)")
    ap.add_argument("--cases", type=int, default=4, help="seeded launches per probe and build (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--build", action="append", choices=BUILDS, help="only these builds (repeatable)")
    a = ap.parse_args(argv)
    if run_gpu.__module__ == __name__:  # (not replaced by a stand-in) fail before any work when there is no GPU
        from flashsim.gpu import runtime

        runtime.require_gpu()
    rep = record(a.out, cases=a.cases, seed=a.seed, builds=a.build)
    bad = 0
    for which, r in rep["builds"].items():
        for name, e in r["probes"].items():
            ok = (e["equal"] or bool(e["pending"])) and not e["forms_missing"] and not e["reference_mismatches"] \
                and not e.get("driver_jit_mismatches")
            bad += not ok
            status = "ok" if ok else "DIFFERS"
            if e["pending"]:
                status += " (pending: " + (e["interp_error"] or "runs")[:80] + ")"
            err = "" if e["pending"] else e["interp_error"]
            print(f"{which:9s} {name:14s} {status} missing={e['forms_missing']} err={err} "
                  f"ref={len(e['reference_mismatches'])}")
            for m in e["mismatches"][:2] + e["reference_mismatches"][:2]:
                print("    " + m[:300])
    print("NaN census (GPU NaNs reproduced per candidate rule):")
    for col, e in rep["nan_census"].items():
        best = max(e["rules"].items(), key=lambda kv: kv[1]) if e["rules"] else None
        print(f"  {col:36s} {e.get('gpu_nans', e.get('cases'))} NaNs, best: {best}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
