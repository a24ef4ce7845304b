"""Strides and coordinates (cute/stride.hpp): compact and basis strides, the maps between coordinates and
indices, and the comparisons of IntTuples that care about staticness."""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout.inttuple.integers import C, ScaledBasis, _, div, fmt, is_constant, is_static, mod
from flashsim.layout.inttuple.tuples import (
    append, flatten_to_tuple, get, product, product_like, replace_back, unflatten,
)


# ---------------------------------------------------------------------------------------------
# Strides and coordinates (cute/stride.hpp)
# ---------------------------------------------------------------------------------------------


def basis_get(b, t):
    """Pick the sub-tuple of t that basis stride b points into (identity when b is a plain integer)."""
    if isinstance(b, ScaledBasis):
        for m in b.modes:
            t = get(t, m)
    return t


def basis_value(b):
    return b.value if isinstance(b, ScaledBasis) else b


def make_basis_like(shape, prefix=()):
    if isinstance(shape, tuple):
        return tuple(make_basis_like(s, prefix + (i,)) for i, s in enumerate(shape))
    return ScaledBasis(C(1), prefix)


def compact_major(shape, current=C(1), right: bool = False):
    """Compact strides for shape: LayoutLeft (column-major, default) or LayoutRight; size-_1 modes get _0."""
    if isinstance(current, tuple):
        return tuple(compact_major(s, c, right) for s, c in zip(shape, current))

    def go(s, cur):
        if isinstance(s, tuple):
            res = [None] * len(s)
            order = range(len(s) - 1, -1, -1) if right else range(len(s))
            for i in order:
                res[i], cur = go(s[i], cur)
            return tuple(res), cur
        if is_constant(1, s):
            return C(0), cur
        return cur, cur * s

    return go(shape, current)[0]


def compact_col_major(shape, current=C(1)):
    return compact_major(shape, current, right=False)


def compact_row_major(shape, current=C(1)):
    return compact_major(shape, current, right=True)


def compact_order(shape, order):
    """CuTe ``compact_order``: compact strides where lower ``order`` values get smaller strides."""
    ref_shape = flatten_to_tuple(product_like(shape, order))
    flat_order = flatten_to_tuple(order)
    max_order = C(0)
    for o in flat_order:
        if type(o) is C and type(max_order) is C and int(max_order) < int(o):
            max_order = o
    ref_order = tuple(o if type(o) is C else C(int(max_order) + 1 + i) for i, o in enumerate(flat_order))
    new_order = unflatten(ref_order, order)

    def go(s, o):
        if isinstance(o, tuple):
            return tuple(go(si, oi) for si, oi in zip(s, o))
        start = C(1)
        for rs, ro in zip(ref_shape, ref_order):
            if int(ro) < int(o):
                start = start * rs
        return compact_col_major(s, start)

    return go(shape, new_order)


def crd2idx(coord, shape, stride):
    """Map a coordinate (1-D, R-D or natural) within shape to an index through stride (CuTe crd2idx)."""
    if isinstance(coord, tuple):
        if not isinstance(shape, tuple):
            raise bad_argument("coord", fmt(coord), f"a tuple coordinate for the integer shape {fmt(shape)}")
        if len(coord) != len(shape) or len(coord) != len(stride):
            raise bad_argument("coord", fmt(coord), f"rank does not match the shape {fmt(shape)}")
        r = None
        for c, s, d in zip(coord, shape, stride):
            v = crd2idx(c, s, d)
            r = v if r is None else r + v
        return r if r is not None else C(0)
    if coord is _:
        coord = C(0)
    if isinstance(shape, tuple):
        if len(shape) != len(stride):
            raise bad_argument("stride", fmt(stride), f"not congruent with the shape {fmt(shape)}")
        if len(shape) == 0:
            return C(0)
        r = None
        n = len(shape)
        for i in range(n):
            if i == n - 1:
                v = crd2idx(coord, shape[i], stride[i])
            elif is_constant(0, coord):
                v = crd2idx(C(0), shape[i], stride[i])
            else:
                p = product(shape[i])
                q, m = div(coord, p), mod(coord, p)
                v = crd2idx(m, shape[i], stride[i])
                coord = q
            r = v if r is None else r + v
        return r
    return coord * stride


def crd2idx_shape(coord, shape):
    """CuTe ``crd2idx(c, shape)``: the 1-D (colexicographic) index of a coordinate within shape."""
    if not isinstance(coord, tuple):
        return coord
    if not isinstance(shape, tuple) or len(coord) != len(shape):
        raise bad_argument("coord", fmt(coord), f"rank does not match the shape {fmt(shape)}")
    flat_c = flatten_to_tuple(coord)
    flat_s = flatten_to_tuple(product_like(shape, coord))
    r = flat_c[-1]
    for c, s in zip(reversed(flat_c[:-1]), reversed(flat_s[:-1])):
        r = c + s * r
    return r


def idx2crd(idx, shape):
    """CuTe ``idx2crd(i, shape)``: the natural (hierarchical) coordinate of index i within shape."""
    if isinstance(idx, tuple):
        if not isinstance(shape, tuple) or len(idx) != len(shape):
            raise bad_argument("coord", fmt(idx), f"rank does not match the shape {fmt(shape)}")
        return tuple(idx2crd(i, s) for i, s in zip(idx, shape))
    if idx is _:
        idx = C(0)
    if isinstance(shape, tuple):
        out = []
        n = len(shape)
        for i, s in enumerate(shape):
            if i == n - 1:
                out.append(idx2crd(idx, s))
            elif is_constant(0, idx):
                out.append(idx2crd(C(0), s))
            else:
                p = product(s)
                out.append(idx2crd(mod(idx, p), s))
                idx = div(idx, p)
        return tuple(out)
    return idx


def idx2crd_stride(idx, shape, stride):
    """CuTe ``idx2crd(i, shape, stride)``: ``(i / stride) % shape`` per mode."""
    if isinstance(shape, tuple):
        if isinstance(stride, tuple):
            return tuple(idx2crd_stride(idx, s, d) for s, d in zip(shape, stride))
        return tuple(idx2crd_stride(idx, s, d) for s, d in zip(shape, compact_col_major(shape, stride)))
    if is_constant(1, shape):
        return C(0)
    return mod(div(idx, stride), shape)


def crd2crd(coord, src_shape, dst_shape):
    if isinstance(coord, tuple) and isinstance(src_shape, tuple) and isinstance(dst_shape, tuple):
        return tuple(crd2crd(c, s, d) for c, s, d in zip(coord, src_shape, dst_shape))
    return idx2crd(crd2idx_shape(coord, src_shape), dst_shape)


def shape_coalesce(shape):
    """CuTe ``coalesce(Shape)``: multiply neighbouring leaves of equal staticness."""
    flat = flatten_to_tuple(shape)
    if not isinstance(shape, tuple):
        return shape
    acc = flat[0]
    for a in flat[1:]:
        back = acc[-1] if isinstance(acc, tuple) else acc
        if is_static(back) == is_static(a):
            acc = replace_back(acc, back * a)
        else:
            acc = append(acc, a)
    return acc


def static_true_eq(a, b) -> bool:
    """True when CuTe's ``a == b`` is the static constant true (both static and equal)."""
    if isinstance(a, ScaledBasis) or isinstance(b, ScaledBasis):
        return (isinstance(a, ScaledBasis) and isinstance(b, ScaledBasis) and a.modes == b.modes
                and static_true_eq(a.value, b.value))
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(static_true_eq(x, y) for x, y in zip(a, b)))
    return type(a) is C and type(b) is C and int(a) == int(b)


def same(a, b) -> bool:
    """Equal values and equal staticness, leaf by leaf (what prints identically)."""
    return fmt(a) == fmt(b)
