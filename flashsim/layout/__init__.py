"""CuTe layout algebra in Python, printed exactly as CuTe C++ prints it.

``Layout`` (hierarchical shape:stride with static ``_8`` and dynamic ``8`` integers), ``Swizzle``,
``ComposedLayout`` and the algebra (coalesce, composition, complement, inverses, divides, products,
tile_to_shape), tensors (``make_tensor``, ``make_identity_tensor``, ``local_tile``, slicing), thread-value
partitions (``make_tiled_copy``, ``TiledMMA``) and vectorised evaluation (``evaluate``). ``str()`` of every
object is what ``cute::print`` writes; ``print_layout`` is CuTe's console table.
"""

from flashsim.layout.inttuple import (
    C, E, X, ScaledBasis, Underscore, _, ceil_div, compact_col_major, compact_major, compact_row_major,
    compatible, congruent, crd2crd, crd2idx_shape, fmt, idx2crd, is_static, product, shape_div,
)
from flashsim.layout.layout import (
    GenColMajor, GenRowMajor, Layout, LayoutError, LayoutLeft, LayoutRight, append, blocked_product,
    coalesce, complement, composition, cosize, crd2idx, depth, dice, downcast, filter_layout, filter_zeros,
    flat_divide, flat_product, flatten, get, group, is_layout, left_inverse, logical_divide, logical_product,
    make_coord, make_fragment_like, make_identity_layout, make_layout, make_layout_like, make_ordered_layout,
    make_shape, make_step, make_stride, make_tile, max_common_layout, max_common_vector, nullspace, prepend,
    print_layout, raked_product, rank, recast_layout, replace, right_inverse, select, shape, size, slice_,
    slice_and_offset, stride, take, tile_to_shape, tile_unzip, tiled_divide, tiled_product, unflatten, upcast,
    zip_layout, zipped_divide, zipped_product,
)
from flashsim.layout.composed import ComposedLayout, MixedBits, Swizzle, make_swizzle
from flashsim.layout.evaluate import coordinates, evaluate
from flashsim.layout.tensor import (
    Pointer, Tensor, local_partition, local_tile, make_gmem_ptr, make_identity_tensor, make_rmem_ptr,
    make_smem_ptr, make_tensor, print_tensor,
)
from flashsim.layout.atoms import COPY_OPS, MMA_OPS, CopyAtom, Copy_Atom, MMAAtom, MMA_Atom, DTYPES
from flashsim.layout.tiled import (
    ThrCopy, ThrMMA, TiledCopy, TiledMMA, make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B,
    make_tiled_copy_C, make_tiled_mma, partition_fragment_C, partition_shape_A, partition_shape_B,
    partition_shape_C, tile_size,
)


def S(v):
    """A static integer: ``S(8)`` is CuTe's ``Int<8>{}`` (``_8``)."""
    return C(int(v))


Int = S

__all__ = [
    # integers and tuples
    "C", "E", "Int", "S", "ScaledBasis", "Underscore", "X", "_", "ceil_div", "compact_col_major", "compact_major",
    "compact_row_major", "compatible", "congruent", "crd2crd", "crd2idx", "crd2idx_shape", "fmt", "idx2crd",
    "is_static", "product", "shape_div",
    # layouts and the algebra
    "ComposedLayout", "GenColMajor", "GenRowMajor", "Layout", "LayoutError", "LayoutLeft", "LayoutRight",
    "MixedBits", "Swizzle", "append", "blocked_product", "coalesce", "complement", "composition", "cosize",
    "depth", "dice", "downcast", "filter_layout", "filter_zeros", "flat_divide", "flat_product", "flatten",
    "get", "group", "is_layout", "left_inverse", "logical_divide", "logical_product", "make_coord",
    "make_fragment_like", "make_identity_layout", "make_layout", "make_layout_like", "make_ordered_layout",
    "make_shape", "make_step", "make_stride", "make_swizzle", "make_tile", "max_common_layout",
    "max_common_vector", "nullspace", "prepend", "print_layout", "raked_product", "rank", "recast_layout",
    "replace", "right_inverse", "select", "shape", "size", "slice_", "slice_and_offset", "stride", "take",
    "tile_to_shape", "tile_unzip", "tiled_divide", "tiled_product", "unflatten", "upcast", "zip_layout",
    "zipped_divide", "zipped_product",
    # evaluation
    "coordinates", "evaluate",
    # tensors
    "Pointer", "Tensor", "local_partition", "local_tile", "make_gmem_ptr", "make_identity_tensor",
    "make_rmem_ptr", "make_smem_ptr", "make_tensor", "print_tensor",
    # atoms and thread-value partitions
    "COPY_OPS", "CopyAtom", "Copy_Atom", "DTYPES", "MMAAtom", "MMA_Atom", "MMA_OPS", "ThrCopy", "ThrMMA",
    "TiledCopy", "TiledMMA", "make_tiled_copy", "make_tiled_copy_A", "make_tiled_copy_B", "make_tiled_copy_C",
    "make_tiled_mma", "partition_fragment_C", "partition_shape_A", "partition_shape_B", "partition_shape_C",
    "tile_size",
]
