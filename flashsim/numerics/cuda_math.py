"""CUDA math-library calls as nvcc (CUDA 13.0) compiles them for sm_90, instruction by instruction.

Each function takes f32 bit patterns (uint32) and ``fast_math`` (nvcc ``--use_fast_math``, which
also turns on ``-ftz=true``, so every FMUL/FFMA of the fast path is .FTZ). The SASS each function
models was read with ``cuobjdump -sass`` from gpu/kernels/cuda_math.cu and is quoted in its
docstring; MUFU.* come from ``sfu``, FFMA/FMUL/FADD from ``fp32``. Note that cupy's NVRTC adds
``-ftz=true`` on its own: kernels compiled through it follow the ftz variants of these sequences.
"""

from __future__ import annotations

import numpy as np

from flashsim.numerics import fp32, sfu
from flashsim.numerics.formats import F32, as_bits

_LOG2E = np.uint32(0x3FB8AA3B)     # 1.4426950216293334961
_LN2 = np.uint32(0x3F317218)       # 0.69314718246459960938


def _c(x, bits) -> np.ndarray:
    return np.full(np.shape(x), np.uint32(bits), np.uint32)


def _f(bits) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return bits.view(np.float32).astype(np.float64)


def _x(x) -> np.ndarray:
    return as_bits(x, F32, "x")


def exp2f(x, *, fast_math: bool = False) -> np.ndarray:
    """``exp2f(x)``. fast: ``MUFU.EX2``. default: ``ex2.approx.f32`` (FSETP.GEU x, -126; @!P FMUL x, 0.5;
    MUFU.EX2; @!P FMUL r, r, r)."""
    return sfu.ex2_approx_f32(_x(x), ftz=fast_math)


def __expf(x, *, fast_math: bool = False) -> np.ndarray:
    """``__expf(x)``: ``FMUL{.FTZ} t, x, 1.4426950216293334961`` then exp2f's sequence."""
    x = _x(x)
    return sfu.ex2_approx_f32(fp32.mul(x, _c(x, _LOG2E), ftz=fast_math), ftz=fast_math)


def expf(x, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``expf(x)``. fast: same as ``__expf``. default (range reduction to 2^j * 2^r)::

        FFMA.SAT t, x, 0x3bbb989d, 0.5 ; FFMA.RM t, t, 252, 12582913 ; FADD j, t, -12583039
        SHF.L s, t, 23 ; FFMA r, x, 1.4426950216, -j ; FFMA r, x, 1.925963033e-08, r
        MUFU.EX2 r, r ; FMUL out, s, r

    ``ftz`` (default: ``fast_math``) is ``-ftz=true`` without fast math, as cupy's NVRTC compiles: the same
    sequence with every FFMA/FADD/FMUL .FTZ, the first FFMA.SAT split into ``FFMA.FTZ t, x, c, 0.5 ;
    FADD.FTZ.SAT t, RZ, t`` (the same value: x c + 0.5 is never subnormal). The final FMUL.FTZ flushes the
    subnormal results (x below about -87.34) to +0.
    """
    x = _x(x)
    if fast_math:
        return __expf(x, fast_math=True)
    z = bool(ftz)
    t = fp32.fma(x, _c(x, 0x3BBB989D), _c(x, 0x3F000000), sat=True, ftz=z)
    # FFMA.RM{.FTZ}: t is 0 or at least 2^-25 and the result about 2^23, so .ftz cannot act here (and
    # fp32.fma does not model .ftz with a directed rounding)
    t = fp32.fma(t, _c(x, 0x437C0000), _c(x, 0x4B400001), rnd="rm")
    j = fp32.add(t, _c(x, 0xCB40007F), ftz=z)
    s = (t << np.uint32(23)).astype(np.uint32)  # the integer in t's low bits becomes an exponent field
    r = fp32.fma(x, _c(x, _LOG2E), j ^ np.uint32(0x80000000), ftz=z)
    r = fp32.fma(x, _c(x, 0x32A57060), r, ftz=z)
    return fp32.mul(s, sfu.mufu_ex2(r), ftz=z)


def __logf(x, *, fast_math: bool = False) -> np.ndarray:
    """``__logf(x)``: ``lg2.approx{.ftz}.f32`` then ``FMUL{.FTZ} r, 0.69314718246459960938``."""
    x = _x(x)
    return fp32.mul(sfu.lg2_approx_f32(x, ftz=fast_math), _c(x, _LN2), ftz=fast_math)


_LOGF_POLY = (0x3E1039F6, 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9, 0x3E4CED0B, 0xBE7FFF22, 0x3EAAAA78, 0xBF000000)


def logf(x, *, fast_math: bool = False) -> np.ndarray:
    """``logf(x)``. fast: same as ``__logf``. default::

        FSETP.GEU P1, x, 2^-126 ; FSEL e, 0, -23, P1 ; @!P1 FMUL x, x, 2^23
        IADD3 i, x, -0x3f2aaaab ; ISETP.GE.U32 P0, x, 0x7f800000 ; LOP3 k, i, 0xff800000 (and)
        IADD3 m, x, -k ; I2FP.F32.S32 k, k ; FADD m, m, -1 ; FFMA e, k, 2^-23, e
        FFMA p, m, -0x3e055027, c0 ; FFMA p, m, p, c1 ... c6 ; FFMA p, m, p, -0.5 ; FMUL p, m, p
        FFMA p, m, p, m ; FFMA r, e, ln2, p ; @P0 FFMA r, x, +Inf, +Inf ; FSETP.NEU x, 0 ? r : -Inf
    """
    x = _x(x)
    if fast_math:
        return __logf(x, fast_math=True)
    p1 = _f(x) >= 2.0**-126
    p1 = p1 | np.isnan(_f(x))  # GEU: unordered is true
    e = np.where(p1, np.uint32(0), np.uint32(0xC1B80000))  # 0 or -23.0
    x = np.where(p1, x, fp32.mul(x, _c(x, 0x4B000000)))
    i = (x.astype(np.int64) - 0x3F2AAAAB) & 0xFFFFFFFF
    p0 = x >= np.uint32(0x7F800000)
    k = (i & 0xFF800000).astype(np.uint32)
    m = ((x.astype(np.int64) - k.astype(np.int64)) & 0xFFFFFFFF).astype(np.uint32)
    kf = k.view(np.int32).astype(np.float64).astype(np.float32).view(np.uint32)  # I2FP.F32.S32 (exact here)
    m = fp32.add(m, _c(x, 0xBF800000))
    e = fp32.fma(kf, _c(x, 0x34000000), e)
    p = fp32.fma(m, _c(x, 0xBE055027), _c(x, _LOGF_POLY[0]))
    for c in _LOGF_POLY[1:]:
        p = fp32.fma(m, p, _c(x, c))
    p = fp32.mul(m, p)
    p = fp32.fma(m, p, m)
    r = fp32.fma(e, _c(x, _LN2), p)
    r = np.where(p0, fp32.fma(x, _c(x, 0x7F800000), _c(x, 0x7F800000)), r)
    return np.where(_f(x) != 0.0, r, np.uint32(0xFF800000)).astype(np.uint32)


def reciprocal(x, *, fast_math: bool = False) -> np.ndarray:
    """``1.f / x``. fast: ``MUFU.RCP`` (rcp.approx.ftz.f32). default: IEEE ``rcp.rn.f32``."""
    x = _x(x)
    return sfu.mufu_rcp(x) if fast_math else sfu.rcp_rn_f32(x)


def __fdividef(a, b, *, fast_math: bool = False) -> np.ndarray:
    """``__fdividef(a, b)``. fast: ``MUFU.RCP r, b ; FMUL.FTZ out, a, r``. default:
    ``FSETP.GEU P0, |b|, 2^-126 ; @!P0 FMUL b, b, 2^24 ; @!P0 FMUL a, a, 2^24 ; MUFU.RCP r, b ; FMUL out, r, a``."""
    a, b = as_bits(a, F32, "a"), as_bits(b, F32, "b")
    if fast_math:
        return fp32.mul(a, sfu.mufu_rcp(b), ftz=True)
    small = ~(np.abs(_f(b)) >= 2.0**-126)
    two24 = _c(b, 0x4B800000)
    b = np.where(small, fp32.mul(b, two24), b)
    a = np.where(small, fp32.mul(a, two24), a)
    return fp32.mul(sfu.mufu_rcp(b), a)


def tanhf(x, *, fast_math: bool = False) -> np.ndarray:
    """``tanhf(x)``. fast: ``MUFU.TANH``. default::

        FMUL t, |x|, 2.88539004 ; FMUL x2, x, x ; P1 = |x| >= 0.6 ; P0 = |x| >= 9.01091385
        FFMA q, x2, 0x3c80f082, -0.0523039624 ; MUFU.EX2 t, t ; FADD t, t, 1 ; FFMA q, x2, q, 0.133152977
        FFMA q, x2, q, -0.333327681 ; MUFU.RCP t, t ; FFMA q, x2, q, 0 ; FFMA r, t, -2, 1
        FSEL r, r, 1, !P0 ; LOP3 r = copysign(r, x) ; @!P1 FFMA r, x, q, x
    """
    x = _x(x)
    if fast_math:
        return sfu.mufu_tanh(x)
    ax = x & np.uint32(0x7FFFFFFF)
    t = fp32.mul(ax, _c(x, 0x4038AA3B))
    x2 = fp32.mul(x, x)
    p1 = _f(ax) >= 0.60000002384185791016
    p0 = _f(ax) >= 9.010913848876953125
    q = fp32.fma(x2, _c(x, 0x3C80F082), _c(x, 0xBD563CAE))
    t = fp32.add(sfu.mufu_ex2(t), _c(x, 0x3F800000))
    q = fp32.fma(x2, q, _c(x, 0x3E085941))
    q = fp32.fma(x2, q, _c(x, 0xBEAAA9ED))
    t = sfu.mufu_rcp(t)
    q = fp32.fma(x2, q, _c(x, 0))
    r = fp32.fma(t, _c(x, 0xC0000000), _c(x, 0x3F800000))
    r = np.where(p0, np.uint32(0x3F800000), r)
    r = (r & np.uint32(0x7FFFFFFF)) | (x & np.uint32(0x80000000))
    return np.where(p1, r, fp32.fma(x, q, x)).astype(np.uint32)


def scaled_exp2(x, scale, max_scaled, *, fast_math: bool = False) -> np.ndarray:
    """``exp2f(x * scale - max_scaled)`` (FlashAttention's softmax): ``FFMA{.FTZ} t, x, scale, -max``
    then exp2f's sequence (fast: MUFU.EX2 directly)."""
    x = _x(x)
    scale = np.broadcast_to(as_bits(scale, F32, "scale"), x.shape)
    neg_max = np.broadcast_to(as_bits(max_scaled, F32, "max_scaled"), x.shape) ^ np.uint32(0x80000000)
    return sfu.ex2_approx_f32(fp32.fma(x, scale, neg_max, ftz=fast_math), ftz=fast_math)


FUNCTIONS = {  # name -> (number of operands, model)
    "exp2f": (1, exp2f), "__expf": (1, __expf), "expf": (1, expf), "__logf": (1, __logf), "logf": (1, logf),
    "reciprocal": (1, reciprocal), "__fdividef": (2, __fdividef), "tanhf": (1, tanhf),
    "scaled_exp2": (3, scaled_exp2),
}
