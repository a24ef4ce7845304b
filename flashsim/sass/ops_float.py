"""Floating-point SASS semantics, each a thin call into flashsim.numerics: FADD/FMUL/FFMA (rounding
modes, .FTZ, .SAT), FMNMX, FSETP, FSEL, FCHK, MUFU, F2FP (f32 pairs to f16x2/bf16x2), F2I / I2F / I2FP
(int <-> float), F2F (f32 to one f16/bf16), HADD2.F32 (f16 to f32). Each form is exercised by a probe of
gpu/kernels/sass_probes.cu (tests/test_sass_probes.py; on the GPU with pytest --gpu).
"""

from __future__ import annotations

import numpy as np

from flashsim.numerics import cvt as cvt_mod
from flashsim.numerics import fp32, fp64, sfu, sfu64
from flashsim.numerics.formats import F32, F64, round_exact
from flashsim.sass.isa import RZ
from flashsim.sass.program import Ctx, semantic

_RND = {"RN": "rn", "RZ": "rz", "RM": "rm", "RP": "rp"}
_SIGN = np.uint32(0x80000000)
_EXP = np.uint32(0x7F800000)
_MAN = np.uint32(0x007FFFFF)


def _bc(*xs, dtype=np.uint32):
    """Operands as ``dtype`` arrays of one common shape (copies only those that must be broadcast)."""
    arrs = [np.asarray(x, dtype) for x in xs]
    shape = np.broadcast_shapes(*(a.shape for a in arrs))
    return [a if a.shape == shape else np.ascontiguousarray(np.broadcast_to(a, shape)) for a in arrs]


def _rnd(ctx: Ctx) -> str:
    r = [k for k in _RND if k in ctx.mods]
    return _RND[r[0]] if r else "rn"


@semantic("FADD", family="float")
def fadd(ctx: Ctx):
    ftz, sat, rnd = "FTZ" in ctx.mods, "SAT" in ctx.mods, _rnd(ctx)
    ra, rb = ctx.f32(1), ctx.f32(2)
    wd = ctx.dst(0)
    one = np.uint32(0x3F800000)

    def run(m, ex):
        a, b = _bc(ra(m), rb(m))
        if rnd == "rn" and not sat:
            r = fp32.add(a, b, ftz=ftz)  # add.rn{.ftz}.f32
        else:  # a * 1 + b rounds once, exactly as the sum does
            r = fp32.fma(a, np.full_like(a, one), b, ftz=ftz, rnd=rnd, sat=sat)
        wd(m, r, ex)
    return run


@semantic("FMUL", family="float")
def fmul(ctx: Ctx):
    ftz, sat, rnd = "FTZ" in ctx.mods, "SAT" in ctx.mods, _rnd(ctx)
    ctx.need(not ({"D2", "D4", "D8", "M2", "M4", "M8"} & ctx.mods), f"FMUL scaling {ctx.ins.name}")
    ra, rb = ctx.f32(1), ctx.f32(2)
    wd = ctx.dst(0)
    # a * b + z rounds once and keeps the product's zero sign when z is the zero that adds nothing: -0
    # (x + -0 = x for every x, +0 included, in rn/rz/rp), or +0 under rm (where +0 + -0 = -0 but
    # -0 + +0 = -0 and +0 + +0 = +0)
    zero = np.uint32(0) if rnd == "rm" else _SIGN

    def run(m, ex):
        a, b = _bc(ra(m), rb(m))
        if rnd == "rn" and not sat:
            r = fp32.mul(a, b, ftz=ftz)
        else:
            r = fp32.fma(a, b, np.full_like(a, zero), ftz=ftz, rnd=rnd, sat=sat)
        wd(m, r, ex)
    return run


@semantic("FFMA", family="float")
def ffma(ctx: Ctx):
    ftz, sat, rnd = "FTZ" in ctx.mods, "SAT" in ctx.mods, _rnd(ctx)
    ra, rb, rc = ctx.f32(1), ctx.f32(2), ctx.f32(3)
    wd = ctx.dst(0)

    def run(m, ex):
        a, b, c = _bc(ra(m), rb(m), rc(m))
        wd(m, fp32.fma(a, b, c, ftz=ftz, rnd=rnd, sat=sat), ex)
    return run


@semantic("FMNMX", family="float")
def fmnmx(ctx: Ctx):
    # FMNMX d, a, b, p: p true -> min, false -> max; a NaN operand is ignored (.NAN: propagated)
    ftz, nan = "FTZ" in ctx.mods, "NAN" in ctx.mods
    ra, rb, rp = ctx.f32(1), ctx.f32(2), ctx.pred(3)
    wd = ctx.dst(0)

    def run(m, ex):
        a, b = _bc(ra(m), rb(m))
        p = rp(m)
        if np.ndim(p) == 0:
            r = fp32.fmin(a, b, ftz=ftz, nan=nan) if bool(p) else fp32.fmax(a, b, ftz=ftz, nan=nan)
        else:
            r = np.where(p, fp32.fmin(a, b, ftz=ftz, nan=nan), fp32.fmax(a, b, ftz=ftz, nan=nan))
        wd(m, r, ex)
    return run


def _flush(x: np.ndarray) -> np.ndarray:
    return np.where((x & _EXP) == 0, x & _SIGN, x)


_FCMP = {
    "LT": lambda a, b: a < b, "EQ": lambda a, b: a == b, "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b,
    "NE": lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b), "GE": lambda a, b: a >= b,
    "LTU": lambda a, b: ~(a >= b), "EQU": lambda a, b: (a == b) | np.isnan(a) | np.isnan(b),
    "LEU": lambda a, b: ~(a > b), "GTU": lambda a, b: ~(a <= b), "NEU": lambda a, b: a != b,
    "GEU": lambda a, b: ~(a < b), "NUM": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
    "NAN": lambda a, b: np.isnan(a) | np.isnan(b), "T": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
    "F": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),
}
_BOP = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}


def _fcompare(ctx: Ctx, a: int, b: int):
    """The compare of operands ``a`` and ``b`` of FSET / FSETP (its .cmp and .FTZ), and the predicate join
    (.bop): ordered compares are false on NaN, the U forms true (setp.<cmp>.f32)."""
    mods = ctx.mods
    cmp = next((k for k in ("LTU", "EQU", "LEU", "GTU", "NEU", "GEU", "NUM", "NAN", "LT", "EQ", "LE", "GT",
                            "NE", "GE", "T", "F") if k in mods), None)
    bop = next((k for k in _BOP if k in mods), None)
    ctx.need(cmp is not None and bop is not None, f"{ctx.ins.opcode} form {ctx.ins.name}")
    ftz = "FTZ" in mods
    ra, rb, f = ctx.f32(a), ctx.f32(b), _FCMP[cmp]

    def compare(m):
        x, y = _bc(ra(m), rb(m))
        if ftz:
            x, y = _flush(x), _flush(y)
        with np.errstate(invalid="ignore"):
            return f(x.view(np.float32), y.view(np.float32))
    return compare, _BOP[bop]


@semantic("FSETP", family="float")
def fsetp(ctx: Ctx):
    # FSETP.cmp[.FTZ].bop p, q, a, b, c: p = (a cmp b) bop c, q = !(a cmp b) bop c
    compare, g = _fcompare(ctx, 2, 3)
    wp, wq = ctx.dst(0), ctx.dst(1)
    rc = ctx.pred(4)

    def run(m, ex):
        r, c = compare(m), rc(m)
        wp(m, g(r, c), ex)
        wq(m, g(~r, c), ex)
    return run


@semantic("FSET", family="float")
def fset(ctx: Ctx):
    # FSET[.BF].cmp[.FTZ].bop d, a, b, c: d = ((a cmp b) bop c) ? (.BF: 1.0f, else 0xFFFFFFFF) : 0
    # (set.<cmp>.<bop>.{f32,u32}.f32)
    compare, g = _fcompare(ctx, 1, 2)
    wd, rc = ctx.dst(0), ctx.pred(3)
    one = np.uint32(0x3F800000 if "BF" in ctx.mods else 0xFFFFFFFF)
    return lambda m, ex: wd(m, np.where(g(compare(m), rc(m)), one, np.uint32(0)).astype(np.uint32), ex)


@semantic("FSEL", family="float")
def fsel(ctx: Ctx):
    ra, rb, rp = ctx.f32(1), ctx.f32(2), ctx.pred(3)
    wd = ctx.dst(0)
    return lambda m, ex: wd(m, np.where(rp(m), ra(m), rb(m)).astype(np.uint32), ex)


@semantic("FCHK", family="float")
def fchk(ctx: Ctx):
    # FCHK p, a, b: true when a / b needs div.rn's slow path. Modelled conservatively (a superset of the
    # device's cases): any operand zero, subnormal, Inf or NaN, or exponents so far apart, or so near the
    # ends of the range, that the fast reciprocal-and-FFMA sequence could overflow or underflow. The slow
    # path computes the correctly rounded quotient, as the fast path does where it is taken, so the
    # quotient's bits do not depend on where the line is drawn (checked on the GPU by the div probes).
    wp = ctx.dst(0)
    ra, rb = ctx.f32(1), ctx.f32(2)

    def run(m, ex):
        a, b = _bc(ra(m), rb(m))
        ea = ((a >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
        eb = ((b >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
        special = (ea == 0) | (ea == 255) | (eb == 0) | (eb == 255)
        diff = ea - eb
        risky = (diff >= 126) | (diff <= -126) | (eb >= 253) | (ea <= 24) | (eb <= 2)
        wp(m, special | risky, ex)
    return run


_MUFU = {
    "EX2": sfu.mufu_ex2, "LG2": sfu.mufu_lg2, "RCP": sfu.mufu_rcp, "TANH": sfu.mufu_tanh,
    "RSQ": sfu.mufu_rsq, "SQRT": sfu.mufu_sqrt, "SIN": sfu.mufu_sin, "COS": sfu.mufu_cos,
}


@semantic("MUFU", family="sfu")
def mufu(ctx: Ctx):
    # MUFU.op d, a: the special-function unit, from the tables measured on all 2^32 inputs (numerics.sfu)
    fn_name = next((k for k in ctx.ins.mods), None)
    if fn_name in _MUFU and len(ctx.ins.mods) == 1:
        f = _MUFU[fn_name]
        ra = ctx.f32(1)
        wd = ctx.dst(0)

        def run(m, ex):
            (a,) = _bc(ra(m))
            wd(m, f(a), ex)
        return run
    if fn_name in ("RCP64H", "RSQ64H") and ctx.ops[1].kind == "fimm" and \
            (ctx.ops[1].value & 0x7FFFFFFF) > 0x7F800000:
        # a NaN constant operand (the division slow path's way of making a NaN): the SFU returns the
        # canonical NaN for NaN input, as every measured MUFU function does
        wd = ctx.dst(0)
        return lambda m, ex: wd(m, np.uint32(0x7FFFFFFF), ex)
    if fn_name in ("RCP64H", "RSQ64H") and len(ctx.ins.mods) == 1 and ctx.ops[1].kind in ("r", "ur"):
        # MUFU.RCP64H / RSQ64H d, a: the result's high word from the source's (a double's high word), as the
        # H200 gives it on all 2^32 inputs (numerics.sfu64); the register operand's bits as they are
        ctx.need(not (ctx.ops[1].neg or ctx.ops[1].absolute), f"operand {ctx.ops[1].text} of {ctx.ins.name}")
        op = fn_name.lower()
        ra = ctx.raw(1)
        wd = ctx.dst(0)

        def run64h(m, ex):
            (a,) = _bc(ra(m))
            wd(m, sfu64.mufu64h(op, a), ex)
        return run64h
    raise ctx.unsupported(f"MUFU.{'.'.join(ctx.ins.mods)} (not yet measured on the GPU)")


@semantic("F2FP", family="cvt")
def f2fp(ctx: Ctx):
    # F2FP[.SATFINITE][.RELU].{F16,BF16}.F32.PACK_AB[.RZ] d, a, b: d = {hi: cvt(a), lo: cvt(b)}
    # (cvt.{rn,rz}{.relu}{.satfinite}.{f16x2,bf16x2}.f32 d, a, b; ptxas also builds a scalar cvt to f16 or
    # bf16 from it with a = RZ). F2FP[...].MERGE_C[.RZ] d, a, c: the scalar cvt{...}.{f16,bf16}.f32 of a in
    # d's low half; its high half is taken from c's (ptxas only emits c = RZ and masks the high half off, so
    # the high half never reaches a program: with another c the instruction refuses).
    mods = ctx.mods
    pack = "PACK_AB" in mods
    ctx.need("F32" in mods and pack != ("MERGE_C" in mods), f"F2FP form {ctx.ins.name}")
    ctx.need(not ({"RM", "RP"} & mods), f"F2FP rounding {ctx.ins.name}")  # cvt.f16x2 has .rn and .rz only
    relu, sat = "RELU" in mods, "SATFINITE" in mods
    rnd = "rz" if "RZ" in mods else "rn"
    to = "bf16" if "BF16" in mods else "f16"
    ctx.need(len(ctx.ops) == 3, f"{ctx.ins.text}")
    ra, rb = ctx.f32(1), ctx.f32(2)
    if not pack:
        ctx.need(ctx.ops[2].kind == "r" and ctx.ops[2].index == RZ,
                 f"{ctx.ins.text} (MERGE_C with a high half other than RZ's)")
    wd = ctx.dst(0)
    conv = cvt_mod.f32_to_bf16 if to == "bf16" else cvt_mod.f32_to_f16

    def run(m, ex):
        a, b = _bc(ra(m), rb(m))
        hi = np.asarray(conv(a, rnd, relu=relu, satfinite=sat), np.uint32)
        if not pack:
            wd(m, hi, ex)  # (c = RZ: a zero high half)
            return
        lo = np.asarray(conv(b, rnd, relu=relu, satfinite=sat), np.uint32)
        wd(m, (hi << np.uint32(16)) | lo, ex)
    return run


def _f32_value(bits: np.ndarray, ftz: bool) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # signalling NaNs
        x = bits.view(np.float32).astype(np.float64)
    if ftz:
        x = np.where((bits & _EXP) == 0, 0.0, x)
    return x


@semantic("F2I", family="cvt")
def f2i(ctx: Ctx):
    # F2I[.FTZ][.U32|.S64|.U64][.F64][.TRUNC|.FLOOR|.CEIL][.NTZ] d, a: cvt.rni/rzi/rmi/rpi.{s,u}{32,64}.{f32,f64}
    # -- round to an integer, saturate to the type's range; NaN gives 0 (32-bit) or 0x8000000000000000 (64-bit)
    mods = ctx.mods
    ftz = "FTZ" in mods
    rnd = "rz" if "TRUNC" in mods else "rm" if "FLOOR" in mods else "rp" if "CEIL" in mods else "rn"
    dst = "u32" if "U32" in mods else "s64" if "S64" in mods else "u64" if "U64" in mods else "s32"
    ctx.need("F16" not in mods and not ({"F64", "FTZ"} <= mods), f"F2I source type in {ctx.ins.name}")
    double = "F64" in mods  # a binary64 source (a register pair): every value is exact in float64
    ra = ctx.f64(1) if double else ctx.f32(1)
    wide = dst.endswith("64")
    wd = ctx.dst64(0) if wide else ctx.dst(0)
    lo, hi = {"s32": (-2.0**31, 2.0**31 - 1), "u32": (0.0, 2.0**32 - 1), "s64": (-2.0**63, 2.0**63 - 1024),
              "u64": (0.0, 2.0**64 - 2048)}[dst]

    def run(m, ex):
        x = fp64.values(ra(m)) if double else _f32_value(_bc(ra(m))[0], ftz)
        with np.errstate(invalid="ignore"):
            r = {"rz": np.trunc, "rm": np.floor, "rp": np.ceil, "rn": np.rint}[rnd](x)
        nan = np.isnan(r)
        r = np.clip(np.where(nan, 0.0, r), lo, hi)
        if dst == "s32":
            out = r.astype(np.int64).astype(np.uint32)
        elif dst == "u32":
            out = r.astype(np.uint64).astype(np.uint32)
        elif dst == "s64":
            out = np.where(x >= 2.0**63, np.uint64(0x7FFFFFFFFFFFFFFF), r.astype(np.int64).view(np.uint64))
        else:
            out = np.where(x >= 2.0**64, np.uint64(0xFFFFFFFFFFFFFFFF), r.astype(np.uint64))
        if wide:
            # measured on the H100 (probe_f2i64, 2026-11-24): a NaN converts to 0x8000000000000000 in all
            # eight 64-bit forms, signed and unsigned alike (the 32-bit forms of an f32 give 0, as the PTX ISA
            # says); the .F64 forms too (probe_d2i, traces/double, 2026-12-02)
            out = np.where(nan, np.uint64(0x8000000000000000), out)
        elif double:
            # a NaN double converts to 0x80000000 in every 32-bit form, signed and unsigned (probe_d2i on the
            # H200, traces/double, 2026-12-02: not the 0 of the f32 forms)
            out = np.where(nan, np.uint32(0x80000000), out)
        wd(m, out, ex)
    return run


def int_to_float(v: np.ndarray, signed: bool, rnd: str, fmt=F32) -> np.ndarray:
    """An integer (int64 / uint64 array) rounded to ``fmt`` bits (F32 or F64) with ``rnd``
    (cvt.rn/rz/rm/rp.{f32,f64}.{s,u}XX)."""
    v = np.asarray(v)
    if signed:
        neg = v < 0
        mag = np.where(neg, -(v.astype(np.int64)), v).astype(np.uint64)
    else:
        neg = np.zeros(v.shape, bool)
        mag = v.astype(np.uint64)
    # round_exact takes magnitudes below 2^63: halve larger ones, keeping the dropped bit as sticky
    big = mag >= np.uint64(1 << 63)
    sticky = big & ((mag & np.uint64(1)) != 0)
    mag = np.where(big, mag >> np.uint64(1), mag)
    exp = big.astype(np.int64)
    return np.asarray(round_exact(neg, mag.astype(np.int64), exp, fmt, rnd, sticky=sticky), fmt.dtype)


@semantic("I2F", "I2FP", family="cvt")
def i2f(ctx: Ctx):
    # I2F[.F32|.F64][.S32|.U32|.S64|.U64][.RN|.RZ|.RM|.RP] d, a (I2FP.F32.{S32,U32}: the same, round to
    # nearest); .F64 writes a register pair (exact from 32-bit sources)
    mods = ctx.mods
    ctx.need(not ({"F16", "BF16"} & mods), f"I2F destination type in {ctx.ins.name}")
    fmt = F64 if "F64" in mods else F32
    src = "u32" if "U32" in mods else "s64" if "S64" in mods else "u64" if "U64" in mods else "s32"
    # .S8 / .U8 / .S16 / .U16 (cvt.f32.{s,u}{8,16}): the low 8 or 16 bits of the register, sign- or
    # zero-extended (form_probes: probe_i2f_sub); every such value is exact in f32
    sub = next((mm for mm in ("S8", "U8", "S16", "U16") if mm in mods), None)
    ctx.need(sub is None or len({"S8", "U8", "S16", "U16", "U32", "S64", "U64"} & mods) == 1,
             f"I2F source type in {ctx.ins.name}")
    rnd = _rnd(ctx)
    ra = ctx.u64(1, imm_high=True) if src.endswith("64") else ctx.raw(1)
    wd = ctx.dst64(0) if fmt is F64 else ctx.dst(0)

    if sub is not None:
        bits = 8 if sub.endswith("8") else 16
        signed_sub = sub.startswith("S")

        def run_sub(m, ex):
            (a,) = np.broadcast_arrays(np.asarray(ra(m), np.uint32))
            v = (a & np.uint32((1 << bits) - 1)).astype(np.int64)
            if signed_sub:
                v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
            wd(m, int_to_float(v, signed_sub, rnd, fmt), ex)
        return run_sub

    def run(m, ex):
        (a,) = np.broadcast_arrays(np.asarray(ra(m)))
        if src == "s32":
            v = np.asarray(a, np.uint32).view(np.int32).astype(np.int64)
        elif src == "u32":
            v = np.asarray(a, np.uint32).astype(np.int64)
        elif src == "s64":
            v = np.asarray(a, np.uint64).view(np.int64)
        else:
            v = np.asarray(a, np.uint64)
        wd(m, int_to_float(v, src[0] == "s", rnd, fmt), ex)
    return run


def _half(x: np.ndarray, suffix: tuple) -> np.ndarray:
    if "H1_H1" in suffix or "H1" in suffix:
        return (x >> np.uint32(16)) & np.uint32(0xFFFF)
    return x & np.uint32(0xFFFF)


@semantic("HADD2", family="half")
def hadd2(ctx: Ctx):
    # HADD2.F32 d, a, b: d = f32(a.half) + f32(b.half) in f32 (ptxas's f16 -> f32 conversion is
    # HADD2.F32 d, -RZ, x.H0_H0, exact)
    ctx.need("F32" in ctx.mods, f"{ctx.ins.name} (f16x2 arithmetic is not modelled yet)")
    ops = ctx.ops
    readers = []
    for i in (1, 2):
        op = ops[i]
        base = ctx.raw(i)
        neg, absolute, sfx = op.neg, op.absolute, op.suffix

        def rd(m, base=base, neg=neg, absolute=absolute, sfx=sfx, zero=op.is_zero_reg):
            h = _half(np.asarray(base(m), np.uint32), sfx)
            f = cvt_mod.f16_to_f32(np.asarray(h, np.uint16)).astype(np.uint32) if not zero else np.uint32(0)
            f = np.asarray(f, np.uint32)
            if absolute:
                f = f & np.uint32(0x7FFFFFFF)
            if neg:
                f = f ^ _SIGN
            return f
        readers.append(rd)
    wd = ctx.dst(0)
    ftz = "FTZ" in ctx.mods

    def run(m, ex):
        a, b = _bc(readers[0](m), readers[1](m))
        wd(m, fp32.add(a, b, ftz=ftz), ex)
    return run


@semantic("F2F", family="cvt")
def f2f(ctx: Ctx):
    # F2F.{F16,BF16}.F32[.RZ|.RM|.RP][.SATFINITE][.RELU] d, a: cvt.<rnd>.{f16,bf16}.f32 of one value; the
    # 16-bit result lands in the low half of d, the high half is zero (ptxas stores (u32)h from it
    # without masking). f32 <-> f64: _f2f_double; other directions (f16 <-> f64, integer widths) are not modelled.
    mods = ctx.mods
    names = ctx.ins.mods
    if tuple(names[:2]) in (("F32", "F64"), ("F64", "F32")):
        return _f2f_double(ctx)
    ctx.need(len(names) >= 2 and names[0] in ("F16", "BF16") and names[1] == "F32", f"F2F form {ctx.ins.name}")
    extra = mods - {"F16", "BF16", "F32", "RN", "RZ", "RM", "RP", "SATFINITE", "RELU", "FTZ"}
    ctx.need(not extra, f"F2F modifiers {'.'.join(sorted(extra))}")
    rnd = _rnd(ctx)
    conv = cvt_mod.f32_to_bf16 if names[0] == "BF16" else cvt_mod.f32_to_f16
    kw = dict(relu="RELU" in mods, satfinite="SATFINITE" in mods, ftz="FTZ" in mods)
    ra = ctx.f32(1)
    wd = ctx.dst(0)

    def run(m, ex):
        (a,) = _bc(ra(m))
        wd(m, np.asarray(conv(a, rnd, **kw), np.uint32), ex)
    return run


def _f2f_double(ctx: Ctx):
    # F2F.F32.F64[.RZ|.RM|.RP] d, a: cvt.<rnd>.f32.f64, IEEE with subnormal results (ptxas builds the .ftz
    # form from it and a flush of its own: a DSETP on |a| and an FMUL by 2^-126); F2F.F64.F32 d, a: cvt.f64.f32,
    # exact into a register pair (numerics.fp64)
    names = ctx.ins.mods
    ctx.need(not (ctx.mods - {"F32", "F64", "RZ", "RM", "RP"}), f"F2F modifiers of {ctx.ins.name}")
    if names[0] == "F32":
        rnd = _rnd(ctx)
        ra, wd = ctx.f64(1), ctx.dst(0)
        return lambda m, ex: wd(m, fp64.to_f32(ra(m), rnd), ex)
    ctx.need(not ({"RZ", "RM", "RP"} & ctx.mods), f"F2F form {ctx.ins.name}")
    ra, wd = ctx.f32(1), ctx.dst64(0)
    return lambda m, ex: wd(m, fp64.from_f32(ra(m)), ex)


_FRND = {"FLOOR": np.floor, "CEIL": np.ceil, "TRUNC": np.trunc}


@semantic("FRND", family="float")
def frnd(ctx: Ctx):
    # FRND[.FLOOR|.CEIL|.TRUNC][.FTZ] d, a: cvt.{rni,rmi,rpi,rzi}{.ftz}.f32.f32, a float rounded to an
    # integral float (ties to even by default); zeros keep their sign (ceil(-0.5) = -0); NaN gives the
    # canonical NaN
    mode = next((k for k in _FRND if k in ctx.mods), None)
    if "F64" in ctx.mods:  # FRND.F64[.FLOOR|.CEIL|.TRUNC]: cvt.r*i.f64.f64 on a register pair (numerics.fp64)
        ctx.need(not (ctx.mods - {"FLOOR", "CEIL", "TRUNC", "F64"}), f"{ctx.ins.name}")
        rnd = {"FLOOR": "rm", "CEIL": "rp", "TRUNC": "rz", None: "rn"}[mode]
        rd, wd64 = ctx.f64(1), ctx.dst64(0)
        return lambda m, ex: wd64(m, fp64.round_integral(rd(m), rnd), ex)
    ctx.need(not (ctx.mods - {"FLOOR", "CEIL", "TRUNC", "FTZ", "F32"}), f"{ctx.ins.name}")
    ftz = "FTZ" in ctx.mods
    f = _FRND[mode] if mode else np.rint
    ra = ctx.f32(1)
    wd = ctx.dst(0)

    def run(m, ex):
        (a,) = _bc(ra(m))
        if ftz:
            a = _flush(a)
        x = a.view(np.float32)
        with np.errstate(invalid="ignore"):
            r = f(x).astype(np.float32).view(np.uint32)
        wd(m, np.where(np.isnan(x), np.uint32(0x7FFFFFFF), r).astype(np.uint32), ex)
    return run
