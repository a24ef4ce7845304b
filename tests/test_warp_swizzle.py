"""CuTe's Swizzle<B,M,S> and seed 001's swizzle<B,M,S> helper: named apart, their relation over whole domains."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.swizzle import SwizzleSpec, byte_swizzle, cute_swizzle, parse_swizzle, seed_swizzle

X = np.arange(1 << 14)


@pytest.mark.parametrize("B", range(0, 4))
@pytest.mark.parametrize("M", range(0, 5))
@pytest.mark.parametrize("S", range(0, 6))
def test_same_function_on_cutes_domain_and_both_bijective(B, M, S):
    if S < B:
        with pytest.raises(ArgumentError, match="needs \\|S\\| >= B"):
            cute_swizzle(X, B, M, S)
        return
    c, s = cute_swizzle(X, B, M, S), seed_swizzle(X, B, M, S)
    np.testing.assert_array_equal(c, s)
    assert np.unique(c).size == X.size  # a permutation of [0, 2^14)
    np.testing.assert_array_equal(cute_swizzle(c, B, M, S), X)  # an involution


@pytest.mark.parametrize(("B", "M", "S"), [(2, 3, 1), (3, 3, 2), (3, 0, 1)])
def test_seed_helper_differs_where_fields_overlap(B, M, S):
    s = seed_swizzle(X, B, M, S)
    assert np.unique(s).size == X.size  # still a bijection (x -> x ^ f(higher bits) with overlap)...
    assert not np.array_equal(seed_swizzle(s, B, M, S), X) or B <= S  # ...but no longer an involution
    with pytest.raises(ArgumentError):
        cute_swizzle(X, B, M, S)


def test_negative_shift_is_cute_only():
    x = np.arange(1 << 10)
    y = cute_swizzle(x, 2, 4, -3)  # zzz above yyy: bits 4,5 xor into bits 7,8
    np.testing.assert_array_equal(y, x ^ ((x & 0b110000) << 3))
    with pytest.raises(ArgumentError, match="S=-3"):
        seed_swizzle(x, 2, 4, -3)


def test_seed_parameters_on_halves_equal_cute_on_bytes():
    # seed 001: swizzle<3,3,4> on f16 element indices of a 16x128 tile == CuTe Sw<3,4,4> on byte offsets
    halves = np.arange(16 * 128)
    np.testing.assert_array_equal(seed_swizzle(halves, 3, 3, 4) * 2, byte_swizzle(halves * 2, 3, 3, 4, 2))
    np.testing.assert_array_equal(byte_swizzle(halves * 2, 3, 3, 4, 2), cute_swizzle(halves * 2, 3, 4, 4))
    # rows of 8 halves (16 bytes) stay whole: M = 3 keeps the low 3 bits
    np.testing.assert_array_equal(seed_swizzle(halves, 3, 3, 4) % 8, halves % 8)


def test_seed_examples():
    assert seed_swizzle(128 + 8, 3, 3, 4) == 128  # row 1, chunk 1 -> chunk 0 of row 1 (xor 1)
    assert seed_swizzle(64, 1, 3, 3) == 72  # swizzle<1,3,3>: 16x16 tile, row 4 chunk 0 -> chunk 1
    assert cute_swizzle(64 * 5 + 8 * 2, 3, 3, 3) == 64 * 5 + 8 * (2 ^ 5)
    with pytest.raises(ArgumentError, match="below 2\\^32"):
        seed_swizzle(1 << 33, 3, 3, 4)


def test_parse_and_bad_input():
    assert parse_swizzle("Sw<3,3,3>") == SwizzleSpec("cute", 3, 3, 3)
    assert parse_swizzle("swizzle<3, 3, 4>") == SwizzleSpec("seed", 3, 3, 4)
    assert parse_swizzle("seed:1,3,3") == SwizzleSpec("seed", 1, 3, 3)
    assert str(parse_swizzle("cute:3,4,3")) == "Sw<3,4,3>"
    with pytest.raises(ArgumentError, match="swizzle='Sw<3,3>'"):
        parse_swizzle("Sw<3,3>")
    with pytest.raises(ArgumentError, match="x="):
        cute_swizzle(np.array([1.5]), 3, 3, 3)
    with pytest.raises(ArgumentError, match="offsets must be >= 0"):
        cute_swizzle(-1, 3, 3, 3)
    with pytest.raises(ArgumentError, match="B=True|B, M"):
        cute_swizzle(1, True, 3, 3)
