"""f32 FFMA/FADD/FMUL/FMNMX: correctly rounded against MPFR, ftz, NaN and signed-zero rules."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import mpref
from flashsim import ArgumentError
from flashsim.numerics import fp32
from flashsim.numerics.formats import F32
from flashsim.strategies import bit_arrays, float_bits

NAN = F32.canonical_nan


def _ref(op, *xs, ftz=False):
    vals = []
    for x in xs:
        if ftz and (x & 0x7F800000) == 0:
            x &= 0x80000000
        vals.append(mpref.value(x, F32))
    if any(np.isnan(v) for v in vals):
        return NAN
    with np.errstate(all="ignore"):
        if op == "fma":
            if any(np.isinf(v) for v in vals):
                r = np.float64(vals[0]) * vals[1] + vals[2]
                return NAN if np.isnan(r) else int(np.float32(r).view(np.uint32))
            exact = mpref.exact_fma(*vals)
        elif op == "add":
            if any(np.isinf(v) for v in vals):
                r = np.float64(vals[0]) + vals[1]
                return NAN if np.isnan(r) else int(np.float32(r).view(np.uint32))
            exact = mpref.exact_add(*vals)
        else:
            r = np.float64(vals[0]) * vals[1]  # exact in float64
            if np.isnan(r):
                return NAN
            exact = r
    if exact == 0:
        # IEEE zero sign: x + (-x) = +0 in rn; -0 + -0 = -0; the float64 op gets it right
        with np.errstate(all="ignore"):
            z = (np.float64(vals[0]) * vals[1] + vals[2]) if op == "fma" else (
                np.float64(vals[0]) + vals[1] if op == "add" else np.float64(vals[0]) * vals[1])
        out = int(np.float32(z).view(np.uint32))
    else:
        out = mpref.round_to(exact, F32, "rn")
    if ftz and exact != 0 and abs(float(mpref.round_unbounded(exact, 24))) < 2.0**-126:
        out &= 0x80000000  # the device flushes what is tiny after 24-bit rounding (unbounded exponent)
    return out


def _draw(rng, n, lo=-150, hi=128):
    e = rng.integers(lo, hi, n)
    m = rng.random(n) + 1
    s = rng.choice([-1.0, 1.0], n)
    with np.errstate(all="ignore"):
        return (s * np.ldexp(m, e)).astype(np.float32).view(np.uint32)


def _cases(rng, n):
    a, b, c = _draw(rng, n), _draw(rng, n), _draw(rng, n)
    with np.errstate(all="ignore"):
        # cancellation: c = -round(a*b), so the result is the product's rounding error
        c[::3] = (-(a[::3].view(np.float32).astype(np.float64) * b[::3].view(np.float32))).astype(np.float32).view(np.uint32)
    # subnormal-range results: small operands
    a[1::5], b[1::5] = _draw(rng, len(a[1::5]), -80, -60), _draw(rng, len(b[1::5]), -80, -60)
    return a, b, c


@pytest.mark.parametrize("ftz", [False, True])
def test_fma_add_mul_match_mpfr(ftz):
    rng = np.random.default_rng(3)
    a, b, c = _cases(rng, 4000)
    specials = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 1, 0x80000001, 0x7F7FFFFF], np.uint32)
    sa, sb, sc = np.meshgrid(specials, specials, specials, indexing="ij")
    a, b, c = (np.concatenate([x, y.ravel()]) for x, y in ((a, sa), (b, sb), (c, sc)))
    for op, got, args in (("fma", fp32.fma(a, b, c, ftz=ftz), (a, b, c)),
                          ("add", fp32.add(a, c, ftz=ftz), (a, c)),
                          ("mul", fp32.mul(a, b, ftz=ftz), (a, b))):
        ref = np.array([_ref(op, *(int(x[i]) for x in args), ftz=ftz) for i in range(len(a))], np.uint32)
        bad = np.nonzero(got != ref)[0]
        assert bad.size == 0, (op, [tuple(hex(int(x[i])) for x in args) + (hex(got[i]), hex(ref[i])) for i in bad[:4]])


def test_fma_is_not_double_rounded():
    # a*b = 1 + 2^-24 + 2^-48 style: float64 rounds the product sum to a tie, f32 must still round up
    a = np.array([0x3F800001], np.uint32)          # 1 + 2^-23
    b = np.array([0x3F000001], np.uint32)          # 0.5 + 2^-24  -> product 0.5 + 2^-24 + 2^-24 + 2^-47
    c = np.array([0xB3000000], np.uint32)          # -2^-25
    exact = mpref.exact_fma(*(mpref.value(int(x[0]), F32) for x in (a, b, c)))
    assert fp32.fma(a, b, c)[0] == mpref.round_to(exact, F32, "rn")
    # the naive float64 route gets it wrong here or equals it by luck: both are checked above by MPFR


def test_signed_zero_and_ties():
    z, nz = np.uint32(0), np.uint32(0x80000000)
    one = np.uint32(0x3F800000)
    m1 = np.uint32(0xBF800000)
    assert fp32.add(np.array([one]), np.array([m1]))[0] == 0                 # 1 + -1 = +0
    assert fp32.add(np.array([nz]), np.array([nz]))[0] == 0x80000000         # -0 + -0 = -0
    assert fp32.fma(np.array([nz]), np.array([one]), np.array([nz]))[0] == 0x80000000
    # 1 + 2^-24 is a tie between 1 and 1 + 2^-23: to even gives 1
    assert fp32.add(np.array([one]), np.array([0x33800000], np.uint32))[0] == one
    assert fp32.add(np.array([0x3F800001], np.uint32), np.array([0x33800000], np.uint32))[0] == 0x3F800002


def test_ftz_flushes_inputs_and_results():
    tiny = np.array([0x00400000], np.uint32)   # 2^-127, subnormal
    one = np.array([0x3F800000], np.uint32)
    assert fp32.mul(tiny, one)[0] == 0x00400000
    assert fp32.mul(tiny, one, ftz=True)[0] == 0
    neg = np.array([0x80400000], np.uint32)
    assert fp32.add(neg, np.array([0x80000000], np.uint32), ftz=True)[0] == 0x80000000
    # a normal*normal product that lands in the subnormal range is flushed, keeping its sign
    half = np.array([0x00800000], np.uint32)   # 2^-126
    assert fp32.mul(half, np.array([0xBF000000], np.uint32), ftz=True)[0] == 0x80000000
    # 2^-126 - 2^-150 rounds to 2^-126 in the subnormal format but is tiny at 24 bits: flushed
    a, b = np.array([0x3F7FFFFF], np.uint32), np.array([0x00800000], np.uint32)
    assert fp32.mul(a, b)[0] == 0x00800000 and fp32.mul(a, b, ftz=True)[0] == 0
    assert fp32.fma(a, b, np.array([0x80000000], np.uint32), ftz=True)[0] == 0
    # 2^-126 * (1 - 2^-46) rounds up to 2^-126 even at 24 bits: kept
    a, b = np.array([0x3F7FFFFE], np.uint32), np.array([0x00800001], np.uint32)
    assert fp32.mul(a, b, ftz=True)[0] == 0x00800000


@given(bit_arrays(F32, (32,)), bit_arrays(F32, (32,)))
def test_fmax_fmin_laws(a, b):
    for nan in (False, True):
        mx, mn = fp32.fmax(a, b, nan=nan), fp32.fmin(a, b, nan=nan)
        fa, fb = a.view(np.float32), b.view(np.float32)
        both = ~np.isnan(fa) & ~np.isnan(fb)
        # commutative up to the identity of equal values, and max >= min
        assert np.array_equal(mx, fp32.fmax(b, a, nan=nan)) and np.array_equal(mn, fp32.fmin(b, a, nan=nan))
        assert np.all(mx[both].view(np.float32) >= mn[both].view(np.float32))
        # results are one of the operands or the canonical NaN
        assert np.all((mx == a) | (mx == b) | (mx == NAN))
        if nan:
            assert np.all(mx[~both] == NAN)
        else:
            one_nan = np.isnan(fa) ^ np.isnan(fb)
            assert np.all(np.isin(mx[one_nan].view(np.float32), np.r_[fa[one_nan], fb[one_nan]]))


def test_fmax_orders_signed_zero():
    z, nz = np.array([0], np.uint32), np.array([0x80000000], np.uint32)
    assert fp32.fmax(nz, z)[0] == 0 and fp32.fmax(z, nz)[0] == 0
    assert fp32.fmin(nz, z)[0] == 0x80000000 and fp32.fmin(z, nz)[0] == 0x80000000


def test_errors_name_the_operand():
    ok = np.zeros(3, np.uint32)
    with pytest.raises(ArgumentError, match=r"^b=dtype\('float32'\)"):
        fp32.fma(ok, ok.view(np.float32), ok)
    with pytest.raises(ArgumentError, match=r"^c=\(2,\)"):
        fp32.fma(ok, ok, np.zeros(2, np.uint32))


def test_exact_zero_sum_sign_under_round_toward_negative():
    # IEEE 754 6.3: an exact zero sum of operands of opposite signs (or x - x) is +0 in every mode but
    # round-toward-negative, where it is -0; +0 + +0 is +0 and -0 + -0 is -0 in every mode
    from flashsim.numerics import fp32

    f = lambda v: np.array(v, np.float32).view(np.uint32)  # noqa: E731
    one = f([1.0] * 4)
    a = f([3.5, 0.0, 0.0, -0.0])
    c = f([-3.5, -0.0, 0.0, -0.0])
    got_rm = fp32.fma(a, one, c, rnd="rm")
    np.testing.assert_array_equal(got_rm, f([-0.0, -0.0, 0.0, -0.0]))
    for mode in ("rn", "rz", "rp"):
        np.testing.assert_array_equal(fp32.fma(a, one, c, rnd=mode), f([0.0, 0.0, 0.0, -0.0]))
