"""Barrier misuse, as compute-sanitizer's synccheck reports it, seen by the interpreter: CTA barriers reached by
part of a warp or of a CTA, barriers whose thread count the arrivals do not match, __syncwarp masks that leave
out the executing lane.

Collected inside ``flashsim.cuda.checking(synccheck=True)`` (``report.sync_findings``, each a
:class:`flashsim.sass.checking.SyncFinding`). It only observes: with it on, a kernel computes the same bits,
completes where it completed and deadlocks where it deadlocked (a BarrierDeadlock, whose findings the report
keeps). Machine (flashsim.sass.machine) calls :meth:`SyncCheck.arrive` for every warp that arrives at a BAR,
:meth:`SyncCheck.complete` when a barrier completes, :meth:`SyncCheck.deadlock` before it reports a deadlock;
the WARPSYNC semantics (flashsim.sass.ops_ctrl) call :meth:`SyncCheck.warpsync`.

Kinds, named after compute-sanitizer's messages ("Barrier error detected. Divergent thread(s) in warp" /
"... in block" / "Invalid arguments"; :data:`SANITIZER_MESSAGE`), each with the rule that found it (``reason``):

- ``divergent warp``: lanes of a warp arrive at a barrier while other live lanes of that warp are elsewhere
  (:data:`R_ELSEWHERE`, seen at the arrival; a lane at the same instruction with its guard false is elsewhere:
  ``@!P0 BAR.SYNC`` is what ptxas makes of ``if (c) __syncthreads();``), or, per :data:`EXITED_THREADS`, exit
  while their warp waits at it (:data:`R_EXITED`).
- ``divergent block``: a barrier over the whole CTA (no thread count: ``__syncthreads``, its _count/_and/_or
  forms, ``this_thread_block().sync()``) completed with warps at different barrier instructions
  (:data:`R_SITES`: the hardware counts arrivals per barrier id, not per instruction), completed while warps
  that never arrived exited (:data:`R_EXITED`, per :data:`EXITED_THREADS`) or were elsewhere
  (:data:`R_ABSENT`), or can never complete (:data:`R_NEVER`, at a deadlock).
- ``invalid arguments``: ``bar.sync id, count`` with a count more than the CTA's warps can bring
  (:data:`R_COUNT_CTA`: the launch also deadlocks, where the H200 hangs) or different from the count of the
  generation's first arrival (:data:`R_COUNT_MIXED`); a WARPSYNC executed by a lane outside its own mask
  (:data:`R_NOT_IN_MASK`, as compute-sanitizer reports it; the launch then faults, as the H200 does), or (per
  :data:`WARPSYNC_EXITED_LANES`) whose mask names exited lanes (:data:`R_MASK_EXITED`).

What the H200 itself does (gpu/synccheck_cases.py, traces/synccheck) is the interpreter's semantics, not a
finding: a thread count that is not a multiple of 32 and a lane outside its WARPSYNC mask stop the kernel with
cudaErrorIllegalInstruction (SimulatedFault "illegal instruction"); more warps at ``bar.sync id, count`` than the
count are served one generation at a time, so the extra warp waits for the next one (the H200 hangs: a
BarrierDeadlock); lanes at one WARPSYNC whose masks differ but each name the lane itself run on, and
compute-sanitizer reports nothing.

The rules follow the PTX ISA ("Parallel Synchronization and Communication Instructions: bar, barrier": from
sm_70 on, a barrier makes the executing thread wait for the non-exited threads of its warp and marks the warp's
arrival; bar.sync is barrier.sync.aligned, which every thread of the CTA must execute at the same instruction;
the thread count must be a multiple of the warp size) and the CUDA C++ Programming Guide's __syncwarp ("each
calling thread must have its own bit set in the mask and all non-exited threads named in mask must execute a
corresponding __syncwarp() with the same mask"). compute-sanitizer's own samples (NVIDIA/compute-sanitizer-samples,
Synccheck/divergent_threads.cu, illegal_syncwarp.cu) plant a __syncthreads in a branch part of the CTA takes and a
__syncwarp executed by a lane outside its mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flashsim.errors import ranges as _number_ranges
from flashsim.sass.machine import BAR, EXITED, NONE, WAIT

__all__ = ["EXITED_THREADS", "KINDS", "SANITIZER_MESSAGE", "SyncCheck", "WARPSYNC_EXITED_LANES"]

# ------------------------------------------------------------------------------------------------ decision points
#: Do threads that exit without arriving at a CTA barrier (one without a thread count) count as divergent?
#: ``"never"`` (exited threads never take part), as compute-sanitizer 2025.3.1 on the H200 reads it
#: (gpu/synccheck_cases.py, traces/synccheck: ``if (tid < 32) __syncthreads();`` with 64 threads whose warp 1
#: exits, its cooperative-groups and _count/_and/_or forms, and the early-return guard idiom are all clean;
#: a warp that stays live and reaches another barrier instruction is reported). ``"during"`` (those that exit
#: while the barrier is open) and ``"always"`` (every exited thread that did not arrive) are kept as readings
#: for other tools.
EXITED_THREADS = "never"
_EXITED_CHOICES = ("during", "always", "never")

#: Is a __syncwarp (a WARPSYNC; ptxas writes __syncwarp(0xffffffff) as WARPSYNC.ALL) whose mask names lanes that
#: have exited an error (invalid arguments)? No: the CUDA C++ Programming Guide asks only the non-exited lanes of
#: the mask to execute it, and compute-sanitizer on the H200 reports nothing (case syncwarp_exited).
WARPSYNC_EXITED_LANES = False

# ------------------------------------------------------------------------------------------------ kinds, rules
K_WARP, K_BLOCK, K_ARGS = "divergent warp", "divergent block", "invalid arguments"
KINDS = (K_WARP, K_BLOCK, K_ARGS)
#: what compute-sanitizer prints for each kind, after "Barrier error detected. "
SANITIZER_MESSAGE = {K_WARP: "Divergent thread(s) in warp", K_BLOCK: "Divergent thread(s) in block",
                     K_ARGS: "Invalid arguments"}

R_ELSEWHERE = "lanes of the warp elsewhere"
R_EXITED = "exited while the barrier waited"
R_SITES = "different barrier instructions"
R_ABSENT = "absent when the barrier completed"
R_NEVER = "never arrived (deadlock)"
R_COUNT_CTA = "count exceeds the CTA"
R_COUNT_MIXED = "counts differ"
R_NOT_IN_MASK = "lane not in its mask"
R_MASK_EXITED = "mask names exited lanes"

#: findings a batch of CTAs keeps (the rest are counted): a barrier in a loop reports at every trip
MAX_FINDINGS = 4096


def ranges(lanes) -> str:
    """Lane numbers as ranges: [0, 1, 2, 5] -> '0-2,5' ('none' for none)."""
    return _number_ranges(lanes) or "none"


def _lanes(lanes) -> str:
    """'lane 16' or 'lanes 0-15'."""
    vs = [int(v) for v in lanes]
    return f"lane={vs[0]}" if len(vs) == 1 else f"lanes={ranges(vs)}"


def _warps(ws) -> str:
    ws = sorted(set(int(w) for w in ws))
    return f"warp={ws[0]}" if len(ws) == 1 else f"warps={ranges(ws)}"


def _source(program, pc: int):
    """(file, line, inline chain) of the instruction at ``pc``; None without line tables."""
    ins = program.instructions.get(pc)
    if ins is None or not ins.line:
        return None
    return (ins.line[0], ins.line[1], program.inline_chain(pc))


@dataclass
class _Generation:
    """One generation of barrier ``b`` of one CTA: from its first arrival to its completion."""

    count: int | None  # threads it waits for (None: every live thread of the CTA)
    first_pc: int
    gone: np.ndarray  # (W, 32) lanes exited (or absent) when it opened
    arrived: np.ndarray  # (W, 32) lanes that arrived
    at: np.ndarray  # (W, 32) the BAR each arrived lane arrived at (-1: none)
    flagged: np.ndarray  # (W, 32) lanes a finding of this generation already names
    order: list = field(default_factory=list)  # warps in arrival order


class SyncCheck:
    """The synccheck state of one batch of CTAs (a Machine): open barrier generations and the findings."""

    def __init__(self, m):
        self.gens: dict[tuple[int, int], _Generation] = {}
        self.findings: list[dict] = []
        self.count = 0  # findings, kept or not
        if EXITED_THREADS not in _EXITED_CHOICES:
            raise ValueError(f"flashsim.sass.synccheck.EXITED_THREADS={EXITED_THREADS!r}: expected one of "
                             f"{_EXITED_CHOICES}")
        self.exited = EXITED_THREADS

    # ------------------------------------------------------------------------------------------ recording
    def _add(self, m, kind: str, reason: str, a: int, w: int, pc: int, lanes, message: str, *, barrier: int = -1,
             arrived=(), sites=()) -> None:
        """A finding at instruction ``pc`` of warp ``w`` of batch CTA ``a``: ``lanes`` the lanes it names,
        ``arrived`` the lanes of that warp at the instruction, ``sites`` ((pc, warp, lane), ...) the other
        instructions involved."""
        self.count += 1
        if len(self.findings) >= MAX_FINDINGS:
            return
        lanes = tuple(int(x) for x in lanes)
        self.findings.append({"kind": kind, "reason": reason, "a": int(a), "w": int(w), "pc": int(pc),
                              "lanes": lanes, "arrived": tuple(int(x) for x in arrived), "barrier": int(barrier),
                              "message": message, "sites": tuple((int(p), int(x), int(y)) for p, x, y in sites)})

    @staticmethod
    def _where(m, a: int, w: int, lanes: np.ndarray, own_pc: int | None = None) -> tuple[list, str]:
        """(sites, text): the instructions the ``lanes`` of warp (a, w) are at, one (pc, warp, first lane) per
        PC, and their description."""
        st, pcs = m.st[a, w], m.pc[a, w]
        sites, parts = [], []
        for p in sorted({int(x) for x in pcs[lanes]}):
            at = lanes & (pcs == p)
            first = int(np.argmax(at))
            sites.append((p, w, first))
            what = m.program.describe(p)
            if own_pc is not None and p == own_pc:
                what = "the same instruction with their guard false"
            elif (st[at] == BAR).all():
                what += " (waiting at a barrier)"
            elif (st[at] == WAIT).all():
                what += " (waiting to converge)"
            parts.append(f"{_lanes(np.nonzero(at)[0])} at {what}")
        return sites, "; ".join(parts)

    # ------------------------------------------------------------------------------------------ CTA barriers
    def arrive(self, m, a: int, w: int, b: int, count: int | None, pc: int, lanes: np.ndarray, opened: bool) -> None:
        """Warp ``w`` of batch CTA ``a`` arrives at barrier ``b`` (``count`` threads, None: the CTA) at ``pc``
        with ``lanes`` (32 bools); ``opened``: the first arrival of a generation. Called after the arriving
        lanes' state is set, before the arrival is counted."""
        st = m.st[a]
        key = (a, b)
        gen = self.gens.get(key)
        if opened or gen is None:
            gone = (st == EXITED) | (st == NONE)
            W = st.shape[0]
            gen = self.gens[key] = _Generation(count, pc, gone, np.zeros((W, 32), bool), np.full((W, 32), -1, np.int64),
                                               np.zeros((W, 32), bool))
            if count is not None:  # (a count that is not a multiple of 32 faults before it arrives: ops_ctrl.bar)
                if count > 32 * m.W:
                    self._add(m, K_ARGS, R_COUNT_CTA, a, w, pc, np.nonzero(lanes)[0],
                              f"bar.sync {b}, {count}: the CTA has {m.W} warp{'' if m.W == 1 else 's'}, at most "
                              f"{32 * m.W} threads: it can never complete", barrier=b, arrived=np.nonzero(lanes)[0])
        elif count != gen.count and count is not None:
            self._add(m, K_ARGS, R_COUNT_MIXED, a, w, pc, np.nonzero(lanes)[0],
                      f"barrier {b}: this warp arrives with a count of {count} threads, the generation's first arrival "
                      f"with {'none (the whole CTA)' if gen.count is None else gen.count}", barrier=b,
                      arrived=np.nonzero(lanes)[0])
        live = (st[w] != EXITED) & (st[w] != NONE)
        missing = live & ~lanes & ~gen.arrived[w]
        if missing.any():
            sites, where = self._where(m, a, w, missing, own_pc=pc)
            self._add(m, K_WARP, R_ELSEWHERE, a, w, pc, np.nonzero(missing)[0],
                      f"barrier {b}: {_lanes(np.nonzero(lanes)[0])} of the warp arrive, "
                      f"{_lanes(np.nonzero(missing)[0])} of it live elsewhere ({where})",
                      barrier=b, arrived=np.nonzero(lanes)[0], sites=sites)
            gen.flagged[w] |= missing
        gen.arrived[w] |= lanes
        gen.at[w][lanes] = pc
        gen.order.append(w)

    def complete(self, m, a: int, b: int) -> None:
        """Barrier ``b`` of batch CTA ``a`` completed."""
        gen = self.gens.pop((a, b), None)
        if gen is None:
            return
        if gen.count is not None:  # (it completes at the arrival that reaches its count: Machine.bar_arrive)
            return
        self._sites(m, a, b, gen)
        self._missing(m, a, b, gen, deadlock=False)

    def deadlock(self, m) -> None:
        """No lane can run: every open CTA barrier names the warps that never arrived."""
        for (a, b), gen in list(self.gens.items()):
            if gen.count is None:
                self._sites(m, a, b, gen)
                self._missing(m, a, b, gen, deadlock=True)
        self.gens.clear()

    def _sites(self, m, a: int, b: int, gen: _Generation) -> None:
        """Warps that arrived at other instructions than the generation's first arrival. Two copies of one
        source-level barrier (ptxas duplicating code: the same file, line and inline chain) count as one."""
        first_w = gen.order[0] if gen.order else 0
        first_lane = int(np.argmax(gen.at[first_w] == gen.first_pc))
        first = _source(m.program, gen.first_pc)
        for w in dict.fromkeys(gen.order):
            for p in sorted({int(x) for x in gen.at[w][gen.arrived[w]]} - {gen.first_pc}):
                if first is not None and _source(m.program, p) == first:
                    continue
                lanes = np.nonzero(gen.at[w] == p)[0]
                self._add(m, K_BLOCK, R_SITES, a, w, p, lanes,
                          f"barrier {b} (the whole CTA): {_lanes(lanes)} of warp={w} arrive at this instruction, "
                          f"warp={first_w} at {m.program.describe(gen.first_pc)}: the barrier completes across two "
                          "barrier instructions", barrier=b, arrived=lanes, sites=[(gen.first_pc, first_w, first_lane)])

    def _missing(self, m, a: int, b: int, gen: _Generation, deadlock: bool) -> None:
        """Threads of the CTA that were not at barrier ``b`` when it completed (or deadlocked), per warp."""
        st = m.st[a]
        exited = st == EXITED
        if self.exited == "during":
            gone = exited & ~gen.gone
        elif self.exited == "always":
            gone = exited
        else:
            gone = np.zeros_like(exited)
        live = (st != EXITED) & (st != NONE)
        first_lane = int(np.argmax(gen.at[gen.order[0]] == gen.first_pc)) if gen.order else 0
        for w in range(st.shape[0]):
            never = ~gen.arrived[w] & ~gen.flagged[w]
            here = live[w] & never
            out = gone[w] & never
            if not (here.any() or out.any()):
                continue
            some = gen.arrived[w].any()
            kind = K_WARP if some else K_BLOCK
            arrived = np.nonzero(gen.arrived[w])[0]
            if here.any():
                sites, where = self._where(m, a, w, here)
                reason = R_NEVER if deadlock else R_ABSENT
                what = ("can never complete: they never arrive" if deadlock else
                        "completed without them (the warps that did arrive were counted whole)")
                self._add(m, kind, reason, a, w, gen.first_pc, np.nonzero(here)[0],
                          f"barrier {b} (the whole CTA) at {m.program.describe(gen.first_pc)} {what}: warp={w}: "
                          f"{where}", barrier=b, arrived=arrived,
                          sites=[(gen.first_pc, gen.order[0], first_lane)] + sites if gen.order else sites)
            if out.any():
                when = "while it waited for them" if self.exited == "during" else "without arriving"
                self._add(m, kind, R_EXITED, a, w, gen.first_pc, np.nonzero(out)[0],
                          f"barrier {b} (the whole CTA): {_lanes(np.nonzero(out)[0])} of warp={w} exited {when} "
                          f"({_warps(gen.order)} waited at it)", barrier=b, arrived=arrived,
                          sites=[(gen.first_pc, gen.order[0], first_lane)] if gen.order else ())
            gen.flagged[w] |= here | out

    # ------------------------------------------------------------------------------------------ WARPSYNC
    def warpsync(self, m, pc: int, lanes: np.ndarray, masks: np.ndarray, what: str = "WARPSYNC") -> None:
        """``lanes`` (A, W, 32) execute the WARPSYNC at ``pc`` with ``masks`` (A, W, 32) uint32, each lane's own."""
        bit = np.arange(32, dtype=np.uint32)
        for a, w in zip(*np.nonzero(lanes.any(axis=2))):
            a, w = int(a), int(w)
            ex = lanes[a, w]
            mk = masks[a, w].astype(np.uint32)
            own = ((mk >> bit) & np.uint32(1)).astype(bool)
            execs = np.nonzero(ex)[0]
            outside = ex & ~own
            if outside.any():
                out = np.nonzero(outside)[0]
                self._add(m, K_ARGS, R_NOT_IN_MASK, a, w, pc, out,
                          f"{what} with mask {int(mk[out[0]]):#010x}, executed by {_lanes(execs)}: "
                          f"{_lanes(out)} not in it (each lane must name itself)", arrived=execs)
            if WARPSYNC_EXITED_LANES:
                named = np.zeros(32, bool)
                for l in execs:
                    named |= ((mk[l] >> bit) & np.uint32(1)).astype(bool)
                gone = named & (m.st[a, w] == EXITED)
                if gone.any():
                    self._add(m, K_ARGS, R_MASK_EXITED, a, w, pc, np.nonzero(gone)[0],
                              f"{what}: its mask names {_lanes(np.nonzero(gone)[0])}, which have exited",
                              arrived=execs)
