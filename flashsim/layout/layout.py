"""CuTe ``Layout`` (shape:stride) and its algebra: coalesce, composition, complement, inverses, divides, products.

Each operation follows the definition in CuTe's cute/layout.hpp step for step, so that its result has not
only the same function but the same shape, the same modes and the same static/dynamic integers as CuTe's,
and therefore prints identically. Preconditions that CuTe checks with ``static_assert`` on static values
(stride and shape divisibility in composition, injectivity in complement, ...) are checked here on the
values, static or not, and raise ``ArgumentError`` naming the operands instead of returning a layout that
is not the composition (a run-time B mode of size 1, which cannot go wrong, is let through as CuTe does).
"""

from __future__ import annotations

from flashsim.errors import ArgumentError, bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout.inttuple import C, ScaledBasis, _, fmt


class LayoutError(ArgumentError):
    """An operation on layouts that is not defined for these operands (the message names them)."""


class _Tag:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


LayoutLeft = _Tag("LayoutLeft")
LayoutRight = _Tag("LayoutRight")
GenColMajor = LayoutLeft
GenRowMajor = LayoutRight


class Layout:
    """A CuTe layout: a function from coordinates of ``shape`` to indices, ``sum(coord_i * stride_i)``.

    ``Layout(shape, stride=None)`` checks its arguments (integers or nested tuples of integers, congruent);
    without a stride it is compact column-major (LayoutLeft), like ``Layout<Shape>`` in CuTe. Plain Python
    ints are dynamic; ``C(8)`` / ``_8`` are static. ``str()`` is CuTe's ``print``.
    """

    __slots__ = ("shape", "stride")

    def __init__(self, shape, stride=None):
        shape = it.as_inttuple(shape, "shape")
        for s in it.flatten_to_tuple(shape):
            if int(s) < 0:
                raise bad_argument("shape", fmt(shape), "shapes must be non-negative")
        if stride is None or stride is LayoutLeft:
            stride = it.compact_col_major(shape)
        elif stride is LayoutRight:
            stride = it.compact_row_major(shape)
        else:
            stride = it.as_inttuple(stride, "stride", allow_basis=True)
            if not it.congruent(shape, stride):
                raise bad_argument("stride", fmt(stride), f"is not congruent with the shape {fmt(shape)}")
        self.shape, self.stride = shape, stride

    @classmethod
    def _make(cls, shape, stride):
        obj = object.__new__(cls)
        obj.shape, obj.stride = shape, stride
        return obj

    # -- printing ------------------------------------------------------------------------------
    def __str__(self):
        return it.Shown(f"{fmt(self.shape)}:{fmt(self.stride)}")

    __repr__ = __str__

    # -- comparison: CuTe's operator== compares values; same() also compares staticness ----------
    def __eq__(self, o):
        return isinstance(o, Layout) and _val(self.shape) == _val(o.shape) and _val(self.stride) == _val(o.stride)

    def __hash__(self):
        return hash((_val(self.shape), _val(self.stride)))

    # -- queries -------------------------------------------------------------------------------
    @property
    def rank(self):
        return it.rank(self.shape)

    def size(self):
        return it.product(self.shape)

    def cosize(self):
        return cosize(self)

    def layout(self):
        return self

    def __len__(self):
        return int(it.rank(self.shape))

    def __getitem__(self, i):
        return get(self, i)

    # -- mapping -------------------------------------------------------------------------------
    def __call__(self, *coord):
        c = coord[0] if len(coord) == 1 else tuple(coord)
        if isinstance(c, list):
            c = tuple(c)
        if it.has_underscore(c):
            return slice_(c, self)
        c = _check_coord(c, self)
        return it.crd2idx(c, self.shape, self.stride)

    def get_hier_coord(self, idx):
        return it.idx2crd(idx, self.shape)

    def get_flat_coord(self, idx):
        return it.crd2crd(self.get_hier_coord(idx), self.shape, it.repeat(int(self.rank), C(1)))

    def get_1d_coord(self, idx):
        return it.crd2idx_shape(self.get_hier_coord(idx), self.shape)

    # -- CuTe member functions -----------------------------------------------------------------
    def compose(self, *layouts):
        return composition(self, layouts[0] if len(layouts) == 1 else tuple(layouts))

    def with_shape(self, *shape):
        return composition(self, make_layout(shape[0] if len(shape) == 1 else tuple(shape)))

    def tile(self, *layouts):
        return tiled_divide(self, layouts[0] if len(layouts) == 1 else tuple(layouts))


def _val(t):
    if isinstance(t, tuple):
        return tuple(_val(e) for e in t)
    if isinstance(t, ScaledBasis):
        return ("E", int(t.value), t.modes)
    return int(t)


def _check_coord(c, layout):
    c = it.as_inttuple(c, "coord")
    if isinstance(c, tuple):
        if not it.weakly_congruent(c, layout.shape):
            raise bad_argument("coord", fmt(c), f"does not fit the shape {fmt(layout.shape)}")
    return c


def _is_composed(x) -> bool:
    return getattr(x, "_composed", False)


def _cl():
    from flashsim.layout import composed

    return composed


# ---------------------------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------------------------


def is_layout(x) -> bool:
    return isinstance(x, Layout) or _is_composed(x)


def make_layout(*args):
    """``make_layout(shape)``, ``make_layout(shape, stride)``, ``make_layout(shape, LayoutRight)`` or the
    concatenation ``make_layout(layout0, layout1, ...)`` (a single layout is wrapped: ``(s):(d)``)."""
    if not args:
        raise bad_argument("args", args, "make_layout needs a shape or layouts")
    if all(isinstance(a, Layout) for a in args):
        return Layout._make(tuple(a.shape for a in args), tuple(a.stride for a in args))
    if any(is_layout(a) for a in args):
        raise bad_argument("args", tuple(str(a) for a in args), "make_layout concatenates plain Layouts only")
    if len(args) == 1:
        return Layout(args[0])
    if len(args) == 2:
        return Layout(args[0], args[1])
    raise bad_argument("args", args, "expected make_layout(shape[, stride]) or make_layout(layouts...)")


def make_shape(*xs):
    return tuple(xs)


make_stride = make_step = make_coord = make_tile = make_shape


def make_ordered_layout(shape, order):
    if order is LayoutLeft:
        return Layout._make(shape, it.compact_col_major(shape))
    if order is LayoutRight:
        return Layout._make(shape, it.compact_row_major(shape))
    return Layout._make(shape, it.compact_order(shape, order))


def make_identity_layout(shape):
    shape = it.as_inttuple(shape, "shape")
    return Layout._make(shape, it.make_basis_like(shape))


def make_layout_like(layout):
    return Layout._make(layout.shape, it.compact_order(it.filter_zeros(layout.stride, layout.shape), layout.stride))


def make_fragment_like(layout):
    """The register layout CuTe allocates for a partitioned tensor: mode 0 compact, the rest in stride order."""
    if _is_composed(layout):
        return make_fragment_like(layout.layout_b)
    if not isinstance(layout, Layout):
        return Layout(layout)
    R = int(layout.rank)
    if R > 1 and it.is_static(layout.shape):
        s0, d0 = layout.shape[0], layout.stride[0]
        first = Layout._make(s0, it.compact_col_major(it.filter_zeros(d0, s0)))
        rest = make_ordered_layout(it.take(layout.shape, 1, R), it.take(layout.stride, 1, R))
        return tiled_product(first, rest)
    return Layout._make(layout.shape, it.compact_col_major(layout.shape))


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


# ---------------------------------------------------------------------------------------------
# Composition
# ---------------------------------------------------------------------------------------------


class _Undefined(Exception):
    pass


def _composition_impl(ls, ld, rs, rd):
    if isinstance(rs, tuple):
        return make_layout(*[_composition_impl(ls, ld, s, d) for s, d in zip(rs, rd)])
    if isinstance(rd, ScaledBasis):
        return _composition_impl(it.basis_get(rd, ls), it.basis_get(rd, ld), rs, rd.value)
    if it.is_constant(0, rd):
        return Layout._make(rs, rd)
    if not isinstance(ls, tuple):
        return Layout._make(rs, rd * ld)
    if int(rd) == 0:
        raise _Undefined("B has a run-time (dynamic) stride 0, which CuTe divides by; write it as a static _0")
    R = len(ls)
    res_s, res_d = [], []
    rest_s, rest_d = rs, rd
    for i in range(R - 1):
        cs, cd = ls[i], ld[i]
        # CuTe asserts the stride divisibility condition when both operands are static. On run-time
        # values it is checked here only while B still has more than one element to place: a B mode of
        # size 1 maps its one coordinate to 0, so CuTe's result is A o B whatever the stride.
        checked = (it.is_static(cs) and it.is_static(rest_d)) or int(rest_s) != 1
        if checked and not (int(rest_d) % int(cs) == 0 or int(rest_d) < int(cs)):
            raise _Undefined(f"stride divisibility condition fails: stride {fmt(rest_d)} vs shape {fmt(cs)}")
        next_s = it.ceil_div(cs, it.cabs(rest_d))
        next_d = it.ceil_div(it.cabs(rest_d), cs) * it.signum(rest_d)
        # CuTe's static check lets a stride that does not divide a shape through; the elements past that
        # mode then carry into the next one and the result is not A o B. Refuse it instead.
        if abs(int(rest_d)) < int(cs) and int(cs) % abs(int(rest_d)) and int(rest_s) > int(next_s):
            raise _Undefined(f"stride divisibility condition fails: stride {fmt(rest_d)} "
                             f"does not divide shape {fmt(cs)}")
        if it.is_constant(1, next_s) or it.is_constant(1, rest_s):
            rest_d = next_d
            continue
        new_s = it.cmin2(next_s, rest_s)
        if int(new_s) == 0 or int(rest_s) % int(new_s) != 0:
            raise _Undefined(f"shape divisibility condition fails: shape {fmt(rest_s)} vs {fmt(new_s)}")
        res_s.append(new_s)
        res_d.append(rest_d * cd)
        rest_s = it.div(rest_s, new_s)
        rest_d = next_d
    if not res_s:
        return Layout._make(rest_s, rest_d * ld[-1])
    if it.is_constant(1, rest_s):
        return Layout._make(it.unwrap(tuple(res_s)), it.unwrap(tuple(res_d)))
    return Layout._make(tuple(res_s) + (rest_s,), tuple(res_d) + (rest_d * ld[-1],))


def composition(a, b, c=None):
    """Functional composition ``R = A o B`` with ``R(i) == A(B(i))`` and a shape compatible with B.

    B may be a Layout, a tiler (tuple of layouts / integers / ``_``, applied mode by mode), an integer, or
    ``_``. A may be a Layout, a Swizzle or a composed layout. ``composition(A, offset, B)`` builds the
    composed layout ``A o offset o B``.
    """
    cl = _cl()
    if c is not None:
        return cl.composition3(a, b, c)
    if isinstance(a, cl.Swizzle) or _is_composed(a) or isinstance(b, cl.Swizzle) or _is_composed(b):
        return cl.composition_any(a, b)
    if not isinstance(a, Layout):
        raise bad_argument("A", a, "composition needs a Layout, Swizzle or composed layout on the left")
    if isinstance(b, list):
        b = tuple(b)
    try:
        if isinstance(b, Layout):
            flat = _coalesce_x(a, coprofile(b))
            return _verified(a, b, _composition_impl(flat.shape, flat.stride, b.shape, b.stride))
        if isinstance(b, tuple):
            if len(b) > int(a.rank):
                raise bad_argument("B", _tiler_str(b), f"the tiler has more modes than A = {a}")
            return make_layout(*[composition(get(a, i), t) for i, t in enumerate(b)])
        if b is _:
            return a
        if it.is_int(b):
            flat = _coalesce_x(a)
            return _verified(a, Layout._make(b, C(1)), _composition_impl(flat.shape, flat.stride, b, C(1)))
    except _Undefined as e:
        raise LayoutError(f"composition(A={a}, B={_tiler_str(b)}) is not defined: {e}") from None
    raise bad_argument("B", b, "composition needs a Layout, a tiler tuple, an integer or _ on the right")


VERIFY_MAX = 1 << 16


def _verified(a, b, r):
    """Check ``r(i) == a(b(i))`` over b's domain (up to VERIFY_MAX coordinates): CuTe distributes A over
    the modes of B, which is only the composition when those modes do not carry into one another in A."""
    n = int(it.product(b.shape))
    if n > VERIFY_MAX or any(isinstance(d, ScaledBasis) for d in it.flatten_to_tuple((a.stride, b.stride))):
        return r
    from flashsim.layout.evaluate import evaluate

    bi = evaluate(b)
    if n and bi.min() < 0:
        return r
    got, exp = evaluate(r), evaluate(a, bi)
    if got.shape != exp.shape or not (got == exp).all():
        i = int((got != exp).nonzero()[0][0]) if got.shape == exp.shape else 0
        raise _Undefined(f"the modes of B carry into one another in A: the distributed result gives "
                         f"{int(got[i])} at i={i} but A(B({i})) = A({int(bi[i])}) = {int(exp[i])}")
    return r


def _tiler_str(b):
    if isinstance(b, tuple):
        return it.Shown("<" + ", ".join(_tiler_str(e) for e in b) + ">")
    return fmt(b) if not is_layout(b) else str(b)


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


# ---------------------------------------------------------------------------------------------
# Recasting (elements of one width viewed as elements of another)
# ---------------------------------------------------------------------------------------------


def _upcast(n, s, d):
    if isinstance(s, tuple):
        return make_layout(*[_upcast(n, si, di) for si, di in zip(s, d)])
    if it.is_constant(0, d):
        return Layout._make(s, d)
    if it.is_static(d):
        if int(d) % n != 0 and n % int(d) != 0:
            raise LayoutError(f"upcast<{n}>: stride {fmt(d)} and {n} do not divide one another")
        return Layout._make(it.ceil_div(s, it.ceil_div(C(n), it.cabs(d))), it.signum(d) * it.ceil_div(it.cabs(d), C(n)))
    return Layout._make(s, it.div(d, C(n)))


def upcast(n, x):
    """View a layout of elements as a layout of n-element vectors (CuTe ``upcast<N>``)."""
    if _is_composed(x):
        return _cl().upcast_composed(n, x)
    if it.is_int(x):
        return it.div(x, C(n))
    return _upcast(int(n), x.shape, x.stride)


def _downcast(n, s, d):
    if isinstance(s, tuple):
        return make_layout(*[_downcast(n, si, di) for si, di in zip(s, d)])
    if it.is_constant(1, d) or it.is_constant(-1, d):
        return Layout._make(s * C(n), d)
    return Layout._make(s, d * C(n))


def downcast(n, x):
    if _is_composed(x):
        return _cl().downcast_composed(n, x)
    if it.is_int(x):
        return x * C(n)
    return _downcast(int(n), x.shape, x.stride)


def recast_layout(old_bits: int, new_bits: int, x):
    """Reinterpret a layout of old_bits-wide elements as one of new_bits-wide elements."""
    from math import gcd

    g = gcd(new_bits, old_bits)
    num, den = new_bits // g, old_bits // g
    if num == 1 and den == 1:
        return x
    if num == 1:
        return downcast(den, x)
    if den == 1:
        return upcast(num, x)
    return downcast(den, upcast(num, x))


# ---------------------------------------------------------------------------------------------
# print_layout: CuTe's console table of a rank-2 layout
# ---------------------------------------------------------------------------------------------


def _num_digits(x: int) -> int:
    for k in range(1, 10):
        if x < 10 ** k:
            return k
    return 10


def print_layout(x) -> str:
    """CuTe's ``print_layout`` of a rank-2 layout (or composed layout), as a string, byte for byte."""
    if int(rank(x)) != 2:
        raise bad_argument("layout", str(x), "print_layout needs a rank-2 layout")
    M, N = int(size(x, 0)), int(size(x, 1))
    w = _num_digits(int(cosize(x))) + 2
    vals = _table(x, M, N)
    out = [str(x) + "\n", "    "]
    out += [f"  {n:{w - 2}d} " for n in range(N)]
    out.append("\n")
    sep = "    " + ("+" + "-" * w) * N + "+\n"
    for m in range(M):
        out.append(sep)
        out.append(f"{m:2d}  ")
        out += [f"| {int(v):{w - 2}d} " for v in vals[m]]
        out.append("|\n")
    out.append(sep)
    return "".join(out)


def _table(x, M, N):
    from flashsim.layout.evaluate import evaluate

    flat = evaluate(x)
    return flat.reshape(N, M).T.tolist()
