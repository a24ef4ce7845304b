"""Diagnostics of planted bugs: flashsim's interpreter (races, faults, initcheck) against compute-sanitizer.

    python -m flashsim.gpu.check_diagnostics --out DIR [--sanitizer PATH] [--timeout S] [--dry-run] [--seeds N]
                                    [--cases NAME,NAME...]

Every case of CASES launches one kernel of gpu/kernels/planted.cu (a planted shared-memory race, memory
error or uninitialised read, or a control without it). For each case:

1. the interpreter: planted.cu is compiled once with ``flashsim.cuda.RawModule(code=...)`` and the case runs
   inside ``flashsim.cuda.checking(races=True, initcheck=True)`` under the default schedule and under
   ``--seeds`` seeded schedules (``ExecOptions(schedule_seed=s)``). Its verdict: a race (racecheck cases), a
   :class:`flashsim.errors.SimulatedFault` (memcheck cases) or an uninitialised read (initcheck cases), with
   the PCs, source lines, warps, lanes and addresses of both sides, and whether the verdict and the PCs are
   the same under every schedule;
2. on a GPU (not ``--dry-run``): ``compute-sanitizer --tool racecheck|memcheck|initcheck ... python -m
   gpu.check_diagnostics --launch CASE --cubin FILE``, where the child loads the SAME cubin bytes through
   cupy (``gpu.runtime.load_cubin``) and launches the case with the same inputs (cupy's memory pool off, so
   every array is its own cudaMalloc: exact bounds for memcheck, never-written memory for initcheck). The
   tool's output is parsed (:func:`parse_sanitizer`: hazard / error counts, and per report the PCs, source
   lines, threads and address it prints) and saved as ``DIR/<tool>_<case>.txt``;
3. compare: the verdicts (hazard or not / fault or not / uninitialised read or not), and that every PC and
   source line the tool names is among the interpreter's sides;
4. write ``DIR/diagnostics.md`` and ``DIR/diagnostics.json``, print one line per case and a summary.

Exit status: 0 when every case not marked informational agrees (with ``--dry-run``: when the interpreter
gives the expected verdict on each of them, under every schedule), 1 when one differs, 2 when the tool could
not run or gave no verdict.

Two facts of compiled code the interpreter models because these cases showed them: ptxas compiles
``__syncwarp()`` in converged straight-line code to a NOP whose offset it lists in the kernel's
EIATTR_COOP_GROUP_INSTR_OFFSETS (``ctrl_intra_warp``: the NOP orders the warp's accesses, as for
compute-sanitizer), and ``WARPSYNC Rn`` takes its lane mask from the register of the lanes that execute it
(``ctrl_intra_warp_loop_rev``: lane 0 has left the loop). A named barrier that covers only some warps is not
among the cases: the race shadow treats every completed barrier as ordering the whole CTA (it may miss a
race there, never invent one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

import flashsim.cuda as fc
from flashsim.errors import FlashsimError, LaunchError, SimulatedFault
from flashsim.gpu import runtime

FILE = "planted.cu"
REL_PATH = f"gpu/kernels/{FILE}"
TOOLS = ("racecheck", "memcheck", "initcheck")
REPO = Path(__file__).resolve().parent.parent
DEFAULT_SANITIZER = "/usr/local/cuda/bin/compute-sanitizer"

# options of every run of a tool; a case's own ``tool_args`` come after them (and the run is repeated without
# those when the tool rejects one: an older compute-sanitizer)
TOOL_ARGS = {
    "racecheck": ("--racecheck-report", "all", "--racecheck-detect-level", "info"),
    "memcheck": (),
    "initcheck": (),
}
COMMON_ARGS = ("--show-backtrace", "no", "--print-limit", "0")


# ----------------------------------------------------------------------------------------------------
# Arguments: one recipe, two backends (flashsim.cuda here, cupy in the child under the tool)
# ----------------------------------------------------------------------------------------------------


class FlashsimArrays:
    """Device arrays of the interpreter (flashsim.cuda)."""

    def __init__(self):
        self.fc = fc

    def array(self, host: np.ndarray):
        return self.fc.asarray(host)

    def zeros(self, n: int, dtype):
        return self.fc.zeros(n, dtype)

    def empty(self, n: int, dtype):
        return self.fc.empty(n, dtype)

    def partial(self, n: int, dtype, host_prefix: np.ndarray):
        """An empty array whose first len(host_prefix) elements the host writes (a partial copy)."""
        a = self.fc.empty(n, dtype)
        raw = np.ascontiguousarray(host_prefix, dtype=dtype).view(np.uint8)
        mem = self.fc.device_memory()
        mem.view(a.data.ptr, raw.size)[:] = raw
        mem.mark_written(a.data.ptr, raw.size)
        return a


class CupyArrays:
    """Device arrays on the GPU (cupy), each its own cudaMalloc."""

    def __init__(self, cupy):
        self.cp = cupy

    def array(self, host: np.ndarray):
        return self.cp.asarray(host)

    def zeros(self, n: int, dtype):
        return self.cp.zeros(n, dtype)

    def empty(self, n: int, dtype):
        return self.cp.empty(n, dtype)

    def partial(self, n: int, dtype, host_prefix: np.ndarray):
        a = self.cp.empty(n, dtype)
        a[: len(host_prefix)].set(np.ascontiguousarray(host_prefix, dtype=dtype))
        return a


WORDS = np.arange(4096, dtype=np.uint32)  # `in` of the race kernels: 16 KiB, lane-distinct values
FLOATS = np.arange(64, dtype=np.float32)


def _io(x):  # race_* / ctrl_*: (in: 4096 initialised words, out: 4096 words)
    return (x.array(WORDS), x.zeros(4096, np.uint32))


RECIPES: dict[str, Callable[[Any], tuple]] = {
    "io": _io,
    "oob_read": lambda x: (x.array(FLOATS), x.zeros(64, np.float32), np.int32(64)),
    "oob_write": lambda x: (x.zeros(64, np.float32), np.int32(64)),
    "misaligned_global": lambda x: (x.array((np.arange(1024) % 256).astype(np.uint8)), x.zeros(64, np.float64)),
    "shared_oob": lambda x: (x.zeros(64, np.uint32), np.int32(64)),
    "shared_misaligned": lambda x: (x.zeros(64, np.uint32), np.int32(2)),
    "init_empty": lambda x: (x.empty(64, np.float32), x.zeros(64, np.float32), np.int32(64)),
    "init_partial": lambda x: (x.partial(64, np.float32, FLOATS[:32]), x.zeros(64, np.float32), np.int32(64)),
    "init_full": lambda x: (x.array(FLOATS), x.zeros(64, np.float32), np.int32(64)),
    "init_shared": lambda x: (x.array(WORDS), x.zeros(64, np.uint32)),
}


# ----------------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    kernel: str
    tool: str  # racecheck / memcheck / initcheck
    expected: bool  # the tool's kind of bug is expected (hazard / fault / uninitialised read)
    what: str
    block: int = 64
    grid: int = 1
    shared: int = 0  # dynamic shared memory, bytes
    args: str = "io"  # a key of RECIPES
    side: str = ""  # the SIDE:<side> markers of planted.cu (planted races and bugs)
    fault: str = ""  # memcheck: the SimulatedFault kind expected
    space: str = ""  # initcheck: 'global' / 'shared'
    informational: bool = False  # recorded, not required to agree
    note: str = ""
    tool_args: tuple = ()  # extra options of the tool for this case

    def __post_init__(self):
        if self.tool not in TOOLS:
            raise ValueError(f"case {self.name}: tool {self.tool!r} is not one of {TOOLS}")
        if self.args not in RECIPES:
            raise ValueError(f"case {self.name}: args {self.args!r} is not one of {sorted(RECIPES)}")


_R, _M, _I = "racecheck", "memcheck", "initcheck"
_NOP_SYNCWARP = ("ptxas compiles this __syncwarp() to a NOP and lists the NOP's offset in the kernel's "
                 "EIATTR_COOP_GROUP_INSTR_OFFSETS (.nv.info attribute 0x28); the interpreter's race shadow takes that "
                 "NOP as the warp barrier it was")
_LANE0_MASK = ("lane 0 has left the loop: WARPSYNC R takes its mask from the executing lanes' register, not lane 0's "
               "stale value")

CASES: tuple[Case, ...] = (
    # ---------------------------------------------------------------- shared-memory races (racecheck)
    Case("race_double_buffer", "race_double_buffer", _R, True,
         "double-buffered loop without its __syncthreads: stage reuse (RAW and WAR)", side="double_buffer"),
    Case("ctrl_double_buffer", "ctrl_double_buffer", _R, False, "control: the double-buffered loop with the barrier"),
    Case("race_loop_war", "race_loop_war", _R, True,
         "loop without its trailing __syncthreads: the next store overwrites what the other warp reads (WAR)",
         side="loop_war"),
    Case("ctrl_loop_war", "ctrl_loop_war", _R, False, "control: the loop with the trailing barrier"),
    Case("race_cp_async_before_wait", "race_cp_async_before_wait", _R, True,
         "cp.async read by another warp after a __syncthreads but before the copying thread's wait",
         side="cp_async_before_wait"),
    Case("race_cp_async_no_barrier", "race_cp_async_no_barrier", _R, True,
         "cp.async waited for by the copying thread, no __syncthreads before another warp reads",
         side="cp_async_no_barrier"),
    Case("ctrl_cp_async", "ctrl_cp_async", _R, False, "control: cp.async, commit, wait_group 0, __syncthreads, read"),
    Case("race_early_tile", "race_early_tile", _R, True, "4 warps: each reads the next warp's tile before a barrier",
         block=128, side="early_tile"),
    Case("ctrl_early_tile", "ctrl_early_tile", _R, False, "control: the tiles with the barrier", block=128),
    Case("race_intra_warp", "race_intra_warp", _R, True, "one warp: lane i writes, lane i^1 reads, no __syncwarp",
         side="intra_warp", note="racecheck reports intra-warp hazards at WARNING level"),
    Case("ctrl_intra_warp", "ctrl_intra_warp", _R, False, "control: __syncwarp between (compiled to a NOP)",
         note=_NOP_SYNCWARP),
    Case("race_intra_warp_loop", "race_intra_warp_loop", _R, True,
         "one warp, divergent loop: lane i writes, lane i^1 reads, no __syncwarp", side="intra_warp_loop"),
    Case("ctrl_intra_warp_loop", "ctrl_intra_warp_loop", _R, False,
         "control: __syncwarp(__activemask()) in the divergent loop (VOTE.ANY + WARPSYNC R)"),
    Case("ctrl_intra_warp_loop_rev", "ctrl_intra_warp_loop_rev", _R, False,
         "control: the same loop with lane 0 leaving it first", note=_LANE0_MASK),
    Case("race_waw", "race_waw", _R, True, "WAW: two warps store to the same words", side="waw"),
    Case("race_war", "race_war", _R, True, "WAR: warp 1 reads what warp 0 then overwrites", side="war"),
    Case("race_ldmatrix", "race_ldmatrix", _R, True, "ldmatrix.x4 of a tile another warp stored, no barrier",
         side="ldmatrix"),
    Case("ctrl_ldmatrix", "ctrl_ldmatrix", _R, False, "control: __syncthreads before the ldmatrix"),
    Case("race_vec128", "race_vec128", _R, True, "128-bit store of one warp, 32-bit load of another, no barrier",
         side="vec128"),
    Case("ctrl_vec128", "ctrl_vec128", _R, False, "control: __syncthreads between"),
    Case("race_divergent", "race_divergent", _R, True,
         "divergent code: warp 0 writes in the if, warp 1 reads in the else", side="divergent"),
    Case("ctrl_divergent", "ctrl_divergent", _R, False, "control: write in an if, __syncthreads, read in an if"),
    Case("race_u16_same", "race_u16_same", _R, True, "16-bit stores of two warps to the same two bytes (WAW)",
         side="u16_same"),
    Case("ctrl_u16_distinct", "ctrl_u16_distinct", _R, False,
         "control: 16-bit stores of two warps to the two halves of one word (different bytes)"),
    Case("ctrl_u8_distinct", "ctrl_u8_distinct", _R, False,
         "control: 8-bit stores of four warps to the four bytes of one word", block=128),
    Case("race_reduce", "race_reduce", _R, True, "tree reduction without the __syncthreads in its loop", block=128,
         side="reduce"),
    Case("ctrl_reduce", "ctrl_reduce", _R, False, "control: the reduction with its barrier", block=128),
    Case("race_broadcast", "race_broadcast", _R, True, "thread 0 publishes a value, every thread reads it, no barrier",
         side="broadcast"),
    Case("ctrl_broadcast", "ctrl_broadcast", _R, False, "control: the broadcast with the barrier"),
    # ---------------------------------------------------------------- memory errors (memcheck)
    Case("mem_oob_read", "mem_oob_read", _M, True, "global read 4 elements past the end of a 64-float array",
         args="oob_read", side="oob_read", fault="out-of-bounds global address"),
    Case("mem_oob_write", "mem_oob_write", _M, True, "global write 3 elements past the end of a 64-float array",
         args="oob_write", side="oob_write", fault="out-of-bounds global address"),
    Case("mem_misaligned_global", "mem_misaligned_global", _M, True, "8-byte global load 4 bytes off alignment",
         block=32, args="misaligned_global", side="misaligned_global", fault="misaligned global address"),
    Case("mem_shared_oob", "mem_shared_oob", _M, True, "dynamic shared store 16 KiB past its 256 bytes",
         shared=256, args="shared_oob", side="shared_oob", fault="out-of-bounds shared address"),
    Case("mem_shared_misaligned", "mem_shared_misaligned", _M, True, "4-byte shared store 2 bytes off alignment",
         args="shared_misaligned", side="shared_misaligned", fault="misaligned shared address"),
    Case("ctrl_mem_inbounds", "ctrl_mem_inbounds", _M, False, "control: the copy in bounds", args="oob_read"),
    # ---------------------------------------------------------------- uninitialised reads (initcheck)
    Case("init_empty", "init_copy", _I, True, "read of an empty buffer nothing wrote", args="init_empty",
         side="init_copy", space="global"),
    Case("init_partial", "init_copy", _I, True, "read of a buffer whose first half the host wrote",
         args="init_partial", side="init_copy", space="global"),
    Case("ctrl_init_full", "init_copy", _I, False, "control: the host wrote the whole buffer", args="init_full",
         space="global"),
    Case("init_shared", "init_shared_uninit", _I, True, "warp 1 reads shared words nothing wrote",
         args="init_shared", side="init_shared", space="shared", informational=True,
         tool_args=("--initcheck-address-space", "all"),
         note="initcheck checks shared memory only with --initcheck-address-space shared/all"),
    Case("ctrl_init_shared", "ctrl_init_shared", _I, False, "control: every shared word is written first",
         args="init_shared", space="shared", tool_args=("--initcheck-address-space", "all")),
)

CASE_BY_NAME = {c.name: c for c in CASES}
assert len(CASE_BY_NAME) == len(CASES), "case names must be unique"


# ----------------------------------------------------------------------------------------------------
# Markers in planted.cu
# ----------------------------------------------------------------------------------------------------

_MARK_RE = re.compile(r"//\s*SIDE:(\w+):(first|second|both)\b")


def source_path() -> Path:
    return REPO / "gpu" / "kernels" / FILE


def markers(text: str | None = None) -> dict[str, dict[str, list[int]]]:
    """{side name: {'first'|'second'|'both': [line numbers]}} from the SIDE markers of planted.cu."""
    text = source_path().read_text(encoding="utf-8") if text is None else text
    out: dict[str, dict[str, list[int]]] = {}
    for i, line in enumerate(text.splitlines(), 1):
        for m in _MARK_RE.finditer(line):
            out.setdefault(m.group(1), {}).setdefault(m.group(2), []).append(i)
    return out


def marked_lines(side: str, marks: dict | None = None) -> set[int]:
    d = (markers() if marks is None else marks).get(side, {})
    return {ln for v in d.values() for ln in v}


# ----------------------------------------------------------------------------------------------------
# The interpreter
# ----------------------------------------------------------------------------------------------------


def compile_module():
    """planted.cu as a ``flashsim.cuda.RawModule`` (``.cubin`` holds the bytes the GPU loads too)."""
    code = f'#line 1 "{REL_PATH}"\n' + source_path().read_text(encoding="utf-8")
    return fc.RawModule(code=code)


def _base(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def _side(a) -> dict:
    return {"op": a.op, "pc": a.pc, "sass": a.sass, "file": _base(a.file), "line": a.line, "cta": a.cta,
            "warp": a.warp, "lane": a.lane, "thread": a.warp * 32 + a.lane}


def run_once(module, case: Case, seed: int | None) -> dict:
    """One interpreted launch of ``case`` under the schedule ``seed`` (None: the default order)."""
    args = RECIPES[case.args](FlashsimArrays())
    out: dict = {"seed": seed, "verdict": None, "error": "", "races": [], "race_count": 0, "pairs": [],
                 "fault": None, "uninit": [], "uninit_count": 0}
    opts = fc.ExecOptions(schedule_seed=seed)
    try:
        with fc.checking(banks=False, races=True, initcheck=True, max_records=20000) as rep:
            try:
                module.get_function(case.kernel)((case.grid,), (case.block,), args, shared_mem=case.shared,
                                                 exec_options=opts)
            except SimulatedFault as exc:
                out["fault"] = {"kind": exc.kind, "pc": getattr(exc, "pc", None), "sass": getattr(exc, "sass", ""),
                                "file": _base(exc.line[0]) if getattr(exc, "line", None) else "",
                                "line": exc.line[1] if getattr(exc, "line", None) else None, "cta": exc.cta,
                                "warp": exc.warp, "lane": exc.lane, "thread": exc.warp * 32 + exc.lane,
                                "addr": exc.addr, "message": str(exc)}
    except (FlashsimError, NotImplementedError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    # races, one entry per (kind, first pc, second pc) with a count and the first example's address
    seen: dict = {}
    for r in rep.race_sites:
        key = (r.kind, r.first.pc, r.second.pc)
        if key in seen:
            seen[key]["count"] += 1
            continue
        seen[key] = {"kind": r.kind, "addr": r.addr, "first": _side(r.first), "second": _side(r.second), "count": 1}
    out["races"] = list(seen.values())
    out["race_count"] = rep.race_count
    out["pairs"] = sorted(sorted(p) for _, p in rep.race_pairs())
    useen: dict = {}
    for u in rep.uninitialized:
        key = (u.space, u.access.pc)
        if key in useen:
            useen[key]["count"] += 1
            continue
        useen[key] = dict(_side(u.access), space=u.space, addr=u.addr, nbytes=u.nbytes, count=1)
    out["uninit"] = list(useen.values())
    out["uninit_count"] = rep.uninit_count
    if case.tool == "racecheck":
        out["verdict"] = rep.race_count > 0
    elif case.tool == "memcheck":
        out["verdict"] = out["fault"] is not None
    else:
        out["verdict"] = rep.uninit_count > 0
    return out


def _signature(case: Case, r: dict):
    if r["error"]:
        return ("error", r["error"].split(":", 1)[0])
    if case.tool == "racecheck":
        return (r["verdict"], tuple(tuple(p) for p in r["pairs"]))
    if case.tool == "memcheck":
        f = r["fault"]
        return (r["verdict"], None if f is None else (f["kind"], f["pc"]))
    return (r["verdict"], tuple(sorted({(u["space"], u["pc"]) for u in r["uninit"]})))


def interpret(module, case: Case, seeds: int) -> dict:
    """The case under the default schedule and ``seeds`` seeded ones: the default run's findings, the verdict
    of every schedule, and whether verdict and PCs were the same under all of them."""
    runs = [run_once(module, case, s) for s in [None, *range(1, seeds + 1)]]
    first = runs[0]
    sigs = [_signature(case, r) for r in runs]
    res = dict(first)
    res["stable"] = all(s == sigs[0] for s in sigs)
    res["schedules"] = [{"seed": r["seed"], "verdict": r["verdict"], "error": r["error"],
                         "signature": repr(_signature(case, r))} for r in runs]
    res["pcs"] = sorted(_flashsim_pcs(case, first))
    res["lines"] = sorted(_flashsim_lines(case, first))
    return res


def _flashsim_pcs(case: Case, r: dict) -> set[int]:
    if case.tool == "racecheck":
        return {s[k]["pc"] for s in r["races"] for k in ("first", "second")}
    if case.tool == "memcheck":
        return set() if r["fault"] is None or r["fault"]["pc"] is None else {r["fault"]["pc"]}
    return {u["pc"] for u in r["uninit"]}


def _flashsim_lines(case: Case, r: dict) -> set[int]:
    if case.tool == "racecheck":
        return {s[k]["line"] for s in r["races"] for k in ("first", "second") if s[k]["line"] is not None}
    if case.tool == "memcheck":
        return set() if r["fault"] is None or r["fault"]["line"] is None else {r["fault"]["line"]}
    return {u["line"] for u in r["uninit"] if u["line"] is not None}


def first_report(case: Case, r: dict) -> str:
    """The interpreter's first finding of the case's kind, both sides named."""
    if r.get("error"):
        return r["error"].splitlines()[0]
    if case.tool == "racecheck" and r["races"]:
        s = r["races"][0]
        f, g = s["first"], s["second"]
        return (f"{s['kind']} at shared {s['addr']:#x}: {f['op']} pc={f['pc']:#06x} `{f['sass']}` line {f['line']} "
                f"warp={f['warp']} lane={f['lane']} / {g['op']} pc={g['pc']:#06x} `{g['sass']}` line {g['line']} "
                f"warp={g['warp']} lane={g['lane']}")
    if case.tool == "memcheck" and r["fault"]:
        f = r["fault"]
        return (f"{f['kind']} at pc={f['pc']:#06x} `{f['sass']}` line {f['line']} warp={f['warp']} lane={f['lane']} "
                f"addr={f['addr']:#x}")
    if case.tool == "initcheck" and r["uninit"]:
        u = r["uninit"][0]
        return (f"uninitialised {u['space']} read of {u['nbytes']} bytes at {u['addr']:#x}: pc={u['pc']:#06x} "
                f"`{u['sass']}` line {u['line']} warp={u['warp']} lane={u['lane']}")
    return ""


# ----------------------------------------------------------------------------------------------------
# compute-sanitizer's output
# ----------------------------------------------------------------------------------------------------


@dataclass
class ToolSide:
    """One location a report names: access kind, PC (offset in the kernel), source file and line, thread."""

    access: str = ""
    pc: int | None = None
    file: str = ""
    line: int | None = None
    thread: tuple | None = None
    block: tuple | None = None
    hazards: int | None = None


@dataclass
class ToolReport:
    kind: str  # race (analysis) / hazard / access (memcheck) / hardware / uninit
    severity: str = ""
    title: str = ""
    sides: list = field(default_factory=list)
    address: int | None = None
    space: str = ""  # global / shared / local
    size: int | None = None
    problem: str = ""  # memcheck: 'out of bounds' / 'misaligned'; hazard: RAW/WAR/WAW
    detail: str = ""


@dataclass
class ToolResult:
    tool: str
    verdict: bool | None  # None: the output holds no verdict
    errors: int | None  # ERROR SUMMARY / RACECHECK SUMMARY count
    reports: list = field(default_factory=list)
    message: str = ""

    @property
    def pcs(self) -> set[int]:
        return {s.pc for r in self.reports for s in r.sides if s.pc is not None}

    @property
    def lines(self) -> set[tuple[str, int]]:
        return {(s.file, s.line) for r in self.reports for s in r.sides if s.line is not None}

    @property
    def threads(self) -> set[int]:
        return {s.thread[0] for r in self.reports for s in r.sides if s.thread}


_PREFIX_RE = re.compile(r"^=+ ?")
_TUPLE_RE = r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)"
_RACE_RE = re.compile(r"^(?:(\w+):\s*)?Race reported between (\w+) access at (.*?)\s*$", re.IGNORECASE)
_AND_RE = re.compile(r"^and (\w+) access at (.*?)\s*$", re.IGNORECASE)
_HAZARD_RE = re.compile(r"^(?:(\w+):\s*)?Potential (RAW|WAR|WAW) hazard detected at (__\w+__)\s+(0x[0-9a-fA-F]+)"
                        r"(?: in block " + _TUPLE_RE + r")?(.*)$", re.IGNORECASE)
_HAZ_SIDE_RE = re.compile(r"^(Read|Write)\s+Thread\s+" + _TUPLE_RE + r"\s+at\s+(.*?)\s*$", re.IGNORECASE)
_ACCESS_RE = re.compile(r"^Invalid (__\w+__) (read|write|atomic\w*)\w* of size (\d+) bytes?", re.IGNORECASE)
_UNINIT_RE = re.compile(r"^Uninitiali[sz]ed (__\w+__) memory read of size (\d+) bytes?", re.IGNORECASE)
_AT_RE = re.compile(r"^at (.*?)\s*$")
_BY_RE = re.compile(r"^by thread " + _TUPLE_RE + r"(?: in block " + _TUPLE_RE + r")?", re.IGNORECASE)
_ADDR_RE = re.compile(r"^(?:Address|Access at) (0x[0-9a-fA-F]+)\s*(.*)$", re.IGNORECASE)
_HW_RE = re.compile(r"^(Misaligned (?:address|shared or local address)|Out-of-range (?:shared or local address|"
                    r"address)|Illegal address|Warp (?:Illegal|Misaligned|Out-of-range)[\w -]*|"
                    r"Malformed instruction|Illegal instruction)\b", re.IGNORECASE)
_ERROR_SUMMARY_RE = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?", re.IGNORECASE)
_RACE_SUMMARY_RE = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed(?:\s*\((\d+)\s+errors?,\s*(\d+)\s+"
                              r"warnings?\))?", re.IGNORECASE)
_HAZARDS_RE = re.compile(r"\[(\d+) hazards?\]\s*$")
_FILE_LINE_RE = re.compile(r"(?:^|\sin\s)(\S+?):(\d+)(?=$|[\s:(\[])")
_PC_RES = (re.compile(r"\+\s*0x([0-9a-fA-F]+)"), re.compile(r"\):0x([0-9a-fA-F]+)"), re.compile(r"^0x([0-9a-fA-F]+)\b"))


def parse_location(text: str) -> tuple[int | None, str, int | None]:
    """(PC, file, line) from the location compute-sanitizer prints after 'at': 'kernel(int *)+0x90 in f.cu:13',
    'kernel():0x160 in f.cu:6', '0x1b8 in kernel(float *)' or '0x148 in /path/f.cu:12:kernel(float*)'."""
    text = _HAZARDS_RE.sub("", text).strip()
    pc = None
    for rx in _PC_RES:
        m = rx.search(text)
        if m:
            pc = int(m.group(1), 16)
            break
    file, line = "", None
    for m in _FILE_LINE_RE.finditer(text):
        cand = m.group(1)
        if not cand.startswith("0x") and not cand.endswith(")"):
            file, line = _base(cand), int(m.group(2))
    return pc, file, line


def _side_at(access: str, loc: str, thread=None, block=None) -> ToolSide:
    pc, file, line = parse_location(loc)
    m = _HAZARDS_RE.search(loc)
    return ToolSide(access.lower(), pc, file, line, thread, block, int(m.group(1)) if m else None)


def _t(groups) -> tuple[int, int, int]:
    return tuple(int(g) for g in groups)  # type: ignore[return-value]


def parse_sanitizer(tool: str, text: str) -> ToolResult:
    """Reports, counts and the verdict of compute-sanitizer's text output for ``tool``. Lines may carry the
    '========= ' prefix. Unknown lines are ignored; a missing summary gives ``verdict=None``."""
    reports: list[ToolReport] = []
    errors = None
    race_summary = None
    cur: ToolReport | None = None
    for raw in text.splitlines():
        line = _PREFIX_RE.sub("", raw.rstrip()).strip()
        if not line:
            cur = None
            continue
        m = _RACE_SUMMARY_RE.search(line)
        if m:
            race_summary = int(m.group(1))
            cur = None
            continue
        m = _ERROR_SUMMARY_RE.search(line)
        if m:
            errors = int(m.group(1))
            cur = None
            continue
        m = _RACE_RE.match(line)
        if m:
            cur = ToolReport("race", (m.group(1) or "").upper(), line, [_side_at(m.group(2), m.group(3))])
            reports.append(cur)
            continue
        m = _HAZARD_RE.match(line)
        if m:
            cur = ToolReport("hazard", (m.group(1) or "").upper(), line, address=int(m.group(4), 16),
                             space=m.group(3).strip("_"), problem=m.group(2).upper(), detail=m.group(8).strip())
            reports.append(cur)
            continue
        m = _ACCESS_RE.match(line)
        if m:
            cur = ToolReport("access", "ERROR", line, space=m.group(1).strip("_"), size=int(m.group(3)))
            cur.sides.append(ToolSide(m.group(2).lower()))
            reports.append(cur)
            continue
        m = _UNINIT_RE.match(line)
        if m:
            cur = ToolReport("uninit", "ERROR", line, space=m.group(1).strip("_"), size=int(m.group(2)))
            cur.sides.append(ToolSide("read"))
            reports.append(cur)
            continue
        m = _HW_RE.match(line)
        if m and tool == "memcheck":
            cur = ToolReport("hardware", "ERROR", line, problem=m.group(1))
            cur.sides.append(ToolSide(""))
            reports.append(cur)
            continue
        if cur is None:
            continue
        if cur.kind == "race":
            m = _AND_RE.match(line)
            if m:
                cur.sides.append(_side_at(m.group(1), m.group(2)))
            continue
        if cur.kind == "hazard":
            m = _HAZ_SIDE_RE.match(line)
            if m:
                cur.sides.append(_side_at(m.group(1), m.group(5), _t(m.group(2, 3, 4)), None))
            elif "invalid memcpy_async" in line.lower():
                cur.detail = (cur.detail + " " + line).strip()
            continue
        side = cur.sides[-1] if cur.sides else None
        m = _AT_RE.match(line)
        if m and side is not None and side.pc is None and side.line is None:
            side.pc, side.file, side.line = parse_location(m.group(1))
            continue
        m = _BY_RE.match(line)
        if m and side is not None:
            side.thread = _t(m.group(1, 2, 3))
            if m.group(4) is not None:
                side.block = _t(m.group(4, 5, 6))
            continue
        m = _ADDR_RE.match(line)
        if m:
            cur.address = int(m.group(1), 16)
            rest = m.group(2).lower()
            cur.problem = "misaligned" if "misaligned" in rest else "out of bounds" if "out of bounds" in rest else \
                cur.problem
            cur.detail = m.group(2).strip()
            continue
        if cur.kind == "access" and line.lower().startswith("and is "):
            cur.detail = (cur.detail + " " + line).strip()
    if tool == "racecheck":
        found = any(r.kind in ("race", "hazard") for r in reports)
        count = race_summary
        if count is None and errors is not None:
            count = errors
        verdict = (count > 0 or found) if count is not None else (True if found else None)
        return ToolResult(tool, verdict, count, reports, "" if verdict is not None else "no RACECHECK/ERROR SUMMARY")
    kinds = ("access", "hardware") if tool == "memcheck" else ("uninit",)
    found = any(r.kind in kinds for r in reports)
    if found:
        verdict: bool | None = True
    elif errors is not None:
        # an error count without a parsed report (e.g. only a CUDA API error after an unparsed report)
        verdict = False if errors == 0 else None
    else:
        verdict = None
    msg = "" if verdict is not None else ("ERROR SUMMARY counts errors, none of them an access/initcheck report"
                                          if errors else "no ERROR SUMMARY")
    return ToolResult(tool, verdict, errors, reports, msg)


# ----------------------------------------------------------------------------------------------------
# Running the tool
# ----------------------------------------------------------------------------------------------------


# what the child prints after its launch: the parent takes a tool's verdict only from a run that launched
LAUNCHED_MARK = "check_diagnostics: launched"
FAILED_MARK = "check_diagnostics: launch failed:"


def child_ran(case: Case, text: str) -> bool:
    """Did the child launch the case under the tool (a failed launch counts for memcheck, where the fault
    makes the launch fail)?"""
    if f"{LAUNCHED_MARK} {case.name}" in text:
        return True
    return case.tool == "memcheck" and FAILED_MARK in text


class ToolUnavailable(FlashsimError):
    """compute-sanitizer cannot run at all (missing binary); the message says what to do."""


def find_sanitizer(given: str | None) -> str:
    if given:
        return shutil.which(given) or given
    return shutil.which("compute-sanitizer") or DEFAULT_SANITIZER


_OPTION_ERROR_RE = re.compile(r"(unrecogni[sz]ed|unknown|invalid) (option|argument|value)", re.IGNORECASE)


def tool_command(sanitizer: str, case: Case, cubin: Path, *, extra: bool = True) -> list[str]:
    return [sanitizer, "--tool", case.tool, *COMMON_ARGS, *TOOL_ARGS[case.tool], *(case.tool_args if extra else ()),
            sys.executable, "-m", "flashsim.gpu.check_diagnostics", "--launch", case.name, "--cubin", str(cubin)]


def _kill_group(proc) -> None:
    """End the tool and the child it started (their own process group, made for this run)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def run_tool(sanitizer: str, case: Case, cubin: Path, timeout: float) -> tuple[ToolResult, str]:
    """Run the case under the tool; (parsed result, raw text with the command line and exit status)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    texts = []
    for extra in ((True, False) if case.tool_args else (True,)):
        cmd = tool_command(sanitizer, case, cubin, extra=extra)
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
                                    env=env, start_new_session=True)
        except FileNotFoundError:
            raise ToolUnavailable(f"{sanitizer} not found: install the CUDA toolkit (compute-sanitizer) or pass "
                                  "--sanitizer PATH") from None
        except PermissionError as exc:
            raise ToolUnavailable(f"{sanitizer} cannot be run: {exc}") from None
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            texts.append(f"$ {' '.join(cmd)}\ntimed out after {timeout:.0f} s\n{stdout}\n{stderr}")
            return ToolResult(case.tool, None, None, [], f"timed out after {timeout:.0f} s"), "\n".join(texts)
        text = f"$ {' '.join(cmd)}\n(exit {proc.returncode})\n{stdout}\n{stderr}"
        texts.append(text)
        res = parse_sanitizer(case.tool, stdout + "\n" + stderr)
        if not child_ran(case, stdout + stderr):
            if extra and case.tool_args and _OPTION_ERROR_RE.search(stdout + stderr):
                continue  # the tool rejected the case's extra option: once more without it
            res = ToolResult(case.tool, None, res.errors, res.reports, "the kernel was not launched under the tool")
        if res.verdict is None and not res.message:
            res.message = f"no verdict (exit {proc.returncode})"
        if res.verdict is None:
            tail = (stdout + stderr).strip().splitlines()[-3:]
            res.message += ": " + " | ".join(tail) if tail else ""
        return res, "\n".join(texts)
    return ToolResult(case.tool, None, None, [], "the tool rejected its options"), "\n".join(texts)


def launch_case(name: str, cubin_path: str) -> int:
    """The child under the tool: load the cubin with cupy and launch the case once."""
    case = CASE_BY_NAME.get(name)
    if case is None:
        print(f"check_diagnostics: no case {name!r} (cases: {', '.join(CASE_BY_NAME)})", file=sys.stderr)
        return 2
    cupy = runtime.require_gpu()
    cupy.cuda.set_allocator(None)  # no pool: every array is its own cudaMalloc (exact bounds, fresh memory)
    mod = runtime.load_cubin(Path(cubin_path).read_bytes())
    kernel = mod.get_function(case.kernel)
    args = RECIPES[case.args](CupyArrays(cupy))
    try:
        runtime.launch(kernel, case.grid, case.block, args, shared_mem=case.shared)
    except LaunchError as exc:  # expected for the memcheck cases
        print(f"{FAILED_MARK} {exc}", flush=True)
        return 3
    print(f"{LAUNCHED_MARK} {case.name}", flush=True)
    return 0


# ----------------------------------------------------------------------------------------------------
# Comparing and reporting
# ----------------------------------------------------------------------------------------------------


_WORD = {"racecheck": "hazard", "memcheck": "fault", "initcheck": "uninit"}


def compare(case: Case, sim: dict, tool: ToolResult | None) -> dict:
    """Verdicts, and whether every PC and source line the tool names is among the interpreter's."""
    out: dict = {"verdict_agree": None, "pcs_covered": None, "lines_covered": None, "missing_pcs": [],
                 "missing_lines": [], "kind_agree": None}
    if tool is None or tool.verdict is None or sim["error"]:
        return out
    out["verdict_agree"] = tool.verdict == sim["verdict"]
    tpcs, tlines = tool.pcs, tool.lines
    if tpcs:
        miss = sorted(tpcs - set(sim["pcs"]))
        out["pcs_covered"], out["missing_pcs"] = not miss, miss
    if tlines:
        base = _base(FILE)
        miss_l = sorted(ln for f, ln in tlines if (f in ("", base)) and ln not in set(sim["lines"]))
        out["lines_covered"], out["missing_lines"] = not miss_l, miss_l
    if case.tool == "memcheck" and tool.verdict and sim["fault"]:
        acc = [r for r in tool.reports if r.kind == "access"]
        if acc:
            want_space = "shared" if "shared" in sim["fault"]["kind"] else "global"
            want_prob = "misaligned" if "misaligned" in sim["fault"]["kind"] else "out of bounds"
            out["kind_agree"] = all(r.space == want_space and r.problem in (want_prob, "") for r in acc)
            out["fault_thread_seen"] = sim["fault"]["thread"] in tool.threads if tool.threads else None
    return out


@dataclass
class Row:
    case: str
    kernel: str
    what: str
    tool: str
    expected: bool
    informational: bool
    note: str
    flashsim: dict
    sanitizer: dict | None
    comparison: dict
    status: str
    first: str


def status_of(case: Case, sim: dict, tool: ToolResult | None, cmp: dict, dry_run: bool, tool_error: str) -> str:
    if sim["error"]:
        st = "flashsim error"
    elif dry_run:
        st = "flashsim only"
    elif tool_error:
        st = "tool did not run"
    elif tool is None or tool.verdict is None:
        st = "no tool verdict"
    elif not cmp["verdict_agree"]:
        st = "DIFFER (verdict)"
    elif cmp["pcs_covered"] is False or cmp["lines_covered"] is False:
        st = "DIFFER (pcs/lines)"
    elif cmp["kind_agree"] is False:
        st = "DIFFER (fault kind)"
    else:
        st = "agree"
    notes = []
    if not sim["error"] and sim["verdict"] != case.expected:
        notes.append("flashsim differs from the expected answer")
    if not sim["stable"]:
        notes.append("flashsim's answer depends on the schedule")
    return st + (f" ({'; '.join(notes)})" if notes else "")


def _tool_dict(tool: ToolResult | None) -> dict | None:
    if tool is None:
        return None
    d = asdict(tool)
    d["reports"] = d["reports"][:50]  # the full text is in the raw output file
    d["report_count"] = len(tool.reports)
    d["pcs"] = sorted(tool.pcs)
    d["lines"] = sorted(ln for _, ln in tool.lines)
    return d


def _tool_summary(tool: ToolResult | None, case: Case) -> str:
    return "-" if tool is None else _tool_summary_from_dict(_tool_dict(tool), case)


def _sim_summary(sim: dict, case: Case) -> str:
    if sim["error"]:
        return "error: " + sim["error"].splitlines()[0][:160]
    if not sim["verdict"]:
        return "none"
    word = _WORD[case.tool]
    if case.tool == "racecheck":
        kinds = sorted({r["kind"] for r in sim["races"]})
        return (f"{word} ({sim['race_count']}x {'/'.join(kinds)}; pcs " + ",".join(f"{p:#x}" for p in sim["pcs"][:6])
                + (" ..." if len(sim["pcs"]) > 6 else "") + f"; lines {','.join(map(str, sim['lines']))})")
    if case.tool == "memcheck":
        f = sim["fault"]
        return f"{word} ({f['kind']}; pc {f['pc']:#x}; line {f['line']})"
    return (f"{word} ({sim['uninit_count']}x; pcs " + ",".join(f"{p:#x}" for p in sim["pcs"]) +
            f"; lines {','.join(map(str, sim['lines']))})")


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def write_report(out: Path, rows: list[Row], header: list[str], summary: str) -> None:
    lines = ["# Planted bugs: flashsim's diagnostics vs compute-sanitizer", "", *header, "",
             "| case | what | tool | expected | tool verdict | flashsim verdict | same under all schedules | status | "
             "first flashsim report (both sides) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        case = CASE_BY_NAME[r.case]
        name = r.case + (" (info)" if r.informational else "")
        what = r.what + (f" — {r.note}" if r.note else "")
        tsum = "-" if r.sanitizer is None else _tool_summary_from_dict(r.sanitizer, case)
        lines.append(f"| {_md(name)} | {_md(what)} | {r.tool} | {_WORD[r.tool] if r.expected else 'none'} | "
                     f"{_md(tsum)} | {_md(_sim_summary(r.flashsim, case))} | "
                     f"{'yes' if r.flashsim['stable'] else 'NO'} | {_md(r.status)} | {_md(r.first)} |")
    lines += ["", summary, ""]
    (out / "diagnostics.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "diagnostics.json").write_text(json.dumps([asdict(r) for r in rows], indent=1, default=str),
                                          encoding="utf-8")


def _tool_summary_from_dict(d: dict, case: Case) -> str:
    if d["verdict"] is None:
        return f"no verdict ({d['message']})" if d.get("message") else "no verdict"
    word = _WORD[case.tool] if d["verdict"] else "none"
    extra = []
    if d.get("errors") is not None:
        extra.append(f"{d['errors']} {'hazards' if case.tool == 'racecheck' else 'errors'}")
    if d.get("pcs"):
        extra.append("pcs " + ",".join(f"{p:#x}" for p in d["pcs"][:6]) + (" ..." if len(d["pcs"]) > 6 else ""))
    if d.get("lines"):
        extra.append("lines " + ",".join(str(ln) for ln in sorted(set(d["lines"]))[:6]))
    return word + (f" ({'; '.join(extra)})" if extra else "")


def select_cases(spec: str | None) -> list[Case]:
    if not spec:
        return list(CASES)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in CASE_BY_NAME]
    if bad:
        raise SystemExit(f"check_diagnostics: unknown case(s) {', '.join(bad)} (cases: {', '.join(CASE_BY_NAME)})")
    return [CASE_BY_NAME[n] for n in names]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="output folder")
    ap.add_argument("--sanitizer", default=None,
                    help=f"compute-sanitizer binary (default: on PATH, else {DEFAULT_SANITIZER})")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per tool run (default 300)")
    ap.add_argument("--dry-run", action="store_true", help="the interpreter only (no GPU)")
    ap.add_argument("--seeds", type=int, default=3, help="seeded schedules besides the default one (default 3)")
    ap.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                    help="tool runs at once (each its own process on the GPU; default min(8, cores))")
    ap.add_argument("--launch", help=argparse.SUPPRESS)
    ap.add_argument("--cubin", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.launch:
        if not args.cubin:
            ap.error("--launch needs --cubin FILE")
        return launch_case(args.launch, args.cubin)
    if args.out is None:
        ap.error("--out DIR is required")
    if args.seeds < 0:
        ap.error(f"--seeds must be >= 0, got {args.seeds}")
    if args.timeout <= 0:
        ap.error(f"--timeout must be positive, got {args.timeout}")
    cases = select_cases(args.cases)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    module = compile_module()
    cubin = out / "planted.cubin"
    cubin.write_bytes(module.cubin)
    sanitizer = find_sanitizer(args.sanitizer)
    marks = markers()
    rows: list[Row] = []
    tool_error = ""
    sims = {}
    for case in cases:
        sim = interpret(module, case, args.seeds)
        if case.side:
            want = marked_lines(case.side, marks)
            sim["marked_lines"] = sorted(want)
            sim["on_marked_lines"] = bool(sim["lines"]) and set(sim["lines"]) <= want
        sims[case.name] = sim
    tools: dict = {}
    if not args.dry_run:
        from concurrent.futures import ThreadPoolExecutor

        def one(case):
            try:
                tool, text = run_tool(sanitizer, case, cubin, args.timeout)
            except ToolUnavailable as exc:
                return case.name, None, str(exc)
            (out / f"{case.tool}_{case.name}.txt").write_text(text, encoding="utf-8")
            return case.name, tool, ""

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for name, tool, err in pool.map(one, cases):
                tools[name] = tool
                if err and not tool_error:
                    tool_error = err
    for case in cases:
        sim, tool = sims[case.name], tools.get(case.name)
        cmp = compare(case, sim, tool)
        st = status_of(case, sim, tool, cmp, args.dry_run, tool_error)
        rows.append(Row(case.name, case.kernel, case.what, case.tool, case.expected, case.informational, case.note,
                        sim, _tool_dict(tool), cmp, st, first_report(case, sim)))
        print(f"{case.name:<28} {case.tool:<9} expected {_WORD[case.tool] if case.expected else 'none':<6} "
              f"tool {_tool_summary(tool, case)[:40]:<40} flashsim {_sim_summary(sim, case)[:60]:<60} {st}")
    required = [r for r in rows if not r.informational]
    agree = sum(r.status.startswith("agree") for r in required)
    differ = sum(r.status.startswith("DIFFER") for r in required)
    no_verdict = sum(r.status.startswith(("no tool verdict", "tool did not run")) for r in required)
    sim_ok = [r for r in required if not r.flashsim["error"] and r.flashsim["verdict"] == r.expected
              and r.flashsim["stable"]]
    summary = (f"check_diagnostics: {len(rows)} cases ({len(required)} required): "
               + ("dry run, " if args.dry_run else
                  f"{agree} agree, {differ} differ, {no_verdict} without a tool verdict, ")
               + f"flashsim as expected and schedule-independent on {len(sim_ok)}/{len(required)} required cases")
    if tool_error:
        summary += f" (error: {tool_error})"
    header = [f"- date: {time.strftime('%Y-%m-%d %H:%M:%S')}; source: `{REL_PATH}`; cubin sha256 `{module.sha256}`",
              f"- interpreter: `flashsim.cuda.checking(races=True, initcheck=True)`, default schedule + {args.seeds} "
              "seeded schedules",
              ("- tool: not run (--dry-run)" if args.dry_run else
               f"- tool: `{sanitizer} --tool <tool> {' '.join(COMMON_ARGS)}` (racecheck: "
               f"`{' '.join(TOOL_ARGS['racecheck'])}`); raw output in `<tool>_<case>.txt`"),
              "- informational cases (info): recorded, agreement not required; see the note after their description.",
              "- status `DIFFER (pcs/lines)`: the tool names a PC or source line that none of flashsim's sides has."]
    write_report(out, rows, header, summary)
    print(summary)
    if tool_error:
        print(f"check_diagnostics: error: {tool_error}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0 if len(sim_ok) == len(required) else 1
    if no_verdict:
        return 2
    return 0 if differ == 0 and agree == len(required) and len(sim_ok) == len(required) else 1


if __name__ == "__main__":
    sys.exit(main())
