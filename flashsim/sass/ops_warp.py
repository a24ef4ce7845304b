"""Warp-collective SASS semantics: SHFL, VOTE/VOTEU, HMMA (mma.sync), MOVM. Each is a call into
flashsim.warp / flashsim.numerics over the (A, W, 32) state."""

from __future__ import annotations

import numpy as np

from flashsim.sass.machine import lane_bits, lanes_of
from flashsim.sass.program import Ctx, semantic
from flashsim.warp import movmatrix
from flashsim.warp.fragments import FRAGMENTS
from flashsim.warp.shfl import shfl_sync


@semantic("SHFL", family="warp")
def shfl(ctx: Ctx):
    # SHFL.{IDX,UP,DOWN,BFLY} p, d, a, b, c: shfl.sync.<mode>.b32 d|p, a, b, c among the executing lanes
    mode = next((k.lower() for k in ("IDX", "UP", "DOWN", "BFLY") if k in ctx.mods), None)
    ctx.need(mode is not None, f"{ctx.ins.name}")
    wp, wd = ctx.dst(0), ctx.dst(1)
    ra, rb, rc = ctx.raw(2), ctx.u32(3), ctx.u32(4)

    def run(m, ex):
        lanes = lanes_of(m, ex)
        a = np.broadcast_to(np.asarray(ra(m), np.uint32), lanes.shape)
        b = np.broadcast_to(np.asarray(rb(m), np.uint32).astype(np.int64), lanes.shape)
        c = np.broadcast_to(np.asarray(rc(m), np.uint32).astype(np.int64), lanes.shape)
        d, p, _ = shfl_sync(mode, a, b, c, lane_bits(lanes), active=lanes)
        wd(m, d, lanes)
        wp(m, p, lanes)
    return run


@semantic("VOTE", "VOTEU", family="warp")
def vote(ctx: Ctx):
    # VOTE.{ANY,ALL,EQ} [d,] p, q: d = ballot(q) over the executing lanes; p = any / all / all-equal of q
    # (VOTE.ALL p, q has no register destination: __all_sync / __any_sync)
    kind = next((k for k in ("ANY", "ALL", "EQ") if k in ctx.mods), None)
    ctx.need(kind is not None, f"{ctx.ins.name}")
    uniform = ctx.ins.opcode == "VOTEU"
    ops = ctx.ops
    ctx.need(len(ops) in (2, 3), f"{ctx.ins.text}")
    wd = ctx.dst(0) if len(ops) == 3 else None
    wp = ctx.dst(len(ops) - 2)
    q = ops[-1]
    # the voted predicate is a lane predicate even in VOTEU (which writes uniform registers)
    if q.kind == "p":
        qi, qinv = q.index, q.invert
        rq = (lambda m: np.ones(m.st.shape, bool) != qinv) if qi == 7 else \
            ((lambda m: ~m.P[qi]) if qinv else (lambda m: m.P[qi]))
    else:
        ctx.need(q.kind == "up", f"vote operand {q.text}")
        rq = lambda m: np.broadcast_to(m.UP[q.index][..., None] != q.invert, m.st.shape)  # noqa: E731

    def vote_of(m, lanes):
        v = np.broadcast_to(rq(m), lanes.shape) & lanes
        ballot = lane_bits(v)
        if kind == "ANY":
            pv = v.any(axis=2)
        elif kind == "ALL":
            pv = (v == lanes).all(axis=2)
        else:
            pv = (v == lanes).all(axis=2) | ((~v & lanes).sum(axis=2) == lanes.sum(axis=2))
        wex = lanes.any(axis=2) if uniform else lanes
        if uniform:
            if wd is not None:
                wd(m, ballot, wex)
            wp(m, pv, wex)
        else:
            if wd is not None:
                wd(m, np.broadcast_to(ballot[..., None], lanes.shape), wex)
            wp(m, np.broadcast_to(pv[..., None], lanes.shape), wex)

    if uniform:
        # VOTEU votes over the lanes executing it (its uniform guard true): not over every runnable lane of
        # the warp, which in divergent code includes lanes waiting at another PC
        def run_u(m, warps, lanes, act):
            vote_of(m, np.asarray(lanes, bool) & np.asarray(warps, bool)[..., None])
        run_u.lanes = True
        return run_u
    return lambda m, ex: vote_of(m, lanes_of(m, ex))


_HMMA_SHAPE = {"16816": ("m16n8k16", 16, 4, 2), "1688": ("m16n8k8", 8, 2, 1)}


@semantic("HMMA", family="mma")
def hmma(ctx: Ctx):
    # HMMA.{16816,1688}.{F32,F16}[.BF16] d, a, b, c: mma.sync.aligned.m16n8k{16,8}.row.col (numerics.mma),
    # fragments gathered straight from the register file through the PTX fragment tables (warp.fragments)
    from flashsim.numerics.mma import mma as mma_tiles  # numba: imported on first use

    mods = ctx.ins.mods
    ctx.need(mods and mods[0] in _HMMA_SHAPE, f"{ctx.ins.name}")
    shape, k, na, nb = _HMMA_SHAPE[mods[0]]
    rest = set(mods[1:])
    ctx.need(rest <= {"F32", "F16", "BF16"} and ("F32" in rest or "F16" in rest), f"{ctx.ins.name}")
    atype = "bf16" if "BF16" in rest else "f16"
    ctype = "f32" if "F32" in rest else "f16"
    ctx.need(not (atype == "bf16" and ctype == "f16"), f"{ctx.ins.name}")
    nc = 4 if ctype == "f32" else 2
    key = f"mma.{shape}"
    fa, fb, fc_ = FRAGMENTS[(key, "A")], FRAGMENTS[(key, "B")], FRAGMENTS[(key, f"C.{ctype}")]
    ga, gb, gc, sc = fa.gather_rm, fb.gather_rm, fc_.gather_rm, fc_.scatter_rm
    ops = ctx.ops
    for i, n in ((1, na), (2, nb), (3, nc)):
        ctx.need(ops[i].kind == "r", f"{ctx.ins.text}")
    bases = [ops[1].index, ops[2].index, ops[3].index]
    d0 = ops[0].index
    cdt = np.uint32 if ctype == "f32" else np.uint16

    def tiles(m, base, n, gather, dt, rows, cols, sel):
        if base == 255:  # RZ: zeros
            return np.zeros((len(sel[0]) if sel is not None else m.A * m.W, rows, cols), dt)
        regs = m.R[base:base + n]
        if sel is not None:
            regs = regs[:, sel[0], sel[1]][:, :, None]
        flat = regs.view(dt).reshape(n, -1, 32 * (4 // np.dtype(dt).itemsize))  # (n, warps, lane elements)
        t = flat.transpose(1, 0, 2).reshape(flat.shape[1], -1)[:, gather]
        return t.reshape(-1, rows, cols)

    def run(m, ex):
        lanes = lanes_of(m, ex)
        warps = lanes.any(axis=2)
        if not warps.any():
            return
        sel = None if warps.all() else np.nonzero(warps)
        a = tiles(m, bases[0], na, ga, np.uint16, 16, k, sel)
        b = tiles(m, bases[1], nb, gb, np.uint16, k, 8, sel)
        c = tiles(m, bases[2], nc, gc, cdt, 16, 8, sel)
        d = mma_tiles(a, b, c, k=k, atype=atype, ctype=ctype)
        regs = np.ascontiguousarray(d.reshape(d.shape[0], -1)[:, sc]).view(np.uint32).reshape(d.shape[0], nc, 32)
        regs = regs.transpose(1, 0, 2)
        if d0 == 255:
            return
        if sel is None:
            target = m.R[d0:d0 + nc].reshape(nc, -1, 32)
            if ex is None:
                target[...] = regs
            else:
                np.copyto(target, regs, where=lanes.reshape(1, -1, 32))
        else:
            for j in range(nc):
                cur = m.R[d0 + j][sel]
                m.R[d0 + j][sel] = np.where(lanes[sel], regs[j], cur)
    return run


@semantic("MOVM", family="warp")
def movm(ctx: Ctx):
    # MOVM.16.MT88 d, a: movmatrix.sync.aligned.m8n8.trans.b16
    ctx.need("MT88" in ctx.mods, f"{ctx.ins.name}")
    ra = ctx.src_n(1, 1)
    wd = ctx.dst_n(0, 1)

    def run(m, ex):
        lanes = lanes_of(m, ex)
        d, _ = movmatrix(ra(m))
        wd(m, d, lanes)
    return run


_REDUX = ("SUM", "MIN", "MAX", "AND", "OR", "XOR")


@semantic("REDUX", family="warp")
def redux(ctx: Ctx):
    # REDUX[.op][.S32] ud, r: redux.sync over the executing lanes into an uniform register (SUM wraps at
    # 32 bits; MIN/MAX unsigned unless .S32; no op: AND)
    op = next((k for k in _REDUX if k in ctx.mods), None)
    if op is None and not ctx.mods:
        op = "AND"  # nvdisasm leaves the default operation out: ptxas builds redux.sync.and.b32 as a bare REDUX
    ctx.need(op is not None, f"{ctx.ins.name}")
    signed = "S32" in ctx.mods
    src = ctx.ops[1]
    ctx.need(src.kind == "r", f"{ctx.ins.text}")
    reg = src.index
    wd = ctx.dst(0)  # an uniform register: written per warp

    def run(m, ex):
        lanes = lanes_of(m, ex)
        v = m.R[reg] if reg != 255 else np.zeros(lanes.shape, np.uint32)
        if op == "SUM":
            r = (np.where(lanes, v, 0).astype(np.uint64).sum(axis=2) & 0xFFFFFFFF).astype(np.uint32)
        elif op in ("MIN", "MAX"):
            x = v.view(np.int32).astype(np.int64) if signed else v.astype(np.int64)
            fill = (2**31 if signed else 2**32) if op == "MIN" else (-2**31 - 1 if signed else -1)
            x = np.where(lanes, x, fill)
            r = (x.min(axis=2) if op == "MIN" else x.max(axis=2)).astype(np.uint32)
        else:
            ident = np.uint32(0xFFFFFFFF) if op == "AND" else np.uint32(0)
            x = np.where(lanes, v, ident)
            f = {"AND": np.bitwise_and, "OR": np.bitwise_or, "XOR": np.bitwise_xor}[op]
            r = f.reduce(x, axis=2).astype(np.uint32)
        wd(m, r, lanes.any(axis=2))
    return run


@semantic("MATCH", family="warp")
def match(ctx: Ctx):
    # MATCH.ANY[.U64] d, a: the lanes (among the executing ones) holding the same value;
    # MATCH.ALL[.U64] p, d, a: all executing lanes' mask and p = true when every value is equal, else 0 / false
    # (nvdisasm prints the predicate first)
    kind = "ANY" if "ANY" in ctx.mods else "ALL" if "ALL" in ctx.mods else None
    ctx.need(kind is not None, f"{ctx.ins.name}")
    wide = "U64" in ctx.mods
    ops = ctx.ops
    ctx.need(len(ops) == (3 if kind == "ALL" else 2), f"{ctx.ins.text}")
    rd = ctx.u64(len(ops) - 1) if wide else ctx.raw(len(ops) - 1)
    wp = None
    if kind == "ALL":
        ip, idst = (0, 1) if ops[0].kind == "p" else (1, 0)
        ctx.need(ops[ip].kind == "p" and ops[idst].kind == "r", f"{ctx.ins.text}")
        wd, wp = ctx.dst(idst), ctx.dst(ip)
    else:
        wd = ctx.dst(0)

    def run(m, ex):
        lanes = lanes_of(m, ex)
        v = np.broadcast_to(np.asarray(rd(m)), lanes.shape)
        same = (v[..., :, None] == v[..., None, :]) & lanes[..., None, :]
        masks = (same.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=-1).astype(np.uint32)
        if kind == "ANY":
            wd(m, masks, lanes)
            return
        act = lane_bits(lanes)[..., None]
        eq = masks == act
        alleq = (eq | ~lanes).all(axis=2, keepdims=True)
        wd(m, np.where(alleq, act, np.uint32(0)), lanes)
        wp(m, np.broadcast_to(alleq, lanes.shape), lanes)
    return run
