"""The first instruction where two runs of a kernel part: one thread's register writes logged on both
sides and compared entry by entry.

    from flashsim.locate import locate
    found = locate(mod, "my_kernel", grid, block, args)     # GPU against the interpreter
    print(found.text() if found else "the outputs agree")

How: the module's CUDA source is compiled again to PTX (the same NVRTC options), the kernel's PTX is
rewritten to log every register write of one thread (:mod:`flashsim.sass.ptxlog`), nvJitLink links it to
an sm_90 cubin, and the same cubin runs on both sides with the same inputs and a zeroed log. The thread
is the one that stored the first differing output element (the interpreter re-runs with a watch on it).
The first log entry whose site or value differs names the PTX instruction, its source line, the thread,
how many times that instruction had run in the thread, and both values.

The two sides are *runners*: callables ``(cubin bytes, args) -> list`` (numpy arrays back for array
arguments, None for scalars). The default pair is (:func:`gpu_runner`, :func:`interpreter_runner`); two
interpreter runners, one with a planted semantic, test the locator without a GPU.

The instrumented build is a build of its own (ptxas sees the added loads and stores, nvJitLink assembles
in separate-compilation mode), so it may not reproduce a difference of the plain build; the result says
so when its outputs agree.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from flashsim import device
from flashsim.errors import FlashsimError, bad_argument, location
from flashsim.sass import ptxlog
from flashsim.sass.isa import SassParseError
from flashsim.sass.ptxlog import Instrumented, Site, ThreadLog
from flashsim.sass.toolchain import compile_cuda_ptx, link_ptx

__all__ = ["DEFAULT_CAPACITY", "Divergence", "LocateError", "Runner", "Thread", "gpu_runner", "instrumented_build",
           "interpreter_runner", "locate", "locate_first_divergence", "storing_thread"]

Runner = Callable[[bytes, list], list]

#: log entries kept per run (16 bytes each)
DEFAULT_CAPACITY = 1 << 18


class LocateError(FlashsimError):
    """The first divergence cannot be located (no source for the module, no storing thread, ...)."""


# ------------------------------------------------------------------------------------------------------
# Threads
# ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Thread:
    """One thread of a launch: its ctaid and tid, with the launch shape (for cta/warp/lane)."""

    ctaid: tuple[int, int, int]
    tid: tuple[int, int, int]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @classmethod
    def of(cls, grid, block, *, ctaid, warp: int, lane: int) -> "Thread":
        """The thread at (ctaid, warp, lane) of a launch (threads are numbered x fastest, 32 to a warp)."""
        g, b = _dims("grid", grid), _dims("block", block)
        lin = int(warp) * 32 + int(lane)
        tid = (lin % b[0], (lin // b[0]) % b[1], lin // (b[0] * b[1]))
        return cls(ptxlog._xyz("ctaid", ctaid), tid, g, b)

    @property
    def cta(self) -> int:
        """Linear CTA index (x fastest), as the interpreter's reports number CTAs."""
        x, y, z = self.ctaid
        return x + self.grid[0] * (y + self.grid[1] * z)

    @property
    def warp(self) -> int:
        return self._linear // 32

    @property
    def lane(self) -> int:
        return self._linear % 32

    @property
    def _linear(self) -> int:
        x, y, z = self.tid
        return x + self.block[0] * (y + self.block[1] * z)

    def __str__(self) -> str:
        return (f"{location(cta=self.cta, warp=self.warp, lane=self.lane)} (ctaid={self.ctaid} "
                f"tid={self.tid})")


def _dims(name, v) -> tuple[int, int, int]:
    v = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(v) <= 3 or not all(isinstance(x, (int, np.integer)) and x >= 1 for x in v):
        raise bad_argument(name, v, "expected a positive int or 1 to 3 positive ints")
    return tuple(int(x) for x in v) + (1,) * (3 - len(v))  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------------
# Runners
# ------------------------------------------------------------------------------------------------------

def _is_array(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.names is None


class interpreter_runner:  # noqa: N801  (a function-like factory with state)
    """Runs a cubin's ``kernel`` in flashsim's interpreter. ``module`` is the last run's RawModule (its
    program's execution counts give the SASS executed per source line)."""

    def __init__(self, kernel: str, grid, block, shared_mem: int = 0, exec_options=None):
        self.kernel, self.grid, self.block = kernel, _dims("grid", grid), _dims("block", block)
        self.shared_mem, self.exec_options = int(shared_mem), exec_options
        self.module = None

    def __call__(self, cubin: bytes, args: Sequence[Any]) -> list:
        import flashsim.cuda as fc  # numba: imported on first use, so that flashsim.testing loads light

        mod = self.module = fc.RawModule(cubin=bytes(cubin))
        f = mod.get_function(self.kernel)
        try:
            f._prog()
        except SassParseError as exc:
            if "@lo((" not in str(exc) and "@hi((" not in str(exc):
                raise
            # nvJitLink assembles in separate-compilation mode: a subroutine ptxas adds (the slow paths of
            # IEEE division, reciprocal and square root) or a non-inlined function is reached by CALL.ABS with
            # a return address the loader relocates
            raise NotImplementedError(
                f"kernel {self.kernel!r}: this build calls a subroutine through a relocated absolute address "
                f"({str(exc).splitlines()[0]}), which the interpreter does not run (an instrumented build of a "
                "kernel with IEEE division, reciprocal or square root, or with a non-inlined function)") from None
        if self.shared_mem > f.max_dynamic_shared_size_bytes:
            f.max_dynamic_shared_size_bytes = self.shared_mem
        dev = [fc.asarray(a) if _is_array(a) else a for a in args]
        f(self.grid, self.block, tuple(dev), shared_mem=self.shared_mem, exec_options=self.exec_options)
        return [d.get() if _is_array(a) else None for d, a in zip(dev, args)]


def gpu_runner(kernel: str, grid, block, shared_mem: int = 0) -> Runner:
    """Runs a cubin's ``kernel`` on the GPU through cupy (:mod:`flashsim.gpu.runtime`), loaded from exactly
    these bytes."""
    g, b = _dims("grid", grid), _dims("block", block)

    def run(cubin: bytes, args: Sequence[Any]) -> list:
        cupy = device.require_gpu()
        f = device.load_cubin(bytes(cubin)).get_function(kernel)
        if shared_mem > 48 * 1024:
            f.max_dynamic_shared_size_bytes = shared_mem
        dev = [cupy.asarray(a) if _is_array(a) else a for a in args]
        device.launch(f, g, b, tuple(dev), shared_mem=int(shared_mem))
        return [cupy.asnumpy(d) if _is_array(a) else None for d, a in zip(dev, args)]
    return run


# ------------------------------------------------------------------------------------------------------
# The instrumented build
# ------------------------------------------------------------------------------------------------------

_BUILDS: dict[tuple[str, str, bool], tuple[Instrumented, bytes]] = {}
_BUILDS_LOCK = threading.Lock()


def instrumented_build(build, kernel: str, *, products: bool = False) -> tuple[Instrumented, bytes]:
    """(site table and PTX, cubin) of ``kernel`` of a :class:`flashsim.sass.toolchain.CudaBuild` with its
    register writes logged (:func:`flashsim.sass.ptxlog.instrument`; ``products`` passed on). ``kernel``:
    the name in the module (an ``extern "C"`` name, a mangled name or one of the build's name expressions)."""
    ptx, _, lowered = compile_cuda_ptx(build.source, name=build.name, options=build.options,
                                       name_expressions=build.name_expressions, lineinfo=True)
    entry = lowered.get(kernel, kernel)
    key = (hashlib.sha256(ptx.encode()).hexdigest(), entry, bool(products))
    with _BUILDS_LOCK:
        hit = _BUILDS.get(key)
    if hit is not None:
        return hit
    ins = ptxlog.instrument(ptx, entry, products=products)
    cubin = link_ptx(ins.ptx, name=f"{build.name}:{entry}.instrumented.ptx")
    with _BUILDS_LOCK:
        if len(_BUILDS) > 32:
            _BUILDS.clear()
        _BUILDS[key] = (ins, cubin)
    return ins, cubin


# ------------------------------------------------------------------------------------------------------
# Values
# ------------------------------------------------------------------------------------------------------

def _f16(bits: int) -> str:
    return str(np.array([bits & 0xFFFF], np.uint16).view(np.float16)[0])  # numpy's shortest repr


def _f32(bits: int) -> str:
    return str(np.array([bits & 0xFFFFFFFF], np.uint32).view(np.float32)[0])


def format_value(bits: int, reg_type: str, full: bool = True) -> str:
    """A logged value: hex bits, and the number(s) they hold for the register's type (for an untyped 32-bit
    register, with ``full``: as int, f32 and f16 pair)."""
    bits = int(bits)
    width = ptxlog._WIDTH[reg_type]
    if width == 1:
        return "true" if bits & 1 else "false"
    if width <= 16:
        h = f"{bits & 0xFFFF:#06x}" if width == 16 else f"{bits & 0xFF:#04x}"
        if reg_type in ("f16", "b16"):
            return f"{h} (f16 {_f16(bits)})"
        if reg_type == "bf16":
            return f"{h} (bf16 {_f32((bits & 0xFFFF) << 16)})"
        return f"{h} ({int(np.array([bits], np.uint16).view(np.int16)[0]) if reg_type.startswith('s') else bits})"
    if width == 32:
        b = bits & 0xFFFFFFFF
        pair = f"f16x2 ({_f16(b)}, {_f16(b >> 16)})"  # the lower-indexed element in bits 0-15
        if reg_type == "f32":
            return f"{b:#010x} (f32 {_f32(b)})"
        if reg_type in ("f16x2",):
            return f"{b:#010x} ({pair})"
        if reg_type == "bf16x2":
            return f"{b:#010x} (bf16x2 ({_f32((b & 0xFFFF) << 16)}, {_f32(b & 0xFFFF0000)}))"
        i = int(np.array([b], np.uint32).view(np.int32)[0])
        if reg_type == "b32" and full:
            return f"{b:#010x} (int {i}, f32 {_f32(b)}, {pair})"
        return f"{b:#010x} ({b if reg_type == 'u32' else i})"
    if reg_type == "f64":
        return f"{bits:#018x} (f64 {np.array([bits], np.uint64).view(np.float64)[0]!s})"
    return f"{bits:#018x} ({int(np.array([bits], np.uint64).view(np.int64)[0]) if reg_type == 's64' else bits})"


# ------------------------------------------------------------------------------------------------------
# Comparing two logs
# ------------------------------------------------------------------------------------------------------

@dataclass
class Divergence:
    """Where the logs of one thread part (``index`` None: they agree over every entry compared).

    ``logs``: the two :class:`ThreadLog`; ``sites``: the instrumented build's site table; ``outputs_differ``:
    whether the instrumented build's own outputs (log excluded) differ between the runners."""

    kernel: str
    names: tuple[str, str]
    thread: Thread
    logs: tuple[ThreadLog, ThreadLog]
    sites: tuple[Site, ...]
    index: int | None
    site: Site | None = None
    other_site: Site | None = None  # the site of runner B's entry, when the two logs name different sites
    occurrence: int | None = None  # 1-based: how many times the thread had logged this site, this one included
    values: tuple[int | None, int | None] = (None, None)
    outputs_differ: bool | None = None
    plain_outputs_differ: bool | None = None  # the uninstrumented build's outputs (when the caller knows)
    sass: list[str] = field(default_factory=list)  # the interpreter's SASS for the site's source line
    addresses: tuple[str | None, str | None] = (None, None)  # the values as addresses, where they are
    differing: int = 0  # entries that differ (over the entries both logs kept, plus the longer log's extra)
    not_logged: tuple[str, ...] = ()

    @property
    def compared(self) -> int:
        return min(len(self.logs[0]), len(self.logs[1]))

    def _overflow_note(self) -> str | None:
        a, b = self.logs
        if a.overflowed or b.overflowed:
            return (f"the log overflowed (capacity {a.capacity} entries; {self.names[0]} produced {a.produced}, "
                    f"{self.names[1]} {b.produced}): the logs agree over the {self.compared} entries kept; "
                    "raise the capacity to look further")
        return None

    def _value(self, side: int, site: Site) -> str:
        v = self.values[side]
        if v is None:
            return "(no entry: its log ended)"
        addr = self.addresses[side]
        return format_value(v, site.reg_type) + (f" = {addr}" if addr else "")

    def summary(self) -> list[str]:
        """A few lines: the instruction, the source line, the thread, both values."""
        a, b = self.names
        if self.index is None:
            lines = [f"the register-write logs of {self.thread} agree over {self.compared} entries"]
            note = self._overflow_note()
            if note:
                lines.append(note)
            elif self.outputs_differ is False and self.plain_outputs_differ:
                lines.append("the instrumented build's outputs agree too: the instrumentation changed the code "
                             "generation, so this build does not show the difference")
            elif self.outputs_differ or self.plain_outputs_differ:
                lines.append("the outputs differ, so the divergence is in another thread (or in memory another "
                             "thread wrote that this thread did not load)")
            return lines
        s = self.site
        head = (f"first divergence at entry {self.index} of the log of {self.thread}: `{s.text}` "
                f"-> {s.register} at {s.source} (occurrence {self.occurrence} in the thread)")
        if self.other_site is not None:
            o = self.other_site
            lines = [head.replace(f"`{s.text}`", f"`{s.text}` ({a})"),
                     f"  {b} logged another instruction there: `{o.text}` -> {o.register} at {o.source} "
                     "(control flow parted before it)",
                     f"  {a} {self._value(0, s)}; {b} {self._value(1, o)}"]
        else:
            lines = [head, f"  {a} {self._value(0, s)}, {b} {self._value(1, s)}"]
        if s.text.split()[0].startswith(("ld.", "ldu.", "ldmatrix", "atom.", "shfl.", "tex.")):
            lines.append("  (a load or exchange: the value came from memory or another thread, where it may "
                         "have parted first)")
        if self.sass:
            lines.append(f"  interpreter SASS for that line (instrumented build): {'; '.join(self.sass[:4])}"
                         + (f"; ... {len(self.sass) - 4} more" if len(self.sass) > 4 else ""))
        return lines

    def text(self) -> str:
        """Everything: the summary, the entries around the divergence, the SASS of the line."""
        out = list(self.summary())
        la, lb = self.logs
        out.append(f"kernel {self.kernel!r}; {self.names[0]} log: {len(la)} entries kept of {la.produced}; "
                   f"{self.names[1]} log: {len(lb)} kept of {lb.produced}; {len(self.sites)} sites")
        if self.index is not None:
            lo = max(0, self.index - 5)
            for k in range(lo, min(self.index + 3, max(len(la), len(lb)))):
                row = []
                for log in (la, lb):
                    if k < len(log):
                        st = self.sites[int(log.sites[k])] if int(log.sites[k]) < len(self.sites) else None
                        shown = format_value(log.values[k], st.reg_type, False) if st else hex(int(log.values[k]))
                        row.append(f"{st.register if st else '?'}={shown}")
                    else:
                        row.append("-")
                st = self.sites[int(la.sites[k])] if k < len(la) and int(la.sites[k]) < len(self.sites) else None
                mark = ">>" if k == self.index else "  "
                out.append(f"{mark} {k:6d} {st.source if st else '':>30} `{st.text if st else ''}`  "
                           f"{self.names[0]}: {row[0]}  {self.names[1]}: {row[1]}")
        if self.sass:
            out.append("interpreter SASS for the source line (instrumented build, executions over all warps):")
            out.extend(f"  {x}" for x in self.sass)
        if self.not_logged:
            out.append(f"not logged: {len(self.not_logged)} instructions (products ptxas may fuse into an FFMA, "
                       "wgmma accumulators)")
        return "\n".join(out)

    def to_dict(self) -> dict:
        s = self.site
        return {"kernel": self.kernel, "names": list(self.names), "thread": {
                    "ctaid": list(self.thread.ctaid), "tid": list(self.thread.tid), "cta": self.thread.cta,
                    "warp": self.thread.warp, "lane": self.thread.lane},
                "entries": [len(self.logs[0]), len(self.logs[1])],
                "produced": [self.logs[0].produced, self.logs[1].produced],
                "capacity": self.logs[0].capacity, "index": self.index,
                "site": None if s is None else {"id": s.id, "text": s.text, "register": s.register,
                                                "type": s.reg_type, "source": s.source, "file": s.file,
                                                "line": s.line, "ptx_line": s.ptx_line, "ordinal": s.ordinal},
                "occurrence": self.occurrence,
                "values": [None if v is None else int(v) for v in self.values],
                "outputs_differ": self.outputs_differ, "differing": self.differing, "sass": list(self.sass),
                "summary": self.summary()}


_PARAM_SITE = "^ld\\.param\\.[bus]64 \\S+, \\[{kernel}_param_(\\d+)\\]$"
#: how far outside its array a pointer may lie and still be compared as an offset from the array (one past
#: the end, a loop's pointer after its last trip, a strided walk): the larger of the array's size and this
_REACH = 1 << 20


def _reach(nbytes: int) -> int:
    return max(int(nbytes), _REACH)


def _argument_bases(log: ThreadLog, sites, kernel: str, arg_bytes: dict[int, int]) -> dict[int, int]:
    """argument -> its device address in this run: the first value the log holds of the argument's
    ``ld.param`` (for the array arguments of ``arg_bytes``)."""
    param_re = re.compile(_PARAM_SITE.format(kernel=re.escape(kernel)))
    bases: dict[int, int] = {}
    if len(log) == 0:
        return bases
    uniq, first = np.unique(log.sites.astype(np.int64), return_index=True)
    for site_id, k in sorted(zip(uniq.tolist(), first.tolist()), key=lambda sk: sk[1]):
        m = param_re.match(sites[site_id].text) if site_id < len(sites) else None
        if m is not None and int(m.group(1)) in arg_bytes and int(m.group(1)) not in bases:
            bases[int(m.group(1))] = int(log.values[k])
    return bases


def _argument_taint(sites, kernel: str) -> list[frozenset[int]]:
    """Per site: the arguments whose address its value may be derived from. Flow-insensitive, by register
    name, as :func:`flashsim.sass.ptxlog._address_taint`: an argument's ``ld.param`` seeds its register, and
    a site reading a register some site derived from an argument is derived from it too. A value that came
    through memory (a pointer loaded from an array or a struct) derives from none."""
    param_re = re.compile(_PARAM_SITE.format(kernel=re.escape(kernel)))
    out: list[frozenset[int]] = [frozenset()] * len(sites)
    tainted: dict[str, set[int]] = {}
    seeds = set()
    for i, st in enumerate(sites):
        m = param_re.match(st.text)
        if m is not None:
            out[i] = frozenset({int(m.group(1))})
            tainted.setdefault(st.register, set()).add(int(m.group(1)))
            seeds.add(i)
    if not seeds:
        return out
    changed = True
    while changed:
        changed = False
        for i, st in enumerate(sites):
            if i in seeds or not st.sources:
                continue
            got = set().union(*(tainted.get(r, set()) for r in st.sources))
            if not got <= out[i]:
                out[i] = out[i] | got
                tainted.setdefault(st.register, set()).update(got)
                changed = True
    return out


def _window_keys(log: ThreadLog, sites):
    """The values derived from a generic window or the local stack (:data:`flashsim.sass.ptxlog.ADDRESS_SEEDS`)
    as their offsets from the first such address the run logged, since the two runs place windows and
    stacks at different addresses. Returns (tags, payloads, labels, wide): tag 0 where the value is no
    such address; ``wide``: the 64-bit entries that are not, which may be argument addresses."""
    tags = np.zeros(len(log), np.int64)
    payload = log.values.copy()
    if len(log) == 0:
        return tags, payload, {}, np.zeros(0, bool)
    kinds = [kind for kind, _ in ptxlog.ADDRESS_SEEDS]
    space_base: dict[str, tuple[int, int]] = {}  # address space -> (the first seed value of this run, its entry)
    labels = {}
    sid = log.sites.astype(np.int64)
    uniq, first = np.unique(sid, return_index=True)
    for site_id, k in zip(uniq.tolist(), first.tolist()):
        for kind, pat in ptxlog.ADDRESS_SEEDS:
            if pat.match(sites[site_id].text) and (kind not in space_base or k < space_base[kind][1]):
                space_base[kind] = (int(log.values[k]), k)
    width = np.array([st.width for st in sites], np.int64)[sid]
    masks = np.where(width >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                     (np.uint64(1) << np.minimum(width, 63).astype(np.uint64)) - np.uint64(1))
    space_of = np.array([next((kinds.index(a) for a in st.address if a in space_base), -1) for st in sites],
                        np.int64)[sid]
    for j, kind in enumerate(kinds):
        sel = space_of == j
        if sel.any():
            tags[sel] = 1000 + j
            payload[sel] = (log.values[sel] - np.uint64(space_base[kind][0])) & masks[sel]
            labels[1000 + j] = kind
    return tags, payload, labels, (width == 64) & (space_of < 0)


def _offsets(values: np.ndarray, base: int) -> np.ndarray:
    """value - base, as signed 64-bit offsets (two's complement wrap-around)."""
    return (values.astype(np.uint64) - np.uint64(base)).view(np.int64)


def _same_argument_offset(la: ThreadLog, lb: ThreadLog, n: int, sites, kernel: str, arg_bytes: dict[int, int],
                          wide: np.ndarray) -> np.ndarray:
    """Over the first ``n`` entries: where both values lie at the same offset from ONE argument's address in
    their run (an offset within :func:`_reach` of that argument's array, which may lie past its end or
    before its start). The candidate arguments of an entry are those its site is derived from
    (:func:`_argument_taint`) when any is known, else every array argument: on the GPU a pointer past the
    end of one array may point into the next one, and the interpreter places arrays elsewhere."""
    ba = _argument_bases(la, sites, kernel, arg_bytes)
    bb = _argument_bases(lb, sites, kernel, arg_bytes)
    common = sorted(set(ba) & set(bb))
    same = np.zeros(n, bool)
    if not common or n == 0:
        return same
    col = {k: j for j, k in enumerate(common)}
    cand = np.ones((len(sites), len(common)), bool)
    for i, derived in enumerate(_argument_taint(sites, kernel)):
        known = [col[k] for k in derived if k in col]
        if known:
            cand[i] = False
            cand[i, known] = True
    sid = la.sites[:n].astype(np.int64)
    va, vb = la.values[:n], lb.values[:n]
    for k, j in col.items():
        oa, ob = _offsets(va, ba[k]), _offsets(vb, bb[k])
        size = int(arg_bytes[k])
        near = (oa >= -_reach(size)) & (oa <= size + _reach(size))
        same |= cand[sid, j] & (oa == ob) & near
    return same & wide


def _nearest_argument(value: int, bases: dict[int, int], arg_bytes: dict[int, int]) -> tuple[int, int] | None:
    """(argument, offset) of the array nearest to an address: the one it lies in, else the one it lies
    closest past the end of or before the start of (within :func:`_reach`); None: near none."""
    best = None
    for arg, base in bases.items():
        size = int(arg_bytes[arg])
        off = value - base
        dist = -off if off < 0 else (0 if off < size else off - size + 1)
        if dist <= _reach(size) and (best is None or dist < best[0]):
            best = (dist, arg, off)
    return None if best is None else (best[1], best[2])


def _describe(value: int, site: Site, tag: int, payload: int, labels: dict, bases: dict[int, int],
              arg_bytes: dict[int, int]) -> str | None:
    """An entry's value as an address, where it reads as one: an offset from a window, or from the
    nearest argument's array."""
    if tag:
        off = int(payload)
        off = off - (1 << 64) if off >= 1 << 63 else off
        return f"{labels.get(tag, '?')}{'+' if off >= 0 else '-'}{abs(off):#x}"
    if site.width != 64 or not bases:
        return None
    near = _nearest_argument(int(value), bases, arg_bytes)
    if near is None:
        return None
    arg, off = near
    return f"args[{arg}]{'+' if off >= 0 else '-'}{abs(off):#x}"


def compare_logs(kernel: str, names, thread: Thread, la: ThreadLog, lb: ThreadLog, sites,
                 arg_bytes: dict[int, int] | None = None) -> Divergence:
    """The first entry where two logs differ in site or value. Addresses are compared as offsets: from
    the generic windows and the stack, and from the argument arrays of ``arg_bytes`` {argument: bytes}
    (two 64-bit values agree when they lie at the same offset from one argument's address in their runs,
    :func:`_same_argument_offset`); a differing address is shown as an offset from the nearest array."""
    arg_bytes = dict(arg_bytes or {})
    n = min(len(la), len(lb))
    ta, pa, lab_a, wide_a = _window_keys(la, sites)
    tb, pb, lab_b, wide_b = _window_keys(lb, sites)
    same_site = la.sites[:n] == lb.sites[:n]
    # an entry agrees when the sites agree and the bits agree, or both read as the same address
    same_bits = la.values[:n] == lb.values[:n]
    same_window = (ta[:n] == tb[:n]) & (ta[:n] != 0) & (pa[:n] == pb[:n])
    same_arg = _same_argument_offset(la, lb, n, sites, kernel, arg_bytes, wide_a[:n] & wide_b[:n] & same_site)
    diff = np.flatnonzero(~same_site | ~(same_bits | same_window | same_arg))
    differing = len(diff) + (0 if la.overflowed or lb.overflowed else abs(len(la) - len(lb)))
    if len(diff) == 0 and len(la) != len(lb) and not (la.overflowed or lb.overflowed):
        # one thread stopped logging earlier: the first extra entry is where they part
        diff = np.array([n])
    if len(diff) == 0:
        return Divergence(kernel, tuple(names), thread, (la, lb), tuple(sites), None, differing=differing)
    k = int(diff[0])
    longer = la if k < len(la) else lb
    sid = int(longer.sites[k])
    site = sites[sid]
    other = None
    if k < len(la) and k < len(lb) and la.sites[k] != lb.sites[k]:
        other = sites[int(lb.sites[k])]
    occurrence = int(np.count_nonzero(longer.sites[:k + 1] == sid))
    va = int(la.values[k]) if k < len(la) else None
    vb = int(lb.values[k]) if k < len(lb) else None
    d = Divergence(kernel, tuple(names), thread, (la, lb), tuple(sites), k, site, other, occurrence, (va, vb),
                   differing=differing)
    d.addresses = tuple(
        _describe(int(log.values[k]), sites[int(log.sites[k])], int(t[k]), int(p[k]), lab,
                  _argument_bases(log, sites, kernel, arg_bytes), arg_bytes) if k < len(log) else None
        for log, t, p, lab in ((la, ta, pa, lab_a), (lb, tb, pb, lab_b)))
    return d


#: PTX opcode -> SASS opcodes it usually becomes (to pick, among the SASS of a source line, the
#: instructions that can be the site's; the line table of -lineinfo is coarse)
_SASS_OF = {
    "fma": ("FFMA", "HFMA2", "DFMA"), "mad": ("IMAD", "FFMA", "HFMA2"),
    "add": ("FADD", "FFMA", "IADD", "VIADD", "HADD2", "HFMA2", "DADD", "IMAD", "LEA"),
    "sub": ("FADD", "FFMA", "IADD", "VIADD", "HADD2", "HFMA2", "DADD", "IMAD", "LEA"),
    "mul": ("FMUL", "FFMA", "IMAD", "HMUL2", "HFMA2", "DMUL", "LEA", "SHF", "IMUL"),
    "div": ("MUFU", "FFMA", "FCHK", "CALL"), "rcp": ("MUFU", "FFMA"), "sqrt": ("MUFU", "FFMA"),
    "rsqrt": ("MUFU",), "ex2": ("MUFU", "FMUL", "FADD"), "lg2": ("MUFU", "FADD"), "sin": ("MUFU",),
    "cos": ("MUFU",), "tanh": ("MUFU",),
    "ld": ("LD", "LDG", "LDS", "LDL", "LDC", "ULDC"), "ldu": ("LDG",), "ldmatrix": ("LDSM",),
    "movmatrix": ("MOVM",), "mma": ("HMMA", "IMMA"), "shfl": ("SHFL",), "vote": ("VOTE",),
    "atom": ("ATOM", "ATOMS", "ATOMG", "RED"), "redux": ("REDUX",), "match": ("MATCH",),
    "setp": ("FSETP", "ISETP", "HSETP2", "DSETP"), "set": ("FSET", "ISET", "HSET2", "FSETP", "ISETP", "SEL"),
    "selp": ("SEL", "FSEL"), "cvt": ("F2F", "F2I", "I2F", "F2FP", "I2FP", "FRND", "PRMT", "HADD2", "IMAD", "SHF"),
    "min": ("FMNMX", "IMNMX", "VIMNMX", "HMNMX2"), "max": ("FMNMX", "IMNMX", "VIMNMX", "HMNMX2"),
    "and": ("LOP3",), "or": ("LOP3",), "xor": ("LOP3",), "not": ("LOP3",), "lop3": ("LOP3",),
    "shl": ("SHF", "IMAD", "LEA", "SHL"), "shr": ("SHF", "SHR"), "shf": ("SHF",), "prmt": ("PRMT",),
    "mov": ("MOV", "IMAD", "S2R", "S2UR", "UMOV", "CS2R", "PRMT"),
}


def _sass_for(module, kernel: str, site: Site) -> list[str]:
    """The SASS of the site's source line in ``module`` that the interpreter executed, with execution
    counts: the instructions whose opcode the site's PTX instruction can become, else all of them."""
    try:
        prog = module.get_function(kernel)._prog()
    except Exception:  # the context is a nicety: never hide the divergence behind it
        return []
    try:  # the log pointer's constant-bank slot (sm_90 kernel parameters start at c[0x0][0x210])
        log_slot = f"c[0x0][{0x210 + module._elf.kernels[kernel].params[-1].offset:#x}]"
    except (AttributeError, IndexError, KeyError):
        log_slot = None
    want = set()
    for fl in ((site.file, site.line), site.inlined_at):
        if fl and fl[0] and fl[1]:
            want.add((fl[0].rsplit("/", 1)[-1], int(fl[1])))
    rows = []
    for pc, ins in sorted(prog.instructions.items()):
        if ins.line is None:
            continue
        f, ln = ins.line
        if (str(f).rsplit("/", 1)[-1], int(ln)) in want and not (log_slot and log_slot in ins.text):
            hits = int(prog.hits[pc >> 4]) if (pc >> 4) < len(prog.hits) else 0
            if hits:
                rows.append((ins.opcode, f"pc={pc:#06x} {ins.text} (x{hits})"))
    family = _SASS_OF.get(site.text.split(".")[0].split()[0])
    if family:
        picked = [r for op, r in rows if op.startswith(family)]
        if picked:
            return picked
    return [r for _, r in rows]


def locate_first_divergence(build, kernel: str, grid, block, args: Sequence[Any], *, thread: Thread,
                            runners: tuple[Runner, Runner] | None = None,
                            names: tuple[str, str] = ("GPU", "interpreter"),
                            capacity: int = DEFAULT_CAPACITY, shared_mem: int = 0, exec_options=None,
                            plain_outputs_differ: bool | None = None) -> Divergence:
    """Run the instrumented build of ``kernel`` (of the :class:`~flashsim.sass.toolchain.CudaBuild`
    ``build``) with both runners on ``args`` plus a log for ``thread``, and compare the logs."""
    ins, cubin = instrumented_build(build, kernel)
    if runners is None:
        runners = (gpu_runner(ins.kernel, grid, block, shared_mem),
                   interpreter_runner(ins.kernel, grid, block, shared_mem, exec_options))
    if len(runners) != 2 or not all(callable(r) for r in runners):
        raise bad_argument("runners", runners, "expected two callables (cubin bytes, args) -> list of arrays")
    outs = []
    for r in runners:
        buf = ptxlog.log_buffer(capacity, thread.ctaid, thread.tid)
        full = [np.copy(a) if _is_array(a) else a for a in args] + [buf]
        got = r(cubin, full)
        if not isinstance(got, (list, tuple)) or len(got) != len(full):
            raise bad_argument("runners", r, f"a runner must return one entry per argument ({len(full)}), "
                                             f"got {type(got).__name__}")
        outs.append(list(got))
    la, lb = ptxlog.read_log(outs[0][-1]), ptxlog.read_log(outs[1][-1])
    arg_bytes = {i: int(np.asarray(a).nbytes) for i, a in enumerate(args) if _is_array(a)}
    d = compare_logs(ins.kernel, names, thread, la, lb, ins.sites, arg_bytes)
    d.not_logged = ins.not_logged
    d.plain_outputs_differ = plain_outputs_differ
    d.outputs_differ = any(_differ(x, y) for x, y in zip(outs[0][:-1], outs[1][:-1]))
    if d.site is not None:
        for r in (runners[1], runners[0]):
            mod = getattr(r, "module", None)
            if mod is not None:
                d.sass = _sass_for(mod, ins.kernel, d.site)
                break
    return d


def _differ(x, y) -> bool:
    if x is None or y is None:
        return False
    x, y = np.asarray(x), np.asarray(y)
    return x.shape != y.shape or x.tobytes() != y.tobytes()


# ------------------------------------------------------------------------------------------------------
# From outputs to the thread, and the whole way
# ------------------------------------------------------------------------------------------------------

def storing_thread(module, kernel: str, grid, block, args: Sequence[Any], array: int, flat: int, *,
                   shared_mem: int = 0, exec_options=None) -> Thread | None:
    """The thread whose store last wrote element ``flat`` of ``args[array]``, in an interpreted run of the
    module (None: no STG/ST wrote it, e.g. an atomic)."""
    import flashsim.cuda as fc  # numba: imported on first use (see interpreter_runner)

    g, b = _dims("grid", grid), _dims("block", block)
    f = module.get_function(kernel)
    if shared_mem > f.max_dynamic_shared_size_bytes:
        f.max_dynamic_shared_size_bytes = shared_mem
    dev = [fc.asarray(a) if _is_array(a) else a for a in args]
    d = dev[array]
    lo = d.data.ptr + flat * d.itemsize
    with fc.checking(banks=False) as report:
        report.watch_global = (lo, lo + d.itemsize)
        f(g, b, tuple(dev), shared_mem=shared_mem, exec_options=exec_options)
    if not report.writes:
        return None
    acc = report.writes[-1]["access"]
    return Thread.of(g, b, ctaid=acc.ctaid, warp=acc.warp, lane=acc.lane)


def _first_difference(want: list, got: list):
    for i, (w, g) in enumerate(zip(want, got)):
        if w is None or g is None:
            continue
        w, g = np.asarray(w), np.asarray(g)
        item = w.dtype.itemsize
        bw = w.reshape(-1).view(np.uint8).reshape(-1, item)
        bg = g.reshape(-1).view(np.uint8).reshape(-1, item)
        neq = (bw != bg).any(axis=1)
        if neq.any():
            return i, int(np.flatnonzero(neq)[0])
    return None


def locate(module, kernel: str, grid, block, args: Sequence[Any], *, runners: tuple[Runner, Runner] | None = None,
           names: tuple[str, str] = ("GPU", "interpreter"), capacity: int = DEFAULT_CAPACITY, shared_mem: int = 0,
           exec_options=None, thread: Thread | None = None) -> Divergence | None:
    """Run ``kernel`` of ``module`` (a flashsim.cuda.RawModule built from source) with both runners; if an
    output differs, locate the first register write where they part in the thread that stored the first
    differing element (or in ``thread``). None when the outputs agree."""
    build = getattr(module, "build", None)
    if build is None:
        raise LocateError(f"kernel {kernel!r}: locating the first divergence needs the module's CUDA source "
                          "(build it with flashsim.cuda.RawModule(code=...)); this module came from cubin bytes")
    entry = module._lowered.get(kernel, kernel)
    g, b = _dims("grid", grid), _dims("block", block)
    plain = runners
    if plain is None:
        plain = (gpu_runner(entry, g, b, shared_mem), interpreter_runner(entry, g, b, shared_mem, exec_options))
    arrays = [np.ascontiguousarray(a) if _is_array(a) else a for a in args]
    want = plain[0](module.cubin, [np.copy(a) if _is_array(a) else a for a in arrays])
    got = plain[1](module.cubin, [np.copy(a) if _is_array(a) else a for a in arrays])
    first = _first_difference(want, got)
    if first is None and thread is None:
        return None
    if thread is None:
        thread = storing_thread(module, kernel, g, b, arrays, first[0], first[1], shared_mem=shared_mem,
                                exec_options=exec_options)
        if thread is None:
            raise LocateError(f"kernel {kernel!r}: no store of the interpreter wrote args[{first[0]}] element "
                              f"{first[1]} (an atomic?), so there is no thread to log; pass thread=")
    return locate_first_divergence(build, kernel, g, b, arrays, thread=thread, runners=runners, names=names,
                                   capacity=capacity, shared_mem=shared_mem, exec_options=exec_options,
                                   plain_outputs_differ=first is not None)
