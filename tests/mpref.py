"""Correctly rounded references through MPFR (gmpy2), element by element, for the CPU tests."""

from __future__ import annotations

import ml_dtypes
import pytest

gmpy2 = pytest.importorskip("gmpy2", reason="MPFR references need gmpy2 (the test extra)")
import numpy as np

from flashsim.numerics.formats import BF16, F16, F32, FloatFormat

_ROUND = {"rn": gmpy2.RoundToNearest, "rz": gmpy2.RoundToZero, "rm": gmpy2.RoundDown, "rp": gmpy2.RoundUp}
_NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def context(fmt: FloatFormat, mode: str) -> gmpy2.context:
    """An MPFR context that rounds exactly like ``fmt`` with subnormals (mpfr's emin is for 0.5*2^e)."""
    p = fmt.mbits + 1
    return gmpy2.context(precision=p, emin=fmt.emin - fmt.mbits + 1, emax=fmt.emax + 1,
                         subnormalize=True, round=_ROUND[mode])


def value(bits: int, fmt: FloatFormat) -> float:
    """Exact Python float of one bit pattern (every f16/bf16/f32 value is a float64)."""
    return float(np.array([bits], fmt.dtype).view(_NP[fmt.name])[0])


def encode(x, fmt: FloatFormat) -> int:
    """Bits of an mpfr already rounded to ``fmt`` (exact conversion)."""
    return int(np.array([float(x)], np.float64).astype(_NP[fmt.name]).view(fmt.dtype)[0])


def round_to(x, fmt: FloatFormat, mode: str = "rn") -> int:
    """Round an exact mpfr/float to ``fmt`` once and return its bits."""
    exact = gmpy2.mpfr(x, 400)  # exact copy, made outside the narrow context (inside it, mpfr() rounds)
    with gmpy2.context(context(fmt, mode)):
        r = +exact
        r = gmpy2.get_context().check_range(r)
    return encode(r, fmt)


def round_unbounded(x, bits: int):
    """Round to ``bits`` significant bits, nearest-even, with no exponent limits."""
    exact = gmpy2.mpfr(x, 400)  # made outside the narrow context, as in round_to
    with gmpy2.context(gmpy2.context(precision=bits, emin=-100000, emax=100000, round=gmpy2.RoundToNearest)):
        return +exact


def exact_fma(a: float, b: float, c: float):
    with gmpy2.context(gmpy2.context(precision=400)):
        return gmpy2.mpfr(a) * gmpy2.mpfr(b) + gmpy2.mpfr(c)


def exact_add(a: float, b: float):
    with gmpy2.context(gmpy2.context(precision=400)):
        return gmpy2.mpfr(a) + gmpy2.mpfr(b)


__all__ = ["BF16", "F16", "F32", "context", "encode", "exact_add", "exact_fma", "round_to", "round_unbounded", "value"]
