"""Binary floating-point formats (f16, bf16, f32; e4m3, e5m2) as bit patterns: decode, exact rounding, float views.

Every value crosses this module as an unsigned bit array (uint16 for f16/bf16, uint32 for f32, uint8 for
e4m3/e5m2), so -0, NaN payloads and subnormals stay honest. ``round_exact`` is the single rounding engine:
every conversion, the f32 arithmetic and the mma models end in it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashsim.errors import bad_argument

# decode() class codes
ZERO, FINITE, INF, NAN = 0, 1, 2, 3

ROUNDING_MODES = ("rn", "rz", "rm", "rp")


@dataclass(frozen=True)
class FloatFormat:
    """An IEEE-style binary format: 1 sign bit, ``ebits`` exponent bits, ``mbits`` fraction bits.

    ``nan_only``: the OCP FP8 E4M3 convention (PTX ``.e4m3``): no infinities; the all-ones exponent field
    holds finite values except S.1111.111, the only NaN, so emax is one binade higher than IEEE's.
    """

    name: str
    ebits: int
    mbits: int
    dtype: type
    nan_only: bool = False

    def __post_init__(self):
        if self.ebits < 2 or self.mbits < 1:
            raise bad_argument("ebits/mbits", (self.ebits, self.mbits), "not a binary float format")
        if np.dtype(self.dtype).itemsize * 8 != self.nbits:
            raise bad_argument("dtype", self.dtype, f"must hold exactly {self.nbits} bits")

    @property
    def nbits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal (and the scale of subnormals)."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        return self.bias + 1 if self.nan_only else self.bias

    @property
    def exp_mask(self) -> int:
        return (1 << self.ebits) - 1

    @property
    def sign_bit(self) -> int:
        return 1 << (self.nbits - 1)

    @property
    def inf(self) -> int:
        if self.nan_only:
            raise bad_argument("fmt", self.name, "has no infinity (its all-ones exponent field is finite)")
        return self.exp_mask << self.mbits

    @property
    def max_finite(self) -> int:
        if self.nan_only:
            return self.canonical_nan - 1  # S.1111.110: 448 for e4m3
        return self.inf - 1

    @property
    def canonical_nan(self) -> int:
        """The NaN NVIDIA arithmetic returns: all exponent and fraction bits set, sign clear."""
        return (self.exp_mask << self.mbits) | ((1 << self.mbits) - 1)


F16 = FloatFormat("f16", 5, 10, np.uint16)
BF16 = FloatFormat("bf16", 8, 7, np.uint16)
F32 = FloatFormat("f32", 8, 23, np.uint32)
FORMATS = {f.name: f for f in (F16, BF16, F32)}
# the 8-bit inputs of wgmma .e4m3/.e5m2 (PTX ISA, "Alternate floating point data formats"): uint8 patterns.
# Kept out of FORMATS: the conversions to them (cvt ... .e4m3x2) are not modelled.
E4M3 = FloatFormat("e4m3", 4, 3, np.uint8, nan_only=True)  # max 448, no Inf, NaN only S.1111.111
E5M2 = FloatFormat("e5m2", 5, 2, np.uint8)  # IEEE-style: Inf and NaNs, max 57344
FP8_FORMATS = {f.name: f for f in (E4M3, E5M2)}
# binary64, the D* instructions' format (flashsim.numerics.fp64): uint64 patterns. Kept out of FORMATS, whose
# conversions and float views are the 16- and 32-bit formats'.
F64 = FloatFormat("f64", 11, 52, np.uint64)


def format_named(name: str, argname: str = "fmt") -> FloatFormat:
    """Look a format up by name ("f16", "bf16", "f32"), raising an error that names ``argname``."""
    if isinstance(name, FloatFormat):
        return name
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise bad_argument(argname, name, f"unknown format; expected one of {sorted(FORMATS)}") from None


def as_bits(x, fmt: FloatFormat, argname: str = "x") -> np.ndarray:
    """Check that ``x`` is an array of ``fmt`` bit patterns (exact unsigned dtype) and return it."""
    arr = np.asarray(x)
    if arr.dtype != np.dtype(fmt.dtype):
        raise bad_argument(
            argname, arr.dtype, f"expected {np.dtype(fmt.dtype).name} bit patterns of {fmt.name} "
            f"(use flashsim.numerics.bits_of to convert floats)")
    return arr


def decode(bits, fmt: FloatFormat):
    """Split bit patterns into (sign, sig, exp, cls) with value = (-1)^sign * sig * 2^exp for finite inputs.

    ``sig`` includes the implicit bit for normals; subnormals and zeros have exp = emin - mbits.
    """
    b = np.asarray(bits).astype(np.int64)
    sign = ((b >> (fmt.nbits - 1)) & 1).astype(np.uint8)
    ef = (b >> fmt.mbits) & fmt.exp_mask
    mf = b & ((1 << fmt.mbits) - 1)
    normal = ef != 0
    sig = np.where(normal, mf | (1 << fmt.mbits), mf)
    exp = np.where(normal, ef, 1) - fmt.bias - fmt.mbits
    cls = np.full(b.shape, FINITE, np.uint8)
    cls[(ef == 0) & (mf == 0)] = ZERO
    special = ef == fmt.exp_mask
    if fmt.nan_only:
        # e4m3: the all-ones exponent field is finite except S.1111.111, the NaN
        cls[special & (mf == (1 << fmt.mbits) - 1)] = NAN
    else:
        cls[special & (mf == 0)] = INF
        cls[special & (mf != 0)] = NAN
    return sign, sig.astype(np.int64), exp.astype(np.int64), cls


def _bit_length(v: np.ndarray) -> np.ndarray:
    """Bit length of each non-negative int64/uint64 (0 for 0), exact for all 64-bit values."""
    v = v.astype(np.uint64)
    hi = (v >> np.uint64(32)).astype(np.float64)
    lo = (v & np.uint64(0xFFFFFFFF)).astype(np.float64)
    # frexp of an integer below 2^32 is exact: v = m * 2^e with m in [0.5, 1) gives bit length e
    return np.where(hi > 0, 32 + np.frexp(hi)[1], np.frexp(lo)[1]).astype(np.int64)


def round_exact(sign, mag, exp, fmt: FloatFormat, mode: str = "rn", *, sticky=None,
                satfinite: bool = False) -> np.ndarray:
    """Round the exact value (-1)^sign * (mag + r) * 2^exp to ``fmt`` with one PTX rounding mode.

    ``mag`` is a non-negative integer array (< 2^63), ``r`` in (0, 1) is present where ``sticky`` is
    true. Overflow follows IEEE 754 for the mode (rn: Inf; rz: max finite; rm/rp: toward their
    infinity only), or max finite for every mode with ``satfinite`` (PTX .satfinite). Subnormal
    results are kept: each instruction that flushes does so itself (its rule differs, see fp32).
    """
    if mode not in ROUNDING_MODES:
        raise bad_argument("mode", mode, f"expected one of {ROUNDING_MODES}")
    if fmt.nan_only:
        raise NotImplementedError(f"rounding to {fmt.name} (no Inf; NaN-only overflow rules) is not modelled")
    sign = np.asarray(sign).astype(np.int64) & 1
    mag = np.asarray(mag).astype(np.int64)
    if np.any(mag < 0):
        raise bad_argument("mag", mag, "magnitudes must be non-negative")
    exp = np.asarray(exp).astype(np.int64)
    sticky = np.zeros((), bool) if sticky is None else np.asarray(sticky, bool)
    sign, mag, exp, sticky = np.broadcast_arrays(sign, mag, exp, sticky)
    m = fmt.mbits

    # quantum q: exponent of the last kept bit.  value = mag * 2^exp, top bit at exp + bitlen - 1.
    #   normal:    q = (exp + bitlen - 1) - m        subnormal floor: q >= emin - m
    top = exp + _bit_length(mag) - 1
    q = np.maximum(top - m, fmt.emin - m)
    q = np.where(mag == 0, fmt.emin - m, q)
    shift = q - exp  # bits of mag to drop (<= 0: exact, shift left)

    big = shift >= 64
    s = np.clip(shift, 0, 63).astype(np.uint64)
    umag = mag.astype(np.uint64)
    one = np.uint64(1)
    kept = np.where(shift > 0, umag >> s, umag << np.clip(-shift, 0, 63).astype(np.uint64))
    kept = np.where(big, np.uint64(0), kept)
    # guard = first dropped bit, rest = OR of the bits below it (and the caller's sticky)
    gpos = np.clip(shift - 1, 0, 63).astype(np.uint64)
    guard = (shift > 0) & (shift <= 64) & (((umag >> gpos) & one) == one)
    below = np.where(shift > 1, umag & ((one << np.clip(shift - 1, 0, 63).astype(np.uint64)) - one), np.uint64(0))
    below = np.where(shift > 64, umag, below)
    rest = (below != 0) | sticky
    inexact = guard | rest

    neg = sign == 1
    if mode == "rn":
        up = guard & (rest | ((kept & one) == one))  # ties to even
    elif mode == "rz":
        up = np.zeros(kept.shape, bool)
    elif mode == "rm":
        up = inexact & neg
    else:
        up = inexact & ~neg
    kept = kept + up.astype(np.uint64)

    # bit diagram of the encoding:  [sign | exponent field | fraction]
    #   value = kept * 2^q with kept < 2^(m+1); the field arithmetic below also covers subnormals
    #   (kept < 2^m, q = emin - m) and the carry out of a full significand (kept == 2^(m+1)).
    #   The field index is capped at the all-ones field (an index past it overflows all the same) and the
    #   encoding is built in uint64, so that binary64 (F64) fits too.
    fidx = np.minimum(q - (fmt.emin - m), fmt.exp_mask).astype(np.uint64)
    body = np.where(kept == 0, np.uint64(0), fidx * np.uint64(1 << m) + kept)
    overflow = body >= np.uint64(fmt.inf)
    if satfinite:
        over_val = np.full(body.shape, fmt.max_finite, np.int64)
    elif mode == "rn":
        over_val = np.full(body.shape, fmt.inf, np.int64)
    elif mode == "rz":
        over_val = np.full(body.shape, fmt.max_finite, np.int64)
    elif mode == "rm":
        over_val = np.where(neg, fmt.inf, fmt.max_finite)
    else:
        over_val = np.where(neg, fmt.max_finite, fmt.inf)
    body = np.where(overflow, np.asarray(over_val).astype(np.uint64), body)
    out = body | (sign.astype(np.uint64) << np.uint64(fmt.nbits - 1))
    return out.astype(fmt.dtype)


def requantize(bits, src: FloatFormat, dst: FloatFormat, mode: str = "rn", *, ftz_in: bool = False,
               satfinite: bool = False, relu: bool = False,
               nan: int | None = None) -> np.ndarray:
    """Convert bit patterns of ``src`` to ``dst`` (the engine of every cvt).

    NaN inputs give ``nan`` (default: dst's canonical NaN); Inf stays Inf (max finite with
    ``satfinite``); ``relu`` clamps negative results, -0 included, to +0.
    """
    sign, sig, exp, cls = decode(bits, src)
    if ftz_in:
        # .ftz on the source: subnormal inputs read as zero of the same sign
        sub = (cls == FINITE) & (sig < (1 << src.mbits))
        sig = np.where(sub, 0, sig)
        cls = np.where(sub, ZERO, cls)
    out = round_exact(sign, sig, exp, dst, mode, satfinite=satfinite).astype(np.int64)
    inf_val = dst.max_finite if satfinite else dst.inf
    out = np.where(cls == INF, inf_val + sign.astype(np.int64) * dst.sign_bit, out)
    if relu:
        out = np.where(sign == 1, 0, out)
    out = np.where(cls == NAN, dst.canonical_nan if nan is None else nan, out)
    return out.astype(dst.dtype)


# ---- float views at the edges -------------------------------------------------------------------

def _float_dtype(fmt: FloatFormat):
    if fmt is BF16:
        import ml_dtypes

        return ml_dtypes.bfloat16
    return {"f16": np.float16, "f32": np.float32}[fmt.name]


def to_float(bits, fmt) -> np.ndarray:
    """View bit patterns as numpy floats (float16, ml_dtypes.bfloat16, float32); no rounding."""
    fmt = format_named(fmt)
    return as_bits(bits, fmt, "bits").view(_float_dtype(fmt))


def bits_of(x, fmt) -> np.ndarray:
    """Bit patterns of floats already in ``fmt``'s dtype (float16, bfloat16, float32); no rounding.

    Python floats and float64 arrays are refused: converting them would round, and the rounding
    mode must be explicit (use ``cvt``).
    """
    fmt = format_named(fmt)
    arr = np.asarray(x)
    want = np.dtype(_float_dtype(fmt))
    if arr.dtype != want:
        raise bad_argument("x", arr.dtype, f"expected {want.name} values for {fmt.name}; convert with an explicit rounding mode first")
    return arr.view(fmt.dtype)
