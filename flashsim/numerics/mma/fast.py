"""The fast engine: ``_fast_kernel``, the arithmetic of the scalar kernel laid out for SIMD.

- "numba" (default): ``_fast_kernel``, per tile: A, B and C decoded with bit operations into int64
  rows, then an LLVM-IR intrinsic (``_rows16`` / ``_rows8``) that treats the 8 columns of B as the 8
  lanes of a <8 x i64> vector and is unrolled over k (E as a running max, then each exact product
  shifted right, i.e. truncated in sign-magnitude, and summed: about ten SIMD instructions per
  product for 8 outputs); then a vectorised loop rounds the 128 sums. Tiles with an Inf/NaN
  operand, and models with IEEE zero signs, get scalar fix-ups of the affected outputs.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.core.extending import intrinsic

from flashsim.numerics.formats import F32, FloatFormat
from flashsim.numerics.mma.bits import _clz64
from flashsim.numerics.mma.model import _EXCLUDED, MmaModel, _zero_e


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
