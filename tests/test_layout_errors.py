"""Bad input gives a clear error that names the operands: shapes, strides, undefined algebra, expressions."""

import pytest

from flashsim.errors import ArgumentError, FlashsimError
from flashsim.layout import (
    S, Layout, LayoutError, Swizzle, complement, composition, evaluate, left_inverse, make_layout, print_layout,
    tile_to_shape,
)
from flashsim.layout.expr import ExpressionError, evaluate_expression


def test_incompatible_shape_and_stride():
    with pytest.raises(ArgumentError, match=r"stride=\(1,2,3\): is not congruent with the shape \(4,8\)"):
        Layout((4, 8), (1, 2, 3))
    with pytest.raises(ArgumentError, match=r"stride=\(1,\(2,3\)\): is not congruent"):
        make_layout((4, 8), (1, (2, 3)))


@pytest.mark.parametrize("bad", [1.5, "4", None.__class__, True])
def test_non_integer_stride(bad):
    with pytest.raises(ArgumentError, match=r"stride=.*expected an integer"):
        Layout((4, 8), (1, bad))


def test_negative_shape():
    with pytest.raises(ArgumentError, match=r"shape=\(4,-2\): shapes must be non-negative"):
        Layout((4, -2))


def test_composition_stride_not_dividing_is_undefined():
    A, B = Layout((S(3), S(4)), (S(1), S(5))), Layout(S(4), S(2))
    with pytest.raises(LayoutError, match=r"composition\(A=\(_3,_4\):\(_1,_5\), B=_4:_2\) is not defined: "
                                          r"stride divisibility condition fails"):
        composition(A, B)


def test_composition_shape_not_dividing_is_undefined():
    with pytest.raises(LayoutError, match=r"composition\(A=\(_4,_4\):\(_1,_8\), B=_6:_1\) is not defined: "
                                          r"shape divisibility condition fails"):
        composition(Layout((S(4), S(4)), (S(1), S(8))), Layout(S(6), S(1)))


def test_composition_with_too_many_tiler_modes():
    with pytest.raises(ArgumentError, match=r"B=<_2, _2, _2>: the tiler has more modes than A = \(_4,_4\)"):
        composition(Layout((S(4), S(4))), (S(2), S(2), S(2)))


def test_complement_of_a_non_injective_layout():
    with pytest.raises(LayoutError, match=r"complement\(\(_2,_2\):\(_1,_1\), 8\) is not defined: .*not injective"):
        complement(Layout((S(2), S(2)), (S(1), S(1))), 8)


def test_left_inverse_needs_static_strides():
    with pytest.raises(LayoutError, match=r"left_inverse\(\(4,8\):\(_1,4\)\) requires static strides"):
        left_inverse(Layout((4, 8)))


def test_tile_to_shape_that_does_not_divide():
    with pytest.raises(LayoutError, match=r"block shape \(_8,_64\) does not divide the target shape"):
        tile_to_shape(Layout((S(8), S(64)), (S(64), S(1))), (S(100), S(128)))


def test_swizzle_parameters():
    with pytest.raises(ArgumentError, match=r"Swizzle<B,M,S>=\(3, 3, 2\): \|S\| must be >= B"):
        Swizzle(3, 3, 2)
    with pytest.raises(ArgumentError, match=r"B=1.0: Swizzle parameters must be integers"):
        Swizzle(1.0, 3, 3)


def test_slicing_with_a_coordinate_of_the_wrong_rank():
    from flashsim.layout import _

    with pytest.raises(ArgumentError, match=r"coord=\(_,_,_\): rank does not match"):
        Layout((4, 8))(_, _, _)


def test_print_layout_needs_rank_2():
    with pytest.raises(ArgumentError, match=r"layout=.*print_layout needs a rank-2 layout"):
        print_layout(Layout((2, 2, 2)))


def test_evaluate_needs_integer_coordinates():
    import numpy as np

    with pytest.raises(ArgumentError, match=r"idx=dtype\('float64'\): expected integer coordinates"):
        evaluate(Layout((4, 8)), np.zeros(3))


@pytest.mark.parametrize("expr,msg", [
    ("Layout((_8,_8),(_8,_1)", r"malformed expression \('\(' was never closed"),
    ("Layot((_8,_8))", r"unknown name 'Layot' at column 1"),
    ("__import__('os')", r"unknown name '__import__'"),
    ("Layout((_8,_8)).__class__", r"attribute '__class__' is not allowed"),
    ("'abc'", r"only integer literals are allowed, not 'abc'"),
    ("[x for x in (1,2)]", r"ListComp is not allowed"),
    ("lambda: 0", r"Lambda is not allowed"),
    ("1 << 100", r"shift by 100 is outside 0..63"),
    ("size()", r"wrong arguments"),
    ("Layout((_8,_8)) + 1", r"arithmetic applies to integers only"),
    ("", r"expected a layout expression"),
])
def test_malformed_expression_names_it(expr, msg):
    with pytest.raises(ExpressionError, match=msg) as ei:
        evaluate_expression(expr)
    assert f"EXPR={expr!r}" in str(ei.value)
    assert isinstance(ei.value, FlashsimError)


def test_errors_inside_an_expression_keep_their_operands():
    with pytest.raises(LayoutError, match=r"composition\(A=\(_4,_4\):\(_1,_8\), B=_6:_1\)"):
        evaluate_expression("composition(Layout<Shape<_4,_4>,Stride<_1,_8>>{}, Layout<_6,_1>{})")


def test_composition_whose_modes_carry_is_undefined():
    # each mode of B alone is a sub-layout of A's first mode (size 3), but 1 + 2 carries into A's second mode
    with pytest.raises(LayoutError, match=r"composition\(A=\(_3,_4\):\(_1,_5\), B=\(_2,_2\):\(_1,_2\)\) is not "
                                          r"defined: the modes of B carry into one another in A"):
        composition(Layout((S(3), S(4)), (S(1), S(5))), Layout((S(2), S(2)), (S(1), S(2))))
