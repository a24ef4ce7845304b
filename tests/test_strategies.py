"""The public hypothesis strategies draw what they promise, and drive a law of the mma model."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from flashsim.numerics import mma_m16n8k16
from flashsim.numerics.formats import BF16, F16, F32, FINITE, decode, round_exact
from flashsim.strategies import bit_arrays, float_bits, mma_tiles, shapes, special_values


@given(st.data())
def test_float_bits_respect_the_exponent_range(data):
    for fmt in (F16, BF16, F32):
        b = data.draw(float_bits(fmt, exp_range=(-3, 3), special_weight=0.0, subnormal_weight=0.0))
        sign, sig, exp, cls = decode(np.array([b], fmt.dtype), fmt)
        assert cls[0] == FINITE
        assert -3 <= int(exp[0]) + fmt.mbits <= 3


def test_specials_cover_zeros_infs_nans_subnormals():
    for fmt in (F16, BF16, F32):
        vals = np.array(special_values(fmt), fmt.dtype)
        cls = decode(vals, fmt)[3]
        assert set(cls.tolist()) == {0, 1, 2, 3}
        assert fmt.sign_bit in vals.tolist() and 1 in vals.tolist()


@given(shapes())
def test_shapes_are_small_batches(shape):
    assert len(shape) <= 2 and all(1 <= s <= 4 for s in shape)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.large_base_example, HealthCheck.too_slow])
@given(mma_tiles("f16", "f32", spread=1, specials=False))
def test_narrow_spread_needs_no_truncation(tiles):
    """Law: with every A/B exponent in two adjacent binades and C = 0, no term loses a bit to the
    25-bit alignment, so D is the exact float64 dot product rounded once toward zero."""
    a, b, _ = tiles
    c = np.zeros((a.shape[0], 16, 8), np.uint32)
    d = mma_m16n8k16(a, b, c, atype="f16", ctype="f32")
    exact = a.view(np.float16).astype(np.float64) @ b.view(np.float16).astype(np.float64)  # exact here
    sign = (exact < 0).astype(np.int64)
    m, e = np.frexp(np.abs(exact))
    want = round_exact(sign, (m * 2.0**53).astype(np.int64), e - 53, F32, "rz")
    want = np.where(exact == 0, 0, want)  # an exact zero sum is +0 on the device
    np.testing.assert_array_equal(d, want)


@given(bit_arrays(BF16, (3, 5)))
def test_bit_arrays_have_the_format_dtype(x):
    assert x.dtype == np.uint16 and x.shape == (3, 5)
