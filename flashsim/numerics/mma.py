"""Bit-exact models of the tensor-core arithmetic of mma.sync.m16n8k16 / m16n8k8 (f16/bf16 in, f32/f16 out).

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

Engines (all give the same bits; tests hold them to each other and to a Python-int reference):
  - "numba" (default): ``_fast_kernel``, per tile: A, B and C decoded with bit operations into int64
    rows, then an LLVM-IR intrinsic (``_rows16`` / ``_rows8``) that treats the 8 columns of B as the 8
    lanes of a <8 x i64> vector and is unrolled over k (E as a running max, then each exact product
    shifted right, i.e. truncated in sign-magnitude, and summed: about ten SIMD instructions per
    product for 8 outputs); then a vectorised loop rounds the 128 sums. Tiles with an Inf/NaN
    operand, and models with IEEE zero signs, get scalar fix-ups of the affected outputs.
  - "generic": ``_mma_kernel``, the scalar per-output loop (A and B through 65536-entry tables built
    once with ``formats.decode``), kept as a second implementation to check the fast one against.
  - "round_exact": the generic kernel's exact sums rounded by the shared ``formats.round_exact``
    (slow, kept to cross-check the fused rounding).

``fused_mma`` is the same engine for other instructions that share the rule (flashsim.numerics.wgmma):
A and B of any formats up to 16 bits, e4m3/e5m2 included (their k32 steps and mixed A/B formats run on
the generic kernel), and any number of products per step.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.core.extending import intrinsic

from flashsim.errors import bad_argument
from flashsim.numerics.formats import BF16, F16, F32, INF, ZERO, FloatFormat, decode, round_exact

__all__ = ["MODELS", "MmaModel", "fused_mma", "gemm", "mma", "mma_m16n8k16", "mma_m16n8k8"]

ATYPES = types.MappingProxyType({"f16": F16, "bf16": BF16})
CTYPES = types.MappingProxyType({"f32": F32, "f16": F16})
ARCHS = ("sm_90", "sm_80")
ENGINES = ("numba", "generic", "round_exact")

# (k, atype, ctype) combinations with a model; every other PTX variant raises NotImplementedError.
MODELLED = frozenset({(16, "f16", "f32"), (16, "bf16", "f32"), (16, "f16", "f16"),
                      (8, "f16", "f32"), (8, "bf16", "f32")})

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


# ---- decode tables --------------------------------------------------------------------------------

_EXCLUDED = -(1 << 40)  # E-exponent of a term left out of E: far below every real exponent, no overflow


def _zero_e(fmt: FloatFormat, model: MmaModel) -> int:
    """The exponent a zero operand contributes to E under ``model`` (``_EXCLUDED`` when it does not)."""
    if model.zero_policy == "exclude":
        return _EXCLUDED
    return fmt.emin if model.zero_exp is None else model.zero_exp


@functools.lru_cache(maxsize=16)
def _tables(fmt: FloatFormat, zero_e: int):
    """Per 16-bit (or 8-bit) pattern: signed significand, E-exponent, class, sign (built with formats.decode).

    E-exponent = unbiased exponent of the value's binade (subnormals: emin), so the significand's
    last bit weighs 2^(E-exponent - mbits); a zero gets ``zero_e``.  Read-only arrays.
    """
    sign, sig, exp, cls = decode(np.arange(1 << fmt.nbits).astype(fmt.dtype), fmt)
    ssig = np.where(sign == 1, -sig, sig).astype(np.int64)
    eexp = np.where(cls == ZERO, zero_e, exp + fmt.mbits).astype(np.int64)
    ssig[cls >= INF] = 0
    eexp[cls >= INF] = _EXCLUDED
    out = (ssig, eexp, cls.astype(np.uint8), sign.astype(np.uint8))
    for arr in out:
        arr.flags.writeable = False
    return out


# ---- the njit kernel ------------------------------------------------------------------------------

# per-output codes of the kernel
_C_FINITE, _C_NAN, _C_INF = 0, 1, 2


@numba.njit(cache=True, inline="always")
def _decode_f32(u, zero_e, excluded):
    """One f32 pattern -> (signed significand, E-exponent, class, sign); mirrors formats.decode.

    bit diagram:  [31 sign | 30..23 exponent field | 22..0 fraction]
    """
    u = np.int64(u)
    s = (u >> 31) & 1
    ef = (u >> 23) & 0xFF
    mf = u & 0x7FFFFF
    if ef == 0xFF:
        return np.int64(0), np.int64(excluded), np.uint8(3 if mf != 0 else 2), np.uint8(s)
    if ef == 0:
        if mf == 0:
            return np.int64(0), np.int64(zero_e), np.uint8(0), np.uint8(s)
        sig = mf
        e = np.int64(-126)  # subnormal: 0.f * 2^emin
    else:
        sig = mf | 0x800000
        e = ef - 127
    return (-sig if s == 1 else sig), e, np.uint8(1), np.uint8(s)


@intrinsic
def _clz64(typingctx, x):
    """LLVM ctlz on an int64 (count of leading zero bits; 64 for 0)."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]),
                                            "llvm.ctlz.i64")
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 0)])  # 0 in: defined (64)
    return numba.types.int64(numba.types.int64), codegen


@numba.njit(cache=True, inline="always")
def _bit_length(x):
    """Bit length of a non-negative int64 (0 for 0)."""
    return 64 - _clz64(np.int64(x))


@numba.njit(cache=True, inline="always")
def _round_to_bits(neg, mag, exp, m, emin, emax, rn, sat, uf_plus):
    """Bits of the rounding of (-1)^neg * mag * 2^exp (mag > 0, < 2^62) to a binary format.

    Only what the mma needs of formats.round_exact (RZ / RNE, no sticky input), inlined because
    round_exact (numpy, ~5M values/s here) cannot keep up with 200k tiles/s (25.6M outputs/s);
    tests check it against round_exact bit for bit, and engine="round_exact" uses the original.
    bit diagram of the result: [sign | biased exponent (field = q + m - emin + 1) | m fraction bits]
    """
    inf_bits = ((2 * emax + 1) << m)  # exponent field all ones, fraction 0
    sbit = np.int64(1) << (m + (_bit_length(emax) + 1))  # 1 + ebits + m bits: sign above exponent
    top = exp + _bit_length(mag) - 1
    if top > emax:
        # |sum| >= 2^(emax+1): Inf on the device even under RZ; max finite when saturating
        body = inf_bits - 1 if sat else inf_bits
        return body + (sbit if neg else 0)
    q = top - m
    if q < emin - m:
        q = emin - m  # subnormal result: quantum fixed at 2^(emin - m)
    sh = q - exp
    if sh <= 0:
        kept = mag << (-sh)
    elif sh > 62:
        kept = np.int64(0)  # mag < 2^62: below half the quantum, RZ and RNE both give 0
    else:
        kept = mag >> sh
        if rn:
            guard = (mag >> (sh - 1)) & 1
            rest = mag & ((np.int64(1) << (sh - 1)) - 1)
            if guard == 1 and (rest != 0 or (kept & 1) == 1):
                kept += 1  # round to nearest, ties to even
    if kept == 0:
        # a nonzero sum rounded to zero: signed zero (or +0 by the model's choice)
        return np.int64(0) if (uf_plus or not neg) else sbit
    body = (q - emin + m) * (np.int64(1) << m) + kept
    if body >= inf_bits:
        body = inf_bits - 1 if sat else inf_bits  # RNE carried past max finite
    return body + (sbit if neg else 0)


@numba.njit(cache=True)
def _special(ca, ga, cb, gb, i, j, kn, ccls, csgn):
    """(code, negative) of one output whose inputs hold an Inf or NaN (ca/cb: classes, ga/gb: signs).

    Any NaN, Inf * 0, or +Inf + -Inf gives the canonical NaN; otherwise the Inf term's Inf.
    """
    nan = ccls == 3
    pinf = ccls == 2 and csgn == 0
    ninf = ccls == 2 and csgn == 1
    for k in range(kn):
        x = ca[i, k]
        y = cb[j, k]
        if x == 3 or y == 3:
            nan = True
        elif x == 2 or y == 2:
            if x == 0 or y == 0:
                nan = True
            elif ga[i, k] != gb[j, k]:
                ninf = True
            else:
                pinf = True
    if nan or (pinf and ninf):
        return _C_NAN, False
    return _C_INF, ninf


@numba.njit(cache=True)
def _all_negative_zeros(ca, ga, cb, gb, i, j, kn, ccls, csgn):
    """True when C and every product are zeros of negative sign (IEEE: their sum is -0)."""
    if ccls != 0 or csgn != 1:
        return False
    for k in range(kn):
        if (ca[i, k] != 0 and cb[j, k] != 0) or ga[i, k] == gb[j, k]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _mma_kernel(a, b, c, k0, kn, tsig, texp, tcls, tsgn, bsig, bexp, bcls, bsgn, csig_t, cexp_t, ccls_t, csgn_t,
                am, bm, c32, czero_e, cm, frac, floor_abs, zero_ieee,
                inline, dm, demin, demax, rn, sat, uf_plus, dnan,
                out_bits, o_sign, o_mag, o_exp, o_code):
    """D (or its exact sums) for products k0..k0+kn-1 of every tile of the batch.

    a (T,16,K) / b (T,K,8) uint16 (or uint8) patterns, c (T,16,8) patterns of D's format; A, B and a
    16-bit C each decode through their own tables (t*, b*, c*_t; the C tables are unused for an f32 C).
    A term's value is sig * 2^(e - mbits); in units of 2^(E - frac) it is sig * 2^(frac - mbits) /
    2^(E - e): its magnitude is shifted left by max(frac - mbits, 0), then right (truncating) by the rest.
    """
    n_tiles = a.shape[0]
    sa = np.empty((16, kn), np.int64)
    ea = np.empty((16, kn), np.int64)
    sb = np.empty((8, kn), np.int64)  # B transposed: a column's K values are contiguous
    eb = np.empty((8, kn), np.int64)
    ca = np.empty((16, kn), np.uint8)  # classes and signs, read only for specials and zero signs
    ga = np.empty((16, kn), np.uint8)
    cb = np.empty((8, kn), np.uint8)
    gb = np.empty((8, kn), np.uint8)
    rowspec = np.empty(16, np.uint8)  # bit 0: the row (column) holds an Inf, bit 1: a NaN
    colspec = np.empty(8, np.uint8)
    # a product significand carries am + bm fractional bits (mbits of A and of B), C carries cm
    lp = frac - (am + bm)
    lpl = max(lp, 0)
    lpr = max(-lp, 0)
    lc = frac - cm
    lcl = max(lc, 0)
    lcr = max(-lc, 0)
    sbit = np.int64(1) << (dm + _bit_length(demax) + 1)
    inf_bits = (2 * demax + 1) << dm
    for t in range(n_tiles):
        for i in range(16):
            sp = 0
            for k in range(kn):
                v = a[t, i, k0 + k]
                sa[i, k] = tsig[v]
                ea[i, k] = texp[v]
                x = tcls[v]
                ca[i, k] = x
                ga[i, k] = tsgn[v]
                sp |= (x >> 1) << (x & 1)  # class 2 (Inf) -> 1, 3 (NaN) -> 2
            rowspec[i] = sp
        for j in range(8):
            colspec[j] = 0
        for k in range(kn):
            for j in range(8):
                v = b[t, k0 + k, j]
                sb[j, k] = bsig[v]
                eb[j, k] = bexp[v]
                x = bcls[v]
                cb[j, k] = x
                gb[j, k] = bsgn[v]
                colspec[j] |= (x >> 1) << (x & 1)
        for i in range(16):
            for j in range(8):
                cv = c[t, i, j]
                if c32:
                    csig, cexp, ccls, csgn = _decode_f32(cv, czero_e, _EXCLUDED)
                else:
                    csig = csig_t[cv]
                    cexp = cexp_t[cv]
                    ccls = ccls_t[cv]
                    csgn = csgn_t[cv]
                spec = rowspec[i] | colspec[j]
                if spec != 0 or ccls >= 2:
                    if (spec & 2) != 0 or ccls == 3:
                        code, neg = _C_NAN, False  # a NaN operand
                    else:
                        code, neg = _special(ca, ga, cb, gb, i, j, kn, ccls, csgn)
                    if inline:
                        # an Inf term gives that Inf (not an overflow: never saturated)
                        out_bits[t, i, j] = dnan if code == _C_NAN else inf_bits + (sbit if neg else 0)
                    else:
                        o_code[t, i, j] = code
                        o_sign[t, i, j] = 1 if neg else 0
                        o_mag[t, i, j] = 0
                        o_exp[t, i, j] = 0
                    continue
                # E: the largest exponent among the terms (excluded zeros sit far below), clamped
                big_e = cexp
                for k in range(kn):
                    big_e = max(big_e, ea[i, k] + eb[j, k])
                big_e = max(big_e, floor_abs)
                # C term: truncated toward zero in sign-magnitude to a multiple of 2^(E - frac)
                sh = min(big_e - cexp + lcr, 62)
                m = (abs(csig) << lcl) >> sh
                sg = csig >> 63  # 0 or -1: (m ^ sg) - sg negates m when sg == -1
                acc = (m ^ sg) - sg
                # products: exact significand products, truncated the same way, summed exactly
                for k in range(kn):
                    p = sa[i, k] * sb[j, k]
                    sh = min(big_e - (ea[i, k] + eb[j, k]) + lpr, 62)
                    m = (abs(p) << lpl) >> sh
                    sg = p >> 63
                    acc += (m ^ sg) - sg
                neg = acc < 0
                if acc == 0:
                    # exact zero sum: +0, or -0 under IEEE rules when every term is a -0
                    neg = zero_ieee and _all_negative_zeros(ca, ga, cb, gb, i, j, kn, ccls, csgn)
                mag = abs(acc)
                if inline:
                    if mag == 0:
                        out_bits[t, i, j] = sbit if neg else 0
                    else:
                        out_bits[t, i, j] = _round_to_bits(neg, mag, big_e - frac, dm, demin, demax,
                                                           rn, sat, uf_plus)
                else:
                    o_code[t, i, j] = _C_FINITE
                    o_sign[t, i, j] = 1 if neg else 0
                    o_mag[t, i, j] = mag
                    o_exp[t, i, j] = big_e - frac


# ---- the fast kernel ------------------------------------------------------------------------------
#
# The same arithmetic as _mma_kernel, laid out for SIMD (engine "numba", see the module docstring).
# The hot part is written as LLVM IR because numba's loops over j in range(8) inside loops over k and
# i get unrolled and then vectorised along the wrong axis (gathers); the IR keeps E and the sums of
# a row in vector registers. Generic vector IR: any LLVM target legalises it (AVX-512 runs it as is).

_V8 = ir.VectorType(ir.IntType(64), 8)


def _make_rows(kn: int):
    """Intrinsic: E and the exact sums of one tile for kn products per output (kn unrolled).

    Scratch layouts (int64): sa/ea (16*kn,) A's signed significand << max(frac - 2*mbits, 0) and
    E-exponent at i*kn + k; sb/eb (kn*8,) B's at k*8 + j; cs/ce (128,) C's signed significand
    << max(frac - cmbits, 0) and E-exponent at i*8 + j. ee (128,): in, max(C's E-exponent, floor);
    out, E. acc (128,): out, the sum in units of 2^(E - frac). lpr / lcr: the right shifts
    max(2*mbits - frac, 0) / max(cmbits - frac, 0) (0 for every model with frac >= 23).
    """
    i64, i32, i1 = ir.IntType(64), ir.IntType(32), ir.IntType(1)

    @intrinsic
    def rows(typingctx, sa, ea, sb, eb, cs, ce, ee, acc, lpr, lcr):
        sig = numba.types.void(sa, ea, sb, eb, cs, ce, ee, acc, lpr, lcr)

        def codegen(context, builder, signature, args):
            psa, pea, psb, peb, pcs, pce, pee, pacc = (
                context.make_array(ty)(context, builder, val).data for ty, val in zip(signature.args[:8], args[:8]))

            def vfn(name, n):
                return cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8, [_V8] * n), name)

            smax, umin = vfn("llvm.smax.v8i64", 2), vfn("llvm.umin.v8i64", 2)
            vabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8, [_V8, i1]), "llvm.abs.v8i64")
            undef = ir.Constant(_V8, ir.Undefined)
            lane0 = ir.Constant(ir.VectorType(i32, 8), [0] * 8)
            zero, c62 = ir.Constant(_V8, [0] * 8), ir.Constant(_V8, [62] * 8)

            def at(base, idx):
                return builder.gep(base, [ir.Constant(i64, idx)])

            def vload(base, idx):
                return builder.load(builder.bitcast(at(base, idx), _V8.as_pointer()), align=8)

            def vstore(v, base, idx):
                builder.store(v, builder.bitcast(at(base, idx), _V8.as_pointer()), align=8)

            def bcast(x):
                return builder.shuffle_vector(builder.insert_element(undef, x, ir.Constant(i32, 0)), undef, lane0)

            def trunc_term(x, sh):
                # x >> sh toward zero in sign-magnitude; sh >= 0 (E is the largest exponent), >= 62 gives 0
                m = builder.lshr(builder.call(vabs, [x, ir.Constant(i1, 0)]), builder.call(umin, [sh, c62]))
                return builder.select(builder.icmp_signed("<", x, zero), builder.sub(zero, m), m)

            lpr, lcr = bcast(args[8]), bcast(args[9])
            for i in range(16):
                # E: the largest exponent among the products (ea + eb) and the clamped C exponent in ee
                ek = [builder.add(bcast(builder.load(at(pea, kn * i + k))), vload(peb, 8 * k)) for k in range(kn)]
                e = vload(pee, 8 * i)
                for k in range(kn):
                    e = builder.call(smax, [e, ek[k]])
                vstore(e, pee, 8 * i)
                s = trunc_term(vload(pcs, 8 * i), builder.add(builder.sub(e, vload(pce, 8 * i)), lcr))
                e = builder.add(e, lpr)
                for k in range(kn):
                    p = builder.mul(bcast(builder.load(at(psa, kn * i + k))), vload(psb, 8 * k))
                    s = builder.add(s, trunc_term(p, builder.sub(e, ek[k])))
                vstore(s, pacc, 8 * i)
            return context.get_dummy_value()

        return sig, codegen

    return rows


_rows16 = _make_rows(16)
_rows8 = _make_rows(8)


@numba.njit(cache=True, inline="always")
def _dec_sig(u, eb, mb, lsh):
    """Signed significand << lsh of the pattern u (eb exponent bits, mb fraction bits; Inf/NaN: garbage)."""
    s = (u >> (eb + mb)) & 1
    ef = (u >> mb) & ((1 << eb) - 1)
    sig = ((u & ((1 << mb) - 1)) | (np.int64(ef != 0) << mb)) << lsh
    return (sig ^ -s) + s


@numba.njit(cache=True, inline="always")
def _dec_exp(u, eb, mb, zero_e):
    """E-exponent of the pattern u: its binade's unbiased exponent (subnormals: emin; zeros: zero_e)."""
    ef = (u >> mb) & ((1 << eb) - 1)
    e = max(ef, 1) - ((1 << (eb - 1)) - 1)
    return zero_e if (u & ((1 << (eb + mb)) - 1)) == 0 else e


@numba.njit(cache=True, inline="always")
def _cls(u, eb, mb):
    """formats.decode's class of the pattern u: 0 zero, 1 finite, 2 Inf, 3 NaN."""
    ef = (u >> mb) & ((1 << eb) - 1)
    mf = u & ((1 << mb) - 1)
    if ef == (1 << eb) - 1:
        return 3 if mf != 0 else 2
    return 0 if (ef == 0 and mf == 0) else 1


# params: the int64 vector _fast_kernel reads its constants from (built once per variant and model)
(_P_AEB, _P_AMB, _P_CEB, _P_CMB, _P_ZERO_EA, _P_ZERO_EC, _P_FRAC, _P_FLOOR, _P_ZERO_IEEE, _P_RN, _P_SAT,
 _P_UF_PLUS, _P_NAN, _P_LEN) = range(14)


@numba.njit(cache=True)
def _fix_tile(a, b, c, t, k0, kn, kk, aeb, amb, ceb, cmb, dnan, sbit, zero_ieee, spec, acc, out):
    """The outputs of tile t that the fast path cannot give: Inf/NaN operands and IEEE -0 sums."""
    if zero_ieee:
        # an exact zero sum is -0 when C and every product are zeros of negative sign
        for o in range(128):
            if acc[o] != 0:
                continue
            i, j = o >> 3, o & 7
            u = np.int64(c[t, o])
            neg = _cls(u, ceb, cmb) == 0 and (u >> (ceb + cmb)) == 1
            for k in range(kn):
                if not neg:
                    break
                x = np.int64(a[t, i * kk + k0 + k])
                y = np.int64(b[t, (k0 + k) * 8 + j])
                neg = ((_cls(x, aeb, amb) == 0 or _cls(y, aeb, amb) == 0)
                       and (x >> (aeb + amb)) != (y >> (aeb + amb)))
            if neg:
                out[t, o] = sbit
    if not spec:
        return
    inf_bits = np.int64((1 << ceb) - 1) << cmb
    sgn = aeb + amb
    ca = np.empty((16, kn), np.int64)  # classes and signs of A and B, read for the outputs with an Inf
    ga = np.empty((16, kn), np.int64)
    cb = np.empty((8, kn), np.int64)
    gb = np.empty((8, kn), np.int64)
    rows = np.zeros(16, np.int64)  # bit 0: the row (column) holds an Inf, bit 1: a NaN
    cols = np.zeros(8, np.int64)
    for i in range(16):
        for k in range(kn):
            x = np.int64(a[t, i * kk + k0 + k])
            cx = _cls(x, aeb, amb)
            ca[i, k] = cx
            ga[i, k] = x >> sgn
            rows[i] |= (cx >> 1) << (cx & 1)  # class 2 (Inf) -> 1, 3 (NaN) -> 2
    for k in range(kn):
        for j in range(8):
            y = np.int64(b[t, (k0 + k) * 8 + j])
            cy = _cls(y, aeb, amb)
            cb[j, k] = cy
            gb[j, k] = y >> sgn
            cols[j] |= (cy >> 1) << (cy & 1)
    for o in range(128):
        i, j = o >> 3, o & 7
        u = np.int64(c[t, o])
        cc = _cls(u, ceb, cmb)
        sp = rows[i] | cols[j]
        if sp == 0 and cc < 2:
            continue
        if (sp & 2) != 0 or cc == 3:
            out[t, o] = dnan  # a NaN operand
            continue
        # Inf * 0, or +Inf + -Inf, gives the canonical NaN; otherwise the Inf terms' Inf
        cneg = (u >> (ceb + cmb)) == 1
        nan = False
        pinf = cc == 2 and not cneg
        ninf = cc == 2 and cneg
        for k in range(kn):
            cx, cy = ca[i, k], cb[j, k]
            if cx == 2 or cy == 2:
                if cx == 0 or cy == 0:
                    nan = True
                elif ga[i, k] != gb[j, k]:
                    ninf = True
                else:
                    pinf = True
        if nan or (pinf and ninf):
            out[t, o] = dnan
        else:
            out[t, o] = inf_bits + (sbit if ninf else 0)  # an Inf term's Inf: never saturated


@numba.njit(cache=True, nogil=True)
def _fast_kernel(a, b, c, k0, kn, p, out):
    """D for products k0..k0+kn-1 (kn 8 or 16) of every tile: a (T, 16*K), b (T, K*8), c / out (T, 128)
    row-major bit patterns (uint16 A/B, C and D in D's format); p: the constants (_P_*)."""
    aeb, amb, ceb, cmb = p[_P_AEB], p[_P_AMB], p[_P_CEB], p[_P_CMB]
    zero_ea, zero_ec, frac, floor_abs = p[_P_ZERO_EA], p[_P_ZERO_EC], p[_P_FRAC], p[_P_FLOOR]
    zero_ieee, rn, sat, uf_plus = p[_P_ZERO_IEEE] != 0, p[_P_RN] != 0, p[_P_SAT] != 0, p[_P_UF_PLUS] != 0
    dnan = p[_P_NAN]
    n_tiles = a.shape[0]
    kk = a.shape[1] // 16
    # no == 128, read from the array: with run-time trip counts LLVM vectorises these loops rather than
    # unrolling them into strided (gather) code
    na, nb, no = 16 * kn, 8 * kn, c.shape[1]
    # separate allocations (not slices of one): LLVM vectorises the loops below behind run-time overlap
    # checks, which views of one buffer at unknown offsets defeat
    sa, ea = np.empty(256, np.int64), np.empty(256, np.int64)
    sb, eb = np.empty(128, np.int64), np.empty(128, np.int64)
    cs, ce, ee, acc = np.empty(128, np.int64), np.empty(128, np.int64), np.empty(128, np.int64), np.empty(128, np.int64)
    lpl, lpr = max(frac - 2 * amb, 0), max(2 * amb - frac, 0)
    lcl, lcr = max(frac - cmb, 0), max(cmb - frac, 0)
    dm = cmb
    demax = (1 << (ceb - 1)) - 1
    demin = 1 - demax
    sbit = np.int64(1) << (ceb + cmb)
    inf_bits = np.int64((1 << ceb) - 1) << cmb
    over_bits = inf_bits - 1 if sat else inf_bits
    amask = ((1 << aeb) - 1) << amb  # exponent field all ones: Inf or NaN
    cmask = ((1 << ceb) - 1) << cmb
    for t in range(n_tiles):
        # 1-D views indexed by range() variables only: no wraparound selects, so the loops vectorise
        spec = False
        if kn == kk:
            av = a[t]
            for x in range(na):
                u = np.int64(av[x])
                sa[x] = _dec_sig(u, aeb, amb, lpl)
                ea[x] = _dec_exp(u, aeb, amb, zero_ea)
                spec |= (u & amask) == amask
        else:
            for i in range(16):
                av = a[t, i * kk + k0:i * kk + k0 + kn]
                for k in range(kn):
                    u = np.int64(av[k])
                    sa[i * kn + k] = _dec_sig(u, aeb, amb, lpl)
                    ea[i * kn + k] = _dec_exp(u, aeb, amb, zero_ea)
                    spec |= (u & amask) == amask
        bv = b[t, 8 * k0:8 * k0 + nb]
        for x in range(nb):
            u = np.int64(bv[x])
            sb[x] = _dec_sig(u, aeb, amb, 0)
            eb[x] = _dec_exp(u, aeb, amb, zero_ea)
            spec |= (u & amask) == amask
        cv = c[t]
        for o in range(no):
            u = np.int64(cv[o])
            e = _dec_exp(u, ceb, cmb, zero_ec)
            ce[o] = e
            ee[o] = max(e, floor_abs)
            cs[o] = _dec_sig(u, ceb, cmb, lcl)
            spec |= (u & cmask) == cmask
        if kn == 16:
            _rows16(sa, ea, sb, eb, cs, ce, ee, acc, lpr, lcr)
        else:
            _rows8(sa, ea, sb, eb, cs, ce, ee, acc, lpr, lcr)
        # round every sum: _round_to_bits without branches (LLVM vectorises this loop)
        ov = out[t]
        for o in range(no):
            s = acc[o]
            mag = abs(s)
            qexp = ee[o] - frac  # the sum's unit is 2^qexp
            top = qexp + 63 - _clz64(mag)  # exponent of its leading bit
            q = max(top - dm, demin - dm)  # quantum of the result (subnormal: fixed)
            sh = q - qexp
            kept = (mag << min(max(-sh, 0), 63)) >> min(max(sh, 0), 63)
            if rn:
                r = min(max(sh, 1), 63) - 1
                rest = mag & ((np.int64(1) << r) - 1)
                up = (sh >= 1) & (((mag >> r) & 1) == 1) & ((rest != 0) | ((kept & 1) == 1))
                kept += np.int64(up)  # to nearest, ties to even
            body = ((q - demin + dm) << dm) + kept
            if top > demax or body >= inf_bits:
                body = over_bits  # |sum| >= 2^(emax+1) (Inf even under RZ), or RNE carried past max finite
            if s < 0 and (body != 0 or not uf_plus):
                body += sbit  # a sum rounded to zero keeps its sign only without uf_plus
            if mag == 0:
                body = 0  # exact zero: +0 (IEEE -0 in _fix_tile)
            ov[o] = body
        if spec or zero_ieee:
            _fix_tile(a, b, c, t, k0, kn, kk, aeb, amb, ceb, cmb, dnan, sbit, zero_ieee, spec, acc, out)


# ---- the Python driver ----------------------------------------------------------------------------

def _check_operand(x, name: str, dtype: np.dtype, trailing: tuple) -> np.ndarray:
    arr = x if type(x) is np.ndarray else np.asarray(x)
    if arr.dtype != dtype:
        raise bad_argument(name, arr.dtype, f"expected {dtype.name} bit patterns")
    shape = arr.shape
    if len(shape) < 2 or shape[-2:] != trailing:
        raise bad_argument(name, shape, f"expected shape (..., {trailing[0]}, {trailing[1]})")
    return arr


def _finish_round_exact(sign, mag, exp, code, dfmt: FloatFormat, mode: str, model: MmaModel,
                        sticky=None) -> np.ndarray:
    """Bits of D from exact sums (-1)^sign * (mag + r) * 2^exp (r in (0, 1) where ``sticky``), rounded by the
    shared formats.round_exact with the device's overflow, underflow and special-value rules.

    ``mag`` must stay below 2^53 (its bit length is read through float64)."""
    bits = round_exact(sign, mag, exp, dfmt, mode, sticky=sticky,
                       satfinite=model.overflow == "saturate").astype(np.int64)
    nonzero = mag > 0 if sticky is None else (mag > 0) | np.asarray(sticky, bool)
    if model.overflow == "inf":
        # the device overflows to Inf when |sum| >= 2^(emax+1), also under RZ (IEEE RZ would saturate)
        top = exp + np.frexp(mag.astype(np.float64))[1] - 1  # bit length of mag (< 2^53: exact)
        bits = np.where((mag > 0) & (top > dfmt.emax), dfmt.inf + sign.astype(np.int64) * dfmt.sign_bit, bits)
    if model.underflow_sign == "+0":
        # a nonzero sum that rounds to zero gives +0
        bits = np.where(nonzero & ((bits & ~dfmt.sign_bit) == 0), 0, bits)
    bits = np.where(code == _C_INF, dfmt.inf + sign.astype(np.int64) * dfmt.sign_bit, bits)
    bits = np.where(code == _C_NAN, dfmt.canonical_nan, bits)  # canonical NaN 0x7FFFFFFF / 0x7FFF
    return bits.astype(dfmt.dtype)


def _step(a, b, c, k0, kn, afmt, bfmt, dfmt, model: MmaModel, engine: str) -> np.ndarray:
    """One fused step of the generic kernel over products k0..k0+kn-1 plus C, rounded to D's format.

    a (T,16,K), b (T,K,8), c (T,16,8) contiguous; engine "generic" (rounded in the kernel) or "round_exact".
    """
    ta = _tables(afmt, _zero_e(afmt, model))
    tb = _tables(bfmt, _zero_e(bfmt, model))
    c32 = dfmt is F32
    tc = ta if c32 else _tables(dfmt, _zero_e(dfmt, model))  # an f32 C decodes in the kernel (_decode_f32)
    floor_abs = _EXCLUDED if model.e_floor is None else dfmt.emin + model.e_floor
    mode = model.round_f32 if dfmt is F32 else model.round_f16
    inline = engine != "round_exact"
    shape = c.shape
    if inline:
        out_bits = np.empty(shape, dfmt.dtype)
        o_sign = np.empty((1, 1, 1), np.uint8)
        o_mag = o_exp = np.empty((1, 1, 1), np.int64)
        o_code = np.empty((1, 1, 1), np.uint8)
    else:
        out_bits = np.empty((1, 1, 1), dfmt.dtype)
        o_sign = np.empty(shape, np.uint8)
        o_mag = np.empty(shape, np.int64)
        o_exp = np.empty(shape, np.int64)
        o_code = np.empty(shape, np.uint8)
    _mma_kernel(a, b, c, k0, kn, *ta, *tb, *tc, afmt.mbits, bfmt.mbits, c32, _zero_e(dfmt, model), dfmt.mbits,
                model.frac_bits, floor_abs, model.zero_sign == "ieee",
                inline, dfmt.mbits, dfmt.emin, dfmt.emax, mode == "rn", model.overflow == "saturate",
                model.underflow_sign == "+0", dfmt.canonical_nan,
                out_bits, o_sign, o_mag, o_exp, o_code)
    if inline:
        return out_bits
    return _finish_round_exact(o_sign, o_mag, o_exp, o_code, dfmt, mode, model)


def _fast_params(afmt: FloatFormat, dfmt: FloatFormat, model: MmaModel) -> np.ndarray:
    """The constants of _fast_kernel for one variant and model (see _P_*)."""
    p = np.zeros(_P_LEN, np.int64)
    p[_P_AEB], p[_P_AMB], p[_P_CEB], p[_P_CMB] = afmt.ebits, afmt.mbits, dfmt.ebits, dfmt.mbits
    p[_P_ZERO_EA], p[_P_ZERO_EC] = _zero_e(afmt, model), _zero_e(dfmt, model)
    p[_P_FRAC] = model.frac_bits
    p[_P_FLOOR] = _EXCLUDED if model.e_floor is None else dfmt.emin + model.e_floor
    p[_P_ZERO_IEEE] = model.zero_sign == "ieee"
    p[_P_RN] = (model.round_f32 if dfmt is F32 else model.round_f16) == "rn"
    p[_P_SAT] = model.overflow == "saturate"
    p[_P_UF_PLUS] = model.underflow_sign == "+0"
    p[_P_NAN] = dfmt.canonical_nan
    p.flags.writeable = False  # shared by every call of the variant
    return p


@dataclass(frozen=True, eq=False)
class _Plan:
    afmt: FloatFormat
    bfmt: FloatFormat
    dfmt: FloatFormat
    model: MmaModel
    step: int
    engine: str
    ddtype: np.dtype  # D's (and C's) bit-pattern dtype
    params: np.ndarray | None  # _fast_kernel's constants (engine "numba"; never written)


_U16 = np.dtype(np.uint16)
_PLANS: dict = {}  # (k, atype, ctype, arch, model, engine) -> _Plan, for valid calls only


def _make_plan(k: int, afmt: FloatFormat, bfmt: FloatFormat, dfmt: FloatFormat, model: MmaModel, engine: str) -> _Plan:
    """The plan of a fused dot product of k products per output (arguments already validated)."""
    step = k if model.products_per_step is None else model.products_per_step
    if k % step:
        raise bad_argument("model", model.name, f"products_per_step={step} does not divide k={k}")
    # the fast kernel is unrolled for 8 or 16 products per step and decodes A and B as one IEEE 16-bit format
    if engine == "numba" and (step not in (8, 16) or afmt is not bfmt or afmt not in (F16, BF16)):
        engine = "generic"
    params = _fast_params(afmt, dfmt, model) if engine == "numba" else None
    return _Plan(afmt, bfmt, dfmt, model, step, engine, np.dtype(dfmt.dtype), params)


def _plan(k, atype, ctype, arch, model, engine) -> _Plan:
    """Validate the non-array arguments of mma once per combination; later calls are a dict lookup."""
    key = (k, atype, ctype, arch, model, engine)
    try:
        return _PLANS[key]
    except (KeyError, TypeError):  # new, or an unhashable argument (rejected below)
        pass
    if k not in (8, 16):
        raise bad_argument("k", k, "expected 16 (mma.m16n8k16) or 8 (mma.m16n8k8)")
    if atype not in ATYPES:
        raise bad_argument("atype", atype, f"expected one of {sorted(ATYPES)}")
    if ctype not in CTYPES:
        raise bad_argument("ctype", ctype, f"expected one of {sorted(CTYPES)}")
    if arch not in ARCHS:
        raise bad_argument("arch", arch, f"expected one of {ARCHS}")
    if engine not in ENGINES:
        raise bad_argument("engine", engine, f"expected one of {ENGINES}")
    if atype == "bf16" and ctype == "f16":
        raise bad_argument("ctype", ctype, "PTX mma has no bf16 variant with an f16 accumulator (use ctype='f32')")
    if (k, atype, ctype) not in MODELLED:
        raise NotImplementedError(
            f"mma.m16n8k{k} with atype={atype!r}, ctype={ctype!r} is not modelled; modelled "
            f"(k, atype, ctype): {sorted(MODELLED)}")
    if model is None:
        model = MODELS[arch]
    elif not isinstance(model, MmaModel):
        raise bad_argument("model", model, "expected an MmaModel (see flashsim.numerics.mma.MODELS)")
    afmt = ATYPES[atype]
    plan = _make_plan(k, afmt, afmt, CTYPES[ctype], model, engine)
    if len(_PLANS) < 256:
        _PLANS[key] = plan
    return plan


def _run(plan: _Plan, a, b, c, k: int) -> np.ndarray:
    """D = A @ B + C over checked (..., 16, k), (..., k, 8), (..., 16, 8) operands with equal batch shapes."""
    step = plan.step
    if plan.engine == "numba":
        # (T, 16*k), (T, k*8), (T, 128) row-major views (copies only of non-contiguous operands)
        a2 = np.ascontiguousarray(a.reshape(-1, 16 * k))
        b2 = np.ascontiguousarray(b.reshape(-1, 8 * k))
        d = np.ascontiguousarray(c.reshape(-1, 128))
        for k0 in range(0, k, step):
            out = np.empty(d.shape, plan.ddtype)
            _fast_kernel(a2, b2, d, k0, step, plan.params, out)
            d = out
        return d.reshape(c.shape)
    a3 = np.ascontiguousarray(a.reshape(-1, 16, k))
    b3 = np.ascontiguousarray(b.reshape(-1, k, 8))
    d = np.ascontiguousarray(c.reshape(-1, 16, 8))
    # chained steps (sm_80): each step's D, rounded to D's format, is the next step's C
    for k0 in range(0, k, step):
        d = _step(a3, b3, d, k0, step, plan.afmt, plan.bfmt, plan.dfmt, plan.model, plan.engine)
    return d.reshape(c.shape)


def _check_batch(a, b, c) -> None:
    batch = a.shape[:-2]
    if b.shape[:-2] != batch:
        raise bad_argument("b", b.shape, f"batch shape {b.shape[:-2]} differs from a's {batch} (no broadcasting)")
    if c.shape[:-2] != batch:
        raise bad_argument("c", c.shape, f"batch shape {c.shape[:-2]} differs from a's {batch} (no broadcasting)")


def mma(a, b, c, *, k: int, atype: str, ctype: str, arch: str = "sm_90", model: MmaModel | None = None,
        engine: str = "numba") -> np.ndarray:
    """D = A @ B + C for batches of m16n8k{k} tiles, bit for bit as the tensor core computes it.

    a: (..., 16, k) uint16 A patterns (row-major); b: (..., k, 8) uint16 B patterns (K x N);
    c: (..., 16, 8) C patterns (uint32 for ctype="f32", uint16 for "f16"); equal batch shapes.
    ``model`` overrides ``MODELS[arch]`` (for experiments). ``engine``: "numba" (the fast kernel),
    "generic" (the scalar per-output kernel it replaced, kept as a cross-check) or "round_exact"
    (the generic kernel's exact sums rounded by formats.round_exact); all give the same bits.
    """
    plan = _plan(k, atype, ctype, arch, model, engine)
    a = _check_operand(a, "a", _U16, (16, k))
    b = _check_operand(b, "b", _U16, (k, 8))
    c = _check_operand(c, "c", plan.ddtype, (16, 8))
    _check_batch(a, b, c)
    return _run(plan, a, b, c, k)


_FUSED_PLANS: dict = {}  # (k, afmt, bfmt, dfmt, model, engine) -> _Plan


def fused_mma(a, b, c, *, k: int, afmt: FloatFormat, bfmt: FloatFormat, dfmt: FloatFormat, model: MmaModel,
              engine: str = "numba") -> np.ndarray:
    """The fused tensor-core dot product of ``model`` on m16n8k{k} tiles of any input formats: the engine of
    :func:`mma`, for instructions that share its rule (wgmma: flashsim.numerics.wgmma).

    a: (..., 16, k) patterns of ``afmt`` (uint16, or uint8 for e4m3/e5m2), b: (..., k, 8) of ``bfmt``,
    c: (..., 16, 8) of ``dfmt`` (f32 or f16). ``model`` is required: which rule holds for which
    instruction is the caller's claim. k: any positive multiple of ``model.products_per_step``.
    """
    key = (k, afmt, bfmt, dfmt, model, engine)
    plan = _FUSED_PLANS.get(key)
    if plan is None:
        if not _is_int(k) or not 1 <= k <= 256:
            raise bad_argument("k", k, "expected a positive int (products per output), at most 256")
        for name, fmt in (("afmt", afmt), ("bfmt", bfmt)):
            if not isinstance(fmt, FloatFormat) or fmt.nbits > 16:
                raise bad_argument(name, fmt, "expected a FloatFormat of at most 16 bits (f16, bf16, e4m3, e5m2)")
        if dfmt not in (F32, F16):
            raise bad_argument("dfmt", dfmt, "the accumulator is F32 or F16")
        if not isinstance(model, MmaModel):
            raise bad_argument("model", model, "expected an MmaModel")
        if engine not in ENGINES:
            raise bad_argument("engine", engine, f"expected one of {ENGINES}")
        plan = _make_plan(k, afmt, bfmt, dfmt, model, engine)
        if len(_FUSED_PLANS) < 256:
            _FUSED_PLANS[key] = plan
    a = _check_operand(a, "a", np.dtype(afmt.dtype), (16, k))
    b = _check_operand(b, "b", np.dtype(bfmt.dtype), (k, 8))
    c = _check_operand(c, "c", plan.ddtype, (16, 8))
    _check_batch(a, b, c)
    return _run(plan, a, b, c, k)


def mma_m16n8k16(a, b, c, *, atype: str, ctype: str, arch: str = "sm_90", model: MmaModel | None = None) -> np.ndarray:
    """mma.sync.aligned.m16n8k16.row.col: (..., 16, 16) A, (..., 16, 8) B, (..., 16, 8) C -> D (c's dtype)."""
    return mma(a, b, c, k=16, atype=atype, ctype=ctype, arch=arch, model=model)


def mma_m16n8k8(a, b, c, *, atype: str, ctype: str, arch: str = "sm_90", model: MmaModel | None = None) -> np.ndarray:
    """mma.sync.aligned.m16n8k8.row.col: (..., 16, 8) A, (..., 8, 8) B, (..., 16, 8) C -> D (c's dtype)."""
    return mma(a, b, c, k=8, atype=atype, ctype=ctype, arch=arch, model=model)


def gemm(a, b, c, *, atype: str, arch: str = "sm_90") -> np.ndarray:
    """C + A @ B as warps compute it with mma.m16n8k16 and f32 accumulators: for each 16-wide slice of K in
    increasing order, one mma per 16x8 tile of C (the order of the tiles within a slice does not change any
    bit: each element of D depends only on its own row of A, column of B and C).

    a: (..., M, K) uint16 patterns, b: (..., K, N) uint16, c: (..., M, N) uint32 f32 patterns; M % 16,
    N % 8 and K % 16 == 0. Returns D (..., M, N) uint32.
    """
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    if a.ndim < 2 or b.ndim != a.ndim or c.ndim != a.ndim:
        raise bad_argument("a", a.shape, "a, b and c need the same rank >= 2: (..., M, K), (..., K, N), (..., M, N)")
    *batch, m, k = a.shape
    n = b.shape[-1]
    if b.shape[-2] != k or c.shape[-2:] != (m, n) or tuple(b.shape[:-2]) != tuple(batch) or tuple(c.shape[:-2]) != tuple(batch):
        raise bad_argument("b", b.shape, f"shapes do not chain: a {a.shape}, b {b.shape}, c {c.shape}")
    if m % 16 or n % 8 or k % 16:
        raise bad_argument("a", a.shape, f"need M % 16, N % 8, K % 16 == 0 (M={m}, N={n}, K={k})")
    bt = (*batch, m // 16, n // 8)
    d = np.ascontiguousarray(c.reshape(*batch, m // 16, 16, n // 8, 8).swapaxes(-3, -2))
    for k0 in range(0, k, 16):
        at = a[..., k0:k0 + 16].reshape(*batch, m // 16, 1, 16, 16)
        btile = b[..., k0:k0 + 16, :].reshape(*batch, 16, n // 8, 8).swapaxes(-3, -2)[..., None, :, :, :]
        d = mma(np.broadcast_to(at, (*bt, 16, 16)), np.broadcast_to(btile, (*bt, 16, 8)), d, k=16, atype=atype,
                ctype="f32", arch=arch)
    return np.ascontiguousarray(d.swapaxes(-3, -2)).reshape(*batch, m, n)
