"""Functional composition of layouts, ``R = A o B``, with CuTe's divisibility conditions checked and the
result verified against ``A(B(i))``."""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout.inttuple import C, ScaledBasis, _, fmt
from flashsim.layout.layout.core import Layout, LayoutError, _cl, _is_composed, is_layout, make_layout
from flashsim.layout.layout.modes import _coalesce_x, coprofile, get


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
