"""CuTe integers and IntTuples: static ``_8`` vs dynamic ``8`` integers, the tuple algorithms, CuTe printing.

- :mod:`~flashsim.layout.inttuple.integers`: static and dynamic integers, ``_``, ScaledBasis and
  ArithmeticTuple, and CuTe's printing of them (``fmt``);
- :mod:`~flashsim.layout.inttuple.tuples`: IntTuples: the check of user input and the tuple algorithms;
- :mod:`~flashsim.layout.inttuple.coords`: strides and coordinates (compact and basis strides, crd2idx, idx2crd).
"""

from flashsim.layout.inttuple.integers import (
    ArithmeticTuple, C, E, ScaledBasis, Shown, Underscore, X, _, as_arithmetic_tuple, cabs, cmax2, cmin2, div,
    fmt, gcd2, is_constant, is_int, is_static, is_tuple, is_underscore, lcm2, mod, signum,
)
from flashsim.layout.inttuple.tuples import (
    all_underscore, append, as_inttuple, ceil_div, compatible, congruent, depth, dice, elem_scale, evenly_divides,
    filter_zeros, flatten, flatten_to_tuple, get, has_underscore, inner_product, prepend, product, product_each,
    product_like, rank, remove, repeat, repeat_like, replace, replace_back, replace_front, shape_div, size_of,
    slice_, take, tgcd, tmin, tsum, unflatten, unwrap, weakly_congruent, wrap, zip2_by, zip_tuple,
)
from flashsim.layout.inttuple.coords import (
    basis_get, basis_value, compact_col_major, compact_major, compact_order, compact_row_major, crd2crd, crd2idx,
    crd2idx_shape, idx2crd, idx2crd_stride, make_basis_like, same, shape_coalesce, static_true_eq,
)

__all__ = [
    "ArithmeticTuple", "C", "E", "ScaledBasis", "Shown", "Underscore", "X", "_", "as_arithmetic_tuple", "cabs",
    "cmax2", "cmin2", "div", "fmt", "gcd2", "is_constant", "is_int", "is_static", "is_tuple", "is_underscore",
    "lcm2", "mod", "signum", "all_underscore", "append", "as_inttuple", "ceil_div", "compatible", "congruent",
    "depth", "dice", "elem_scale", "evenly_divides", "filter_zeros", "flatten", "flatten_to_tuple", "get",
    "has_underscore", "inner_product", "prepend", "product", "product_each", "product_like", "rank", "remove",
    "repeat", "repeat_like", "replace", "replace_back", "replace_front", "shape_div", "size_of", "slice_", "take",
    "tgcd", "tmin", "tsum", "unflatten", "unwrap", "weakly_congruent", "wrap", "zip2_by", "zip_tuple",
    "basis_get", "basis_value", "compact_col_major", "compact_major", "compact_order", "compact_row_major",
    "crd2crd", "crd2idx", "crd2idx_shape", "idx2crd", "idx2crd_stride", "make_basis_like", "same",
    "shape_coalesce", "static_true_eq",
]
