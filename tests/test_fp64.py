"""flashsim.numerics.fp64 (binary64 as the D* instructions compute it) against MPFR's correctly rounded fma, add
and mul (gmpy2, 53 bits, the binary64 exponent range with subnormals) in every rounding mode, on edge-case and
random bit patterns; the NaN rule's mechanics; the conversions; the operand and immediate readers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashsim.numerics import fp64
from flashsim.numerics.formats import F64

gmpy2 = pytest.importorskip("gmpy2", reason="MPFR references need gmpy2 (the test extra)")

MODES = ("rn", "rz", "rm", "rp")
_ROUND = {"rn": gmpy2.RoundToNearest, "rz": gmpy2.RoundToZero, "rm": gmpy2.RoundDown, "rp": gmpy2.RoundUp}
ONE = 0x3FF0000000000000


def _ctx(mode):
    return gmpy2.context(precision=53, emin=-1073, emax=1024, subnormalize=True, round=_ROUND[mode])


def _f(b: int) -> float:
    return float(np.array(b, np.uint64).view(np.float64))


def _bits(x) -> int:
    if x == 0:
        return (1 << 63) if gmpy2.is_signed(x) else 0
    return int(np.array(float(x), np.float64).view(np.uint64))


def mpfr_fma(a: int, b: int, c: int, mode: str):
    """MPFR's correctly rounded a*b + c as binary64 bits (None for a NaN result)."""
    with gmpy2.context(_ctx(mode)) as cx:
        r = cx.check_range(gmpy2.fma(gmpy2.mpfr(_f(a)), gmpy2.mpfr(_f(b)), gmpy2.mpfr(_f(c))))
    return None if gmpy2.is_nan(r) else _bits(r)


def mpfr_mul(a: int, b: int, mode: str):
    with gmpy2.context(_ctx(mode)) as cx:
        r = cx.check_range(gmpy2.mpfr(_f(a)) * gmpy2.mpfr(_f(b)))
    return None if gmpy2.is_nan(r) else _bits(r)


def mpfr_add(a: int, b: int, mode: str):
    with gmpy2.context(_ctx(mode)) as cx:
        r = cx.check_range(gmpy2.mpfr(_f(a)) + gmpy2.mpfr(_f(b)))
    return None if gmpy2.is_nan(r) else _bits(r)


def _draw(rng, n):
    r = rng.random(n)
    s = rng.integers(0, 2, n).astype(np.uint64) << np.uint64(63)
    m = rng.integers(0, 1 << 52, n, dtype=np.uint64)
    field = lambda lo, hi: rng.integers(lo, hi + 1, n).astype(np.uint64) << np.uint64(52)  # noqa: E731
    specials = np.array([0, 1 << 63, 1, 0x000FFFFFFFFFFFFF, 0x0010000000000000, ONE, 0x3FF0000000000001,
                         0x3FEFFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF, 0x7FF0000000000000, 0x7FF8000000000000,
                         0x7FF0000000000001, 0x3CA0000000000000, 0x4340000000000000], np.uint64)
    sp = specials[rng.integers(0, len(specials), n)] | s
    short = s | field(0, 2046) | (m & np.uint64(0xFFFFF0000000))
    out = np.where(r < 0.15, sp, np.where(r < 0.3, s | field(900, 1150) | m, np.where(
        r < 0.45, s | field(0, 60) | m, np.where(r < 0.55, s | field(1990, 2046) | m, short))))
    return out.astype(np.uint64)


def _cases(seed, n):
    rng = np.random.default_rng(seed)
    a, b, c = _draw(rng, n), _draw(rng, n), _draw(rng, n)
    with np.errstate(all="ignore"):
        p = (fp64.values(a) * fp64.values(b))
        near = (-p).view(np.uint64) + rng.integers(-2, 3, n).astype(np.int64).view(np.uint64)
        tiny = (p * np.ldexp(1.0, -rng.choice([53, 54, 60, 107, 1100], n))).view(np.uint64)
    r = rng.random(n)
    c = np.where(r < 0.25, near, np.where(r < 0.35, tiny, c))
    return a, b, c


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [1, 2])
def test_fma_is_correctly_rounded(mode, seed):
    a, b, c = _cases(seed, 4000)
    got = fp64.fma(a, b, c, mode)
    bad = [(hex(x), hex(y), hex(z), hex(g), hex(w))
           for x, y, z, g in zip(map(int, a), map(int, b), map(int, c), map(int, got))
           if (w := mpfr_fma(x, y, z, mode)) is not None and w != g]
    assert not bad, bad[:5]


@pytest.mark.parametrize("mode", MODES)
def test_add_and_mul_are_correctly_rounded(mode):
    a, b, c = _cases(3, 4000)
    ga, gm = fp64.add(a, c, mode), fp64.mul(a, b, mode)
    bad = []
    for x, y, z, s, p in zip(map(int, a), map(int, b), map(int, c), map(int, ga), map(int, gm)):
        ws, wp = mpfr_add(x, z, mode), mpfr_mul(x, y, mode)
        if ws is not None and ws != s:
            bad.append(("add", hex(x), hex(z), hex(s), hex(ws)))
        if wp is not None and wp != p:
            bad.append(("mul", hex(x), hex(y), hex(p), hex(wp)))
    assert not bad, bad[:5]


def test_round_to_nearest_add_and_mul_agree_with_the_exact_kernel():
    """numpy's float64 + and * (the rn path) and the integer kernel (every other mode) are one rounding."""
    a, b, c = _cases(4, 20000)
    one = np.full(a.shape, np.uint64(ONE))
    nan = fp64.is_nan
    s_np, s_k = fp64.add(a, c), fp64.fma(a, one, c)
    p_np, p_k = fp64.mul(a, b), fp64.fma(a, b, np.full(a.shape, np.uint64(1 << 63)))
    assert np.array_equal(s_np, s_k) and np.array_equal(p_np, p_k)
    assert nan(s_np).any() and (~nan(s_np)).sum() > 15000  # NaNs compared too (one rule on both paths)


_EDGES = [0, 1 << 63, 1, ONE, 0x7FF0000000000000, 0x000FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF]


@settings(max_examples=300, deadline=None)
@given(st.tuples(*[st.one_of(st.integers(0, 2**64 - 1), st.sampled_from(_EDGES))] * 3), st.sampled_from(MODES))
def test_fma_on_hypothesis_bits(abc, mode):
    a, b, c = abc
    want = mpfr_fma(a, b, c, mode)
    got = int(fp64.fma(np.uint64(a), np.uint64(b), np.uint64(c), mode)[()])
    if want is None:
        assert fp64.is_nan(np.uint64(got))
    else:
        assert got == want, (hex(a), hex(b), hex(c), mode, hex(got), hex(want))


def test_ieee_facts():
    # ties: 1 + 2^-53 is halfway between 1 and its successor
    half = np.uint64(0x3CA0000000000000)
    one = np.uint64(ONE)
    assert [int(fp64.add(one, half, m)[()]) for m in MODES] == [ONE, ONE, ONE, ONE + 1]
    # subnormals are kept: the smallest subnormal times 1/2 rounds to even (0), up under rp
    tiny, halfv = np.uint64(1), np.uint64(0x3FE0000000000000)
    assert [int(fp64.mul(tiny, halfv, m)[()]) for m in MODES] == [0, 0, 0, 1]
    # x - x is +0, and -0 rounding toward -inf; fma's exact zero keeps the product's sign with a same-sign zero
    x = np.uint64(0x4008000000000000)
    assert [int(fp64.add(x, x ^ np.uint64(1 << 63), m)[()]) for m in MODES] == [0, 0, 1 << 63, 0]
    neg0 = np.uint64(1 << 63)
    assert int(fp64.fma(neg0, one, neg0)[()]) == 1 << 63 and int(fp64.fma(neg0, one, np.uint64(0))[()]) == 0
    # overflow per mode
    big = np.uint64(0x7FEFFFFFFFFFFFFF)
    assert [int(fp64.add(big, big, m)[()]) for m in MODES] == [0x7FF0000000000000, int(big), int(big),
                                                               0x7FF0000000000000]


def test_the_nan_rule_is_one_switch():
    q = np.uint64(0x7FF0000000000123)  # signalling, payload 0x123
    n2 = np.uint64(0xFFF8000000000456)
    one, inf = np.uint64(ONE), np.uint64(0x7FF0000000000000)
    prop = fp64.NanRule(True, 0xFFF8000000000000)
    canon = fp64.NanRule(False, 0x7FFFFFFFFFFFFFFF)
    for rn in MODES:
        assert int(fp64.add(q, n2, rn, nan_rule=prop)[()]) == 0x7FF8000000000123  # the first NaN, quieted
        assert int(fp64.add(one, n2, rn, nan_rule=prop)[()]) == 0xFFF8000000000456
        assert int(fp64.fma(one, one, q, rn, nan_rule=prop)[()]) == 0x7FF8000000000123
        assert int(fp64.add(inf, inf ^ np.uint64(1 << 63), rn, nan_rule=prop)[()]) == 0xFFF8000000000000
        assert int(fp64.mul(inf, np.uint64(0), rn, nan_rule=prop)[()]) == 0xFFF8000000000000
        assert int(fp64.add(q, n2, rn, nan_rule=canon)[()]) == 0x7FFFFFFFFFFFFFFF
        assert int(fp64.mul(one, q, rn, nan_rule=canon)[()]) == 0x7FFFFFFFFFFFFFFF
    assert int(fp64.round_integral(q, "rm", nan_rule=prop)[()]) == 0x7FF8000000000123
    assert int(fp64.from_f32(np.uint32(0xFF800123), nan_rule=prop)[()]) == 0xFFF8002460000000
    assert int(fp64.from_f32(np.uint32(0xFF800123), nan_rule=canon)[()]) == 0x7FFFFFFFFFFFFFFF
    assert fp64.NAN_RULE in fp64.CANDIDATE_RULES.values()


def test_conversions():
    from flashsim.gpu import sass_probes as sp

    rng = np.random.default_rng(5)
    f32 = np.concatenate([np.asarray(sp.F32_SPECIALS, np.uint32),
                          rng.integers(0, 1 << 32, 5000, dtype=np.uint64).astype(np.uint32)])
    wide = fp64.from_f32(f32)
    ok = ~np.isnan(f32.view(np.float32))
    assert np.array_equal(fp64.values(wide[ok]), f32[ok].view(np.float32).astype(np.float64))
    x = np.concatenate([wide, rng.integers(0, 1 << 63, 5000, dtype=np.uint64) * np.uint64(2)])
    for mode in MODES:
        got = fp64.to_f32(x, mode)
        for v, g in zip(map(int, x[::7]), map(int, got[::7])):
            fv = _f(v)
            if np.isnan(fv):  # sign and top payload bits kept, quieted (measured: traces/double)
                assert g == ((v >> 32) & 0x80000000) | 0x7FC00000 | ((v >> 29) & 0x7FFFFF)
                continue
            with gmpy2.context(gmpy2.context(precision=24, emin=-148, emax=128, subnormalize=True,
                                             round=_ROUND[mode])) as cx:
                r = cx.check_range(gmpy2.mpfr(fv))
            want = (0x80000000 if gmpy2.is_signed(r) else 0) if r == 0 else \
                int(np.array(float(r), np.float32).view(np.uint32))
            assert g == want, (hex(v), mode, hex(g), hex(want))
    xs = fp64.values(x)
    for mode, fn in (("rn", np.rint), ("rz", np.trunc), ("rm", np.floor), ("rp", np.ceil)):
        with np.errstate(invalid="ignore"):
            want = fn(xs).view(np.uint64)
        got = fp64.round_integral(x, mode)
        keep = ~np.isnan(xs)
        assert np.array_equal(got[keep], want[keep])


def test_min_max_predicates():
    pz, nz = np.uint64(0), np.uint64(1 << 63)
    one, two, nan = np.uint64(ONE), np.uint64(0x4000000000000000), np.uint64(0x7FF8000000000001)
    a = np.array([one, two, nz, pz, nan, one, nan], np.uint64)
    b = np.array([two, one, pz, nz, one, nan, nan], np.uint64)
    take_min, both_min = fp64.pick_min(a, b)
    take_max, both_max = fp64.pick_max(a, b)
    assert take_min.tolist() == [True, False, True, False, False, True, False]
    assert take_max.tolist() == [False, True, False, True, False, True, False]
    assert both_min.tolist() == both_max.tolist() == [False] * 6 + [True]


def test_the_f64_format_rounds_integers_through_round_exact():
    from flashsim.numerics.formats import round_exact

    v = np.array([(1 << 53) + 1, (1 << 53) + 3, (1 << 62) + 1, 3, 0], np.int64)
    for mode in MODES:
        got = round_exact(np.array([1, 0, 1, 0, 0]), v, np.zeros(5, np.int64), F64, mode)
        for s, m, g in zip([1, 0, 1, 0, 0], v, got):
            with gmpy2.context(_ctx(mode)) as cx:
                w = _bits(cx.check_range(gmpy2.mpfr(int(m) * (-1 if s else 1))))
            assert int(g) == w


def test_f64_immediates_are_read_from_the_text():
    from flashsim.sass.isa import f64_immediate, parse_operand

    assert f64_immediate("1.5") == 0x3FF8000000000000
    assert f64_immediate("-2") == 0xC000000000000000
    assert f64_immediate("+INF ") == 0x7FF0000000000000 and f64_immediate("-INF") == 0xFFF0000000000000
    assert f64_immediate("1.80143985094819840000e+16") == 0x4350000000000000
    assert f64_immediate("2.2250738585072013831e-308") == 0x0010000000000000
    assert f64_immediate("0.1") is None  # not a double with a zero low word
    assert f64_immediate("QNAN") is None and f64_immediate("R2") is None
    # the f32 bits an fimm operand keeps are no help: 2^1000 is +Inf as an f32
    assert parse_operand("1.07150860718626732095e+301").value == 0x7F800000
    assert f64_immediate("1.07150860718626732095e+301") == 0x7E70000000000000


# ---------------------------------------------------------------------------------- MUFU.RCP64H / RSQ64H
DIV_SRC = r"""
extern "C" __global__ void dd(const double* a, const double* b, double* q, double* r, double* s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { q[i] = a[i] / b[i]; r[i] = sqrt(a[i]); s[i] = 1.0 / b[i]; }
}
"""


def div_inputs(seed: int, n: int = 2048):
    rng = np.random.default_rng(seed)
    a = np.abs(rng.standard_normal(n)) * 10.0 ** rng.integers(-100, 100, n)
    b = rng.standard_normal(n) * 10.0 ** rng.integers(-100, 100, n)
    a[:3], b[:3] = [2.2250738585072014e-300, 1.0, 3.0], [7.0, 3.0, 1e-200]
    return a, b


def test_the_sfu64_model_gives_the_recorded_specials():
    import json
    from pathlib import Path

    from flashsim.numerics import sfu64

    rep = json.loads((Path(__file__).resolve().parents[1] / "traces/double/sfu64_report.json").read_text())
    for rec in rep["results"]:
        op = "rcp64h" if "RCP" in rec["instruction"] else "rsq64h"
        assert rec["verified"]["inputs"] == 2**32 and rec["verified"]["mismatches"] == 0
        ins = np.array([int(k, 16) for k in rec["specials"]], np.uint32)
        want = np.array([int(v, 16) for v in rec["specials"].values()], np.uint32)
        np.testing.assert_array_equal(sfu64.mufu64h(op, ins), want)


@pytest.mark.parametrize("seed", [0, 1])
def test_double_division_and_square_root_run_ieee_exact_in_the_interpreter(seed):
    import flashsim.cuda as fc

    f = fc.RawModule(code=DIV_SRC).get_function("dd")
    forms = {i.name for i in f._prog().instructions.values()}
    assert {"MUFU.RCP64H", "MUFU.RSQ64H"} <= forms
    a, b = div_inputs(seed)
    outs = [fc.zeros(len(a), np.float64) for _ in range(3)]
    f(((len(a) + 127) // 128,), (128,), (fc.asarray(a), fc.asarray(b), *outs, np.int32(len(a))))
    for got, want in zip((o.get() for o in outs), (a / b, np.sqrt(a), 1.0 / b)):
        np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


def test_division_and_square_root_of_zeros_infinities_and_nans():
    import flashsim.cuda as fc

    f = fc.RawModule(code=DIV_SRC).get_function("dd")
    inf, nan = np.inf, np.nan
    a = np.array([1.0, 0.0, inf, 1.0, -4.0, inf, 0.0, -0.0, 1e308, 5e-324, nan, 2.0])
    b = np.array([0.0, 0.0, inf, inf, -0.0, 2.0, 3.0, -1.0, 1e-10, 1e300, 1.0, nan])
    outs = [fc.zeros(len(a), np.float64) for _ in range(3)]
    f((1,), (32,), (fc.asarray(a), fc.asarray(b), *outs, np.int32(len(a))))
    with np.errstate(all="ignore"):
        for got, want in zip((o.get() for o in outs), (a / b, np.sqrt(a), 1.0 / b)):
            nan_want = np.isnan(want)
            np.testing.assert_array_equal(got[~nan_want].view(np.uint64), want[~nan_want].view(np.uint64))
            assert np.isnan(got[nan_want]).all()
    q = outs[0].get().view(np.uint64)
    assert q[1] == 0xFFF8000000000000  # 0 / 0: the H200's NaN of an invalid operation (probe_dnan)
    assert q[10] == np.array([nan]).view(np.uint64)[0] | (1 << 51)  # a NaN operand passes through, quieted
