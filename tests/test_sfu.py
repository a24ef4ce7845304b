"""Special-function unit models: structure laws on the CPU, SASS-sequence wrappers, cuda_math, errors.

Bit-exactness against the GPU is shown by the golden replay (tests/test_golden.py) and by
gpu/validate_sfu.py over all 2^32 inputs; these tests check the laws the models are built on.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashsim import ArgumentError, TraceError
from flashsim.numerics import cuda_math, sfu
from flashsim.numerics.formats import F32
from flashsim.strategies import bit_arrays

f32 = lambda v: np.asarray(v, np.float32).view(np.uint32)  # noqa: E731
def val(b):
    """f32 bit patterns as float64 values. A signalling NaN pattern is made quiet first (payload kept): cast
    as it is, it raises the invalid-operation flag ("invalid value encountered in cast")."""
    b = np.asarray(b, np.uint32)
    quiet = np.where((b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000), b | np.uint32(0x00400000), b)
    return quiet.astype(np.uint32).view(np.float32).astype(np.float64)


def test_val_reads_every_nan_pattern_without_a_floating_point_exception():
    # the suite turns warnings into errors: a cast of a signalling NaN would fail here
    b = np.array([0x7F800001, 0x7FBFFFFF, 0xFF800001, 0x7FC00000, 0x7FFFFFFF, 0x7F800000, 0x00000001], np.uint32)
    v = val(b)
    assert np.isnan(v[:5]).all() and v[5] == np.inf and v[6] == 2.0**-149


@settings(deadline=None)
@given(st.integers(1, 253), st.integers(0, (1 << 23) - 1), st.booleans())
def test_rcp_scales_by_powers_of_two(ef, m, neg):
    x = np.array([(ef << 23) | m | (neg << 31)], np.uint32)
    base = np.array([(127 << 23) | m | (neg << 31)], np.uint32)
    assert val(sfu.mufu_rcp(x))[0] == val(sfu.mufu_rcp(base))[0] * 2.0 ** (127 - ef) or \
        abs(val(sfu.mufu_rcp(base))[0] * 2.0 ** (127 - ef)) < 2.0**-126


@given(bit_arrays(F32, (64,)))
def test_tanh_is_odd_and_bounded(x):
    t, tn = sfu.mufu_tanh(x), sfu.mufu_tanh(x ^ np.uint32(0x80000000))
    ok = ~np.isnan(val(x))
    assert np.array_equal(t[ok], tn[ok] ^ np.uint32(0x80000000))
    assert np.all(np.abs(val(t[ok])) <= 1.0)


def test_tanh_identity_below_2_to_minus_8_and_saturation():
    tiny = np.array([1, 0x7FFFFF, 0x3B7FFFFF, 0x80000001], np.uint32)  # subnormals and just below 2^-8
    assert np.array_equal(sfu.mufu_tanh(tiny), tiny)
    assert np.all(sfu.mufu_tanh(f32([8.0, 100.0, np.inf])) == 0x3F800000)
    assert sfu.mufu_tanh(np.array([0x7FC00001], np.uint32))[0] == 0x7FFFFFFF


def test_ex2_special_values_and_flush():
    x = f32([0.0, -0.0, 1.0, -1.0, 128.0, -127.0, np.inf, -np.inf, np.nan])
    out = val(sfu.mufu_ex2(x))
    assert list(out[:6]) == [1.0, 1.0, 2.0, 0.5, np.inf, 0.0]  # 2^-127 is subnormal: MUFU flushes it
    assert out[6] == np.inf and out[7] == 0.0 and np.isnan(out[8])
    # ex2.approx.f32 (no ftz) squares 2^(x/2) and keeps the subnormal (approximately 2^-127)
    sub = val(sfu.ex2_approx_f32(f32([-127.0])))[0]
    assert 0 < sub < 2.0**-126 and sub == pytest.approx(2.0**-127, rel=1e-6)


def test_ex2_accuracy_within_two_ulp_on_a_sweep():
    x = f32(np.linspace(-20, 20, 200001))
    got = sfu.mufu_ex2(x).astype(np.int64)
    ref = np.exp2(val(x)).astype(np.float32).view(np.uint32).astype(np.int64)
    assert np.max(np.abs(got - ref)) <= 2


def test_lg2_and_rcp_specials():
    x = f32([0.0, -0.0, -1.0, np.inf, -np.inf, 1.0, 2.0**-126])
    lg = sfu.mufu_lg2(x)
    assert [hex(v) for v in lg[:5]] == ["0xff800000", "0xff800000", "0x7fffffff", "0x7f800000", "0x7fffffff"]
    assert lg[5] == 0 and lg[6] == 0xC2FBFFFF  # lg2(2^-126) is one ulp above -126 on the device
    assert val(sfu.lg2_approx_f32(f32([2.0**-130])))[0] == pytest.approx(-130, abs=1e-4)
    r = sfu.mufu_rcp(f32([0.0, -0.0, np.inf, -np.inf, 2.0**127]))
    assert [hex(v) for v in r] == ["0x7f800000", "0xff800000", "0x0", "0x80000000", "0x0"]
    assert val(sfu.rcp_approx_f32(f32([2.0**127])))[0] == 2.0**-127  # the wrapper keeps the subnormal


def test_ieee_division_is_correctly_rounded():
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    got = sfu.div_rn_f32(a, b)
    pytest.importorskip("gmpy2", reason="MPFR references need gmpy2 (the test extra)")
    import mpref

    for i in range(0, 20000, 97):
        x, y = val(a[i:i + 1])[0], val(b[i:i + 1])[0]
        if np.isnan(x) or np.isnan(y) or np.isinf(x) or np.isinf(y) or y == 0 or x == 0:
            continue
        with mpref.gmpy2.context(mpref.gmpy2.context(precision=400)):
            q = mpref.gmpy2.mpfr(x) / mpref.gmpy2.mpfr(y)
        assert got[i] == mpref.round_to(q, F32, "rn"), (hex(a[i]), hex(b[i]))


def test_16_bit_forms_apply_per_half():
    h = np.array([0x3C00, 0xBC00], np.uint16)  # f16 1.0 and -1.0
    packed = np.array([(0x3C00 << 16) | 0xBC00], np.uint32)
    out = sfu.ex2_approx_f16x2(packed)[0]
    assert (out >> 16) == sfu.mufu_ex2_f16(h[:1])[0] == 0x4000 and (out & 0xFFFF) == sfu.mufu_ex2_f16(h[1:])[0]


def test_cuda_math_close_to_libm():
    x = f32(np.linspace(-9, 9, 5001))
    for fast in (False, True):
        assert np.allclose(val(cuda_math.expf(x, fast_math=fast)), np.exp(val(x)), rtol=2e-6)
        assert np.allclose(val(cuda_math.tanhf(x, fast_math=fast)), np.tanh(val(x)), rtol=2e-3, atol=1e-6)
        pos = f32(np.linspace(0.01, 100, 5001))
        assert np.allclose(val(cuda_math.logf(pos, fast_math=fast)), np.log(val(pos)), rtol=1e-5, atol=1e-6)
    # the non-fast expf range-reduces; its error is far below MUFU's
    assert np.max(np.abs(val(cuda_math.expf(x)) / np.exp(val(x)) - 1)) < 3e-7


def test_table_codec_round_trips():
    t = {"a": np.array([5, 7, 2**31, 3], np.uint32), "b": np.arange(300, dtype=np.uint16)}
    z = sfu.table_arrays(t)
    for name, values in t.items():
        d = sfu.decode_table(z[f"{name}:{values.dtype.name}:first"], z[f"{name}:{values.dtype.name}:steps"], values.dtype)
        assert np.array_equal(d, values)


def test_errors():
    with pytest.raises(ArgumentError, match=r"^x=dtype\('float32'\)"):
        sfu.mufu_ex2(np.zeros(3, np.float32))
    with pytest.raises(ArgumentError, match=r"^b=\(2,\)"):
        sfu.div_rn_f32(np.zeros(3, np.uint32), np.zeros(2, np.uint32))
    with pytest.raises(ArgumentError, match="packed f16x2"):
        sfu.ex2_approx_f16x2(np.zeros(2, np.uint16))


def test_missing_tables_are_reported(monkeypatch):
    monkeypatch.setattr(sfu, "TABLE_FILE", "data/no_such_tables.npz")
    sfu.tables.cache_clear()
    try:
        with pytest.raises(TraceError, match="no_such_tables.npz is missing"):
            sfu.tables()
    finally:
        monkeypatch.undo()
        sfu.tables.cache_clear()


def test_factored_ex2_reproduces_the_recorded_tables_exactly():
    """The kernel rebuilds P and N from small factors plus 2-bit corrections: check every entry."""
    t = sfu.tables()
    f = np.arange(1 << 23, dtype=np.uint32)
    assert np.array_equal(sfu.mufu_ex2(f | np.uint32(127 << 23)), t["ex2_pos"])
    assert np.array_equal(sfu.mufu_ex2(f | np.uint32((127 << 23) | 0x80000000)), t["ex2_neg"])
