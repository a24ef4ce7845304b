"""CuTe ``Tensor`` = iterator + layout, without data: pointers carry an element offset, coordinate tensors a
coordinate. Slicing a tensor moves the iterator by the sliced-away offset (cute/tensor_impl.hpp).

``make_tensor(layout)`` makes a tensor on an untyped pointer (printed ``ptr(+N)``, N the element offset);
``make_tensor(make_smem_ptr(half_t), layout)`` prints like CuTe (``smem_ptr[16b](0x...) o layout``).
``make_identity_tensor(shape)`` maps every coordinate to itself (``ArithTuple(_0,_0) o (M,N):(_1@0,_1@1)``),
the tensor FlashAttention uses for predication.
"""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout import layout as L
from flashsim.layout.inttuple import C, _, fmt


class Pointer:
    """An element pointer: memory space (``ptr``/``gmem_ptr``/``smem_ptr``), element type, byte base, offset."""

    __slots__ = ("kind", "dtype", "base", "offset")

    def __init__(self, kind="ptr", dtype=None, base=0, offset=C(0)):
        if kind not in ("ptr", "gmem_ptr", "smem_ptr"):
            raise bad_argument("kind", kind, "expected 'ptr', 'gmem_ptr' or 'smem_ptr'")
        if not it.is_int(base) or base < 0:
            raise bad_argument("base", base, "expected a non-negative byte address")
        self.kind, self.dtype, self.base, self.offset = kind, dtype, int(base), offset

    def __add__(self, off):
        return Pointer(self.kind, self.dtype, self.base, self.offset + off)

    @property
    def address(self) -> int:
        """Byte address of the element pointed at (needs an element type)."""
        if self.dtype is None:
            raise bad_argument("dtype", None, "an untyped pointer has no byte address")
        return self.base + int(self.offset) * self.dtype.bits // 8

    def __str__(self):
        if self.dtype is None:
            return f"{self.kind}(+{int(self.offset)})"
        return f"{self.kind}[{self.dtype.bits}b](0x{self.address:x})"

    __repr__ = __str__


class ArithTuple:
    """CuTe's ArithmeticTupleIterator: the iterator of a coordinate tensor; prints ``ArithTuple(_0,_0)``."""

    __slots__ = ("coord",)

    def __init__(self, coord):
        self.coord = coord

    def __add__(self, off):
        return ArithTuple(self.coord + off)

    def __str__(self):
        return "ArithTuple" + fmt(self.coord)

    __repr__ = __str__


def make_gmem_ptr(dtype=None, base=0):
    return Pointer("gmem_ptr", dtype, base)


def make_smem_ptr(dtype=None, base=0):
    return Pointer("smem_ptr", dtype, base)


def make_rmem_ptr(dtype=None, base=0):
    return Pointer("ptr", dtype, base)


class Tensor:
    """An iterator and a layout; ``t(coord)`` gives the element offset (pointer tensors) or the coordinate
    (coordinate tensors); ``t(coord with _)`` is the sliced sub-tensor."""

    __slots__ = ("data", "_layout")

    def __init__(self, data, layout):
        if not L.is_layout(layout):
            raise bad_argument("layout", layout, "a tensor needs a Layout or composed layout")
        self.data, self._layout = data, layout

    def layout(self):
        return self._layout

    @property
    def shape(self):
        return L.shape(self._layout)

    @property
    def stride(self):
        return L.stride(self._layout)

    def size(self):
        return L.size(self._layout)

    @property
    def rank(self):
        return L.rank(self._layout)

    def __str__(self):
        return it.Shown(f"{self.data} o {self._layout}")

    __repr__ = __str__

    def __call__(self, *coord):
        c = coord[0] if len(coord) == 1 else tuple(coord)
        if isinstance(c, list):
            c = tuple(c)
        if it.has_underscore(c):
            sl, off = L.slice_and_offset(c, self._layout)
            return Tensor(self.data + off, sl)
        return _deref(self.data, self._layout(c))

    def __getitem__(self, c):
        return self(c)

    def compose(self, *layouts):
        return Tensor(self.data, self._layout.compose(*layouts))

    def tile(self, *layouts):
        return Tensor(self.data, self._layout.tile(*layouts))


def _deref(data, idx):
    if isinstance(data, ArithTuple):
        return data.coord + idx
    return data.offset + idx


def _as_tensor(x, name="tensor"):
    if isinstance(x, Tensor):
        return x
    if L.is_layout(x):
        return Tensor(Pointer(), x)
    raise bad_argument(name, x, "expected a Tensor or a layout")


def make_tensor(*args):
    """``make_tensor(layout)``, ``make_tensor(shape[, stride])``, ``make_tensor(ptr, layout)`` or
    ``make_tensor(ptr, shape[, stride])``."""
    if not args:
        raise bad_argument("args", args, "make_tensor needs a layout or a shape")
    if isinstance(args[0], (Pointer, ArithTuple)):
        ptr, rest = args[0], args[1:]
    else:
        ptr, rest = Pointer(), args
    if len(rest) == 1 and L.is_layout(rest[0]):
        return Tensor(ptr, rest[0])
    return Tensor(ptr, L.make_layout(*rest))


def make_identity_tensor(shape):
    """The coordinate tensor of shape: element c is c itself (strides ``_1@0``, ``_1@1``, ...)."""
    lay = L.make_identity_layout(shape)
    return Tensor(ArithTuple(it.as_arithmetic_tuple(L.coprofile(lay))), lay)


def make_tensor_like(t, dtype=None):
    """A register tensor with t's shape and the same order of strides (CuTe ``make_tensor_like``)."""
    t = _as_tensor(t)
    dt = dtype if dtype is not None else getattr(t.data, "dtype", None)
    return Tensor(Pointer("ptr", dt), L.make_layout_like(t.layout()))


def make_fragment_like_tensor(t, dtype=None):
    t = _as_tensor(t)
    dt = dtype if dtype is not None else getattr(t.data, "dtype", None)
    return Tensor(Pointer("ptr", dt), L.make_fragment_like(t.layout()))


# -- tensor versions of the divides (make_tensor(data, op(layout, tiler))) ---------------------------


def zipped_divide(t, tiler):
    t = _as_tensor(t)
    return Tensor(t.data, L.zipped_divide(t.layout(), tiler))


def inner_partition(t, tiler, coord):
    tt = zipped_divide(t, tiler)
    R0 = int(L.rank(tt.layout(), 0))
    c0 = _ if R0 == 1 else tuple([_] * R0)
    if isinstance(coord, tuple):
        R1 = int(L.rank(tt.layout(), 1))
        return tt(c0, it.append(coord, _, R1))
    return tt(c0, coord)


def outer_partition(t, tiler, coord):
    tt = zipped_divide(t, tiler)
    R1 = int(L.rank(tt.layout(), 1))
    c1 = _ if R1 == 1 else tuple([_] * R1)
    if isinstance(coord, tuple):
        R0 = int(L.rank(tt.layout(), 0))
        return tt(it.append(coord, _, R0), c1)
    return tt(coord, c1)


def local_tile(t, tiler, coord, proj=None):
    """The tile of t at coord (``_`` in coord keeps that mode of tiles); proj (a Step with ``X``) drops modes."""
    t = _as_tensor(t)
    tiler, coord = _tup(tiler), _tup(coord)
    if proj is not None:
        proj = _tup(proj)
        return local_tile(t, it.dice(proj, tiler), it.dice(proj, coord))
    return inner_partition(t, tiler, coord)


def local_partition(t, tile, index, proj=None):
    """The part of t that thread ``index`` of the thread layout ``tile`` owns."""
    t = _as_tensor(t)
    if proj is not None:
        tile = L.dice(_tup(proj), tile)
    return outer_partition(t, it.product_each(tile.shape), tile.get_flat_coord(index))


def _tup(x):
    return tuple(_tup(e) for e in x) if isinstance(x, list) else x


def print_tensor(t) -> str:
    """CuTe's print_tensor (rank 1 and 2): the tensor, then the offset / coordinate at every position."""
    t = _as_tensor(t)
    out = [str(t) + ":\n"]
    r = int(t.rank)

    def pp(v):
        if isinstance(v, tuple):
            return "  " + fmt(v)
        return f"{int(v):5d}"

    if r == 1:
        for m in range(int(t.size())):
            out.append(pp(t(m)) + "\n")
    elif r == 2:
        for m in range(int(L.size(t.layout(), 0))):
            out.append("".join(pp(t(m, n)) for n in range(int(L.size(t.layout(), 1)))) + "\n")
    else:
        raise bad_argument("tensor", str(t), "print_tensor here supports rank 1 and 2")
    return "".join(out)
