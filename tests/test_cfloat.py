"""flashsim.numerics.cfloat: C float operators as the instructions nvcc emits, checked against fp32 / sfu /
cuda_math called directly, on bit patterns rich in specials (NaN payloads, infinities, subnormals, -0)."""

import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.numerics import cuda_math, fp32, sfu
from flashsim.numerics.cfloat import (FAST_MATH, FTZ, Float, FloatMode, __expf, __logf, exp2f, expf, fmaxf,
                                      fmul_rn, tanh_approx, where)

SIGN = np.uint32(0x80000000)
MODES = [FAST_MATH, FTZ, FloatMode(ftz=False)]


def _bits(rng, shape):
    """Random f32 patterns: a third arbitrary, a third near 1 (cancellation), a third specials and subnormals."""
    x = rng.integers(0, 1 << 32, shape, dtype=np.uint64).astype(np.uint32)
    near = (np.float32(1) + rng.standard_normal(shape).astype(np.float32) * np.float32(1e-3)).view(np.uint32)
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFA00000, 1, 0x807FFFFF, 0x00800000,
                        0x3F800000, 0x7F7FFFFF], np.uint32)
    pick = rng.integers(0, 3, shape)
    return np.where(pick == 0, x, np.where(pick == 1, near, special[rng.integers(0, special.size, shape)]))


@pytest.fixture
def abc():
    rng = np.random.default_rng(7)
    return [_bits(rng, (64, 33)) for _ in range(3)]


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_operators_are_the_instructions(mode, abc):
    a, b, c = abc
    z = mode.ftz
    A, B, C_ = mode(a), mode(b), mode(c)
    np.testing.assert_array_equal((A + B).bits, fp32.add(a, b, ftz=z))
    np.testing.assert_array_equal((A - B).bits, fp32.add(a, b ^ SIGN, ftz=z))
    np.testing.assert_array_equal((A * B).bits, fp32.mul(a, b, ftz=z))                 # rounded when read
    np.testing.assert_array_equal((A * B + C_).bits, fp32.fma(a, b, c, ftz=z))         # contracted
    np.testing.assert_array_equal((C_ + A * B).bits, fp32.fma(a, b, c, ftz=z))
    np.testing.assert_array_equal((A * B - C_).bits, fp32.fma(a, b, c ^ SIGN, ftz=z))
    np.testing.assert_array_equal((C_ - A * B).bits, fp32.fma(a ^ SIGN, b, c, ftz=z))
    np.testing.assert_array_equal((-A).bits, a ^ SIGN)
    np.testing.assert_array_equal(fmaxf(A, B).bits, fp32.fmax(a, b, ftz=z))
    np.testing.assert_array_equal((fmul_rn(A, B) + C_).bits, fp32.add(fp32.mul(a, b, ftz=z), c, ftz=z))


def test_a_product_used_before_the_add_stays_rounded(abc):
    a, b, c = abc
    p = FTZ(a) * b
    m = fmaxf(p, c)                                   # the product's value is read: FMUL
    np.testing.assert_array_equal(m.bits, fp32.fmax(fp32.mul(a, b, ftz=True), c, ftz=True))
    np.testing.assert_array_equal((p + c).bits, fp32.add(fp32.mul(a, b, ftz=True), c, ftz=True))


def test_two_products_contract_the_left_one(abc):
    a, b, c = abc
    d = np.roll(a, 1)
    got = (FTZ(a) * b + FTZ(c) * d).bits
    np.testing.assert_array_equal(got, fp32.fma(a, b, fp32.mul(c, d, ftz=True), ftz=True))


def test_operands_broadcast_and_constants_round_to_f32(abc):
    a, b, _ = abc
    row = b[:, :1]
    np.testing.assert_array_equal((FTZ(a) * row).bits, fp32.mul(a, np.repeat(row, a.shape[1], 1), ftz=True))
    third = np.float32(1 / 3).view(np.uint32)
    np.testing.assert_array_equal((FTZ(a) + 1 / 3).bits, fp32.add(a, np.full_like(a, third), ftz=True))
    np.testing.assert_array_equal((FTZ(a) * third).bits, fp32.mul(a, np.full_like(a, third), ftz=True))  # uint32: bits
    np.testing.assert_array_equal(FTZ.full((2, 3), -np.inf).bits, np.full((2, 3), 0xFF800000, np.uint32))


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_library_calls_follow_the_mode(mode, abc):
    a = abc[0]
    kw = dict(fast_math=mode.fast_math, ftz=mode.ftz)
    x = mode(a)
    np.testing.assert_array_equal(exp2f(x).bits, cuda_math.exp2f(a, **kw))
    np.testing.assert_array_equal(__expf(x).bits, cuda_math.__expf(a, **kw))
    np.testing.assert_array_equal(expf(x).bits, cuda_math.expf(a, **kw))
    np.testing.assert_array_equal(__logf(x).bits, cuda_math.__logf(a, **kw))
    np.testing.assert_array_equal((1.0 / x).bits, cuda_math.reciprocal(a, **kw))
    np.testing.assert_array_equal(tanh_approx(x).bits, sfu.tanh_approx_f32(a))


def test_fa2_softmax_line_is_ffma_then_mufu_ex2(abc):
    s, _, m = abc
    scale = np.float32(0.127)
    got = exp2f(FAST_MATH(s) * scale - FAST_MATH(m)[:, :1]).bits
    want = sfu.mufu_ex2(fp32.fma(s, np.full_like(s, scale.view(np.uint32)),
                                 np.repeat(m[:, :1] ^ SIGN, s.shape[1], 1), ftz=True))
    np.testing.assert_array_equal(got, want)


def test_comparisons_are_fsetp_with_the_modes_ftz():
    x = np.array([1, 0x80000001, 0x7FC00000, 0xFF800000, 0x3F800000], np.uint32)  # subnormals, NaN, -inf, 1
    y = np.zeros(5, np.uint32)
    assert (FTZ(x) == y).tolist() == [True, True, False, False, False]             # subnormals read as zeros
    assert (FloatMode(ftz=False)(x) == y).tolist() == [False] * 5
    assert (FTZ(x) != FTZ(x)).tolist() == [False, False, True, False, False]        # only NaN
    assert (FTZ(x) > 0.5).tolist() == [False, False, False, False, True]
    assert (FTZ(x) == -np.inf).tolist() == [False, False, False, True, False]
    np.testing.assert_array_equal(where(FTZ(x) > 0.5, FTZ(x), 2.0).bits,
                                  np.where(x == 0x3F800000, x, np.float32(2).view(np.uint32)))


def test_misuse_is_refused():
    x = FTZ(np.zeros(3, np.uint32))
    with pytest.raises(ArgumentError, match="different compile modes"):
        fmaxf(x, FAST_MATH(np.zeros(3, np.uint32)))
    with pytest.raises(ArgumentError, match="uint32"):
        x + np.zeros(3, np.float32)
    with pytest.raises(ArgumentError, match="bool"):
        x + True
    with pytest.raises(NotImplementedError, match="1.0f / x"):
        x / x
    with pytest.raises(NotImplementedError, match="1.0f / x"):
        2.0 / x
    with pytest.raises(TypeError, match="an array"):
        bool(x)
    with pytest.raises(ArgumentError, match="expected a Float"):
        exp2f(np.zeros(3, np.uint32))
    with pytest.raises(ArgumentError, match="ftz"):
        FloatMode(ftz=1)
    assert isinstance(x[1:], Float) and x[1:].shape == (2,)
