"""CuTe integers: static ``_8`` vs dynamic ``8``, their arithmetic, ``_``, the ScaledBasis strides, CuTe printing.

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
