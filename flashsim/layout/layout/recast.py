"""Recasting: a layout of elements of one width viewed as a layout of elements of another (CuTe's
``upcast`` / ``downcast`` / ``recast_layout``)."""

from __future__ import annotations

from flashsim.layout import inttuple as it
from flashsim.layout.inttuple import C, fmt
from flashsim.layout.layout.core import Layout, LayoutError, _cl, _is_composed, make_layout


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
