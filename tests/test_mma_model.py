"""The mma arithmetic models: exact small-integer matmuls, an independent Python-int reference under
hypothesis, directed cases for each semantic choice, the two rounding engines, and the error paths."""

from __future__ import annotations

import dataclasses
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from flashsim.errors import ArgumentError
from flashsim.numerics import formats
from flashsim.numerics.mma import generic as mm
from flashsim.numerics.mma import MODELS, MmaModel, mma, mma_m16n8k8, mma_m16n8k16

# ---- an independent reference: Python ints and Fractions, one output at a time ---------------------

# (exponent bits, fraction bits) of each format, written out here rather than taken from formats
REF_FORMATS = {"f16": (5, 10), "bf16": (8, 7), "f32": (8, 23)}


def ref_decode(bits: int, name: str):
    """('nan'|'inf'|'zero'|'fin', sign, integer significand, binade exponent (subnormals: emin))."""
    eb, mb = REF_FORMATS[name]
    bias = (1 << (eb - 1)) - 1
    sign = bits >> (eb + mb)
    field = (bits >> mb) & ((1 << eb) - 1)
    frac = bits & ((1 << mb) - 1)
    if field == (1 << eb) - 1:
        return ("nan" if frac else "inf"), sign, 0, 0
    if field == 0:
        return ("fin" if frac else "zero"), sign, frac, 1 - bias
    return "fin", sign, frac | (1 << mb), field - bias


def ref_encode_inf(name: str, neg: bool) -> int:
    eb, mb = REF_FORMATS[name]
    return (((1 << eb) - 1) << mb) | (int(neg) << (eb + mb))


def ref_round(v: Fraction, name: str, mode: str, model: MmaModel) -> int:
    """Bits of the nonzero exact value v rounded to format ``name`` (mode 'rz' / 'rn')."""
    eb, mb = REF_FORMATS[name]
    bias = (1 << (eb - 1)) - 1
    emin, emax = 1 - bias, bias
    neg = v < 0
    a = -v if neg else v
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < Fraction(2) ** e:
        e -= 1
    sbit = int(neg) << (eb + mb)
    maxfin = (((1 << eb) - 2) << mb) | ((1 << mb) - 1)
    if e > emax:
        return (maxfin if model.overflow == "saturate" else ref_encode_inf(name, False)) | sbit
    q = max(e, emin) - mb
    scaled = a / Fraction(2) ** q
    k = scaled.numerator // scaled.denominator
    rem = scaled - k
    if mode == "rn" and (rem > Fraction(1, 2) or (rem == Fraction(1, 2) and k % 2 == 1)):
        k += 1
    if k == 0:
        return 0 if model.underflow_sign == "+0" else sbit
    if k == 1 << (mb + 1):
        k >>= 1
        q += 1
    if q + mb > emax:
        return (maxfin if model.overflow == "saturate" else ref_encode_inf(name, False)) | sbit
    if k < (1 << mb):
        return k | sbit
    return ((q + mb - emin + 1) << mb) | (k - (1 << mb)) | sbit


def ref_step(arow, bcol, cbits, atype, ctype, model):
    """One fused step: bits of round(C + sum a*b) per the algorithm in the module docstring."""
    _, ma = REF_FORMATS[atype]
    eb_c, mc = REF_FORMATS[ctype]
    emin_c = 2 - (1 << (eb_c - 1))
    emin_a = 2 - (1 << (REF_FORMATS[atype][0] - 1))
    nan_bits = ref_encode_inf(ctype, False) | ((1 << mc) - 1)
    da = [ref_decode(x, atype) for x in arow]
    db = [ref_decode(x, atype) for x in bcol]
    dc = ref_decode(cbits, ctype)
    nan, pinf, ninf = dc[0] == "nan", dc[0] == "inf" and dc[1] == 0, dc[0] == "inf" and dc[1] == 1
    for x, y in zip(da, db):
        if "nan" in (x[0], y[0]):
            nan = True
        elif "inf" in (x[0], y[0]):
            if "zero" in (x[0], y[0]):
                nan = True
            elif x[1] ^ y[1]:
                ninf = True
            else:
                pinf = True
    if nan or (pinf and ninf):
        return nan_bits
    if pinf or ninf:
        return ref_encode_inf(ctype, ninf)

    def zexp(emin):
        return None if model.zero_policy == "exclude" else (emin if model.zero_exp is None else model.zero_exp)

    # terms: (sign, integer significand, exponent of its last bit, exponent taking part in E or None)
    terms = []
    cls_c, s_c, sig_c, e_c = dc
    terms.append((s_c, sig_c, e_c - mc, e_c if cls_c == "fin" else zexp(emin_c)))
    for (cx, sx, gx, ex), (cy, sy, gy, ey) in zip(da, db):
        ex = ex if cx == "fin" else zexp(emin_a)
        ey = ey if cy == "fin" else zexp(emin_a)
        both = None if (ex is None or ey is None) else ex + ey
        terms.append((sx ^ sy, gx * gy, (ex or 0) + (ey or 0) - 2 * ma, both))
    es = [t[3] for t in terms if t[3] is not None]
    if not es and model.e_floor is None:
        big_e = None
    else:
        big_e = max(es + ([emin_c + model.e_floor] if model.e_floor is not None else []))
    acc = 0
    if big_e is not None:
        quantum = big_e - model.frac_bits
        for s, g, lsb, _ in terms:
            # truncate the magnitude toward zero to a multiple of 2^quantum, then apply the sign
            mag = g << (lsb - quantum) if lsb >= quantum else g >> (quantum - lsb)
            acc += -mag if s else mag
    if acc == 0:
        all_neg_zero = cls_c == "zero" and s_c == 1 and all(
            ("zero" in (x[0], y[0])) and (x[1] ^ y[1]) for x, y in zip(da, db))
        neg = model.zero_sign == "ieee" and all_neg_zero
        return int(neg) << (eb_c + mc)
    mode = model.round_f32 if ctype == "f32" else model.round_f16
    return ref_round(Fraction(acc) * Fraction(2) ** quantum, ctype, mode, model)


def ref_mma(a, b, c, atype, ctype, model):
    """Reference D for (T,16,K) / (T,K,8) / (T,16,8) integer bit arrays, chaining steps like sm_80."""
    k = a.shape[-1]
    step = k if model.products_per_step is None else model.products_per_step
    out = np.zeros(c.shape, dtype=c.dtype)
    for t in range(a.shape[0]):
        for i in range(16):
            for j in range(8):
                d = int(c[t, i, j])
                for k0 in range(0, k, step):
                    d = ref_step([int(x) for x in a[t, i, k0:k0 + step]], [int(x) for x in b[t, k0:k0 + step, j]],
                                 d, atype, ctype, model)
                out[t, i, j] = d
    return out


# ---- helpers -----------------------------------------------------------------------------------------

def f16(x):
    return np.asarray(x, np.float16).view(np.uint16)


def bf16(x):
    return np.asarray(x, ml_dtypes.bfloat16).view(np.uint16)


def f32(x):
    return np.asarray(x, np.float32).view(np.uint32)


def tile(shape, fill=0, dtype=np.uint16):
    return np.full(shape, fill, dtype)


def one_output(a_vals, b_vals, c_bits, *, atype="f16", ctype="f32", k=16, **kw):
    """D[0, 0] of one tile whose row 0 of A / column 0 of B hold the given bit patterns (zeros elsewhere)."""
    a = tile((1, 16, k))
    b = tile((1, k, 8))
    c = tile((1, 16, 8), 0, np.uint32 if ctype == "f32" else np.uint16)
    a[0, 0, :len(a_vals)] = a_vals
    b[0, :len(b_vals), 0] = b_vals
    c[0, 0, 0] = c_bits
    return int(mma(a, b, c, k=k, atype=atype, ctype=ctype, **kw)[0, 0, 0])


VARIANTS = [(16, "f16", "f32"), (16, "bf16", "f32"), (16, "f16", "f16"), (8, "f16", "f32"), (8, "bf16", "f32")]


# ---- exact small-integer matmuls ---------------------------------------------------------------------

@pytest.mark.parametrize("k,atype,ctype", VARIANTS)
def test_small_integers_are_exact(k, atype, ctype):
    rng = np.random.default_rng(k + len(atype) + len(ctype))
    a = rng.integers(-8, 9, (2, 3, 16, k))
    b = rng.integers(-8, 9, (2, 3, k, 8))
    c = rng.integers(-100, 101, (2, 3, 16, 8))
    enc = f16 if atype == "f16" else bf16
    cb = f32(c) if ctype == "f32" else f16(c)
    want = (a @ b + c).astype(np.float32 if ctype == "f32" else np.float16)
    for arch in ("sm_90", "sm_80"):
        d = mma(enc(a), enc(b), cb, k=k, atype=atype, ctype=ctype, arch=arch)
        assert d.dtype == cb.dtype and d.shape == cb.shape
        np.testing.assert_array_equal(d, want.view(cb.dtype))
    fn = mma_m16n8k16 if k == 16 else mma_m16n8k8
    np.testing.assert_array_equal(fn(enc(a), enc(b), cb, atype=atype, ctype=ctype), want.view(cb.dtype))


def test_empty_batch():
    d = mma_m16n8k16(tile((0, 16, 16)), tile((0, 16, 8)), tile((0, 16, 8), 0, np.uint32), atype="f16", ctype="f32")
    assert d.shape == (0, 16, 8) and d.dtype == np.uint32


# ---- against the reference, hypothesis-drawn bit patterns -------------------------------------------

@st.composite
def random_tiles(draw, k, atype, ctype):
    """Uniformly random bit patterns, every element drawn by hypothesis (all classes appear)."""
    cdt = np.uint32 if ctype == "f32" else np.uint16
    a = draw(hnp.arrays(np.uint16, (1, 16, k), elements=st.integers(0, 0xFFFF), fill=st.nothing()))
    b = draw(hnp.arrays(np.uint16, (1, k, 8), elements=st.integers(0, 0xFFFF), fill=st.nothing()))
    hi = 0xFFFFFFFF if ctype == "f32" else 0xFFFF
    c = draw(hnp.arrays(cdt, (1, 16, 8), elements=st.integers(0, hi), fill=st.nothing()))
    return a, b, c


def _patterns(rng, shape, name, centre, spread, p_zero, p_sub, p_special):
    """Finite patterns with exponents in centre +- spread, sprinkled with zeros, subnormals, specials."""
    eb, mb = REF_FORMATS[name]
    bias = (1 << (eb - 1)) - 1
    field = np.clip(bias + centre + rng.integers(-spread, spread + 1, shape), 1, (1 << eb) - 2)
    bits = (rng.integers(0, 2, shape) << (eb + mb)) | (field << mb) | rng.integers(0, 1 << mb, shape)
    u = rng.random(shape)
    bits = np.where(u < p_sub, bits & ~(((1 << eb) - 1) << mb), bits)  # exponent field 0: subnormal
    bits = np.where(u > 1 - p_zero, (bits >> (eb + mb)) << (eb + mb), bits)  # +-0
    specials = np.array([((1 << eb) - 1) << mb, (((1 << eb) - 1) << mb) | 1, (((1 << eb) - 1) << mb) | (1 << (eb + mb))])
    bits = np.where(rng.random(shape) < p_special, specials[rng.integers(0, 3, shape)], bits)
    return bits


@st.composite
def structured_tiles(draw, k, atype, ctype):
    """Narrow exponent windows (cancellation, truncation, ties), zeros, subnormals, a few specials;
    hypothesis draws the parameters and a seed, numpy draws the patterns."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    centre = draw(st.integers(-14, 8)) if atype == "f16" else draw(st.integers(-75, 70))
    spread = draw(st.integers(0, 14))
    p_zero = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    p_sub = draw(st.sampled_from([0.0, 0.1]))
    p_special = draw(st.sampled_from([0.0, 0.0, 0.01]))
    a = _patterns(rng, (2, 16, k), atype, centre, spread, p_zero, p_sub, p_special).astype(np.uint16)
    b = _patterns(rng, (2, k, 8), atype, centre, spread, p_zero, p_sub, p_special).astype(np.uint16)
    c_centre = max(min(2 * centre + draw(st.integers(-10, 10)), 100), -130 if ctype == "f32" else -14)
    c = _patterns(rng, (2, 16, 8), ctype, c_centre, spread, p_zero, p_sub, p_special)
    return a, b, c.astype(np.uint32 if ctype == "f32" else np.uint16)


REF_MODELS = [MODELS["sm_90"], MODELS["sm_90_mmasim"], MODELS["sm_80"],
              dataclasses.replace(MODELS["sm_90"], name="ieee_sat", zero_sign="ieee", overflow="saturate",
                                  underflow_sign="+0", zero_policy="exponent_field", e_floor=3)]

HSET = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("k,atype,ctype", VARIANTS)
@pytest.mark.parametrize("model", REF_MODELS, ids=lambda m: m.name)
def test_matches_reference(k, atype, ctype, model):
    @HSET
    @given(st.one_of(random_tiles(k, atype, ctype), structured_tiles(k, atype, ctype)))
    def check(abc):
        a, b, c = abc
        got = mma(a, b, c, k=k, atype=atype, ctype=ctype, model=model)
        want = ref_mma(a, b, c, atype, ctype, model)
        np.testing.assert_array_equal(got, want)
        # the round_exact engine gives the same bits
        np.testing.assert_array_equal(mma(a, b, c, k=k, atype=atype, ctype=ctype, model=model, engine="round_exact"), got)

    check()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_engines_agree_on_random_bits(name):
    rng = np.random.default_rng(7)
    for k, atype, ctype in VARIANTS:
        a = rng.integers(0, 1 << 16, (40, 16, k)).astype(np.uint16)
        b = rng.integers(0, 1 << 16, (40, k, 8)).astype(np.uint16)
        # keep half the operands finite and near 1 so that most outputs are finite sums
        a[::2] &= 0xBFFF
        b[::2] &= 0xBFFF
        hi = 1 << 32 if ctype == "f32" else 1 << 16
        c = rng.integers(0, hi, (40, 16, 8)).astype(np.uint32 if ctype == "f32" else np.uint16)
        x = mma(a, b, c, k=k, atype=atype, ctype=ctype, model=MODELS[name])
        y = mma(a, b, c, k=k, atype=atype, ctype=ctype, model=MODELS[name], engine="round_exact")
        np.testing.assert_array_equal(x, y)


# the fast kernel (engine "numba") against the generic per-output kernel it replaced, on large batches
FAST_MODELS = [*MODELS.values(), REF_MODELS[-1],
               dataclasses.replace(MODELS["sm_90"], name="frac17_rn", frac_bits=17, round_f32="rn", e_floor=None),
               dataclasses.replace(MODELS["sm_90"], name="frac40_keep", frac_bits=40, underflow_sign="keep",
                                   zero_sign="ieee"),
               dataclasses.replace(MODELS["sm_90"], name="steps4", products_per_step=4)]


def _fast_batch(rng, k, atype, ctype, n=96):
    """n tiles: structured windows (various centres and spreads, zeros, subnormals, a few specials) and
    uniformly random bit patterns, including whole tiles without any Inf/NaN."""
    parts = []
    for t in range(n):
        if t % 8 == 7:
            a = rng.integers(0, 1 << 16, (16, k))
            b = rng.integers(0, 1 << 16, (k, 8))
            c = rng.integers(0, 1 << (32 if ctype == "f32" else 16), (16, 8))
        else:
            centre = int(rng.integers(-14, 9)) if atype == "f16" else int(rng.integers(-75, 71))
            spread = int(rng.integers(0, 15))
            p_zero, p_sub = [0.0, 0.1, 0.5, 1.0][t % 4], [0.0, 0.1][t % 2]
            p_special = 0.01 if t % 3 == 0 else 0.0
            a = _patterns(rng, (16, k), atype, centre, spread, p_zero, p_sub, p_special)
            b = _patterns(rng, (k, 8), atype, centre, spread, p_zero, p_sub, p_special)
            c_centre = max(min(2 * centre + int(rng.integers(-10, 11)), 100), -130 if ctype == "f32" else -14)
            c = _patterns(rng, (16, 8), ctype, c_centre, spread, p_zero, p_sub, p_special)
        parts.append((a, b, c))
    a = np.stack([x[0] for x in parts]).astype(np.uint16)
    b = np.stack([x[1] for x in parts]).astype(np.uint16)
    c = np.stack([x[2] for x in parts]).astype(np.uint32 if ctype == "f32" else np.uint16)
    return a, b, c


@pytest.mark.parametrize("k,atype,ctype", VARIANTS)
@pytest.mark.parametrize("model", FAST_MODELS, ids=lambda m: m.name)
def test_fast_kernel_matches_generic(k, atype, ctype, model):
    rng = np.random.default_rng(zlib.crc32(f"{k} {atype} {ctype} {model.name}".encode()))
    a, b, c = _fast_batch(rng, k, atype, ctype)
    got = mma(a, b, c, k=k, atype=atype, ctype=ctype, model=model)
    want = mma(a, b, c, k=k, atype=atype, ctype=ctype, model=model, engine="generic")
    np.testing.assert_array_equal(got, want)
    # the same tiles one call each (the interpreter's batches) and as non-contiguous views
    for t in (0, 7, 95):
        np.testing.assert_array_equal(mma(a[t], b[t], c[t], k=k, atype=atype, ctype=ctype, model=model), want[t])
    np.testing.assert_array_equal(mma(a[::2], b[::2], c[::2], k=k, atype=atype, ctype=ctype, model=model), want[::2])


def test_fast_kernel_extremes():
    # the largest sums: 16 products (2 - 2^-10)^2 * 2^15 of one sign (above 2^31 units of 2^(E - 25)) plus a
    # C in the same binade (f32) or one that overflows the f16 sum; a huge C that truncates every product away
    big = f16(65504.0)
    for sign in (1, -1):
        a = np.full((1, 16, 16), big, np.uint16)
        b = np.full((1, 16, 8), f16(sign * 1.99902344), np.uint16)
        for ctype, cv in (("f32", f32(sign * 65504.0)), ("f32", f32(sign * 3.4e38)), ("f16", f16(sign * 65504.0))):
            cc = np.full((1, 16, 8), cv, cv.dtype)
            got = mma(a, b, cc, k=16, atype="f16", ctype=ctype)
            np.testing.assert_array_equal(got, ref_mma(a, b, cc, "f16", ctype, MODELS["sm_90"]))


# ---- directed cases ----------------------------------------------------------------------------------

ONE = 0x3F800000


def test_25_vs_24_fractional_bits():
    # 1*1 + 4 * 2^-25: with 25 bits below 2^E the 2^-25 terms survive (sum 1 + 2^-23), with 24 they vanish
    a = [f16(1.0)] + [f16(2.0 ** -12)] * 4
    b = [f16(1.0)] + [f16(2.0 ** -13)] * 4
    assert one_output(a, b, 0) == ONE + 1
    assert one_output(a, b, 0, model=dataclasses.replace(MODELS["sm_90"], frac_bits=24)) == ONE
    assert one_output(a, b, 0, arch="sm_80") == ONE


def test_truncation_is_toward_zero_in_sign_magnitude():
    # 1 - 2^-26: the small negative term truncates to 0 (toward zero), not to -2^-25 (toward -inf)
    assert one_output([f16(1.0), f16(-(2.0 ** -13))], [f16(1.0), f16(2.0 ** -13)], 0) == ONE
    assert one_output([f16(2.0 ** -13)], [f16(2.0 ** -13)], f32(-1.0)) == int(f32(-1.0))
    # 1 - 2^-26 with the tiny term negative and C = 1: still exactly 1
    assert one_output([f16(-(2.0 ** -13))], [f16(2.0 ** -13)], f32(1.0)) == ONE


def test_one_fused_step_vs_two_chained_steps():
    # step 1 (products 0-7): 1 + 2^-24 rounds (RZ) to 1; step 2 adds 2^-24 again -> 1.
    # One fused step of 16: 1 + 2^-23 exactly.
    a = [f16(1.0), f16(2.0 ** -12)] + [0] * 6 + [f16(2.0 ** -12)]
    b = [f16(1.0), f16(2.0 ** -12)] + [0] * 6 + [f16(2.0 ** -12)]
    assert one_output(a, b, 0) == ONE + 1
    assert one_output(a, b, 0, model=dataclasses.replace(MODELS["sm_90"], products_per_step=8)) == ONE
    assert one_output(a, b, 0, arch="sm_80") == ONE


def test_rz_for_f32_d_and_rne_for_f16_d():
    # f32 D: 1 + 3*2^-25 -> RZ -> 1 (RNE would give 1 + 2^-23)
    a = [f16(1.0)] + [f16(2.0 ** -12)] * 3
    b = [f16(1.0)] + [f16(2.0 ** -13)] * 3
    assert one_output(a, b, 0) == ONE
    assert one_output(a, b, 0, model=dataclasses.replace(MODELS["sm_90"], round_f32="rn")) == ONE + 1
    # f16 D: 1 + 3*2^-12 -> RNE -> 1 + 2^-10 (RZ would give 1)
    a = [f16(1.0)] + [f16(2.0 ** -6)] * 3
    b = [f16(1.0)] + [f16(2.0 ** -6)] * 3
    assert one_output(a, b, 0, ctype="f16") == 0x3C01
    assert one_output(a, b, 0, ctype="f16", model=dataclasses.replace(MODELS["sm_90"], round_f16="rz")) == 0x3C00
    # a tie goes to even: 1 + 2^-11 -> 1; 1 + 3*2^-11 -> 1 + 2^-9
    assert one_output([f16(1.0), f16(2.0 ** -6)], [f16(1.0), f16(2.0 ** -5)], 0, ctype="f16") == 0x3C00
    assert one_output([f16(1.0), f16(3 * 2.0 ** -6)], [f16(1.0), f16(2.0 ** -5)], 0, ctype="f16") == 0x3C02


INF16, NINF16 = 0x7C00, 0xFC00


@pytest.mark.parametrize("ctype,nan", [("f32", 0x7FFFFFFF), ("f16", 0x7FFF)])
def test_specials(ctype, nan):
    inf_d = 0x7F800000 if ctype == "f32" else 0x7C00
    ninf_d = inf_d | (0x80000000 if ctype == "f32" else 0x8000)
    one = f16(1.0)
    # Inf - Inf
    assert one_output([INF16, INF16], [one, f16(-1.0)], 0, ctype=ctype) == nan
    # Inf * 0
    assert one_output([INF16], [0x8000], 0, ctype=ctype) == nan
    # NaN in (any payload, any sign), also where its product would be 0 or the NaN is in C
    assert one_output([0xFE01], [one], 0, ctype=ctype) == nan
    assert one_output([0x7D00], [0], 0, ctype=ctype) == nan
    c_nan = 0xFFC00001 if ctype == "f32" else 0xFE01
    assert one_output([one], [one], c_nan, ctype=ctype) == nan
    # an Inf term gives that Inf, whatever the finite terms
    assert one_output([INF16, f16(-60000.0)], [f16(-2.0), f16(60000.0)], 0, ctype=ctype) == ninf_d
    c_inf = 0x7F800000 if ctype == "f32" else 0x7C00
    assert one_output([one], [f16(-3.0)], c_inf, ctype=ctype) == inf_d
    # +Inf in C and -Inf from a product
    assert one_output([NINF16], [one], c_inf, ctype=ctype) == nan
    # Inf terms are not overflows: no saturation
    sat = dataclasses.replace(MODELS["sm_90"], overflow="saturate")
    assert one_output([INF16], [one], 0, ctype=ctype, model=sat) == inf_d


def test_overflow_to_inf():
    big = bf16(2.0 ** 127)
    assert one_output([big], [big], 0, atype="bf16") == 0x7F800000
    assert one_output([big], [bf16(-(2.0 ** 127))], 0, atype="bf16") == 0xFF800000
    sat = dataclasses.replace(MODELS["sm_90"], overflow="saturate")
    assert one_output([big], [big], 0, atype="bf16", model=sat) == 0x7F7FFFFF
    # RZ below 2^128 stays finite: max finite + 2^103 truncates back to max finite
    assert one_output([bf16(2.0 ** 52)], [bf16(2.0 ** 51)], 0x7F7FFFFF, atype="bf16") == 0x7F7FFFFF
    # f16 D: 60000 + 60000 -> Inf (RNE past 65504), saturating -> 65504
    assert one_output([f16(60000.0)], [f16(1.0)], f16(60000.0), ctype="f16") == INF16
    assert one_output([f16(60000.0)], [f16(1.0)], f16(60000.0), ctype="f16", model=sat) == 0x7BFF
    assert one_output([f16(-60000.0)], [f16(1.0)], f16(-60000.0), ctype="f16") == NINF16
    # 65504 + 16 = 65520 is the RNE tie that rounds to 2^16: Inf
    assert one_output([f16(16.0)], [f16(1.0)], 0x7BFF, ctype="f16") == INF16


def test_exact_zero_sum_is_plus_zero():
    one, mone = f16(1.0), f16(-1.0)
    assert one_output([one, one], [one, mone], 0) == 0
    assert one_output([one], [mone], f32(1.0)) == 0
    # every term a -0: +0 by default, -0 under IEEE sign rules
    neg_zero_terms = ([0x8000] * 16, [one] * 16, 0x80000000)
    assert one_output(*neg_zero_terms) == 0
    ieee = dataclasses.replace(MODELS["sm_90"], zero_sign="ieee")
    assert one_output(*neg_zero_terms, model=ieee) == 0x80000000
    assert one_output([0x8000] * 16, [one] * 16, 0, model=ieee) == 0  # +0 in C: +0
    assert one_output([one, one], [one, mone], 0x80000000, model=ieee) == 0  # cancellation: +0


def test_subnormal_inputs_are_kept():
    tiny = 0x0001  # f16 2^-24
    assert one_output([tiny], [tiny], 0) == int(f32(2.0 ** -48))
    assert one_output([tiny], [f16(1.0)], 0) == int(f32(2.0 ** -24))
    assert one_output([0x03FF], [f16(1.0)], 0, ctype="f16") == 0x03FF
    # bf16 subnormal times a large normal
    assert one_output([0x0001], [bf16(2.0 ** 100)], 0, atype="bf16") == int(f32(2.0 ** (-133 + 100)))
    # f32 subnormal C survives when nothing else is there
    assert one_output([], [], 0x00000001) == 0x00000001


def test_zero_policy_and_zero_exponent():
    # bf16: 0 * 2^127 next to 2^-20 * (1 + 2^-7). Left out of E, the sum is exact; counted with
    # exponent -126 + 127 = 1 (MMA-Sim), E = 1 truncates the 2^-27 bit away.
    a = [0, bf16(2.0 ** -20)]
    b = [bf16(2.0 ** 127), bf16(1 + 2.0 ** -7)]
    exact = int(f32(2.0 ** -20 + 2.0 ** -27))
    assert one_output(a, b, 0, atype="bf16") == exact
    assert one_output(a, b, 0, atype="bf16", model=MODELS["sm_90_mmasim"]) == int(f32(2.0 ** -20))
    # f16: 0 * 2^15 counted with f16's emin (-14 + 15 = 1) truncates; with -126 (MMA-Sim) it does not
    a = [0, 0x0401]
    b = [f16(2.0 ** 15), f16(1 + 2.0 ** -10)]
    exact = int(f32((2.0 ** -14 + 2.0 ** -24) * (1 + 2.0 ** -10)))
    emin_model = dataclasses.replace(MODELS["sm_90"], zero_policy="exponent_field", e_floor=None)
    assert one_output(a, b, 0) == exact
    assert one_output(a, b, 0, model=MODELS["sm_90_mmasim"]) == exact
    assert one_output(a, b, 0, model=emin_model) == int(f32(2.0 ** -14 + 2.0 ** -23))


def test_e_floor():
    # bf16 products (2 - 2^-7) * 2^-150 = 2^-149 - 2^-157 and 4 * 2^-159, C = 0. Without a floor the
    # sum is exact: D = 2^-149. E clamped at emin - 7 = -133 (quantum 2^-158) drops the 2^-159 terms:
    # RZ gives 0. MMA-Sim: the zero C counts at -126 (quantum 2^-151): also 0.
    a = [bf16(1.9921875 * 2.0 ** -75)] + [bf16(2.0 ** -80)] * 4
    b = [bf16(2.0 ** -75)] + [bf16(2.0 ** -79)] * 4
    assert one_output(a, b, 0, atype="bf16", model=MODELS["sm_90_plain"]) == 0x00000001
    assert one_output(a, b, 0, atype="bf16") == 0
    assert one_output(a, b, 0, atype="bf16", model=MODELS["sm_90_mmasim"]) == 0
    # a floor at emin - 9 (quantum 2^-160) keeps them
    low = dataclasses.replace(MODELS["sm_90"], e_floor=-9)
    assert one_output(a, b, 0, atype="bf16", model=low) == 0x00000001


def test_underflow_sign():
    # a nonzero negative sum below half of f16's smallest subnormal: the device gives +0; "keep" gives -0
    a, b = [f16(-(2.0 ** -14))], [f16(2.0 ** -14)]
    assert one_output(a, b, 0, ctype="f16") == 0
    assert one_output(a, b, 0, ctype="f16", model=MODELS["sm_90_plain"]) == 0x8000


def test_batch_shape_and_k8():
    rng = np.random.default_rng(1)
    a = f16(rng.integers(-3, 4, (4, 2, 16, 8)))
    b = f16(rng.integers(-3, 4, (4, 2, 8, 8)))
    c = f32(np.zeros((4, 2, 16, 8)))
    d = mma_m16n8k8(a, b, c, atype="f16", ctype="f32")
    assert d.shape == (4, 2, 16, 8)
    want = a.view(np.float16).astype(np.float32) @ b.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(d.view(np.float32), want)


# ---- the kernel's inlined decode and rounding against the shared helpers -----------------------------

def test_inline_f32_decode_matches_formats_decode():
    rng = np.random.default_rng(3)
    bits = np.concatenate([rng.integers(0, 1 << 32, 3000), [0, 1, 0x7FFFFF, 0x800000, 0x7F800000, 0x7F800001,
                                                           0xFF800000, 0x80000000, 0x80000001, 0xFFFFFFFF]]).astype(np.uint32)
    sign, sig, exp, cls = formats.decode(bits, formats.F32)
    for i, u in enumerate(bits):
        s, e, c, g = mm._decode_f32(u, -999, -777)
        assert (c, g) == (cls[i], sign[i])
        if c == formats.FINITE:
            assert s == (-sig[i] if sign[i] else sig[i]) and e - 23 == exp[i]
        elif c == formats.ZERO:
            assert s == 0 and e == -999


@pytest.mark.parametrize("fmt", [formats.F32, formats.F16], ids=lambda f: f.name)
@pytest.mark.parametrize("mode,sat", [("rz", True), ("rn", True), ("rn", False)])
def test_inline_rounding_matches_round_exact(fmt, mode, sat):
    # (RZ without saturation differs on purpose: the device overflows to Inf, IEEE RZ to max finite)
    rng = np.random.default_rng(5)
    mag = np.concatenate([rng.integers(1, 1 << 40, 2000), rng.integers(1, 1 << 12, 500)])
    exp = rng.integers(fmt.emin - 60, fmt.emax + 5, mag.size)
    sign = rng.integers(0, 2, mag.size)
    want = formats.round_exact(sign, mag, exp, fmt, mode, satfinite=sat)
    for i in range(mag.size):
        got = mm._round_to_bits(bool(sign[i]), int(mag[i]), int(exp[i]), fmt.mbits, fmt.emin, fmt.emax,
                                mode == "rn", sat, False)
        assert got == want[i], (mag[i], exp[i], sign[i])


# ---- errors ------------------------------------------------------------------------------------------

def good(k=16, ctype="f32"):
    return tile((2, 16, k)), tile((2, k, 8)), tile((2, 16, 8), 0, np.uint32 if ctype == "f32" else np.uint16)


def test_bad_dtypes_and_shapes():
    a, b, c = good()
    with pytest.raises(ArgumentError, match=r"^a=dtype\('float16'\)"):
        mma_m16n8k16(a.view(np.float16), b, c, atype="f16", ctype="f32")
    with pytest.raises(ArgumentError, match=r"^b=dtype\('int16'\)"):
        mma_m16n8k16(a, b.astype(np.int16), c, atype="f16", ctype="f32")
    with pytest.raises(ArgumentError, match=r"^c=dtype\('uint16'\).*uint32"):
        mma_m16n8k16(a, b, c.astype(np.uint16), atype="f16", ctype="f32")
    with pytest.raises(ArgumentError, match=r"^c=dtype\('uint32'\).*uint16"):
        mma_m16n8k16(a, b, c, atype="f16", ctype="f16")
    with pytest.raises(ArgumentError, match=r"^a=\(2, 16, 8\)"):
        mma_m16n8k16(a[..., :8], b, c, atype="f16", ctype="f32")
    with pytest.raises(ArgumentError, match=r"^b=\(2, 16, 8\)"):
        mma_m16n8k8(a[..., :8], b, c, atype="f16", ctype="f32")
    with pytest.raises(ArgumentError, match=r"^c=\(8,\)"):
        mma_m16n8k16(a, b, c[0, 0], atype="f16", ctype="f32")
    with pytest.raises(ArgumentError, match=r"^b=\(3, 16, 8\).*batch shape"):
        mma_m16n8k16(a, tile((3, 16, 8)), c, atype="f16", ctype="f32")
    with pytest.raises(ArgumentError, match=r"^c=\(16, 8\).*batch shape"):
        mma_m16n8k16(a, b, c[0], atype="f16", ctype="f32")


def test_bad_types_arch_and_model():
    a, b, c = good()
    with pytest.raises(ArgumentError, match=r"^atype='f8'"):
        mma_m16n8k16(a, b, c, atype="f8", ctype="f32")
    with pytest.raises(ArgumentError, match=r"^ctype='f64'"):
        mma_m16n8k16(a, b, c, atype="f16", ctype="f64")
    with pytest.raises(ArgumentError, match=r"^arch='sm_100'"):
        mma_m16n8k16(a, b, c, atype="f16", ctype="f32", arch="sm_100")
    with pytest.raises(ArgumentError, match=r"^ctype='f16'.*bf16"):
        mma_m16n8k16(a, b, c, atype="bf16", ctype="f16")
    with pytest.raises(ArgumentError, match=r"^model='sm_90'"):
        mma_m16n8k16(a, b, c, atype="f16", ctype="f32", model="sm_90")
    with pytest.raises(ArgumentError, match=r"^model='odd'.*products_per_step=6"):
        mma_m16n8k16(a, b, c, atype="f16", ctype="f32", model=MmaModel("odd", products_per_step=6))
    with pytest.raises(ArgumentError, match=r"^engine='gpu'"):
        mma(a, b, c, k=16, atype="f16", ctype="f32", engine="gpu")
    with pytest.raises(ArgumentError, match=r"^k=32"):
        mma(a, b, c, k=32, atype="f16", ctype="f32")


def test_not_modelled():
    a, b, c = good(8, "f16")
    with pytest.raises(NotImplementedError, match=r"m16n8k8 with atype='f16', ctype='f16' is not modelled"):
        mma_m16n8k8(a, b, c, atype="f16", ctype="f16")


@pytest.mark.parametrize("field,value", [("frac_bits", 0), ("frac_bits", 41), ("frac_bits", True),
                                         ("products_per_step", 0), ("zero_policy", "ignore"),
                                         ("zero_exp", -126), ("e_floor", 1.5), ("overflow", "wrap"),
                                         ("zero_sign", "-0"), ("underflow_sign", "flush"),
                                         ("round_f32", "rm"), ("round_f16", "ru"), ("name", "")])
def test_model_validates_itself(field, value):
    with pytest.raises(ArgumentError, match=rf"^{field}={value!r}".replace("(", r"\(").replace(".", r"\.")):
        MmaModel(**{"name": "x", field: value})


def test_models_are_read_only():
    with pytest.raises(TypeError):
        MODELS["mine"] = MODELS["sm_90"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        MODELS["sm_90"].frac_bits = 24
