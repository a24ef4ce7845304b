"""The executor: CTAs of warps running one SASS program, each lane with its own PC, vectorised over
(CTAs, warps, 32 lanes).

State (A = CTAs in this batch, W = warps per CTA)::

    R   (256, A, W, 32) uint32   general registers; row 255 is RZ (reads 0, writes dropped)
    P   (8, A, W, 32)   bool     predicates P0..P6; row 7 is PT (true)
    UR  (64, A, W)      uint32   uniform registers (one per warp); row 63 is URZ
    UP  (8, A, W)       bool     uniform predicates UP0..UP6; row 7 is UPT
    pc  (A, W, 32)      int64    each lane's PC (byte offset in the kernel's .text section)
    st  (A, W, 32)      int8     RUN, EXITED, WAIT (at a convergence barrier or WARPSYNC),
                                 BAR (at a CTA barrier), NONE (no thread: block not a multiple of 32),
                                 PARK (parked on an mbarrier phase or on the register pool: see
                                 flashsim.sass.asyncstate, created at the first Hopper synchronisation)

Scheduling: in each warp whose runnable lanes are at several PCs (its paths), the path with the fewest lanes
runs first, the lowest PC among paths of one size (the H200's order: gpu/kernels/probe_paths.cu's logs, with
splits of 1 to 31 lanes in two compilers' SASS, traces/paths); among warps, the lowest PC
steps next, all warps at it together (one vectorised step). Lanes of a warp that took different paths meet
again at BSYNC / WARPSYNC, as on the device. A warp whose lanes took different paths keeps running one path
through straight-line code
(``Program.straight``: anything but control flow, barriers, waits and yields) before another of its paths
may run: ptxas lets two paths of a warp share a uniform register on that rule, and the H200's outputs
show it (campaign seed 4, traces/fuzz/h200_seed4/regressions.json). A runnable lane
passed over for ``starve_steps`` steps runs next (at the next such point of its warp), so a warp spinning on
a flag (a consumer polling shared memory) cannot starve the warp that will set it; within a warp, a larger
path runs before a smaller one that waits for it only once that smaller path branches back (a loop's next
trip: a path that only goes forward reaches its reconvergence point first); a lane whose mbarrier
wait fails parks instead of spinning (flashsim.sass.asyncstate). ``schedule_seed`` picks instead, at
random among the PCs that have runnable lanes, which one steps next (a different legal interleaving for
every seed; the default is deterministic); in a kernel that uses mbarriers it also picks a random subset
of the warps at that PC, so warps woken together take their turns in a seeded order.
While every live lane runs at one PC (the common case), the step costs no scheduling work at all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from flashsim.errors import FlashsimError, SimulatedFault, bad_argument, location
from flashsim.sass.isa import PT, Instr
from flashsim.warp.state import UndefinedResult

__all__ = ["BarrierDeadlock", "ExecOptions", "Machine", "SchedulePolicy", "SpinDetected", "StepBudgetExceeded", "fault",
           "lane_bits", "lanes_of", "warp_lanes", "warps_of"]

RUN, EXITED, WAIT, BAR, NONE, PARK = 0, 1, 2, 3, 4, 5
POLL_MASK = 1023  # Machine.poll runs every 1024 scheduling steps
_BIG = np.int64(1) << 62


class StepBudgetExceeded(FlashsimError):
    """The launch ran more warp-instructions than allowed (an infinite loop?); says where it was."""


class SpinDetected(StepBudgetExceeded):
    """The batch came back to exactly the same state (every register, predicate, PC and lane state, every
    byte of memory, the scheduler's) after :data:`SPIN_STEPS` scheduling steps: a deterministic machine in
    the same state does the same again, so the launch can never finish. Says which warps loop over which
    instructions and lines."""


#: scheduling steps between the spin detector's looks at the machine (well under a second of a one-warp loop;
#: it reports at its third look)
SPIN_STEPS = 1 << 14

#: the scheduling steps a group may hold its warp after a WARPSYNC.EXCLUSIVE whose region is not straight-line
#: (Machine.hold_exclusive); a longer hold is refused
EXCLUSIVE_STEPS = 4096


class BarrierDeadlock(FlashsimError):
    """No lane can run: warps wait at a barrier that can never complete; says which wait where. ``graph``:
    one dict per blocked warp (cta, warp, role, pcs, where, waits: the lines of the message)."""

    graph: list = []


@dataclass(frozen=True)
class SchedulePolicy:
    """An adversarial schedule: which warps the scheduler favours or holds back, and when bulk copies land.

    ``first``: warps (indices within the CTA) that step whenever one of their lanes can run; ``delay``: warps
    held back while any other lane can run, for the first ``delay_steps`` scheduling steps of each CTA batch;
    ``copy_delay``: scheduling steps between issuing a bulk copy and its landing (None: the default, or the
    seed's choice; a huge value lands copies only when nothing else can run). The forward-progress rule
    (``ExecOptions.starve_steps``) still holds, as on the device."""

    name: str
    first: tuple[int, ...] = ()
    delay: tuple[int, ...] = ()
    delay_steps: int = 0
    copy_delay: int | None = None

    def __post_init__(self):
        for f in ("first", "delay"):
            v = tuple(getattr(self, f))
            if any(not isinstance(x, (int, np.integer)) or isinstance(x, bool) or x < 0 for x in v):
                raise ValueError(f"SchedulePolicy {self.name!r}: {f}={v!r} must be warp indices (ints >= 0)")
            object.__setattr__(self, f, tuple(int(x) for x in v))
        if self.delay_steps < 0 or (self.copy_delay is not None and self.copy_delay < 0):
            raise ValueError(f"SchedulePolicy {self.name!r}: delay_steps and copy_delay must be >= 0")


@dataclass(frozen=True)
class ExecOptions:
    """Run-time options of a launch."""

    max_steps: int = 50_000_000  # scheduling steps (one instruction for a group of warps) per CTA batch
    progress: object = None  # called as progress(ctas_done, ctas_total) after each batch of CTAs
    schedule_seed: int | None = None  # None: lowest PC first (deterministic); else a seeded random order
    schedule_policy: SchedulePolicy | None = None  # favoured / held-back warps, copy landing (adversarial orders)
    ctas_per_batch: int = 256  # CTAs simulated together (memory grows with it)
    clock_step: int = 1  # SR_CLOCKLO advances by this per executed instruction (a deterministic clock)
    starve_steps: int = 256  # a runnable lane passed over for this many steps runs next (forward progress)
    # a flashsim.cluster.Cluster whose workers run the CTA batches (default: the one of an enclosing
    # ``with Cluster(...)`` block, else this process); the batches, and so the bits, are the same
    cluster: object = None

    def __post_init__(self) -> None:
        for name in ("max_steps", "ctas_per_batch", "clock_step", "starve_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise bad_argument(name, v, "expected a positive int")
        s = self.schedule_seed
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0):
            raise bad_argument("schedule_seed", s, "expected None (lowest PC first) or a non-negative int seed")
        if self.progress is not None and not callable(self.progress):
            raise bad_argument("progress", self.progress, "expected a callable progress(ctas_done, ctas_total)")
        if self.schedule_policy is not None and not isinstance(self.schedule_policy, SchedulePolicy):
            raise bad_argument("schedule_policy", self.schedule_policy, "expected a flashsim SchedulePolicy")


def lanes_of(m: "Machine", ex) -> np.ndarray:
    """The lanes an instruction acts on: ``ex`` (bools, (A, W, 32)), or every runnable lane when None."""
    return (m.st == RUN) if ex is None else np.asarray(ex, bool)


def warps_of(m: "Machine", ex) -> np.ndarray:
    """The warps a uniform instruction acts on: ``ex`` ((A, W) bools, or (A, W, 32) lanes: their warps), or
    every warp with a runnable lane when None."""
    if ex is None:
        return (m.st == RUN).any(axis=2)
    ex = np.asarray(ex, bool)
    return ex.any(axis=2) if ex.ndim == 3 else ex


def warp_lanes(m: "Machine", a: int, w: int) -> np.ndarray:
    """(A, W, 32) bools: the runnable lanes of warp (a, w), or its lane 0 when none is (the lanes a uniform
    instruction's fault or mbarrier update names)."""
    mask = np.zeros(m.st.shape, bool)
    mask[a, w] = m.st[a, w] == RUN
    if not mask.any():
        mask[a, w, 0] = True
    return mask


def lane_bits(lanes: np.ndarray) -> np.ndarray:
    """(..., 32) bools -> (...) uint32 lane masks (bit i = lane i)."""
    return (lanes.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=-1).astype(np.uint32)


def fault(kind: str, m: "Machine", ins: Instr, mask: np.ndarray, addr: np.ndarray, detail: str = "") -> SimulatedFault:
    """A SimulatedFault at the first lane of ``mask`` (A, W, 32), naming the CTA's grid index, PC, SASS
    and source line."""
    a, w, l = (int(v) for v in np.argwhere(mask)[0])
    ad = np.asarray(addr)
    ad = int(np.broadcast_to(ad, mask.shape)[a, w, l]) if ad.ndim else int(ad)
    where = f"pc={ins.pc:#06x} `{ins.text}`"
    if ins.line:
        where += f" at {ins.line[0]}:{ins.line[1]}"
        where += "".join(f" inlined at {f}:{n}" for f, n in m.program.inline_chain(ins.pc))
    cta = m.cta_coords(a)
    msg = f"{detail}; " if detail else ""
    exc = SimulatedFault(kind, cta=int(m.cta_ids[a]), warp=w, lane=l, addr=ad & 0xFFFFFFFFFFFFFFFF,
                         detail=f"{msg}ctaid={cta}, {where}")
    exc.pc, exc.sass, exc.line = ins.pc, ins.text, ins.line
    exc.inlined = m.program.inline_chain(ins.pc)
    return exc


def _fold_ctas(lines: list[str], graph: list[dict]) -> list[str]:
    """The deadlock's lines with the CTAs blocked exactly like the first one folded into one line."""
    by_cta: dict[int, list] = {}
    for g in graph:
        by_cta.setdefault(g["cta"], []).append((g["warp"], tuple(g["pcs"]), tuple(g["waits"])))
    if len(by_cta) < 2:
        return lines
    first, *rest = by_cta
    same = [c for c in rest if by_cta[c] == by_cta[first]]
    if not same:
        return lines
    # a folded CTA's header lines and the indented detail lines that follow them go
    out, skipping = [], False
    for ln in lines:
        if not ln.startswith("    "):
            skipping = any(ln.startswith(f"cta={c} ") for c in same)
        if not skipping:
            out.append(ln)
    out.append(f"ctas {', '.join(str(c) for c in same[:16])}{' ...' if len(same) > 16 else ''}: blocked exactly "
               f"as cta={first}")
    return out


class Machine:
    """One batch of CTAs of a launch, ready to run the program."""

    def __init__(self, program, launch, cta_ids: np.ndarray):
        self.program = program
        self.launch = launch
        self.kernel = program.kernel
        self.cta_ids = np.asarray(cta_ids, np.int64)
        A = len(self.cta_ids)
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        W = (threads + 31) // 32
        self.A, self.W = A, W
        self.R = np.zeros((256, A, W, 32), np.uint32)
        self.P = np.zeros((8, A, W, 32), bool)
        self.P[PT] = True
        self.UR = np.zeros((64, A, W), np.uint32)
        self.UP = np.zeros((8, A, W), bool)
        self.UP[PT] = True
        # convergence barrier masks (BSSY), a copy per lane: lanes on two sides of a branch may each set the same
        # Bn for their own region (ptxas reuses B registers across an if/else), and each waits for its own
        self.B = np.zeros((16, A, W, 32), np.uint32)
        tid = np.arange(W * 32).reshape(W, 32)
        bx, by = launch.block[0], launch.block[1]
        self.tid = (tid % bx, (tid // bx) % by, tid // (bx * by))
        self.st = np.where(tid < threads, RUN, NONE).astype(np.int8)[None].repeat(A, 0)
        self.pc = np.zeros((A, W, 32), np.int64)
        gx, gy = launch.grid[0], launch.grid[1]
        self.ctaid = (self.cta_ids % gx, (self.cta_ids // gx) % gy, self.cta_ids // (gx * gy))
        self.mem = launch.memory
        self.probe = getattr(launch, "probe", None)  # a checking report's collector, or None
        self.synccheck = None  # flashsim.sass.synccheck.SyncCheck inside checking(synccheck=True)
        if self.probe is not None and getattr(self.probe.report, "synccheck", False):
            from flashsim.sass.synccheck import SyncCheck

            self.synccheck = SyncCheck(self)
        self.const = launch.constants  # bank -> bytes (bank 0 built for this launch)
        self.smem = launch.new_shared(A, W)
        self.local_size = launch.local_size
        self.local = np.zeros((A, W, 32, max(self.local_size, 16)), np.uint8) if self.local_size else None
        self.options: ExecOptions = launch.options
        self.steps = 0
        self.warp_steps = 0
        self.clock = 0
        self.bar_count: dict = {}
        self.wait_need = np.zeros((A, W, 32), np.uint64)  # per waiting lane: the lanes it waits for
        self.bar_result = np.zeros((A, W), np.int64)  # the last barrier reduction's result, per warp
        # the lock-step fast path: every live lane is runnable and at self.cur
        self.together = True
        self.cur = 0
        self._rng = None if self.options.schedule_seed is None else np.random.default_rng(self.options.schedule_seed)
        pol = self.options.schedule_policy
        self._policy = pol
        if pol is not None:
            warps = np.arange(W)
            self._pol_first = np.isin(warps, pol.first)[None, :, None]
            self._pol_delay = np.isin(warps, pol.delay)[None, :, None]
        self._live_warps = int((self.st != NONE).any(axis=2).sum())
        self._waited = None  # per lane: scheduling steps since it last ran (while lanes run apart)
        self._looped = None  # per warp: its last control step jumped back (see _run)
        self._spin = None  # the spin detector's last look: (registers' digest, memory's, hit counts, PC)
        self._spin_at = None  # the PC it looks again at
        self._gated = None  # lanes held at a warpgroup-collective instruction for their warpgroup (see _pick)
        self.poll = None  # called every 1024 scheduling steps (POLL_MASK): a worker looks for a cancelled run
        self.sync = None  # flashsim.sass.asyncstate.AsyncState, made by the first Hopper synchronisation
        self.gmma = None  # flashsim.sass.ops_gmma.WgmmaState, made by the first HGMMA / QGMMA
        self.inline = False  # running a collective region's body (run_inline)
        self.excl = None  # (A, W, 32): the group holding each warp after a WARPSYNC.EXCLUSIVE (hold_exclusive)
        # (A, W, 32): per warp whose last step was straight-line code (Program.straight), the lanes of the
        # path it ran: that path runs on until it reaches control flow, a barrier or a wait (_pick)
        self.path = None

    def async_state(self):
        """The batch's mbarrier / bulk-copy / register-pool state (created at first use)."""
        if self.sync is None:
            from flashsim.sass.asyncstate import AsyncState

            self.sync = AsyncState(self)
        return self.sync

    def gmma_state(self):
        """The batch's warpgroup-MMA state: per warp, the wgmma issued and not yet retired (created at first use)."""
        if self.gmma is None:
            from flashsim.sass.ops_gmma import WgmmaState

            self.gmma = WgmmaState(self)
        return self.gmma

    # ------------------------------------------------------------------------------------ helpers
    def cta_coords(self, a: int) -> tuple[int, int, int]:
        return int(self.ctaid[0][a]), int(self.ctaid[1][a]), int(self.ctaid[2][a])

    # ------------------------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Run every CTA of the batch to its end, then the end-of-kernel mbarrier / bulk-copy checks."""
        self._run()
        if self.sync is not None:
            self.sync.at_exit(self)

    def _run(self) -> None:
        prog = self.program
        code = prog.compiled
        hits = prog.hits
        whits = prog.warp_hits
        probe = self.probe
        before = probe.watch_before if probe is not None else None  # PCs a tracer looks at before/after
        after = probe.watch_after if probe is not None else None
        budget = self.options.max_steps
        while True:
            if self.together:
                pc = self.cur
                active = None
            else:
                pick = self._pick()
                if pick is None:
                    return
                pc, active = pick
            fn = code.get(pc)
            if fn is None:
                self._bad_pc(pc, active)
            self.steps += 1
            hits[pc >> 4] += 1
            if active is None:
                nw = self._live_warps
            else:
                stepped = active.any(axis=2)
                nw = int(stepped.sum())
                self._follow_path(pc, active, stepped)
            self.warp_steps += nw
            whits[pc >> 4] += nw
            if self.steps > budget:
                self._over_budget(pc, active)
            if not self.steps & POLL_MASK and self.poll is not None:
                self.poll()
            if not self.steps & (SPIN_STEPS - 1):
                self._spin_arm()
            if self._spin_at is not None and self.together and self.cur == self._spin_at:
                self._spin_check()
            self.clock += self.options.clock_step
            if self.sync is not None:
                self.sync.before(self, pc, active)
            if self.gmma is not None:  # wgmma in flight: its hazards (a no-op unless checking)
                self.gmma.before(self, pc, active)
            if before and pc in before:
                probe.at_pc(self, pc, active, "before")
            try:
                nxt = fn(self, active)
            except SimulatedFault as exc:
                if getattr(exc, "pc", None) is None:
                    raise self._locate(exc, pc) from None
                raise
            except UndefinedResult as exc:
                if exc.cta is None or exc.located:
                    raise
                cta = int(self.cta_ids[exc.cta])
                raise UndefinedResult(f"{exc.what}: {location(cta=cta, warp=exc.warp, lane=exc.lane)} {exc.detail}: "
                                      f"{prog.describe_site(pc)}", what=exc.what, cta=cta, warp=exc.warp,
                                      lane=exc.lane, detail=exc.detail, located=True) from None
            if after and pc in after:
                probe.at_pc(self, pc, active, "after")
            if self.together and nxt is not None:
                self._live_warps = int(((self.st != EXITED) & (self.st != NONE)).any(axis=2).sum())
            if nxt is None:  # fell through
                if self.together:
                    self.cur = pc + 16
                else:
                    self.pc[active] = pc + 16
            elif nxt == "stop":
                return
            if active is not None and not prog.straight[pc >> 4]:
                # per warp: whether its lanes that stepped branched back (a loop's next trip, a spin; not a
                # return): only then may a smaller path's wait let a larger one of its warp run (_pick)
                if self._looped is None:
                    self._looped = np.zeros((self.A, self.W), bool)
                back = (active & (self.pc <= pc)).any(axis=2) if prog.branch[pc >> 4] else False
                self._looped[stepped] = np.broadcast_to(back, stepped.shape)[stepped]

    def _warpgroup_gate(self, run: np.ndarray) -> np.ndarray:
        """``run`` without the lanes at a warpgroup-collective instruction (HGMMA / QGMMA: wgmma.mma_async is
        .sync.aligned over the warpgroup) whose warpgroup is not all there: each of its four warps must have
        runnable lanes at that PC. Gated warps wait (``self._gated``); one whose partner never comes shows in
        the deadlock report."""
        self._gated = None
        coll = self.program.warpgroup_pcs
        if not coll.size:
            return run
        at = run & np.isin(self.pc, coll)
        if not at.any():
            return run
        # per warp: the collective PC its lanes are at (-1: none); a warpgroup is ready when its four warps
        # are at the same one (the block's last warpgroup may be short of warps: never ready)
        pcw = np.where(at, self.pc, -1).max(axis=2)
        pad = (-self.W) % 4
        grp = np.pad(pcw, ((0, 0), (0, pad)), constant_values=-2).reshape(self.A, -1, 4)
        ready = ((grp == grp[..., :1]) & (grp >= 0)).all(axis=2)
        ready = np.repeat(ready, 4, axis=1)[:, :self.W]
        gated = at & ~ready[..., None] & (self.pc == pcw[..., None])
        if not gated.any():
            return run
        self._gated = gated
        return run & ~gated

    def hold_exclusive(self, a: int, w: int, group: np.ndarray, pc: int) -> None:
        """Let only ``group`` (32 bools) of warp (a, w) run until none of its lanes can (a WARPSYNC.EXCLUSIVE
        at ``pc`` whose region is not straight-line; flashsim.sass.ops_ctrl)."""
        if self.excl is None:
            self.excl = np.zeros(self.st.shape, bool)
            self._excl_pc = np.zeros((self.A, self.W), np.int64)
            self._excl_steps = np.zeros((self.A, self.W), np.int64)
        self.excl[a, w] = group
        self._excl_pc[a, w] = pc
        self._excl_steps[a, w] = 0

    def _let_go(self, runnable: np.ndarray) -> None:
        """End the hold of every warp whose group has no lane in ``runnable``."""
        ex = self.excl
        ex[ex.any(axis=2) & ~(ex & runnable).any(axis=2)] = False
        if not ex.any():
            self.excl = None

    def exclusive_free(self, a: int, w: int) -> bool:
        """No group holds warp (a, w) any more (one whose lanes can no longer run lets go here)."""
        if self.excl is not None:
            self._let_go(self.st == RUN)
        return self.excl is None or not self.excl[a, w].any()

    def _exclusive_gate(self, run: np.ndarray) -> np.ndarray:
        """``run`` with the lanes of each held warp (hold_exclusive) cut to its group while the group can run."""
        self._let_go(run)
        if self.excl is None:
            return run
        return np.where(self.excl.any(axis=2)[..., None], run & self.excl, run)

    def _exclusive_count(self, active: np.ndarray) -> None:
        """Count the steps each held warp runs; refuse a hold longer than EXCLUSIVE_STEPS."""
        if self.excl is None:
            return
        held = self.excl.any(axis=2) & active.any(axis=2)
        self._excl_steps[held] += 1
        if (self._excl_steps > EXCLUSIVE_STEPS).any():
            a, w = (int(v) for v in np.argwhere(self._excl_steps > EXCLUSIVE_STEPS)[0])
            raise NotImplementedError(
                f"the lanes {np.nonzero(self.excl[a, w])[0].tolist()} of {location(cta=int(self.cta_ids[a]), warp=w)} "
                f"ran {EXCLUSIVE_STEPS} steps alone in their warp after "
                f"{self.program.describe(int(self._excl_pc[a, w]))} without reaching a barrier: where the GPU "
                "lets the warp's other lanes run again is not modelled")

    def _follow_path(self, pc: int, active: np.ndarray, stepped: np.ndarray) -> None:
        """Note the path each warp that steps now is on: after straight-line code its next step is that
        path's (``self.path``); after anything else the warp may switch paths."""
        if self.program.straight[pc >> 4]:
            if self.path is None:
                self.path = np.zeros(self.st.shape, bool)
            self.path[stepped] = active[stepped]
        elif self.path is not None:
            self.path[stepped] = False

    def _path_gate(self, run: np.ndarray) -> np.ndarray:
        """``run`` cut, in each warp on a path (``self.path``) with lanes still runnable, to that path's lanes:
        a diverged warp switches paths only at control flow, barriers and waits (Program.straight)."""
        held = self.path & run
        on = held.any(axis=2)
        return np.where(on[..., None], held, run) if on.any() else run

    def _fewest_gate(self, run: np.ndarray) -> np.ndarray:
        """``run`` cut, in each warp with runnable lanes at more than one PC, to the lanes at the PC that has
        the fewest of them (ties: the lowest PC): where 30 lanes fall through a branch and 2 take it, the H200
        runs the 2 first; 16 and 16, the fall-through side (traces/paths)."""
        masked = np.where(run, self.pc, _BIG)
        lo = masked.min(axis=2)
        split = (masked != lo[..., None]) & run
        if not split.any():
            return run
        idx = np.nonzero(split.any(axis=2))
        p, r = masked[idx], run[idx]  # (n, 32): the split warps
        w, lane = np.nonzero(r)
        # one key per (warp, PC) group of runnable lanes; the best group of a warp has the fewest lanes, then
        # the lowest PC
        groups, count = np.unique((w.astype(np.int64) << 32) | p[w, lane], return_counts=True)
        gw, gpc = groups >> 32, groups & 0xFFFFFFFF
        order = np.lexsort((gpc, count, gw))
        first = order[np.r_[True, gw[order][1:] != gw[order][:-1]]]
        best = np.empty(len(idx[0]), np.int64)
        best[gw[first]] = gpc[first]
        out = run.copy()
        out[idx] = r & (p == best[:, None])
        return out

    def _pick(self):
        """The next (pc, active lanes), or None when every lane has exited."""
        run = self._warpgroup_gate(self.st == RUN)
        if self.excl is not None:
            run = self._exclusive_gate(run)
        runnable = run
        if self.path is not None:
            run = self._path_gate(run)
        held = run  # (a lane passed over too long may run before a smaller group of its warp)
        run = self._fewest_gate(run)
        if not run.any():
            if (self.st == EXITED).sum() + (self.st == NONE).sum() == self.st.size:
                return None
            if (self.st == WAIT).any() and self._release_convergence():
                return self._pick()
            if self.sync is not None and self.sync.stall(self):
                return self._pick()
            self._deadlock()
        pick = run if self._policy is None else self._policy_lanes(run)
        pcs = np.where(pick, self.pc, _BIG)
        if self._waited is None:
            self._waited = np.zeros(self.st.shape, np.int64)
        # a lane another warp's lanes pass over, or (only while its own warp's path loops) a larger path's
        fair = run if self._looped is None else run | (held & self._looped[..., None])
        starved = np.where(fair, self._waited, -1)
        worst = int(starved.max())
        if worst > self.options.starve_steps:
            # forward progress: a lane passed over this long (other lanes spinning in a loop, waiting for
            # it) runs next, as the device's scheduler guarantees eventually
            target = int(self.pc.reshape(-1)[int(np.argmax(starved))])
            pick = held
        elif self._rng is None:
            target = int(pcs.min())
        else:
            cand = np.unique(pcs[pick])
            target = int(cand[self._rng.integers(len(cand))])
        active = pick & (self.pc == target)
        if self._rng is not None and self.sync is not None and target not in self.program.warpgroup_pcs:
            active = self.sync.pick_warps(self, active)  # (a warpgroup-collective instruction runs whole)
        if self.excl is not None:
            self._exclusive_count(active)
        self._waited += runnable  # (a path held off by another's straight-line code waits too)
        self._waited[active] = 0
        if active.sum() == (self.st != NONE).sum() - (self.st == EXITED).sum():
            # every live lane is here: back to lock-step (warps may have exited while lanes ran apart)
            self.together = True
            self.path = None
            self.cur = target
            self._live_warps = int(((self.st != EXITED) & (self.st != NONE)).any(axis=2).sum())
            return target, None
        return target, active

    def _policy_lanes(self, run: np.ndarray) -> np.ndarray:
        """The runnable lanes a SchedulePolicy lets step now: its favoured warps' if any can run; then none of
        its held-back warps' while they are held and other lanes can run."""
        pol = self._policy
        fav = run & self._pol_first
        if fav.any():
            run = fav
        if pol.delay_steps and self.steps < pol.delay_steps:
            free = run & ~self._pol_delay
            if free.any():
                run = free
        return run

    def leave_together(self) -> None:
        """Materialise the lock-step PC into the per-lane PC array (before lanes go separate ways)."""
        if self.together:
            self.pc[self.st == RUN] = self.cur
            self.together = False

    # ------------------------------------------------------------------------------------ barriers
    def _release_convergence(self) -> bool:
        # lanes waiting at BSYNC/WARPSYNC: a warp whose waiting lanes cover every lane they wait for
        # (the barrier's lanes that have not exited) moves on together.
        freed = False
        collective = self.program.collective_release
        for a, w in {(int(a), int(w)) for a, w, _ in np.argwhere(self.st == WAIT)}:
            pcs = np.unique(self.pc[a, w][self.st[a, w] == WAIT])
            for p in pcs:
                release = collective.get(int(p))
                if release is not None:  # WARPSYNC.COLLECTIVE / .EXCLUSIVE: its groups run their region
                    freed = release(self, a, w) or freed
                    continue
                lanes = self.st[a, w] == WAIT  # (a released region moves lanes of this warp)
                at = lanes & (self.pc[a, w] == p)
                if not at.any():
                    continue
                live = (self.st[a, w] != EXITED) & (self.st[a, w] != NONE)
                for need in np.unique(self.wait_need[a, w][at]):  # lanes here may wait for different sets
                    need_mask = ((need >> np.arange(32, dtype=np.uint64)) & 1).astype(bool)
                    if (need_mask & live & ~at).any():
                        continue
                    group = at & (self.wait_need[a, w] == need)
                    self.st[a, w][group] = RUN
                    self.pc[a, w][group] = p + 16
                    freed = True
        return freed

    def run_inline(self, pcs, lanes: np.ndarray) -> None:
        """Run the straight-line instructions at ``pcs`` now, one after the other, for ``lanes`` only (a warp
        collective's region, flashsim.sass.ops_ctrl), each with a scheduling step's bookkeeping."""
        prog = self.program
        probe = self.probe
        nw = int(lanes.any(axis=2).sum())
        self.inline = True
        try:
            for pc in pcs:
                self.pc[lanes] = pc
                self.steps += 1
                prog.hits[pc >> 4] += 1
                self.warp_steps += nw
                prog.warp_hits[pc >> 4] += nw
                if self.steps > self.options.max_steps:
                    self._over_budget(pc, lanes)
                self.clock += self.options.clock_step
                if self.sync is not None:
                    self.sync.before(self, pc, lanes)
                if self.gmma is not None:
                    self.gmma.before(self, pc, lanes)
                if probe is not None and probe.watch_before and pc in probe.watch_before:
                    probe.at_pc(self, pc, lanes, "before")
                try:
                    nxt = prog.compiled[pc](self, lanes)
                except SimulatedFault as exc:
                    if getattr(exc, "pc", None) is None:
                        raise self._locate(exc, pc) from None
                    raise
                if nxt is not None:
                    raise RuntimeError(f"{prog.describe(pc)} moved lanes inside a collective region")
                if probe is not None and probe.watch_after and pc in probe.watch_after:
                    probe.at_pc(self, pc, lanes, "after")
        finally:
            self.inline = False

    def wait_at(self, lanes: np.ndarray, pc: int, need: np.ndarray) -> None:
        """Park ``lanes`` at ``pc`` until every live lane of ``need`` (per lane, uint32 masks) is there."""
        self.leave_together()
        self.st[lanes] = WAIT
        self.pc[lanes] = pc
        self.wait_need[lanes] = np.broadcast_to(need, lanes.shape)[lanes]

    def _deadlock(self):
        if self.synccheck is not None:  # the barriers that can never complete, before the deadlock is raised
            self.synccheck.deadlock(self)
        self._collective_stuck()
        lines = []
        graph = []
        blocked = (self.st == WAIT) | (self.st == BAR) | (self.st == PARK)
        if getattr(self, "_gated", None) is not None:
            blocked = blocked | self._gated
        for a, w in sorted({(int(a), int(w)) for a, w, _ in np.argwhere(blocked)}):
            st = self.st[a, w]
            pcs = sorted({int(p) for p in self.pc[a, w][blocked[a, w]]})
            where = ", ".join(self._wait_site(a, w, p) for p in pcs)
            exited = int((st == EXITED).sum())
            role = self.sync.role_of(a, w) if self.sync is not None else ""
            role = f" ({role})" if role else ""
            lines.append(f"cta={int(self.cta_ids[a])} warp={w}{role}: waits at {where}"
                         + (f" ({exited} lanes exited)" if exited else ""))
            waits = self._waits_of(a, w)
            lines.extend("    " + x for x in waits)
            graph.append({"cta": int(self.cta_ids[a]), "warp": w, "role": role.strip(" ()"), "pcs": pcs,
                          "where": where, "waits": waits})
        lines = _fold_ctas(lines, graph)
        gone = [f"cta={int(self.cta_ids[a])} warp={w}" for a in range(self.A) for w in range(self.W)
                if ((self.st[a, w] == EXITED) | (self.st[a, w] == NONE)).all() and (self.st[a, w] == EXITED).any()]
        msg = "barrier can never complete: no lane can run (every live warp is blocked).\n  " + "\n  ".join(lines)
        if gone:
            msg += "\n  exited: " + ", ".join(gone[:32]) + (" ..." if len(gone) > 32 else "")
        exc = BarrierDeadlock(msg)
        exc.graph = graph
        raise exc

    def _collective_stuck(self) -> None:
        """Nothing can run while lanes wait at a WARPSYNC.COLLECTIVE / .EXCLUSIVE for lanes of their mask that
        are elsewhere: refuse (which lanes the GPU would run that collective with is not modelled)."""
        sites = self.program.collective_release
        if not sites:
            return
        stuck = (self.st == WAIT) & np.isin(self.pc, np.fromiter(sites, np.int64))
        if not stuck.any():
            return
        a, w, l = (int(v) for v in np.argwhere(stuck)[0])
        pc = int(self.pc[a, w, l])
        need = int(self.wait_need[a, w, l])
        st = self.st[a, w]
        away = [j for j in range(32) if need >> j & 1 and st[j] not in (EXITED, NONE)
                and not (st[j] == WAIT and self.pc[a, w, j] == pc)]
        elsewhere = sorted({int(self.pc[a, w, j]) for j in away})
        raise NotImplementedError(
            f"a warp collective in divergent code (WARPSYNC with mask {need:#010x}) at {self.program.describe(pc)} "
            f"waits for lanes {away} of {location(cta=int(self.cta_ids[a]), warp=w)}, which are at "
            + ", ".join(self.program.describe(p) for p in elsewhere)
            + " and cannot come: lanes of one mask at different collective sites (or a mask naming lanes that never "
            "arrive) are not modelled")

    def _wait_site(self, a: int, w: int, pc: int) -> str:
        """Where the lanes of warp (a, w) blocked at ``pc`` wait, in source terms. An mbarrier wait that
        failed once retries in ptxas's retry block at the end of the kernel, whose line-table entry names
        whichever wait the block was placed after: the site is the wait the loop began at."""
        if self.sync is None:
            return self.program.describe(pc)
        at = self.pc[a, w] == pc
        firsts = sorted({int(p) for p in self.sync.first_pc[a, w][at & (self.st[a, w] == PARK)] if 0 <= p != pc})
        if not firsts:
            return self.program.describe_site(pc)
        return (", ".join(self.program.describe_site(p) for p in firsts)
                + f" (parked in its retry loop at pc={pc:#06x})")

    def _waits_of(self, a: int, w: int) -> list[str]:
        """What warp (a, w) waits for: named / CTA barriers (arrivals so far and expected, who else is there),
        mbarriers and the register pool (flashsim.sass.asyncstate)."""
        out = []
        st = self.st[a, w]
        gated = getattr(self, "_gated", None)
        if gated is not None and gated[a, w].any():
            pc = int(self.pc[a, w][gated[a, w]][0])
            lo = w - w % 4
            others = []
            for x in range(lo, min(lo + 4, self.W)):
                if x == w or ((self.pc[a, x] == pc) & (self.st[a, x] == RUN)).any():
                    continue
                xs = self.st[a, x]
                if ((xs == EXITED) | (xs == NONE)).all():
                    others.append(f"warp={x} (exited)")
                else:
                    live = (xs != EXITED) & (xs != NONE)
                    others.append(f"warp={x} (at " + ", ".join(self._wait_site(a, x, int(p)) for p in
                                                               sorted({int(q) for q in self.pc[a, x][live]})) + ")")
            out.append(f"wgmma.mma_async is warpgroup-collective (.sync.aligned): the warpgroup of warps "
                       f"{lo}..{lo + 3} must reach pc={pc:#06x} together; missing: {', '.join(others)}")
        if (st == BAR).any():
            for (ba, b), (arrived, need, waiting, _) in sorted(self.bar_count.items()):
                if ba != a or w not in waiting:
                    continue
                live = int(((self.st[a] != EXITED) & (self.st[a] != NONE)).any(axis=1).sum())
                want = need if need is not None else 32 * live
                others = [x for x in range(self.W) if x not in waiting
                          and ((self.st[a, x] != EXITED) & (self.st[a, x] != NONE)).any()]
                name = "barrier 0 (bar.sync 0 / __syncthreads)" if b == 0 else f"named barrier {b}"
                out.append(f"{name}: {arrived} of {want} threads arrived (warps waiting: "
                           f"{', '.join(str(x) for x in waiting)}); could still arrive: "
                           + (", ".join(location(warp=x) for x in others) if others else "nobody"))
        if (st == PARK).any() and self.sync is not None:
            out.extend(self.sync.describe_warp(self, a, w))
        return out

    def _spin_arm(self) -> None:
        """Every SPIN_STEPS steps: the spin detector looks at the state the next time the lock-step PC is the
        one of its last look (a loop comes back to the same PC; its period need not divide SPIN_STEPS). It
        looks only while every live lane runs at one PC (a warp spinning alone, or all of them together), and
        stands aside where the state is not all in the machine's arrays: asynchronous units (mbarrier, TMA,
        wgmma) in use, a seeded or adversarial schedule."""
        if not self.together or self.sync is not None or self.gmma is not None or self._rng is not None or \
                self._policy is not None:
            self._spin = None
            self._spin_at = None
            return
        self._spin_at = self._spin[3] if self._spin is not None else self.cur

    def _spin_check(self) -> None:
        """The spin detector: where the state at a look is the state at the last one, byte for byte (every
        register, predicate, PC, lane state and barrier count; memory, compared when the rest repeats), the
        launch loops for ever (SpinDetected)."""
        self._spin_at = None
        h = hashlib.blake2b(digest_size=16)
        for arr in (self.R, self.P, self.UR, self.UP, self.B, self.st, self.wait_need, self.bar_result,
                    self.pc if not self.together else np.int64(self.cur)):
            h.update(np.ascontiguousarray(arr).data)
        h.update(repr((self.together, sorted(self.bar_count.items()))).encode())
        if self._waited is not None:
            h.update(self._waited.data)
        regs = h.digest()
        hits = self.program.hits.copy()
        prev = self._spin
        if prev is None or prev[0] != regs:
            self._spin = (regs, None, hits, self.cur)
            return
        m = hashlib.blake2b(digest_size=16)
        if self.smem is not None:
            m.update(np.ascontiguousarray(self.smem.data).data)
        if self.local is not None:
            m.update(self.local.data)
        self.mem.digest(m)
        mem = m.digest()
        if prev[1] != mem:
            self._spin = (regs, mem, hits, self.cur)
            return
        pcs = [int(i) << 4 for i in np.nonzero(hits - prev[2])[0]]
        live = (self.st == RUN) | (self.st == WAIT)
        who = ", ".join(location(cta=int(self.cta_ids[a]), warp=int(w)) for a, w in
                        sorted({(int(a), int(w)) for a, w, _ in np.argwhere(live)})[:8])
        where = "; ".join(self.program.describe(pc) for pc in pcs[:6]) + (" ..." if len(pcs) > 6 else "")
        raise SpinDetected(
            f"the launch spins: its state (every register, PC and byte of memory) came back exactly as it was "
            f"{SPIN_STEPS:,} or more scheduling steps before, so it can never finish (waiting for a flag nothing "
            f"writes?). Looping: {who or 'nobody'}; over {len(pcs)} instruction{'s' if len(pcs) != 1 else ''}: {where}")

    def _over_budget(self, pc, active):
        lanes = lanes_of(self, active)
        a, w, _ = (int(v) for v in np.argwhere(lanes)[0]) if lanes.any() else (0, 0, 0)
        raise StepBudgetExceeded(
            f"the launch exceeded its step budget of {self.options.max_steps} steps (an infinite loop?): "
            f"cta={int(self.cta_ids[a])} warp={w} at {self.program.describe(pc)}; raise ExecOptions.max_steps "
            "if the kernel really runs that long")

    def _locate(self, exc: SimulatedFault, pc: int) -> SimulatedFault:
        """A fault raised below the interpreter (shared memory, flashsim.warp: CTA index within the batch)
        restated with the grid's CTA index, the PC, its SASS and source line."""
        ins = self.program.instructions[pc]
        a = int(exc.cta)
        mask = np.zeros(self.st.shape, bool)
        mask[a, exc.warp, exc.lane] = True
        return fault(exc.kind, self, ins, mask, np.uint64(exc.addr), exc.detail)

    def _bad_pc(self, pc, active):
        lanes = lanes_of(self, active)
        a, w, l = (int(v) for v in np.argwhere(lanes)[0]) if lanes.any() else (0, 0, 0)
        raise SimulatedFault("illegal instruction address", cta=int(self.cta_ids[a]), warp=w, lane=l, addr=pc,
                             detail=f"pc={pc:#06x} is outside the kernel's code")

    # ------------------------------------------------------------------------------------ CTA barriers
    def bar_arrive(self, active, bar_id: np.ndarray, count: np.ndarray | None, pc: int, wait: bool,
                   red=None) -> None:
        """Warps of ``active`` arrive at named barrier ``bar_id`` (per warp); with ``wait`` they block until
        ``count`` threads (default: every live thread of the CTA) have arrived. ``red`` = (op, per-lane
        predicate values): a reduction over the arriving threads, left in ``bar_result`` of each warp."""
        lanes = lanes_of(self, active)
        warps = lanes.any(axis=2)
        self.leave_together()
        if wait:
            self.st[lanes] = BAR
            self.pc[lanes] = pc
        else:
            self.pc[lanes] = pc + 16
        for a, w in zip(*np.nonzero(warps)):
            a, w = int(a), int(w)
            b = int(np.broadcast_to(bar_id, warps.shape)[a, w]) & 15
            key = (a, b)
            cnt = None if count is None else int(np.broadcast_to(count, warps.shape)[a, w])
            if self.synccheck is not None:
                self.synccheck.arrive(self, a, w, b, cnt, pc, lanes[a, w], key not in self.bar_count)
            arrived, need, waiting, acc = self.bar_count.get(key, (0, cnt, [], None))
            arrived += 32
            if cnt is not None:  # a barrier over part of the CTA: its arrivals release (race detector)
                self.smem.named_arrive(a, w, b)
            if self.probe is not None and self.probe.report.timeline:
                self.probe.event(self, a, w, pc, "bar_arrive", b, -1,
                                 ("bar.sync" if wait else "bar.arrive") + ("" if cnt is None else f", {cnt} threads"))
            if wait:
                waiting.append(w)
            if red is not None:
                op, vals = red
                v = vals[a, w]
                part = int(v.sum()) if op == "POPC" else (bool(v[lanes[a, w]].all()) if op == "AND" else bool(v.any()))
                if acc is None:
                    acc = (op, part)
                else:
                    acc = (op, acc[1] + part if op == "POPC" else (acc[1] and part) if op == "AND" else (acc[1] or part))
            self.bar_count[key] = entry = (arrived, need if need is not None else cnt, waiting, acc)
            if entry[1] is not None and arrived >= entry[1]:
                # a barrier with a thread count completes at the arrival that reaches it; a warp arriving after
                # that in the same step starts its next generation (bar.sync 1, 64 by three warps: the third
                # waits, and the H200 hangs: gpu/synccheck_cases.py, bar64_excess)
                self._complete_bar(key, entry)
                del self.bar_count[key]
        if self.sync is not None:
            self.sync.epoch += 1
        self._check_bars()

    def _check_bars(self) -> None:
        done = []
        for (a, b), entry in self.bar_count.items():
            arrived, need = entry[0], entry[1]
            if need is None:
                live_warps = int(((self.st[a] != EXITED) & (self.st[a] != NONE)).any(axis=1).sum())
                complete = arrived >= 32 * live_warps
            else:
                complete = arrived >= need
            if complete:
                self._complete_bar((a, b), entry)
                done.append((a, b))
        for k in done:
            del self.bar_count[k]

    def _complete_bar(self, key: tuple[int, int], entry: tuple) -> None:
        """Barrier ``b`` of batch CTA ``a`` completes: its waiting warps go on (the caller drops its entry)."""
        (a, b), (arrived, need, waiting, acc) = key, entry
        if self.synccheck is not None:
            self.synccheck.complete(self, a, b)
        for w in waiting:
            at = self.st[a, w] == BAR
            self.st[a, w][at] = RUN
            self.pc[a, w][at] += 16
            if acc is not None:
                self.bar_result[a, w] = int(acc[1])
        if self.probe is not None and self.probe.report.timeline:
            for w in waiting:
                self.probe.event(self, a, w, -1, "bar_done", b, -1, f"{arrived} threads arrived")
        if self.smem is not None and self.smem.shadow is not None:
            if need is None:
                self.smem.barrier(np.arange(self.A) == a)
            else:
                self.smem.named_complete(a, b, waiting)

    def on_exit(self) -> None:
        """After lanes exit: barriers waiting for every live thread may now be complete."""
        if self.sync is not None:
            self.sync.epoch += 1
        if self.bar_count:
            self._check_bars()
