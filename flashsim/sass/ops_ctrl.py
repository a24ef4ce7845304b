"""Control SASS semantics: BRA, BRX, EXIT, BSSY/BSYNC/BREAK (convergence barriers), WARPSYNC, CALL/RET,
BAR (CTA and named barriers), NOP and the hints. A control semantic gets (m, ex, active): ``ex`` the lanes
whose guard holds, ``active`` the lanes at this PC (None: every live lane, in lock-step); it moves the
lanes' PCs itself and returns 'moved' (or 'stop' when every lane of the batch has exited).
"""

from __future__ import annotations

import numpy as np

from flashsim.sass.isa import RZ
from flashsim.sass.machine import EXITED, NONE, RUN, fault, lane_bits, lanes_of
from flashsim.sass.program import Ctx, semantic


def control(fn):
    fn.control = True
    return fn


def _target(ctx: Ctx, op) -> int:
    if op.kind == "imm":
        return op.value
    if op.kind == "target":
        sym = ctx.program.symbols.get(op.name)
        if sym is None:
            raise ctx.unsupported(f"a branch to the unknown symbol {op.name!r}")
        return sym
    raise ctx.unsupported(f"branch target {op.text!r}")


def jump(m, pc: int, taken, active, target) -> str:
    """Lanes ``taken`` go to ``target`` (an int or per-lane array); the rest of ``active`` fall through."""
    act = lanes_of(m, active)
    tk = np.broadcast_to(taken, act.shape) & act
    if np.ndim(target) == 0 and active is None and tk.sum() == act.sum():
        m.cur = int(target)  # every lane of the lock-step group takes it
        return "moved"
    if np.ndim(target) == 0 and active is None and not tk.any():
        m.cur = pc + 16
        return "moved"
    m.leave_together()
    m.pc[act] = pc + 16
    if np.ndim(target) == 0:
        m.pc[tk] = int(target)
    else:
        m.pc[tk] = np.broadcast_to(target, act.shape)[tk]
    return "moved"


@semantic("BRA", "JMP", family="control")
def bra(ctx: Ctx):
    # BRA [p,] target: taken where the guard and p (default PT) hold; .U marks a warp-uniform branch
    if "DIV" in ctx.mods:
        return _bra_div(ctx)
    ops = ctx.ops
    cond = None
    if len(ops) == 2:
        cond = ctx.pred(0)
        tgt = _target(ctx, ops[1])
    else:
        tgt = _target(ctx, ops[0])
    ctx.need("CONV" not in ctx.mods, f"{ctx.ins.name}")
    pc = ctx.ins.pc
    # BRA.U.ANY (or .ANY): every lane at the branch takes it when the guard holds in any of its warp's lanes
    # (ptxas's loops over the lanes of a per-lane value, one ELECTed lane per trip)
    any_ = "ANY" in ctx.mods

    @control
    def run(m, ex, active):
        taken = lanes_of(m, ex) if ex is not None else lanes_of(m, active)
        if ex is None:
            taken = np.ones((), bool) if active is None else active
        if cond is not None:
            taken = taken & cond(m)
        if any_:
            act = lanes_of(m, active)
            taken = act & (np.broadcast_to(taken, act.shape) & act).any(axis=2)[..., None]
        return jump(m, pc, taken, active, tgt)
    return run


def _bra_div(ctx: Ctx):
    # BRA.DIV mask, target: taken (by every executing lane) when the warp is diverged, i.e. when the
    # lanes executing it are not all the lanes of mask; ptxas uses it to pick the slow path of a
    # collective (shfl/vote) after code where lanes may have split
    ops = ctx.ops
    rmask = ctx.u32(0)
    tgt = _target(ctx, ops[1])
    pc = ctx.ins.pc

    @control
    def run(m, ex, active):
        lanes = lanes_of(m, active) if ex is None else ex
        have = lane_bits(lanes)
        want = np.broadcast_to(np.asarray(rmask(m), np.uint32), m.st.shape)[..., 0]
        diverged = (have & want) != want
        return jump(m, pc, lanes & diverged[..., None], active, tgt)
    return run


@semantic("BRX", "JMX", family="control")
def brx(ctx: Ctx):
    # BRX R, offset: jump to the address in R (plus the offset), per lane (switch tables)
    op = ctx.ops[0]
    ctx.need(op.kind == "r", f"{ctx.ins.text}")
    reg = op.index
    extra = ctx.ops[1].value if len(ctx.ops) > 1 and ctx.ops[1].kind == "imm" else 0
    pc = ctx.ins.pc

    @control
    def run(m, ex, active):
        taken = lanes_of(m, active) if ex is None else ex
        tgt = m.R[reg].astype(np.int64) + extra
        return jump(m, pc, taken, active, tgt)
    return run


@semantic("EXIT", family="control")
def exit_(ctx: Ctx):
    pc = ctx.ins.pc

    @control
    def run(m, ex, active):
        act = lanes_of(m, active)
        gone = act if ex is None else (np.asarray(ex) & act)
        if active is None and gone.sum() == act.sum():
            m.st[gone] = EXITED
            if not (m.st == RUN).any() and not ((m.st != EXITED) & (m.st != NONE)).any():
                return "stop"
            m.together = False
            m.on_exit()
            return "moved"
        m.leave_together()
        m.pc[act] = pc + 16
        m.st[gone] = EXITED
        m.on_exit()
        return "moved"
    return run


@semantic("BSSY", family="control")
def bssy(ctx: Ctx):
    # BSSY Bn, reconvergence: Bn = the lanes executing it (the lanes a later BSYNC Bn waits for)
    b = ctx.ops[0].index

    @control
    def run(m, ex, active):
        lanes = lanes_of(m, active) if ex is None else ex
        warps = lanes.any(axis=2)
        m.B[b] = np.where(warps, lane_bits(lanes), m.B[b])
        return None
    return run


@semantic("BREAK", family="control")
def break_(ctx: Ctx):
    # BREAK Bn[, p]: the lanes (where p holds) leave barrier Bn, so its BSYNC stops waiting for them
    b = ctx.ops[0].index
    cond = ctx.pred(1) if len(ctx.ops) > 1 else None

    @control
    def run(m, ex, active):
        lanes = lanes_of(m, active) if ex is None else ex
        if cond is not None:
            lanes = lanes & cond(m)
        m.B[b] &= ~lane_bits(lanes)
        return None
    return run


def _converge(m, pc: int, ex, active, need: np.ndarray) -> str:
    """Lanes ``ex`` wait at ``pc`` for every live lane of ``need`` ((A, W) uint32 masks) to arrive."""
    act = lanes_of(m, active)
    lanes = act if ex is None else (np.asarray(ex) & act)
    if active is None and ex is None:
        return None  # lock-step: every live lane is already here
    m.leave_together()
    m.pc[act & ~lanes] = pc + 16  # guard false: fall through
    m.wait_at(lanes, pc, need[..., None])
    m._release_convergence()
    return "moved"


@semantic("BSYNC", family="control")
def bsync(ctx: Ctx):
    b = ctx.ops[0].index
    pc = ctx.ins.pc

    @control
    def run(m, ex, active):
        return _converge(m, pc, ex, active, m.B[b])
    return run


@semantic("WARPSYNC", family="control")
def warpsync(ctx: Ctx):
    # WARPSYNC mask (or .ALL): the lanes of mask meet here (__syncwarp)
    pc = ctx.ins.pc
    if "COLLECTIVE" in ctx.mods:
        raise ctx.unsupported("WARPSYNC.COLLECTIVE (the lane-by-lane slow path of a collective in a diverged warp)")
    if "ALL" in ctx.mods or not ctx.ops:
        mask = None
    else:
        mask = ctx.u32(0)

    @control
    def run(m, ex, active):
        if mask is None:
            need = np.full((m.A, m.W), 0xFFFFFFFF, np.uint32)
        else:  # the mask operand as the warp's first executing lane holds it
            lanes = lanes_of(m, active if ex is None else ex)
            first = np.argmax(lanes, axis=2)[..., None]
            vals = np.broadcast_to(np.asarray(mask(m), np.uint32), m.st.shape)
            need = np.take_along_axis(vals, first, axis=2)[..., 0].copy()
        if m.smem is not None and m.smem.shadow is not None:
            m.smem.warp_barrier(lanes_of(m, active).any(axis=2))
        return _converge(m, pc, ex, active, need)
    return run


@semantic("CALL", family="control")
def call(ctx: Ctx):
    # CALL.REL.NOINC target: ptxas puts the return address in a register (MOV Rn, ret) and the callee
    # returns with RET.REL.NODEC Rn, so the call is a jump
    ctx.need({"REL", "NOINC"} <= ctx.mods or "ABS" in ctx.mods and "NOINC" in ctx.mods, f"{ctx.ins.name}")
    tgt = _target(ctx, ctx.ops[0])
    pc = ctx.ins.pc

    @control
    def run(m, ex, active):
        taken = (np.ones((), bool) if active is None else active) if ex is None else ex
        return jump(m, pc, taken, active, tgt)
    return run


@semantic("RET", family="control")
def ret(ctx: Ctx):
    # RET.REL.NODEC Rn[, function]: jump to the address in Rn
    op = ctx.ops[0]
    ctx.need(op.kind == "r", f"{ctx.ins.text}")
    reg = op.index
    pc = ctx.ins.pc

    @control
    def run(m, ex, active):
        act = lanes_of(m, active)
        taken = act if ex is None else ex
        tgt = m.R[reg].astype(np.int64)
        vals = tgt[act]
        if active is None and ex is None and vals.size and (vals == vals[0]).all():
            m.cur = int(vals[0])
            return "moved"
        return jump(m, pc, taken, active, tgt)
    return run


@semantic("BAR", family="control")
def bar(ctx: Ctx):
    # BAR.SYNC[.DEFER_BLOCKING] id[, count]: wait until count threads (default: the whole CTA) arrive at
    # barrier id; BAR.ARV id, count: arrive without waiting. Counts are in threads, warps count 32 each.
    # BAR.RED.{POPC,AND,OR} id[, count], p: also reduce p over the arriving threads (bar.red; the result
    # is read with B2R.RESULT)
    mods = ctx.mods
    ctx.need("SCAN" not in mods, f"{ctx.ins.name}")
    red = next((k for k in ("POPC", "AND", "OR") if k in mods), None) if "RED" in mods else None
    wait = "SYNC" in mods or red is not None
    ctx.need(wait or "ARV" in mods, f"{ctx.ins.name}")
    ops = ctx.ops
    n = len(ops) - (1 if red else 0)
    rid = ctx.u32(0)
    rcount = ctx.u32(1) if n > 1 else None
    if n > 1 and ops[0].kind == "r" and ops[1].kind == "r" and ops[0].index != RZ:
        # bar.sync a, b with both in registers: ptxas packs them into one, (b << 16) | (a & 0xf), and names it
        # twice (BAR.SYNC R6, R6): the thread count is the register's bits 16..
        ctx.need(ops[0].index == ops[1].index, f"{ctx.ins.text} (id and count in different registers)")
        rpacked = rcount
        rcount = lambda m: np.asarray(rpacked(m), np.uint32) >> np.uint32(16)  # noqa: E731
    rpred = ctx.pred(len(ops) - 1) if red else None
    pc = ctx.ins.pc

    @control
    def run(m, ex, active):
        lanes = lanes_of(m, active) if ex is None else ex
        bid = np.broadcast_to(np.asarray(rid(m)), m.st.shape)[..., 0]
        cnt = None if rcount is None else np.broadcast_to(np.asarray(rcount(m)), m.st.shape)[..., 0]
        if red is not None:
            vals = np.broadcast_to(rpred(m), lanes.shape) & lanes
            m.bar_arrive(lanes, bid, cnt, pc, wait, red=(red, vals))
        else:
            m.bar_arrive(lanes, bid, cnt, pc, wait)
        if ex is not None:  # lanes whose guard is false fall through
            act = lanes_of(m, active)
            m.pc[act & ~lanes] = pc + 16
        return "moved"
    return run


@semantic("B2R", family="control")
def b2r(ctx: Ctx):
    # B2R.RESULT d[, p]: the result of this warp's last barrier reduction (count for POPC; AND/OR as
    # 0/1 in d and as a predicate in p)
    ctx.need("RESULT" in ctx.mods, f"{ctx.ins.name}")
    wd = ctx.dst(0)
    wp = ctx.dst(1) if len(ctx.ops) > 1 else None

    def run(m, ex):
        v = m.bar_result[..., None].astype(np.uint32)
        wd(m, np.broadcast_to(v, m.st.shape), ex)
        if wp is not None:
            wp(m, np.broadcast_to(v != 0, m.st.shape), ex)
    return run


@semantic("NOP", "YIELD", "NANOSLEEP", "PMTRIG", "BMOV", family="control")
def nop(ctx: Ctx):
    if ctx.ins.opcode == "BMOV":
        raise ctx.unsupported("BMOV (moving convergence barrier state)")
    if ctx.ins.opcode == "NOP" and ctx.ins.pc in ctx.program.kernel.warp_sync_offsets:
        # a __syncwarp() ptxas elided (converged code): nothing to wait for, but it orders the warp's
        # shared-memory accesses for the race shadow
        def run(m, ex):
            if m.smem is not None and m.smem.shadow is not None:
                m.smem.warp_barrier(lanes_of(m, ex).any(axis=2))
        return run
    return lambda m, ex: None


@semantic("BPT", family="control")
def bpt(ctx: Ctx):
    def run(m, ex):
        lanes = (m.st == RUN) if ex is None else ex
        raise fault("trap (BPT)", m, ctx.ins, lanes, 0, "the kernel executed a trap")
    return run
