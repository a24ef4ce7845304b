"""Traces of interpreted kernels at any instruction, into the trace container (:mod:`flashsim.trace.container`).

    import flashsim.cuda as fc
    from flashsim.sass.tracing import TraceSpec

    spec = TraceSpec("run.fstrace", at=["kernel.cu:188", 0x1a0], regs=["R0", "R4-R7"], ctas=[0], warps=range(2))
    with fc.checking(trace=spec):
        kernel(grid, block, args)          # every interpreted launch in the block is traced
    # run.fstrace now exists (published when the block exits; on an exception nothing is written)

    flashsim trace diff before.fstrace after.fstrace

What a trace holds
------------------
One event per warp and execution of a traced instruction (a warp with at least one lane at the PC), keyed
by (grid-linear CTA index, warp index in the CTA) with ``seq`` counting that warp's events in execution order
(over every traced launch of the block, in launch order). Its registers are a (32, n + 1) uint32 table: the
registers the spec names (``regs``: R, UR (the warp's value in every lane) and P (0/1) registers), read
``before`` or ``after`` the instruction executes, then the column ``lanes``: per lane bit 0 = the lane is at
the instruction, bit 1 = its guard predicate was true (the lane executes it). Lanes not at the instruction
and lanes the ``lanes`` filter leaves out are all zero.

With ``smem=True`` every shared-memory instruction the traced warps execute (LDS/STS of every width,
LDSM/STSM, LDGSTS, generic LD/ST that hit the shared window, ATOMS and generic atomics on shared memory) is
an event too, carrying one shared-memory record per lane access (``SMEM_DTYPE``: lane, addr (byte offset
in the CTA's window, the reserved 1 KiB included), nbytes (16 for an ldmatrix/stmatrix row), store (0 load,
1 store or cp.async's shared write, 2 atomic read-modify-write) and wavefront: the wavefront of the
instruction that serves the lane, counted by :mod:`flashsim.smem`'s sm_90 rules (phases, then the k-th
distinct unit of a bank group in lane order; the highest wavefront + 1 of an event is the instruction's
wavefronts). Atomics carry wavefront 0xFFFF (their per-lane order is not recorded). Such an event's registers are the
``lanes`` column only, unless its PC is also in ``at``. A warp instruction whose lanes access no shared
memory (all guards false, a generic access that went to global memory) makes no event unless traced.

The tag of an instruction is ``pc=0x01a0 kernel.cu:188 LDS R7, [R4]`` (kernel name first when the block
traced more than one kernel); the meta holds, per tag, the kernel, PC, SASS, file, line and register names
(``tag_info``), per traced program its cubin's and code's sha256 and its instruction listing (which the diff
aligns), per launch its grid and block, and the spec.

``flashsim trace diff`` compares two such traces (:mod:`flashsim.sass.tracediff`); an FS_TRACE build run
in the interpreter is recorded by :func:`flashsim.session.run_case` (backend 'interp').
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from flashsim.errors import bad_argument
from flashsim.sass.machine import RUN

__all__ = ["KIND", "SMEM_OPCODES", "TraceSpec", "Tracer", "is_sass_trace", "lane_wavefronts", "operand_registers"]

KIND = "flashsim sass trace"
#: opcodes that can access shared memory (generic LD/ST/ATOM/RED only for lanes in the shared window)
SMEM_OPCODES = frozenset({"LDS", "STS", "LDSM", "STSM", "LDGSTS", "LD", "ST", "ATOMS", "ATOM", "RED"})
_ATOMIC = frozenset({"ATOMS", "ATOM", "RED"})
_NO_WAVEFRONT = 0xFFFF
LANES_COLUMN = "lanes"
_REG_RE = re.compile(r"^(R|UR|P)(\d+)(?:-(?:\1)?(\d+))?$")
_REG_LIMIT = {"R": 255, "UR": 63, "P": 7}  # RZ / URZ / PT are not registers one can trace


# ----------------------------------------------------------------------------------------------------
# The spec
# ----------------------------------------------------------------------------------------------------


def _ids(name: str, value, hi: int | None = None) -> frozenset | None:
    """None, an int, a range, or an iterable of ints and ranges -> a frozenset of non-negative ints."""
    if value is None:
        return None
    items = [value] if isinstance(value, (int, np.integer, range)) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise bad_argument(name, value, "expected None, an int, a range, or a list of ints and ranges")
    out = set()
    for x in items:
        if isinstance(x, range):
            out.update(x)
            continue
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise bad_argument(name, value, f"{x!r} is not an int or a range")
        out.add(int(x))
    if not out:
        raise bad_argument(name, value, "selects nothing (pass None for all)")
    bad = sorted(i for i in out if i < 0 or (hi is not None and i >= hi))
    if bad:
        limit = f"0..{hi - 1}" if hi is not None else "non-negative"
        raise bad_argument(name, value, f"{bad[:8]} out of range (expected {limit})")
    return frozenset(out)


def _parse_regs(regs) -> tuple[str, ...] | str:
    if isinstance(regs, str):
        if regs == "all":
            return "all"
        regs = [regs]
    if not isinstance(regs, (list, tuple)) or not regs:
        raise bad_argument("regs", regs, "expected 'all' or a non-empty list of register names such as "
                                         "['R0', 'R4-R7', 'UR2', 'P0']")
    out: list[str] = []
    for item in regs:
        m = _REG_RE.match(item) if isinstance(item, str) else None
        if m is None:
            raise bad_argument("regs", item, "not a register name: expected 'R0'..'R254', 'UR0'..'UR62', 'P0'..'P6' "
                                             "or a range such as 'R4-R7'")
        kind, lo = m.group(1), int(m.group(2))
        hi = int(m.group(3)) if m.group(3) is not None else lo
        if hi < lo or hi >= _REG_LIMIT[kind]:
            raise bad_argument("regs", item, f"{kind} registers are {kind}0..{kind}{_REG_LIMIT[kind] - 1}"
                                             + (" (an empty range)" if hi < lo else ""))
        for i in range(lo, hi + 1):
            n = f"{kind}{i}"
            if n not in out:
                out.append(n)
    return tuple(out)


@dataclass(frozen=True)
class TraceSpec:
    """What to trace (see the module docstring).

    ``path``: the trace file. ``at``: PCs (ints, byte offsets in the kernel's code) and/or source
    locations ``"file.cu:188"`` (every instruction of that line; the file compared by base name or path
    suffix). ``regs``: ``"all"`` (R0..R{regcount-1} of the kernel) or names and ranges (``["R0", "R4-R7",
    "UR2", "P0"]``). ``ctas``/``warps``/``lanes``: ints or ranges of grid-linear CTA indices, warp indices
    in the CTA, lanes (None: all). ``smem``: also record every shared-memory access of the traced warps.
    ``when``: registers ``"before"`` or ``"after"`` the instruction. ``force``: overwrite ``path``.
    ``kernels``: names of the kernels to trace (None: every kernel launched in the block; launches of
    others run untraced).
    """

    path: object
    at: object
    regs: object = "all"
    ctas: object = None
    warps: object = None
    lanes: object = None
    smem: bool = True
    when: str = "after"
    force: bool = False
    kernels: object = None

    def __post_init__(self):
        s = object.__setattr__
        if not isinstance(self.path, (str, os.PathLike)) or not str(self.path):
            raise bad_argument("path", self.path, "expected a file path (str or pathlib.Path)")
        s(self, "path", Path(self.path))
        at = [self.at] if isinstance(self.at, (str, int, np.integer)) else self.at
        if not isinstance(at, (list, tuple)) or not at:
            raise bad_argument("at", self.at, "expected a non-empty list of PCs (ints) and/or source locations "
                                              "'file.cu:188'")
        items = []
        for x in at:
            if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
                if x < 0 or x % 16:
                    raise bad_argument("at", x, "a PC is a non-negative multiple of 16 (a byte offset in the code)")
                items.append(int(x))
            elif isinstance(x, str):
                f, sep, ln = x.rpartition(":")
                if not sep or not f or not ln.strip().isdigit():
                    raise bad_argument("at", x, "expected a source location 'file.cu:188' (or a PC as an int)")
                items.append(f"{f}:{int(ln)}")
            else:
                raise bad_argument("at", x, "expected a PC (int) or a source location 'file.cu:188'")
        s(self, "at", tuple(items))
        s(self, "regs", _parse_regs(self.regs))
        s(self, "ctas", _ids("ctas", self.ctas))
        s(self, "warps", _ids("warps", self.warps, 32))
        s(self, "lanes", _ids("lanes", self.lanes, 32))
        for name in ("smem", "force"):
            if not isinstance(getattr(self, name), bool):
                raise bad_argument(name, getattr(self, name), "expected a bool")
        if self.when not in ("before", "after"):
            raise bad_argument("when", self.when, "expected 'before' or 'after' (the instruction)")
        k = self.kernels
        if k is not None:
            k = (k,) if isinstance(k, str) else k
            if not isinstance(k, (list, tuple, set, frozenset)) or not k \
                    or not all(isinstance(x, str) and x for x in k):
                raise bad_argument("kernels", self.kernels, "expected None, a kernel name or a list of kernel names")
            s(self, "kernels", frozenset(k))

    def to_json(self) -> dict:
        def ids(v):
            return None if v is None else sorted(v)
        return {"path": str(self.path), "at": [a if isinstance(a, str) else f"{a:#06x}" for a in self.at],
                "regs": self.regs if isinstance(self.regs, str) else list(self.regs), "ctas": ids(self.ctas),
                "warps": ids(self.warps), "lanes": ids(self.lanes), "smem": self.smem, "when": self.when,
                "kernels": ids(self.kernels)}


# ----------------------------------------------------------------------------------------------------
# Resolving a spec against a kernel's program
# ----------------------------------------------------------------------------------------------------


def _file_matches(path: str, want: str) -> bool:
    want = want[2:] if want.startswith("./") else want
    if path == want:
        return True
    if "/" not in want:
        return os.path.basename(path) == want
    return path.endswith("/" + want.lstrip("/"))


def _resolve_at(program, at) -> list[int]:
    """The PCs of ``at`` in ``program``; an item that names no instruction is an error."""
    ins = program.instructions
    pcs: list[int] = []
    for item in at:
        if isinstance(item, int):
            if item not in ins:
                last = max(ins) if ins else 0
                raise bad_argument("at", f"{item:#06x}", f"no instruction at this PC: the kernel's code spans "
                                                          f"0x0000..{last:#06x} in steps of 16")
            found = [item]
        else:
            f, ln = item.rsplit(":", 1)
            ln = int(ln)
            found = [pc for pc, i in ins.items() if i.line and i.line[1] == ln and _file_matches(i.line[0], f)]
            if not found:
                files = sorted({i.line[0] for i in ins.values() if i.line})
                same = [p for p in files if _file_matches(p, f)]
                if not files:
                    raise bad_argument("at", item, "the kernel has no line information (compile with -lineinfo)")
                if not same:
                    raise bad_argument("at", item, "no instruction comes from that file; the kernel's code comes "
                                                   f"from {', '.join(files[:8])}")
                have = sorted({i.line[1] for i in ins.values() if i.line and i.line[0] in same})
                below = [x for x in have if x < ln][-3:]
                above = [x for x in have if x > ln][:3]
                raise bad_argument("at", item, f"no instruction comes from line {ln}; the nearest lines of "
                                               f"{os.path.basename(same[0])} with code are "
                                               f"{', '.join(map(str, below + above)) or 'none'}")
        for pc in sorted(found):
            if pc not in pcs:
                pcs.append(pc)
    return pcs


def _reg_columns(program, regs) -> list[str]:
    n = int(program.kernel.regcount)
    if regs == "all":
        return [f"R{i}" for i in range(min(n, 255))]
    for r in regs:
        if r.startswith("R") and int(r[1:]) >= n:
            raise bad_argument("regs", r, f"the kernel uses {n} registers (R0..R{n - 1})")
    return list(regs)


def _width_of(ins, first: bool) -> int:
    """Registers an instruction's data operand spans (approximately: pairs for .64 / .WIDE, quads for .128,
    LDSM/STSM .x2/.x4 and mma accumulators)."""
    mods = set(ins.mods)
    if ins.opcode in ("LDSM", "STSM"):
        return 4 if "4" in mods else 2 if "2" in mods else 1
    if ins.opcode in ("HMMA", "IMMA", "DMMA", "HGMMA"):
        return 4 if first and "F32" in mods else 2
    if "128" in mods:
        return 4
    if "64" in mods or (first and "WIDE" in mods):
        return 2
    return 1


def operand_registers(ins) -> tuple[list[str], list[str]]:
    """(destination registers, source registers) of an instruction by name (R, UR, P; RZ, URZ and PT left
    out): the first operand is the destination when it is a register or predicate; memory operands
    contribute their address registers as sources."""
    from flashsim.sass.isa import PT, RZ, URZ

    def names(op, n=1) -> list[str]:
        if op.kind == "r" and op.index != RZ:
            k = 2 if "64" in op.suffix else n
            return [f"R{op.index + j}" for j in range(k) if op.index + j < RZ]
        if op.kind == "ur" and op.index != URZ:
            k = 2 if "64" in op.suffix else n
            return [f"UR{op.index + j}" for j in range(k) if op.index + j < URZ]
        if op.kind == "p" and op.index != PT:
            return [f"P{op.index}"]
        if op.kind in ("mem", "c"):
            out = []
            if op.reg != RZ:
                out += [f"R{op.reg + j}" for j in range(2 if op.reg64 else 1)]
            if op.ureg != URZ:
                out += [f"UR{op.ureg + j}" for j in range(2 if op.ureg64 else 1)]
            return out
        return []

    ops = list(ins.operands)
    dst: list[str] = []
    # the destination: leading predicates (ISETP P0, PT, ...), or a register followed by predicate
    # carry-outs (IADD3 R4, P0, PT, ...)
    if ops and ops[0].kind in ("r", "ur"):
        dst += names(ops.pop(0), _width_of(ins, True))
    while ops and ops[0].kind in ("p", "up"):
        dst += names(ops.pop(0))
    src: list[str] = []
    for op in ops:
        for n in names(op, _width_of(ins, False) if op.kind in ("r", "ur") else 1):
            if n not in src:
                src.append(n)
    return dst, src


def _guard_reader(program, ins):
    """fn(m) -> (A, W, 32) bools: the lanes whose guard predicate holds (None: no guard)."""
    from flashsim.sass.isa import PT
    from flashsim.sass.program import Ctx

    g = ins.guard
    if g is None:
        return None
    if g.kind in ("p", "up") and g.index == PT:
        if g.invert:
            return lambda m: np.zeros(m.st.shape, bool)
        return None
    rd = Ctx(ins, program).pred_of(g, uniform=False)
    return lambda m: np.broadcast_to(rd(m), m.st.shape)


def _atomic_reader(program, ins):
    """fn(m) -> (shared byte offsets (A, W, 32) int64, lanes in the shared window or None, width) of a
    shared or generic atomic, from its operands (as flashsim.sass.ops_mem reads them)."""
    from flashsim.sass.ops_mem import _address
    from flashsim.sass.program import Ctx

    ctx = Ctx(ins, program)
    mods = set(ins.mods)
    width = 8 if mods & {"64", "U64", "S64"} else 4
    i = 1 if ins.operands and ins.operands[0].kind == "p" else 0
    if ins.opcode != "RED":
        i += 1
    if ins.opcode == "ATOMS":
        rd = _address(ctx, i, False)
        return lambda m: (rd(m), None), width
    from flashsim.sass.launch import SHARED_WINDOW, WINDOW_SIZE

    rd = _address(ctx, i, True)

    def read(m):
        a = rd(m).astype(np.uint64)
        sh = (a >= np.uint64(SHARED_WINDOW)) & (a < np.uint64(SHARED_WINDOW + WINDOW_SIZE))
        return np.where(sh, a - np.uint64(SHARED_WINDOW), 0).astype(np.int64), sh
    return read, width


@dataclass
class _Program:
    """A traced program: the PCs watched and how to read each one's state."""

    index: int
    kernel: str
    program: object
    at: frozenset
    smem: frozenset
    columns: list
    cubin_sha256: str | None
    code_sha256: str
    regs_idx: dict = field(default_factory=dict)  # kind -> (positions in columns, register numbers)
    guards: dict = field(default_factory=dict)
    atomics: dict = field(default_factory=dict)

    def __post_init__(self):
        for kind in ("R", "UR", "P"):
            pos = [i for i, c in enumerate(self.columns) if re.fullmatch(kind + r"\d+", c)]
            self.regs_idx[kind] = (np.array(pos, np.int64), np.array([int(self.columns[i][len(kind):]) for i in pos],
                                                                      np.int64))

    def guard(self, pc):
        if pc not in self.guards:
            self.guards[pc] = _guard_reader(self.program, self.program.instructions[pc])
        return self.guards[pc]

    def atomic(self, pc):
        if pc not in self.atomics:
            self.atomics[pc] = _atomic_reader(self.program, self.program.instructions[pc])
        return self.atomics[pc]

    def gather(self, m, a, w) -> np.ndarray:
        """(n, 32, columns) registers of the warps (a[i], w[i])."""
        out = np.zeros((len(a), 32, len(self.columns)), np.uint32)
        pos, idx = self.regs_idx["R"]
        if pos.size:
            out[:, :, pos] = np.transpose(m.R[idx][:, a, w, :], (1, 2, 0))
        pos, idx = self.regs_idx["UR"]
        if pos.size:
            out[:, :, pos] = np.transpose(m.UR[idx][:, a, w], (1, 0))[:, None, :]
        pos, idx = self.regs_idx["P"]
        if pos.size:
            out[:, :, pos] = np.transpose(m.P[idx][:, a, w, :], (1, 2, 0)).astype(np.uint32)
        return out


# ----------------------------------------------------------------------------------------------------
# Shared-memory records
# ----------------------------------------------------------------------------------------------------


def lane_wavefronts(addr, active, *, op: str, width: int, num: int = 4, model=None, **copy) -> np.ndarray:
    """The wavefront (0-based, over the whole instruction) that serves each lane of ONE warp instruction,
    by the counting rules of :func:`flashsim.smem.wavefronts` (``model``: default its sm_90 model): phases
    of consecutive lanes; in a phase, the k-th distinct unit of a bank group (in lane order) is served by
    the phase's k-th wavefront (cp.async: by :func:`flashsim.smem.cp_async_wavefronts`, ``copy`` its
    ``src``/``reads``/``bypass``/``zfill``). Inactive lanes get -1. ``max + 1`` equals ``wavefronts(...)[0]``."""
    from flashsim.smem import SM90, cp_async_wavefronts, phases_of

    model = SM90 if model is None else model
    a = np.asarray(addr, np.int64).reshape(32)
    act = np.asarray(active, bool).reshape(32).copy()
    lpp, unit = phases_of(op, width)
    if op == "ldgsts" and model.cp_async:
        return np.asarray(cp_async_wavefronts(a, width=width, active=act, lanes=True, **copy)[2], np.int64)
    if op in ("ldsm", "stsm"):
        act &= np.arange(32) < 8 * num
    if model.pair_broadcast and op == "ld" and width in (8, 16):
        for x in (1, 2):
            p = np.arange(32) ^ x
            if not np.any(act & act[p] & (a != a[p])):
                lpp *= 2
                break
    shift = unit.bit_length() - 1
    gmask = 128 // unit - 1 if unit >= 4 else 31
    out = np.full(32, -1, np.int64)
    base = 0
    for p0 in range(0, 32, lpp):
        slots: dict[int, dict[int, int]] = {}
        most = 0
        for lane in range(p0, p0 + lpp):
            if not act[lane]:
                continue
            u = int(a[lane]) >> shift
            seen = slots.setdefault(u & gmask, {})
            if u not in seen:
                seen[u] = len(seen)
            out[lane] = base + seen[u]
            most = max(most, len(seen))
        base += most
    return out


_OP_STORE = {"ld": 0, "ldsm": 0, "st": 1, "stsm": 1, "ldgsts": 1}


def _records(accesses, i: int, keep: np.ndarray):
    """SMEM_DTYPE records of warp ``i`` of a step from its accesses [(op, addr (n, 32), width, active (n, 32),
    num)], for the lanes of ``keep``."""
    from flashsim.trace.container import SMEM_DTYPE

    parts = []
    for op, addr, width, active, num, *copy in accesses:
        copy = {k: (v[i] if isinstance(v, np.ndarray) else v) for k, v in copy[0].items()} if copy else {}
        act = active[i] & keep
        if op in ("ldsm", "stsm"):
            act &= np.arange(32) < 8 * num
        if not act.any():
            continue
        lanes = np.flatnonzero(act)
        r = np.zeros(lanes.size, SMEM_DTYPE)
        r["lane"] = lanes
        r["addr"] = addr[i][lanes].astype(np.uint32)
        if op == "atomic":
            r["nbytes"], r["store"], r["wavefront"] = width, 2, _NO_WAVEFRONT
        else:
            r["nbytes"] = 16 if op in ("ldsm", "stsm") else width
            r["store"] = _OP_STORE[op]
            r["wavefront"] = lane_wavefronts(addr[i], active[i], op=op, width=width, num=num, **copy)[lanes]
        parts.append(r)
    return np.concatenate(parts) if parts else np.zeros(0, SMEM_DTYPE)


# ----------------------------------------------------------------------------------------------------
# The tracer of one checking block
# ----------------------------------------------------------------------------------------------------


@dataclass
class _Step:
    """One execution of a watched PC by the traced warps, between the before and after hooks."""

    prog: _Program
    pc: int
    tag: str
    a: np.ndarray
    w: np.ndarray
    ctas: np.ndarray
    lanes: np.ndarray  # (n, 32) at the PC
    guard: np.ndarray  # (n, 32) guard true
    regs: np.ndarray | None = None
    accesses: list | None = None


_SPOOL = struct.Struct("<HIiiqHi")  # program, pc, cta, warp, seq, columns, shared-memory records (-1: none)


class Tracer:
    """Collects the events of one ``checking(trace=...)`` block into a spool file beside the trace, and
    writes the trace (the tag table is only known once every launch has run) when the block ends."""

    def __init__(self, spec: TraceSpec):
        if not isinstance(spec, TraceSpec):
            raise bad_argument("trace", spec, "expected a flashsim.sass.tracing.TraceSpec")
        self.spec = spec
        path = spec.path
        if not path.parent.is_dir():
            raise bad_argument("path", str(path), f"directory {path.parent} does not exist")
        if path.exists() and not spec.force:
            raise bad_argument("path", str(path), "already exists; pass force=True to overwrite it")
        self.programs: list[_Program] = []
        self.launches: list[dict] = []
        self._seq: dict[tuple[int, int], int] = {}
        self._used: set[tuple[int, int]] = set()
        self._step: _Step | None = None
        self._mcache = (None, None, None)
        self.events = 0
        self._spool_path = path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.spool"
        try:
            self._spool = open(self._spool_path, "xb")
        except OSError as exc:  # the user's path is what to name, not the spool beside it
            raise bad_argument("path", str(path), f"cannot write in {path.parent} ({exc.strerror or exc})") from None
        self._state = "open"
        self._lane_keep = np.ones(32, bool)
        if spec.lanes is not None:
            self._lane_keep[:] = False
            self._lane_keep[sorted(spec.lanes)] = True

    # -------------------------------------------------------------------------------- hooking a report
    def attach(self, probe, launch, name: str) -> None:
        spec = self.spec
        if self._state != "open" or (spec.kernels is not None and name not in spec.kernels):
            return
        prog = self._program(launch.program, name)
        grid_n = int(np.prod(launch.grid))
        warps_n = -(-int(np.prod(launch.block)) // 32)
        if spec.ctas is not None and max(spec.ctas) >= grid_n:
            raise bad_argument("ctas", sorted(spec.ctas), f"kernel {name!r} is launched with {grid_n} CTAs "
                                                          f"(grid {tuple(launch.grid)}): CTAs 0..{grid_n - 1}")
        if spec.warps is not None and max(spec.warps) >= warps_n:
            raise bad_argument("warps", sorted(spec.warps), f"kernel {name!r} is launched with {warps_n} warps "
                                                            f"per CTA (block {tuple(launch.block)})")
        self.launches.append({"kernel": name, "program": prog.index, "grid": list(launch.grid),
                              "block": list(launch.block), "shared_mem": int(launch.dynamic_shared),
                              "cubin_sha256": prog.cubin_sha256})
        probe.tracer = self
        probe.trace_program = prog
        probe.smem_observer = self._observe
        probe.watch_before = frozenset(prog.at | prog.smem)
        probe.watch_after = frozenset((prog.at if spec.when == "after" else frozenset()) | prog.smem)

    def _program(self, program, name: str) -> _Program:
        code = hashlib.sha256(program.kernel.code).hexdigest()
        for p in self.programs:
            if p.kernel == name and p.code_sha256 == code:
                return p
        at = frozenset(_resolve_at(program, self.spec.at))
        smem = frozenset(pc for pc, i in program.instructions.items()
                         if i.opcode in SMEM_OPCODES) if self.spec.smem else frozenset()
        p = _Program(len(self.programs), name, program, at, smem, _reg_columns(program, self.spec.regs),
                     getattr(program, "cubin_sha256", None), code)
        self.programs.append(p)
        return p

    # -------------------------------------------------------------------------------- the hooks
    def _selection(self, m):
        cached_m, ctas_ok, warps_ok = self._mcache
        if cached_m is not m:
            spec = self.spec
            ctas_ok = np.ones(m.A, bool) if spec.ctas is None else np.isin(m.cta_ids, sorted(spec.ctas))
            warps_ok = np.ones(m.W, bool) if spec.warps is None else np.isin(np.arange(m.W), sorted(spec.warps))
            self._mcache = (m, ctas_ok, warps_ok)
        return ctas_ok, warps_ok

    def at_pc(self, probe, m, pc: int, active, when: str) -> None:
        prog: _Program = probe.trace_program
        if when == "before":
            self._step = None
            lanes = (m.st == RUN) if active is None else active
            ctas_ok, warps_ok = self._selection(m)
            sel = lanes.any(axis=2) & ctas_ok[:, None] & warps_ok[None, :]
            if not sel.any():
                return
            a, w = np.nonzero(sel)
            g = prog.guard(pc)
            guard = np.ones((len(a), 32), bool) if g is None else np.array(g(m)[a, w, :], bool)
            st = _Step(prog, pc, f"{pc:#06x}", a, w, m.cta_ids[a], np.array(lanes[a, w, :], bool), guard)
            if pc in prog.at and self.spec.when == "before":
                st.regs = prog.gather(m, a, w)
            if pc in prog.smem:
                st.accesses = []
                ins = prog.program.instructions[pc]
                if ins.opcode in _ATOMIC:
                    read, width = prog.atomic(pc)
                    addr, shared = read(m)
                    act = st.lanes & st.guard
                    if shared is not None:
                        act = act & shared[a, w, :]
                    st.accesses.append(("atomic", addr[a, w, :], width, act, 4))
                self._step = st
            elif pc in prog.at and self.spec.when == "before":
                self._emit(st)
            else:
                self._step = st
            return
        st = self._step
        self._step = None
        if st is None or st.pc != pc:
            return
        if pc in prog.at and self.spec.when == "after":
            st.regs = prog.gather(m, st.a, st.w)
        self._emit(st)

    def _observe(self, tag, op, addr, width, active, num=4, **copy) -> None:
        """SharedMemory's observer (every access of LDS/STS/LDSM/STSM/LDGSTS and of generic LD/ST to shared
        memory, with its lanes' addresses; a cp.async also with what its count needs, ``copy``): the traced
        warps' accesses go to the current step."""
        st = self._step
        if op in ("atom", "atom_cas"):
            return  # the atomics' addresses come from their operands (the step's own record)
        if st is not None and st.accesses is not None and tag == st.tag:
            ad = np.broadcast_to(np.asarray(addr), active.shape)
            rec = (op, np.array(ad[st.a, st.w, :], np.int64), int(width),
                   np.array(np.broadcast_to(active, ad.shape)[st.a, st.w, :], bool), int(num))
            if copy:
                rec += ({k: np.array(np.broadcast_to(v, ad.shape)[st.a, st.w, :]) if isinstance(v, np.ndarray) else v
                         for k, v in copy.items()},)
            st.accesses.append(rec)

    def _emit(self, st: _Step) -> None:
        keep_lane = self._lane_keep
        prog = st.prog
        ncols = (len(prog.columns) if st.regs is not None else 0) + 1
        for i in range(len(st.a)):
            if st.accesses is not None and st.regs is None:
                recs = _records(st.accesses, i, st.lanes[i] & keep_lane)
                if not len(recs):
                    continue  # a shared-memory instruction that accessed nothing
            else:
                recs = None if st.accesses is None else _records(st.accesses, i, st.lanes[i] & keep_lane)
            keep = st.lanes[i] & keep_lane
            regs = np.zeros((32, ncols), np.uint32)
            if st.regs is not None:
                regs[keep, :-1] = st.regs[i][keep]
            regs[:, -1] = np.where(keep, 1 | (st.guard[i].astype(np.uint32) << 1), 0)
            key = (int(st.ctas[i]), int(st.w[i]))
            seq = self._seq.get(key, 0)
            self._seq[key] = seq + 1
            ns = -1 if recs is None else len(recs)
            self._spool.write(_SPOOL.pack(prog.index, st.pc, key[0], key[1], seq, ncols, ns))
            self._spool.write(regs.tobytes())
            if recs is not None:
                self._spool.write(recs.tobytes())
            self._used.add((prog.index, st.pc))
            self.events += 1

    # -------------------------------------------------------------------------------- finishing
    def _tags(self) -> tuple[dict, dict]:
        """{(program, pc): tag} and the tag table's meta."""
        multi = len({p.kernel for p in self.programs}) > 1
        dup = len({p.kernel for p in self.programs}) < len(self.programs)
        names, info = {}, {}
        for p in self.programs:
            prefix = ""
            if dup:
                prefix = f"{p.kernel}@{p.code_sha256[:8]} "
            elif multi:
                prefix = f"{p.kernel} "
            pcs = sorted(p.at | {pc for (i, pc) in self._used if i == p.index})
            for pc in pcs:
                ins = p.program.instructions[pc]
                loc = f"{os.path.basename(ins.line[0])}:{ins.line[1]} " if ins.line else ""
                tag = f"{prefix}pc={pc:#06x} {loc}{ins.text}"
                names[(p.index, pc)] = tag
                dst, src = operand_registers(ins)
                info[tag] = {"program": p.index, "kernel": p.kernel, "pc": pc, "sass": ins.text,
                             "file": ins.line[0] if ins.line else None, "line": ins.line[1] if ins.line else None,
                             "registers": (p.columns if pc in p.at else []) + [LANES_COLUMN],
                             "dst": dst, "src": src, "traced": pc in p.at, "smem": pc in p.smem}
        return names, info

    def meta(self, info: dict) -> dict:
        from flashsim._version import __version__

        progs = []
        for p in self.programs:
            code = [[pc, i.text, i.line[0] if i.line else None, i.line[1] if i.line else None]
                    for pc, i in sorted(p.program.instructions.items())]
            progs.append({"kernel": p.kernel, "cubin_sha256": p.cubin_sha256, "code_sha256": p.code_sha256,
                          "regcount": int(p.program.kernel.regcount), "columns": p.columns + [LANES_COLUMN],
                          "code": code})
        return {"kind": KIND, "version": 1, "kernels": sorted({p.kernel for p in self.programs}),
                "programs": progs, "launches": self.launches, "spec": self.spec.to_json(), "tag_info": info,
                "events": self.events, "flashsim_version": __version__,
                "registers": "per event: the tag's registers, then 'lanes' (bit 0: the lane is at the instruction, "
                             "bit 1: its guard holds); lanes not at it or filtered out are zero"}

    def close(self) -> Path:
        """Write the trace from the spool and publish it at the spec's path."""
        from flashsim.trace.container import SMEM_DTYPE, TraceWriter

        if self._state != "open":
            return self.spec.path
        try:
            self._spool.close()
            names, info = self._tags()
            with TraceWriter(self.spec.path, self.meta(info), list(info), force=self.spec.force) as w, \
                    open(self._spool_path, "rb") as f:
                while True:
                    head = f.read(_SPOOL.size)
                    if not head:
                        break
                    prog, pc, cta, warp, seq, ncols, ns = _SPOOL.unpack(head)
                    regs = np.frombuffer(f.read(128 * ncols), np.uint32).reshape(32, ncols)
                    smem = None if ns < 0 else np.frombuffer(f.read(ns * SMEM_DTYPE.itemsize), SMEM_DTYPE)
                    w.add_event(cta, warp, seq, names[(prog, pc)], regs, smem)
        except BaseException:
            self.abort()
            raise
        self._state = "closed"
        self._remove_spool()
        return self.spec.path

    def abort(self) -> None:
        """Give up: nothing is written at the spec's path."""
        if self._state == "open":
            self._state = "aborted"
        try:
            self._spool.close()
        finally:
            self._remove_spool()

    def _remove_spool(self) -> None:
        try:
            os.unlink(self._spool_path)
        except FileNotFoundError:
            pass


def is_sass_trace(path) -> bool:
    """Whether ``path`` is a trace of interpreted instructions (this module's), not of FS_TRACE tags."""
    from flashsim.trace.container import TraceReader

    with TraceReader(path) as r:
        return r.meta.get("kind") == KIND

