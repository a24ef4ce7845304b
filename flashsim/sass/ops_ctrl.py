"""Control SASS semantics: BRA, BRX, EXIT, BSSY/BSYNC/BREAK (convergence barriers), WARPSYNC, CALL/RET,
BAR (CTA and named barriers), NOP and the hints. A control semantic gets (m, ex, active): ``ex`` the lanes
whose guard holds, ``active`` the lanes at this PC (None: every live lane, in lock-step); it moves the
lanes' PCs itself and returns 'moved' (or 'stop' when every lane of the batch has exited).
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import location
from flashsim.sass.isa import RZ
from flashsim.sass.machine import EXITED, NONE, RUN, WAIT, fault, lane_bits, lanes_of
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
    if "DIV" in ctx.mods or "CONV" in ctx.mods:
        return _bra_div(ctx)
    ops = ctx.ops
    cond = None
    if len(ops) == 2:
        cond = ctx.pred(0)
        tgt = _target(ctx, ops[1])
    else:
        tgt = _target(ctx, ops[0])
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
    # collective (shfl/vote) after code where lanes may have split.
    # BRA.CONV mask, target: the complement, taken (by every executing lane) when every lane of mask executes
    # it; ptxas's branch to the fast path: a CTA barrier's bare BAR.ARV / BAR.SYNC instead of a call to its
    # WARPSYNC'd copy (BRA.CONV ~URZ; NVIDIA developer forums, "What's the difference between BRA.DIV and BRA
    # instructions?", where an experiment confirms the BRA.DIV reading), or, after R2UR of a __ballot_sync
    # mask whose result is unused, skipping the WARPSYNC.COLLECTIVE region that votes (flashsim.fuzz programs).
    # Either target computes the collective's PTX result, the fast path needing only that the mask's lanes are
    # all here, which is what this model's test asserts; so the device's exact test (a mask naming exited
    # lanes, lanes outside the mask executing) can change which path runs, not what it computes. Not measured:
    # a GPU probe must show BRA.CONV taken exactly where BRA.DIV is not, with exited lanes in the mask, with
    # lanes outside it. Guarded (@!P1 BRA.CONV UR5, ...), the lanes whose guard holds are the executing ones:
    # taken when they hold every lane of the mask (the fast path's own condition); the two H200 programs of
    # the fuzzer that have one (traces/fuzz/h200_seed3, gpu_only) give the GPU's bits in both builds.
    ops = ctx.ops
    conv = "CONV" in ctx.mods
    ctx.need(len(ops) == 2 and not {"DIV", "CONV"} <= ctx.mods, f"{ctx.ins.text}")
    rmask = ctx.u32(0)
    tgt = _target(ctx, ops[1])
    pc = ctx.ins.pc

    @control
    def run(m, ex, active):
        lanes = lanes_of(m, active) if ex is None else ex
        have = lane_bits(lanes)
        want = np.broadcast_to(np.asarray(rmask(m), np.uint32), m.st.shape)[..., 0]
        hit = ((have & want) == want) if conv else ((have & want) != want)
        return jump(m, pc, lanes & hit[..., None], active, tgt)
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
    # BSSY Bn, reconvergence: each executing lane's Bn = the lanes executing it (the lanes its later BSYNC Bn
    # waits for). Per lane: the two sides of a divergent branch each set Bn for their own region (the
    # differential fuzzer found the H200 finishing programs where one warp-wide Bn deadlocked)
    b = ctx.ops[0].index

    @control
    def run(m, ex, active):
        lanes = lanes_of(m, active) if ex is None else ex
        m.B[b] = np.where(lanes, lane_bits(lanes)[..., None], m.B[b])
        return None
    return run


@semantic("BREAK", family="control")
def break_(ctx: Ctx):
    # BREAK Bn[, p]: the lanes (where p holds) leave barrier Bn, so its BSYNC stops waiting for them, also where
    # lanes of the warp already wait at a BSYNC Bn (a loop's breaking lanes that got there first: the H200 runs
    # the smaller group of a divergent branch first, gpu/kernels/probe_paths.cu's paths_break_marks)
    b = ctx.ops[0].index
    cond = ctx.pred(1) if len(ctx.ops) > 1 else None
    syncs = np.array([i.pc for i in ctx.program.instructions.values()
                      if i.opcode == "BSYNC" and i.operands and i.operands[0].index == b], np.int64)

    @control
    def run(m, ex, active):
        lanes = lanes_of(m, active) if ex is None else ex
        if cond is not None:
            lanes = lanes & cond(m)
        bits = lane_bits(lanes)[..., None]
        m.B[b] &= ~bits
        if syncs.size:
            waiting = (m.st == WAIT) & np.isin(m.pc, syncs) & (bits != 0)
            if waiting.any():
                m.wait_need[waiting] &= ~np.broadcast_to(bits, waiting.shape)[waiting]
                m._release_convergence()
        return None
    return run


def _converge(m, pc: int, ex, active, need: np.ndarray, per_lane: bool = False) -> str:
    """Lanes ``ex`` wait at ``pc`` for every live lane of ``need`` ((A, W) uint32 masks, or (A, W, 32): each
    lane's own, with ``per_lane``) to arrive."""
    act = lanes_of(m, active)
    lanes = act if ex is None else (np.asarray(ex) & act)
    if active is None and ex is None:
        return None  # lock-step: every live lane is already here
    m.leave_together()
    m.pc[act & ~lanes] = pc + 16  # guard false: fall through
    m.wait_at(lanes, pc, need if per_lane else need[..., None])
    m._release_convergence()
    return "moved"


@semantic("BSYNC", family="control")
def bsync(ctx: Ctx):
    b = ctx.ops[0].index
    pc = ctx.ins.pc

    @control
    def run(m, ex, active):
        return _converge(m, pc, ex, active, m.B[b], per_lane=True)
    return run


@semantic("WARPSYNC", family="control")
def warpsync(ctx: Ctx):
    # WARPSYNC mask (or .ALL): the lanes of mask meet here (__syncwarp)
    pc = ctx.ins.pc
    if "COLLECTIVE" in ctx.mods or "EXCLUSIVE" in ctx.mods:
        return _collective_warpsync(ctx)
    if "ALL" in ctx.mods or not ctx.ops:
        mask = None
    else:
        mask = ctx.u32(0)

    @control
    def run(m, ex, active):
        if mask is None:
            need = np.full((m.A, m.W), 0xFFFFFFFF, np.uint32)
            if m.synccheck is not None:  # .ALL: ptxas's __syncwarp(0xffffffff), and its sync before a barrier.sync
                m.synccheck.warpsync(m, pc, lanes_of(m, active if ex is None else ex),
                                     np.full(m.st.shape, 0xFFFFFFFF, np.uint32))
        else:  # the mask operand as the warp's first executing lane holds it
            lanes = lanes_of(m, active if ex is None else ex)
            first = np.argmax(lanes, axis=2)[..., None]
            vals = np.broadcast_to(np.asarray(mask(m), np.uint32), m.st.shape)
            outside = lanes & (((vals >> np.arange(32, dtype=np.uint32)) & np.uint32(1)) == 0)
            if m.synccheck is not None:  # inside checking(synccheck=True): the masks, before any refusal
                m.synccheck.warpsync(m, pc, lanes, vals)
            if outside.any():
                # undefined in the PTX ISA; the H200 stops the kernel with cudaErrorIllegalInstruction
                # (gpu/synccheck_cases.py: syncwarp_not_in_mask, syncwarp_sample; traces/synccheck)
                a, w, l = (int(v) for v in np.argwhere(outside)[0])
                raise fault("illegal instruction", m, ctx.ins, outside, np.uint64(0),
                            f"a lane executes WARPSYNC outside its mask {int(vals[a, w, l]):#010x}, which the GPU "
                            "reports as cudaErrorIllegalInstruction")
            need = np.take_along_axis(vals, first, axis=2)[..., 0].copy()
        if m.smem is not None and m.smem.shadow is not None:
            m.smem.warp_barrier(lanes_of(m, active).any(axis=2))
        return _converge(m, pc, ex, active, need)
    return run


# ------------------------------------------------------------------------------------------------ collectives
# ptxas's code for a warp collective (shfl.sync, vote.sync, match.sync, redux.sync, bar.warp.sync) where it
# cannot prove the warp converged on the mask:
#
#     BRA.DIV Umask, slow          (every lane of the mask executing here: the collective alone, the fast path)
#     ...
#   slow:
#     WARPSYNC.COLLECTIVE Rmask, end
#     <the collective and what reads its uniform result>
#     ENDCOLLECTIVE
#   end:
#     BRA back
#
# and, for a mask in a register that lanes may hold different values of (redux / ballot / match with a
# non-constant mask), WARPSYNC.EXCLUSIVE Rmask followed by the collective and the straight-line code after it,
# up to the BSYNC of the convergence barrier set just before (or to the EXIT, where nothing follows to
# reconverge). Both keep the uniform datapath, one per warp, to the lanes of one mask at a time: the ballot and
# the uniform redux result are the group's own (ptxas masks nothing afterwards).
#
# Modelled: the lanes of a mask meet at one such instruction; once every lane of the mask that has not exited
# waits there, they run the region (straight-line code that neither waits nor branches) as one group, alone in
# the warp (nothing else of the warp runs in between), then go on at ``end`` (COLLECTIVE) or at the BSYNC /
# EXIT (EXCLUSIVE). A WARPSYNC.EXCLUSIVE whose code is not straight-line up to a BSYNC or the EXIT (ptxas
# also places one before a BSSY, a call of a slow path or a branch, where the collective's use was folded
# away) lets its group go on from the next instruction holding its warp: no other lane of the warp runs until
# none of the group's lanes can (they wait at a barrier or have exited); a group that holds its warp past
# machine.EXCLUSIVE_STEPS scheduling steps is refused (where the GPU lets the rest of the warp in is not
# measured). Lanes holding different masks at one site run as separate groups, one after the other from
# the group of the lowest lane: a legal order of their instructions (the groups' results do not depend on it;
# memory accesses in the region land in it). The collective in the body then sees exactly the lanes of its
# mask, as the PTX ISA defines it. The race detector counts a group that is every live lane of its warp as a
# __syncwarp() of the warp, a part of the warp as nothing (it may then report a race the partial sync ordered).
#
# Refused (NotImplementedError, naming the site): an executing lane outside its own mask; lanes of one mask
# holding different masks; a mask some of whose lanes never arrive at the same site (they wait at another
# collective of the same mask, which the PTX ISA allows from sm_70 on, at a barrier, or run to the end): which
# lanes the GPU then runs the collective with is not modelled. A shuffle reading a lane of the group that has
# exited stays undefined (flashsim.warp.shfl refuses it).
_BODY_FAMILIES = frozenset({"int", "float", "cvt", "half", "sfu", "warp", "mem", "atomic"})
_BODY_OPCODES = frozenset({"NOP", "ENDCOLLECTIVE"})
# instructions that wait, move lanes, act for the whole warp or for other units: never in a region
_NOT_IN_BODY = frozenset({"DEPBAR", "LDGSTS", "LDGDEPBAR", "HMMA", "MOVM"})
_COLLECTIVE_SCAN = 256  # instructions searched for the end of a region


def _body_ok(ins) -> bool:
    """May ``ins`` run inside a collective region, for one group of lanes at a time (straight-line code with
    no wait)?"""
    from flashsim.sass.program import SEMANTICS

    if ins.opcode in _BODY_OPCODES:
        return True
    entry = SEMANTICS.get(ins.opcode)
    return entry is not None and entry[1] in _BODY_FAMILIES and ins.opcode not in _NOT_IN_BODY


def _region(ctx: Ctx) -> tuple[list[int] | None, int]:
    """(the PCs the region runs, ENDCOLLECTIVE's included, and the PC the group goes on at); (None, the next
    PC) for a WARPSYNC.EXCLUSIVE whose region is not straight-line code ending at a BSYNC or the EXIT."""
    ins, prog = ctx.ins, ctx.program.instructions
    pc = ins.pc
    if "COLLECTIVE" in ctx.mods:
        ctx.need(len(ctx.ops) == 2 and ctx.ops[0].kind == "r", f"{ins.text}")
        end = _target(ctx, ctx.ops[1])
        last = prog.get(end - 16)
        ctx.need(end > pc + 16 and last is not None and last.opcode == "ENDCOLLECTIVE",
                 f"{ins.text} (its target does not follow an ENDCOLLECTIVE)")
        pcs = list(range(pc + 16, end, 16))
    else:  # up to the BSYNC of the convergence barrier around it, or to the EXIT
        ctx.need(len(ctx.ops) == 1 and ctx.ops[0].kind == "r", f"{ins.text}")
        pcs = []
        for k in range(1, _COLLECTIVE_SCAN + 1):
            nxt = prog.get(pc + 16 * k)
            if nxt is None or not _body_ok(nxt):
                break
            pcs.append(nxt.pc)
        end = pc + 16 * (len(pcs) + 1)
        if not (end in prog and prog[end].opcode in ("BSYNC", "EXIT") and prog[end].guard is None):
            return None, pc + 16  # not straight-line up to a BSYNC or the EXIT: the group holds the warp
    for p in pcs:
        body = prog.get(p)
        ctx.need(body is not None, f"{ins.text} (a hole in its region at pc={p:#06x})")
        if body.opcode == "ENDCOLLECTIVE":
            ctx.need(p == end - 16, f"{ins.text} (an ENDCOLLECTIVE inside its region at pc={p:#06x})")
        ctx.need(_body_ok(body), f"{ins.text} with `{body.text}` (pc={p:#06x}) in its region")
    return pcs, end


def _collective_warpsync(ctx: Ctx):
    kind = "COLLECTIVE" if "COLLECTIVE" in ctx.mods else "EXCLUSIVE"
    ctx.need(not (ctx.mods - {kind}), f"{ctx.ins.name}")
    g = ctx.ins.guard
    ctx.need(g is None or (g.index == 7 and not g.invert), f"a guarded {ctx.ins.name}")
    pcs, end = _region(ctx)
    rmask = ctx.u32(0)
    pc = ctx.ins.pc
    where = ctx.ins.where()
    lane_id = np.arange(32, dtype=np.uint64)

    def release(m, a: int, w: int) -> bool:
        """Run every complete group of warp (a, w) waiting here; True when one ran."""
        ran = False
        while True:
            if pcs is None and not m.exclusive_free(a, w):
                return ran  # another group holds the warp
            st = m.st[a, w]
            at = (st == WAIT) & (m.pc[a, w] == pc)
            if not at.any():
                return ran
            live = (st != EXITED) & (st != NONE)
            need = m.wait_need[a, w]
            group = None
            for mask in sorted({int(v) for v in need[at]}, key=lambda v: (v & -v)):
                bits = ((np.uint64(mask) >> lane_id) & np.uint64(1)).astype(bool)
                if (bits & at & (need != mask)).any():
                    lanes = np.nonzero(bits & at & (need != mask))[0]
                    raise NotImplementedError(
                        f"WARPSYNC.{kind}: lanes of mask {mask:#010x} hold other masks "
                        f"({location(cta=int(m.cta_ids[a]), warp=w, lane=int(lanes[0]))} holds "
                        f"{int(need[lanes[0]]):#010x}), which the PTX ISA leaves undefined: {where}")
                if (bits & live & ~at).any():
                    continue  # lanes of the mask still to come
                group = at & (need == mask)
                break
            if group is None:
                return ran
            lanes = np.zeros(m.st.shape, bool)
            lanes[a, w] = group
            m.st[lanes] = RUN
            if m.smem is not None and m.smem.shadow is not None and not (live & ~group).any():
                m.smem.warp_barrier(lanes.any(axis=2))  # every live lane of the warp met here
            if pcs is None:  # the group goes on alone in its warp until none of its lanes can run
                m.pc[lanes] = end
                if (live & ~group).any():
                    m.hold_exclusive(a, w, group, pc)
                return True
            m.run_inline(pcs, lanes)
            m.pc[lanes] = end
            ran = True

    ctx.program.collective_release[pc] = release

    @control
    def run(m, ex, active):
        lanes = lanes_of(m, active)
        masks = np.broadcast_to(np.asarray(rmask(m), np.uint32), lanes.shape)
        own = ((masks >> np.arange(32, dtype=np.uint32)) & np.uint32(1)).astype(bool)
        if m.synccheck is not None:  # inside checking(synccheck=True): the masks, before any refusal
            m.synccheck.warpsync(m, pc, lanes, masks, f"WARPSYNC.{kind}")
        if (lanes & ~own).any():
            a, w, l = (int(v) for v in np.argwhere(lanes & ~own)[0])
            raise NotImplementedError(
                f"WARPSYNC.{kind}: {location(cta=int(m.cta_ids[a]), warp=w, lane=l)} executes it outside its mask "
                f"{int(masks[a, w, l]):#010x} (the PTX ISA leaves this undefined; it is not modelled): {where}")
        m.wait_at(lanes, pc, masks)
        for a, w in zip(*np.nonzero(lanes.any(axis=2))):
            release(m, int(a), int(w))
        return "moved"
    return run


@semantic("ENDCOLLECTIVE", family="control")
def endcollective(ctx: Ctx):
    # the end of a WARPSYNC.COLLECTIVE region: run with the region (see _collective_warpsync), never alone
    where = ctx.ins.where()

    def run(m, ex):
        if not m.inline:
            raise NotImplementedError(f"ENDCOLLECTIVE reached outside a WARPSYNC.COLLECTIVE region: {where}")
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
        if cnt is not None:
            odd = lanes & ((cnt % 32) != 0)[..., None]
            if odd.any():
                # the PTX ISA asks for a multiple of the warp size; the H200 stops the kernel with
                # cudaErrorIllegalInstruction (gpu/synccheck_cases.py: bar_n48, a count of 48; traces/synccheck)
                a, w, _ = (int(v) for v in np.argwhere(odd)[0])
                raise fault("illegal instruction", m, ctx.ins, odd, np.uint64(0),
                            f"a barrier thread count of {int(cnt[a, w])}, not a multiple of 32, which the GPU "
                            "reports as cudaErrorIllegalInstruction")
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
