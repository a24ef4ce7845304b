"""What a launch did, seen by the interpreter: shared-memory banks per instruction and source line, races,
reads of memory nothing wrote, executed instructions per line.

    import flashsim.cuda as fc
    with fc.checking(banks=True, races=True, initcheck=True) as report:
        kernel(grid, block, args)
    print(report.text())          # or report.bank_sites(), report.races, report.uninitialized, report.to_dict()

    with fc.checking(synccheck=True) as report:    # barrier misuse, as compute-sanitizer's synccheck
        kernel(grid, block, args)
    report.sync_findings                          # SyncFinding: kind, reason, CTA, warp, lanes, PC, SASS, line

Each diagnostic is off unless asked for (they cost time); executed instructions per PC are always
collected inside ``checking``. The report accumulates every interpreted launch made inside the block.

- **banks**: for every shared-memory instruction (LDS/STS of every width, LDSM/STSM, LDGSTS, generic
  LD/ST that hit shared memory): warp-level executions, wavefronts, ideal wavefronts and conflicts, counted
  by :mod:`flashsim.smem`'s rules (the ones Nsight Compute was measured to use on sm_90), per PC, per source
  line (``-lineinfo``) and per kernel.
- **races**: the race shadow of :mod:`flashsim.smem` (RAW/WAR/WAW between threads no barrier orders, and
  reads of cp.async destinations before the copying thread's wait), each side with its PC, SASS, source
  line, CTA, warp and lane. The verdict does not depend on the interleaving the interpreter picked: two
  accesses race when no bar.sync (or, within a warp, __syncwarp) lies between them, whatever ran first.
- **initcheck**: reads of shared memory no thread of the CTA wrote, and of global memory that neither the
  host nor a kernel wrote since ``flashsim.cuda.empty`` allocated it (``zeros`` and ``asarray`` initialise).
- **synccheck**: barriers reached by part of a warp or of a CTA (a divergent ``__syncthreads``, warps at
  different barrier instructions, warps that exit while the others wait), ``bar.sync id, count`` whose count
  the arrivals do not match, ``__syncwarp`` masks that leave out the executing lane or that the lanes at it
  disagree on: :mod:`flashsim.sass.synccheck` (its rules, and the choices the H100 is still to decide). It only
  observes: a deadlock is still a :class:`flashsim.sass.machine.BarrierDeadlock`, whose findings the report keeps.

Faults (out-of-bounds or misaligned accesses) stop the launch with a :class:`flashsim.errors.SimulatedFault`
naming cta, warp, lane, address, PC, SASS and source line, inside ``checking`` or not.
"""

from __future__ import annotations

import contextlib
from collections import Counter
import contextvars
import dataclasses
import html
import json
from dataclasses import asdict, dataclass, field
from typing import Iterator

import numpy as np

from flashsim.errors import bad_argument

__all__ = ["Access", "BankSite", "LaunchRecord", "RaceSite", "Report", "SyncFinding", "UninitRead", "checking",
           "current"]

MAX_EVENTS = 200_000  # synchronisation events kept per report (all are counted)
_SESSION: contextvars.ContextVar["Report | None"] = contextvars.ContextVar("flashsim_checking", default=None)


def current() -> "Report | None":
    """The report of the innermost active ``checking`` block, or None."""
    return _SESSION.get()


@contextlib.contextmanager
def checking(*, banks: bool = True, races: bool = False, initcheck: bool = False, synccheck: bool = False,
             max_records: int = 1000, trace=None, timeline: bool = False) -> Iterator["Report"]:
    """Collect diagnostics of every interpreted launch inside the block into the yielded :class:`Report`.

    ``trace``: a :class:`flashsim.sass.tracing.TraceSpec`: trace the launches at chosen instructions into
    one trace file, published when the block exits (nothing is written when it exits with an exception).
    ``timeline``: record the synchronisation events (mbarriers, copies, named barriers, wgmma) in
    ``report.events`` (:class:`flashsim.sass.timeline.SyncEvent`; at most ``MAX_EVENTS``), drawn by
    ``report.timeline_html()``."""
    for name, v in (("banks", banks), ("races", races), ("initcheck", initcheck), ("synccheck", synccheck),
                    ("timeline", timeline)):
        if not isinstance(v, bool):
            raise bad_argument(name, v, "expected a bool")
    if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 1:
        raise bad_argument("max_records", max_records, "expected a positive int (records kept per kind)")
    tracer = None
    if trace is not None:
        from flashsim.sass.tracing import TraceSpec, Tracer

        if not isinstance(trace, TraceSpec):
            raise bad_argument("trace", trace, "expected None or a flashsim.sass.tracing.TraceSpec")
        tracer = Tracer(trace)
    report = Report(banks=banks, races=races, initcheck=initcheck, synccheck=synccheck, max_records=max_records,
                    tracer=tracer, timeline=timeline)
    token = _SESSION.set(report)
    try:
        yield report
    except BaseException:
        if tracer is not None:
            tracer.abort()
        raise
    else:
        if tracer is not None:
            tracer.close()
    finally:
        _SESSION.reset(token)


# ----------------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------------


def _where(ins) -> tuple[str, str, int | None]:
    return (ins.text, ins.line[0], ins.line[1]) if ins is not None and ins.line else (
        ins.text if ins is not None else "?", "", None)


@dataclass(frozen=True)
class Access:
    """One side of a hazard, or an uninitialised read: what ran where."""

    kernel: str
    op: str  # read / write / cp.async
    pc: int
    sass: str
    file: str
    line: int | None
    cta: int  # linear CTA index in the grid
    ctaid: tuple[int, int, int]
    warp: int
    lane: int
    inlined: tuple = ()  # ((file, line), ...): the call sites when the instruction is inlined code, outermost last

    @property
    def location(self) -> str:
        if self.line is None:
            return "(no line info)"
        return f"{self.file}:{self.line}" + "".join(f" inlined at {f}:{n}" for f, n in self.inlined)

    @property
    def lines(self) -> tuple[tuple[str, int], ...]:
        """(file, line) of the instruction, then of each call site it is inlined into."""
        return (((self.file, self.line),) if self.line is not None else ()) + tuple(self.inlined)

    def __str__(self) -> str:
        return (f"{self.op} at pc={self.pc:#06x} `{self.sass}` {self.location} "
                f"cta={self.cta} warp={self.warp} lane={self.lane}")


@dataclass(frozen=True)
class RaceSite:
    """A hazard between two accesses no synchronisation orders: ``kind`` RAW / WAR / WAW, 'RAW cp.async' (a read
    of a cp.async destination before the copying thread's wait) / 'WAW cp.async', or 'RAW (no
    fence.proxy.async)' (the async proxy read a thread's write that no proxy fence made visible to it);
    ``addr`` a shared byte address. An access by an asynchronous agent (``op`` 'bulk copy write', 'wgmma
    read', ...) names the warp that issued it."""

    kind: str
    addr: int
    first: Access
    second: Access

    @property
    def pcs(self) -> frozenset:
        """The two instructions, unordered (which ran first is the interleaving's choice)."""
        return frozenset((self.first.pc, self.second.pc))

    def __str__(self) -> str:
        why = ("before the copying thread's cp.async wait covered it" if "cp.async" in self.kind
               else "ordered, but the writing warp executed no fence.proxy.async in between" if "fence" in self.kind
               else "with no synchronisation ordering them")
        return f"{self.kind} hazard at shared addr={self.addr:#x}: {self.first}, then {self.second}, {why}"


@dataclass(frozen=True)
class ProtocolIssue:
    """An mbarrier / bulk-copy protocol finding (with ``races``): ``kind`` 'arrival_count' (a phase left
    part-way at exit), 'expect_tx' (announced bytes unlike the copies: a copy landing after its phase completed,
    or a tx-count left at exit), 'copy_in_flight' (a bulk copy nobody waited for when its CTA exited). ``sites``:
    the instructions involved (arrivals, expect_tx, copies) as Accesses, each with its warp."""

    kind: str
    message: str
    cta: int
    sites: tuple = ()

    @property
    def lines(self) -> set:
        return {ln for a in self.sites for ln in a.lines}

    def __str__(self) -> str:
        return f"{self.kind} (cta={self.cta}): {self.message}"


@dataclass(frozen=True)
class UninitRead:
    """A read of ``nbytes`` at ``addr`` (shared: byte offset in the CTA's window; global: device address)
    that nothing had written."""

    space: str
    addr: int
    nbytes: int
    access: Access

    def __str__(self) -> str:
        return f"uninitialised {self.space} read of {self.nbytes} bytes at addr={self.addr:#x}: {self.access}"


@dataclass(frozen=True)
class SyncFinding:
    """A barrier misused (with ``synccheck``; the rules: :mod:`flashsim.sass.synccheck`). ``kind``: 'divergent
    warp', 'divergent block' or 'invalid arguments' (compute-sanitizer synccheck's "Divergent thread(s) in warp",
    "... in block", "Invalid arguments"); ``reason``: the rule that found it; ``access``: the barrier or WARPSYNC
    instruction, the CTA, the warp and the first lane of ``lanes``; ``lanes``: the lanes of that warp the finding
    names (the divergent ones, those that never arrived, those outside their mask); ``arrived``: the lanes of that
    warp at the instruction; ``barrier``: the barrier id (-1 for a WARPSYNC); ``sites``: the other instructions
    involved (the barrier instruction the others waited at, where the missing lanes were), each with its warp."""

    kind: str
    reason: str
    message: str
    access: Access
    lanes: tuple = ()
    arrived: tuple = ()
    barrier: int = -1
    sites: tuple = ()

    @property
    def lines(self) -> set:
        """(file, line) of the instruction and of every site (with the call sites of inlined code)."""
        return set(self.access.lines) | {ln for a in self.sites for ln in a.lines}

    @property
    def threads(self) -> tuple:
        """The thread indices (warp * 32 + lane, within the CTA) of ``lanes``."""
        return tuple(self.access.warp * 32 + lane for lane in self.lanes)

    def __str__(self) -> str:
        a = self.access
        return (f"{self.kind} ({self.reason}) at pc={a.pc:#06x} `{a.sass}` {a.location} cta={a.cta} warp={a.warp} "
                f"lanes {_ranges(self.lanes)}: {self.message}")


def _ranges(values) -> str:
    from flashsim.sass.synccheck import ranges

    return ranges(values)


@dataclass
class BankSite:
    """Shared-memory traffic of one instruction (``pc``) of ``kernel``, summed over the launches."""

    kernel: str
    pc: int
    sass: str
    file: str
    line: int | None
    op: str  # ld, st, ldsm, stsm, ldgsts (Nsight Compute's op classes)
    executions: int = 0  # warp-level executions with at least one active lane
    wavefronts: int = 0
    ideal: int = 0

    @property
    def conflicts(self) -> int:
        return self.wavefronts - self.ideal

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else "(no line info)"


@dataclass
class LaunchRecord:
    kernel: str
    grid: tuple
    block: tuple
    shared_mem: int
    steps: int = 0
    warp_instructions: int = 0


# ----------------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------------


@dataclass
class Report:
    """Diagnostics of the launches made inside one ``checking`` block."""

    banks: bool = True
    races: bool = False
    initcheck: bool = False
    synccheck: bool = False
    max_records: int = 1000
    launches: list = field(default_factory=list)
    race_sites: list = field(default_factory=list)
    race_count: int = 0
    uninitialized: list = field(default_factory=list)
    uninit_count: int = 0
    protocol: list = field(default_factory=list)  # ProtocolIssue (with ``races``)
    sync_findings: list = field(default_factory=list)  # SyncFinding (with ``synccheck``)
    sync_count: int = 0  # findings, listed or not
    # a global byte range [lo, hi) whose stores are recorded in ``writes`` (who wrote an output element)
    watch_global: tuple | None = None
    tracer: object = field(default=None, repr=False)  # a flashsim.sass.tracing.Tracer, or None
    writes: list = field(default_factory=list)
    timeline: bool = False
    events: list = field(default_factory=list)  # flashsim.sass.timeline.SyncEvent, with ``timeline``
    event_count: int = 0
    _banks: dict = field(default_factory=dict, repr=False)  # (kernel, pc) -> BankSite
    _executed: dict = field(default_factory=dict, repr=False)  # (kernel, pc) -> warp executions
    _programs: dict = field(default_factory=dict, repr=False)  # kernel -> Program

    # ------------------------------------------------------------------------------ collection (launch)
    def begin(self, launch, name: str) -> "_LaunchProbe":
        self._programs[name] = launch.program
        rec = LaunchRecord(name, tuple(launch.grid), tuple(launch.block), int(launch.dynamic_shared))
        self.launches.append(rec)
        probe = _LaunchProbe(self, launch.program, name, rec)
        if self.tracer is not None:
            self.tracer.attach(probe, launch, name)
        return probe

    # ------------------------------------------------------------------------------ results
    def bank_sites(self, kernel: str | None = None, *, order: str = "conflicts") -> list[BankSite]:
        """Per shared-memory instruction; ``order`` 'conflicts' (worst first) or 'pc'."""
        rows = [r for (k, _), r in self._banks.items() if kernel is None or k == kernel]
        if order == "pc":
            return sorted(rows, key=lambda r: (r.kernel, r.pc))
        return sorted(rows, key=lambda r: (-r.conflicts, -r.wavefronts, r.kernel, r.pc))

    def banks_by_line(self, kernel: str | None = None) -> list[dict]:
        """Bank counters summed per source line (worst first): file, line, executions, wavefronts, ideal,
        conflicts, pcs."""
        acc: dict = {}
        for r in self.bank_sites(kernel, order="pc"):
            key = (r.kernel, r.file, r.line)
            d = acc.setdefault(key, {"kernel": r.kernel, "file": r.file, "line": r.line, "executions": 0,
                                     "wavefronts": 0, "ideal": 0, "pcs": []})
            d["executions"] += r.executions
            d["wavefronts"] += r.wavefronts
            d["ideal"] += r.ideal
            d["pcs"].append(r.pc)
        out = list(acc.values())
        for d in out:
            d["conflicts"] = d["wavefronts"] - d["ideal"]
        return sorted(out, key=lambda d: (-d["conflicts"], -d["wavefronts"], d["kernel"], d["file"], d["line"] or 0))

    def bank_totals(self) -> dict:
        """Per kernel: shared-memory instructions executed, wavefronts, ideal, conflicts."""
        out: dict = {}
        for r in self._banks.values():
            d = out.setdefault(r.kernel, {"executions": 0, "wavefronts": 0, "ideal": 0})
            d["executions"] += r.executions
            d["wavefronts"] += r.wavefronts
            d["ideal"] += r.ideal
        for d in out.values():
            d["conflicts"] = d["wavefronts"] - d["ideal"]
        return out

    def executed(self, kernel: str | None = None) -> dict:
        """{(kernel, pc): warp-level executions} of every instruction that ran."""
        return {k: v for k, v in self._executed.items() if kernel is None or k[0] == kernel}

    def executed_by_line(self, kernel: str | None = None) -> list[dict]:
        """Warp-level executions summed per source line, most first."""
        acc: dict = {}
        for (k, pc), n in self.executed(kernel).items():
            ins = self._programs[k].instructions.get(pc)
            f, ln = (ins.line if ins is not None and ins.line else ("", None))
            d = acc.setdefault((k, f, ln), {"kernel": k, "file": f, "line": ln, "executions": 0, "instructions": 0})
            d["executions"] += n
            d["instructions"] += 1
        return sorted(acc.values(), key=lambda d: (-d["executions"], d["kernel"], d["file"], d["line"] or 0))

    @property
    def clean(self) -> bool:
        """No race, no mbarrier protocol finding, no uninitialised read and no barrier misuse was seen."""
        return self.race_count == 0 and self.uninit_count == 0 and not self.protocol and self.sync_count == 0

    def sync_groups(self) -> list[list[SyncFinding]]:
        """The listed synccheck findings grouped by kind, reason, kernel and instruction, in the order their first
        one was found: one finding each, however many CTAs, warps and trips of a loop hit it."""
        groups: dict = {}
        for f in self.sync_findings:
            groups.setdefault((f.kind, f.reason, f.access.kernel, f.access.pc), []).append(f)
        return list(groups.values())

    def race_groups(self) -> list[list[RaceSite]]:
        """The listed races grouped by kind, kernel and instruction pair (first PC, second PC), in the order
        their first race was found: one finding each, however many words and lanes it hit."""
        groups: dict = {}
        for r in self.race_sites:
            groups.setdefault((r.kind, r.first.kernel, r.first.pc, r.second.pc), []).append(r)
        return list(groups.values())

    def race_pairs(self) -> set:
        """The unordered PC pairs (with kernel) of every listed race: the verdict, whatever the interleaving."""
        return {(r.first.kernel, r.pcs) for r in self.race_sites}

    # ------------------------------------------------------------------------------ rendering
    def to_dict(self) -> dict:
        return {
            "launches": [asdict(x) for x in self.launches],
            "banks": [dict(asdict(r), conflicts=r.conflicts) for r in self.bank_sites(order="pc")] if self.banks else None,
            "banks_by_line": self.banks_by_line() if self.banks else None,
            "bank_totals": self.bank_totals() if self.banks else None,
            "races": [dict(kind=r.kind, addr=r.addr, first=asdict(r.first), second=asdict(r.second))
                      for r in self.race_sites] if self.races else None,
            "race_count": self.race_count if self.races else None,
            "protocol": [dict(kind=p.kind, message=p.message, cta=p.cta, sites=[asdict(a) for a in p.sites])
                         for p in self.protocol] if self.races else None,
            "uninitialized": [dict(space=u.space, addr=u.addr, nbytes=u.nbytes, access=asdict(u.access))
                              for u in self.uninitialized] if self.initcheck else None,
            "uninit_count": self.uninit_count if self.initcheck else None,
            "synccheck": [dict(kind=f.kind, reason=f.reason, message=f.message, access=asdict(f.access),
                               lanes=list(f.lanes), arrived=list(f.arrived), barrier=f.barrier,
                               sites=[asdict(x) for x in f.sites]) for f in self.sync_findings]
            if self.synccheck else None,
            "sync_count": self.sync_count if self.synccheck else None,
            "executed_by_line": self.executed_by_line(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=list)

    def text(self, *, top: int = 20) -> str:
        """A plain-text summary: banks per line (worst first) and per kernel, races, uninitialised reads."""
        out = []
        for rec in self.launches:
            out.append(f"launch {rec.kernel} grid={rec.grid} block={rec.block} shared_mem={rec.shared_mem}: "
                       f"{rec.warp_instructions} warp instructions")
        if self.banks:
            out.append("")
            out.append("shared-memory banks per source line (worst first):")
            rows = self.banks_by_line()
            if not rows:
                out.append("  no shared-memory instruction executed")
            else:
                out.append(f"  {'line':<40} {'exec':>9} {'wavefronts':>11} {'ideal':>9} {'conflicts':>10}  pcs")
                for d in rows[:top]:
                    loc = f"{d['file'].rsplit('/', 1)[-1]}:{d['line']}" if d["line"] is not None else "(no line info)"
                    pcs = ",".join(f"{p:#06x}" for p in d["pcs"][:4]) + (" ..." if len(d["pcs"]) > 4 else "")
                    out.append(f"  {loc:<40} {d['executions']:>9} {d['wavefronts']:>11} {d['ideal']:>9} "
                               f"{d['conflicts']:>10}  {pcs}")
                if len(rows) > top:
                    out.append(f"  ... {len(rows) - top} more lines")
                for k, d in self.bank_totals().items():
                    out.append(f"  total {k}: {d['executions']} executions, {d['wavefronts']} wavefronts, "
                               f"{d['ideal']} ideal, {d['conflicts']} conflicts")
        if self.races:
            out.append("")
            if not self.race_count:
                out.append("races: none")
            else:
                out.append(f"races: {self.race_count} hazards (per word and instruction pair), "
                           f"{len(self.race_pairs())} instruction pairs:")
                counts = Counter((r.kind, r.first.pc, r.second.pc) for r in self.race_sites)
                seen = set()
                for r in self.race_sites:
                    key = (r.kind, r.first.pc, r.second.pc)
                    if key in seen:
                        continue
                    seen.add(key)
                    out.append(f"  {r.kind}: {counts[key]}x, e.g. addr={r.addr:#x}")
                    out.append(f"    first:  {r.first}")
                    out.append(f"    second: {r.second}")
            out.append("")
            out.append("mbarrier protocol: " + ("no finding" if not self.protocol else f"{len(self.protocol)} findings"))
            out.extend(f"  {p}" for p in self.protocol[:top])
        if self.initcheck:
            out.append("")
            if not self.uninit_count:
                out.append("uninitialised reads: none")
            else:
                out.append(f"uninitialised reads: {self.uninit_count} lane accesses")
                counts = Counter((u.space, u.access.kernel, u.access.pc) for u in self.uninitialized)
                seen = set()
                for u in self.uninitialized:
                    key = (u.space, u.access.kernel, u.access.pc)
                    if key in seen:
                        continue
                    seen.add(key)
                    out.append(f"  {u.space}: {counts[key]}x, e.g. {u}")
        if self.synccheck:
            out.append("")
            if not self.sync_count:
                out.append("synccheck: no barrier misuse")
            else:
                groups = self.sync_groups()
                pcs = len({(fs[0].access.kernel, fs[0].access.pc) for fs in groups})
                out.append(f"synccheck: {self.sync_count} finding{'' if self.sync_count == 1 else 's'} at {pcs} "
                           f"instruction{'' if pcs == 1 else 's'}:")
                for fs in groups:
                    out.append(f"  {len(fs)}x, e.g. {fs[0]}")
        return "\n".join(out)

    def html(self, *, title: str = "flashsim checking report") -> str:
        """A standalone HTML page: per-line bank table with a conflict bar, races, uninitialised reads."""
        esc = html.escape
        parts = [f"<!doctype html><meta charset='utf-8'><title>{esc(title)}</title>",
                 "<style>body{font:13px monospace;margin:1em}table{border-collapse:collapse}"
                 "td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}td.l{text-align:left}"
                 ".bar{display:inline-block;height:10px;background:#c0392b}.ok{background:#27ae60}</style>",
                 f"<h1>{esc(title)}</h1>"]
        for rec in self.launches:
            parts.append(f"<p>launch <b>{esc(rec.kernel)}</b> grid={rec.grid} block={rec.block} "
                         f"shared_mem={rec.shared_mem}: {rec.warp_instructions} warp instructions</p>")
        if self.banks:
            rows = self.banks_by_line()
            worst = max([d["wavefronts"] for d in rows] + [1])
            parts.append("<h2>Shared-memory banks per source line</h2><table><tr><th>line</th><th>executions</th>"
                         "<th>wavefronts</th><th>ideal</th><th>conflicts</th><th></th><th>PCs</th></tr>")
            for d in rows:
                loc = f"{d['file']}:{d['line']}" if d["line"] is not None else "(no line info)"
                w_ok = int(200 * d["ideal"] / worst)
                w_bad = int(200 * d["conflicts"] / worst)
                parts.append(f"<tr><td class=l>{esc(loc)}</td><td>{d['executions']}</td><td>{d['wavefronts']}</td>"
                             f"<td>{d['ideal']}</td><td>{d['conflicts']}</td><td class=l>"
                             f"<span class='bar ok' style='width:{w_ok}px'></span>"
                             f"<span class=bar style='width:{w_bad}px'></span></td>"
                             f"<td class=l>{' '.join(f'{p:#06x}' for p in d['pcs'])}</td></tr>")
            parts.append("</table>")
            parts.append("<h3>Per instruction</h3><table><tr><th>kernel</th><th>pc</th><th>SASS</th><th>line</th>"
                         "<th>op</th><th>executions</th><th>wavefronts</th><th>ideal</th><th>conflicts</th></tr>")
            for r in self.bank_sites(order="pc"):
                parts.append(f"<tr><td class=l>{esc(r.kernel)}</td><td>{r.pc:#06x}</td><td class=l>{esc(r.sass)}</td>"
                             f"<td class=l>{esc(r.location)}</td><td class=l>{r.op}</td><td>{r.executions}</td>"
                             f"<td>{r.wavefronts}</td><td>{r.ideal}</td><td>{r.conflicts}</td></tr>")
            parts.append("</table>")
        if self.races:
            groups = self.race_groups()
            parts.append(f"<h2>Races: {self.race_count} hazards, {len(groups)} instruction "
                         f"pair{'' if len(groups) == 1 else 's'}</h2><ul>")
            for rs in groups[:200]:
                addrs = [r.addr for r in rs]
                span = f"{min(addrs):#x}" if min(addrs) == max(addrs) else f"{min(addrs):#x}..{max(addrs):#x}"
                a, b = rs[0].first, rs[0].second
                parts.append(f"<li>{esc(rs[0].kind)} at shared addr {span} ({len(rs)}x): {esc(a.op)} "
                             f"<code>{esc(a.sass)}</code> ({esc(a.location)}), then {esc(b.op)} <code>{esc(b.sass)}</code> "
                             f"({esc(b.location)}); first: {esc(str(rs[0]))}</li>")
            parts.append("</ul>")
        if self.initcheck:
            parts.append(f"<h2>Uninitialised reads: {self.uninit_count}</h2><ul>")
            parts.extend(f"<li>{esc(str(u))}</li>" for u in self.uninitialized[:200])
            parts.append("</ul>")
        if self.synccheck:
            parts.append(f"<h2>Barrier misuse (synccheck): {self.sync_count}</h2><ul>")
            for fs in self.sync_groups()[:200]:
                f = fs[0]
                parts.append(f"<li>{esc(f.kind)} ({esc(f.reason)}) at <code>{esc(f.access.sass)}</code> "
                             f"({esc(f.access.location)}), {len(fs)}x; first: cta={f.access.cta} warp={f.access.warp} "
                             f"lanes {esc(_ranges(f.lanes))}: {esc(f.message)}</li>")
            parts.append("</ul>")
        return "\n".join(parts)

    def timeline_html(self, *, ctas=(0,), title: str = "flashsim synchronisation timeline") -> str:
        """The recorded synchronisation events of the CTAs ``ctas`` (None: all) as a standalone HTML page
        (:func:`flashsim.sass.timeline.html`); needs ``checking(timeline=True)``."""
        if not self.timeline:
            raise bad_argument("timeline", False, "the events were not recorded: use checking(timeline=True)")
        from flashsim.sass.timeline import html

        return html(self.events, ctas=ctas, title=title)

    # ------------------------------------------------------------------------------ internal
    def _access(self, name: str, prog, machine, c: int, w: int, l: int, tag: str, op: str) -> Access:
        pc = int(tag, 16) if isinstance(tag, str) and tag.startswith("0x") else -1
        ins = prog.instructions.get(pc)
        sass, f, ln = _where(ins)
        return Access(name, op, pc, sass, f, ln, int(machine.cta_ids[c]), machine.cta_coords(c), int(w), int(l),
                      prog.inline_chain(pc) if ins is not None else ())

    def _add_uninit(self, u: UninitRead) -> None:
        self.uninit_count += 1
        if len(self.uninitialized) < self.max_records:
            self.uninitialized.append(u)


class _LaunchProbe:
    """Collects one launch's diagnostics, batch by batch (the launch calls ``batch`` after each Machine)."""

    def __init__(self, report: Report, program, name: str, rec: LaunchRecord):
        self.report, self.program, self.name, self.rec = report, program, name, rec
        self.before = program.warp_hits.copy()
        # tracers: PCs whose machine state is handed to ``at_pc`` before / after the instruction runs, and
        # an observer of every shared-memory access (SharedMemory.observer)
        self.watch_before: frozenset = frozenset()
        self.watch_after: frozenset = frozenset()
        self.tracer = None
        self.smem_observer = None

    def at_pc(self, m, pc: int, active, when: str) -> None:
        """The machine ``m`` is at a watched ``pc`` (``active``: lanes there, None for all live lanes)."""
        if self.tracer is not None:
            self.tracer.at_pc(self, m, pc, active, when)

    # what the launch's shared memory must watch
    @property
    def shared_options(self) -> dict:
        r = self.report
        return {"banks": r.banks, "races": r.races, "initcheck": r.initcheck, "max_races": r.max_records}

    def event(self, m, a: int, w: int, pc: int, kind: str, barrier: int = -1, phase: int = -1,
              detail: str = "") -> None:
        """A synchronisation event of warp w of batch CTA a (recorded with ``checking(timeline=True)``)."""
        rep = self.report
        rep.event_count += 1
        if len(rep.events) >= MAX_EVENTS:
            return
        from flashsim.sass.timeline import SyncEvent

        ins = self.program.instructions.get(pc) if pc >= 0 else None
        sass, f, ln = _where(ins) if ins is not None else ("", "", None)
        rep.events.append(SyncEvent(int(m.steps), int(m.cta_ids[a]), int(w), int(pc), kind, int(barrier), int(phase),
                                    detail, sass if ins is not None else "",
                                    f"{f}:{ln}" if ln is not None else ""))

    def global_read(self, m, ins, lanes: np.ndarray, addr: np.ndarray, width: int) -> None:
        """initcheck of a global read by ``lanes`` (A, W, 32) at device addresses ``addr``."""
        if not self.report.initcheck or not m.mem.tracks_writes or not lanes.any():
            return
        a = addr[lanes].astype(np.uint64)
        idx = m.mem.locate(a, width)
        bad = m.mem.unwritten(a, idx, width) & (idx >= 0)
        if not bad.any():
            return
        c, w, l = np.nonzero(lanes)
        tag = f"{ins.pc:#06x}"
        rep = self.report
        bad = np.nonzero(bad)[0]
        keep = bad[:max(0, rep.max_records - len(rep.uninitialized))]  # records kept; the rest only counted
        rep.uninit_count += int(bad.size - keep.size)
        for i in keep:
            rep._add_uninit(UninitRead("global", int(a[i]), width,
                                       rep._access(self.name, self.program, m, int(c[i]), int(w[i]), int(l[i]), tag,
                                                   "read")))

    def global_write(self, m, ins, lanes: np.ndarray, addr: np.ndarray, width: int, data: np.ndarray,
                     src: int | None) -> None:
        """A store by ``lanes`` of ``width`` bytes at ``addr`` from ``data`` (A, W, 32, words), register
        ``src`` (its first register, None if not a register): recorded when it touches the watched range."""
        lo, hi = self.report.watch_global
        a = addr.astype(np.uint64)
        hit = lanes & (a < np.uint64(hi)) & (a + np.uint64(width) > np.uint64(lo))
        for c, w, l in zip(*np.nonzero(hit)):
            acc = self.report._access(self.name, self.program, m, int(c), int(w), int(l), f"{ins.pc:#06x}", "write")
            words = [int(x) for x in np.asarray(data[c, w, l]).reshape(-1)[: max(1, width // 4)]]
            self.report.writes.append({"access": acc, "addr": int(a[c, w, l]), "nbytes": width, "words": words,
                                       "register": None if src is None else f"R{src}"})

    def batch(self, m) -> None:
        """Take what one batch of CTAs (a Machine that has run) recorded."""
        rep, sm = self.report, m.smem
        self.rec.steps += m.steps
        self.rec.warp_instructions += m.warp_steps
        self._synccheck(m)
        if sm is None:
            return
        if rep.banks:
            for (tag, op), row in sm.ledger.rows.items():
                pc = int(tag, 16)
                key = (self.name, pc)
                site = rep._banks.get(key)
                if site is None:
                    ins = self.program.instructions.get(pc)
                    sass, f, ln = _where(ins)
                    site = rep._banks[key] = BankSite(self.name, pc, sass, f, ln, op)
                site.executions += row.instructions
                site.wavefronts += row.wavefronts
                site.ideal += row.ideal
        if rep.races:
            rep.race_count += sm.race_count
            for r in sm.races:
                if len(rep.race_sites) >= rep.max_records:
                    break
                f = rep._access(self.name, self.program, m, r.first.cta, r.first.warp, r.first.lane, r.first.tag, r.first.op)
                s = rep._access(self.name, self.program, m, r.second.cta, r.second.warp, r.second.lane, r.second.tag,
                                r.second.op)
                rep.race_sites.append(RaceSite(r.kind, r.addr, f, s))
        sync = getattr(m, "sync", None)
        if rep.races and sync is not None:
            for p in sync.protocol:
                if len(rep.protocol) >= rep.max_records:
                    break
                a = int(np.nonzero(m.cta_ids == p["cta"])[0][0])
                sites = tuple(rep._access(self.name, self.program, m, a, w, 0, f"{pc:#06x}", p["kind"])
                              for pc, w in p["sites"])
                rep.protocol.append(ProtocolIssue(p["kind"], p["message"], p["cta"], sites))
        if rep.initcheck:
            for (c, w, l, a, n, tag) in sm.uninit:
                rep._add_uninit(UninitRead("shared", a, n, rep._access(self.name, self.program, m, c, w, l, tag, "read")))
            rep.uninit_count += sm.uninit_count - len(sm.uninit)

    def _synccheck(self, m) -> None:
        """Take the synccheck findings of the batch ``m``."""
        sc = getattr(m, "synccheck", None)
        rep = self.report
        if sc is None or not rep.synccheck:
            return
        rep.sync_count += sc.count
        for f in sc.findings:
            if len(rep.sync_findings) >= rep.max_records:
                break
            op = "warpsync" if f["barrier"] < 0 else "barrier"
            first = f["lanes"][0] if f["lanes"] else 0
            acc = rep._access(self.name, self.program, m, f["a"], f["w"], first, f"{f['pc']:#06x}", op)
            sites = tuple(rep._access(self.name, self.program, m, f["a"], w, lane, f"{pc:#06x}", op)
                          for pc, w, lane in f["sites"])
            rep.sync_findings.append(SyncFinding(f["kind"], f["reason"], f["message"], acc, f["lanes"], f["arrived"],
                                                 f["barrier"], sites))

    def absorb(self, part: "Report") -> None:
        """Take what a batch run in another process recorded into ``part`` (a Report of the same launch, filled
        by :meth:`batch` there; flashsim.sass.spread), keeping what this process would have kept."""
        rep = self.report
        for rec in part.launches:
            self.rec.steps += rec.steps
            self.rec.warp_instructions += rec.warp_instructions
        for key, site in part._banks.items():
            mine = rep._banks.get(key)
            if mine is None:
                rep._banks[key] = dataclasses.replace(site)
            else:
                mine.executions += site.executions
                mine.wavefronts += site.wavefronts
                mine.ideal += site.ideal
        rep.race_count += part.race_count
        rep.race_sites.extend(part.race_sites[:max(0, rep.max_records - len(rep.race_sites))])
        rep.uninit_count += part.uninit_count
        rep.protocol.extend(part.protocol[:max(0, rep.max_records - len(rep.protocol))])
        rep.sync_count += part.sync_count
        rep.sync_findings.extend(part.sync_findings[:max(0, rep.max_records - len(rep.sync_findings))])
        rep.event_count += part.event_count
        rep.events.extend(part.events[:max(0, MAX_EVENTS - len(rep.events))])
        rep.uninitialized.extend(part.uninitialized[:max(0, rep.max_records - len(rep.uninitialized))])

    def end(self) -> None:
        delta = self.program.warp_hits - self.before
        for i in np.nonzero(delta)[0]:
            key = (self.name, int(i) * 16)
            self.report._executed[key] = self.report._executed.get(key, 0) + int(delta[i])
