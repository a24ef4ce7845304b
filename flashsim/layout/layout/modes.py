"""Queries of a layout (shape, size, cosize, ...) and the manipulation of its modes: get / select / take,
flatten / group, append / prepend / replace, zip, slice and dice; coalesce and filter, which merge modes."""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout.inttuple import C, fmt
from flashsim.layout.layout.core import Layout, _cl, _is_composed, make_layout


# ---------------------------------------------------------------------------------------------
# Queries and mode manipulation
# ---------------------------------------------------------------------------------------------


def shape(x, *idx):
    """CuTe ``shape``/``shape<I...>`` of a layout, composed layout, tensor or IntTuple."""
    if isinstance(x, Layout):
        s = x.shape
    elif _is_composed(x):
        s = x.layout_b.shape
    elif callable(getattr(x, "layout", None)):
        s = shape(x.layout())
    else:
        s = x
    return it.get(s, *idx) if idx else s


def stride(x, *idx):
    L = _as_plain(x, "stride")
    return it.get(L.stride, *idx) if idx else L.stride


def _as_plain(x, what):
    if hasattr(x, "layout") and not isinstance(x, Layout) and not _is_composed(x):
        x = x.layout()
    if _is_composed(x):
        raise bad_argument("layout", str(x), f"{what} is not defined for a composed layout")
    if not isinstance(x, Layout):
        raise bad_argument("layout", x, "expected a Layout")
    return x


def size(x, *idx):
    """CuTe ``size``/``size<I...>`` of a layout, tensor, tiled copy/MMA or IntTuple."""
    if hasattr(x, "_size"):
        return x._size(*idx)
    return it.product(shape(x, *idx))


def rank(x, *idx):
    return it.rank(shape(x, *idx))


def depth(x, *idx):
    return it.depth(shape(x, *idx))


def cosize(x, *idx):
    """``cosize = L(size-1) + 1`` for non-negative strides: the extent of the codomain."""
    if hasattr(x, "layout") and not isinstance(x, Layout) and not _is_composed(x):
        x = x.layout()
    if _is_composed(x):
        return cosize(x.layout_b, *idx)
    L = get(x, *idx) if idx else x
    m1 = _leafmap(L.shape, lambda s: s - C(1))
    ab = _leafmap(L.stride, it.cabs)
    co = it.as_arithmetic_tuple(it.inner_product(m1, ab))
    return it.product(_leafmap(co, lambda c: c + C(1)))


def _leafmap(t, f):
    if isinstance(t, tuple):
        return tuple(_leafmap(e, f) for e in t)
    return f(t)


def coshape(x):
    m1 = _leafmap(x.shape, lambda s: s - C(1))
    ab = _leafmap(x.stride, it.cabs)
    co = it.as_arithmetic_tuple(it.inner_product(m1, ab))
    return _leafmap(co, lambda c: c + C(1))


def coprofile(x):
    return it.repeat_like(it.as_arithmetic_tuple(it.tsum(x.stride)), C(0))


def get(x, *idx):
    """CuTe ``get<I...>`` / ``layout<I...>``: a sub-layout (also of a composed layout)."""
    if _is_composed(x):
        return _cl().recompose(x, get(x.layout_b, *idx))
    if not idx:
        return x
    return Layout._make(it.get(x.shape, *idx), it.get(x.stride, *idx))


def select(x, *idx):
    if _is_composed(x):
        return _cl().recompose(x, select(x.layout_b, *idx))
    return Layout._make(tuple(it.get(x.shape, i) for i in idx), tuple(it.get(x.stride, i) for i in idx))


def take(x, b, e):
    if _is_composed(x):
        return _cl().recompose(x, take(x.layout_b, b, e))
    R = int(x.rank)
    if not (0 <= b < e <= R):
        raise bad_argument("(B, E)", (b, e), f"take needs 0 <= B < E <= rank {R}")
    return Layout._make(it.take(x.shape, b, e), it.take(x.stride, b, e))


def flatten(x):
    if _is_composed(x):
        return _cl().recompose(x, flatten(x.layout_b))
    if not isinstance(x, Layout):
        return it.flatten(x)
    return Layout._make(it.flatten(x.shape), it.flatten(x.stride))


def unflatten(x, profile):
    return Layout._make(it.unflatten(x.shape, profile), it.unflatten(x.stride, profile))


def group(x, b, e=None):
    if _is_composed(x):
        return _cl().recompose(x, group(x.layout_b, b, e))

    def g(t):
        t = it.wrap(t)
        ee = len(t) if e is None else e
        return t[:b] + ((t[b:ee],) if b < ee else ()) + t[ee:]

    return Layout._make(g(x.shape), g(x.stride))


def append(x, y=None, n=None):
    """``append(layout, x)`` or ``append<N>(layout)`` (pad to rank N with ``_1:_0``)."""
    if y is None:
        y = Layout._make(C(1), C(0))
    if _is_composed(x):
        return _cl().recompose(x, append(x.layout_b, y, n))
    return Layout._make(it.append(x.shape, y.shape, n), it.append(x.stride, y.stride, n))


def prepend(x, y=None, n=None):
    if y is None:
        y = Layout._make(C(1), C(0))
    return Layout._make(it.prepend(x.shape, y.shape, n), it.prepend(x.stride, y.stride, n))


def replace(x, i, y):
    return Layout._make(it.replace(x.shape, i, y.shape), it.replace(x.stride, i, y.stride))


def zip_layout(a, b=None):
    """CuTe ``zip`` of one layout (transpose its modes) or of two layouts."""
    if b is None:
        if _is_composed(a):
            return _cl().recompose(a, zip_layout(a.layout_b))
        return Layout._make(it.zip_tuple(a.shape), it.zip_tuple(a.stride))
    return Layout._make(it.zip_tuple((a.shape, b.shape)), it.zip_tuple((a.stride, b.stride)))


def transform_layout(layout, t1, f):
    """Apply f to corresponding modes of layout and tuple t1; extra modes of layout are kept."""
    R0 = int(rank(layout))
    R1 = len(t1)
    R = min(R0, R1)
    mods = [f(get(layout, i), t1[i]) for i in range(R)] + [get(layout, i) for i in range(R, R0)]
    return make_layout(*mods)


def slice_(c, x):
    """Slice a layout with a coordinate containing ``_``: the sub-layout of the ``_`` modes."""
    if _is_composed(x):
        return _cl().slice_and_offset(c, x)[0]
    if isinstance(c, list):
        c = tuple(c)
    return Layout._make(it.slice_(c, x.shape), it.slice_(c, x.stride))


def dice(c, x):
    return Layout._make(it.dice(c, x.shape), it.dice(c, x.stride))


def slice_and_offset(c, x):
    if _is_composed(x):
        return _cl().slice_and_offset(c, x)
    if isinstance(c, list):
        c = tuple(c)
    return slice_(c, x), it.crd2idx(c, x.shape, x.stride)


def crd2idx(c, x, stride_=None):
    if stride_ is not None:
        return it.crd2idx(c, x, stride_)
    return it.crd2idx(c, x.shape, x.stride)


# ---------------------------------------------------------------------------------------------
# Coalesce and filter
# ---------------------------------------------------------------------------------------------


def _bw_coalesce(fs, fd, ns, nd):
    for i in range(len(fs) - 2, -1, -1):
        s, d = fs[i], fd[i]
        if it.is_constant(1, s):
            continue
        if not isinstance(ns, tuple) and it.is_constant(1, ns):
            ns, nd = s, d
            continue
        ns0 = ns[0] if isinstance(ns, tuple) else ns
        nd0 = nd[0] if isinstance(nd, tuple) else nd
        if it.is_static(ns0) and it.static_true_eq(s * d, nd0):
            ns, nd = it.replace_front(ns, s * ns0), it.replace_front(nd, d)
        else:
            ns, nd = it.prepend(ns, s), it.prepend(nd, d)
    if not isinstance(ns, tuple) and it.is_constant(1, ns):
        return Layout._make(C(1), C(0))
    return Layout._make(ns, nd)


def coalesce(x, profile=None):
    """Simplify a layout without changing it as a function of 1-D coordinates (by mode with a profile)."""
    if _is_composed(x):
        return _cl().recompose(x, coalesce(x.layout_b, profile))
    if not isinstance(x, Layout):
        return it.shape_coalesce(x)  # coalesce of a Shape
    if profile is not None and isinstance(profile, tuple):
        if len(profile) > int(x.rank):
            raise bad_argument("profile", fmt(profile), f"has more modes than the layout {x}")
        return transform_layout(x, profile, coalesce)
    fs, fd = it.flatten_to_tuple(x.shape), it.flatten_to_tuple(x.stride)
    if not fs:
        return Layout._make(C(1), C(0))
    return _bw_coalesce(fs, fd, fs[-1], fd[-1])


def _coalesce_x(x, profile=None):
    """Coalesce that keeps the last mode even when its size is _1 (its stride extends the LHS of composition)."""
    if profile is not None and isinstance(profile, tuple):
        return transform_layout(x, profile, _coalesce_x)
    fs, fd = it.flatten_to_tuple(x.shape), it.flatten_to_tuple(x.stride)
    if not fs:
        return Layout._make(C(1), C(0))
    last = C(2) if it.is_constant(1, fs[-1]) else fs[-1]
    return _bw_coalesce(fs, fd, last, fd[-1])


def filter_zeros(x, profile=None):
    if profile is not None:
        return Layout._make(it.filter_zeros(profile, x.shape), x.stride)
    return Layout._make(it.filter_zeros(x.stride, x.shape), x.stride)


def filter_layout(x, profile=None):
    """CuTe ``filter``: drop stride-0 and size-1 modes, then coalesce."""
    if _is_composed(x):
        return _cl().recompose(x, filter_layout(x.layout_b, profile))
    if profile is not None and isinstance(profile, tuple):
        return transform_layout(x, profile, filter_layout)
    return coalesce(filter_zeros(x))
