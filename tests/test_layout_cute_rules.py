"""Three rules of CuTe's layout algebra (NVIDIA/cutlass@7107b05535f8) on which the result's print depends.

1. composition_impl (include/cute/layout.hpp) asserts the stride divisibility condition only when the
   shape and the stride are both static; a B mode of size 1 maps its one coordinate to 0, so whatever its
   stride CuTe's result is A o B (``(3,4):(1,3) o 1:7 = (1,1):(7,9)``).
2. An integer tile n of a divide or product is ``make_layout(n)``, whose compact stride is ``_0`` for a
   static ``_1``: the tile ``_1`` is ``_1:_0``. Composition with an integer keeps stride ``_1``.
3. ``upcast<N>`` of ``Sw o off o L`` composes the upcast parts with the upcast offset, an unsigned
   constant; CuTe reduces ``Sw<0,M,S> o Int<0> o L`` to L, not ``Sw<0,M,S> o _0u o L``, so a swizzle that
   shrinks to no bits stays in the print, and in what is derived from it.

Every expected string below is CuTe C++'s print of the same expression.
"""

import numpy as np
import pytest

from flashsim.layout import (
    S, ComposedLayout, Layout, LayoutError, Swizzle, coalesce, composition, downcast, evaluate, get,
    logical_divide, logical_product, upcast, zipped_divide,
)
from flashsim.layout.expr import cute_str, evaluate_expression


def _law(A, B, R):
    """R(i) == A(B(i)) for every i in B's domain."""
    assert np.array_equal(evaluate(R), evaluate(A, evaluate(B)))


# -- 1. size-1 modes of B in composition ---------------------------------------------------------------

SIZE1 = [
    # (A, B, CuTe's print of composition(A, B))
    (Layout((3, 4), (1, 3)), Layout(1, 7), "(1,1):(7,9)"),
    (Layout((4, S(2)), (1, 4)), Layout(1, S(7)), "(1,1):(7,8)"),
    (Layout((3, 4), (1, 3)), Layout((2, 1), (1, 7)), "((2,1),(1,1)):((1,3),(7,9))"),
    (Layout((3, 4), (1, 3)), Layout(S(1), 7), "_1:9"),
    (Layout((4, 2), (1, 4)), Layout((2, (3, 1)), (3, (S(1), 6))), "((2,1),((3,1),(1,1))):((3,4),((1,4),(6,8)))"),
]


@pytest.mark.parametrize("A,B,printed", SIZE1, ids=[c[2] for c in SIZE1])
def test_size1_mode_of_B_composes_as_in_cute(A, B, printed):
    R = composition(A, B)
    assert str(R) == printed
    _law(A, B, R)


def test_logical_divide_whose_complement_has_size1_modes():
    A = Layout((4, 2), (1, 4))
    R = logical_divide(A, Layout(2, 3))
    assert str(R) == "((2,1),((3,1),(1,1))):((3,4),((1,4),(6,8)))"
    assert str(zipped_divide(A, Layout(2, 3))) == str(R)
    # A o (2:3, complement): the tile holds A(0), A(3); three tiles fit in A's 8 elements
    assert int(R.size()) == 6
    assert [int(R(i)) for i in range(6)] == [0, 3, 1, 4, 2, 5]
    assert (int(R(1)), int(R(5))) == (3, 5)


def test_logical_product_with_a_size1_tiler_mode():
    R = logical_product(Layout(S(4), 3), Layout((1, S(2)), (S(8), 1)))
    assert str(R) == "(_4,((1,1),(2,1))):(3,((_8,36),(1,12)))"


def test_dynamic_size1_mode_never_trips_the_stride_check():
    for shape in [(3, 4), (5, 7), (2, 3, 5), (6, 10)]:
        A = Layout(shape)  # dynamic, compact
        for d in range(1, 40):
            R = composition(A, Layout(1, d))
            assert int(R.size()) == 1 and int(R(0)) == 0


def test_static_size1_mode_still_fails_the_static_check():
    # CuTe: static_assert "Stride Divisibility Condition" (both _3 and _7 static)
    with pytest.raises(LayoutError, match=r"stride divisibility condition fails: stride _7 vs shape _3"):
        composition(Layout((S(3), S(4)), (S(1), S(5))), Layout(S(1), S(7)))


def test_dynamic_mode_of_size_2_is_still_refused():
    # CuTe returns (1,2):(7,9), whose element 1 is 9, but A(B(1)) = A(7) = 7
    with pytest.raises(LayoutError, match=r"stride divisibility condition fails: stride 7 vs shape 3"):
        composition(Layout((3, 4), (1, 3)), Layout(2, 7))


def test_valid_dynamic_composition_unchanged():
    A = Layout((3, 4), (1, 3))
    R = composition(A, Layout(2, 3))
    assert str(R) == "(1,2):(3,3)"
    _law(A, Layout(2, 3), R)
    assert str(logical_divide(Layout((4, 2), (1, 4)), Layout(2, 1))) == "((2,1),((1,1),(2,2))):((1,4),((1,4),(2,4)))"


# -- 2. integer tiles are make_layout(n) -----------------------------------------------------------------

INT_TILES = [
    ("zipped_divide(Layout<Shape<_6,_6,_6>,Stride<_1,_6,Int<36>>>{}, make_tile(_3{},_1{}))",
     "((_3,_1),(_2,_6,_6)):((_1,_0),(_3,_6,_36))"),
    ("logical_divide(Layout<Shape<_8,_4>>{}, make_tile(_1{},_2{}))", "((_1,_8),(_2,_2)):((_0,_1),(_8,_16))"),
    ("tiled_divide(Layout<Shape<_8,_4>>{}, make_tile(_1{},_2{}))", "((_1,_2),_8,_2):((_0,_8),_1,_16)"),
    ("flat_divide(Layout<Shape<_8,_4>>{}, make_tile(_1{},_2{}))", "(_1,_2,_8,_2):(_0,_8,_1,_16)"),
    ("logical_divide(Layout<_8>{}, _1{})", "(_1,_8):(_0,_1)"),
    ("logical_product(Layout<Shape<_2,_2>>{}, make_tile(_3{},_1{}))", "((_2,_3),(_2,_1)):((_1,_2),(_2,_0))"),
    ("zipped_product(Layout<Shape<_2,_2>>{}, make_tile(_3{},_1{}))", "((_2,_2),(_3,_1)):((_1,_2),(_2,_0))"),
    # unchanged: other integers, a run-time 1 (stride _1), composition with an integer (stride _1)
    ("zipped_divide(Layout<Shape<_6,_6,_6>,Stride<_1,_6,Int<36>>>{}, make_tile(_3{},_2{}))",
     "((_3,_2),(_2,_3,_6)):((_1,_6),(_3,_12,_36))"),
    ("zipped_divide(make_layout(make_shape(6,6)), make_tile(1,_2{}))", "((1,_2),(6,3)):((_1,6),(1,12))"),
    ("composition(Layout<Shape<_6,_6>>{}, make_tile(_1{},_2{}))", "(_1,_2):(_1,_6)"),
    ("logical_divide(Layout<_8>{}, _2{})", "(_2,_4):(_1,_2)"),
]


@pytest.mark.parametrize("expr,printed", INT_TILES, ids=[c[1] for c in INT_TILES])
def test_integer_tile_is_make_layout(expr, printed):
    assert cute_str(evaluate_expression(expr)) == printed


def test_integer_tile_1_keeps_the_function():
    A = Layout((S(6), S(6), S(6)), (S(1), S(6), S(36)))
    R = zipped_divide(A, (S(3), S(1)))
    assert str(get(R, 0)) == "(_3,_1):(_1,_0)"
    # every element of A once; coordinate (2,7) is ((2,0),(1,3,0)): 2*1 + 1*3 + 3*6 = 23
    assert sorted(evaluate(R).tolist()) == list(range(216))
    assert int(R((2, 0), (1, 3, 0))) == 23 and int(R(2, 7)) == 23


# -- 3. upcast of a swizzle that shrinks to no bits ------------------------------------------------------

def _sw(b, m, s, shape, stride):
    return composition(Swizzle(b, m, s), Layout(shape, stride))


SW_A = _sw(1, 0, 3, (S(4), S(16)), (S(16), S(1)))
SW_B = _sw(2, 1, 3, (S(8), S(16)), (S(16), S(1)))


def test_upcast_keeps_a_zero_bit_swizzle():
    u = upcast(8, SW_A)
    assert str(u) == "Sw<0,0,3> o _0 o (_4,_2):(_2,_1)"
    assert str(upcast(16, SW_B)) == "Sw<0,0,3> o _0 o (_8,_1):(_1,_1)"
    assert str(upcast(4, _sw(1, 0, 1, (S(16), S(16)), (S(1), S(16))))) == "Sw<0,0,1> o _0 o (_4,_16):(_1,_4)"
    # Sw<0,..> moves no bit: the same function as the plain layout
    assert np.array_equal(evaluate(u), evaluate(u.layout_b))
    assert int(u(3, 1)) == 7


def test_what_is_derived_from_it_keeps_the_swizzle():
    u = upcast(8, SW_A)
    assert str(coalesce(u)) == "Sw<0,0,3> o _0 o (_4,_2):(_2,_1)"
    assert str(get(u, 0)) == "Sw<0,0,3> o _0 o _4:_2"
    assert str(downcast(8, u)) == "Sw<0,3,3> o _0 o (_4,_16):(_16,_1)"
    assert str(zipped_divide(u, (S(2),))) == "Sw<0,0,3> o _0 o ((_2),(_2,_2)):((_2),(_4,_1))"
    assert str(composition(u, (S(2), S(2)))) == "Sw<0,0,3> o _0 o (_2,_2):(_2,_1)"


def test_int0_offset_still_reduces_a_zero_bit_swizzle():
    L0 = Layout((S(4), S(2)), (S(2), S(1)))
    assert str(composition(Swizzle(0, 0, 3), L0)) == "(_4,_2):(_2,_1)"
    assert str(composition(Swizzle(0, 0, 3), S(0), L0)) == "(_4,_2):(_2,_1)"
    # built by hand with Int<0>: printed as is, reduced by what is derived from it
    c = ComposedLayout(Swizzle(0, 0, 3), S(0), L0)
    assert str(c) == "Sw<0,0,3> o _0 o (_4,_2):(_2,_1)"
    assert (str(get(c, 0)), str(coalesce(c))) == ("_4:_2", "(_4,_2):(_2,_1)")


def test_upcast_with_swizzle_bits_left_unchanged():
    u = upcast(2, SW_B)
    assert str(u) == "Sw<2,0,3> o _0 o (_8,_8):(_8,_1)"
    assert int(u(5, 3)) == 42
    assert cute_str(evaluate_expression(
        "upcast<8>(composition(Swizzle<1,0,3>{}, Layout<Shape<_4,_16>,Stride<_16,_1>>{}))(_,0)")) == "(_4):(_2)"
