"""The CuTe ``Layout`` type (shape:stride) and its construction: ``make_layout`` and CuTe's other ``make_*``.

The member functions that CuTe defines through the algebra (``layout[i]``, slicing with ``_``, ``cosize``,
``compose``, ``tile``, ...) call the free functions of the modules beside this one, bound at the end.
"""

from __future__ import annotations

from flashsim.errors import ArgumentError, bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout.inttuple import C, ScaledBasis, fmt


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


# The free functions that the member functions above and make_fragment_like call. Their modules build on
# this one, so they are bound once it is complete (flashsim.layout.layout imports this module first).
from flashsim.layout.layout.composition import composition  # noqa: E402
from flashsim.layout.layout.modes import cosize, get, slice_  # noqa: E402
from flashsim.layout.layout.tiling import tiled_divide, tiled_product  # noqa: E402
