"""The complement of a layout (the layout of the rest of its codomain), its right and left inverses, and
what follows from them: the largest common layout / vector of two layouts, the null space."""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout.inttuple import C, ScaledBasis, _, fmt
from flashsim.layout.layout.core import Layout, LayoutError, _cl, _is_composed, is_layout
from flashsim.layout.layout.composition import composition
from flashsim.layout.layout.modes import coalesce, cosize, filter_layout, get, shape


# ---------------------------------------------------------------------------------------------
# Complement and inverses
# ---------------------------------------------------------------------------------------------


def _complement(shp, strd, cotarget, what):
    if it.is_constant(0, strd):
        return Layout(it.shape_coalesce(cotarget))
    R = int(it.rank(shp))
    if R > 1 and not it.is_static(strd):
        raise LayoutError(f"complement({what}): a dynamic-stride complement is only defined for rank-1 layouts")
    sh, st = it.wrap(shp), it.wrap(strd)
    res_s, res_d = [], [C(1)]
    for i in range(R - 1):
        mn = it.tmin(st)
        mi = next(j for j, v in enumerate(st) if int(v) == int(mn))
        ns = it.div(mn, res_d[i])
        if int(ns) == 0:
            raise LayoutError(f"complement({what}) is not defined: the layout is not injective")
        res_s.append(ns)
        res_d.append(mn * sh[mi])
        sh, st = it.remove(sh, mi), it.remove(st, mi)
    ns = it.div(st[0], res_d[R - 1])
    if int(ns) == 0:
        raise LayoutError(f"complement({what}) is not defined: the layout is not injective")
    res_s.append(ns)
    new_d = st[0] * sh[0]
    rest_s = it.shape_coalesce(it.ceil_div(cotarget, new_d))
    rest_d = it.compact_col_major(rest_s, new_d)
    return coalesce(Layout._make((tuple(res_s), rest_s), (tuple(res_d), rest_d)))


def complement(x, cotarget=None):
    """The layout of the 'rest': ordered, disjoint from x's image, filling the codomain up to cotarget."""
    if _is_composed(x):
        return complement(x.layout_b, cotarget if cotarget is not None else cosize(x))
    if not isinstance(x, Layout):
        raise bad_argument("layout", x, "complement needs a Layout")
    for d in it.flatten_to_tuple(x.stride):
        if isinstance(d, ScaledBasis) or int(d) < 0:
            raise LayoutError(f"complement({x}) is not defined for negative or coordinate strides")
    f = filter_layout(x)
    if cotarget is None:
        cotarget = cosize(f)
    elif is_layout(cotarget):
        cotarget = shape(cotarget)
    else:
        cotarget = it.as_inttuple(cotarget, "cotarget")
    return _complement(f.shape, f.stride, cotarget, f"{x}, {fmt(cotarget)}")


def _sort_by_key(keys):
    """CuTe's compile-time exchange sort of (key, index) pairs (not stable: kept for identical results)."""
    a = [(int(k), i) for i, k in enumerate(keys)]
    n = len(a)
    for i in range(n):
        for j in range(i + 1, n):
            if a[j][0] < a[i][0]:
                a[i], a[j] = a[j], a[i]
    return [i for _k, i in a]


def right_inverse(x):
    """R with ``x(R(i)) == i`` for the largest contiguous i range that x covers (static strides only)."""
    if x is _:
        return _
    if it.is_int(x):
        return -x
    if _is_composed(x):
        return _cl().right_inverse_composed(x)
    if isinstance(x, _cl().Swizzle):
        return x
    cx = coalesce(x)
    lst, lsh = it.wrap(cx.stride), it.wrap(cx.shape)
    pre = [C(1)]
    for s in lsh:
        pre.append(s * pre[-1])
    idx = [i for i, d in enumerate(lst) if it.is_static(d)]
    order = [idx[k] for k in _sort_by_key([lst[i] for i in idx])]
    rs, rd, curr = [C(1)], [C(0)], C(1)
    for i in order:
        if type(curr) is C and it.is_static(lst[i]) and int(lst[i]) == int(curr):
            rs.append(lsh[i])
            rd.append(pre[i])
            curr = lsh[i] * lst[i]
    return coalesce(Layout._make(tuple(rs), tuple(rd)))


def left_inverse(x):
    """L with ``L(x(i)) == i`` for every i (x injective, static strides)."""
    if x is _:
        return _
    if it.is_int(x):
        return -x
    if _is_composed(x):
        return _cl().left_inverse_composed(x)
    if isinstance(x, _cl().Swizzle):
        return x
    cx = coalesce(x)
    lst, lsh = it.wrap(cx.stride), it.wrap(cx.shape)
    if not it.is_static(lst):
        raise LayoutError(f"left_inverse({x}) requires static strides")
    pre = [C(1)]
    for s in lsh:
        pre.append(s * pre[-1])
    order = _sort_by_key(lst)
    rs, rd = [], [C(0)]
    for i in order:
        d = lst[i]
        if it.is_constant(0, d):
            continue
        sz = it.product(tuple(rs))
        if int(d) % int(sz) != 0:
            raise LayoutError(f"left_inverse({x}) is not defined: the layout is not injective (divisibility)")
        rs.append(it.div(d, sz))
        rd.append(pre[i])
    return coalesce(Layout._make(tuple(rs) + (lsh[order[-1]],), tuple(rd)))


def max_common_layout(a, b):
    inv_b = right_inverse(b)
    common = coalesce(composition(a, inv_b))
    s0, d0 = it.get(common.shape, 0) if isinstance(common.shape, tuple) else common.shape, \
        it.get(common.stride, 0) if isinstance(common.stride, tuple) else common.stride
    if it.is_static(s0) and it.is_constant(1, d0):
        return composition(inv_b, get(common, 0) if isinstance(common.shape, tuple) else common)
    return Layout._make(C(1), C(0))


def max_common_vector(a, b):
    common = coalesce(composition(a, right_inverse(b)))
    s0 = common.shape[0] if isinstance(common.shape, tuple) else common.shape
    d0 = common.stride[0] if isinstance(common.stride, tuple) else common.stride
    if it.is_static(s0) and it.is_constant(1, d0):
        return s0
    return C(1)


def nullspace(x):
    fs, fd = it.flatten_to_tuple(x.shape), it.flatten_to_tuple(x.stride)
    iseq = [i for i, d in enumerate(fd) if it.is_constant(0, d)]
    if not iseq:
        return Layout._make(C(1), C(0))
    rst = it.compact_col_major(fs)
    return Layout._make(it.unwrap(tuple(fs[i] for i in iseq)), it.unwrap(tuple(rst[i] for i in iseq)))
