"""CuTe ``Swizzle<B,M,S>``, ``ComposedLayout`` (``A o offset o B``) and slicing through a swizzle.

A swizzle XORs the B bits that sit |S| above bit M+B... onto the B bits at M (cute/swizzle.hpp)::

    offset bits:  ... | YYY (B bits at M+S) | ... | ZZZ (B bits at M) | M low bits kept
    Sw<B,M,S>(x) = x ^ ((x & yyy_msk) >> S)          (shift left when S < 0)

The numeric XOR on ints and numpy arrays is ``flashsim.swizzle.cute_swizzle``; this module adds what
CuTe's printing depends on: the static/dynamic bits of an offset (``MixedBits``) and the rules by which
slicing a swizzled layout either keeps the swizzle (``Sw<..> o off o L``) or folds it into a plain layout
(cute/swizzle_layout.hpp ``slice_and_offset``).
"""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout import layout as L
from flashsim.layout.inttuple import C, fmt
from flashsim.layout.layout import Layout, LayoutError
from flashsim.swizzle import cute_swizzle

_ALL = 0xFFFFFFFF


def _shiftr(x, s: int):
    return x >> C(s) if s >= 0 else x << C(-s)


class Swizzle:
    """CuTe ``Swizzle<BBits, MBase, SShift>``: ``x ^ ((x & yyy_msk) >> S)``; prints ``Sw<B,M,S>``."""

    __slots__ = ("B", "M", "S")

    def __init__(self, B, M, S=None):
        if S is None:
            S = B
        for name, v in (("B", B), ("M", M), ("S", S)):
            if not it.is_int(v):
                raise bad_argument(name, v, "Swizzle parameters must be integers")
        B, M, S = int(B), int(M), int(S)
        if B < 0 or M < 0:
            raise bad_argument("Swizzle<B,M,S>", (B, M, S), "B and M must be >= 0")
        if abs(S) < B:
            raise bad_argument("Swizzle<B,M,S>", (B, M, S), "|S| must be >= B (the YYY and ZZZ fields may not overlap)")
        if B + M + abs(S) > 31:
            raise bad_argument("Swizzle<B,M,S>", (B, M, S), "the swizzled bits must lie below bit 31")
        self.B, self.M, self.S = B, M, S

    @property
    def bit_msk(self):
        return (1 << self.B) - 1

    @property
    def yyy_msk(self):
        return C(self.bit_msk << (self.M + max(0, self.S)))

    @property
    def zzz_msk(self):
        return C(self.bit_msk << (self.M - min(0, self.S)))

    @property
    def swizzle_code(self):
        return int(self.yyy_msk) | int(self.zzz_msk)

    def __str__(self):
        return it.Shown(f"Sw<{self.B},{self.M},{self.S}>")

    __repr__ = __str__

    def __eq__(self, o):
        return isinstance(o, Swizzle) and (o.B, o.M, o.S) == (self.B, self.M, self.S)

    def __hash__(self):
        return hash(("Sw", self.B, self.M, self.S))

    def __call__(self, x):
        if isinstance(x, MixedBits) or (it.is_int(x) and int(x) < 0):
            return _sw_apply(self, x)  # bits partly known at run time (or two's complement): the mask algebra
        if it.is_int(x):  # an offset: flashsim.swizzle's, static if x is
            y = cute_swizzle(int(x), self.B, self.M, self.S)
            return C(y) if isinstance(x, C) else type(x)(y)
        return cute_swizzle(x, self.B, self.M, self.S)

    def _size(self, *idx):
        return C(1 << (self.M + self.B + abs(self.S)))


def _sw_apply(sw, x):
    y = _and(x, sw.yyy_msk)
    return _xor(x, _shr(y, sw.S))


def make_swizzle(Y: int, Z: int) -> Swizzle:
    """The swizzle whose YYY/ZZZ masks are Y and Z (CuTe ``make_swizzle<Y,Z>``)."""
    Y, Z = int(Y) & _ALL, int(Z) & _ALL
    by, bz = bin(Y).count("1"), bin(Z).count("1")
    if by != bz:
        raise LayoutError(f"make_swizzle: Y={Y:#x} and Z={Z:#x} have different numbers of bits")
    tz_y = (Y & -Y).bit_length() - 1 if Y else 32
    tz_z = (Z & -Z).bit_length() - 1 if Z else 32
    M = min(tz_y, tz_z) % 32
    S = tz_y - tz_z
    if by == 0:
        return Swizzle(0, 0, 0)
    if abs(S) < by or M + by + abs(S) > 31:
        raise LayoutError(f"make_swizzle: Y={Y:#x} and Z={Z:#x} overlap; no Swizzle<B,M,S> has these fields")
    sw = Swizzle(by, M, S)
    if (Y | Z) != sw.swizzle_code:
        raise LayoutError(f"make_swizzle: Y={Y:#x}, Z={Z:#x} are not two contiguous, equal bit fields")
    return sw


# ---------------------------------------------------------------------------------------------
# MixedBits: an offset whose bits are partly static, partly dynamic (cute/swizzle.hpp)
# ---------------------------------------------------------------------------------------------


class MixedBits:
    """Static bits ``S``, dynamic-bit mask ``F`` and the dynamic bits' run-time value ``d``."""

    __slots__ = ("S", "F", "d")

    def __init__(self, S: int, F: int, d: int):
        self.S, self.F, self.d = S, F, d & F

    @property
    def value(self) -> int:
        return self.S | self.d

    def __int__(self):
        return self.value

    def __str__(self):
        return f"M_{self.S}|({self.d}&{self.F})={self.value}"

    __repr__ = __str__


def _trip(x):
    if isinstance(x, MixedBits):
        return x.S, x.F, x.d
    if type(x) is C:
        return int(x) & _ALL, 0, 0
    return 0, _ALL, int(x) & _ALL


def _norm(S, F, d):
    """CuTe make_mixed_bits: static bits win; all-static results are plain static integers."""
    S &= _ALL
    F &= _ALL & ~S
    if F == 0:
        return C(S)
    return MixedBits(S, F, d)


def _and(a, b):
    if it.is_int(a) and it.is_int(b) and not (isinstance(a, MixedBits) or isinstance(b, MixedBits)):
        return a & b
    S0, F0, d0 = _trip(a)
    S1, F1, d1 = _trip(b)
    return _norm(S0 & S1, (S1 & F0) | (S0 & F1) | (F0 & F1), ((S1 & F0) & d0) | ((S0 & F1) & d1) | (d0 & d1))


def _xor(a, b):
    if it.is_int(a) and it.is_int(b):
        return a ^ b
    S0, F0, d0 = _trip(a)
    S1, F1, d1 = _trip(b)
    return _norm((~S0 & S1 & ~F0) | (S0 & ~S1 & ~F1), F0 | F1, (S0 | d0) ^ (S1 | d1))


def _shr(a, s: int):
    if it.is_int(a):
        return _shiftr(a, s)
    S0, F0, d0 = _trip(a)
    if s >= 0:
        return _norm(S0 >> s, F0 >> s, d0 >> s)
    return _norm(S0 << -s, F0 << -s, d0 << -s)


def _num(x) -> int:
    return x.value if isinstance(x, MixedBits) else int(x)


def _is_zero_static(x):
    """(x == _0) as CuTe computes it: True/False when static, None when it depends on run-time bits."""
    if isinstance(x, MixedBits):
        return None
    if type(x) is C:
        return int(x) == 0
    return None


def to_mixed_bits(layout: Layout, coord):
    """The offset ``layout(coord)`` with its bits marked static or dynamic (static strides only)."""
    crd = it.idx2crd(coord, layout.shape)

    def go(s, d, c):
        if isinstance(s, tuple):
            acc = C(0)
            for si, di, ci in zip(s, d, c):
                acc = _xor(acc, go(si, di, ci))
            return acc
        f = (s - C(1)) * d
        if not it.is_static(f):
            raise NotImplementedError(
                f"slicing a swizzled layout with dynamic strides is not modelled (layout {layout})")
        p = int(s) * int(d)
        if p != 0 and p & (p - 1):
            raise LayoutError(f"to_mixed_bits: shape*stride {p} of {layout} is not a power of two")
        v = c * d
        if int(f) == 0 or it.is_static(v):
            return C(int(v) & int(f)) if it.is_static(v) else C(0)
        return MixedBits(0, int(f), int(v))

    return go(layout.shape, layout.stride, crd)


# ---------------------------------------------------------------------------------------------
# ComposedLayout
# ---------------------------------------------------------------------------------------------


class ComposedLayout:
    """``A o offset o B``: i -> A(offset + B(i)); A is a Swizzle or a Layout. Prints ``Sw<3,3,3> o _0 o L``."""

    __slots__ = ("layout_a", "offset", "layout_b", "uint_offset")
    _composed = True

    def __init__(self, layout_a, offset, layout_b, *, uint_offset=False):
        if not isinstance(layout_a, (Swizzle, Layout, ComposedLayout)):
            raise bad_argument("layout_a", layout_a, "expected a Swizzle or a Layout")
        if not isinstance(layout_b, Layout):
            raise bad_argument("layout_b", layout_b, "expected a Layout")
        if not (it.is_int(offset) or isinstance(offset, MixedBits)):
            raise bad_argument("offset", offset, "expected an integer offset")
        self.layout_a, self.offset, self.layout_b = layout_a, offset, layout_b
        # The offset's C++ type is an unsigned constant (what upcast/downcast and the swizzle bit
        # arithmetic return) rather than Int<0>: it prints the same, but CuTe's reduction of
        # Sw<0,M,S> o Int<0> o L to L does not apply to it, here or in what is derived from this layout.
        self.uint_offset = bool(uint_offset)

    def __str__(self):
        return it.Shown(f"{self.layout_a} o {fmt(self.offset)} o {self.layout_b}")

    __repr__ = __str__

    def __eq__(self, o):
        return (isinstance(o, ComposedLayout) and str(o.layout_a) == str(self.layout_a)
                and _num(o.offset) == _num(self.offset) and o.layout_b == self.layout_b)

    def __hash__(self):
        return hash((str(self.layout_a), _num(self.offset), self.layout_b))

    @property
    def shape(self):
        return self.layout_b.shape

    @property
    def rank(self):
        return self.layout_b.rank

    def size(self):
        return self.layout_b.size()

    def cosize(self):
        return L.cosize(self.layout_b)

    def layout(self):
        return self

    def __len__(self):
        return len(self.layout_b)

    def __getitem__(self, i):
        return L.get(self, i)

    def __call__(self, *coord):
        c = coord[0] if len(coord) == 1 else tuple(coord)
        if isinstance(c, list):
            c = tuple(c)
        if it.has_underscore(c):
            return slice_and_offset(c, self)[0]
        idx = self.layout_b(c)
        off = self.offset
        if isinstance(off, MixedBits):
            off = off.value
        return self.layout_a(off + idx)

    def compose(self, *layouts):
        return L.composition(self, layouts[0] if len(layouts) == 1 else tuple(layouts))

    def with_shape(self, *shape):
        return L.composition(self, L.make_layout(shape[0] if len(shape) == 1 else tuple(shape)))

    def tile(self, *layouts):
        return L.tiled_divide(self, layouts[0] if len(layouts) == 1 else tuple(layouts))


def composition3(a, offset, b, uint_offset=False):
    """``composition(A, offset, B)``: the composed layout A o offset o B. ``Sw<0,..> o _0 o B`` is just B
    when the offset is CuTe's ``Int<0>``; an unsigned static 0 (uint_offset) keeps the swizzle."""
    if (isinstance(a, Swizzle) and a.B == 0 and it.is_constant(0, offset) and not uint_offset
            and isinstance(b, Layout)):
        return b
    return ComposedLayout(a, offset, b, uint_offset=uint_offset)


def recompose(x, b):
    """``composition(x.layout_a(), x.offset(), b)``: x's swizzle and offset (of the same type) over b."""
    return composition3(x.layout_a, x.offset, b, x.uint_offset)


def composition_any(a, b):
    if isinstance(a, Swizzle):
        if isinstance(b, Layout):
            return composition3(a, C(0), b)
        if isinstance(b, Swizzle):
            if a.S != b.S:
                raise LayoutError(f"composition({a}, {b}): can only merge swizzles of the same shift")
            return make_swizzle(int(a.yyy_msk) ^ int(b.yyy_msk), int(a.zzz_msk) ^ int(b.zzz_msk))
        raise bad_argument("B", str(b), f"composition({a}, B) needs a Layout or a Swizzle")
    if isinstance(a, ComposedLayout):
        return recompose(a, L.composition(a.layout_b, b))
    if isinstance(a, Layout):
        if isinstance(b, ComposedLayout):
            if not it.is_constant(0, b.offset):
                raise LayoutError(f"composition({a}, {b}) needs the composed layout's offset to be _0")
            return L.composition(L.composition(a, b.layout_a), b.layout_b)
        if isinstance(b, Swizzle):
            if not it.is_static(a.shape) or not it.is_static(a.stride):
                raise LayoutError(f"composition({a}, {b}) needs a static layout")
            y, z = a(b.yyy_msk), a(b.zzz_msk)
            return L.composition(make_swizzle(int(y), int(z)), a)
    raise bad_argument("A", str(a), "composition needs a Layout, Swizzle or composed layout")


def _sw_layouts(sw: Swizzle):
    M, B, S = sw.M, sw.B, abs(sw.S)
    shp = (C(1 << M), C(1 << B), C(1 << (S - B)), C(1 << B), C(1))
    st = it.compact_col_major(shp)
    anti = Layout._make(shp, (st[0], C(0), st[2], C(0), C(1 << (M + B + S))))
    only = Layout._make(shp, (C(0), st[1], C(0), st[3], C(0)))
    return anti, only


def _swizzle_strides(flag: bool, Z, Y, off, B: int):
    out = []
    for i in range(B):
        p = C(1 << i)
        if flag:
            z = _is_zero_static(_and(off, Y << C(i)))
            a, b = Z * p, -Z * p
        else:
            z = _is_zero_static(_and(off, Z << C(i)))
            a, b = (Y + Z) * p, (Y - Z) * p
        if z is None:  # a run-time choice: dynamic unless both candidates are the same constant
            actual = (_num(off) & int((Y if flag else Z) << C(i))) == 0
            out.append(a if int(a) == int(b) else int(a if actual else b))
        else:
            out.append(a if z else b)
    return tuple(out)


def slice_and_offset(coord, x):
    """Slice a composed layout: (sub-layout, offset). Through a swizzle, as CuTe does: the swizzle stays when
    the kept modes reach both a Y bit and its Z partner; otherwise it folds into a plain layout."""
    if isinstance(coord, list):
        coord = tuple(coord)
    if not isinstance(x.layout_a, Swizzle):
        sl, off = L.slice_and_offset(coord, x.layout_b)
        return ComposedLayout(x.layout_a, x.offset + off, sl, uint_offset=x.uint_offset), C(0)
    sw = x.layout_a
    if it.all_underscore(coord):
        return recompose(x, L.slice_(coord, x.layout_b)), C(0)
    anti, only = _sw_layouts(sw)
    sliced = L.slice_(coord, x.layout_b)
    diced = L.dice(coord, x.layout_b)
    diced_coord = it.dice(coord, coord)
    diced_anti = L.composition(anti, diced)
    diced_only = L.composition(only, diced)
    off_only = _xor(x.offset, to_mixed_bits(diced_only, diced_coord))
    off_anti = diced_anti(diced_coord) if diced_coord != () else C(0)
    sliced_only = L.composition(only, sliced)
    active = sliced_only(L.size(sliced_only) - C(1))
    if it.is_static(active) and (int(active) & ~int(_num(_sw_apply(sw, active)))) != 0:
        return composition3(sw, off_only, sliced, True), off_anti  # hits a Y bit and its Z bit: not reducible
    Z = C(int(sw.zzz_msk) & -int(sw.zzz_msk))
    Y = C(int(sw.yyy_msk) & -int(sw.yyy_msk))
    lo = _swizzle_strides(int(Z) < int(Y), Z, Y, off_only, sw.B)
    hi = _swizzle_strides(int(Z) > int(Y), Z, Y, off_only, sw.B)
    M, B, S = sw.M, sw.B, abs(sw.S)
    twos = tuple([C(2)] * B)
    if B == 1:
        twos, lo, hi = twos[0], lo[0], hi[0]
    swl = Layout._make((C(1 << M), twos, C(1 << (S - B)), twos, C(1)),
                       (C(1), lo, C(1 << (M + B)), hi, C(1 << (M + B + S))))
    new_off_static = isinstance(off_only, C) and it.is_static(off_anti)
    v = int(_num(_sw_apply(sw, _num(off_only)))) + int(off_anti)
    return L.composition(swl, sliced), (C(v) if new_off_static else v)


def right_inverse_composed(x):
    if isinstance(x.layout_a, Swizzle) and it.is_constant(0, x.offset):
        return L.composition(L.right_inverse(x.layout_b), x.layout_a)
    return composition3(L.right_inverse(x.layout_b), -_num(x.offset) if not it.is_int(x.offset) else -x.offset,
                        L.right_inverse(x.layout_a))


def left_inverse_composed(x):
    if isinstance(x.layout_a, Swizzle) and it.is_constant(0, x.offset):
        return L.composition(L.left_inverse(x.layout_b), x.layout_a)
    return composition3(L.left_inverse(x.layout_b), -_num(x.offset) if not it.is_int(x.offset) else -x.offset,
                        L.left_inverse(x.layout_a))


def _log2(n: int) -> int:
    if n <= 0 or n & (n - 1):
        raise bad_argument("N", n, "must be a power of two to recast a swizzle")
    return n.bit_length() - 1


def upcast_swizzle(n: int, sw: Swizzle) -> Swizzle:
    new_m = sw.M - _log2(n)
    if new_m >= 0:
        return Swizzle(sw.B, new_m, sw.S)
    return Swizzle(max(sw.B + new_m, 0), 0, sw.S)


def upcast_composed(n, x):
    """CuTe's upcast of A o offset o B: each part upcast; the offset becomes an unsigned constant, so a
    swizzle that shrinks to Sw<0,..> is kept (``Sw<0,0,3> o _0 o L``), not reduced to L."""
    a = upcast_swizzle(int(n), x.layout_a) if isinstance(x.layout_a, Swizzle) else L.upcast(n, x.layout_a)
    return composition3(a, it.div(x.offset, C(int(n))), L.upcast(n, x.layout_b), True)


def downcast_composed(n, x):
    if isinstance(x.layout_a, Swizzle):
        a = Swizzle(x.layout_a.B, x.layout_a.M + _log2(int(n)), x.layout_a.S)
    else:
        a = L.downcast(n, x.layout_a)
    return composition3(a, x.offset * C(int(n)), L.downcast(n, x.layout_b), True)


def logical_product_swizzled(layout, tiler):
    """logical_product(Layout, Sw o _0 o T): the product of the plain layouts, re-swizzled on the result."""
    if not isinstance(tiler.layout_a, Swizzle) or not it.is_constant(0, tiler.offset):
        raise LayoutError(f"logical_product({layout}, {tiler}) needs a swizzle with offset _0")
    sw = tiler.layout_a
    new_layout = L.logical_product(layout, tiler.layout_b)
    _anti, only = _sw_layouts(sw)
    lo = L.composition(only, tiler.layout_b)
    active = int(lo(L.size(lo) - C(1)))
    az, ay = active & int(sw.zzz_msk), active & int(sw.yyy_msk)
    nz = new_layout(C(0), tiler.layout_b(C(az)))
    ny = new_layout(C(0), tiler.layout_b(C(ay)))
    return L.composition(make_swizzle(int(ny), int(nz)), new_layout)
