"""Divides and products: a layout split into tiles of a tiler (``logical_divide`` and its zipped, tiled and
flat forms), a block repeated over a tiler (``logical_product``, blocked and raked products), and
``tile_to_shape``."""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout.inttuple import _, fmt
from flashsim.layout.layout.complement import complement
from flashsim.layout.layout.composition import _tiler_str, composition
from flashsim.layout.layout.core import (
    Layout, LayoutError, LayoutLeft, _cl, _is_composed, make_layout, make_ordered_layout,
)
from flashsim.layout.layout.modes import append, coalesce, cosize, get, rank, shape, size, transform_layout, zip_layout


# ---------------------------------------------------------------------------------------------
# Divide and product
# ---------------------------------------------------------------------------------------------


def _as_tiler_layout(t):
    """A divide's or product's tiler as a layout: an integer n is ``make_layout(n)`` as in CuTe, whose
    compact stride is ``_1``, or ``_0`` for a static ``_1`` (so the tile ``_1`` is ``_1:_0``)."""
    if isinstance(t, Layout):
        return t
    if it.is_int(t):
        return Layout._make(t, it.compact_col_major(t))
    raise bad_argument("tiler", t, "expected a Layout, an integer, _ or a tuple of those")


def logical_divide(x, tiler):
    """``A / B = A o (B, B*)``: mode 0 the tile B, mode 1 the layout of the tiles (by mode for a tuple tiler)."""
    if _is_composed(x):
        return _cl().recompose(x, logical_divide(x.layout_b, tiler))
    if isinstance(tiler, list):
        tiler = tuple(tiler)
    if isinstance(tiler, tuple):
        if len(tiler) > int(x.rank):
            raise bad_argument("tiler", _tiler_str(tiler), f"has more modes than the layout {x}")
        return transform_layout(x, tiler, logical_divide)
    if tiler is _:
        return x
    t = _as_tiler_layout(tiler)
    return composition(x, make_layout(t, complement(t, shape(coalesce(x)))))


def tile_unzip(x, tiler):
    if _is_composed(x):
        return _cl().recompose(x, tile_unzip(x.layout_b, tiler))
    return Layout._make(it.zip2_by(x.shape, _guide(tiler)), it.zip2_by(x.stride, _guide(tiler)))


def _guide(tiler):
    # Only the tuple structure of a tiler matters to zip2_by; a Layout tiler counts as one mode.
    if isinstance(tiler, tuple):
        return tuple(_guide(t) for t in tiler)
    return 0


def zipped_divide(x, tiler):
    """``((TileM,TileN,...),(RestM,RestN,...))``."""
    return tile_unzip(logical_divide(x, tiler), tiler)


def _rep(n):
    """CuTe ``repeat<N>(_)``: ``_`` itself for N == 1, else a tuple of N underscores."""
    return _ if n == 1 else tuple([_] * n)


def tiled_divide(x, tiler):
    """``((TileM,TileN,...),RestM,RestN,...)``."""
    res = zipped_divide(x, tiler)
    return res(_, _rep(int(rank(res, 1))))


def flat_divide(x, tiler):
    """``(TileM,TileN,...,RestM,RestN,...)``."""
    res = zipped_divide(x, tiler)
    return res(_rep(int(rank(res, 0))), _rep(int(rank(res, 1))))


def logical_product(block, tiler):
    """``A x B = (A, A* o B)``: mode 0 the block, mode 1 the block repeated in B's order."""
    if _is_composed(block):
        return _cl().recompose(block, logical_product(block.layout_b, tiler))
    if _is_composed(tiler):
        return _cl().logical_product_swizzled(block, tiler)
    if isinstance(tiler, list):
        tiler = tuple(tiler)
    if isinstance(tiler, tuple):
        if len(tiler) > int(block.rank):
            raise bad_argument("tiler", _tiler_str(tiler), f"has more modes than the block {block}")
        return transform_layout(block, tiler, logical_product)
    if tiler is _:
        return block
    t = _as_tiler_layout(tiler)
    return make_layout(block, composition(complement(block, size(block) * cosize(t)), t))


def zipped_product(block, tiler):
    return tile_unzip(logical_product(block, tiler), tiler)


def tiled_product(block, tiler):
    res = zipped_product(block, tiler)
    return res(_, _rep(int(rank(res, 1))))


def flat_product(block, tiler):
    res = zipped_product(block, tiler)
    return res(_rep(int(rank(res, 0))), _rep(int(rank(res, 1))))


def _rank_pair(block, tiler):
    if _is_composed(block) or not isinstance(block, Layout) or not isinstance(tiler, Layout):
        raise bad_argument("(block, tiler)", (str(block), str(tiler)), "blocked/raked products need two Layouts")
    return max(int(block.rank), int(tiler.rank))


def blocked_product(block, tiler):
    """Rank-sensitive product: each mode is (block mode, tiler mode); the block appears as contiguous tiles."""
    if _is_composed(block):
        return _cl().recompose(block, blocked_product(block.layout_b, tiler))
    R = _rank_pair(block, tiler)
    res = logical_product(append(block, n=R), append(tiler, n=R))
    return zip_layout(get(res, 0), get(res, 1))


def raked_product(block, tiler):
    """Rank-sensitive product: each mode is (tiler mode, block mode); the block is interleaved (cyclic)."""
    if _is_composed(block):
        return _cl().recompose(block, raked_product(block.layout_b, tiler))
    R = _rank_pair(block, tiler)
    res = logical_product(append(block, n=R), append(tiler, n=R))
    return zip_layout(get(res, 1), get(res, 0))


def tile_to_shape(block, trg_shape, order=LayoutLeft):
    """Repeat block (a layout atom) until it covers trg_shape; the tiles are ordered column-major by default."""
    if _is_composed(block):
        return _cl().recompose(block, tile_to_shape(block.layout_b, trg_shape, order))
    if not isinstance(block, Layout):
        raise bad_argument("block", block, "tile_to_shape needs a Layout or composed layout")
    trg_shape = it.as_inttuple(trg_shape, "trg_shape")
    R = int(it.rank(trg_shape))
    if int(block.rank) > R:
        raise bad_argument("trg_shape", fmt(trg_shape), f"has fewer modes than the block {block}")
    padded = append(block, n=R)
    block_shape = it.product_each(padded.shape)
    target = it.product_each(trg_shape)
    if it.is_static(target) and not it.evenly_divides(target, block_shape):
        raise LayoutError(f"tile_to_shape({block}, {fmt(trg_shape)}): the block shape {fmt(block_shape)} "
                          f"does not divide the target shape")
    prod_shape = it.ceil_div(target, block_shape)
    return blocked_product(padded, make_ordered_layout(prod_shape, order))
