"""IntTuples (an integer or a tuple of IntTuples): the check of user input and CuTe's tuple algorithms
(cute/algorithm/tuple_algorithms.hpp, cute/int_tuple.hpp)."""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout.inttuple.integers import C, ScaledBasis, _, cmin2, div, fmt, gcd2, is_constant


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
