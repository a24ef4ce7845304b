"""Hopper's asynchronous synchronisation in SASS: mbarriers (SYNCS.*), the non-tensor bulk copy (UBLKCP,
UTMACMDFLUSH), ELECT, the async-proxy fences (FENCE.VIEW.ASYNC.*, CGAERRBAR) and setmaxnreg (USETMAXREG).

What each PTX instruction becomes (NVRTC 13.0, sm_90 / sm_90a; gpu/kernels/probe_mbarrier.cu shows them
all):

=========================================================  ==============================================
mbarrier.init.shared.b64 [a], n                            SYNCS.EXCH.64 URZ, [UR], UR (the word is
                                                           computed by ALU code; flashsim.smem.mbarrier)
mbarrier.arrive[.release.cta].shared.b64 s, [a]            SYNCS.ARRIVE.TRANS64.A1T0 Rs, [a], RZ
mbarrier.arrive.shared.b64 s, [a], n                       SYNCS.ARRIVE.TRANS64.ART0 Rs, [a], Rn
mbarrier.arrive.expect_tx.shared.b64 s, [a], tx            SYNCS.ARRIVE.TRANS64 Rs, [a], Rtx
mbarrier.arrive_drop.shared.b64 s, [a][, n]                SYNCS.ARRIVE.TRANS64.OPTOUT.{A1T0,ART0}
mbarrier.expect_tx.relaxed.cta.shared.b64 [a], tx          SYNCS.ARRIVE.TRANS64.RED.A0TR RZ, [a], Rtx
mbarrier.complete_tx.relaxed.cta.shared.b64 [a], tx        SYNCS.ARRIVE.TRANS64.RED.A0TX RZ, [a], Rtx
mbarrier.arrive{.expect_tx}.release.cluster.shared::cluster  SYNCS.ARRIVE.TRANS64.RED{,.A1T0} RZ, [a], R
  .b64 _, [a]{, tx}                                        (after MEMBAR.ALL.CTA/GPU, ERRBAR, CGAERRBAR)
mbarrier.test_wait{.parity}.shared.b64 p, [a], s|q         SYNCS.PHASECHK.TRANS64 P, [a], R
mbarrier.try_wait{.parity}.shared.b64 p, [a], s|q          SYNCS.PHASECHK.TRANS64.TRYWAIT P, [a], R
mbarrier.inval.shared.b64 [a]                              SYNCS.CCTL.IV [a]
cp.async.bulk.shared::cluster.global.mbarrier::            UBLKCP.S.G [URd], [URs], URn  (URd: the
  complete_tx::bytes [d], [s], n, [a]                      destination, URd+1: the mbarrier; URn: n / 16)
cp.async.bulk.global.shared::cta.bulk_group [d], [s], n    UBLKCP.G.S [URd], [URs], URn
cp.async.bulk.commit_group / wait_group n                  UTMACMDFLUSH / DEPBAR.LE SB0, n
elect.sync d|p, membermask                                 ELECT P, URd, PT
fence.proxy.async{.shared::cta,.global}                    FENCE.VIEW.ASYNC.{S,G}
fence.mbarrier_init.release.cluster                        MEMBAR.ALL.CTA (+ FENCE.VIEW.ASYNC.S)
setmaxnreg.{inc,dec}.sync.aligned.u32 n (sm_90a)           USETMAXREG.{TRY_ALLOC,DEALLOC}.CTAPOOL
=========================================================  ==============================================

In the SYNCS.ARRIVE code ``A<a>T<t>`` ``a`` is the arrival count (1, 0, or R: the register operand) and
``t`` the transaction bytes (0; R: expect-tx of the register's bytes; X: complete-tx of them); no code is
A1TR (arrive.expect_tx). ``.RED`` returns nothing; ``.OPTOUT`` is arrive_drop. SYNCS.PHASECHK's operand
carries the parity in bit 31 (test_wait with a state passes the state's high word, whose bit 31 is the
word's bit 63, the phase), and its predicate is "the phase of that parity has completed". Addresses are
shared-window offsets (bits 24.. would name another CTA of a cluster; clusters of more than one CTA are
not modelled). The semantics of the word live in :mod:`flashsim.smem.mbarrier`, blocking, bulk copies in
flight and the register pool in :mod:`flashsim.sass.asyncstate`.
"""

from __future__ import annotations

import numpy as np

from flashsim.sass.isa import PT, RZ, URZ
from flashsim.sass.machine import fault, lanes_of, warp_lanes, warps_of
from flashsim.sass.ops_mem import _address
from flashsim.sass.program import Ctx, semantic

__all__ = []

_ARRIVE_CODES = {  # code -> (arrival count source, tx source): 1 / 0 / "R" (the register), tx "X" = -R
    "A1T0": (1, 0), "ART0": ("R", 0), "A0TR": (0, "R"), "A0TX": (0, "X"), "A1TR": (1, "R"),
}


def control(fn):
    fn.control = True
    return fn


def _pred_code(op) -> int:
    """A predicate destination as AsyncState stores it: Pn -> n, UPn -> 8 + n, PT / UPT -> -1."""
    if op.index == PT:
        return -1
    return op.index if op.kind == "p" else 8 + op.index


# ------------------------------------------------------------------------------------------------ SYNCS
@semantic("SYNCS", family="sync")
def syncs(ctx: Ctx):
    mods = ctx.ins.mods
    head = mods[0] if mods else ""
    if head == "EXCH":
        return _exch(ctx)
    if head == "ARRIVE":
        return _arrive(ctx)
    if head == "PHASECHK":
        return _phasechk(ctx)
    if head == "CCTL":
        return _inval(ctx)
    raise ctx.unsupported(f"{ctx.ins.name}")


def _barrier_lanes(m, ex, addr, ins, what: str, **check):
    """The lanes of ``ex`` that execute an mbarrier operation, the CTA's asynchronous state and each lane's
    barrier address, after the checks every mbarrier operation makes (S.check: alignment, shared window,
    initialised); None when no lane executes it."""
    lanes = lanes_of(m, ex)
    if not lanes.any():
        return None
    S = m.async_state()
    ad = addr(m)
    S.check(m, ins, lanes, ad, what, **check)
    return lanes, S, ad


def _exch(ctx: Ctx):
    # SYNCS.EXCH.64 URZ, [a], URv: the 64-bit exchange ptxas makes of mbarrier.init (once per warp and
    # address: the value operand is uniform)
    ctx.need(ctx.ins.mods == ("EXCH", "64") and len(ctx.ops) == 3, f"{ctx.ins.name}")
    ctx.need(ctx.ops[0].is_zero_reg, f"{ctx.ins.text} (a used old value)")
    addr = _address(ctx, 1, False)
    value = ctx.u64(2)
    ins = ctx.ins

    def run(m, ex):
        got = _barrier_lanes(m, ex, addr, ins, "mbarrier.init", need_init=False)
        if got is None:
            return
        lanes, S, ad = got
        a, w, l = np.nonzero(lanes)
        key = np.stack([a, w, ad[a, w, l]])
        _, first = np.unique(key, axis=1, return_index=True)
        first = np.sort(first)
        v = np.broadcast_to(np.asarray(value(m), np.uint64), lanes.shape)
        if m.smem.written is not None:
            m.smem.on_atomic(ad, 8, lanes, f"{ins.pc:#06x}", reads=False)
        S.exchange(m, a[first], w[first], ad[a[first], w[first], l[first]], v[a[first], w[first], l[first]], ins.pc)
    return run


def _arrive(ctx: Ctx):
    mods = set(ctx.ins.mods[1:])
    ctx.need("TRANS64" in mods, f"{ctx.ins.name}")
    mods.discard("TRANS64")
    red = "RED" in mods
    drop = "OPTOUT" in mods
    mods -= {"RED", "OPTOUT"}
    code = mods.pop() if len(mods) == 1 else ("A1TR" if not mods else None)
    ctx.need(code in _ARRIVE_CODES, f"{ctx.ins.name}")
    csrc, tsrc = _ARRIVE_CODES[code]
    ctx.need(not (csrc == "R" and tsrc != 0), f"{ctx.ins.name}")
    ctx.need(len(ctx.ops) == 3, f"{ctx.ins.text}")
    # the token's register pair Rd, Rd+1: only Rd+1 is written (below)
    ctx.need(red or ctx.ops[0].kind == "r", f"{ctx.ins.text} (a token destination that is not a register)")
    hi = None if (red or ctx.ops[0].is_zero_reg) else ctx.ops[0].index + 1
    addr = _address(ctx, 1, False)
    rv = ctx.u32(2)
    ins = ctx.ins
    what = {"A1T0": "mbarrier.arrive", "ART0": "mbarrier.arrive (count)", "A0TR": "mbarrier.expect_tx",
            "A0TX": "mbarrier.complete_tx", "A1TR": "mbarrier.arrive.expect_tx"}[code]
    if drop:
        what = what.replace("arrive", "arrive_drop")

    def run(m, ex):
        got = _barrier_lanes(m, ex, addr, ins, what)
        if got is None:
            return
        lanes, S, ad = got
        a, w, l = np.nonzero(lanes)
        v = np.broadcast_to(np.asarray(rv(m), np.uint32), lanes.shape)[a, w, l].astype(np.int64)
        cnt = v if csrc == "R" else np.full(len(a), csrc, np.int64)
        tx = v if tsrc == "R" else -v if tsrc == "X" else np.zeros(len(a), np.int64)
        if tsrc == "R":
            for x, y in {(int(p), int(q)) for p, q in zip(a, w)}:
                S.role(x, y, "producer")
        if m.smem.written is not None:
            m.smem.on_atomic(ad, 8, lanes, f"{ins.pc:#06x}")
        old = S.apply(m, ins, a, w, l, ad[a, w, l], cnt, tx, drop)
        if hi is not None:
            from flashsim.smem.mbarrier import state_token

            # the returned state: the high half of the state before the update; the low register of the pair
            # keeps what it held (H100: mbar_word_probe, whose registers held other values; the scripts'
            # registers held 0)
            out = np.zeros(lanes.shape, np.uint32)
            out[a, w, l] = (state_token(old) >> np.uint64(32)).astype(np.uint32)
            m.R[hi][lanes] = out[lanes]
    return run


def _phasechk(ctx: Ctx):
    # SYNCS.PHASECHK.TRANS64[.TRYWAIT] P, [a], R: P = the phase of parity R[31] has completed; a lane whose
    # phase has not parks (flashsim.sass.asyncstate) and resumes with P true when it completes
    mods = set(ctx.ins.mods[1:])
    ctx.need(mods <= {"TRANS64", "TRYWAIT"} and "TRANS64" in mods, f"{ctx.ins.name}")
    trywait = "TRYWAIT" in mods
    ops = ctx.ops
    ctx.need(len(ops) == 3 and ops[0].kind in ("p", "up") and not ops[0].invert, f"{ctx.ins.text}")
    pcode = _pred_code(ops[0])
    wp = ctx.dst(0)
    addr = _address(ctx, 1, False)
    rq = ctx.u32(2)
    ins = ctx.ins
    pc = ins.pc
    what = "mbarrier.try_wait" if trywait else "mbarrier.test_wait"

    @control
    def run(m, ex, active):
        act = lanes_of(m, active)
        lanes = act if ex is None else (np.asarray(ex) & act)
        if not lanes.any():
            return None
        S = m.async_state()
        ad = addr(m)
        S.check(m, ins, lanes, ad, what)
        parity = (np.broadcast_to(np.asarray(rq(m), np.uint32), lanes.shape) >> np.uint32(31)).astype(np.int8)
        words = S.words(m)
        a, w, l = np.nonzero(lanes)
        from flashsim.smem.mbarrier import phase_done

        ok = np.zeros(lanes.shape, bool)
        ok[a, w, l] = phase_done(words[a, ad[a, w, l] >> 3], parity[a, w, l])
        if ok.any():
            S.acquired_lanes(m, ok, ad, parity, "pass", pc)
        if pcode == -1:
            return None
        wp(m, ok, lanes)
        park = lanes & ~ok
        if not park.any():
            return None
        for x, y in {(int(p), int(q)) for p, q, _ in np.argwhere(park)}:
            S.role(x, y, "waits")
        m.leave_together()
        m.pc[act] = pc + 16
        S.park(m, park, pc, ad, parity, pcode, trywait)
        return "moved"
    return run


def _inval(ctx: Ctx):
    # SYNCS.CCTL.IV [a]: mbarrier.inval. The state of every valid mbarrier in the aligned 16-byte block holding
    # the barrier is written to its shared-memory bytes, the only time the SYNCS instructions change those
    # (H100 record, flashsim.smem.mbarrier); then the barrier counts as uninitialised again, so a later use
    # without an init is reported
    ctx.need(ctx.ins.mods == ("CCTL", "IV") and len(ctx.ops) == 1, f"{ctx.ins.name}")
    addr = _address(ctx, 0, False)
    ins = ctx.ins

    def run(m, ex):
        got = _barrier_lanes(m, ex, addr, ins, "mbarrier.inval")
        if got is None:
            return
        from flashsim.smem.mbarrier import inval_block

        lanes, S, ad = got
        a, w, l = np.nonzero(lanes)
        lo, hi = inval_block(ad[a, w, l])
        cta, slot = np.concatenate([a, a]), np.concatenate([lo, hi]) >> 3
        valid = S.inited[cta, slot]
        cta, slot = cta[valid], slot[valid]
        m.smem.data.view(np.uint64)[cta, slot] = S.words(m)[cta, slot]
        if m.smem.written is not None:
            m.smem.written[cta[:, None], slot[:, None] * 8 + np.arange(8)] = True
        S.inited[a, ad[a, w, l] >> 3] = False
        if m.smem.clocks is not None:
            for x, z in {(int(p), int(q)) for p, q in zip(a, ad[a, w, l])}:
                m.smem.clocks.mbar_forget(x, z)
        S.epoch += 1
    return run


# ------------------------------------------------------------------------------------------------ bulk copies
def _uaddr(ctx: Ctx, i: int, pair_shared: bool):
    """A uniform memory operand [URn+off]: per warp (A, W) the 64-bit value of URn:URn+1 + off (global), or
    (URn + off, URn+1) (a shared destination and its mbarrier)."""
    op = ctx.ops[i]
    ctx.need(op.kind == "mem" and op.reg == RZ and op.ureg != URZ and not op.suffix, f"operand {op.text}")
    u, off = op.ureg, op.value
    if pair_shared:
        return lambda m: (m.UR[u].astype(np.int64) + off, m.UR[u + 1].astype(np.int64))
    return lambda m: (m.UR[u].astype(np.uint64) | (m.UR[u + 1].astype(np.uint64) << np.uint64(32))) + np.uint64(off)


@semantic("UBLKCP", family="sync")
def ublkcp(ctx: Ctx):
    # UBLKCP.S.G [URd], [URs], URn: cp.async.bulk global -> shared, n = (URn & 0xffff) * 16 bytes, complete-tx
    # of n on the mbarrier at URd+1 when the bytes land. UBLKCP.G.S [URd], [URs], URn: shared -> global
    # (bulk_group), done at once here (its wait_group has nothing left to wait for).
    mods = ctx.ins.mods
    ctx.need(mods in (("S", "G"), ("G", "S")) and len(ctx.ops) == 3 and ctx.ops[2].kind == "ur",
             f"{ctx.ins.name} (multicast, cache hints and other bulk-copy forms)")
    to_shared = mods == ("S", "G")
    ru = ctx.ops[2].index
    ins = ctx.ins
    dst = _uaddr(ctx, 0, to_shared)
    src = _uaddr(ctx, 1, not to_shared)
    if not to_shared:  # [URs] is one shared address, not a pair
        s_op = ctx.ops[1]
        src = lambda m: m.UR[s_op.ureg].astype(np.int64) + s_op.value  # noqa: E731

    def size_of(m, a, w):
        raw = int(m.UR[ru][a, w]) if ru != URZ else 0
        if raw >> 16:
            raise NotImplementedError(f"bulk copy operand {raw:#x} has bits above the size (multicast / cache "
                                      f"hints are not modelled): {ins.where()}")
        return (raw & 0xFFFF) * 16

    def run(m, ex):
        warps = warps_of(m, ex)
        if not warps.any():
            return
        S = m.async_state()
        for a, w in zip(*np.nonzero(warps)):
            a, w = int(a), int(w)
            n = size_of(m, a, w)
            mask = warp_lanes(m, a, w)
            if to_shared:
                d_all, bar_all = dst(m)
                d, bar = int(d_all[a, w]), int(bar_all[a, w])
                s = int(src(m)[a, w])
                data = _global_bytes(m, ins, mask, s, n)
                _check_shared(m, ins, mask, d, n)
                full = np.zeros(m.st.shape, np.int64)
                full[a, w] = bar
                S.check(m, ins, mask, full, "cp.async.bulk's mbarrier", need_init=False)
                if n == 0:
                    continue
                S.issue_copy(m, a, w, d, bar, data, ins.pc)
            else:
                g = int(dst(m)[a, w])
                s = int(src(m)[a, w])
                _check_shared(m, ins, mask, s, n)
                clocks = m.smem.clocks
                if clocks is not None:  # the store reads shared memory through the async proxy
                    col, vec = clocks.issue(a, w, "store")
                    m.smem.on_async_read(a, col, vec, np.arange(s, s + n), f"{ins.pc:#06x}")
                _global_store(m, ins, mask, g, m.smem.data[a, s:s + n].copy())
    return run


def _check_shared(m, ins, mask, addr: int, n: int) -> None:
    if addr % 16:
        raise fault("misaligned shared address", m, ins, mask, np.int64(addr), "a bulk copy needs 16-byte alignment")
    if addr >= (1 << 24):
        raise NotImplementedError(f"a bulk copy to shared::cluster address {addr:#x} of another CTA: clusters of "
                                  f"more than one CTA are not modelled: {ins.where()}")
    if addr < 0 or addr + n > m.smem.size:
        raise fault("out-of-bounds shared address", m, ins, mask, np.int64(addr),
                    f"a bulk copy of {n} bytes at {addr}; the CTA has {m.smem.size} bytes")


def _global_chunks(m, ins, mask, addr: int, n: int):
    if addr % 16:
        raise fault("misaligned global address", m, ins, mask, np.uint64(addr), "a bulk copy needs 16-byte alignment")
    a = np.uint64(addr) + np.arange(n // 16, dtype=np.uint64) * np.uint64(16)
    whole = m.mem.locate(np.array([addr], np.uint64), n)
    if n and whole[0] < 0:
        raise fault("out-of-bounds global address", m, ins, mask, np.uint64(addr),
                    f"a bulk copy of {n} bytes {m.mem.describe(addr)}")
    return a, np.full(len(a), int(whole[0]), np.int64)


def _global_bytes(m, ins, mask, addr: int, n: int) -> np.ndarray:
    if n == 0:
        return np.zeros(0, np.uint8)
    a, idx = _global_chunks(m, ins, mask, addr, n)
    return m.mem.gather(a, idx, 16).view(np.uint8).reshape(-1).copy()


def _global_store(m, ins, mask, addr: int, data: np.ndarray) -> None:
    if len(data) == 0:
        return
    a, idx = _global_chunks(m, ins, mask, addr, len(data))
    m.mem.scatter(a, idx, data.view(np.uint32).reshape(-1, 4), 16)


@semantic("UTMACMDFLUSH", family="sync")
def utmacmdflush(ctx: Ctx):
    # cp.async.bulk.commit_group: bulk stores complete when issued here; the group is kept for the race
    # detector's order (a wait_group.read makes the issuing warp ordered after the group's reads)
    def run(m, ex):
        clocks = m.smem.clocks
        if clocks is not None:
            for a, w in zip(*np.nonzero(warps_of(m, ex))):
                clocks.commit_stores(int(a), int(w))
    return run


# ------------------------------------------------------------------------------------------------ ELECT
@semantic("ELECT", family="sync")
def elect(ctx: Ctx):
    # ELECT P, URd, Q: elect.sync d|p, membermask (PTX ISA, "elect.sync"): the leader is the lowest lane
    # among the executing lanes where Q holds; P is true in the leader only; URd gets its lane number. The
    # membermask does not reach SASS: an executing lane outside it is undefined behaviour
    ops = ctx.ops
    ctx.need(len(ops) == 3 and ops[0].kind == "p" and ops[1].kind == "ur" and ops[2].kind in ("p", "up"),
             f"{ctx.ins.text}")
    wp = ctx.dst(0)
    ud = ops[1].index
    rq = ctx.pred(2)

    def run(m, ex):
        lanes = lanes_of(m, ex)
        part = lanes & np.broadcast_to(rq(m), lanes.shape)
        has = part.any(axis=2)
        leader = np.argmax(part, axis=2)
        win = part & (np.arange(32)[None, None, :] == leader[..., None]) & has[..., None]
        wp(m, win, lanes)
        if ud != URZ:
            warps = lanes.any(axis=2) & has
            m.UR[ud][warps] = leader[warps].astype(np.uint32)
    return run


# ------------------------------------------------------------------------------------------------ fences
@semantic("FENCE", "CGAERRBAR", family="mem")
def fence(ctx: Ctx):
    # Memory accesses complete when they execute here, so fences order nothing. FENCE.VIEW.ASYNC.{S,G,...}
    # (fence.proxy.async: generic-proxy accesses made visible to the async proxy of bulk copies and wgmma)
    # are logged per CTA (AsyncState.fences, fence_log) for checks of the async proxy's ordering
    mods = ctx.ins.mods
    if ctx.ins.opcode == "FENCE" and mods[:2] == ("VIEW", "ASYNC"):
        kind = ".".join(mods)
        pc = ctx.ins.pc

        def run(m, ex):
            lanes = lanes_of(m, ex)
            if lanes.any():
                m.async_state().note_fence(m, lanes.any(axis=2), pc, kind)
        return run
    return lambda m, ex: None


# ------------------------------------------------------------------------------------------------ setmaxnreg
@semantic("USETMAXREG", family="sync")
def usetmaxreg(ctx: Ctx):
    # setmaxnreg.{inc,dec}.sync.aligned.u32 n (PTX ISA, "setmaxnreg"; sm_90a): n in 24 .. 256, a multiple of 8.
    # DEALLOC n: the warp gives (current - n) registers per thread back to the CTA's pool; TRY_ALLOC UP, n:
    # takes (n - current) from the pool if it holds them (UP true), else UP false and ptxas's loop tries
    # again: here the warp parks until a DEALLOC fills the pool. Registers above the count keep their values
    # (their contents are undefined in the PTX ISA); an instruction naming one faults.
    mods = set(ctx.ins.mods)
    ops = ctx.ops
    ctx.need(mods in ({"TRY_ALLOC", "CTAPOOL"}, {"DEALLOC", "CTAPOOL"}), f"{ctx.ins.name}")
    alloc = "TRY_ALLOC" in mods
    ctx.need(len(ops) == (2 if alloc else 1) and ops[-1].kind == "imm", f"{ctx.ins.text}")
    want = ops[-1].value
    ctx.need(24 <= want <= 256 and want % 8 == 0, f"{ctx.ins.text} (a register count outside 24..256 or not a "
                                                   "multiple of 8)")
    pcode = _pred_code(ops[0]) if alloc else -1
    wup = ctx.dst(0) if alloc else None
    ins = ctx.ins
    pc = ins.pc

    def run(m, ex, lanes, act):
        warps = np.asarray(ex, bool)
        if not warps.any():
            return None
        S = m.async_state()
        cur = S.maxnreg
        bad = warps & ((cur < want) if not alloc else (cur > want))
        if bad.any():
            a, w = (int(v) for v in np.argwhere(bad)[0])
            raise fault("setmaxnreg misuse", m, ins, lanes & bad[..., None], np.int64(0),
                        f"setmaxnreg.{'inc' if alloc else 'dec'} to {want} registers from {int(cur[a, w])} "
                        f"(undefined in the PTX ISA)")
        if not alloc:
            give = np.where(warps, (cur - want) * 32, 0).sum(axis=1)
            S.pool += give
            S.maxnreg[warps] = want
            S.reg_limited = True
            S.epoch += 1
            S.wake(m)
            return None
        got = np.zeros(warps.shape, bool)
        for a, w in zip(*np.nonzero(warps)):
            need = (want - int(cur[a, w])) * 32
            if S.pool[a] >= need:
                S.pool[a] -= need
                S.maxnreg[a, w] = want
                got[a, w] = True
        wup(m, got, warps)
        park = warps & ~got
        if not park.any():
            return None
        S.reg_limited = True
        m.leave_together()
        m.pc[act] = pc + 16
        S.park_regs(m, park, pc, np.full(park.shape, want), pcode)
        return "moved"
    run.lanes = True
    return run
