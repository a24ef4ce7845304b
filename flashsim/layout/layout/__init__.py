"""CuTe ``Layout`` (shape:stride) and its algebra: coalesce, composition, complement, inverses, divides, products.

Each operation follows the definition in CuTe's cute/layout.hpp step for step, so that its result has not
only the same function but the same shape, the same modes and the same static/dynamic integers as CuTe's,
and therefore prints identically. Preconditions that CuTe checks with ``static_assert`` on static values
(stride and shape divisibility in composition, injectivity in complement, ...) are checked here on the
values, static or not, and raise ``ArgumentError`` naming the operands instead of returning a layout that
is not the composition (a run-time B mode of size 1, which cannot go wrong, is let through as CuTe does).

- :mod:`~flashsim.layout.layout.core`: the ``Layout`` type and its construction (``make_layout``, ...);
- :mod:`~flashsim.layout.layout.modes`: queries and mode manipulation, coalesce and filter;
- :mod:`~flashsim.layout.layout.composition`: composition;
- :mod:`~flashsim.layout.layout.complement`: complement and inverses;
- :mod:`~flashsim.layout.layout.tiling`: divides and products, ``tile_to_shape``;
- :mod:`~flashsim.layout.layout.recast`: upcast, downcast, recast_layout;
- :mod:`~flashsim.layout.layout.printing`: ``print_layout``.
"""

from flashsim.layout.layout.core import (
    GenColMajor, GenRowMajor, Layout, LayoutError, LayoutLeft, LayoutRight, is_layout, make_coord,
    make_fragment_like, make_identity_layout, make_layout, make_layout_like, make_ordered_layout, make_shape,
    make_step, make_stride, make_tile,
)
from flashsim.layout.layout.modes import (
    append, coalesce, coprofile, coshape, cosize, crd2idx, depth, dice, filter_layout, filter_zeros, flatten, get,
    group, prepend, rank, replace, select, shape, size, slice_, slice_and_offset, stride, take, transform_layout,
    unflatten, zip_layout,
)
from flashsim.layout.layout.composition import VERIFY_MAX, composition
from flashsim.layout.layout.complement import (
    complement, left_inverse, max_common_layout, max_common_vector, nullspace, right_inverse,
)
from flashsim.layout.layout.tiling import (
    blocked_product, flat_divide, flat_product, logical_divide, logical_product, raked_product, tile_to_shape,
    tile_unzip, tiled_divide, tiled_product, zipped_divide, zipped_product,
)
from flashsim.layout.layout.recast import downcast, recast_layout, upcast
from flashsim.layout.layout.printing import print_layout

__all__ = [
    "GenColMajor", "GenRowMajor", "Layout", "LayoutError", "LayoutLeft", "LayoutRight", "is_layout", "make_coord",
    "make_fragment_like", "make_identity_layout", "make_layout", "make_layout_like", "make_ordered_layout",
    "make_shape", "make_step", "make_stride", "make_tile", "append", "coalesce", "coprofile", "coshape", "cosize",
    "crd2idx", "depth", "dice", "filter_layout", "filter_zeros", "flatten", "get", "group", "prepend", "rank",
    "replace", "select", "shape", "size", "slice_", "slice_and_offset", "stride", "take", "transform_layout",
    "unflatten", "zip_layout", "VERIFY_MAX", "composition", "complement", "left_inverse", "max_common_layout",
    "max_common_vector", "nullspace", "right_inverse", "blocked_product", "flat_divide", "flat_product",
    "logical_divide", "logical_product", "raked_product", "tile_to_shape", "tile_unzip", "tiled_divide",
    "tiled_product", "zipped_divide", "zipped_product", "downcast", "recast_layout", "upcast", "print_layout",
]
