"""The scalar engines: ``_mma_kernel``, one output at a time from decode tables, and its exact sums rounded
by the shared ``formats.round_exact``.

- "generic": ``_mma_kernel``, the scalar per-output loop (A and B through 65536-entry tables built
  once with ``formats.decode``), kept as a second implementation to check the fast one against.
- "round_exact": the generic kernel's exact sums rounded by the shared ``formats.round_exact``
  (slow, kept to cross-check the fused rounding).
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from flashsim.numerics.formats import F32, INF, ZERO, FloatFormat, decode, round_exact
from flashsim.numerics.mma.bits import _bit_length
from flashsim.numerics.mma.model import _EXCLUDED, MmaModel, _zero_e


# ---- decode tables --------------------------------------------------------------------------------


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


# ---- rounding and one step -----------------------------------------------------------------------

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
