"""The asynchronous machinery of a batch of CTAs (sm_90): lanes parked on mbarriers and on the CTA's register
pool, bulk copies in flight, the fence log, and the wait-for graph printed when every live lane is blocked.

A :class:`flashsim.sass.machine.Machine` creates one lazily (``Machine.async_state()``), at the first
instruction that needs it (SYNCS.*, UBLKCP, USETMAXREG, FENCE.VIEW.ASYNC; not ELECT), so kernels without
Hopper synchronisation run exactly as before.

Waiting. ``mbarrier.try_wait`` is "potentially blocking": a thread whose phase has not completed may be
suspended until the phase completes or a system-dependent time limit passes, and then returns false (PTX
ISA, "mbarrier.test_wait / mbarrier.try_wait"). ptxas puts every wait in a loop (``SYNCS.PHASECHK.TRANS64
.TRYWAIT P, [bar], parity; @!P BRA retry``). Here a failing wait (TRYWAIT, and also the non-blocking
test form, whose failure a kernel can only act on by trying again later) parks its lanes instead of
spinning: they leave the runnable set (state PARK) until the barrier's phase completes, and then resume
after the instruction with the predicate true. ``setmaxnreg.inc`` (USETMAXREG.TRY_ALLOC, also in a retry
loop) parks its warp until the CTA's pool holds the registers it asks for.

The time limit: when no lane can run, the machine first lands the bulk copies in flight, then wakes lanes
whose phase has completed, and only then releases the parked lanes with the predicate false
(their try_wait "timed out"), at most ``RELEASES_PER_EPOCH`` times per lane and epoch: the epoch counts
the events that can unblock a lane (mbarrier updates, bulk copies landing, named-barrier arrivals, exits,
register releases). A lane released that often with no such event in between is spinning in a wait loop
on something that can never happen (a kernel that gives up after so many failed tries and does something
else is not told apart): the launch stops with :class:`BarrierDeadlock` and prints the wait-for graph.

Bulk copies (UBLKCP.S.G, ``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes``, and the tensor
copies UTMALDG, ``cp.async.bulk.tensor``) read
global memory when issued and land (bytes in shared memory, then a complete-tx of their size on their
mbarrier) ``ASYNC_DELAY`` scheduling steps later, or at a random delay in 0 .. 4 * ASYNC_DELAY steps
under ``ExecOptions.schedule_seed``, or at once when no lane can run: the data a consumer reads before its
wait completes is then stale, as it can be on the device.
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import location
from flashsim.sass.machine import EXITED, NONE, PARK, RUN, fault
from flashsim.smem import mbarrier as mb

__all__ = ["ASYNC_DELAY", "AsyncState", "BarrierHistory", "RELEASES_PER_EPOCH"]

ASYNC_DELAY = 32  # scheduling steps between issuing a bulk copy and its landing (default schedule)
RELEASES_PER_EPOCH = 64  # timeouts a parked lane gets while nothing else happens, before a deadlock
NO_PRED = -1
_KIND_MBAR, _KIND_REGS = 1, 2


class BarrierHistory:
    """What happened to one mbarrier: completed phases, arrivals per warp this phase and ever (for the
    wait-for graph: who arrived, who could still arrive)."""

    __slots__ = ("count", "phases", "now", "ever", "tx_by", "init_pc", "sites", "tx_sites", "late")

    def __init__(self, count: int = 0, init_pc: int = -1):
        self.count = count  # the arrival count of the init
        self.phases = 0  # phases completed since the init
        self.now: dict[int, int] = {}  # warp -> arrivals in the current phase
        self.ever: set[int] = set()  # warps that arrived in some phase
        self.tx_by: set[int] = set()  # warps that announced transactions (expect_tx) or issued bulk copies
        self.init_pc = init_pc  # the mbarrier.init's PC
        self.sites: dict[int, int] = {}  # warp -> PC of its arrivals in the current phase
        self.tx_sites: dict[tuple, int] = {}  # (PC, warp) -> bytes announced there (expect_tx) this phase
        self.late = 0  # copies that landed after the phase they were issued in had completed

    def new_phase(self) -> None:
        self.phases += 1
        self.now = {}
        self.sites = {}
        self.tx_sites = {}


class AsyncState:
    """Per-machine state of the Hopper synchronisation units (see the module docstring)."""

    def __init__(self, m):
        A, W = m.A, m.W
        self.epoch = 0
        shape = (A, W, 32)
        self.kind = np.zeros(shape, np.int8)  # why a lane is parked (0: it is not)
        self.addr = np.zeros(shape, np.int64)  # the mbarrier it waits on
        self.parity = np.zeros(shape, np.int8)  # the parity of the phase it waits for
        self.pred = np.full(shape, NO_PRED, np.int16)  # predicate to set on release: P0..P6, or 8 + UPn
        self.trywait = np.zeros(shape, bool)
        self.released = np.full(shape, -1, np.int64)  # epoch of the lane's last timeout release
        self.releases = np.zeros(shape, np.int64)  # timeouts in that epoch
        # where a lane's wait loop began: ptxas's retry block (YIELD; TRYWAIT; @!P BRA) sits at the end of the
        # kernel with whatever line the line table gives it, so the first failing wait's PC is kept across
        # timeouts on the same barrier and parity
        self.first_pc = np.full(shape, -1, np.int64)
        self.timed_out = np.zeros(shape, bool)
        self.need_regs = np.zeros((A, W), np.int64)  # per parked warp: the register count it asks for
        self.copies: list[dict] = []  # bulk copies in flight
        self.due = None  # the step at which the earliest copy lands
        # fence.proxy.async / fence.mbarrier_init log: per CTA the number of async-proxy fences, and the
        # (step, cta, warp, pc, kind) records (a later hazard checker orders generic- and async-proxy
        # accesses with them)
        self.protocol: list[dict] = []  # protocol findings: kind, cta, sites [(pc, warp)], message (checking reports)
        self.fences = np.zeros(A, np.int64)
        self.fence_log: list[tuple] = []
        self.inited = np.zeros((A, max(1, m.smem.size // 8)), bool)  # 8-byte words initialised as mbarriers
        self.state = np.zeros(self.inited.shape, np.uint64)  # their states, apart from the bytes (words())
        self.bars: dict[tuple[int, int], BarrierHistory] = {}
        self.roles: dict[tuple[int, int], set] = {}
        self.waited_on: dict[tuple[int, int], set] = {}  # (cta, warp) -> mbarriers it parked on
        # setmaxnreg: each warp's register count (the kernel's, rounded up to the allocation unit of 8) and
        # the CTA's pool of released registers (in registers per thread x 32)
        regs = int(getattr(m.kernel, "regcount", 255) or 255)
        self.maxnreg = np.full((A, W), min(256, (regs + 7) // 8 * 8), np.int64)
        self.pool = np.zeros(A, np.int64)
        self.reg_limited = False
        self._maxreg_at = None
        seed = m.options.schedule_seed
        self.rng = None if seed is None else np.random.default_rng([int(seed), 0x5EED])

    # ------------------------------------------------------------------------------------ words
    def words(self, m) -> np.ndarray:
        """The mbarrier states of every CTA's 8-byte shared-memory slots, (A, size / 8) uint64. They are not the
        shared-memory bytes: a generic load reads those, which only mbarrier.inval writes
        (flashsim.smem.mbarrier)."""
        return self.state

    def check(self, m, ins, lanes: np.ndarray, addr: np.ndarray, what: str, need_init: bool = True) -> None:
        """Faults for mbarrier addresses of ``lanes``: misaligned (8 bytes), out of the CTA's shared memory,
        in another CTA of a cluster (bits 24.. of a shared::cluster address), or not initialised."""
        bad = lanes & ((addr & 7) != 0)
        if bad.any():
            raise fault("misaligned shared address", m, ins, bad, addr, f"{what} needs an 8-byte aligned mbarrier")
        remote = lanes & (addr >= (1 << 24))
        if remote.any():
            raise NotImplementedError(f"{what} on an mbarrier of another CTA of the cluster (shared::cluster "
                                      f"address {int(addr[remote][0]):#x}): clusters of more than one CTA are not "
                                      f"modelled: {ins.where()}")
        oob = lanes & ((addr < 0) | (addr + 8 > m.smem.size))
        if oob.any():
            raise fault("out-of-bounds shared address", m, ins, oob, addr,
                        f"{what} of an mbarrier at {int(addr[oob][0])}; the CTA has {m.smem.size} bytes")
        if need_init:
            a, w, l = np.nonzero(lanes)
            ok = self.inited[a, addr[a, w, l] >> 3]
            if not ok.all():
                bad = np.zeros(lanes.shape, bool)
                bad[a[~ok], w[~ok], l[~ok]] = True
                raise fault("mbarrier used before mbarrier.init", m, ins, bad, addr,
                            f"{what} on shared {int(addr[bad][0]):#x}, which no mbarrier.init (SYNCS.EXCH.64) "
                            "of this CTA initialised")

    def history(self, a: int, addr: int) -> BarrierHistory:
        h = self.bars.get((a, addr))
        if h is None:
            h = self.bars[(a, addr)] = BarrierHistory()
        return h

    def role(self, a: int, w: int, what: str) -> None:
        self.roles.setdefault((a, w), set()).add(what)

    def role_of(self, a: int, w: int) -> str:
        """A warp's role as its actions show it: "producer" (announced transaction bytes or issued bulk
        copies), "consumer" (waited on an mbarrier whose bytes another warp announced), or ""."""
        if "producer" in self.roles.get((a, w), ()):
            return "producer"
        for addr in self.waited_on.get((a, w), ()):
            h = self.bars.get((a, addr))
            if h is not None and h.tx_by - {w}:
                return "consumer"
        return ""

    # ------------------------------------------------------------------------------------ updates
    def exchange(self, m, a: np.ndarray, w: np.ndarray, addr: np.ndarray, value: np.ndarray,
                 pc: int = -1) -> np.ndarray:
        """SYNCS.EXCH.64 by warps (a, w) in order: each stores its 64-bit ``value`` (an mbarrier.init) and
        gets the old word. The barriers count as initialised from now on, with a fresh history."""
        words = self.words(m)
        old = np.empty(len(a), np.uint64)
        for i in range(len(a)):
            k = int(addr[i]) >> 3
            old[i] = words[a[i], k]
            words[a[i], k] = value[i]
            self.inited[a[i], k] = True
            self.bars[(int(a[i]), int(addr[i]))] = BarrierHistory(int(mb.fields(value[i])["expected"]), pc)
            if m.smem.clocks is not None:
                m.smem.clocks.mbar_forget(int(a[i]), int(addr[i]))
            self.log(m, int(a[i]), int(w[i]), -1, "init", int(addr[i]), 0,
                     f"count {int(mb.fields(value[i])['expected'])}")
        self.changed(m)
        return old

    def apply(self, m, ins, a, w, lane, addr, count, tx, drop: bool) -> np.ndarray:
        """Arrive-on / expect-tx / complete-tx updates by lanes (a, w, lane) (arrays, (cta, warp, lane)
        order) on the mbarriers at ``addr``: the lanes of one warp instruction on one barrier act as one
        update of their summed count and tx (the hardware combines a warp's arrivals), and each gets the
        word before it; warps act one after another in warp order. Returns each lane's old word."""
        words = self.words(m)
        old = np.empty(len(a), np.uint64)
        key = np.stack([a, addr, w])
        groups, inv = np.unique(key, axis=1, return_inverse=True)
        inv = inv.reshape(-1)
        gcount = np.bincount(inv, weights=count, minlength=groups.shape[1]).astype(np.int64)
        gtx = np.bincount(inv, weights=tx, minlength=groups.shape[1]).astype(np.int64)
        gold = np.empty(groups.shape[1], np.uint64)
        pending = np.arange(groups.shape[1])
        while pending.size:
            # one round: the earliest warp of every distinct barrier (groups are sorted by cta, addr, warp)
            ga, gaddr = groups[0, pending], groups[1, pending]
            first = np.ones(pending.size, bool)
            first[1:] = (ga[1:] != ga[:-1]) | (gaddr[1:] != gaddr[:-1])
            sel = pending[first]
            sa, sad = groups[0, sel], groups[1, sel] >> 3
            cur = words[sa, sad]
            new, done, misuse = mb.arrive(cur, gcount[sel], gtx[sel], drop)
            if misuse.any():
                j = int(np.argmax(misuse != 0))
                g = sel[j]
                mask = np.zeros(m.st.shape, bool)
                members = inv == g
                mask[a[members], w[members], lane[members]] = True
                full = np.zeros(m.st.shape, np.int64)
                full[a[members], w[members], lane[members]] = groups[1, g]
                raise fault("mbarrier misuse", m, ins, mask, full,
                            f"{mb.MISUSE[int(misuse[j])]}: {int(gcount[g])} arrivals, tx {int(gtx[g]):+d} on an "
                            f"mbarrier in {mb.describe(cur[j])} (undefined in the PTX ISA)")
            words[sa, sad] = new
            gold[sel] = cur
            clocks = m.smem.clocks
            for j, g in enumerate(sel):
                ca, cad = int(groups[0, g]), int(groups[1, g])
                h = self.history(ca, cad)
                wv = int(groups[2, g])
                if gcount[g]:
                    h.now[wv] = h.now.get(wv, 0) + int(gcount[g])
                    h.sites[wv] = ins.pc
                    h.ever.add(wv)
                    if clocks is not None:  # an arrival releases (PTX ISA: mbarrier.arrive has .release semantics)
                        clocks.mbar_release(ca, cad, clocks.release(ca, wv))
                if gtx[g] > 0:
                    h.tx_by.add(wv)
                    h.tx_sites[(ins.pc, wv)] = h.tx_sites.get((ins.pc, wv), 0) + int(gtx[g])
                if self.recording(m):
                    kind = "arrive" if gcount[g] else "expect_tx" if gtx[g] > 0 else "complete_tx"
                    self.log(m, ca, wv, ins.pc, kind, cad, h.phases,
                             f"count {int(gcount[g])}, tx {int(gtx[g]):+d}" + (" (drop)" if drop else ""))
                if done[j]:
                    if clocks is not None:
                        clocks.mbar_phase_completed(ca, cad, int(mb.fields(cur[j])["phase"]))
                    h.new_phase()
                    self.log(m, ca, wv, ins.pc, "phase", cad, h.phases, "")
            pending = pending[~first]
        old[:] = gold[inv]
        self.changed(m)
        return old

    def changed(self, m) -> None:
        """An mbarrier word changed: a new epoch, and lanes whose phase completed resume."""
        self.epoch += 1
        if (self.kind == _KIND_MBAR).any():
            self.wake(m)

    # ------------------------------------------------------------------------------------ parking
    def park(self, m, lanes: np.ndarray, pc: int, addr: np.ndarray, parity: np.ndarray, pred: int,
             trywait: bool) -> None:
        """Park ``lanes`` at ``pc`` until the phase of ``parity`` of the mbarrier at ``addr`` completes."""
        m.leave_together()
        m.st[lanes] = PARK
        m.pc[lanes] = pc
        new_addr = np.broadcast_to(addr, lanes.shape)
        new_par = np.broadcast_to(parity, lanes.shape)
        again = lanes & self.timed_out & (self.addr == new_addr) & (self.parity == new_par)
        self.first_pc[lanes & ~again] = pc
        self.timed_out[lanes] = False
        self.kind[lanes] = _KIND_MBAR
        self.addr[lanes] = new_addr[lanes]
        self.parity[lanes] = new_par[lanes]
        self.pred[lanes] = pred
        self.trywait[lanes] = trywait
        for x, y, l in np.argwhere(lanes):
            self.waited_on.setdefault((int(x), int(y)), set()).add(int(self.addr[x, y, l]))
        if self.recording(m):
            for x, y in sorted({(int(p), int(q)) for p, q, _ in np.argwhere(lanes)}):
                ad = int(self.addr[x, y][lanes[x, y]][0])
                self.log(m, x, y, pc, "wait", ad, self.history(x, ad).phases,
                         f"parity {int(self.parity[x, y][lanes[x, y]][0])}")

    def park_regs(self, m, warps: np.ndarray, pc: int, want: np.ndarray, pred: int) -> None:
        """Park the live lanes of ``warps`` ((A, W) bools) until the pool holds ``want`` registers each."""
        m.leave_together()
        lanes = warps[..., None] & (m.st == RUN)
        m.st[lanes] = PARK
        m.pc[lanes] = pc
        self.kind[lanes] = _KIND_REGS
        self.pred[lanes] = pred
        self.need_regs[warps] = np.broadcast_to(want, warps.shape)[warps]

    def _resume(self, m, lanes: np.ndarray, value: bool) -> None:
        for p in np.unique(self.pred[lanes]):
            sel = lanes & (self.pred == p)
            if p == NO_PRED:
                continue
            if p < 8:
                m.P[int(p)][sel] = value
            else:
                m.UP[int(p) - 8][sel.any(axis=2)] = value
        m.st[lanes] = RUN
        m.pc[lanes] += 16
        self.kind[lanes] = 0
        self.pred[lanes] = NO_PRED
        self.timed_out[lanes] = not value

    def wake(self, m) -> bool:
        """Resume the parked lanes whose phase has completed (or whose registers the pool now holds)."""
        woke = False
        park = self.kind == _KIND_MBAR
        if park.any():
            a, w, l = np.nonzero(park)
            word = self.words(m)[a, self.addr[a, w, l] >> 3]
            done = mb.phase_done(word, self.parity[a, w, l])
            if done.any():
                sel = np.zeros(park.shape, bool)
                sel[a[done], w[done], l[done]] = True
                self.acquired_lanes(m, sel, self.addr, self.parity, "resume")
                self._resume(m, sel, True)
                woke = True
        regs = self.kind == _KIND_REGS
        if regs.any():
            for a, w in sorted({(int(x), int(y)) for x, y, _ in np.argwhere(regs)}):
                want = int(self.need_regs[a, w])
                need = (want - int(self.maxnreg[a, w])) * 32
                if self.pool[a] >= need:
                    self.pool[a] -= need
                    self.maxnreg[a, w] = want
                    sel = np.zeros(regs.shape, bool)
                    sel[a, w] = regs[a, w]
                    self._resume(m, sel, True)
                    woke = True
        return woke

    # ------------------------------------------------------------------------------------ bulk copies
    def issue_copy(self, m, a: int, w: int, dst: int, mbar: int, data: np.ndarray, pc: int,
                   addrs: np.ndarray | None = None) -> None:
        """A bulk copy global -> shared whose bytes (read now) land later, then complete-tx on ``mbar``."""
        pol = m.options.schedule_policy
        if pol is not None and pol.copy_delay is not None:
            delay = pol.copy_delay
        elif self.rng is None:
            delay = ASYNC_DELAY
        else:
            delay = int(self.rng.integers(0, 4 * ASYNC_DELAY + 1))
        self.copies.append({"a": a, "w": w, "dst": dst, "mbar": mbar, "data": data, "due": m.steps + delay,
                            "pc": pc, "phase": self.history(a, mbar).phases})
        if addrs is not None:
            self.copies[-1]["addrs"] = np.asarray(addrs, np.int64)
        clocks = m.smem.clocks
        if clocks is not None:  # the copy's writes, ordered after what warp w did before issuing it
            col, vec = clocks.issue(a, w, "load")
            self.copies[-1]["vec"] = vec
            where = np.arange(dst, dst + len(data)) if addrs is None else np.asarray(addrs, np.int64)
            m.smem.on_async_write(a, col, vec, where, f"{pc:#06x}")
        if self.recording(m):  # the copy's range, for flashsim.kernels.ws_schedule
            lo, hi = (dst, dst + len(data)) if addrs is None else (int(np.min(addrs)), int(np.max(addrs)) + 1)
            self.log(m, a, w, pc, "copy", mbar, self.history(a, mbar).phases,
                     f"{len(data)} bytes into shared {lo:#x}..{hi:#x}")
        self.due = min(c["due"] for c in self.copies)
        self.role(a, w, "producer")
        self.history(a, mbar).tx_by.add(w)

    def issue_tensor_copy(self, m, a: int, w: int, addrs: np.ndarray, data: np.ndarray, mbar: int, tx: int,
                          pc: int) -> None:
        """A tensor copy global -> shared (UTMALDG, flashsim.sass.ops_tma): its bytes (read now) land later at the
        shared byte addresses ``addrs`` (the box's swizzled layout), then complete-tx of ``tx`` bytes on ``mbar``;
        scheduled like :meth:`issue_copy`."""
        self.issue_copy(m, a, w, 0, mbar, np.asarray(data, np.uint8), pc, addrs=addrs)
        self.copies[-1]["tx"] = int(tx)

    def land(self, m, everything: bool = False) -> bool:
        """Land the copies that are due (all of them with ``everything``), in the order they were issued."""
        if not self.copies:
            return False
        now = [c for c in self.copies if everything or c["due"] <= m.steps]
        if not now:
            return False
        self.copies = [c for c in self.copies if not (everything or c["due"] <= m.steps)]
        self.due = min((c["due"] for c in self.copies), default=None)
        words = self.words(m)
        for c in now:
            a, dst, data = c["a"], c["dst"], c["data"]
            # a tensor copy (issue_tensor_copy) lands byte by byte at its box's addresses
            where = c["addrs"] if "addrs" in c else slice(dst, dst + len(data))
            m.smem.data[a, where] = data
            if m.smem.written is not None:
                m.smem.written[a, where] = True
            k = c["mbar"] >> 3
            if not self.inited[a, k]:
                ins = m.program.instructions[c["pc"]]
                mask = np.zeros(m.st.shape, bool)
                mask[a, c["w"], 0] = True
                raise fault("mbarrier used before mbarrier.init", m, ins, mask, np.int64(c["mbar"]),
                            f"a bulk copy completes its {len(data)} bytes on shared {c['mbar']:#x}, which no "
                            "mbarrier.init of this CTA initialised")
            new, done, misuse = mb.complete_tx(words[a, k], c.get("tx", len(data)))
            if int(misuse):
                ins = m.program.instructions[c["pc"]]
                mask = np.zeros(m.st.shape, bool)
                mask[a, c["w"], 0] = True
                raise fault("mbarrier misuse", m, ins, mask, np.int64(c["mbar"]),
                            f"{mb.MISUSE[int(misuse)]}: a bulk copy's complete-tx of {len(data)} bytes on an mbarrier "
                            f"in {mb.describe(words[a, k])}")
            clocks = m.smem.clocks
            if clocks is not None and "vec" in c:  # complete_tx releases the copy's writes into the phase
                clocks.mbar_release(a, c["mbar"], c["vec"])
            old_phase = int(mb.fields(words[a, k])["phase"])
            words[a, k] = new
            h = self.history(a, c["mbar"])
            if c.get("phase", h.phases) != h.phases:
                self._late_copy(m, a, c, h)
            self.log(m, a, c["w"], -1, "land", c["mbar"], h.phases,
                     f"{len(data)} bytes, complete_tx {c.get('tx', len(data))} (issued at pc={c['pc']:#06x})")
            if bool(done):
                if clocks is not None:
                    clocks.mbar_phase_completed(a, c["mbar"], old_phase)
                h.new_phase()
                self.log(m, a, c["w"], -1, "phase", c["mbar"], h.phases, "completed by a copy's complete_tx")
        self.changed(m)
        return True

    # ------------------------------------------------------------------------------------ the scheduler's hooks
    def before(self, m, pc: int, active) -> None:
        """Called before each scheduling step: land due copies; check the register bound of setmaxnreg."""
        if self.due is not None and self.due <= m.steps:
            self.land(m)
        if self.reg_limited:
            self._check_regs(m, pc, active)

    def stall(self, m) -> bool:
        """No lane can run: land every copy, wake who can resume, else release the parked lanes once per
        epoch with their predicate false (a try_wait's time limit). False: nothing can ever run again."""
        if self.copies:
            self.land(m, everything=True)
            return True
        if self.wake(m):
            return True
        park = self.kind != 0
        new_epoch = park & (self.released != self.epoch)
        self.releases[new_epoch] = 0
        self.released[new_epoch] = self.epoch
        fresh = park & (self.releases < RELEASES_PER_EPOCH)
        if fresh.any():
            self.releases[fresh] += 1
            if self.recording(m):
                for x, y in sorted({(int(p), int(q)) for p, q, _ in np.argwhere(fresh)}):
                    ad = int(self.addr[x, y][fresh[x, y]][0])
                    self.log(m, x, y, int(m.pc[x, y][fresh[x, y]][0]), "timeout", ad, self.history(x, ad).phases, "")
            self._resume(m, fresh, False)
            return True
        return False

    def pick_warps(self, m, active: np.ndarray) -> np.ndarray:
        """Under a schedule seed, a random non-empty subset of the warps at the chosen PC (warps at one PC
        need not issue together), so a woken warp's turn follows the seed too."""
        if self.rng is None:
            return active
        warps = np.argwhere(active.any(axis=2))
        if len(warps) < 2:
            return active
        keep = self.rng.random(len(warps)) < 0.5
        keep[int(self.rng.integers(len(warps)))] = True
        sel = np.zeros(active.shape[:2], bool)
        sel[warps[keep, 0], warps[keep, 1]] = True
        return active & sel[..., None]

    # ------------------------------------------------------------------------------------ setmaxnreg
    def _check_regs(self, m, pc: int, active) -> None:
        if self._maxreg_at is None:
            self._maxreg_at = {p: _max_register(ins) for p, ins in m.program.instructions.items()}
        top = self._maxreg_at.get(pc, -1)
        if top < 0:
            return
        lanes = (m.st == RUN) if active is None else active
        warps = lanes.any(axis=2)
        over = warps & (self.maxnreg <= top)
        if over.any():
            a, w = (int(v) for v in np.argwhere(over)[0])
            mask = np.zeros(m.st.shape, bool)
            mask[a, w] = lanes[a, w]
            raise fault("register beyond setmaxnreg", m, m.program.instructions[pc], mask, np.int64(0),
                        f"the instruction uses R{top}, the warp holds {int(self.maxnreg[a, w])} registers "
                        "after setmaxnreg")

    # ------------------------------------------------------------------------------------ the wait-for graph
    def barrier_name(self, a: int, addr: int) -> str:
        """``mbarrier at shared 0x0410 (stage 2 of the 4 at 0x0400..0x0418)``: its address and its place in
        the run of consecutive mbarriers initialised with the same count (a pipeline's array of "full" or
        "empty" barriers, one per stage)."""
        row = self.inited[a]
        k = addr >> 3

        def same(j: int) -> bool:
            h = self.bars.get((a, j * 8))
            return bool(row[j]) and h is not None and h.count == self.history(a, addr).count

        lo = k
        while lo > 0 and same(lo - 1):
            lo -= 1
        hi = k
        while hi + 1 < len(row) and same(hi + 1):
            hi += 1
        n = hi - lo + 1
        if n == 1:
            return f"mbarrier at shared {addr:#06x}"
        return f"mbarrier at shared {addr:#06x} (stage {k - lo} of the {n} at {lo * 8:#06x}..{hi * 8:#06x})"

    def describe_warp(self, m, a: int, w: int) -> list[str]:
        """Lines saying what the parked lanes of warp (a, w) wait for."""
        out = []
        lanes = self.kind[a, w] != 0
        for kind in (_KIND_MBAR, _KIND_REGS):
            sel = lanes & (self.kind[a, w] == kind)
            if not sel.any():
                continue
            if kind == _KIND_REGS:
                want, cur = int(self.need_regs[a, w]), int(self.maxnreg[a, w])
                out.append(f"setmaxnreg.inc from {cur} to {want} registers per thread: the warp needs "
                           f"{(want - cur) * 32} from the CTA's pool, which holds {int(self.pool[a])} (released by "
                           "setmaxnreg.dec)")
                continue
            for addr in sorted({int(x) for x in self.addr[a, w][sel]}):
                at = sel & (self.addr[a, w] == addr)
                parity = int(self.parity[a, w][at][0])
                word = self.words(m)[a, addr >> 3]
                f = {k: int(v) for k, v in mb.fields(word).items()}
                h = self.history(a, addr)
                arrived = f["expected"] - f["pending"]
                who = ", ".join(f"{location(warp=x)} x{n}" + (f" at {m.program.source_line(h.sites[x])}"
                                                               if x in h.sites else "")
                                for x, n in sorted(h.now.items())) or "none"
                out.append(
                    f"{self.barrier_name(a, addr)}: waits for the phase of parity {parity} to complete (phase "
                    f"#{h.phases}, parity {f['phase']}, is current); arrivals {arrived} of {f['expected']} "
                    f"(pending {f['pending']}; this phase: {who}); "
                    + (f"tx-count {f['tx']} bytes pending" if f["tx"] >= 0 else
                       f"tx-count {f['tx']}: copies brought {-f['tx']} bytes more than expect_tx announced (the "
                       "phase completes only at tx-count 0; the H100 completed such phases in some runs and not in "
                       "others)")
                    + self._tx_note(m, h) + self._init_note(m, h))
                could, never = [], []
                for x in range(m.W):
                    st = m.st[a, x]
                    if ((st == EXITED) | (st == NONE)).all():
                        continue
                    if x in h.ever or x in h.tx_by:
                        if x in h.now and f["tx"] == 0:
                            continue
                        could.append(location(warp=x) + self._where_blocked(m, a, x))
                    else:
                        never.append(f"{x}")
                if self.copies:
                    could.append(f"{len(self.copies)} bulk copies in flight")
                line = "could still arrive: " + (", ".join(could) if could else
                                                 "none of the warps that arrived on it or announced its bytes")
                if never and not could:
                    line += f"; live warps that never arrived on it: {', '.join(never)}"
                out.append(line)
        return out

    @staticmethod
    def _tx_note(m, h: BarrierHistory) -> str:
        if not h.tx_sites:
            return ""
        return " (this phase's expect_tx: " + ", ".join(f"{n} bytes at {m.program.source_line(pc)}"
                                                        for (pc, _), n in sorted(h.tx_sites.items())) + ")"

    @staticmethod
    def _init_note(m, h: BarrierHistory) -> str:
        return f"; initialised with count {h.count} at {m.program.source_line(h.init_pc)}" if h.init_pc >= 0 else ""

    # ------------------------------------------------------------------------------------ protocol checks
    def _late_copy(self, m, a: int, c: dict, h: BarrierHistory) -> None:
        """A bulk copy landed after the phase it was issued in had completed: that phase's expect_tx announced
        fewer bytes than its copies bring (the surplus complete_tx counts toward a later phase)."""
        h.late += 1
        if h.late > 1:
            return
        name = self.barrier_name(a, c["mbar"])
        self.protocol.append({
            "kind": "expect_tx", "cta": int(m.cta_ids[a]), "sites": [(int(c["pc"]), int(c["w"]))],
            "message": f"{name}: a bulk copy of {len(c['data'])} bytes issued at {m.program.source_line(c['pc'])} "
                       f"during phase #{c['phase']} landed after that phase completed, in phase #{h.phases}: the "
                       "phase's expect_tx announced fewer bytes than its copies bring (the surplus complete_tx "
                       "counts toward a later phase)" + self._init_note(m, h)})

    def at_exit(self, m) -> None:
        """The end-of-kernel protocol checks, once every warp of the batch has exited: mbarriers left in a phase
        that has arrivals or transaction bytes pending part-way (an init count above the arrivals, an expect_tx
        unlike the copies), and bulk copies still in flight."""
        words = self.words(m)
        for (a, addr), h in sorted(self.bars.items()):
            if not self.inited[a, addr >> 3]:
                continue
            f = {k: int(v) for k, v in mb.fields(words[a, addr >> 3]).items()}
            arrived = f["expected"] - f["pending"]
            base = {"cta": int(m.cta_ids[a])}
            name = self.barrier_name(a, addr)
            if arrived:
                who = ", ".join(f"{location(warp=x)} x{n} at {m.program.source_line(h.sites[x])}"
                                for x, n in sorted(h.now.items()) if x in h.sites)
                self.protocol.append({**base, "kind": "arrival_count",
                                      "sites": sorted((pc, x) for x, pc in h.sites.items()),
                                      "message": f"{name}: the kernel ended with phase #{h.phases} holding {arrived} "
                                                 f"of its {f['expected']} arrivals ({who}){self._init_note(m, h)}: the "
                                                 "init count and the arrivals per phase differ"})
            if f["tx"]:
                self.protocol.append({**base, "kind": "expect_tx", "sites": sorted(h.tx_sites),
                                      "message": f"{name}: the kernel ended with a tx-count of {f['tx']} bytes in phase "
                                                 f"#{h.phases}{self._tx_note(m, h)}: expect_tx and the bytes of the "
                                                 "copies differ"})
        for c in self.copies:
            self.protocol.append({"cta": int(m.cta_ids[c["a"]]), "kind": "copy_in_flight",
                                  "sites": [(int(c["pc"]), int(c["w"]))],
                                  "message": f"a bulk copy of {len(c['data'])} bytes issued at "
                                             f"{m.program.source_line(c['pc'])} had not landed when its CTA exited "
                                             "(nothing waited on its mbarrier)"})

    def _where_blocked(self, m, a: int, w: int) -> str:
        st = m.st[a, w]
        live = (st != EXITED) & (st != NONE)
        if not live.any():
            return " (exited)"
        pcs = sorted({int(p) for p in m.pc[a, w][live]})
        return " (blocked at " + ", ".join(f"pc={p:#06x}" for p in pcs) + ")"

    def note_fence(self, m, warps: np.ndarray, pc: int, kind: str) -> None:
        c, w = np.nonzero(warps)
        np.add.at(self.fences, c, 1)
        if len(self.fence_log) < 100_000:
            self.fence_log.extend((m.steps, int(x), int(y), pc, kind) for x, y in zip(c, w))
        clocks = m.smem.clocks
        if clocks is not None and not kind.endswith(".G"):  # the shared-memory (or every) state space
            for x, y in zip(c, w):
                clocks.fence(int(x), int(y))

    # ------------------------------------------------------------------------------------ ordering, timeline
    def acquired_lanes(self, m, lanes: np.ndarray, addr: np.ndarray, parity: np.ndarray, how: str,
                       pc: int = -1) -> None:
        """:meth:`acquired` for every (warp, barrier, parity) among ``lanes`` (A, W, 32) whose wait succeeded;
        nothing to do unless the race detector or the timeline watches."""
        if m.smem.clocks is None and not self.recording(m):
            return
        a, w, l = np.nonzero(lanes)
        keys = np.unique(np.stack([a, w, addr[a, w, l], parity[a, w, l]]), axis=1)
        for x, y, z, p in keys.T.tolist():
            self.acquired(m, x, y, z, p, how, pc)

    def acquired(self, m, a: int, w: int, addr: int, parity: int, how: str, pc: int = -1) -> None:
        """Warp w's wait on parity ``parity`` of the mbarrier at ``addr`` succeeded (``how``: 'pass' at once,
        'resume' after parking): it acquires the phase (the race detector's order) and the timeline notes it."""
        if m.smem.clocks is not None:
            m.smem.clocks.mbar_acquire(a, w, addr, parity)
        if self.recording(m):
            self.log(m, a, w, int(m.pc[a, w].max()) if how == "resume" else pc, how, addr,
                     self.history(a, addr).phases, f"parity {parity}")

    @staticmethod
    def recording(m) -> bool:
        """Whether the launch records a synchronisation timeline (``checking(timeline=True)``)."""
        probe = m.probe
        return probe is not None and probe.report.timeline

    def log(self, m, a: int, w: int, pc: int, kind: str, barrier: int = -1, phase: int = -1, detail: str = "") -> None:
        """A timeline event (:mod:`flashsim.sass.timeline`), when the launch records them."""
        if self.recording(m):
            m.probe.event(m, a, w, pc, kind, barrier, phase, detail)


def _max_register(ins) -> int:
    """The highest general register an instruction names (its first register of a pair or vector; -1 if
    none): what the setmaxnreg bound is checked against."""
    top = -1
    for op in ins.operands:
        if op.kind == "r" and op.index != 255:
            top = max(top, op.index)
        elif op.kind in ("mem", "c") and op.reg != 255:
            top = max(top, op.reg + (1 if op.reg64 else 0))
    return top
