"""Integer and logic SASS semantics: IADD3, IMAD (every form), LEA, LOP3, PLOP3, SHF, PRMT, ISETP, SEL,
IABS, VIADD, VIMNMX, VIMNMX3, VIADDMNMX, IMNMX, VABSDIFF, VABSDIFF4, POPC, FLO, BREV, SGXT, BMSK, MOV, the uniform
U* forms of each, S2R/S2UR/CS2R, R2UR, P2R/R2P. Bit conventions follow the PTX ISA's integer instructions
(add.cc/addc, mad.lo/hi/wide, shf, prmt, lop3, setp, add/min/max.{u16x2,s16x2}, vabsdiff4); carries travel in
predicates as ptxas emits them. The scalar forms are exercised by a probe of gpu/kernels/sass_probes.cu
(tests/test_sass_probes.py; on the GPU with pytest --gpu); the packed SIMD forms (.16x2, .U16x2 / .S16x2,
VABSDIFF4) and UIMAD.X by tests/test_sass_video.py against the CUDA Math API's definitions, and on the GPU by
the differential fuzzer (flashsim.fuzz).
"""

from __future__ import annotations

import numpy as np

from flashsim.sass.program import Ctx, semantic

M32 = np.uint64(0xFFFFFFFF)
S32 = np.uint64(32)


def _u64(x) -> np.ndarray:
    return np.asarray(x).astype(np.uint64)


def _s64(x) -> np.ndarray:
    return np.asarray(x, np.uint32).view(np.int32).astype(np.int64) if np.ndim(x) else np.int64(np.int32(np.uint32(x)))


def _sx(x) -> np.ndarray:
    """uint32 bits as signed int64 values (arrays and 0-d alike)."""
    return np.asarray(x, np.uint32).view(np.int32).astype(np.int64)


def _lo(x) -> np.ndarray:
    return (np.asarray(x, np.uint64) & M32).astype(np.uint32)


def _split_dsts(ctx: Ctx, max_preds: int):
    """Leading destinations: the register, then up to ``max_preds`` predicate outputs (carry outs)."""
    ops = ctx.ops
    d = 0
    preds = []
    i = 1
    while i < len(ops) and ops[i].kind in ("p", "up") and len(preds) < max_preds:
        preds.append(i)
        i += 1
    return d, preds, i


# ------------------------------------------------------------------------------------------------ adds
@semantic("IADD3", "UIADD3", family="int")
def iadd3(ctx: Ctx):
    # IADD3 d, [c0, [c1,]] a, b, c   (.X: d = a + b + c + cin0 + cin1)
    # A '-' operand enters the adder as ~x with a carry-in of 1 (two's complement), so a subtraction's
    # carry out is "no borrow", as add.cc/sub.cc define it. Stage 1 adds a and b (carry out c0), stage
    # 2 adds c to that (carry out c1); the .X form adds its two carry-in predicates to stage 2.
    if "64" in ctx.mods:
        return _iadd3_64(ctx)
    x = "X" in ctx.mods
    d, preds, i = _split_dsts(ctx, 2)
    srcs = [ctx.ops[j] for j in range(i, i + 3)]
    ctx.need(len(ctx.ops) >= i + 3, "IADD3 with fewer than 3 sources")
    readers = []
    ones = []
    for j, op in enumerate(srcs):
        if op.neg:
            base = ctx.raw(i + j)
            readers.append(lambda m, base=base: ~np.asarray(base(m), np.uint32))
            ones.append(1)
        else:
            readers.append(ctx.u32(i + j))
            ones.append(0)
    cin = [ctx.pred(k) for k in range(i + 3, len(ctx.ops))] if x else []
    wd = ctx.dst(d)
    wp = [ctx.dst(k) for k in preds]
    ra, rb, rc = readers

    def run(m, ex):
        s1 = _u64(ra(m)) + _u64(rb(m)) + np.uint64(ones[0] + ones[1])
        c0 = s1 >> S32
        s2 = (s1 & M32) + _u64(rc(m)) + np.uint64(ones[2])
        for p in cin:
            s2 = s2 + np.asarray(p(m)).astype(np.uint64)
        c1 = s2 >> S32
        wd(m, _lo(s2), ex)
        if wp:
            if len(wp) == 1:
                wp[0](m, (c0 + c1) != 0, ex)
            else:
                wp[0](m, c0 != 0, ex)
                wp[1](m, c1 != 0, ex)
    return run


def _iadd3_64(ctx: Ctx):
    # [U]IADD3.64 d, a, b, c: d:d+1 = a:a+1 + b:b+1 + c:c+1 modulo 2^64 (ptxas 12.8's add.s64 / sub.s64 of
    # uniform values); a '-' register pair enters negated (two's complement in 64 bits); an immediate is the
    # 32-bit field sign-extended to 64 bits; no carry predicates.
    ops = ctx.ops
    ctx.need(len(ops) == 4 and all(o.kind in ("r", "ur", "imm") for o in ops[1:]) and ops[0].kind in ("r", "ur")
             and not any(o.invert or o.absolute for o in ops[1:]), f"{ctx.ins.opcode}.64 with these operands")
    readers = []
    for j in (1, 2, 3):
        op = ops[j]
        if op.kind == "imm":  # '-0x2' parses as -2; 0x80000000 .. 0xffffffff are negative 32-bit fields
            v = int(op.value)
            v = v - (1 << 32) if 0x80000000 <= v < (1 << 32) else v
            readers.append(lambda m, v=np.uint64(v & 0xFFFFFFFFFFFFFFFF): v)
        elif op.neg:
            pair = ctx.u64(j)
            readers.append(lambda m, pair=pair: np.uint64(0) - np.asarray(pair(m), np.uint64))
        else:
            readers.append(ctx.u64(j))
    wd = ctx.dst64(0)
    ra, rb, rc = readers

    def run(m, ex):
        wd(m, np.asarray(ra(m), np.uint64) + np.asarray(rb(m), np.uint64) + np.asarray(rc(m), np.uint64), ex)
    return run


@semantic("VIADD", family="int")
def viadd(ctx: Ctx):
    # VIADD d, a, b: d = a + b (32-bit wrap; '-' negates)
    # VIADD.16x2 d, a, b: each 16-bit half of d = the halves' a + b modulo 2^16 (add.u16x2 / add.s16x2, the same
    # bits: __vadd2). A '-' on b negates each half of b modulo 2^16: ptxas's __vsub2 is add.s16x2 a, b' with b' the
    # two halves of b negated (neg.s16 each), printed VIADD.16x2 d, a, -b, and __vneg2 is ~a + 0x00010001. A '-' on
    # a has not been met and is refused.
    ctx.need(len(ctx.ops) == 3, "VIADD with more than two sources")
    wd = ctx.dst(0)
    if "16x2" in ctx.mods:
        ra, rb = _packed_src(ctx, 1), _packed_src(ctx, 2, neg_ok=True)

        def run16(m, ex):
            a, b = _lanes(ra(m), 16, False), _lanes(rb(m), 16, False)
            wd(m, _join([x + y for x, y in zip(a, b)], 16), ex)
        return run16
    ra, rb = ctx.u32(1), ctx.u32(2)
    return lambda m, ex: wd(m, (np.asarray(ra(m), np.uint32) + np.asarray(rb(m), np.uint32)).astype(np.uint32), ex)


# ------------------------------------------------------------------------------------------------ min / max
# One implementation for the 32-bit forms and the packed ones: .U16x2 / .S16x2 hold two independent 16-bit
# lanes (the low half in bits 0..15), as PTX min/max{.relu}.{u16x2,s16x2} and add.{u16x2,s16x2} define them.
# The forms are those of min()/max() on ints, of the SIMD intrinsics (__vmaxu2, __vmins2, ...) and of sm_90's
# DPX functions (__vimax3_s16x2, __viaddmin_u16x2, __vimax_s32_relu, ...), whose results the CUDA Math API
# defines as max(max(a, b), c), max(a + b, c), max(max(a, b), 0), ... lane by lane.
def _simd_type(ctx: Ctx) -> tuple[int, bool]:
    """(lane width, signed) of a min/max form: .U16x2, .S16x2, .U32, or (no type modifier) signed 32-bit."""
    kinds = [k for k in ("U16x2", "S16x2", "U32") if k in ctx.mods]
    ctx.need(len(kinds) <= 1, f"{ctx.ins.name}")
    kind = kinds[0] if kinds else "S32"
    return (16 if kind.endswith("16x2") else 32), kind.startswith("S")


def _lanes(x, width: int, signed: bool) -> list[np.ndarray]:
    """uint32 words as int64 lane values: [the word] for width 32, [low half, high half] for width 16."""
    x = np.asarray(x, np.uint32).astype(np.int64)
    parts = [x] if width == 32 else [x & 0xFFFF, x >> 16]
    if signed:
        top = 1 << (width - 1)
        parts = [(p ^ top) - top for p in parts]
    return parts


def _join(parts, width: int) -> np.ndarray:
    """Lane values (integers taken modulo 2^width) packed into uint32 words."""
    if width == 32:
        return (np.asarray(parts[0], np.int64) & 0xFFFFFFFF).astype(np.uint32)
    lo, hi = (np.asarray(p, np.int64) & 0xFFFF for p in parts)
    return (lo | (hi << 16)).astype(np.uint32)


def _packed_src(ctx: Ctx, i: int, neg_ok: bool = False):
    """Source ``i`` of a packed form as its 32-bit word: a register, uniform register, constant, or a 32-bit
    immediate (both lanes; nvdisasm prints some as negative 32-bit numbers: VIMNMX.U16x2 R5, R0, -0xaa0bdf8
    is __vmaxu2(x, 0xf55f4208)). '-' (where ``neg_ok``) negates each 16-bit half; '~', '|..|' and lane
    selectors are refused."""
    op = ctx.ops[i]
    ctx.need(op.kind in ("r", "ur", "imm", "c") and not (op.invert or op.absolute or op.suffix)
             and (neg_ok or not op.neg), f"operand {op.text!r} of {ctx.ins.name}")
    r = ctx.raw(i)
    if not op.neg:
        return r

    def rd(m):
        lo, hi = _lanes(r(m), 16, False)
        return _join([-lo, -hi], 16)
    return rd


def _mnmx(ctx: Ctx, nsrc: int, add: bool):
    # d, a, b[, c], p: the lane-wise min (p true) or max (p false) of the sources, after a + b for VIADDMNMX;
    # .RELU (signed forms only) then clamps a negative lane to 0
    ops = ctx.ops
    ctx.need(len(ops) == nsrc + 2 and all(o.kind not in ("p", "up") for o in ops[:nsrc + 1]),
             f"{ctx.ins.text} (the forms with predicate outputs, __vibmax/__vibmin's, are not modelled: which "
             "lane each predicate reports and its tie rule are not established)")
    width, signed = _simd_type(ctx)
    relu = "RELU" in ctx.mods
    ctx.need(signed or not relu, f"{ctx.ins.name}")
    if width == 32:
        srcs = [ctx.u32(i) for i in range(1, nsrc + 1)]
    else:  # '-' only where ptxas puts it: on the addend b of VIADDMNMX (__vmaxu2(__vsub2(a, b), c))
        srcs = [_packed_src(ctx, i, neg_ok=add and i == 2) for i in range(1, nsrc + 1)]
    rp = ctx.pred(nsrc + 1)
    wd = ctx.dst(0)

    def run(m, ex):
        words = [np.asarray(r(m), np.uint32) for r in srcs]
        if add:  # the sum wraps at the lane width before the compare
            a, b = _lanes(words[0], width, False), _lanes(words[1], width, False)
            words = [_join([x + y for x, y in zip(a, b)], width)] + words[2:]
        lanes = [_lanes(w, width, signed) for w in words]
        pick_min = np.asarray(rp(m), bool)
        out = []
        for k in range(len(lanes[0])):
            vals = [v[k] for v in lanes]
            lo, hi = vals[0], vals[0]
            for v in vals[1:]:
                lo, hi = np.minimum(lo, v), np.maximum(hi, v)
            r = np.where(pick_min, lo, hi)
            out.append(np.maximum(r, 0) if relu else r)
        wd(m, _join(out, width), ex)
    return run


@semantic("VIMNMX", "IMNMX", "UIMNMX", family="int")
def imnmx(ctx: Ctx):
    # [U|V]IMNMX[.U32|.U16x2|.S16x2][.RELU] d, a, b, p: p true -> min, false -> max; signed unless .U32 / .U16x2;
    # .RELU then clamps a negative (signed) result to 0 (ptxas's clamp(x, 0, hi) in one instruction)
    return _mnmx(ctx, 2, add=False)


@semantic("VIMNMX3", family="int")
def imnmx3(ctx: Ctx):
    # VIMNMX3[.U32|.U16x2|.S16x2][.RELU] d, a, b, c, p: min(a, b, c) (p true) or max (p false), lane by lane (two
    # nested min()/max() and __vimax3_*/__vimin3_*; .RELU: __vimax3_s32_relu's max(max(max(a, b), c), 0))
    return _mnmx(ctx, 3, add=False)


@semantic("VIADDMNMX", family="int")
def viaddmnmx(ctx: Ctx):
    # VIADDMNMX[.U32|.U16x2|.S16x2][.RELU] d, a, b, c, p: d = min/max(a + b, c), p true -> min; signed unless
    # .U32 / .U16x2; the add wraps at the lane width (__viaddmax_u16x2, __vmaxu2(__vadd2(a, b), c))
    return _mnmx(ctx, 3, add=True)


@semantic("IABS", "UIABS", family="int")
def iabs(ctx: Ctx):
    ra = ctx.u32(1)
    wd = ctx.dst(0)
    # |INT_MIN| wraps to INT_MIN, as abs.s32 does
    return lambda m, ex: wd(m, np.abs(np.asarray(ra(m), np.uint32).view(np.int32)).view(np.uint32), ex)


# ------------------------------------------------------------------------------------------------ IMAD
@semantic("IMAD", "UIMAD", family="int")
def imad(ctx: Ctx):
    # IMAD[.MOV|.SHL|.IADD|.U32][.X] d, a, b, c[, cin]      d = lo32(a * b + c [+ cin])
    # IMAD.WIDE[.U32][.X] d(64), [p,] a, b, c(64)[, cin]    d = a * b (32 x 32 -> 64) + c [+ cin]
    # IMAD.HI[.U32][.X] d, [p,] a, b, c(64)[, cin]          d = hi32(a * b + c [+ cin])
    # Signed unless .U32. The addend of .WIDE and .HI is a 64-bit register pair (c, c+1): mad.hi.u32 d,
    # a, b, z compiles to IMAD.HI.U32 d, a, b, R(2k) with R(2k) = 0 and R(2k+1) = z, and the Newton step
    # of the division idiom to IMAD.HI.U32 r, r, e, R(2k) with R(2k) = 0, R(2k+1) = r (r + umulhi(r, e)).
    # The optional predicate after d receives the carry out of the 64-bit sum (bit 64), as the
    # multiword products of mul.hi.u64 / mad.lo.cc + madc.hi.cc chain it into IMAD.X / IADD3.X.
    # UIMAD is this code on the uniform datapath (URs, a UP carry): ptxas 12.8 and NVRTC 13.0 build
    # __umul64hi of uniform values from UIMAD.WIDE.U32, UIADD3 URZ, UP0, ... and UIMAD.X d, a, b, c, UP0.
    mods = ctx.mods
    signed = "U32" not in mods
    x = "X" in mods
    wide, hi = "WIDE" in mods, "HI" in mods
    d, preds, i = _split_dsts(ctx, 1)
    ctx.need(len(ctx.ops) >= i + 3, f"{ctx.ins.name} with fewer than three sources")
    cin = ctx.pred(i + 3) if x and len(ctx.ops) > i + 3 else None
    wp = ctx.dst(preds[0]) if preds else None
    if wide or hi:
        ctx.need(not (ctx.ops[i].neg or ctx.ops[i + 1].neg or ctx.ops[i + 2].neg or ctx.ops[i + 2].invert),
                 f"a negated or inverted {ctx.ins.name} operand")
        cop = ctx.ops[i + 2]
        pair = cop.kind in ("r", "ur") and (cop.is_zero_reg or cop.index % 2 == 0)
        # .WIDE also reads a 64-bit constant or a (zero-extended) immediate addend; for .HI only the
        # register-pair form is known
        ctx.need(pair or (wide and cop.kind in ("c", "imm")),
                 f"{ctx.ins.name} with the 64-bit addend {cop.text!r} (an even register pair or RZ is modelled)")
        ra, rb, rc = ctx.raw(i), ctx.raw(i + 1), ctx.u64(i + 2)
        w = ctx.dst64(d) if wide else ctx.dst(d)

        def run_wide_hi(m, ex):
            a, b = np.asarray(ra(m), np.uint32), np.asarray(rb(m), np.uint32)
            if signed:
                p = np.asarray(_sx(a) * _sx(b), np.int64).view(np.uint64)
            else:
                p = a.astype(np.uint64) * b.astype(np.uint64)
            c = np.asarray(rc(m), np.uint64)
            s = p + c  # mod 2^64; the carry out of the 64-bit sum below
            carry = s < c
            if cin is not None:
                k = np.asarray(cin(m)).astype(np.uint64)
                s2 = s + k
                carry = carry | (s2 < s)
                s = s2
            w(m, s if wide else (s >> S32).astype(np.uint32), ex)
            if wp is not None:
                wp(m, np.asarray(carry, bool), ex)
        return run_wide_hi
    ctx.need(wp is None, f"{ctx.ins.name} with a carry-out predicate")
    ra, rb, rc = ctx.u32(i), ctx.u32(i + 1), ctx.u32(i + 2)
    wd = ctx.dst(d)

    def run(m, ex):
        p = np.asarray(ra(m), np.uint32).astype(np.uint64) * np.asarray(rb(m), np.uint32).astype(np.uint64)
        s = p + _u64(rc(m))
        if cin is not None:
            s = s + np.asarray(cin(m)).astype(np.uint64)
        wd(m, _lo(s), ex)
    return run


# ------------------------------------------------------------------------------------------------ LEA
@semantic("LEA", "ULEA", family="int")
def lea(ctx: Ctx):
    # LEA    d, [p,] a, b, s          d = (a << s) + b                 carry out p
    # LEA.HI d, [p,] a, b, c, s       d = b + hi32((c:a) << s)         (.SX32: c = sign of a)
    # .X forms add a carry-in predicate (the last operand)
    mods = ctx.mods
    d, preds, i = _split_dsts(ctx, 1)
    hi = "HI" in mods
    sx = "SX32" in mods
    x = "X" in mods
    # a negated shifted operand: (-a) << s and -(a << s) agree modulo 2^32, so the plain form's sum is defined
    # either way; its carry out, a carry in or .HI's 64-bit shift would depend on how the negation is done
    neg = ctx.ops[i].neg
    ctx.need(not neg or not (hi or x or preds), f"a negated LEA shifted operand in {ctx.ins.name} with a carry "
                                                 "or a high part")
    ra = ctx.u32(i) if neg else ctx.raw(i)
    rb = ctx.u32(i + 1)
    j = i + 2
    rc = None
    if hi and not sx:
        rc = ctx.u32(j)
        j += 1
    sh_op = ctx.ops[j]
    ctx.need(sh_op.kind == "imm", "LEA with a register shift amount")
    sh = sh_op.value & 31 if not hi else sh_op.value
    cin = ctx.pred(j + 1) if x and len(ctx.ops) > j + 1 else None
    wd = ctx.dst(d)
    wp = ctx.dst(preds[0]) if preds else None

    def run(m, ex):
        a = np.asarray(ra(m), np.uint32)
        if hi:
            if sx:
                hi_word = (a.view(np.int32) if a.ndim else np.int32(a)) >> 31
                hi_word = np.asarray(hi_word).astype(np.int64).astype(np.uint32)
            else:
                hi_word = np.asarray(rc(m), np.uint32)
            wide = (hi_word.astype(np.uint64) << S32) | a.astype(np.uint64)
            shifted = (wide << np.uint64(sh)) >> S32 if sh < 64 else np.uint64(0)
            shifted = np.asarray(shifted).astype(np.uint64) & M32
        else:
            shifted = (a.astype(np.uint64) << np.uint64(sh)) & M32
        s = shifted + _u64(rb(m))
        if cin is not None:
            s = s + np.asarray(cin(m)).astype(np.uint64)
        wd(m, _lo(s), ex)
        if wp is not None:
            wp(m, (s >> S32) != 0, ex)
    return run


# ------------------------------------------------------------------------------------------------ logic
def lop3(a, b, c, lut: int):
    """The three-input lookup: bit i of the result is lut[(a_i << 2) | (b_i << 1) | c_i] (PTX lop3.b32;
    the table is the result on a = 0xF0, b = 0xCC, c = 0xAA)."""
    a, b, c = (np.asarray(v, np.uint32) for v in (a, b, c))
    out = np.zeros(np.broadcast(a, b, c).shape, np.uint32)
    for k in range(8):
        if (lut >> k) & 1:
            ta = a if k & 4 else ~a
            tb = b if k & 2 else ~b
            tc = c if k & 1 else ~c
            out |= ta & tb & tc
    return out


@semantic("LOP3", "ULOP3", family="int")
def lop3_sem(ctx: Ctx):
    # LOP3.LUT [p,] d, a, b, c, lut, q: d = lut(a, b, c); p = (d != 0) OR q (lop3.or.b32 d|p, ..., q; ptxas
    # writes !PT, OR's neutral input, where there is no q)
    ops = ctx.ops
    pout = None
    i = 0
    if ops[0].kind in ("p", "up"):
        pout, i = 0, 1
    d = i
    ra, rb, rc = ctx.u32(i + 1), ctx.u32(i + 2), ctx.u32(i + 3)
    ctx.need(ops[i + 4].kind == "imm", "LOP3 with a register LUT")
    lut = ops[i + 4].value & 0xFF
    rq = None
    if len(ops) > i + 5:
        q = ops[i + 5]
        ctx.need(q.kind in ("p", "up"), f"LOP3's predicate input {q.text}")
        rq = ctx.pred(i + 5)
    wd = ctx.dst(d)
    wp = ctx.dst(pout) if pout is not None else None

    def run(m, ex):
        r = lop3(ra(m), rb(m), rc(m), lut)
        wd(m, r, ex)
        if wp is not None:
            t = r != 0
            wp(m, t | rq(m) if rq is not None else t, ex)
    return run


@semantic("PLOP3", "UPLOP3", family="int")
def plop3(ctx: Ctx):
    # PLOP3.LUT p, q, a, b, c, lut_p, lut_q: p = lut_p(a, b, c), q = lut_q(a, b, c) on predicates
    ops = ctx.ops
    wp, wq = ctx.dst(0), ctx.dst(1)
    ra, rb, rc = ctx.pred(2), ctx.pred(3), ctx.pred(4)
    lp, lq = ops[5].value & 0xFF, ops[6].value & 0xFF

    def table(a, b, c, lut):
        idx = (np.asarray(a, np.int64) << 2) | (np.asarray(b, np.int64) << 1) | np.asarray(c, np.int64)
        return ((lut >> idx) & 1).astype(bool)

    def run(m, ex):
        a, b, c = ra(m), rb(m), rc(m)
        wp(m, table(a, b, c, lp), ex)
        wq(m, table(a, b, c, lq), ex)
    return run


@semantic("SHF", "USHF", family="int")
def shf(ctx: Ctx):
    # SHF.{L,R}[.W].{U32,S32,U64,S64}[.HI] d, a, s, c: funnel shift of the 64-bit (c:a) by s; .HI keeps the
    # high word, otherwise the low word. Right shifts of signed types are arithmetic. Without .W the
    # amount is clamped to the type's width (shf.clamp, shl/shr: amounts past the width shift everything
    # out); with .W it wraps modulo the width (shf.wrap: s & 31 for 32-bit types, assumed s & 63 for
    # 64-bit ones).
    mods = ctx.mods
    left = "L" in mods
    hi = "HI" in mods
    signed = "S32" in mods or "S64" in mods
    width = 64 if ("U64" in mods or "S64" in mods) else 32
    wrap = "W" in mods
    ra, rs, rc = ctx.u32(1), ctx.u32(2), ctx.u32(3)
    wd = ctx.dst(0)

    def run(m, ex):
        a = _u64(ra(m))
        c = np.asarray(rc(m), np.uint32)
        s = _u64(rs(m))
        s = s & np.uint64(width - 1) if wrap else np.minimum(s, np.uint64(width))
        if left:
            wide = (c.astype(np.uint64) << S32) | a
            r = np.where(s >= 64, np.uint64(0), wide << np.minimum(s, np.uint64(63)))
        elif signed:
            wide = (_sx(c) << np.int64(32)) | a.astype(np.int64)
            r = np.asarray(wide >> np.minimum(s, np.uint64(63)).astype(np.int64), np.int64).view(np.uint64)
        else:
            wide = (c.astype(np.uint64) << S32) | a
            r = np.where(s >= 64, np.uint64(0), wide >> np.minimum(s, np.uint64(63)))
        out = (np.asarray(r, np.uint64) >> S32) if hi else np.asarray(r, np.uint64)
        wd(m, _lo(out), ex)
    return run


#: prmt.b32's special modes (PTX ISA, "prmt"): for each selector value c[1:0], the source byte (of {b, a},
#: a = bytes 0..3, b = bytes 4..7) that lands in d.b0, d.b1, d.b2, d.b3
_PRMT_MODES = {
    "F4E": ((0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6)),
    "B4E": ((0, 7, 6, 5), (1, 0, 7, 6), (2, 1, 0, 7), (3, 2, 1, 0)),
    "RC8": ((0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)),
    "ECL": ((0, 1, 2, 3), (1, 1, 2, 3), (2, 2, 2, 3), (3, 3, 3, 3)),
    "ECR": ((0, 0, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2), (0, 1, 2, 3)),
    "RC16": ((0, 1, 0, 1), (2, 3, 2, 3), (0, 1, 0, 1), (2, 3, 2, 3)),
}


@semantic("PRMT", "UPRMT", family="int")
def prmt(ctx: Ctx):
    # PRMT[.mode] d, a, sel, b: byte i of d = a byte of {b, a} (a bytes 0..3, b bytes 4..7). Default mode:
    # byte sel_i & 7, where selector bit 3 of the nibble replicates that byte's sign bit (prmt.b32). The
    # modes F4E/B4E/RC8/ECL/ECR/RC16 pick by sel[1:0] from the table above (prmt.b32.<mode>).
    modes = ctx.mods - {"B32"}
    ctx.need(len(modes) <= 1 and modes <= set(_PRMT_MODES), f"PRMT mode {'.'.join(sorted(modes))}")
    mode = next(iter(modes), None)
    ra, rs, rb = ctx.u32(1), ctx.u32(2), ctx.u32(3)
    wd = ctx.dst(0)
    table = np.array(_PRMT_MODES[mode], np.uint64) if mode else None

    def byte_of(both, idx):
        return ((both >> (idx * np.uint64(8))) & np.uint64(0xFF)).astype(np.uint32)

    def run(m, ex):
        a, b = _u64(ra(m)), _u64(rb(m))
        sel = np.asarray(rs(m), np.uint32)
        both = a | (b << S32)
        out = np.zeros(np.broadcast(a, b, sel).shape, np.uint32)
        if table is not None:
            rows = table[(sel & np.uint32(3)).astype(np.int64)]  # (..., 4)
            for i in range(4):
                out |= byte_of(both, rows[..., i]) << np.uint32(8 * i)
            wd(m, out, ex)
            return
        for i in range(4):
            nib = (sel >> np.uint32(4 * i)) & np.uint32(0xF)
            byte = byte_of(both, (nib & np.uint32(7)).astype(np.uint64))
            sign = np.where((byte & np.uint32(0x80)) != 0, np.uint32(0xFF), np.uint32(0))
            byte = np.where((nib & np.uint32(8)) != 0, sign, byte)
            out |= byte << np.uint32(8 * i)
        wd(m, out, ex)
    return run


_CMP = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
        "GE": np.greater_equal}
_BOP = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}


@semantic("ISETP", "UISETP", family="int")
def isetp(ctx: Ctx):
    # ISETP.cmp[.U32].bop[.EX] p, q, a, b, c[, lo]: p = (a cmp b) bop c, q = !(a cmp b) bop c (signed unless
    # .U32). .EX compares the high words of 64-bit values: lo is the low words' comparison by the same
    # cmp, used on equal high words (p = hi_strict | (hi_eq & lo); EQ: hi_eq & lo; NE: hi_ne | lo).
    mods = ctx.mods
    cmp = next((k for k in _CMP if k in mods), None)
    bop = next((k for k in _BOP if k in mods), None)
    ctx.need(cmp is not None and bop is not None, f"ISETP form {ctx.ins.name}")
    signed = "U32" not in mods
    ex_form = "EX" in mods
    wp, wq = ctx.dst(0), ctx.dst(1)
    ra, rb, rc = ctx.u32(2), ctx.u32(3), ctx.pred(4)
    rlo = ctx.pred(5) if ex_form else None
    f, g = _CMP[cmp], _BOP[bop]

    def run(m, ex):
        a, b = np.asarray(ra(m), np.uint32), np.asarray(rb(m), np.uint32)
        if signed:
            a, b = a.view(np.int32) if a.ndim else np.int32(a), b.view(np.int32) if b.ndim else np.int32(b)
        r = f(a, b)
        if ex_form:
            lo = rlo(m)
            eq = np.equal(a, b)
            if cmp == "EQ":
                r = eq & lo
            elif cmp == "NE":
                r = (~eq) | lo
            else:
                strict = {"LT": np.less, "LE": np.less, "GT": np.greater, "GE": np.greater}[cmp](a, b)
                r = strict | (eq & lo)
        c = rc(m)
        wp(m, g(r, c), ex)
        wq(m, g(np.logical_not(r), c), ex)
    return run


@semantic("SEL", "USEL", family="int")
def sel(ctx: Ctx):
    # SEL d, a, b, p: d = p ? a : b
    ra, rb, rp = ctx.u32(1), ctx.u32(2), ctx.pred(3)
    wd = ctx.dst(0)
    return lambda m, ex: wd(m, np.where(rp(m), ra(m), rb(m)).astype(np.uint32), ex)


@semantic("POPC", "UPOPC", family="int")
def popc(ctx: Ctx):
    ra = ctx.u32(1)
    wd = ctx.dst(0)
    return lambda m, ex: wd(m, np.bitwise_count(np.asarray(ra(m), np.uint32)).astype(np.uint32), ex)


@semantic("FLO", "UFLO", family="int")
def flo(ctx: Ctx):
    # FLO[.U32|.S32][.SH] d, a: bit position of the most significant 1 (0xFFFFFFFF when none);
    # .SH gives the shift amount (31 - position) instead. .S32 finds the first bit that differs from the sign.
    mods = ctx.mods
    signed = "U32" not in mods
    shamt = "SH" in mods
    ra = ctx.u32(1)
    wd = ctx.dst(0)

    def run(m, ex):
        a = np.asarray(ra(m), np.uint32)
        if signed:
            a = np.where((a >> np.uint32(31)) != 0, ~a, a).astype(np.uint32)
        nz = a != 0
        pos = np.where(nz, 31 - _clz(a), -1)
        if shamt:
            pos = np.where(nz, 31 - pos, -1)
        wd(m, np.asarray(pos).astype(np.int64).astype(np.uint32), ex)
    return run


def _clz(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.uint32)
    n = np.zeros(a.shape, np.int64)
    x = a.astype(np.uint64)
    for sh in (16, 8, 4, 2, 1):
        mask = x < (np.uint64(1) << np.uint64(32 - sh))
        n = np.where(mask, n + sh, n)
        x = np.where(mask, x << np.uint64(sh), x)
    return np.where(a == 0, 32, n)


@semantic("BREV", "UBREV", family="int")
def brev(ctx: Ctx):
    ra = ctx.u32(1)
    wd = ctx.dst(0)

    def run(m, ex):
        a = np.asarray(ra(m), np.uint32)
        out = np.zeros(a.shape, np.uint32)
        for i in range(32):
            out |= ((a >> np.uint32(i)) & np.uint32(1)) << np.uint32(31 - i)
        wd(m, out, ex)
    return run


@semantic("SGXT", "USGXT", family="int")
def sgxt(ctx: Ctx):
    # SGXT[.W][.U32] d, a, b: the low N bits of a, sign-extended (zero-extended with .U32) to 32 bits (PTX
    # szext.{clamp,wrap}.{s32,u32}; ptxas also builds bfe from it). N = b & 31 with .W (wrap); without it a
    # b of 32 or more leaves a unchanged (clamp). N = 0 gives 0.
    wrap, unsigned = "W" in ctx.mods, "U32" in ctx.mods
    ra, rb = ctx.u32(1), ctx.u32(2)
    wd = ctx.dst(0)

    def run(m, ex):
        a = np.asarray(ra(m), np.uint32).astype(np.uint64)
        b = np.asarray(rb(m), np.uint32).astype(np.uint64)
        n = b & np.uint64(31)
        big = np.zeros(b.shape, bool) if wrap else b >= np.uint64(32)
        hi = np.where(big, np.uint64(0), (M32 << n) & M32)  # the bits above the field
        sign = np.zeros(a.shape, bool) if unsigned else \
            (n != 0) & ~big & (((a >> ((n - np.uint64(1)) & np.uint64(31))) & np.uint64(1)) != 0)
        d = (a & ~hi & M32) | np.where(sign, hi, np.uint64(0))
        wd(m, d.astype(np.uint32), ex)
    return run


@semantic("BMSK", "UBMSK", family="int")
def bmsk(ctx: Ctx):
    # BMSK[.W] d, a, b: b ones starting at bit a (PTX bmsk.{clamp,wrap}.b32). Both positions are taken mod 32;
    # without .W (clamp) a >= 32 gives 0 and b >= 32 gives the bits from a up; a + b >= 32 also runs to bit 31.
    wrap = "W" in ctx.mods
    ra, rb = ctx.u32(1), ctx.u32(2)
    wd = ctx.dst(0)

    def run(m, ex):
        a = np.asarray(ra(m), np.uint32).astype(np.uint64)
        b = np.asarray(rb(m), np.uint32).astype(np.uint64)
        a1, b1 = a & np.uint64(31), b & np.uint64(31)
        total = a1 + b1
        mask0 = (M32 << a1) & M32
        over = total >= np.uint64(32)
        if not wrap:
            mask0 = np.where(a >= np.uint64(32), np.uint64(0), mask0)
            over = over | (a >= np.uint64(32)) | (b >= np.uint64(32))
        mask1 = np.where(over, np.uint64(0), np.where(b1 == 0, M32, (M32 << np.minimum(total, np.uint64(31))) & M32))
        wd(m, (mask0 & ~mask1 & M32).astype(np.uint32), ex)
    return run


@semantic("MOV", "UMOV", family="int")
def mov(ctx: Ctx):
    # MOV d, a[, mask]: the optional lane mask is a scheduling hint
    ra = ctx.raw(1)
    wd = ctx.dst(0)
    return lambda m, ex: wd(m, ra(m), ex)


@semantic("S2R", "S2UR", "CS2R", family="int")
def s2r(ctx: Ctx):
    # S2R d, SR_x; CS2R d(.32|64), SR_x (CS2R SRZ zeroes a pair)
    op = ctx.ins.opcode
    if op == "CS2R":
        src = ctx.ops[1]
        if src.name == "SRZ":
            w = ctx.dst64(0) if "32" not in ctx.mods else ctx.dst(0)
            return lambda m, ex: w(m, np.uint64(0), ex)
        if src.name == "SR_CLOCKLO":
            w = ctx.dst64(0)
            return lambda m, ex: w(m, np.uint64(m.clock), ex)
        ctx.need(False, f"CS2R of {src.name}")
    r = ctx.special(ctx.ops[1])
    wd = ctx.dst(0)
    return lambda m, ex: wd(m, r(m), ex)


@semantic("R2UR", family="int")
def r2ur(ctx: Ctx):
    # R2UR ud, r: the value of the lowest active lane (ptxas uses it for values every lane holds)
    if len(ctx.ops) == 3:
        return _r2ur_pred(ctx)
    src = ctx.ops[1]
    ctx.need(src.kind == "r", f"R2UR of {src.text}")
    idx = src.index
    wd = ctx.dst(0)
    g = ctx.ins.guard
    if g is not None and g.kind == "p" and g.index != 7:
        # @P R2UR ud, r (ptxas's loop over the lanes of a per-lane value, one ELECTed lane at a time): the
        # value of the lowest lane where the guard holds
        def run_guarded(m, ex, lanes, act):
            first = np.argmax(lanes, axis=2)
            v = np.zeros((m.A, m.W), np.uint32) if idx == 255 else \
                np.take_along_axis(m.R[idx], first[..., None], axis=2)[..., 0]
            wd(m, v, ex)
        run_guarded.lanes = True
        return run_guarded

    # the lowest lane executing it: in divergent code, runnable lanes at another PC hold other values
    def run(m, ex, lanes, act):
        if idx == 255:
            v = np.zeros((m.A, m.W), np.uint32)
        else:
            first = np.argmax(lanes, axis=2)
            v = np.take_along_axis(m.R[idx], first[..., None], axis=2)[..., 0]
        wd(m, v, ex)
    run.lanes = True
    return run


def _r2ur_pred(ctx: Ctx):
    # [@P] R2UR[.OR] p, ud, r: ud = r of the lowest executing lane; p (per executing lane) = r differs from it
    # (.OR: p |= that). ptxas's loop over the distinct values of a per-lane operand of a uniform-only
    # instruction (SYNCS.EXCH.64 with per-lane values) chains these and runs again while any lane's p holds;
    # the loop's own code (lanes whose p is false take the uniform value) shows that p means "differs".
    ops = ctx.ops
    ctx.need(ops[0].kind == "p" and ops[1].kind == "ur" and ops[2].kind == "r" and set(ctx.ins.mods) <= {"OR"},
             f"{ctx.ins.text}")
    wp, wd = ctx.dst(0), ctx.dst(1)
    idx, pi, orr = ops[2].index, ops[0].index, "OR" in ctx.mods

    def run(m, ex, lanes, act):
        first = np.argmax(lanes, axis=2)
        vals = np.zeros(m.st.shape, np.uint32) if idx == 255 else m.R[idx]
        v = np.take_along_axis(vals, first[..., None], axis=2)[..., 0]
        wd(m, v, ex)
        diff = vals != v[..., None]
        if orr and pi != 7:
            diff = diff | m.P[pi]
        wp(m, diff, lanes)
    run.lanes = True
    return run


@semantic("P2R", family="int")
def p2r(ctx: Ctx):
    # P2R d, PR, a, mask: d = (a & ~mask) | (PR & mask), where bit i of PR is Pi (ptxas saves predicates
    # across code that needs them all this way; .B1-.B3 forms place them in another byte)
    ops = ctx.ops
    ctx.need(not (ctx.mods & {"B1", "B2", "B3"}) and len(ops) == 4 and ops[1].name == "PR" and ops[3].kind == "imm",
             f"{ctx.ins.name} form")
    mask = ops[3].value & 0xFFFFFFFF
    ctx.need(mask < 0x80, f"{ctx.ins.name} of PT (mask {mask:#x})")
    ra = ctx.u32(2)
    wd = ctx.dst(0)
    bits = [i for i in range(7) if (mask >> i) & 1]

    def run(m, ex):
        pr = np.zeros(m.st.shape, np.uint32)
        for i in bits:
            pr |= m.P[i].astype(np.uint32) << np.uint32(i)
        wd(m, (np.asarray(ra(m), np.uint32) & np.uint32(~mask & 0xFFFFFFFF)) | pr, ex)
    return run


@semantic("R2P", family="int")
def r2p(ctx: Ctx):
    # R2P PR, a, mask: Pi = bit i of a, for each bit i set in mask (the inverse of P2R)
    # R2P PR, a.B1, mask (a byte selector on a, .B1 .. .B3): the bits of that byte (bit 8k + i for Pi)
    ops = ctx.ops
    ctx.need(not (ctx.mods & {"B1", "B2", "B3"}) and len(ops) == 3 and ops[0].name == "PR" and ops[2].kind == "imm",
             f"{ctx.ins.name} form")
    sel = set(ops[1].suffix)
    ctx.need(sel <= {"B1", "B2", "B3"} and len(sel) <= 1, f"operand {ops[1].text} of {ctx.ins.name}")
    shift = 8 * int(next(iter(sel))[1]) if sel else 0
    mask = ops[2].value & 0x7F
    ra = ctx.u32(1)
    bits = [i for i in range(7) if (mask >> i) & 1]

    def run(m, ex):
        a = np.broadcast_to(np.asarray(ra(m), np.uint32), m.st.shape)
        for i in bits:
            v = ((a >> np.uint32(shift + i)) & np.uint32(1)) != 0
            if ex is None:
                m.P[i][...] = v
            else:
                np.copyto(m.P[i], v, where=ex)
    return run


@semantic("UP2UR", family="int")
def up2ur(ctx: Ctx):
    # UP2UR ud, UPR, ua, mask: ud = (ua & ~mask) | (UPR & mask), where bit i of UPR is UPi: P2R for the uniform
    # predicates (ptxas saves them in a uniform register when it runs short of them; fa2.cu's fa2_chunked)
    ops = ctx.ops
    ctx.need(not ctx.mods and len(ops) == 4 and ops[1].name == "UPR" and ops[3].kind == "imm", f"{ctx.ins.name} form")
    mask = ops[3].value & 0xFFFFFFFF
    ctx.need(mask < 0x80, f"{ctx.ins.name} of UPT (mask {mask:#x})")
    ra = ctx.u32(2)
    wd = ctx.dst(0)
    bits = [i for i in range(7) if (mask >> i) & 1]

    def run(m, ex):
        pr = np.zeros((m.A, m.W), np.uint32)
        for i in bits:
            pr |= m.UP[i].astype(np.uint32) << np.uint32(i)
        wd(m, (np.asarray(ra(m), np.uint32) & np.uint32(~mask & 0xFFFFFFFF)) | pr, ex)
    return run


@semantic("VABSDIFF", family="int")
def vabsdiff(ctx: Ctx):
    # VABSDIFF[.U32] d, a, b, c: |a - b| + c (sad.s32 / sad.u32: the difference of signed, or unsigned,
    # 32-bit values, the sum wrapping at 32 bits)
    ctx.need(not (ctx.mods - {"U32"}), f"{ctx.ins.name}")
    signed = "U32" not in ctx.mods
    ra, rb, rc = ctx.u32(1), ctx.u32(2), ctx.u32(3)
    wd = ctx.dst(0)

    def run(m, ex):
        a, b = np.asarray(ra(m), np.uint32), np.asarray(rb(m), np.uint32)
        if signed:
            d = np.abs(np.asarray(_s64(a), np.int64) - np.asarray(_s64(b), np.int64))
        else:
            d = np.abs(a.astype(np.int64) - b.astype(np.int64))
        wd(m, ((d + _u64(rc(m)).astype(np.int64)) & 0xFFFFFFFF).astype(np.uint32), ex)
    return run


@semantic("VABSDIFF4", family="int")
def vabsdiff4(ctx: Ctx):
    # VABSDIFF4.U8 d, a, b, RZ: byte i of d = |a.byte i - b.byte i| on unsigned bytes (PTX vabsdiff4.u32.u32.u32
    # d, a, b, c with the default mask .b3210, whose merge source c then gives no byte: __vabsdiffu4; ptxas
    # builds __vabsdiffs4 / __vabs4 / __vabsss4 on it by biasing signed bytes with ^ 0x80).
    # VABSDIFF4.U8.ACC d, a, b, c: d = c + the sum of the four byte differences, modulo 2^32 (vabsdiff4's .add
    # form: __vsadu4, __vsads4's biased bytes).
    # The plain form's third operand is RZ in every form NVRTC 13.0 and ptxas 12.8 emit; another one is refused
    # (whether the device merges it or adds it is not established), as are signed bytes (.S8) and byte selectors.
    mods = ctx.mods
    ctx.need("U8" in mods and not (mods - {"U8", "ACC"}) and len(ctx.ops) == 4, f"{ctx.ins.name}")
    acc = "ACC" in mods
    ra, rb = _packed_src(ctx, 1), _packed_src(ctx, 2)
    cop = ctx.ops[3]
    if acc:
        rc = _packed_src(ctx, 3)
    else:
        ctx.need(cop.is_zero_reg and not (cop.neg or cop.invert or cop.absolute or cop.suffix),
                 f"{ctx.ins.text} (a third operand other than RZ)")
    wd = ctx.dst(0)

    def run(m, ex):
        a = np.asarray(ra(m), np.uint32).astype(np.int64)
        b = np.asarray(rb(m), np.uint32).astype(np.int64)
        diffs = [np.abs(((a >> (8 * k)) & 0xFF) - ((b >> (8 * k)) & 0xFF)) for k in range(4)]
        if acc:
            total = np.asarray(rc(m), np.uint32).astype(np.int64) + diffs[0] + diffs[1] + diffs[2] + diffs[3]
            wd(m, (total & 0xFFFFFFFF).astype(np.uint32), ex)
        else:
            wd(m, (diffs[0] | (diffs[1] << 8) | (diffs[2] << 16) | (diffs[3] << 24)).astype(np.uint32), ex)
    return run
