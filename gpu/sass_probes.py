"""Per-opcode SASS probes: the table of gpu/kernels/sass_probes.cu, their inputs, launch shapes and numpy
references, and the runners that execute one probe case in flashsim's SASS interpreter and on a GPU.

Every probe is one small kernel whose sm_90 SASS (NVRTC 13.0 with cupy's options, compiled once by
:func:`module`) must contain the instructions listed in :attr:`Probe.sass`. A probe case is a set of
inputs drawn from bit patterns (specials, subnormals, INT_MIN, shift amounts past the width, divisors
of every size, f16 halves...) by numpy from a seed (:func:`make_case`) or by hypothesis
(:func:`case_strategy`). Where the C code's meaning is exact and defined, :func:`reference` computes the
outputs in numpy, with a mask of the elements it defines (not: division by zero, INT_MIN / -1,
__fdividef's approximation, NaN payloads of float atomics; signed overflow wraps, as the instructions
do; inline PTX is defined for every input, shift amounts past the width included). The interpreter must
match the reference bit for bit (tests/test_sass_probes.py), and the GPU must match the interpreter bit
for bit on every output element, defined or not (the probes exist to pin down what C leaves to the
hardware).

The GPU loads the interpreter's own cubin bytes (sha256 checked), so both run the same SASS.
``python -m flashsim.gpu.sass_probes --out DIR`` runs every probe on the GPU and in the interpreter and records
golden results (inputs, cubin sha256, GPU outputs, toolchain versions) in ``DIR/probes.npz`` with a JSON
report of case counts per opcode (``DIR/probes.json``); tests replay ``traces/sass/probes.npz``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import re
import sys
import zlib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import flashsim.cuda as fc
from flashsim.gpu import runtime
from flashsim.sass.toolchain import disassemble, versions

__all__ = ["Arg", "Case", "PROBES", "Probe", "TRACE_PATH", "case_strategy", "check_sass", "compare", "main",
           "make_case", "module", "probe", "record", "reference", "replay", "run_gpu", "run_interp", "sass_names"]

KERNEL_FILE = "sass_probes.cu"
TRACE_PATH = Path(__file__).resolve().parent.parent / "traces" / "sass" / "probes.npz"
M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


# ================================================================================================ inputs
# Bit-pattern generators. Each kind has a numpy generator (rng, size) -> array and a hypothesis element
# strategy; both favour the patterns where semantics differ: zero, one, all ones, INT_MIN/INT_MAX, powers
# of two and their neighbours, shift amounts at and past the width, float specials and subnormals.

EDGE32 = (0, 1, 2, 3, 5, 7, 31, 32, 33, 63, 64, 65, 127, 128, 255, 256, 1000, 0x7FFF, 0x8000, 0xFFFF, 0x10000,
          0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFC18, 0xFFFF0000, 0x55555555,
          0xAAAAAAAA, 0x9E3779B9, 0x0000FFFF, 0x00FF00FF)
EDGE64 = (0, 1, 2, 3, 7, 10, 63, 64, 0xFFFFFFFF, 0x100000000, 0x100000001, 0x7FFFFFFF, 0x80000000,
          0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0x8000000000000001, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE,
          0xFFFFFFFF00000000, 0xFFFFFFFF80000000, 0x00000001FFFFFFFF, 0x5555555555555555, 0x9E3779B97F4A7C15,
          1000000007, 0xFFFFFFFFFFFFFC18)
F32_SPECIALS = (0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
                0x00400000, 0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF, 0x40000000, 0x3F000000, 0xBF000000,
                0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF,
                0xFFFFFFFF, 0x4F000000, 0xCF000000, 0x4F800000, 0x5F000000, 0xDF000000, 0x5F800000, 0x3EFFFFFF,
                0x3FC00000, 0x40200000, 0xC0200000, 0x4B000000, 0x4B7FFFFF, 0x34000000, 0x0C000000)
F16_SPECIALS = (0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x3C01, 0x7BFF, 0xFBFF, 0x7C00,
                0xFC00, 0x7C01, 0x7E00, 0x7FFF, 0xFFFF, 0x3555)
# integer-valued and boundary floats for conversions: around +-2^31, 2^32, 2^63, 2^64, halves
_CVT_BASES = (2.0**31, 2.0**32, 2.0**63, 2.0**64, 2.0**24, 2.0**53, 1.0, 0.5, 1.5, 2.5, 3.5, 1e-3, 2.0**-126,
              1e30, 2.0**62)


def _u32_np(rng, size):
    r = rng.random(size)
    out = rng.integers(0, 1 << 32, size, dtype=np.uint64)
    edges = np.asarray(EDGE32, np.uint64)[rng.integers(0, len(EDGE32), size)]
    small = (rng.integers(-1024, 1025, size).astype(np.int64) & M32).astype(np.uint64)
    pow2 = (np.uint64(1) << rng.integers(0, 32, size).astype(np.uint64))
    pow2 = (pow2.astype(np.int64) + rng.integers(-1, 2, size)).astype(np.uint64) & np.uint64(M32)
    shifted = out >> rng.integers(0, 32, size).astype(np.uint64)
    out = np.where(r < 0.2, edges, np.where(r < 0.4, small, np.where(r < 0.55, pow2, np.where(r < 0.7, shifted, out))))
    return out.astype(np.uint32)


def _u64_np(rng, size):
    r = rng.random(size)
    full = rng.integers(0, 1 << 63, size, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, size).astype(np.uint64)
    edges = np.asarray(EDGE64, np.uint64)[rng.integers(0, len(EDGE64), size)]
    low = rng.integers(0, 1 << 32, size, dtype=np.uint64)
    neg = (-(rng.integers(1, 1 << 31, size).astype(np.int64))).view(np.uint64)
    pow2 = np.uint64(1) << rng.integers(0, 64, size).astype(np.uint64)
    pow2 = pow2 + rng.integers(-1, 2, size).astype(np.int64).view(np.uint64)
    shifted = full >> rng.integers(0, 64, size).astype(np.uint64)
    return np.where(r < 0.15, edges, np.where(r < 0.4, low, np.where(r < 0.5, neg, np.where(
        r < 0.6, pow2, np.where(r < 0.75, shifted, full))))).astype(np.uint64)


def _divisor32_np(rng, size):
    r = rng.random(size)
    small = rng.integers(1, 100, size).astype(np.uint64)
    negsmall = (-(rng.integers(1, 100, size).astype(np.int64)) & M32).astype(np.uint64)
    return np.where(r < 0.04, np.uint64(0), np.where(r < 0.3, small, np.where(r < 0.4, negsmall,
                    _u32_np(rng, size).astype(np.uint64)))).astype(np.uint32)


def _divisor64_np(rng, size):
    r = rng.random(size)
    small = rng.integers(1, 100, size).astype(np.uint64)
    negsmall = (-(rng.integers(1, 100, size).astype(np.int64))).view(np.uint64)
    return np.where(r < 0.04, np.uint64(0), np.where(r < 0.25, small, np.where(r < 0.35, negsmall,
                    _u64_np(rng, size)))).astype(np.uint64)


def _shift_np(rng, size):
    r = rng.random(size)
    return np.where(r < 0.5, rng.integers(0, 32, size), np.where(r < 0.8, rng.integers(32, 65, size), np.where(
        r < 0.9, rng.integers(65, 300, size), rng.integers(0, 1 << 32, size)))).astype(np.uint32)


def _f32_np(rng, size):
    r = rng.random(size)
    spec = np.asarray(F32_SPECIALS, np.uint32)[rng.integers(0, len(F32_SPECIALS), size)]
    sign = (rng.integers(0, 2, size).astype(np.uint32) << np.uint32(31))
    sub = rng.integers(1, 1 << 23, size).astype(np.uint32) | sign
    frac = lambda: rng.integers(0, 1 << 23, size).astype(np.uint32)  # noqa: E731
    normal = (rng.integers(1, 255, size).astype(np.uint32) << np.uint32(23)) | frac() | sign
    mid = (rng.integers(100, 160, size).astype(np.uint32) << np.uint32(23)) | frac() | sign  # |x| in 2^-27..2^33
    anyb = rng.integers(0, 1 << 32, size, dtype=np.uint64).astype(np.uint32)
    out = np.where(r < 0.6, mid, np.where(r < 0.85, normal, anyb))
    return np.where(r < 0.25, spec, np.where(r < 0.37, sub, out)).astype(np.uint32)


def _f32cvt_np(rng, size):
    r = rng.random(size)
    base = np.asarray(_CVT_BASES, np.float64)[rng.integers(0, len(_CVT_BASES), size)]
    sign = np.where(rng.integers(0, 2, size) == 1, -1.0, 1.0)
    near = (base * sign).astype(np.float32).view(np.uint32).astype(np.int64) + rng.integers(-3, 4, size)
    ints = (rng.integers(-(1 << 40), 1 << 40, size).astype(np.float64) / np.exp2(rng.integers(0, 30, size)))
    halves = rng.integers(-40, 41, size).astype(np.float64) * 0.5 + rng.choice([0.0, 0.25, -0.25, 1e-7], size)
    return np.where(r < 0.35, (near & M32).astype(np.uint32), np.where(
        r < 0.55, ints.astype(np.float32).view(np.uint32), np.where(
            r < 0.75, halves.astype(np.float32).view(np.uint32), _f32_np(rng, size)))).astype(np.uint32)


def _f16x2_np(rng, size):
    def half(n):
        r = rng.random(n)
        spec = np.asarray(F16_SPECIALS, np.uint32)[rng.integers(0, len(F16_SPECIALS), n)]
        return np.where(r < 0.35, spec, rng.integers(0, 1 << 16, n).astype(np.uint32))
    return ((half(size) << np.uint32(16)) | half(size)).astype(np.uint32)


def _sindex_np(rng, size):
    return rng.integers(-512, 512, size).astype(np.int32).view(np.uint32)


def _lane_np(rng, size):
    r = rng.random(size)
    return np.where(r < 0.6, rng.integers(0, 32, size), np.where(r < 0.8, rng.integers(-40, 80, size) & M32,
                    rng.integers(0, 1 << 32, size))).astype(np.uint32)


def _table_np(rng, size):
    # a fixed table whose entries name their index (checked loads): tbl[j] = (j * golden) ^ 0x5bd1e995
    j = np.arange(size, dtype=np.uint64)
    return ((j * np.uint64(0x9E3779B9)) & np.uint64(M32) ^ np.uint64(0x5BD1E995)).astype(np.uint32)


DRAWS: dict[str, Callable] = {
    "u32": _u32_np, "u64": _u64_np, "div32": _divisor32_np, "div64": _divisor64_np, "shift": _shift_np,
    "f32": _f32_np, "f32cvt": _f32cvt_np, "f16x2": _f16x2_np, "sindex": _sindex_np, "lane": _lane_np,
    "table": _table_np, "zeros": lambda rng, size: np.zeros(size, np.uint32),
    "u8": lambda rng, size: rng.integers(0, 256, size).astype(np.uint8),
    "u16": lambda rng, size: np.where(rng.random(size) < 0.3, rng.choice([0, 0x7FFF, 0x8000, 0xFFFF, 1], size),
                                      rng.integers(0, 1 << 16, size)).astype(np.uint16),
}


def _elements(kind: str):
    """hypothesis element strategy of a draw kind (None: the kind is not drawn element by element)."""
    from hypothesis import strategies as st

    from flashsim.strategies import float_bits  # needs hypothesis, the test extra

    u32 = st.one_of(st.sampled_from(EDGE32), st.integers(0, M32), st.integers(-1024, 1024).map(lambda v: v & M32))
    u64 = st.one_of(st.sampled_from(EDGE64), st.integers(0, M64), st.integers(0, M32),
                    st.integers(-(1 << 31), 1 << 31).map(lambda v: v & M64))
    table = {
        "u32": u32, "u64": u64,
        "div32": st.one_of(st.integers(0, 100), st.integers(-100, -1).map(lambda v: v & M32), u32),
        "div64": st.one_of(st.integers(0, 100), st.integers(-100, -1).map(lambda v: v & M64), u64),
        "shift": st.one_of(st.integers(0, 70), st.integers(0, M32)),
        "f32": st.one_of(st.sampled_from(F32_SPECIALS), float_bits("f32")),
        "f32cvt": st.one_of(
            st.tuples(st.sampled_from(_CVT_BASES), st.sampled_from([1.0, -1.0]), st.integers(-3, 3)).map(
                lambda t: (int(np.float32(t[0] * t[1]).view(np.uint32)) + t[2]) & M32),
            st.integers(-(1 << 20), 1 << 20).map(lambda v: int(np.float32(v / 4).view(np.uint32))),
            float_bits("f32")),
        "f16x2": st.tuples(st.one_of(st.sampled_from(F16_SPECIALS), st.integers(0, 0xFFFF)),
                           st.one_of(st.sampled_from(F16_SPECIALS), st.integers(0, 0xFFFF))).map(
            lambda t: (t[0] << 16) | t[1]),
        "sindex": st.integers(-512, 511).map(lambda v: v & M32),
        "lane": st.one_of(st.integers(0, 31), st.integers(-40, 80).map(lambda v: v & M32), st.integers(0, M32)),
        "u8": st.integers(0, 255),
        "u16": st.one_of(st.sampled_from([0, 1, 0x7FFF, 0x8000, 0xFFFF]), st.integers(0, 0xFFFF)),
    }
    return table.get(kind)


# ================================================================================================ table
_DT = {"u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}


@dataclass(frozen=True)
class Arg:
    """One kernel argument. ``role``: 'in' (a device array read by the kernel), 'out' (a device array the
    kernel writes; ``draw`` gives its initial contents, zeros by default) or 'param' (a scalar).
    ``per``: elements per index (per thread for uniform probes, per block for 'block' outputs)."""

    role: str
    dtype: str = "u32"
    draw: str = "u32"
    per: int = 1
    scope: str = "elem"  # 'elem': n * per elements; 'block': grid * per; 'fixed': per elements

    def size(self, n: int, grid: int, block: int, uniform: bool) -> int:
        if self.scope == "fixed":
            return self.per
        if self.scope == "block":
            return grid * self.per
        return (grid * block if uniform else n) * self.per


@dataclass(frozen=True)
class Probe:
    """One probe kernel: its arguments (in kernel order: inputs, outputs, params, then ``int n`` for lane
    probes), the instructions its SASS must contain, and its numpy reference.

    ``sass`` patterns: 'OP.MOD1.MOD2' matches an instruction with base opcode OP whose modifiers include
    MOD1 and MOD2; '|regex' after it must also match the operand text (e.g. 'IMAD.HI.U32|^R\\d+,P\\d').
    ``uniform``: computed from parameters and blockIdx only (fixed grid, per-thread outputs, no n).
    ``prepare(case, rng)``: adjusts the drawn inputs (e.g. makes some CAS comparisons succeed).
    ``pending``: why the interpreter cannot run it yet (an unmodelled instruction): the CPU tests expect
    NotImplementedError, the GPU recorder still records the GPU's answer."""

    name: str
    sass: tuple[str, ...]
    args: tuple[Arg, ...]
    ref: Callable | None = None
    block: int = 128
    n: int = 2048  # elements per recorded GPU case
    uniform: bool = False
    grid: int = 0  # uniform probes: blocks per launch
    prepare: Callable | None = None
    pending: str = ""
    note: str = ""

    @property
    def ins(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "in")

    @property
    def outs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "out")

    @property
    def params(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "param")


def I(dtype="u32", draw=None, per=1, scope="elem"):  # noqa: E743 - short table constructors
    return Arg("in", dtype, draw or dtype, per, scope)


def O(dtype="u32", per=1, draw="zeros", scope="elem"):  # noqa: E743
    return Arg("out", dtype, draw, per, scope)


def P(dtype="u32", draw=None):
    return Arg("param", dtype, draw or dtype)


# ================================================================================================ references
# Reference helpers: every input is an array of raw bits; results are (n, k) arrays of bits or
# (bits, defined) pairs where ``defined`` masks the elements whose C semantics are defined.

def _w32(x) -> np.ndarray:
    """Wrap integer values (int64/uint64/object arrays) to uint32 bits."""
    a = np.asarray(x)
    if a.dtype == object:
        return np.array([int(v) & M32 for v in a.ravel()], np.uint32).reshape(a.shape)
    return (a.astype(np.uint64) & np.uint64(M32)).astype(np.uint32) if a.dtype.kind == "u" else \
        (a.astype(np.int64) & M32).astype(np.uint32)


def _w64(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype == object:
        return np.array([int(v) & M64 for v in a.ravel()], np.uint64).reshape(a.shape)
    return a.astype(np.int64).view(np.uint64) if a.dtype.kind == "i" else a.astype(np.uint64)


def _s32(x) -> np.ndarray:
    return np.asarray(x, np.uint32).view(np.int32).astype(np.int64)


def _s64(x) -> np.ndarray:
    return np.asarray(x, np.uint64).view(np.int64)


def _obj(x, signed=False, bits=64) -> np.ndarray:
    """Python ints (exact arithmetic) of an unsigned array; ``signed`` reinterprets as two's complement."""
    vals = [int(v) for v in np.asarray(x).ravel()]
    if signed:
        vals = [v - (1 << bits) if v >> (bits - 1) else v for v in vals]
    out = np.empty(len(vals), object)
    out[:] = vals
    return out.reshape(np.asarray(x).shape)


def _cols(*cols, dtype=np.uint32) -> np.ndarray:
    return np.stack([np.asarray(c).astype(dtype) for c in cols], axis=-1).ravel()


def _tdiv(a: int, b: int) -> int:
    """C's truncating division of Python ints."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _flush(bits) -> np.ndarray:
    """-ftz: subnormal f32 operands read as zeros of their sign."""
    b = np.asarray(bits, np.uint32)
    return np.where((b & np.uint32(0x7F800000)) == 0, b & np.uint32(0x80000000), b).astype(np.uint32)


def _f(bits) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(np.float32)


# ---- exact IEEE binary32 arithmetic on Python Fractions (independent of flashsim.numerics)
_CANON = 0x7FFFFFFF


def _dec(b: int, ftz: bool):
    """bits -> ('nan',) | ('inf', sign) | ('num', sign, Fraction)."""
    s = b >> 31
    e = (b >> 23) & 0xFF
    m = b & 0x7FFFFF
    if e == 0xFF:
        return ("nan",) if m else ("inf", s)
    if e == 0:
        if ftz:
            m = 0
        v = Fraction(m, 1 << 149)
    else:
        v = Fraction(m | 0x800000, 1) * Fraction(2) ** (e - 150)
    return ("num", s, -v if s else v)


def _round_sig(q: Fraction, bits: int, mode: str, min_exp: int | None) -> Fraction:
    """Round |q| > 0 to ``bits`` significant bits (quantum not below 2^min_exp) in ``mode``; signed."""
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum_exp = e - (bits - 1)
    if min_exp is not None:
        quantum_exp = max(quantum_exp, min_exp)
    scaled = a / Fraction(2) ** quantum_exp
    k = scaled.numerator // scaled.denominator
    rem = scaled - k
    if rem:
        if mode == "rn":
            if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and k % 2 == 1):
                k += 1
        elif mode == "rz":
            pass
        elif mode == "rm":
            k += 1 if neg else 0
        elif mode == "rp":
            k += 0 if neg else 1
    r = Fraction(k) * Fraction(2) ** quantum_exp
    return -r if neg else r


_MAXF = Fraction((1 << 24) - 1) * Fraction(2) ** 104


def _enc(q: Fraction, sign_if_zero: int, mode: str, ftz: bool) -> int:
    """An exact value rounded to binary32 bits (IEEE; with ``ftz`` a result that is tiny after rounding
    to 24 bits with an unbounded exponent, below 2^-126, becomes a zero of its sign)."""
    if q == 0:
        return sign_if_zero << 31
    neg = q < 0
    if ftz:
        r = _round_sig(q, 24, mode, None)
        if abs(r) < Fraction(1, 1 << 126):
            return int(neg) << 31
    else:
        r = _round_sig(q, 24, mode, -149)
    if abs(r) > _MAXF:
        to_inf = mode == "rn" or (mode == "rp" and not neg) or (mode == "rm" and neg)
        return (int(neg) << 31) | (0x7F800000 if to_inf else 0x7F7FFFFF)
    if r == 0:
        return int(neg) << 31
    a = abs(r)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    if e < -126:
        body = int(a * (1 << 149))
    else:
        body = ((e + 127) << 23) | (int(a / Fraction(2) ** (e - 23)) - (1 << 23))
    return (int(neg) << 31) | body


def _zero_sum_sign(mode: str) -> int:
    return 1 if mode == "rm" else 0


def f32_add(a: int, b: int, mode: str = "rn", ftz: bool = False) -> int:
    x, y = _dec(a, ftz), _dec(b, ftz)
    if x[0] == "nan" or y[0] == "nan":
        return _CANON
    if x[0] == "inf" or y[0] == "inf":
        if x[0] == "inf" and y[0] == "inf" and x[1] != y[1]:
            return _CANON
        s = x[1] if x[0] == "inf" else y[1]
        return (s << 31) | 0x7F800000
    q = x[2] + y[2]
    if q == 0:
        zs = x[1] if (x[2] == 0 and y[2] == 0 and x[1] == y[1]) else _zero_sum_sign(mode)
        return zs << 31
    return _enc(q, 0, mode, ftz)


def f32_mul(a: int, b: int, mode: str = "rn", ftz: bool = False) -> int:
    x, y = _dec(a, ftz), _dec(b, ftz)
    if x[0] == "nan" or y[0] == "nan":
        return _CANON
    s = (x[1] ^ y[1])
    if x[0] == "inf" or y[0] == "inf":
        if (x[0] == "num" and x[2] == 0) or (y[0] == "num" and y[2] == 0):
            return _CANON
        return (s << 31) | 0x7F800000
    return _enc(x[2] * y[2], s, mode, ftz)


def f32_fma(a: int, b: int, c: int, mode: str = "rn", ftz: bool = False) -> int:
    x, y, z = _dec(a, ftz), _dec(b, ftz), _dec(c, ftz)
    if "nan" in (x[0], y[0], z[0]):
        return _CANON
    ps = x[1] ^ y[1]
    if x[0] == "inf" or y[0] == "inf":
        if (x[0] == "num" and x[2] == 0) or (y[0] == "num" and y[2] == 0):
            return _CANON
        if z[0] == "inf" and z[1] != ps:
            return _CANON
        return (ps << 31) | 0x7F800000
    if z[0] == "inf":
        return (z[1] << 31) | 0x7F800000
    p = x[2] * y[2]
    q = p + z[2]
    if q == 0:
        zs = ps if (p == 0 and z[2] == 0 and ps == z[1]) else _zero_sum_sign(mode)
        return zs << 31
    return _enc(q, 0, mode, ftz)


def f32_div(a: int, b: int, mode: str = "rn", ftz: bool = False) -> int:
    x, y = _dec(a, ftz), _dec(b, ftz)
    if x[0] == "nan" or y[0] == "nan":
        return _CANON
    s = x[1] ^ y[1]
    if x[0] == "inf":
        return _CANON if y[0] == "inf" else (s << 31) | 0x7F800000
    if y[0] == "inf":
        return s << 31
    if y[2] == 0:
        return _CANON if x[2] == 0 else (s << 31) | 0x7F800000
    return _enc(x[2] / y[2], s, mode, ftz)


def _vec(fn, *arrays, **kw) -> np.ndarray:
    arrs = [np.asarray(a, np.uint32).ravel() for a in arrays]
    return np.array([fn(*(int(v) for v in vals), **kw) for vals in zip(*arrs)], np.uint32)


def _sat(bits) -> np.ndarray:
    """.sat: clamp to [+0, 1]; NaN and every value <= 0 (-0 included) give +0."""
    b = np.asarray(bits, np.uint32)
    v = b.view(np.float32)
    with np.errstate(invalid="ignore"):
        return np.where(v > 1.0, np.uint32(0x3F800000), np.where(v > 0.0, b, np.uint32(0))).astype(np.uint32)


def _fminmax(a, b, want_max: bool, nan_prop: bool = False, ftz: bool = False) -> np.ndarray:
    x, y = (np.asarray(a, np.uint32), np.asarray(b, np.uint32))
    if ftz:
        x, y = _flush(x), _flush(y)
    fx, fy = x.view(np.float32), y.view(np.float32)
    nx, ny = np.isnan(fx), np.isnan(fy)
    with np.errstate(invalid="ignore"):
        # -0 orders below +0
        kx = np.where(fx == 0, np.where(x >> np.uint32(31), -0.5, 0.5) * 1e-300, fx.astype(np.float64))
        ky = np.where(fy == 0, np.where(y >> np.uint32(31), -0.5, 0.5) * 1e-300, fy.astype(np.float64))
        pick_x = kx > ky if want_max else kx < ky
    out = np.where(pick_x, x, y)
    if nan_prop:
        out = np.where(nx | ny, np.uint32(_CANON), out)
    else:
        out = np.where(nx & ~ny, y, np.where(ny & ~nx, x, out))
        out = np.where(nx & ny, np.uint32(_CANON), out)
    return out.astype(np.uint32)


def _int_to_f32(v: int, mode: str) -> int:
    if v == 0:
        return 0
    return _enc(Fraction(v), 0, mode, False)


def _f32_to_int(b: int, mode: str, lo: int, hi: int, ftz: bool) -> int:
    d = _dec(b, ftz)
    if d[0] == "nan":
        return 0
    if d[0] == "inf":
        return hi if d[1] == 0 else lo
    q = d[2]
    fl = q.numerator // q.denominator
    if q == fl:
        r = fl
    elif mode == "rm":
        r = fl
    elif mode == "rp":
        r = fl + 1
    elif mode == "rz":
        r = fl if q > 0 else fl + 1
    else:
        rem = q - fl
        r = fl + (1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2) else 0)
    return min(max(r, lo), hi)


def _lop3(a, b, c, lut):
    a, b, c = (np.asarray(v, np.uint32) for v in (a, b, c))
    out = np.zeros(a.shape, np.uint32)
    for k in range(8):
        if (lut >> k) & 1:
            out |= (a if k & 4 else ~a) & (b if k & 2 else ~b) & (c if k & 1 else ~c)
    return out


def _prmt(a, b, s, mode=None):
    a, b, s = (np.asarray(v, np.uint32).astype(np.uint64) for v in (a, b, s))
    both = a | (b << np.uint64(32))
    byte = lambda k: ((both >> (np.asarray(k, np.uint64) * np.uint64(8))) & np.uint64(0xFF))  # noqa: E731
    out = np.zeros(a.shape, np.uint64)
    if mode is None:
        for i in range(4):
            nib = (s >> np.uint64(4 * i)) & np.uint64(0xF)
            v = byte(nib & np.uint64(7))
            v = np.where(nib & np.uint64(8), np.where(v & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), v)
            out |= v << np.uint64(8 * i)
        return out.astype(np.uint32)
    # PTX ISA prmt table: d.b3 d.b2 d.b1 d.b0 for c[1:0] = 0..3
    table = {"f4e": ("3210", "4321", "5432", "6543"), "b4e": ("5670", "6701", "7012", "0123"),
             "rc8": ("0000", "1111", "2222", "3333"), "ecl": ("3210", "3211", "3222", "3333"),
             "ecr": ("0000", "1110", "2210", "3210"), "rc16": ("1010", "3232", "1010", "3232")}[mode]
    c = (s & np.uint64(3)).astype(np.int64)
    for i in range(4):  # d.b_i
        k = np.array([int(table[cc][3 - i]) for cc in range(4)], np.uint64)[c]
        out |= byte(k) << np.uint64(8 * i)
    return out.astype(np.uint32)


def _popc(x, bits=32):
    x = np.asarray(x).astype(np.uint64)
    return np.array([bin(int(v)).count("1") for v in x.ravel()], np.uint32).reshape(x.shape)


def _clz(x, bits=32):
    x = np.asarray(x).astype(np.uint64)
    return np.array([bits - int(v).bit_length() for v in x.ravel()], np.uint32).reshape(x.shape)


def _brev(x, bits=32):
    x = np.asarray(x).astype(np.uint64)
    return np.array([int(format(int(v), f"0{bits}b")[::-1], 2) for v in x.ravel()], np.uint64).reshape(x.shape)


def _ffs(x, bits=32):
    x = np.asarray(x).astype(np.uint64)
    return np.array([(int(v) & -int(v)).bit_length() for v in x.ravel()], np.uint32).reshape(x.shape)


def _sra(x, k, bits=32):
    """Arithmetic right shift of ``bits``-wide values by k (k clamped to bits - 1), as bits."""
    if bits == 32:
        return _w32(_s32(x) >> np.minimum(np.asarray(k, np.int64), 31))
    return _s64(x) >> np.minimum(np.asarray(k, np.int64), 63)


# ---- per-probe references: ref(case) -> list over outputs of array | (array, defined) | None

def _r_add32(c):
    a, b, z = (x.astype(np.uint64) for x in c.inputs)
    return [_cols(_w32(a + b), _w32(a - b), _w32(a + b + z), _w32(a - b - z))]


def _r_add64(c):
    a, b, z = c.inputs
    with np.errstate(over="ignore"):
        return [_cols(a + b, a - b, a + b + z, z - a - b, dtype=np.uint64)]


def _r_add3_64(c):
    a, b, z = c.inputs
    with np.errstate(over="ignore"):
        return [_cols(a + b + z, a - b - z, a + b + (z << np.uint64(1)), dtype=np.uint64)]


def _words(x, k):
    """(n*k,) uint32 words -> Python ints (little-endian, k words each)."""
    w = np.asarray(x, np.uint32).reshape(-1, k).astype(object)
    return [sum(int(v[j]) << (32 * j) for j in range(k)) for v in w]


def _r_addc128(c):
    a, b = _words(c.inputs[0], 4), _words(c.inputs[1], 4)
    out = []
    for x, y in zip(a, b):
        s, d = (x + y) % (1 << 128), (x - y) % (1 << 128)
        out += [(s >> (32 * j)) & M32 for j in range(4)] + [(d >> (32 * j)) & M32 for j in range(4)]
    return [np.array(out, np.uint32)]


def _r_carry_out(c):
    a, b, z = (x.astype(np.uint64) for x in c.inputs)
    s = a + b
    return [_cols(_w32(s), s >> np.uint64(32), _w32(a - z), np.where(a < z, M32, 0))]


def _r_mul32(c):
    a, b, z = (x.astype(np.uint64) for x in c.inputs)
    p = a * b
    sp = (_s32(c.inputs[0]) * _s32(c.inputs[1]))
    sv = (_s32(c.inputs[0]) * _s32(c.inputs[2]))
    return [_cols(_w32(p), _w32(p + z), p >> np.uint64(32), _w32(sp >> 32), _w32((p >> np.uint64(32)) ^ p),
                  _w32((sv >> 32) + sv), _w32(a * np.uint64(0x9E3779B9) + np.uint64(12345)),
                  _w32(a * np.uint64(7) - b * np.uint64(12)))]


def _r_mad_wide(c):
    a, b, z = c.inputs
    with np.errstate(over="ignore"):
        u = a.astype(np.uint64) * b.astype(np.uint64) + z
        s = (_s32(a) * _s32(b)).view(np.uint64) + z
    return [_cols(u, s, dtype=np.uint64)]


def _r_mad_hi(c):
    a, b, z = (x.astype(np.uint64) for x in c.inputs)
    p = a * b
    hi = p >> np.uint64(32)
    shi = _w32((_s32(c.inputs[0]) * _s32(c.inputs[1])) >> 32).astype(np.uint64)
    tot = _obj(p) + _obj(z) * (1 + (1 << 32))
    return [_cols(_w32(hi + z), _w32(shi + z), _w32(tot), _w32(np.array([int(t) >> 32 for t in tot], object)),
                  np.array([int(t) >> 64 for t in tot], np.uint32))]


def _r_mul64(c):
    x, y = _obj(c.inputs[0]), _obj(c.inputs[1])
    sx, sy = _obj(c.inputs[0], True), _obj(c.inputs[1], True)
    return [_cols(_w64(x * y), _w64(np.array([int(v) >> 64 for v in x * y], object)),
                  _w64(np.array([int(v) >> 64 for v in sx * sy], object)), _w64(x * 0x9E3779B97F4A7C15),
                  dtype=np.uint64)]


def _r_udiv32(c):
    a, b = c.inputs
    ok = b != 0
    bb = np.where(ok, b, 1)
    return [(_cols(a // bb, a % bb), np.repeat(ok, 2))]


def _r_sdiv32(c):
    a, b = _s32(c.inputs[0]), _s32(c.inputs[1])
    ok = (b != 0) & ~((a == -(1 << 31)) & (b == -1))
    q = np.array([_tdiv(int(x), int(y)) if o else 0 for x, y, o in zip(a, b, ok)], np.int64)
    return [(_cols(_w32(q), _w32(a - q * b)), np.repeat(ok, 2))]


def _r_div32_const(c):
    x = c.inputs[0]
    s = _s32(x)
    td = lambda d: np.array([_tdiv(int(v), d) for v in s], np.int64)  # noqa: E731
    q7, q16 = td(7), td(16)
    return [_cols(x // 7, x % 7, x // 1000, x // 16, _w32(q7), _w32(s - 7 * q7), _w32(td(-3)), _w32(q16),
                  _w32(s - 16 * q16), x // 0x80000001)]


def _r_udiv64(c):
    a, b = c.inputs
    ok = b != 0
    bb = np.where(ok, b, 1).astype(np.uint64)
    return [(_cols(a // bb, a % bb, dtype=np.uint64), np.repeat(ok, 2))]


def _r_sdiv64(c):
    a, b = _obj(c.inputs[0], True), _obj(c.inputs[1], True)
    ok = np.array([y != 0 and not (x == -(1 << 63) and y == -1) for x, y in zip(a, b)], bool)
    q = np.array([_tdiv(x, y) if o else 0 for x, y, o in zip(a, b, ok)], object)
    r = np.array([x - qq * y for x, y, qq in zip(a, b, q)], object)
    return [(_cols(_w64(q), _w64(r), dtype=np.uint64), np.repeat(ok, 2))]


def _r_div64_const(c):
    x = c.inputs[0]
    s = _obj(x, True)
    q7 = np.array([_tdiv(v, 7) for v in s], object)
    q10 = np.array([_tdiv(v, 10) for v in s], object)
    return [_cols(x // np.uint64(10), x % np.uint64(1000000007), _w64(q7), _w64(s - 10 * q10), dtype=np.uint64)]


def _r_lea(c):
    tbl, j, k = c.inputs
    j = _s32(j)
    ks = _s32(k)
    t16 = tbl.view(np.uint16)
    k64 = k.astype(np.int64)
    return [_cols(tbl[(k64 & 511) + (k64 >> 23)], tbl[1024 + j + (ks >> 23)], tbl[1024 + j + (ks >> 23)],
                  t16[2048 + 2 * j + (ks >> 24)], _w32(k64 * 9 + (j << 5)), _w32((k64 & 511) + (k64 >> 23)))]


def _r_lop3(c):
    x, y, z = c.inputs
    return [_cols((x & ~y) | z, x ^ y ^ z, (x & y) | (~x & z), ~(x | y) & (z ^ np.uint32(0x5A5A5A5A)),
                  np.where((x & y) != 0, z, ~z), np.where(((x ^ z) & np.uint32(0xFF00FF00)) == 0, y, 0x12345678))]


def _r_lop3_ptx(c):
    x, y, z = c.inputs
    return [_cols(_lop3(x, y, z, 0x96), _lop3(x, y, z, 0x1E), _lop3(x, y, z, 0xE8))]


def _r_isetp_bop(c):
    x, y, z = c.inputs
    p, q, s = x < y, y < z, x != z
    t = p ^ q
    u = t & s
    t = u | ~p
    return [(t.astype(np.uint32) + np.where(u, 2, 0)).astype(np.uint32)]


def _r_plop3(c):
    x, y, z = c.inputs
    fx, fy = _f(_flush(x)), _f(_flush(y))
    with np.errstate(invalid="ignore"):
        p = fx < fy
    q, r, s = x < z, (y & 3) == 1, np.isnan(_f(x))
    m = ((p ^ q) & (r | s)).astype(np.uint32) | (((p & ~r) | (q & s)).astype(np.uint32) << 1) | \
        ((p == (q != r)).astype(np.uint32) << 2)
    return [m]


def _r_shift32(c):
    x, k = c.inputs
    k64 = k.astype(np.int64)
    xs = x.astype(np.uint64)
    shl = np.where(k64 >= 32, 0, _w32(xs << np.minimum(k64, 31).astype(np.uint64)))
    shr = np.where(k64 >= 32, 0, xs >> np.minimum(k64, 31).astype(np.uint64))
    m = (k64 & 31).astype(np.uint64)
    return [_cols(shl, shr, _sra(x, k64), _w32(xs << m), xs >> m, _sra(x, k64 & 31))]


def _r_shift64(c):
    x, k = c.inputs
    k64 = k.astype(np.int64)
    kk = np.minimum(k64, 63).astype(np.uint64)
    shl = np.where(k64 >= 64, np.uint64(0), x << kk)
    shr = np.where(k64 >= 64, np.uint64(0), x >> kk)
    return [_cols(shl, shr, _sra(x, k64, 64).view(np.uint64), x << np.uint64(13), x >> np.uint64(40),
                  _sra(x, 37, 64).view(np.uint64), dtype=np.uint64)]


def _funnel_l(lo, hi, s):
    w = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
    return _w32(np.where(s >= 64, np.uint64(0), w << np.minimum(s, 63).astype(np.uint64)) >> np.uint64(32))


def _funnel_r(lo, hi, s):
    w = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
    return _w32(w >> np.minimum(s, 63).astype(np.uint64))


def _r_funnel(c):
    lo, hi, s = c.inputs
    s64 = s.astype(np.int64)
    rot = (s64 & 31).astype(np.uint64)
    x = lo.astype(np.uint64)
    rotl = _w32((x << rot) | (x >> ((np.uint64(32) - rot) & np.uint64(31))))
    return [_cols(_funnel_l(lo, hi, s64 & 31), _funnel_r(lo, hi, s64 & 31), _funnel_l(lo, hi, np.minimum(s64, 32)),
                  _funnel_r(lo, hi, np.minimum(s64, 32)), rotl, _funnel_r(lo, lo, np.full_like(s64, 7)))]


def _r_prmt(c):
    x, y, s = c.inputs
    pack = (x & 0xFF) | ((y & 0xFF) << 8) | ((x >> 24) << 16) | ((y >> 16) << 24)
    sx = ((x >> 8) & 0xFF).astype(np.int64)
    return [_cols(_prmt(x, y, s & 0x7777), _prmt(x, y, np.full_like(x, 0x7531)), pack,
                  _w32(np.where(sx >= 128, sx - 256, sx)))]


def _r_prmt_modes(c):
    x, y, s = c.inputs
    return [_cols(*(_prmt(x, y, s, m) for m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")))]


def _cmpmask(x, y, p, q, big):
    bits = [x < y, x <= y, x > y, x >= y, x == y, x != y, p < q, p <= q, p > q, p >= q, p < 0, big]
    return sum(b.astype(np.uint32) << np.uint32(i) for i, b in enumerate(bits)).astype(np.uint32)


def _r_isetp32(c):
    x, y = c.inputs
    p, q = _s32(x), _s32(y)
    return [_cols(_cmpmask(x, y, p, q, x > 1000), np.where(p < q, x, y))]


def _r_isetp64(c):
    x, y = c.inputs
    return [_cmpmask(x, y, _s64(x), _s64(y), x > np.uint64(1000))]


def _r_minmax(c):
    x, y = c.inputs
    p, q = _s32(x), _s32(y)
    return [_cols(_w32(np.abs(p)), _w32(np.minimum(p, q)), _w32(np.maximum(p, q)), np.minimum(x, y),
                  np.maximum(x, y), _w32(np.maximum(p, -7)))]


def _r_minmax64(c):
    x, y = c.inputs
    p, q = _s64(x), _s64(y)
    with np.errstate(over="ignore"):
        ab = np.where(p < 0, -p, p).view(np.uint64)
    return [_cols(ab, np.minimum(p, q).view(np.uint64), np.maximum(p, q).view(np.uint64), np.minimum(x, y),
                  np.maximum(x, y), dtype=np.uint64)]


def _r_viaddmnmx(c):
    x, y, z = c.inputs
    s = _w32(x.astype(np.uint64) + y)
    return [_cols(_w32(np.minimum(_s32(s), _s32(z))), _w32(np.maximum(_s32(s), _s32(z))), np.minimum(s, z),
                  np.maximum(_w32(x.astype(np.uint64) + 100), z))]


def _bfind(x, signed=False, shiftamt=False):
    x = np.asarray(x, np.uint32)
    if signed:
        x = np.where(x >> np.uint32(31), ~x, x).astype(np.uint32)
    pos = 31 - _clz(x).astype(np.int64)
    if shiftamt:
        pos = 31 - pos
    return np.where(x == 0, M32, pos).astype(np.uint32)


def _r_bits(c):
    x, y = c.inputs
    return [_cols(_popc(x), _popc(y), _clz(x), _clz(y, 64), _ffs(x), _ffs(y, 64), _brev(x),
                  _w32(_brev(y, 64) >> np.uint64(17)), _bfind(x), _bfind(x, signed=True), _bfind(x, shiftamt=True),
                  _w32(_brev(y, 64)))]


def _r_i2f32(c):
    x = c.inputs[0]
    cols = [_vec(lambda v, m=m: _int_to_f32(v - (1 << 32) if v >> 31 else v, m), x) for m in ("rn", "rz", "rm", "rp")]
    cols += [_vec(lambda v, m=m: _int_to_f32(v, m), x) for m in ("rn", "rz", "rm", "rp")]
    return [_cols(*cols)]


def _r_i2f64(c):
    x = c.inputs[0]
    sv, uv = _obj(x, True), _obj(x)
    cols = [np.array([_int_to_f32(v, m) for v in sv], np.uint32) for m in ("rn", "rz", "rm", "rp")]
    cols += [np.array([_int_to_f32(v, m) for v in uv], np.uint32) for m in ("rn", "rz", "rm", "rp")]
    return [_cols(*cols)]


_MODES = ("rn", "rz", "rm", "rp")


def _r_f2i32(c):
    x = c.inputs[0]
    cols = [_vec(lambda b, m=m: _f32_to_int(b, m, -(1 << 31), (1 << 31) - 1, True) & M32, x) for m in _MODES]
    cols += [_vec(lambda b, m=m: _f32_to_int(b, m, 0, M32, True), x) for m in _MODES]
    return [_cols(*cols)]


def _r_f2i64(c):
    # NaN: the PTX ISA says 0, the H100 gives 0x8000000000000000 in all eight 64-bit forms (this probe's
    # first GPU run, 2026-11-24); the reference follows the hardware
    x = np.asarray(c.inputs[0], np.uint32)
    nan = (x & 0x7FFFFFFF) > 0x7F800000
    cols = [np.array([_f32_to_int(int(b), m, -(1 << 63), (1 << 63) - 1, True) & M64 for b in x], np.uint64)
            for m in _MODES]
    cols += [np.array([_f32_to_int(int(b), m, 0, M64, True) for b in x], np.uint64) for m in _MODES]
    cols = [np.where(nan, np.uint64(1 << 63), col) for col in cols]
    return [_cols(*cols, dtype=np.uint64)]


def _r_f2i_noftz(c):
    x = c.inputs[0]
    s32 = lambda m: _vec(lambda b: _f32_to_int(b, m, -(1 << 31), (1 << 31) - 1, False) & M32, x)  # noqa: E731
    return [_cols(s32("rm"), s32("rp"), _vec(lambda b: _f32_to_int(b, "rp", 0, M32, False), x), s32("rn"))]


def _r_fadd(c):
    x, y = c.inputs
    cols = [_vec(f32_add, x, y, mode=m, ftz=True) for m in _MODES]
    return [_cols(*cols, _vec(f32_add, x, y ^ np.uint32(0x80000000), mode="rn", ftz=True))]


def _r_fmul(c):
    x, y = c.inputs
    cols = [_vec(f32_mul, x, y, mode=m, ftz=True) for m in _MODES]
    return [_cols(*cols, _vec(f32_mul, x, np.full_like(x, 0x3F400000), ftz=True))]


def _r_ffma(c):
    x, y, z = c.inputs
    cols = [_vec(f32_fma, x, y, z, mode=m, ftz=True) for m in _MODES]
    neg = np.uint32(0x80000000)
    return [_cols(*cols, _vec(f32_fma, x ^ neg, y, z ^ neg, ftz=True))]


def _r_f32_noftz(c):
    x, y, z = c.inputs
    return [_cols(_vec(f32_add, x, y, mode="rz"), _vec(f32_mul, x, y, mode="rp"), _vec(f32_fma, x, y, z, mode="rm"),
                  _sat(_vec(f32_add, x, y)), _sat(_vec(f32_mul, x, y)), _sat(_vec(f32_fma, x, y, z)),
                  _sat(_vec(f32_fma, x, y, z, ftz=True)))]


def _r_fminmax(c):
    x, y = c.inputs
    absx = x & np.uint32(0x7FFFFFFF)
    return [_cols(_sat(_flush(x)), _fminmax(x, y, False, ftz=True), _fminmax(x, y, True, ftz=True),
                  _fminmax(absx, y ^ np.uint32(0x80000000), True, ftz=True), _fminmax(x, y, True, True),
                  _fminmax(x, y, False, True), _fminmax(x, y, False))]


def _fcmp(x, y, ftz):
    if ftz:
        x, y = _flush(x), _flush(y)
    a, b = _f(x), _f(y)
    nan = np.isnan(a) | np.isnan(b)
    with np.errstate(invalid="ignore"):
        return dict(lt=a < b, le=a <= b, gt=a > b, ge=a >= b, eq=a == b, ne=(a != b) & ~nan, ltu=~(a >= b),
                    leu=~(a > b), gtu=~(a <= b), geu=~(a < b), equ=(a == b) | nan, neu=a != b, num=~nan, nan=nan)


def _bitmask(bits):
    return sum(np.asarray(b).astype(np.uint32) << np.uint32(i) for i, b in enumerate(bits)).astype(np.uint32)


def _r_fsetp(c):
    x, y = c.inputs
    r = _fcmp(x, y, True)
    one = _fcmp(x, np.full_like(x, 0x3F800000), True)
    inf = np.isinf(_f(x))
    m = _bitmask([r["lt"], r["le"], r["gt"], r["ge"], r["eq"], r["neu"], ~r["lt"], ~r["le"], ~r["gt"], ~r["ge"],
                  ~r["eq"], np.isnan(_f(x)), r["nan"], r["num"], one["lt"], inf])
    sel = np.where(r["lt"], x, _vec(f32_add, y, np.full_like(y, 0x3F800000), ftz=True))
    return [_cols(m, sel)]


def _r_fsetp_ptx(c):
    x, y = c.inputs
    r = _fcmp(x, y, False)
    rf = _fcmp(x, y, True)
    order = ("lt", "le", "gt", "ge", "eq", "ne", "ltu", "leu", "gtu", "geu", "equ", "neu", "num", "nan")
    return [_bitmask([r[k] for k in order] + [rf["lt"], rf["equ"]])]


def _r_fsel(c):
    x, y, z = c.inputs
    gt = _fcmp(x, y, True)["gt"]
    p, q, w = _s32(x), _s32(y), _s32(z)
    return [_cols(np.where(gt, z, y), np.where(x & 1, x, z), _w32(np.maximum(_s32(_w32(p + q)), w)),
                  _w32(np.minimum(_s32(_w32(p + 7)), w)))]


def _r_fdiv(c):
    x, y = c.inputs
    return [(_cols(_vec(f32_div, x, y, ftz=True), np.zeros_like(x)), np.repeat([[True, False]], len(x), 0).ravel())]


def _r_frcp(c):
    x = c.inputs[0]
    q = _vec(f32_div, np.full_like(x, 0x3F800000), x, ftz=True)
    return [_cols(q, q)]


def _f16_to_f32(h):
    h = np.asarray(h, np.uint16)
    v = h.view(np.float16).astype(np.float32).view(np.uint32)
    return np.where(np.isnan(h.view(np.float16)), np.uint32(_CANON), v).astype(np.uint32)


def _to16(bits, fmt, relu=False):
    b = np.asarray(bits, np.uint32)
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt == "f16":
            out = b.view(np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)
        else:
            import ml_dtypes

            out = b.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    if relu:
        out = np.where(out >> np.uint32(15), np.uint32(0), out)
    return np.where(np.isnan(b.view(np.float32)), np.uint32(0x7FFF), out).astype(np.uint32)


def _r_half(c):
    x, y = c.inputs
    lo, hi = x & np.uint32(0xFFFF), x >> np.uint32(16)
    pack = lambda a, b, fmt, relu=False: (_to16(a, fmt, relu) << np.uint32(16)) | _to16(b, fmt, relu)  # noqa: E731
    return [_cols(_f16_to_f32(lo), _f16_to_f32(hi), pack(x, y, "f16"), pack(x, y, "bf16"), pack(x, y, "f16", True),
                  _to16(y, "f16"), pack(y, x, "bf16", True))]


def _shfl(v, b, c, mode):
    """PTX shfl.sync on whole warps: v, b, c are (warps, 32) arrays; returns (d, pred)."""
    lane = np.arange(32)
    bval, cval, seg = b & 31, c & 31, (c >> 8) & 31
    max_lane = (lane & seg) | (cval & ~seg)
    min_lane = lane & seg
    if mode == "up":
        j, p = lane - bval, lane - bval >= max_lane
    elif mode == "down":
        j, p = lane + bval, lane + bval <= max_lane
    elif mode == "bfly":
        j, p = lane ^ bval, (lane ^ bval) <= max_lane
    else:
        j = min_lane | (bval & ~seg)
        p = j <= max_lane
    j = np.where(p, j, lane)
    return np.take_along_axis(v, np.clip(j, 0, 31), axis=1), p


def _warps(c, x, fill=0):
    """A lane input padded to whole warps (lanes past n read ``fill``), as (warps, 32)."""
    n = c.n
    w = (n + 31) // 32
    out = np.full(w * 32, fill, np.int64)
    out[:n] = np.asarray(x[:n]).astype(np.int64)
    return out.reshape(w, 32)


def _r_shfl(c):
    v, k = _warps(c, c.inputs[0]), _warps(c, c.inputs[1])
    full = 0x1F
    cols = [
        _shfl(v, k, np.full_like(k, full), "idx")[0], _shfl(v, k, np.full_like(k, (24 << 8) | full), "idx")[0],
        _shfl(v, k & 31, np.full_like(k, full), "bfly")[0],
        _shfl(v, np.full_like(k, 5), np.full_like(k, (16 << 8) | full), "bfly")[0],
        _shfl(v, k & 31, np.zeros_like(k), "up")[0], _shfl(v, np.full_like(k, 3), np.full_like(k, 28 << 8), "up")[0],
        _shfl(v, k & 31, np.full_like(k, full), "down")[0],
        _shfl(v, np.ones_like(k), np.full_like(k, (30 << 8) | full), "down")[0],
    ]
    d, p = _shfl(v, k, np.full_like(k, full), "down")
    cols += [d, p]
    return [_cols(*(np.asarray(col).ravel()[:c.n] for col in cols))]


def _ballot(pred):
    return (pred.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)


def _r_ballot(c):
    v = _warps(c, c.inputs[0]).astype(np.uint32)
    b0 = _ballot((v & 1) == 1)
    b1 = _ballot(v >= 0x80000000)
    b2 = (_ballot((v & 0x30) == 0x30) != 0).astype(np.uint32)
    rep = lambda w: np.repeat(w, 32)[:c.n]  # noqa: E731
    return [_cols(rep(b0), rep(b1), rep(b2))]


def _r_vote(c):
    v = _warps(c, c.inputs[0]).astype(np.uint32)
    anyv = ((v & 0x30) == 0x30).any(axis=1).astype(np.uint32)
    allv = ((v & 6) != 0).all(axis=1).astype(np.uint32)
    return [_cols(np.repeat(anyv, 32)[:c.n], np.repeat(allv, 32)[:c.n])]


def _r_atomic_elem(c):
    x, y = c.inputs
    slots0, f0, w0, _ = c.outs0
    s = slots0.reshape(-1, 6).astype(np.uint64)
    new = s.copy()
    new[:, 0] = _w32(s[:, 0] + x)
    new[:, 1] = x
    new[:, 2] = np.where(s[:, 2] == y, x, s[:, 2])
    new[:, 3] = _w32(np.maximum(_s32(s[:, 3].astype(np.uint32)), _s32(x)))
    new[:, 4] = np.minimum(s[:, 4], x)
    with np.errstate(over="ignore"):
        wadd = (y.astype(np.uint64) << np.uint64(32)) | x
        wnew = w0 + wadd
    out = np.stack([s[:, 0], s[:, 1], s[:, 2], s[:, 3], s[:, 4], _w32(w0 >> np.uint64(16))], axis=1)
    fnew = _vec(f32_add, f0, x, ftz=True)
    # a NaN sum's payload is the atomic unit's choice (C only says NaN): checked GPU against interpreter only
    return [new.astype(np.uint32).ravel(), (fnew, ~np.isnan(_f(fnew))), wnew, out.astype(np.uint32).ravel()]


def _prep_atomic_elem(c, rng):
    slots = c.outs0[0].reshape(-1, 6)
    hit = rng.random(len(slots)) < 0.5
    slots[hit, 2] = c.inputs[1][: len(slots)][hit]


def _r_atomic_bins(c):
    x = c.inputs[0][: c.n]
    acc0, acc640 = c.outs0
    acc = [[int(v) for v in row] for row in acc0.reshape(16, 8)]
    acc64 = [int(v) for v in acc640]
    for v in (int(t) for t in x):
        b = acc[v & 15]
        b[0] = (b[0] + v) & M32
        b[1] = max(b[1], v)
        sv = v - (1 << 32) if v >> 31 else v
        sb = b[2] - (1 << 32) if b[2] >> 31 else b[2]
        b[2] = min(sb, sv) & M32
        b[3] |= v
        b[4] &= v | 0x10000
        b[5] ^= v
        b[6] = f32_add(b[6], int(np.float32(float(((v >> 8) & 0xFF) - 100)).view(np.uint32)), ftz=True)
        b[7] = 0 if b[7] >= M32 else b[7] + 1
        k = (v >> 4) & 7
        acc64[k] = (acc64[k] + v * 0x10001) & M64
    return [np.array(acc, np.uint32).ravel(), np.array(acc64, np.uint64)]


def _prep_atomic_bins(c, rng):
    acc = c.outs0[0].reshape(16, 8)
    acc[:, 6] = (rng.integers(-1000, 1000, 16).astype(np.float32)).view(np.uint32)


def _r_atomic_block(c):
    x = c.inputs[0]
    acc = c.outs0[0].reshape(-1, 4).astype(np.int64).copy()
    for b in range(acc.shape[0]):
        xs = x[b * c.probe.block: min(c.n, (b + 1) * c.probe.block)]
        if len(xs) == 0:
            continue
        acc[b, 0] = (acc[b, 0] + int(xs.astype(np.uint64).sum())) & M32
        acc[b, 1] = max(acc[b, 1], int(xs.max()))
        acc[b, 2] = int(min(int(_s32(np.uint32(acc[b, 2]))), int(_s32(xs).min()))) & M32
        acc[b, 3] = acc[b, 3] ^ int(np.bitwise_xor.reduce(xs))
    return [acc.astype(np.uint32).ravel()]


def _r_atomic_shared(c):
    x, y = c.inputs
    n, B = c.n, c.probe.block
    t = (np.arange(n) % B).astype(np.uint64)
    old0 = 1000 + t
    out0 = _w32(old0 + old0 + x)
    out1 = np.uint32(0x55555555) ^ y
    cmp = np.where((y & 7) != 0, _w32(7 * t), y)
    old2 = _w32(7 * t)
    new2 = np.where(old2 == cmp, x, old2)
    out2 = _w32(old2.astype(np.uint64) + new2.astype(np.uint64) * 3)
    grid = c.grid
    acc = np.zeros((grid, 8, 4), np.uint64)
    acc[:, :, 2] = M32
    for i in range(n):
        b, k = i // B, int(y[i]) & 7
        xi, yi = int(x[i]), int(y[i])
        acc[b, k, 0] = (int(acc[b, k, 0]) + xi) & M32
        sv = xi - (1 << 32) if xi >> 31 else xi
        sa = int(acc[b, k, 1]) - (1 << 32) if int(acc[b, k, 1]) >> 31 else int(acc[b, k, 1])
        acc[b, k, 1] = max(sa, sv) & M32
        acc[b, k, 2] = min(int(acc[b, k, 2]), xi ^ yi)
        acc[b, k, 3] = int(acc[b, k, 3]) | (xi ^ yi)
    return [_cols(out0, out1, out2), acc.astype(np.uint32).ravel()]


def _r_mem_widths(c):
    a8, a16, a128 = c.inputs
    n, B, grid = c.n, 128, c.grid
    o8 = (a8.astype(np.uint32) + 1).astype(np.uint8)
    o16 = (a16.astype(np.uint32) * 3).astype(np.uint16)
    v = np.zeros((grid * B, 4), np.uint32)
    v[:n] = a128.reshape(-1, 4)[:n]
    v8 = np.zeros(grid * B, np.uint32)
    v8[:n] = a8[:n]
    shv = v.reshape(grid, B, 4)
    shw = shv.reshape(grid, B * 4)  # 32-bit words of the vector area
    shb = v8.reshape(grid, B).astype(np.uint8)
    t = np.arange(B)
    w = shv[:, (t + 1) & 127][:, :, ::-1].reshape(-1, 4)[:n]
    k = (t * 3) & 255
    d_lo, d_hi = shw[:, 2 * k].ravel()[:n], shw[:, 2 * k + 1].ravel()[:n]
    sb = shb[:, (t + 5) & 127].view(np.int8).astype(np.int64).ravel()[:n]
    s16 = shw.view(np.uint16).reshape(grid, -1)[:, (t * 7) & 1023].view(np.int16).astype(np.int64).ravel()[:n]
    vx, vy, vz, vw = (v[:n, j].astype(np.uint64) for j in range(4))
    loc = np.stack([_w32(vx * (j + 1) + vy) for j in range(16)], axis=1).astype(np.uint64)
    rows = np.arange(n)
    li = (vz & 15).astype(np.int64)
    loc[rows, li] ^= vw
    l2 = ((vw >> np.uint64(8)) & 15).astype(np.int64)
    loc[rows, l2] = _w32(loc[rows, l2] + vz)
    out6 = _w32(loc[rows, ((vw >> np.uint64(3)) & 15).astype(np.int64)] + loc[rows, li])
    table = np.array([0x11111111 * j for j in range(16)], np.uint64)
    out7 = table[(vx & 15).astype(np.int64)] ^ table[((vy >> np.uint64(4)) & 15).astype(np.int64)]
    out = _cols(_w32(a8.view(np.int8).astype(np.int64)), _w32(a16.view(np.int16).astype(np.int64)), d_lo, d_hi,
                _w32(sb), _w32(s16), out6, out7)
    return [o8, o16, w.ravel(), out]


def _r_p2r(c):
    n, B, grid = c.n, 128, c.grid
    v = np.zeros((grid * B, 4), np.uint64)
    v[:n] = c.inputs[0].reshape(-1, 4)[:n]
    t = np.arange(grid * B)
    w = v.reshape(grid, B, 4)[:, (np.arange(B) + 1) & 127].reshape(-1, 4)
    loc = np.stack([_w32(v[:, 0] * (j + 1) + v[:, 1]) for j in range(8)], axis=1).astype(np.uint64)
    li = (v[:, 2] & 7).astype(np.int64)
    loc[t, li] ^= w[:, 3]
    out0 = _w32(loc[t, ((v[:, 3] >> np.uint64(3)) & 7).astype(np.int64)] + loc[t, li])
    return [_cols(out0[:n], (w[:, 0] ^ w[:, 1])[:n])]


def _block_rows(c):
    """(grid, threads, NV) per-thread input values of a uniform probe."""
    return c.inputs[0].reshape(c.grid, c.probe.block, -1).astype(np.uint64)


def _uniform_out(c, ks):
    """Per-thread outputs v[j] + k_j * (j + 1), where ``ks[b][j]`` is block b's value for column j."""
    v = _block_rows(c)
    nv = v.shape[2]
    k = np.array([[row[j % len(row)] for j in range(nv)] for row in ks], np.uint64)
    return _w32(v + k[:, None, :] * np.arange(1, nv + 1, dtype=np.uint64)).ravel()


def _r_uniform(c):
    p, q, r, s = (int(x) for x in c.params)
    ks = []
    for bx in range(c.grid):
        x = (p * bx + q) & M32
        k1 = ((r << (s & 31)) & M32) ^ (x >> 3)
        k2 = (x + r) & M32 if x < k1 else (k1 - s) & M32
        k3 = ((p & ~q) | r) & M32 if bx & 1 else p ^ q ^ r
        sk1, sr = (k1 - (1 << 32) if k1 >> 31 else k1), (r - (1 << 32) if r >> 31 else r)
        k4 = (min(x, s) + max(sk1, sr)) & M32
        k5 = ((p * ((bx + s) & M32)) >> 32) + bx * 12 & M32
        k6 = bin(x ^ r).count("1")
        k7 = 32 - ((p + bx) & M32).bit_length()
        k8 = int(format((q ^ bx) & M32, "032b")[::-1], 2)
        k9 = int(_prmt(np.array([p], np.uint32), np.array([q], np.uint32), np.array([(r + bx) & 0x7777], np.uint32))[0])
        k10 = (x + (r << 3)) & M32
        sv = (s ^ bx) - (1 << 32) if (s ^ bx) >> 31 else (s ^ bx)
        k11 = (sv >> (p & 31)) & M32
        k12 = ((p + bx) & M32) >> (q & 31)
        a = (p + bx) & M32
        sa, sq = (a - (1 << 32) if a >> 31 else a), (q - (1 << 32) if q >> 31 else q)
        k13 = (min(sa, sq) & M32) ^ max(r, (s + bx) & M32)
        d = (q - bx) & M32
        k14 = _tdiv(d - (1 << 32) if d >> 31 else d, 8) & M32
        k15 = (((r ^ bx) & -(r ^ bx))).bit_length()
        ks.append([x, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10, k11, k12, k13, k14, k15])
    return [_uniform_out(c, ks)]


def _r_uniform64(c):
    p, q, r, s = (int(x) for x in c.params)
    ks = []
    for bx in range(c.grid):
        x = (p + bx * q) & M64
        y = (q - ((bx << (r & 63)) & M64)) & M64
        sx, sy = (x - (1 << 64) if x >> 63 else x), (y - (1 << 64) if y >> 63 else y)
        k = [x, y, x if sx < sy else y, (x - y) & M64 if x > y else (y - x) & M64,
             (r * ((s + bx) & M32) + x) & M64, x >> (s & 63), (sy >> ((s >> 8) & 63)) & M64, p if x == y else q ^ x]
        # column j uses k[j % 8]'s low word, or its high word where j & 8
        ks.append([(k[j % 8] >> (32 if j & 8 else 0)) & M32 for j in range(NV)])
    return [_uniform_out(c, ks)]


def _partner(c, rng, i, j, same=False):
    """Make some of input j the negation (or, with ``same``, a copy) of input i: exact cancellations, x - x,
    +0 + -0, equal compares."""
    a, b = c.inputs[i], c.inputs[j]
    hit = rng.random(len(b)) < 0.15
    b[hit] = a[hit] ^ np.uint32(0x80000000)
    if same:
        hit2 = rng.random(len(b)) < 0.1
        b[hit2] = a[hit2]


def _quotient_partner(c, rng):
    """For some elements make a = q * b for a chosen quotient q near the ends of the range: around 2^-126
    (where -ftz flushes the result), the largest finite value, 1, and 2^-149; the division's slow path and
    its flush boundary are exercised."""
    a, b = c.inputs[0], c.inputs[1]
    hit = np.nonzero(rng.random(len(a)) < 0.25)[0]
    if not len(hit):
        return
    targets = np.array([0x00800000, 0x7F7FFFFF, 0x3F800000, 0x00000001, 0x00FFFFFF, 0x7F000000], np.int64)
    q = (targets[rng.integers(0, len(targets), len(hit))] + rng.integers(-8, 9, len(hit))) & 0x7FFFFFFF
    q |= rng.integers(0, 2, len(hit)).astype(np.int64) << 31
    bexp = rng.integers(1, 254, len(hit)).astype(np.int64) << 23
    bb = (bexp | rng.integers(0, 1 << 23, len(hit))).astype(np.uint32)
    with np.errstate(all="ignore"):
        prod = (_f(q.astype(np.uint32)).astype(np.float64) * _f(bb).astype(np.float64)).astype(np.float32)
    ok = np.isfinite(prod) & (prod != 0)
    a[hit[ok]] = prod.view(np.uint32)[ok]
    b[hit[ok]] = bb[ok]


def _negated_partner(c, rng):
    _partner(c, rng, 0, 1)


def _equal_partner(c, rng):
    _partner(c, rng, 0, 1, same=True)


def _product_partner(c, rng):
    """For some elements make c = -(a * b) rounded, so a*b + c cancels to the product's rounding error."""
    a, b, z = c.inputs
    hit = rng.random(len(z)) < 0.15
    with np.errstate(all="ignore"):
        prod = (_f(a).astype(np.float64) * _f(b).astype(np.float64)).astype(np.float32).view(np.uint32)
    z[hit] = prod[hit] ^ np.uint32(0x80000000)


def _tbl_in(n=2048):
    return I("u32", "table", per=n, scope="fixed")


NV = 32
PROBES: tuple[Probe, ...] = (
    # ---------------------------------------------------------------------------------------- integer adds
    Probe("probe_add32", ("IADD3",), (I(), I(), I(), O(per=4)), _r_add32),
    Probe("probe_add64", ("IADD3|P\\d", "IADD3.X", "IMAD.X"),
          (I("u64"), I("u64"), I("u64"), O("u64", 4)), _r_add64),
    Probe("probe_add3_64", ("IADD3|^R\\d+, ?P\\d, ?P\\d", "IADD3.X|P\\d, ?P\\d$", "IADD3|^R\\d+, ?P\\d, ?P\\d, ?-R"),
          (I("u64"), I("u64"), I("u64"), O("u64", 3)), _r_add3_64),
    Probe("probe_addc128", ("IADD3|P\\d", "IADD3.X|^R\\d+, ?P\\d"), (I(per=4), I(per=4), O(per=8)), _r_addc128),
    Probe("probe_carry_out", ("IADD3|P\\d", "IADD3.X", "SEL"), (I(), I(), I(), O(per=4)), _r_carry_out),
    # ---------------------------------------------------------------------------------------- multiply
    Probe("probe_mul32", ("IMAD", "IMAD.HI", "IMAD.WIDE", "IMAD.WIDE.U32", "HFMA2.MMA"),
          (I(), I(), I(), O(per=8)), _r_mul32),
    Probe("probe_mad_wide", ("IMAD.WIDE.U32", "IMAD.WIDE"), (I(), I(), I("u64"), O("u64", 2)), _r_mad_wide),
    Probe("probe_mad_hi", ("IMAD.HI.U32", "IMAD.HI", "IMAD.WIDE.U32|^R\\d+, ?P\\d"),
          (I(), I(), I(), O(per=5)), _r_mad_hi),
    Probe("probe_mul64", ("IMAD.WIDE.U32|^R\\d+, ?P\\d", "IMAD.WIDE.U32.X", "IADD3.X"),
          (I("u64"), I("u64"), O("u64", 4)), _r_mul64),
    # ---------------------------------------------------------------------------------------- division
    Probe("probe_udiv32", ("I2F.U32.RP", "MUFU.RCP", "F2I.FTZ.U32.TRUNC.NTZ", "IMAD.HI.U32", "LOP3.LUT", "VIADD",
                           "IMAD.MOV", "HFMA2.MMA"),
          (I(), I("u32", "div32"), O(per=2)), _r_udiv32),
    Probe("probe_sdiv32", ("IABS", "I2F.RP", "MUFU.RCP", "F2I.FTZ.U32.TRUNC.NTZ", "IMAD.HI.U32"),
          (I(), I("u32", "div32"), O(per=2)), _r_sdiv32),
    Probe("probe_div32_const", ("IMAD.HI", "IMAD.WIDE.U32", "LEA.HI", "LEA.HI.SX32", "SHF.R.S32.HI"),
          (I(), O(per=10)), _r_div32_const),
    Probe("probe_udiv64", ("CALL.REL.NOINC", "RET.REL.NODEC", "I2F.U64.RP", "F2I.U64.TRUNC",
                           "IMAD.HI.U32|^R\\d+, ?P\\d", "ISETP.GE.U32.AND.EX", "I2F.U32.RP"),
          (I("u64"), I("u64", "div64"), O("u64", 2)), _r_udiv64),
    Probe("probe_sdiv64", ("CALL.REL.NOINC", "RET.REL.NODEC", "I2F.U64.RP", "IMAD.HI.U32|^R\\d+, ?P\\d", "IADD3.X"),
          (I("u64"), I("u64", "div64"), O("u64", 2)), _r_sdiv64),
    Probe("probe_div64_const", ("IMAD.WIDE.U32|^R\\d+, ?P\\d", "IMAD.WIDE.U32.X", "IMAD.X", "SHF.R.U64"),
          (I("u64"), O("u64", 4)), _r_div64_const),
    # ---------------------------------------------------------------------------------------- LEA
    Probe("probe_lea", ("LEA|P\\d", "LEA.HI.X", "LEA.HI.X.SX32", "LEA.HI", "LEA.HI.SX32"),
          (_tbl_in(), I("u32", "sindex"), I(), O(per=6)), _r_lea),
    # ---------------------------------------------------------------------------------------- logic
    Probe("probe_lop3", ("LOP3.LUT", "LOP3.LUT|^P\\d"), (I(), I(), I(), O(per=6)), _r_lop3),
    Probe("probe_lop3_ptx", ("LOP3.LUT",), (I(), I(), I(), O(per=3)), _r_lop3_ptx),
    Probe("probe_isetp_bop", ("ISETP.LT.U32.XOR", "ISETP.GE.U32.OR", "ISETP.NE.U32.AND|P\\d$"),
          (I(), I(), I(), O()), _r_isetp_bop),
    Probe("probe_plop3", ("PLOP3.LUT", "FSETP.NAN.FTZ.AND", "FSETP.GEU.FTZ.AND"),
          (I("u32", "f32"), I("u32", "f32"), I(), O()), _r_plop3),
    # ---------------------------------------------------------------------------------------- shifts
    Probe("probe_shift32", ("SHF.L.U32", "SHF.R.U32.HI", "SHF.R.S32.HI"),
          (I(), I("u32", "shift"), O(per=6)), _r_shift32),
    Probe("probe_shift64", ("SHF.L.U64.HI", "SHF.R.U64", "SHF.R.S64", "SHF.R.S32.HI", "SHF.R.U32.HI"),
          (I("u64"), I("u32", "shift"), O("u64", 6)), _r_shift64),
    Probe("probe_funnel", ("SHF.L.W.U32.HI", "SHF.R.W.U32", "SHF.L.U32.HI", "SHF.R.U32"),
          (I(), I(), I("u32", "shift"), O(per=6)), _r_funnel),
    # ---------------------------------------------------------------------------------------- bytes
    Probe("probe_prmt", ("PRMT",), (I(), I(), I(), O(per=4)), _r_prmt),
    Probe("probe_prmt_modes", ("PRMT.F4E", "PRMT.B4E", "PRMT.RC8", "PRMT.ECL", "PRMT.ECR", "PRMT.RC16"),
          (I(), I(), I(), O(per=6)), _r_prmt_modes),
    # ---------------------------------------------------------------------------------------- compares, min/max
    Probe("probe_isetp32", ("ISETP.GE.U32.AND", "ISETP.GT.U32.AND", "ISETP.NE.AND", "ISETP.GE.AND", "ISETP.GT.AND",
                            "SEL"),
          (I(), I(), O(per=2)), _r_isetp32),
    Probe("probe_isetp64", ("ISETP.GE.U32.AND.EX", "ISETP.GT.U32.AND.EX", "ISETP.NE.AND.EX", "ISETP.GE.AND.EX",
                            "ISETP.GT.AND.EX"),
          (I("u64"), I("u64"), O()), _r_isetp64),
    Probe("probe_minmax", ("IABS", "VIMNMX", "VIMNMX.U32"), (I(), I(), O(per=6)), _r_minmax),
    Probe("probe_minmax64", ("ISETP.LT.AND.EX", "ISETP.LT.U32.AND.EX", "SEL"),
          (I("u64"), I("u64"), O("u64", 5)), _r_minmax64),
    Probe("probe_viaddmnmx", ("VIADDMNMX.U32", "VIMNMX"), (I(), I(), I(), O(per=4)), _r_viaddmnmx),
    # ---------------------------------------------------------------------------------------- bit counts
    Probe("probe_bits", ("POPC", "FLO.U32", "FLO.U32.SH", "FLO", "BREV"), (I(), I("u64"), O(per=12)), _r_bits),
    # ---------------------------------------------------------------------------------------- conversions
    Probe("probe_i2f32", ("I2FP.F32.S32", "I2FP.F32.S32.RZ", "I2F.RM", "I2F.RP", "I2FP.F32.U32", "I2FP.F32.U32.RZ",
                          "I2F.U32.RM", "I2F.U32.RP"),
          (I(), O(per=8)), _r_i2f32),
    Probe("probe_i2f64", ("I2F.S64", "I2F.S64.RZ", "I2F.S64.RM", "I2F.S64.RP", "I2F.U64", "I2F.U64.RZ", "I2F.U64.RM",
                          "I2F.U64.RP"),
          (I("u64"), O(per=8)), _r_i2f64),
    Probe("probe_f2i32", ("F2I.FTZ.NTZ", "F2I.FTZ.TRUNC.NTZ", "F2I.FTZ.FLOOR.NTZ", "F2I.FTZ.CEIL.NTZ",
                          "F2I.FTZ.U32.NTZ", "F2I.FTZ.U32.TRUNC.NTZ", "F2I.FTZ.U32.FLOOR.NTZ", "F2I.FTZ.U32.CEIL.NTZ"),
          (I("u32", "f32cvt"), O(per=8)), _r_f2i32),
    Probe("probe_f2i64", ("F2I.S64", "F2I.S64.TRUNC", "F2I.S64.FLOOR", "F2I.S64.CEIL", "F2I.U64", "F2I.U64.TRUNC",
                          "F2I.U64.FLOOR", "F2I.U64.CEIL", "FMUL.FTZ"),
          (I("u32", "f32cvt"), O("u64", 8)), _r_f2i64),
    Probe("probe_f2i_noftz", ("F2I.FLOOR.NTZ", "F2I.CEIL.NTZ", "F2I.U32.CEIL.NTZ", "F2I.NTZ"),
          (I("u32", "f32cvt"), O(per=4)), _r_f2i_noftz),
    # ---------------------------------------------------------------------------------------- f32 arithmetic
    Probe("probe_fadd", ("FADD.FTZ", "FADD.FTZ.RZ", "FADD.FTZ.RM", "FADD.FTZ.RP"),
          (I("u32", "f32"), I("u32", "f32"), O(per=5)), _r_fadd, prepare=_negated_partner),
    Probe("probe_fmul", ("FMUL.FTZ", "FMUL.FTZ.RZ", "FMUL.FTZ.RM", "FMUL.FTZ.RP"),
          (I("u32", "f32"), I("u32", "f32"), O(per=5)), _r_fmul),
    Probe("probe_ffma", ("FFMA.FTZ", "FFMA.FTZ.RZ", "FFMA.FTZ.RM", "FFMA.FTZ.RP"),
          (I("u32", "f32"), I("u32", "f32"), I("u32", "f32"), O(per=5)), _r_ffma, prepare=_product_partner),
    Probe("probe_f32_noftz", ("FADD.RZ", "FMUL.RP", "FFMA.RM", "FADD.SAT", "FMUL.SAT", "FFMA.SAT", "FFMA.FTZ.SAT"),
          (I("u32", "f32"), I("u32", "f32"), I("u32", "f32"), O(per=7)), _r_f32_noftz, prepare=_negated_partner),
    Probe("probe_fminmax", ("FADD.FTZ.SAT", "FMNMX.FTZ", "FMNMX.NAN", "FMNMX"),
          (I("u32", "f32"), I("u32", "f32"), O(per=7)), _r_fminmax, prepare=_negated_partner),
    Probe("probe_fsetp", ("FSETP.GEU.FTZ.AND", "FSETP.GTU.FTZ.AND", "FSETP.GT.FTZ.AND", "FSETP.GE.FTZ.AND",
                          "FSETP.NEU.FTZ.AND", "FADD.FTZ"),
          (I("u32", "f32"), I("u32", "f32"), O(per=2)), _r_fsetp, prepare=_equal_partner),
    Probe("probe_fsetp_ptx", ("FSETP.GEU.AND", "FSETP.GTU.AND", "FSETP.GT.AND", "FSETP.GE.AND", "FSETP.NEU.AND",
                              "FSETP.NE.AND", "FSETP.NAN.AND", "FSETP.GEU.FTZ.AND", "FSETP.NE.FTZ.AND"),
          (I("u32", "f32"), I("u32", "f32"), O()), _r_fsetp_ptx, prepare=_equal_partner),
    Probe("probe_fsel", ("FSEL", "VIADDMNMX", "FSETP.GT.FTZ.AND"),
          (I("u32", "f32"), I("u32", "f32"), I("u32", "f32"), O(per=4)), _r_fsel),
    Probe("probe_fdiv", ("FCHK", "MUFU.RCP", "FFMA", "CALL.REL.NOINC", "PLOP3.LUT", "FSETP.GTU.FTZ.AND", "MUFU.RSQ"),
          (I("u32", "f32"), I("u32", "f32"), O(per=2)), _r_fdiv, prepare=_quotient_partner,
          note="output 1 is __fdividef (approximate: GPU against the interpreter only)"),
    Probe("probe_frcp", ("MUFU.RCP", "FFMA", "CALL.REL.NOINC"), (I("u32", "f32"), O(per=2)), _r_frcp),
    # ---------------------------------------------------------------------------------------- half / packing
    Probe("probe_half", ("HADD2.F32", "F2FP.F16.F32.PACK_AB", "F2FP.BF16.F32.PACK_AB", "F2FP.RELU.F16.F32.PACK_AB",
                         "F2FP.RELU.BF16.F32.PACK_AB", "F2F.F16.F32"),
          (I("u32", "f16x2"), I("u32", "f32"), O(per=7)), _r_half),
    # ---------------------------------------------------------------------------------------- warp
    Probe("probe_shfl", ("SHFL.IDX", "SHFL.BFLY", "SHFL.UP", "SHFL.DOWN", "SHFL.DOWN|^P\\d"),
          (I(), I("u32", "lane"), O(per=10)), _r_shfl),
    Probe("probe_ballot", ("VOTE.ANY|^R\\d+, ?PT",), (I(), O(per=3)), _r_ballot),
    Probe("probe_vote", ("VOTE.ANY|^P\\d", "VOTE.ALL|^P\\d"), (I(), O(per=2)), _r_vote),
    # ---------------------------------------------------------------------------------------- atomics
    Probe("probe_atomic_elem", ("ATOMG.E.ADD", "ATOMG.E.EXCH", "ATOMG.E.CAS", "ATOMG.E.MAX.S32", "ATOMG.E.MIN",
                                "ATOMG.E.ADD.64", "REDG.E.ADD.F32.FTZ.RN"),
          (I(), I(), O(per=6, draw="u32"), O(draw="f32"), O("u64", draw="u64"), O(per=6)), _r_atomic_elem,
          prepare=_prep_atomic_elem),
    Probe("probe_atomic_bins", ("REDG.E.ADD", "REDG.E.MAX", "REDG.E.MIN.S32", "REDG.E.OR", "REDG.E.AND", "REDG.E.XOR",
                                "REDG.E.ADD.F32.FTZ.RN", "REDG.E.ADD.64"),
          (I(), O(per=128, draw="u32", scope="fixed"), O("u64", per=8, draw="u64", scope="fixed")), _r_atomic_bins,
          prepare=_prep_atomic_bins),
    Probe("probe_atomic_block", ("REDUX.SUM", "REDUX.MAX", "REDUX.MIN.S32", "REDUX.XOR", "VOTEU.ANY", "UFLO.U32"),
          (I(), O(per=4, draw="u32", scope="block")), _r_atomic_block),
    Probe("probe_atomic_shared", ("ATOMS.ADD", "ATOMS.EXCH", "ATOMS.CAS", "ATOMS.MAX.S32", "ATOMS.MIN", "ATOMS.OR"),
          (I(), I(), O(per=3), O(per=32, scope="block")), _r_atomic_shared),
    # ---------------------------------------------------------------------------------------- memory
    Probe("probe_mem_widths", ("LDG.E.U8", "LDG.E.S8", "LDG.E.U16", "LDG.E.S16", "LDG.E.128", "STG.E.U8", "STG.E.U16",
                               "STG.E.128", "STS.128", "STS.U8", "LDS.128", "LDS.64", "LDS.S8", "LDS.S16", "LDL", "STL",
                               "LDC|c\\[0x3\\]\\[R"),
          (I("u8"), I("u16"), I("u32", per=4), O("u8"), O("u16"), O(per=4), O(per=8)), _r_mem_widths),
    Probe("probe_p2r", ("P2R|^R\\d+, ?RZ, ?0x", "BAR.SYNC.DEFER_BLOCKING", "LDS.128", "STS.128"),
          (I("u32", per=4), O(per=2)), _r_p2r),
    # ---------------------------------------------------------------------------------------- uniform datapath
    Probe("probe_uniform", ("S2UR", "UIMAD", "UIADD3", "ULEA.HI", "ULOP3.LUT", "USHF.R.W.S32.HI", "USHF.R.W.U32.HI",
                            "UISETP.LT.U32.AND", "UISETP.LT.AND", "USEL", "UFLO.U32", "UFLO.U32.SH", "UBREV", "UPRMT",
                            "UIMAD.WIDE.U32", "USHF.R.S32.HI"),
          (I("u32", per=NV), O(per=NV), P(), P(), P(), P()), _r_uniform, block=64, uniform=True, grid=6),
    Probe("probe_uniform64", ("UIADD3|UP\\d", "UIADD3.X", "UIMAD.WIDE.U32", "USHF.L.U64.HI", "USHF.R.U64", "USHF.R.S64",
                              "UISETP.LT.AND.EX", "UISETP.GT.U32.AND.EX", "UISETP.NE.AND.EX", "USEL"),
          (I("u32", per=NV), O(per=NV), P("u64"), P("u64"), P(), P()), _r_uniform64, block=64, uniform=True, grid=6),
)

_BY_NAME = {p.name: p for p in PROBES}


def probe(name: str) -> Probe:
    return _BY_NAME[name]


# ================================================================================================ cases
@dataclass
class Case:
    """One launch of a probe: input arrays, the outputs' initial contents, scalar parameters, n."""

    probe: Probe
    inputs: list[np.ndarray]
    outs0: list[np.ndarray]
    params: list[Any]
    n: int
    seed: int | None = None

    @property
    def grid(self) -> int:
        return self.probe.grid if self.probe.uniform else max(1, (self.n + self.probe.block - 1) // self.probe.block)

    def args(self, dev_in, dev_out) -> tuple:
        pr = self.probe
        tail = () if pr.uniform else (np.int32(self.n),)
        return (*dev_in, *dev_out, *self.params, *tail)


def _grid_for(pr: Probe, n: int) -> int:
    return pr.grid if pr.uniform else max(1, (n + pr.block - 1) // pr.block)


def _param(arg: Arg, value: int):
    return np.uint64(value & M64) if arg.dtype == "u64" else np.uint32(value & M32)


def make_case(pr: Probe, seed: int, n: int | None = None) -> Case:
    """A case drawn by numpy from ``seed`` (``n`` elements; the probe's default when None)."""
    rng = np.random.default_rng(seed)
    n = pr.n if n is None else int(n)
    grid = _grid_for(pr, n)
    ins = [DRAWS[a.draw](rng, a.size(n, grid, pr.block, pr.uniform)).astype(_DT[a.dtype]) for a in pr.ins]
    outs0 = [DRAWS[a.draw](rng, a.size(n, grid, pr.block, pr.uniform)).astype(_DT[a.dtype]) for a in pr.outs]
    params = [_param(a, int(DRAWS[a.draw](rng, 1)[0])) for a in pr.params]
    case = Case(pr, ins, outs0, params, n, seed)
    if pr.prepare is not None:
        pr.prepare(case, rng)
    return case


def case_strategy(pr: Probe, max_n: int = 256):
    """hypothesis strategy of cases: n, then each input's first elements drawn element by element by
    hypothesis (so they shrink), the rest by numpy from a drawn seed; parameters drawn by hypothesis."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    @st.composite
    def build(draw):
        n = pr.n if pr.uniform else draw(st.integers(1, max_n))
        seed = draw(st.integers(0, 2**32 - 1))
        case = make_case(pr, seed, n)
        for arr, a in zip(case.inputs, pr.ins):
            elem = _elements(a.draw)
            if elem is None or a.scope == "fixed":
                continue
            k = draw(st.integers(0, min(24, len(arr))))
            if k:
                head = draw(hnp.arrays(np.uint64, k, elements=elem))
                arr[:k] = head.astype(arr.dtype)
        case.params = [_param(a, draw(_elements(a.draw))) for a in pr.params]
        return case
    return build()


# ================================================================================================ running
@functools.lru_cache(maxsize=1)
def module():
    """gpu/kernels/sass_probes.cu compiled for sm_90 by NVRTC (once per process) as a flashsim.cuda module."""
    return runtime.interpreted_module(KERNEL_FILE)


@functools.lru_cache(maxsize=None)
def sass_names(kernel: str) -> tuple[tuple[str, tuple[str, ...], str], ...]:
    """(opcode, modifiers, operands) of every instruction of ``kernel`` (from nvdisasm's JSON)."""
    doc = disassemble(module().cubin)
    fn = next((f for f in doc[1] if f.get("function-name") == kernel), None)
    if fn is None:
        raise KeyError(f"no kernel {kernel!r} in {KERNEL_FILE}")
    out = []
    for rec in fn["sass-instructions"]:
        op, *mods = rec["opcode"].split(".")
        out.append((op, tuple(mods), rec.get("operands", "")))
    return tuple(out)


def _matches(pattern: str, ins) -> bool:
    spec, _, rx = pattern.partition("|")
    op, *mods = spec.split(".")
    return ins[0] == op and set(mods) <= set(ins[1]) and (not rx or re.search(rx, ins[2]) is not None)


def check_sass(pr: Probe) -> list[str]:
    """The patterns of ``pr.sass`` that no instruction of the kernel matches (empty: all present)."""
    names = sass_names(pr.name)
    return [p for p in pr.sass if not any(_matches(p, ins) for ins in names)]


def opcode_counts(pr: Probe) -> dict[str, int]:
    """Every opcode+modifiers spelling in the kernel, with its number of instructions."""
    out: dict[str, int] = {}
    for op, mods, _ in sass_names(pr.name):
        key = ".".join((op, *mods))
        out[key] = out.get(key, 0) + 1
    return out


def run_interp(case: Case) -> list[np.ndarray]:
    """Run ``case`` in flashsim's SASS interpreter; returns the output arrays."""
    pr = case.probe
    f = module().get_function(pr.name)
    d_in = [fc.asarray(np.ascontiguousarray(a)) for a in case.inputs]
    d_out = [fc.asarray(np.ascontiguousarray(a).copy()) for a in case.outs0]
    f((case.grid,), (pr.block,), case.args(d_in, d_out))
    return [d.get() for d in d_out]


def gpu_module():
    """The interpreter's cubin loaded on the GPU (gpu.runtime.load_cubin: a cupy.RawModule of the file it
    writes, whose sha256 it checks), after checking that the bytes are the interpreter module's."""
    mod = module()
    data = bytes(mod.cubin)
    if hashlib.sha256(data).hexdigest() != mod.sha256:
        raise RuntimeError("the cubin bytes to load differ from the interpreter's module")
    return runtime.load_cubin(data)


def _run_gpu(case: Case) -> list[np.ndarray]:
    """Run ``case`` on the GPU with the very cubin the interpreter runs; returns the output arrays."""
    cupy = runtime.require_gpu()
    pr = case.probe
    f = gpu_module().get_function(pr.name)
    d_in = [cupy.asarray(np.ascontiguousarray(a)) for a in case.inputs]
    d_out = [cupy.asarray(np.ascontiguousarray(a).copy()) for a in case.outs0]
    f((case.grid,), (pr.block,), case.args(d_in, d_out))
    cupy.cuda.Device().synchronize()
    return [cupy.asnumpy(d) for d in d_out]


run_gpu = _run_gpu


def reference(case: Case) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """The probe's numpy reference: per output (expected bits, defined mask) or None (no reference)."""
    pr = case.probe
    if pr.ref is None:
        return [None] * len(pr.outs)
    got = pr.ref(case)
    out = []
    for g, o0 in zip(got, case.outs0):
        if g is None:
            out.append(None)
            continue
        arr, mask = (g if isinstance(g, tuple) else (g, None))
        arr = np.asarray(arr).astype(o0.dtype).ravel()
        mask = np.ones(arr.shape, bool) if mask is None else np.asarray(mask, bool).ravel()
        out.append((arr, mask))
    return out


def compare(case: Case, got: Sequence[np.ndarray], want: Sequence, what: str = "reference") -> list[str]:
    """Describe every output element that differs (empty list: all equal). ``want``: arrays (all elements
    compared) or reference() pairs (only defined elements)."""
    msgs = []
    pr = case.probe
    for j, (g, w) in enumerate(zip(got, want)):
        if w is None:
            continue
        arr, mask = w if isinstance(w, tuple) else (w, np.ones(np.asarray(w).shape, bool))
        g = np.asarray(g).ravel()
        arr = np.asarray(arr).ravel()
        if g.shape != arr.shape:
            msgs.append(f"{pr.name} output {j}: shape {g.shape} != {what} {arr.shape}")
            continue
        bad = np.nonzero((g != arr) & mask)[0]
        if len(bad):
            per = pr.outs[j].per
            ex = ", ".join(f"[{int(k)}] (element {int(k) // per}, column {int(k) % per}) got {int(g[k]):#x} "
                           f"want {int(arr[k]):#x}" for k in bad[:6])
            inputs = "; ".join(f"in{q}[{int(bad[0]) // per}]=" + _fmt_in(case, q, int(bad[0]) // per)
                               for q in range(len(case.inputs)))
            msgs.append(f"{pr.name} output {j}: {len(bad)} of {int(mask.sum())} elements differ from {what}: {ex}"
                        f" | inputs of the first: {inputs}; params {[hex(int(p)) for p in case.params]}")
    return msgs


def _fmt_in(case: Case, q: int, e: int) -> str:
    a, arg = case.inputs[q], case.probe.ins[q]
    if arg.scope == "fixed":
        return "<table>"
    per = arg.per
    vals = a[e * per:(e + 1) * per]
    return "[" + ", ".join(hex(int(v)) for v in vals) + "]"


# ================================================================================================ golden
def _key(pr: Probe, k: int, what: str) -> str:
    return f"{pr.name}/{k}/{what}"


def _seed(pr: Probe, k: int, base: int) -> int:
    return (zlib.crc32(pr.name.encode()) * 1000003 + k * 7919 + base) & 0xFFFFFFFF


def record(out_dir: str | Path, *, cases: int = 4, n: int | None = None, seed: int = 0,
           probes: Sequence[Probe] = PROBES) -> dict:
    """Run every probe on the GPU and in the interpreter (``cases`` launches of ``n`` elements each, drawn
    from seeds) and write ``probes.npz`` (inputs, initial outputs, params, GPU outputs) and ``probes.json``
    (provenance, per-probe verdicts, case and element counts per opcode)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mod = module()
    arrays: dict[str, np.ndarray] = {}
    report: dict[str, Any] = {
        "cubin_sha256": mod.sha256, "source": KERNEL_FILE, "source_sha256": runtime.source_hash(KERNEL_FILE),
        "toolchain": versions(), "device": _device_info(), "cases_per_probe": cases, "probes": {}, "opcodes": {},
    }
    opcodes: dict[str, dict[str, int]] = {}
    for pr in probes:
        prog = mod.get_function(pr.name)._prog()
        before = prog.executed_forms()
        entry: dict[str, Any] = {"sass_missing": check_sass(pr), "cases": 0, "elements": 0, "equal": True,
                                 "mismatches": [], "interp_error": None, "static_opcodes": opcode_counts(pr)}
        for k in range(cases):
            case = make_case(pr, _seed(pr, k, seed), n)
            gpu_out = run_gpu(case)
            for j, a in enumerate(case.inputs):
                arrays[_key(pr, k, f"in{j}")] = a
            for j, a in enumerate(case.outs0):
                arrays[_key(pr, k, f"init{j}")] = a
            for j, a in enumerate(gpu_out):
                arrays[_key(pr, k, f"out{j}")] = a
            arrays[_key(pr, k, "params")] = np.array([int(p) for p in case.params], np.uint64)
            arrays[_key(pr, k, "n")] = np.array(case.n, np.int64)
            entry["cases"] += 1
            entry["elements"] += case.n if not pr.uniform else case.grid * pr.block
            try:
                interp_out = run_interp(case)
                msgs = compare(case, interp_out, gpu_out, "the GPU")
            except Exception as exc:  # an unmodelled instruction (pending probes), or an interpreter fault
                entry["interp_error"] = f"{type(exc).__name__}: {exc}"
                entry["equal"] = False
                continue
            ref_msgs = compare(case, gpu_out, reference(case), "the C reference")
            if msgs:
                entry["equal"] = False
                entry["mismatches"] += msgs
            if ref_msgs:
                entry.setdefault("reference_mismatches", []).extend(ref_msgs)
        # credit only the instruction forms the interpreter executed on these cases (a form that sits in the
        # kernel but never ran, e.g. an untaken slow path, shows nothing about its semantics)
        after = prog.executed_forms()
        entry["opcodes"] = {f: c - before.get(f, 0) for f, c in after.items() if c > before.get(f, 0)}
        report["probes"][pr.name] = entry
        for op in entry["opcodes"]:
            o = opcodes.setdefault(op, {"probes": 0, "cases": 0, "elements": 0, "equal": 0})
            o["probes"] += 1
            o["cases"] += entry["cases"]
            o["elements"] += entry["elements"]
            o["equal"] += entry["cases"] if entry["equal"] else 0
    report["opcodes"] = dict(sorted(opcodes.items()))
    arrays["__cubin_sha256__"] = np.frombuffer(bytes.fromhex(mod.sha256), np.uint8)
    arrays["__cubin__"] = np.frombuffer(mod.cubin, np.uint8)  # the very bytes the GPU ran (replayed on CPUs)
    np.savez_compressed(out_dir / "probes.npz", **arrays)
    (out_dir / "probes.json").write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    return report


def _device_info() -> dict:
    try:
        return runtime.device_info()
    except Exception as exc:  # pragma: no cover - recorded for provenance only
        return {"error": str(exc)}


def replay(path: str | Path = TRACE_PATH) -> tuple[bytes, list[tuple[Case, list[np.ndarray]]]]:
    """The recorded cubin and cases of ``path`` with their GPU outputs. The cubin's bytes depend on the
    directory NVRTC ran in (its line tables record it), so a checkout elsewhere builds other bytes of the
    same SASS: replay runs the recorded ones (:func:`recorded_module`)."""
    data = np.load(path)
    cubin = bytes(data["__cubin__"])
    if hashlib.sha256(cubin).hexdigest() != bytes(data["__cubin_sha256__"]).hex():
        raise ValueError(f"{path}: the stored cubin does not match its recorded sha256")
    out = []
    for pr in PROBES:
        k = 0
        while _key(pr, k, "n") in data:
            case = Case(pr, [data[_key(pr, k, f"in{j}")] for j in range(len(pr.ins))],
                        [data[_key(pr, k, f"init{j}")] for j in range(len(pr.outs))],
                        [_param(a, int(v)) for a, v in zip(pr.params, data[_key(pr, k, "params")])],
                        int(data[_key(pr, k, "n")]))
            out.append((case, [data[_key(pr, k, f"out{j}")] for j in range(len(pr.outs))]))
            k += 1
    return cubin, out


@contextlib.contextmanager
def recorded_module(cubin: bytes):
    """Within the block, module() (and so run_interp) is the interpreter on ``cubin``."""
    key = (runtime.source_hash(KERNEL_FILE), ())
    saved = runtime._INTERP.pop(key, None)
    try:
        runtime.interpreted_module(KERNEL_FILE, cubin=cubin)
        yield
    finally:
        runtime._INTERP.pop(key, None)
        if saved is not None:
            runtime._INTERP[key] = saved


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.sass_probes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True,
                    help="directory for probes.npz and probes.json (traces/sass for the golden data)")
    ap.add_argument("--cases", type=int, default=4, help="launches per probe (default 4)")
    ap.add_argument("--n", type=int, default=None, help="elements per lane-probe launch (default: each probe's, 2048)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--probe", action="append", help="only these probes (repeatable)")
    a = ap.parse_args(argv)
    chosen = PROBES if not a.probe else tuple(probe(p) for p in a.probe)
    if run_gpu is _run_gpu:  # (not replaced by a stand-in) fail before any work when there is no GPU
        runtime.require_gpu()
    rep = record(a.out, cases=a.cases, n=a.n, seed=a.seed, probes=chosen)
    bad = {k: v for k, v in rep["probes"].items() if not v["equal"]}
    for name, v in rep["probes"].items():
        status = "ok" if v["equal"] else ("INTERP: " + v["interp_error"] if v["interp_error"] else "DIFFERS")
        print(f"{name:24s} {v['cases']} cases {v['elements']:7d} elements  {status}")
        for msg in v["mismatches"][:3]:
            print("    " + msg)
        for msg in v.get("reference_mismatches", [])[:3]:
            print("    (reference) " + msg)
    print(f"{len(rep['probes']) - len(bad)} of {len(rep['probes'])} probes bit-identical; "
          f"report in {a.out}/probes.json")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
