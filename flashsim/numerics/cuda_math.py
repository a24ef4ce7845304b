"""CUDA math-library calls as nvcc (CUDA 13.0) compiles them for sm_90, instruction by instruction.

Each function takes f32 bit patterns (uint32) and two switches, the compiler options the calling code was
built with:

- ``fast_math``: nvcc/NVRTC ``--use_fast_math`` (the intrinsic forms: MUFU with little or no arithmetic
  around it);
- ``ftz``: ``-ftz=true``, flush-to-zero of f32 subnormals. ``None`` (the default) means what the options
  imply: ``--use_fast_math`` turns ``-ftz=true`` on and nothing else does, so ``ftz=None`` is
  ``ftz=fast_math``. cupy's NVRTC adds ``-ftz=true`` to every compilation, so code compiled through cupy
  (without fast math) is ``ftz=True, fast_math=False``. ``fast_math=True, ftz=False`` is
  ``--use_fast_math -ftz=false``: an explicit ``-ftz=false`` overrides what fast math implies, in either
  order (NVRTC 13.0).

What ``ftz=True`` does is what the compiler emits for it: every FFMA/FADD/FMUL of the sequence becomes its
``.FTZ`` form (a subnormal operand reads as a zero of its sign; a result that is tiny after rounding to 24
bits is flushed to a zero of its sign: ``fp32``), every FSETP its ``.FTZ`` form, and every PTX approx
instruction its ``.ftz`` form, which is the bare MUFU (``sfu``: MUFU.EX2/LG2/RCP read subnormal inputs as
zeros and flush subnormal results). The non-ftz PTX forms are short sequences that scale around MUFU to
keep subnormals (``sfu.ex2_approx_f32`` etc.). The one exception is MUFU.TANH (``tanh.approx.f32`` has no
.ftz form), which returns subnormal inputs unchanged under either setting.

The SASS quoted in each docstring was read with ``cuobjdump -sass`` / nvdisasm from
gpu/kernels/cuda_math.cu built four ways (plain, ``-ftz=true``, ``--use_fast_math``, ``--use_fast_math
-ftz=false``); MUFU.* come from ``sfu``, FFMA/FADD/FMUL from ``fp32``.

Checked against the GPU: the settings with ``ftz == fast_math`` (gpu/kernels/cuda_math.cu built with nvcc,
plain and with --use_fast_math, 1,000,000 inputs per function: traces/numerics/sfu_report.json). With
``fast_math=True, ftz=False`` every function compiles to the floating-point instructions of a checked plain
build (expf and logf to those of __expf and __logf; tanhf to the fast build's MUFU.TANH), except
reciprocal, which becomes rcp.approx.f32 (checked as a PTX instruction on all 2^32 inputs: ``sfu``). With
``ftz=True, fast_math=False``, exp2f, __expf, __logf, __fdividef and scaled_exp2 compile to their
--use_fast_math code (__fdividef also matches H100 outputs of the SASS probe probe_fdiv,
traces/sass/probes.npz); expf, logf, tanhf and reciprocal get the -ftz=true forms of their accurate
sequences. Of those, reciprocal (rcp.rn.ftz.f32) matches H100 outputs of probe_frcp and expf runs inside
the kernel1 twin, whose outputs match the GPU (traces/fa/fa_report.md); expf, logf and tanhf are checked
function by function only against flashsim's SASS interpreter running the compiler's code
(tests/test_cuda_math.py), not yet against the GPU.
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics import fp32, sfu
from flashsim.numerics.formats import F32, as_bits

_LOG2E = np.uint32(0x3FB8AA3B)     # 1.4426950216293334961
_LN2 = np.uint32(0x3F317218)       # 0.69314718246459960938
_SIGN = np.uint32(0x80000000)
_EXP = np.uint32(0x7F800000)


def _c(x, bits) -> np.ndarray:
    return np.full(np.shape(x), np.uint32(bits), np.uint32)


def _f(bits) -> np.ndarray:
    """f32 bit patterns as float64 values (for the FSETP comparisons). NaN patterns are made quiet first:
    a signalling NaN would raise the invalid-operation flag in the cast, and every NaN compares unordered."""
    nan = (bits & np.uint32(0x7FFFFFFF)) > _EXP
    return np.where(nan, bits | np.uint32(0x00400000), bits).astype(np.uint32).view(np.float32).astype(np.float64)


def _daz(bits, ftz: bool) -> np.ndarray:
    """The operand as a ``.FTZ`` comparison (FSETP.*.FTZ) reads it: a subnormal is a zero of its sign."""
    return np.where((bits & _EXP) == 0, bits & _SIGN, bits).astype(np.uint32) if ftz else bits


def _x(x) -> np.ndarray:
    return as_bits(x, F32, "x")


def _ftz(ftz, fast_math) -> bool:
    """The flush-to-zero setting: ``ftz`` if given, else what the options imply (fast math implies it)."""
    if ftz is None:
        return bool(fast_math)
    if not isinstance(ftz, (bool, np.bool_)):
        raise bad_argument("ftz", ftz, "expected True, False or None (None: the setting fast_math implies)")
    return bool(ftz)


def exp2f(x, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``exp2f(x)``: ``ex2.approx{.ftz}.f32`` whatever ``fast_math`` is.

    - ftz: ``MUFU.EX2`` (subnormal x reads as 0, results below 2^-126, x < -126, flush to +0).
    - no ftz: ``FSETP.GEU P0, x, -126 ; @!P0 FMUL x, x, 0.5 ; MUFU.EX2 r, x ; @!P0 FMUL r, r, r`` (the
      squaring produces the subnormal results, down to x = -149).
    """
    return sfu.ex2_approx_f32(_x(x), ftz=_ftz(ftz, fast_math))


def __expf(x, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``__expf(x)``: ``FMUL{.FTZ} t, x, 1.4426950216293334961`` then exp2f's sequence, whatever
    ``fast_math`` is: ftz ``FMUL.FTZ ; MUFU.EX2``; no ftz ``FMUL ; FSETP.GEU ; @!P FMUL ; MUFU.EX2 ; @!P FMUL``."""
    x = _x(x)
    z = _ftz(ftz, fast_math)
    return sfu.ex2_approx_f32(fp32.mul(x, _c(x, _LOG2E), ftz=z), ftz=z)


def expf(x, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``expf(x)``. fast math: ``__expf``'s sequence (with or without ftz). Otherwise range reduction to
    2^j * 2^r; no ftz::

        FFMA.SAT t, x, 0x3bbb989d, 0.5 ; FFMA.RM t, t, 252, 12582913 ; FADD j, t, -12583039
        IMAD.SHL.U32 s, t, 0x800000 (t << 23) ; FFMA r, x, 1.4426950216, -j ; FFMA r, x, 1.925963033e-08, r
        MUFU.EX2 r, r ; FMUL out, s, r

    ftz: the same sequence with every FFMA/FADD/FMUL .FTZ (``FFMA.FTZ.RM`` too), the first FFMA.SAT split
    into ``FFMA.FTZ t, x, c, 0.5 ; FADD.FTZ.SAT t, RZ, t`` (the same value: x c + 0.5 is never subnormal).
    The final FMUL.FTZ flushes the subnormal results (x below about -87.34) to +0; a subnormal x gives 1.
    """
    x = _x(x)
    z = _ftz(ftz, fast_math)
    if fast_math:
        return __expf(x, ftz=z)
    t = fp32.fma(x, _c(x, 0x3BBB989D), _c(x, 0x3F000000), sat=True, ftz=z)
    t = fp32.fma(t, _c(x, 0x437C0000), _c(x, 0x4B400001), rnd="rm", ftz=z)
    j = fp32.add(t, _c(x, 0xCB40007F), ftz=z)
    s = (t << np.uint32(23)).astype(np.uint32)  # the integer in t's low bits becomes an exponent field
    r = fp32.fma(x, _c(x, _LOG2E), j ^ _SIGN, ftz=z)
    r = fp32.fma(x, _c(x, 0x32A57060), r, ftz=z)
    return fp32.mul(s, sfu.mufu_ex2(r), ftz=z)


def __logf(x, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``__logf(x)``: ``lg2.approx{.ftz}.f32`` then ``FMUL{.FTZ} r, 0.69314718246459960938``, whatever
    ``fast_math`` is. ftz: ``MUFU.LG2 ; FMUL.FTZ`` (a subnormal x of either sign reads as 0: -Inf). No ftz:
    ``FSETP.GEU P0, |x|, 2^-126 ; @!P0 FMUL x, x, 2^24 ; MUFU.LG2 ; @!P0 FADD r, r, -24 ; FMUL``."""
    x = _x(x)
    z = _ftz(ftz, fast_math)
    return fp32.mul(sfu.lg2_approx_f32(x, ftz=z), _c(x, _LN2), ftz=z)


_LOGF_POLY = (0x3E1039F6, 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9, 0x3E4CED0B, 0xBE7FFF22, 0x3EAAAA78, 0xBF000000)


def logf(x, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``logf(x)``. fast math: ``__logf``'s sequence (with or without ftz). Otherwise, no ftz::

        FSETP.GEU P1, x, 2^-126 ; FSEL e, 0, -23, P1 ; @!P1 FMUL x, x, 2^23
        IADD3 i, x, -0x3f2aaaab ; ISETP.GE.U32 P0, x, 0x7f800000 ; LOP3 k, i, 0xff800000 (and)
        IADD3 m, x, -k ; I2FP.F32.S32 k, k ; FADD m, m, -1 ; FFMA e, k, 2^-23, e
        FFMA p, m, -0x3e055027, c0 ; FFMA p, m, p, c1 ... c6 ; FFMA p, m, p, -0.5 ; FMUL p, m, p
        FFMA p, m, p, m ; FFMA r, e, ln2, p ; @P0 FFMA r, x, +Inf, +Inf ; FSETP.NEU x, 0 ? r : -Inf

    ftz: the same sequence with FSETP.GEU.FTZ / FSETP.NEU.FTZ and every FMUL/FADD/FFMA .FTZ. The
    @!P1 FMUL.FTZ flushes a subnormal x (either sign) to a zero of its sign, so logf of a subnormal is -Inf
    (without ftz: the logarithm of a positive subnormal, NaN for a negative one).
    """
    x = _x(x)
    z = _ftz(ftz, fast_math)
    if fast_math:
        return __logf(x, ftz=z)
    xf = _f(_daz(x, z))
    p1 = (xf >= 2.0**-126) | np.isnan(xf)  # GEU: unordered is true
    e = np.where(p1, np.uint32(0), np.uint32(0xC1B80000))  # 0 or -23.0
    x = np.where(p1, x, fp32.mul(x, _c(x, 0x4B000000), ftz=z))
    i = (x.astype(np.int64) - 0x3F2AAAAB) & 0xFFFFFFFF
    p0 = x >= np.uint32(0x7F800000)
    k = (i & 0xFF800000).astype(np.uint32)
    m = ((x.astype(np.int64) - k.astype(np.int64)) & 0xFFFFFFFF).astype(np.uint32)
    kf = k.view(np.int32).astype(np.float64).astype(np.float32).view(np.uint32)  # I2FP.F32.S32 (exact here)
    m = fp32.add(m, _c(x, 0xBF800000), ftz=z)
    e = fp32.fma(kf, _c(x, 0x34000000), e, ftz=z)
    p = fp32.fma(m, _c(x, 0xBE055027), _c(x, _LOGF_POLY[0]), ftz=z)
    for c in _LOGF_POLY[1:]:
        p = fp32.fma(m, p, _c(x, c), ftz=z)
    p = fp32.mul(m, p, ftz=z)
    p = fp32.fma(m, p, m, ftz=z)
    r = fp32.fma(e, _c(x, _LN2), p, ftz=z)
    r = np.where(p0, fp32.fma(x, _c(x, 0x7F800000), _c(x, 0x7F800000), ftz=z), r)
    return np.where(_f(_daz(x, z)) != 0.0, r, np.uint32(0xFF800000)).astype(np.uint32)


def reciprocal(x, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``1.f / x``.

    - fast math, ftz: ``rcp.approx.ftz.f32`` = ``MUFU.RCP``.
    - fast math, no ftz: ``rcp.approx.f32`` = ``FSETP.GEU |x|, 2^-126 ; FSETP.GT |x|, 2^126 ; FSEL s ;
      FSEL s ; FMUL x, x, s ; MUFU.RCP ; FMUL r, s, r`` (``sfu.rcp_approx_f32``).
    - ftz: IEEE ``rcp.rn.ftz.f32`` (MUFU.RCP + FFMA refinement, ``__cuda_sm20_rcp_rn_ftz_f32_slowpath`` for
      extreme exponents): a subnormal x gives +-Inf, |x| > 2^126 gives +-0.
    - no ftz: IEEE ``rcp.rn.f32`` (``__cuda_sm20_rcp_rn_f32_slowpath``), subnormals kept both ways.
    """
    x = _x(x)
    z = _ftz(ftz, fast_math)
    if fast_math:
        return sfu.rcp_approx_f32(x, ftz=z)
    return sfu.rcp_rn_ftz_f32(x) if z else sfu.rcp_rn_f32(x)


def __fdividef(a, b, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``__fdividef(a, b)``, whatever ``fast_math`` is. ftz: ``MUFU.RCP r, b ; FMUL.FTZ out, a, r``. No ftz:
    ``FSETP.GEU P0, |b|, 2^-126 ; @!P0 FMUL b, b, 2^24 ; @!P0 FMUL a, a, 2^24 ; MUFU.RCP r, b ; FMUL out, r, a``."""
    a, b = as_bits(a, F32, "a"), as_bits(b, F32, "b")
    if _ftz(ftz, fast_math):
        return fp32.mul(a, sfu.mufu_rcp(b), ftz=True)
    small = ~(np.abs(_f(b)) >= 2.0**-126)
    two24 = _c(b, 0x4B800000)
    b = np.where(small, fp32.mul(b, two24), b)
    a = np.where(small, fp32.mul(a, two24), a)
    return fp32.mul(sfu.mufu_rcp(b), a)


def tanhf(x, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``tanhf(x)``. fast math: ``MUFU.TANH`` (tanh.approx.f32) with or without ftz: subnormal inputs come
    back unchanged either way. Otherwise, no ftz::

        FMUL t, |x|, 2.88539004 ; FMUL x2, x, x ; P1 = |x| >= 0.6 ; P0 = |x| >= 9.01091385
        FFMA q, x2, 0x3c80f082, -0.0523039624 ; MUFU.EX2 t, t ; FADD t, t, 1 ; FFMA q, x2, q, 0.133152977
        FFMA q, x2, q, -0.333327681 ; MUFU.RCP t, t ; FFMA q, x2, q, 0 ; FFMA r, t, -2, 1
        FSEL r, r, 1, !P0 ; LOP3 r = copysign(r, x) ; @!P1 FFMA r, x, q, x

    ftz: the same with FSETP.GE.FTZ and every FMUL/FADD/FFMA .FTZ, so a subnormal x gives a zero of its
    sign (without ftz: x itself).
    """
    x = _x(x)
    z = _ftz(ftz, fast_math)
    if fast_math:
        return sfu.mufu_tanh(x)
    ax = x & np.uint32(0x7FFFFFFF)
    t = fp32.mul(ax, _c(x, 0x4038AA3B), ftz=z)
    x2 = fp32.mul(x, x, ftz=z)
    axf = _f(_daz(ax, z))
    p1 = axf >= 0.60000002384185791016
    p0 = axf >= 9.010913848876953125
    q = fp32.fma(x2, _c(x, 0x3C80F082), _c(x, 0xBD563CAE), ftz=z)
    t = fp32.add(sfu.mufu_ex2(t), _c(x, 0x3F800000), ftz=z)
    q = fp32.fma(x2, q, _c(x, 0x3E085941), ftz=z)
    q = fp32.fma(x2, q, _c(x, 0xBEAAA9ED), ftz=z)
    t = sfu.mufu_rcp(t)
    q = fp32.fma(x2, q, _c(x, 0), ftz=z)
    r = fp32.fma(t, _c(x, 0xC0000000), _c(x, 0x3F800000), ftz=z)
    r = np.where(p0, np.uint32(0x3F800000), r)
    r = (r & np.uint32(0x7FFFFFFF)) | (x & _SIGN)
    return np.where(p1, r, fp32.fma(x, q, x, ftz=z)).astype(np.uint32)


def scaled_exp2(x, scale, max_scaled, *, fast_math: bool = False, ftz: bool | None = None) -> np.ndarray:
    """``exp2f(x * scale - max_scaled)`` (FlashAttention's softmax), whatever ``fast_math`` is:
    ``FFMA{.FTZ} t, x, scale, -max`` then exp2f's sequence (ftz: ``MUFU.EX2`` directly)."""
    x = _x(x)
    z = _ftz(ftz, fast_math)
    scale = np.broadcast_to(as_bits(scale, F32, "scale"), x.shape)
    neg_max = np.broadcast_to(as_bits(max_scaled, F32, "max_scaled"), x.shape) ^ _SIGN
    return sfu.ex2_approx_f32(fp32.fma(x, scale, neg_max, ftz=z), ftz=z)


FUNCTIONS = {  # name -> (number of operands, model)
    "exp2f": (1, exp2f), "__expf": (1, __expf), "expf": (1, expf), "__logf": (1, __logf), "logf": (1, logf),
    "reciprocal": (1, reciprocal), "__fdividef": (2, __fdividef), "tanhf": (1, tanhf),
    "scaled_exp2": (3, scaled_exp2),
}
