"""CuTe integers and IntTuples: static ``_8`` vs dynamic ``8`` integers, the tuple algorithms, CuTe printing.

CuTe (cute/numeric/integral_constant.hpp, cute/int_tuple.hpp) distinguishes compile-time integers
(``Int<8>``, printed ``_8``) from run-time ones (``int``, printed ``8``). Which one an operation returns
decides how a layout prints, so this module tracks it exactly:

- ``C(8)`` is a static integer (an ``int`` subclass); a plain Python ``int`` is dynamic.
- static op static -> static; static op dynamic -> dynamic, except CuTe's zero rules:
  ``_0 * d``, ``d * _0``, ``_0 / d``, ``_0 % d``, ``d % _1``, ``_0 & d``, ``d & _0`` are all ``_0``.
- ``min``/``max``/``gcd``/``lcm`` are static only when both operands are.
- Integer division and remainder truncate toward zero, as in C++.

An IntTuple is an integer or a (Python) tuple of IntTuples. ``ScaledBasis`` (``_1@0``) is the stride
type of coordinate (identity) layouts; ``ArithmeticTuple`` is what such a layout maps to.
"""

from __future__ import annotations

import math

from flashsim.errors import bad_argument


class C(int):
    """A static (compile-time) integer, CuTe's ``Int<v>`` / ``_v``; prints with a leading underscore."""

    __slots__ = ()

    def __new__(cls, v=0):
        return int.__new__(cls, v)

    def __repr__(self):
        return f"_{int(self)}"

    __str__ = __repr__

    # arithmetic: static with static stays static; with a dynamic int it becomes dynamic
    def __add__(self, o):
        if type(o) is C:
            return C(int(self) + int(o))
        if isinstance(o, int) and not isinstance(o, bool):
            return int(self) + int(o)
        return NotImplemented

    def __radd__(self, o):
        if isinstance(o, int) and not isinstance(o, bool):
            return int(o) + int(self)
        return NotImplemented

    def __sub__(self, o):
        if type(o) is C:
            return C(int(self) - int(o))
        if isinstance(o, int) and not isinstance(o, bool):
            return int(self) - int(o)
        return NotImplemented

    def __rsub__(self, o):
        if isinstance(o, int) and not isinstance(o, bool):
            return int(o) - int(self)
        return NotImplemented

    def __mul__(self, o):
        if type(o) is C:
            return C(int(self) * int(o))
        if isinstance(o, int) and not isinstance(o, bool):
            return C(0) if int(self) == 0 else int(self) * int(o)  # _0 * d == _0
        return NotImplemented

    def __rmul__(self, o):
        if isinstance(o, int) and not isinstance(o, bool):
            return C(0) if int(self) == 0 else int(o) * int(self)  # d * _0 == _0
        return NotImplemented

    def __and__(self, o):
        if type(o) is C:
            return C(int(self) & int(o))
        if isinstance(o, int) and not isinstance(o, bool):
            return C(0) if int(self) == 0 else int(self) & int(o)
        return NotImplemented

    def __rand__(self, o):
        if isinstance(o, int) and not isinstance(o, bool):
            return C(0) if int(self) == 0 else int(o) & int(self)
        return NotImplemented

    def _bin(self, o, f):
        if type(o) is C:
            return C(f(int(self), int(o)))
        if isinstance(o, int) and not isinstance(o, bool):
            return f(int(self), int(o))
        return NotImplemented

    def __or__(self, o):
        return self._bin(o, lambda a, b: a | b)

    def __ror__(self, o):
        return self._bin(o, lambda a, b: b | a)

    def __xor__(self, o):
        return self._bin(o, lambda a, b: a ^ b)

    def __rxor__(self, o):
        return self._bin(o, lambda a, b: b ^ a)

    def __lshift__(self, o):
        return self._bin(o, lambda a, b: a << b)

    def __rlshift__(self, o):
        return self._bin(o, lambda a, b: b << a)

    def __rshift__(self, o):
        return self._bin(o, lambda a, b: a >> b)

    def __rrshift__(self, o):
        return self._bin(o, lambda a, b: b >> a)

    def __neg__(self):
        return C(-int(self))

    def __pos__(self):
        return self

    def __abs__(self):
        return C(abs(int(self)))

    def __invert__(self):
        return C(~int(self))

    # Python's // and % floor; C++ (and so CuTe) truncates toward zero: both operators go through div()/mod().
    def __floordiv__(self, o):
        return div(self, o)

    def __rfloordiv__(self, o):
        return div(o, self)

    def __mod__(self, o):
        return mod(self, o)

    def __rmod__(self, o):
        return mod(o, self)

    def __reduce__(self):
        return (C, (int(self),))


class Underscore:
    """CuTe's ``_`` (also ``X``): keeps a mode when slicing; counts as a static 0 in index arithmetic."""

    _inst = None

    def __new__(cls):
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self):
        return "_"

    __str__ = __repr__

    def __reduce__(self):
        return (Underscore, ())


_ = Underscore()
X = _


def is_int(x) -> bool:
    """A CuTe integer (static or dynamic); bools and ScaledBasis are not."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_tuple(x) -> bool:
    return isinstance(x, tuple)


def is_underscore(x) -> bool:
    return x is _


def is_constant(v, x) -> bool:
    """CuTe ``is_constant<v, T>``: x is a static integer equal to v."""
    return type(x) is C and int(x) == v


def is_static(x) -> bool:
    """CuTe ``is_static``: every integer in x is static."""
    t = type(x)
    if t is C or x is _:
        return True
    if t is int:
        return False
    if isinstance(x, tuple):
        return all(is_static(e) for e in x)
    if isinstance(x, ScaledBasis):
        return is_static(x.value)
    return False


def _iv(x) -> int:
    return 0 if x is _ else int(x)


def _mk(v: int, static: bool):
    return C(v) if static else int(v)


def _tdiv(a: int, b: int) -> int:
    if b == 0:
        raise bad_argument("divisor", b, "division by zero in layout arithmetic")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def div(a, b):
    """C++ integer ``a / b`` (truncating) with CuTe staticness (``_0 / d`` is ``_0``)."""
    if isinstance(a, ScaledBasis):
        return ScaledBasis(div(a.value, b), a.modes)
    if a is _:
        a = C(0)
    if b is _:
        b = C(0)
    sa, sb = type(a) is C, type(b) is C
    if sa and int(a) == 0:
        return C(0)
    return _mk(_tdiv(int(a), int(b)), sa and sb)


def mod(a, b):
    """C++ integer ``a % b`` (sign of a) with CuTe staticness (``d % _1`` and ``_0 % d`` are ``_0``)."""
    if a is _:
        a = C(0)
    sa, sb = type(a) is C, type(b) is C
    if (sa and int(a) == 0) or (sb and int(b) in (1, -1)):
        return C(0)
    ia, ib = int(a), int(b)
    if ib == 0:
        raise bad_argument("divisor", b, "modulo by zero in layout arithmetic")
    r = abs(ia) % abs(ib)
    return _mk(r if ia >= 0 else -r, sa and sb)


def _named2(f):
    def g(a, b):
        return _mk(f(int(a), int(b)), type(a) is C and type(b) is C)
    return g


cmin2 = _named2(min)
cmax2 = _named2(max)
gcd2 = _named2(math.gcd)
lcm2 = _named2(lambda a, b: abs(a * b) // math.gcd(a, b) if a and b else 0)


def cabs(x):
    if isinstance(x, ScaledBasis):
        return ScaledBasis(cabs(x.value), x.modes)
    return C(abs(int(x))) if type(x) is C else abs(int(x))


def signum(x):
    v = int(x)
    s = (v > 0) - (v < 0)
    return C(s) if type(x) is C else s


def tmin(t):
    """CuTe ``min`` of an IntTuple (fold over its leaves)."""
    if isinstance(t, tuple):
        vals = [tmin(e) for e in t]
        r = vals[0]
        for v in vals[1:]:
            r = cmin2(r, v)
        return r
    return t


def tgcd(*ts):
    vals = []
    for t in ts:
        vals.extend(flatten_to_tuple(t))
    r = vals[0]
    for v in vals[1:]:
        r = gcd2(r, v)
    return r


# ---------------------------------------------------------------------------------------------
# ScaledBasis and ArithmeticTuple (cute/numeric/arithmetic_tuple.hpp): the strides of coordinate layouts
# ---------------------------------------------------------------------------------------------


class ScaledBasis:
    """``value * e_modes``: a stride that moves along mode ``modes`` of a coordinate; prints ``_1@0``."""

    __slots__ = ("value", "modes")

    def __init__(self, value, modes):
        if isinstance(value, ScaledBasis):  # ScaledBasis<ScaledBasis<T,Ms...>,Ns...> == ScaledBasis<T,Ns...,Ms...>
            modes = tuple(modes) + value.modes
            value = value.value
        self.value = value
        self.modes = tuple(int(m) for m in modes)

    def __repr__(self):
        return fmt(self.value) + "".join(f"@{m}" for m in self.modes)

    __str__ = __repr__

    def __mul__(self, o):
        if is_int(o):
            return ScaledBasis(self.value * o, self.modes)
        return NotImplemented

    def __rmul__(self, o):
        if is_int(o):
            return ScaledBasis(o * self.value, self.modes)
        return NotImplemented

    def __add__(self, o):
        if isinstance(o, (ScaledBasis, ArithmeticTuple)):
            return as_arithmetic_tuple(self) + as_arithmetic_tuple(o)
        if o is _ or is_int(o):
            if not self.modes:
                return self.value + o
            if int(_iv(o)) != 0:
                raise bad_argument("offset", o, "only 0 can be added to a ScaledBasis coordinate")
            return self
        return NotImplemented

    __radd__ = __add__

    def __neg__(self):
        return ScaledBasis(-self.value, self.modes)

    def __eq__(self, o):
        return isinstance(o, ScaledBasis) and o.modes == self.modes and int(o.value) == int(self.value)

    def __hash__(self):
        return hash((int(self.value), self.modes))


def E(*modes):
    """The unit basis element ``E<modes...>`` (``_1@m``)."""
    return ScaledBasis(C(1), modes)


class ArithmeticTuple(tuple):
    """A coordinate produced by a coordinate layout; adds element-wise (padding with ``_0``)."""

    def __add__(self, o):
        if isinstance(o, ScaledBasis):
            o = as_arithmetic_tuple(o)
        if isinstance(o, tuple):
            n = max(len(self), len(o))
            a = tuple(self) + (C(0),) * (n - len(self))
            b = tuple(o) + (C(0),) * (n - len(o))
            return ArithmeticTuple(_tadd(x, y) for x, y in zip(a, b))
        if o is _ or is_int(o):
            if _iv(o) != 0:
                raise bad_argument("offset", o, "only 0 can be added to a coordinate tuple")
            return self
        return NotImplemented

    __radd__ = __add__

    def __neg__(self):
        return ArithmeticTuple(_tneg(x) for x in self)


def _tadd(a, b):
    if isinstance(a, tuple) or isinstance(b, tuple):
        return ArithmeticTuple(a if isinstance(a, tuple) else (a,)) + (b if isinstance(b, tuple) else (b,))
    return a + b


def _tneg(a):
    return tuple(_tneg(x) for x in a) if isinstance(a, tuple) else -a


def as_arithmetic_tuple(x):
    if isinstance(x, ScaledBasis):
        v = as_arithmetic_tuple(x.value)
        for m in reversed(x.modes):
            v = ArithmeticTuple((C(0),) * m + (v,))
        return v
    if isinstance(x, tuple):
        return ArithmeticTuple(as_arithmetic_tuple(e) for e in x)
    return x


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


# ---------------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------------


class Shown(str):
    """Text that is already CuTe's print of a value: its repr is itself (so error messages show
    ``stride=(1,2,3)`` rather than a quoted string)."""

    def __repr__(self):
        return str.__str__(self)


def fmt(x) -> str:
    """CuTe's print of an IntTuple: no spaces, static integers as ``_v``, an empty tuple as ``()``."""
    return Shown(_fmt(x))


def _fmt(x) -> str:
    if isinstance(x, tuple):
        return "(" + ",".join(_fmt(e) for e in x) + ")"
    if type(x) is C:
        return f"_{int(x)}"
    if isinstance(x, bool):
        return str(int(x))
    if isinstance(x, int):
        return str(int(x))
    return str(x)


# ---------------------------------------------------------------------------------------------
# Validation of user input
# ---------------------------------------------------------------------------------------------


def as_inttuple(x, name: str, *, allow_basis: bool = False, allow_underscore: bool = False):
    """Check that x is an IntTuple (ints, static ints, nested tuples); numpy integers become ints."""
    if isinstance(x, list):
        x = tuple(x)
    if isinstance(x, tuple):
        return tuple(as_inttuple(e, name, allow_basis=allow_basis, allow_underscore=allow_underscore) for e in x)
    if type(x) is C:
        return x
    if isinstance(x, bool):
        raise bad_argument(name, x, "expected an integer or a tuple of integers, not a bool")
    if isinstance(x, int):
        return int(x)
    if allow_basis and isinstance(x, ScaledBasis):
        return x
    if allow_underscore and x is _:
        return x
    try:
        import numpy as np

        if isinstance(x, np.integer):
            return int(x)
    except ImportError:  # pragma: no cover
        pass
    raise bad_argument(name, x, "expected an integer or a (nested) tuple of integers")


# ---------------------------------------------------------------------------------------------
# Tuple algorithms (cute/algorithm/tuple_algorithms.hpp, cute/int_tuple.hpp)
# ---------------------------------------------------------------------------------------------


def rank(t):
    return C(len(t)) if isinstance(t, tuple) else C(1)


def get(t, *idx):
    for i in idx:
        if isinstance(t, tuple):
            if not 0 <= int(i) < len(t):
                raise bad_argument("index", int(i), f"out of range for {fmt(t)}")
            t = t[int(i)]
        else:
            if int(i) != 0:
                raise bad_argument("index", int(i), f"an integer {fmt(t)} has only mode 0")
    return t


def depth(t):
    if isinstance(t, tuple):
        return C(1 + max((int(depth(e)) for e in t), default=0))
    return C(0)


def product(t):
    """CuTe ``product``/``size`` of an IntTuple (``_1`` for an empty tuple)."""
    if isinstance(t, tuple):
        if not t:
            return C(1)
        r = product(t[0])
        for e in t[1:]:
            r = r * product(e)
        return r
    return t


size_of = product


def product_each(t):
    return tuple(product(e) for e in wrap(t))


def product_like(t, guide):
    """transform_leaf(guide, t, product): the product of the sub-tuple of t under each leaf of guide."""
    if isinstance(guide, tuple):
        return tuple(product_like(get(t, i), g) for i, g in enumerate(guide))
    return product(t)


def tsum(t):
    if isinstance(t, tuple):
        r = C(0)
        for e in t:
            r = r + tsum(e)
        return r
    return t


def inner_product(a, b):
    if isinstance(a, tuple) and isinstance(b, tuple):
        if len(a) != len(b):
            raise bad_argument("(a, b)", (fmt(a), fmt(b)), "mismatched ranks in inner_product")
        r = C(0)
        for x, y in zip(a, b):
            r = r + inner_product(x, y)
        return r
    return a * b


def ceil_div(a, b):
    """CuTe ``ceil_div`` on IntTuples (tuple by int divides left to right, carrying the rest)."""
    if isinstance(a, tuple):
        if isinstance(b, tuple):
            if len(a) < len(b):
                raise bad_argument("(a, b)", (fmt(a), fmt(b)), "ceil_div: divisor has more modes")
            bb = tuple(b) + (C(1),) * (len(a) - len(b))
            return tuple(ceil_div(x, y) for x, y in zip(a, bb))
        out, rest = [], b
        for ai in a:
            out.append(ceil_div(ai, rest))
            rest = ceil_div(rest, ai)
        return tuple(out)
    if isinstance(b, tuple):
        return ceil_div(a, product(b))
    return div(a + b - C(1), b)


def shape_div(a, b):
    """CuTe ``shape_div``: like ceil_div, with the divisibility condition checked on static values."""
    if isinstance(a, tuple):
        if isinstance(b, tuple):
            if len(a) != len(b):
                raise bad_argument("(a, b)", (fmt(a), fmt(b)), "shape_div: mismatched ranks")
            return tuple(shape_div(x, y) for x, y in zip(a, b))
        out, rest = [], b
        for ai in a:
            out.append(shape_div(ai, rest))
            rest = shape_div(rest, ai)
        return tuple(out)
    if isinstance(b, tuple):
        return shape_div(a, product(b))
    if type(a) is C and type(b) is C and int(a) % int(b) != 0 and int(b) % int(a) != 0:
        raise bad_argument("(a, b)", (fmt(a), fmt(b)), "shape_div: neither divides the other (divisibility condition)")
    return div(a + b - C(1), b)


def elem_scale(a, b):
    if isinstance(a, tuple):
        return tuple(elem_scale(x, y) for x, y in zip(a, b))
    return a * product(b)


def congruent(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))
    return not isinstance(a, tuple) and not isinstance(b, tuple)


def weakly_congruent(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(weakly_congruent(x, y) for x, y in zip(a, b))
    return not isinstance(a, tuple)


def compatible(a, b) -> bool:
    """Shape a is compatible with shape b: same size and every coordinate of a is one of b."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(compatible(x, y) for x, y in zip(a, b))
    if not isinstance(a, tuple):
        return int(a) == int(product(b))
    return False


def evenly_divides(shape, tiler) -> bool:
    if isinstance(tiler, tuple):
        if len(tiler) > len(wrap(shape)):
            return False
        return all(evenly_divides(get(shape, i), t) for i, t in enumerate(tiler))
    return int(product(shape)) == int(product(tiler)) * int(product(ceil_div(shape, tiler)))


def filter_zeros(a, b=None):
    """Replace the elements of b paired with a static ``_0`` in a by ``_1`` (b defaults to a)."""
    if b is None:
        b = a
    if isinstance(a, tuple):
        return tuple(filter_zeros(x, y) for x, y in zip(a, b))
    if is_constant(0, a):
        return repeat_like(b, C(1))
    return b


def repeat_like(t, x):
    if isinstance(t, tuple):
        return tuple(repeat_like(e, x) for e in t)
    return x


def repeat(n, x):
    return x if n == 1 else (x,) * n


def wrap(t):
    return t if isinstance(t, tuple) else (t,)


def unwrap(t):
    while isinstance(t, tuple) and len(t) == 1:
        t = t[0]
    return t


def flatten_to_tuple(t):
    if isinstance(t, tuple):
        out = []
        for e in t:
            out.extend(flatten_to_tuple(e))
        return tuple(out)
    return (t,)


def flatten(t):
    return flatten_to_tuple(t) if isinstance(t, tuple) else t


def unflatten(flat, profile):
    def go(flat_t, prof):
        if isinstance(prof, tuple):
            out = []
            for p in prof:
                sub, flat_t = go(flat_t, p)
                out.append(sub)
            return tuple(out), flat_t
        return flat_t[0], flat_t[1:]

    res, rest = go(flatten_to_tuple(flat), profile)
    if rest:
        raise bad_argument("profile", fmt(profile), f"does not use all of {fmt(flat)}")
    return res


def append(t, x, n=None):
    """CuTe ``append`` (one element) or ``append<N>`` (pad to rank N with x)."""
    if n is None:
        return tuple(t) + (x,) if isinstance(t, tuple) else (t, x)
    if isinstance(t, tuple):
        if n < len(t):
            raise bad_argument("N", n, f"append<N> needs N >= rank {len(t)}")
        return tuple(t) + (x,) * (n - len(t))
    return t if n == 1 else (t,) + (x,) * (n - 1)


def prepend(t, x, n=None):
    if n is None:
        return (x,) + tuple(t) if isinstance(t, tuple) else (x, t)
    if isinstance(t, tuple):
        if n < len(t):
            raise bad_argument("N", n, f"prepend<N> needs N >= rank {len(t)}")
        return (x,) * (n - len(t)) + tuple(t)
    return t if n == 1 else (x,) * (n - 1) + (t,)


def replace(t, i, x):
    if isinstance(t, tuple):
        return t[:i] + (x,) + t[i + 1:]
    return x


def replace_front(t, x):
    return (x,) + t[1:] if isinstance(t, tuple) else x


def replace_back(t, x):
    return t[:-1] + (x,) if isinstance(t, tuple) else x


def remove(t, i):
    return t[:i] + t[i + 1:]


def take(t, b, e):
    return tuple(wrap(t)[b:e])


def zip_tuple(t):
    """CuTe ``zip`` of a tuple of tuples (transpose); a tuple of integers becomes a 1-tuple."""
    if isinstance(t, tuple):
        if t and isinstance(t[0], tuple):
            n = len(t[0])
            for e in t:
                if not isinstance(e, tuple) or len(e) != n:
                    raise bad_argument("t", fmt(t), "zip: mismatched ranks")
            return tuple(tuple(e[j] for e in t) for j in range(n))
        return (t,)
    return t


def zip2_by(t, guide):
    if isinstance(guide, tuple):
        if not isinstance(t, tuple) or len(t) < len(guide):
            raise bad_argument("guide", fmt(guide), f"zip2_by: more modes than {fmt(t)}")
        split = [zip2_by(t[i], g) for i, g in enumerate(guide)]
        return (tuple(s[0] for s in split), tuple(s[1] for s in split) + tuple(t[len(guide):]))
    if not isinstance(t, tuple) or len(t) != 2:
        raise bad_argument("t", fmt(t), "zip2_by: expected a rank-2 tuple")
    return t


def has_underscore(c) -> bool:
    if c is _:
        return True
    return isinstance(c, tuple) and any(has_underscore(e) for e in c)


def all_underscore(c) -> bool:
    if c is _:
        return True
    return isinstance(c, tuple) and all(all_underscore(e) for e in c)


def _select_parts(c, t, under: bool):
    """The leaves of t whose coordinate in c is ``_`` (under=True) or is not (False): kept modes are
    flattened one level below the top, as CuTe's slice and dice do."""
    def lift(a, b):
        if isinstance(a, tuple):
            _check_slice_rank(a, b)
            return sum((lift(x, y) for x, y in zip(a, b)), ())
        return (b,) if (a is _) == under else ()

    if isinstance(c, tuple):
        _check_slice_rank(c, t)
        return sum((lift(x, y) for x, y in zip(c, t)), ())
    return t if (c is _) == under else ()


def slice_(c, t):
    """CuTe ``slice``: keep the parts of t under ``_`` in coordinate c (flattening kept modes one level)."""
    return _select_parts(c, t, True)


def dice(c, t):
    """CuTe ``dice``: keep the parts of t under the non-``_`` parts of coordinate c."""
    return _select_parts(c, t, False)


def _check_slice_rank(c, t):
    if not isinstance(t, tuple) or len(c) != len(t):
        raise bad_argument("coord", fmt(c), f"rank does not match {fmt(t)}")


# ---------------------------------------------------------------------------------------------
# Strides and coordinates (cute/stride.hpp)
# ---------------------------------------------------------------------------------------------


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
