"""Double-precision SASS semantics (the D* family), each a thin call into flashsim.numerics.fp64: DADD / DMUL /
DFMA (.RZ, .RM, .RP), DSETP (every compare and predicate combination; .MIN / .MAX, the predicates of
min.f64 / max.f64). A binary64 operand is a register pair (Rn, Rn+1), a uniform pair, a 64-bit constant or
an immediate double (Ctx.f64). The conversions with an .F64 side (F2F, F2I, I2F, FRND) are ops_float's.
Each form is exercised by a probe of gpu/kernels/probe_double.cu (tests/test_double_probes.py).
"""

from __future__ import annotations

import numpy as np

from flashsim.numerics import fp64
from flashsim.sass import ops_float
from flashsim.sass.ops_float import _BOP, _FCMP
from flashsim.sass.program import Ctx, semantic

_RND = {"RZ": "rz", "RM": "rm", "RP": "rp"}


def _rnd(ctx: Ctx) -> str:
    r = [k for k in _RND if k in ctx.mods]
    ctx.need(len(r) <= 1, f"{ctx.ins.name}")
    return _RND[r[0]] if r else "rn"


def _bc(*xs):
    return ops_float._bc(*xs, dtype=np.uint64)


#: opcode -> (operands, the correctly rounded operation of flashsim.numerics.fp64)
_ARITH = {"DADD": (2, fp64.add), "DMUL": (2, fp64.mul), "DFMA": (3, fp64.fma)}


@semantic(*_ARITH, family="double")
def darith(ctx: Ctx):
    # DADD / DMUL / DFMA[.RZ|.RM|.RP] d, a, b[, c]: add / mul / fma.<rnd>.f64; ptxas's neg.f64 / abs.f64 are
    # DADD d, -RZ, -a / |a|
    n, op = _ARITH[ctx.ins.opcode]
    rnd = _rnd(ctx)
    readers = [ctx.f64(i) for i in range(1, n + 1)]
    raws = [_raw64(ctx, i) for i in range(1, n + 1)]
    order = _NAN_ORDER[ctx.ins.opcode]
    wd = ctx.dst64(0)

    def run(m, ex):
        r = op(*_bc(*(r(m) for r in readers)), rnd)
        nan = fp64.is_nan(r)
        if nan.any():
            r = np.where(nan, nan_result(_bc(*(x(m) for x in raws)), order), r)
        wd(m, r, ex)
    return run


#: which source operand's NaN a NaN result of DADD / DMUL / DFMA carries when several are NaNs, in SASS
#: operand order (0 = a): the H200's (probe_dnan, traces/double, 2026-12-02: 8,192 cases x 3 builds)
_NAN_ORDER = {"DADD": (1, 0), "DMUL": (1, 0), "DFMA": (1, 2, 0)}


def nan_result(operands, order) -> np.ndarray:
    """The NaN the H200 returns from DADD / DMUL / DFMA: :func:`flashsim.numerics.fp64.nan_result` (the first
    NaN operand quieted, else 0xFFF8000000000000) over the operands in ``order``, as the registers hold them (a
    '-' or '|x|' modifier does not reach a NaN: neg.f64 and sub.f64 keep its sign)."""
    return fp64.nan_result(*(operands[j] for j in order))


def _raw64(ctx: Ctx, i: int):
    """Operand ``i``'s binary64 bits before its '-' and '|x|' modifiers."""
    op = ctx.ops[i]
    if op.kind == "fimm":
        return ctx.f64(i)  # an immediate carries its sign in its value
    return ctx.u64(i)


_CMPS = ("LTU", "EQU", "LEU", "GTU", "NEU", "GEU", "NUM", "NAN", "LT", "EQ", "LE", "GT", "NE", "GE", "T", "F")


@semantic("DSETP", family="double")
def dsetp(ctx: Ctx):
    # DSETP.cmp.bop p, q, a, b, c: p = (a cmp b) bop c, q = !(a cmp b) bop c (setp.<cmp>{.bop}.f64); no
    # flushing: subnormals compare as themselves.
    # DSETP.MIN.AND / DSETP.MAX.AND p, q, a, b, PT (min.f64 / max.f64): p = the result is a, q = both are NaN;
    # ptxas then selects a or b by p and quiets b's NaN by q (fp64.pick_min / pick_max)
    mods = ctx.mods
    wp, wq = ctx.dst(0), ctx.dst(1)
    ra, rb = ctx.f64(2), ctx.f64(3)
    pick = fp64.pick_min if "MIN" in mods else fp64.pick_max if "MAX" in mods else None
    if pick is not None:
        c = ctx.ops[4]
        ctx.need(mods == {"MIN" if "MIN" in mods else "MAX", "AND"} and c.kind == "p" and c.index == 7 and
                 not c.invert, f"{ctx.ins.name} with a predicate input {c.text}")

        def run_pick(m, ex):
            a, b = _bc(ra(m), rb(m))
            take, both_nan = pick(a, b)
            wp(m, take, ex)
            wq(m, both_nan, ex)
        return run_pick
    cmp = next((k for k in _CMPS if k in mods), None)
    bop = next((k for k in _BOP if k in mods), None)
    ctx.need(cmp is not None and bop is not None, f"DSETP form {ctx.ins.name}")
    rc = ctx.pred(4)
    f, g = _FCMP[cmp], _BOP[bop]

    def run(m, ex):
        a, b = _bc(ra(m), rb(m))
        with np.errstate(invalid="ignore"):
            r = f(fp64.values(a), fp64.values(b))
        c = rc(m)
        wp(m, g(r, c), ex)
        wq(m, g(~r, c), ex)
    return run
