"""Packed 16-bit SASS semantics: HFMA2, HADD2, HMUL2 (f16x2, and bf16x2 with .BF16_V2), over
flashsim.numerics.half. ``HADD2.F32`` (one half widened to f32) stays with the f32 conversions.

Operands: a register (``.H0_H0`` / ``.H1_H1`` broadcast one half to both; ``.H0_NH1`` reads {hi: h0, lo: -h1};
``-``/``|..|`` act on each half after the selector), RZ, or an immediate pair printed ``hi, lo`` (two tokens, the high half first: ptxas loads
32-bit constants as ``HFMA2.MMA Rd, -RZ, RZ, hi, lo``). nvdisasm prints the immediates of a .BF16_V2 form as
bf16 values (``3, 0.5`` is 0x40403F00; ``9.183549615799121156e-41`` the smallest subnormal); one that is not
exactly a bf16 (f16) value is refused. A NaN immediate is printed without its payload (``+QNAN``): it reads
as one NaN, which gives these instructions the same result as any other NaN (the NaN rule below).

The bf16x2 forms (HFMA2[.MMA].BF16_V2, HADD2.BF16_V2, HMUL2.BF16_V2: ``fma.rn.bf16x2``, ``add.rn.bf16x2``,
``mul.rn.bf16x2``, which NVRTC 13.0 and ptxas 12.8 emit for __hfma2 / __hadd2 / __hsub2 / __hmul2 / __hneg2 /
__habs2 on __nv_bfloat162; __hadd2 is mostly HFMA2.MMA.BF16_V2 d, a, 1, 1, b and __hmul2 HFMA2 d, a, b, -RZ)
follow the PTX ISA (9.7.4, "Half Precision Floating-Point Instructions"): each half one IEEE operation with
a single round to nearest even; subnormal inputs and results kept (these forms have no .ftz); -0 as IEEE 754
(x + (-x) = +0, -0 + -0 = -0, the sign of a zero product the XOR of the signs). The NaN they return the PTX
ISA leaves unspecified ("Half-precision instructions return an unspecified NaN"); flashsim gives 0x7FFF, the
upper half of the f32 canonical NaN 0x7FFFFFFF and what flashsim's cvt.rn.bf16.f32 gives a NaN. For these
bf16x2 instructions that rule is not measured: the differential fuzzer's bfadd2 / bffma2 (flashsim.fuzz),
whose operands include bf16 NaN and infinity halves (0x7FC00000, 0x7FA00000, 0xFFC00000, 0x7F807F80), decide
it on the GPU. .RELU (whose NaN rule, canonical NaN per the PTX ISA, and -0 rule are unmeasured) stays refused.
"""

from __future__ import annotations

import numpy as np

from flashsim.numerics import half
from flashsim.sass import ops_float
from flashsim.sass.program import Ctx, semantic

_SIGNS = np.uint32(0x80008000)
_ABS = np.uint32(0x7FFF7FFF)


def _operands(ctx: Ctx, fmt: str, end: int | None = None):
    """Readers of the source operands (after the destination, before ``end``), pairing immediate tokens."""
    ops = ctx.ops
    end = len(ops) if end is None else end
    readers = []
    i = 1
    while i < end:
        op = ops[i]
        if op.kind in ("imm", "fimm"):
            ctx.need(i + 1 < end and ops[i + 1].kind in ("imm", "fimm"), f"a single packed immediate in {ctx.ins.text}")
            hi, lo = (_imm16(ctx, ops[j], fmt) for j in (i, i + 1))
            v = np.uint32((hi << 16) | lo)
            readers.append(lambda m, v=v: v)
            i += 2
            continue
        ctx.need(op.kind in ("r", "ur"), f"operand {op.text} of {ctx.ins.name}")
        base = ctx.raw(i)
        sfx = set(op.suffix)
        ctx.need(sfx <= {"H0_H0", "H1_H1", "H0_NH1"} and len(sfx) <= 1, f"operand selector {op.text}")
        ctx.need(not ("H0_NH1" in sfx and op.absolute), f"operand selector {op.text} with |..|")
        neg, absolute = op.neg, op.absolute

        def rd(m, base=base, sfx=sfx, neg=neg, absolute=absolute):
            x = np.asarray(base(m), np.uint32)
            if "H0_H0" in sfx:
                x = (x & np.uint32(0xFFFF)) * np.uint32(0x10001)
            elif "H1_H1" in sfx:
                x = (x >> np.uint32(16)) * np.uint32(0x10001)
            elif "H0_NH1" in sfx:
                # {hi: h0, lo: -h1}: the halves swapped and the new low half's sign flipped (ptxas pairs it with
                # a PRMT that swaps the halves to build __halves2half2(lo, -hi)); a leading '-' then flips both
                x = ((x << np.uint32(16)) | (x >> np.uint32(16))) ^ np.uint32(0x8000)
            if absolute:
                x = x & _ABS
            if neg:
                x = x ^ _SIGNS
            return x
        readers.append(rd)
        i += 1
    return readers


#: nvdisasm's NaN immediates carry no payload; every reader of a packed immediate gives the same result for
#: every NaN (HSET2's compares by IEEE 754; HFMA2 / HADD2 / HMUL2 by flashsim's NaN rule, 0x7FFF for any NaN
#: operand, which is unmeasured for bf16: see above), so one NaN pattern stands for all
_NAN_IMM = ("+QNAN", "QNAN", "-QNAN", "+SNAN", "SNAN", "-SNAN")


def _imm16(ctx: Ctx, op, fmt: str) -> int:
    text = op.text.strip()
    special = {"+INF": np.inf, "INF": np.inf, "-INF": -np.inf, **{k: np.nan for k in _NAN_IMM}}
    try:
        value = special[text] if text in special else float(int(text, 16)) if text.startswith(("0x", "-0x")) else float(text)
        return half.to_bits(value, fmt)
    except ValueError as exc:
        raise ctx.unsupported(f"the packed immediate {text!r} ({exc})")


def _half_factory(kind: str):
    def factory(ctx: Ctx):
        mods = ctx.mods - {"MMA"}
        if kind == "add" and "F32" in mods:
            ctx.need("BF16_V2" not in mods, f"{ctx.ins.name}")  # HADD2.F32 widens an f16 half
            return ops_float.hadd2(ctx)
        fmt = "bf16" if "BF16_V2" in mods else "f16"
        ctx.need(not (mods - {"FTZ", "SAT", "RELU", "BF16_V2"}), f"{ctx.ins.name}")
        kw = dict(fmt=fmt, ftz="FTZ" in mods, sat="SAT" in mods)
        relu = "RELU" in mods
        readers = _operands(ctx, fmt)
        want = {"fma": 3, "add": 2, "mul": 2}[kind]
        ctx.need(len(readers) == want, f"{ctx.ins.text}")
        wd = ctx.dst(0)

        def run(m, ex):
            vals = [np.asarray(r(m), np.uint32) for r in readers]
            shape = np.broadcast_shapes(*(v.shape for v in vals))
            vals = [np.broadcast_to(v, shape) for v in vals]
            out = np.zeros(shape, np.uint32)
            for sh in (0, 16):
                parts = [((v >> np.uint32(sh)) & np.uint32(0xFFFF)).astype(np.uint16) for v in vals]
                if kind == "fma":
                    h = half.fma(*parts, relu=relu, **kw)
                elif kind == "add":
                    h = half.add(*parts, **kw)
                else:
                    h = half.mul(*parts, **kw)
                out |= h.astype(np.uint32) << np.uint32(sh)
            wd(m, out, ex)
        return run
    return factory


_ONE = {"f16": 0x3C00, "bf16": 0x3F80}


@semantic("HSET2", family="half")
def hset2(ctx: Ctx):
    # HSET2[.BF].cmp.bop[.FTZ] d, a, b, c: per half, r = (a cmp b) bop c (c a predicate); d's half is 1.0
    # with .BF (boolean float), else all ones, where r holds, and 0 where not (set.<cmp>.f16x2.f16x2 /
    # .u32.f16x2). Ordered compares are false on NaN, the U forms true, as for FSETP.
    mods = ctx.mods
    cmp = next((k for k in ("LTU", "EQU", "LEU", "GTU", "NEU", "GEU", "NUM", "NAN", "LT", "EQ", "LE", "GT",
                            "NE", "GE", "T", "F") if k in mods), None)
    bop = next((k for k in ops_float._BOP if k in mods), None)
    ctx.need(cmp is not None and bop is not None and not (mods - {cmp, bop, "BF", "FTZ", "BF16_V2"}),
             f"HSET2 form {ctx.ins.name}")
    fmt = "bf16" if "BF16_V2" in mods else "f16"
    ctx.need(ctx.ops[-1].kind == "p", f"{ctx.ins.text} (a predicate last)")
    readers = _operands(ctx, fmt, end=len(ctx.ops) - 1)
    ctx.need(len(readers) == 2, f"{ctx.ins.text}")
    rc = ctx.pred(len(ctx.ops) - 1)
    true_half = np.uint32(_ONE[fmt] if "BF" in mods else 0xFFFF)
    f, g = ops_float._FCMP[cmp], ops_float._BOP[bop]
    ftz = "FTZ" in mods
    wd = ctx.dst(0)

    def run(m, ex):
        a, b = (np.asarray(r(m), np.uint32) for r in readers)
        a, b = np.broadcast_arrays(a, b)
        c = np.asarray(rc(m), bool)
        out = np.zeros(np.broadcast_shapes(a.shape, c.shape), np.uint32)
        for sh in (0, 16):
            x, y = (((v >> np.uint32(sh)) & np.uint32(0xFFFF)).astype(np.uint16) for v in (a, b))
            with np.errstate(invalid="ignore"):
                r = f(half.to_value(x, half._fmt(fmt), ftz), half.to_value(y, half._fmt(fmt), ftz))
            out |= np.where(g(r, c), true_half, np.uint32(0)) << np.uint32(sh)
        wd(m, out, ex)
    return run


semantic("HFMA2", family="half")(_half_factory("fma"))
semantic("HADD2", family="half")(_half_factory("add"))
semantic("HMUL2", family="half")(_half_factory("mul"))
