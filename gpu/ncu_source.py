"""Nsight Compute's per-instruction source counters against the interpreter's per-PC counters.

    python -m flashsim.gpu.ncu_source --out DIR [--ncu PATH] [--timeout S] [--dry-run] [--cases NAMES]
                             [--workers N] [--csv-dir DIR2] [--list]

For every case of CASES (the four FlashAttention kernels v5, v6, kernel1, fa2 -- fa2 also causal bf16 with
a seqlen that is not a multiple of its tiles --, the three kernels of gpu/attn_extra.py, the kernels
of gpu/kernels/probe_banks_source.cu, whose every shared-memory instruction exercises one bank rule, and
those of gpu/kernels/probe_ldgsts.cu, one cp.async pattern per instruction):

(a) the GPU runs the case's kernel once from the very cubin bytes the interpreter runs, under
    ``ncu --clock-control none --section SourceCounters --kernel-name regex:^NAME$ --launch-count 1``
    (one report per case), and ``ncu -i REP --page source --csv --print-source sass`` prints its SASS
    table: per instruction (absolute address; the first row is PC 0) "Instructions Executed",
    "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal", ...; where that page gives no table the
    ``ncu_report`` Python module of Nsight Compute is read instead;
(b) the interpreter runs the same launch under ``flashsim.cuda.checking(banks=True)`` (cases in parallel
    processes), giving per PC the warp-level executions (``report.executed()``) and the bank counters
    (``report.bank_sites()``).

Compared per PC: the SASS text (the opcode must be the same at every PC, so an offset error cannot pass),
for every shared-memory instruction (ncu counts wavefronts there, or the interpreter has a BankSite, or
it is an LDS/STS/LDSM/STSM/LDGSTS/ATOMS) the wavefronts, the ideal wavefronts and the warp-level
executions, and, separately, the executions of every instruction (the interpreter's control flow).
32-bit shared atomics (ATOMS, generic ATOM/RED on shared memory) are modelled; 64-bit ones and the
compare-and-store loops of float/64-bit atomicAdd (ATOMS.CAST.SPIN) are measured, shown, never a failure.
Executions of convergence barriers (BSYNC, WARPSYNC) are listed apart and do not fail a case: the GPU
counts one execution per group of lanes that arrives, the interpreter one per step that reaches it
(lanes of a warp that took different paths arrive together when the lowest PC runs first).

Writes DIR/ncu_source.md, DIR/ncu_source.json and DIR/raw/ (per case: the ncu report, its CSV, the ncu
log); prints one line per case and a summary line. Exit status: 0 when every modelled instruction
agrees, 1 on any difference, 2 when ncu could not measure (not found, no permission, no table).
``--dry-run`` runs (b) only (no GPU); ``--csv-dir`` compares against the CSVs (or .csv.gz) of an earlier run
(DIR2/raw/CASE.csv) instead of running ncu. On the GPU machine::

    python -m flashsim.gpu.ncu_source --out out/ncu_source
"""

from __future__ import annotations

import argparse
import gzip
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from flashsim.gpu.runtime import CheckError

__all__ = ["CASES", "Case", "NcuSourceError", "SourceRow", "SourceTable", "compare_case", "interpret_case",
           "main", "parse_source_csv", "probe_lines"]

REPO = Path(__file__).resolve().parents[1]
PROBE_FILE = "probe_banks_source.cu"
LDGSTS_PROBE_FILE = "probe_ldgsts.cu"  # cp.async patterns (cases probe_ldgsts, probe_ldgsts_warps)
ZFILL_PROBE_FILE = "probe_ldgsts_zfill.cu"  # cp.async.cg .ZFILL and ignore-src in / off P0 (case probe_ldgsts_zfill)
#: base opcodes that access shared memory (generic LD/ST/ATOM/RED may too: see _shared_pcs)
SHARED_OPCODES = frozenset({"LDS", "STS", "LDSM", "STSM", "LDGSTS", "ATOMS"})
GENERIC_OPCODES = frozenset({"LD", "ST", "ATOM", "RED"})
#: what flashsim.smem has no bank rule for: measured and shown, never compared
NOT_MODELLED = frozenset({"ATOMS.CAST", "ATOMS.64", "ATOM.64", "RED.64"})  # forms (opcode + a modifier)
CONVERGENCE = frozenset({"BSYNC", "WARPSYNC"})  # executions per arriving group on the GPU: listed apart
CHILD_TAG = "ncu_source-child:"


class NcuSourceError(CheckError):
    """ncu's source page could not be read (no table, a missing column, a malformed row); says where."""


# ---------------------------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One kernel launch: the source file and NVRTC options of its cubin, the entry point, a description
    of the problem, and ``run(backend)`` that launches it once ('interp': the interpreter, 'gpu': the
    GPU running the interpreter's cubin)."""

    name: str
    file: str
    function: str
    problem: str
    run: Callable[[str], Any] = field(repr=False, compare=False)
    options: tuple[str, ...] = ()
    probe: bool = False


def _qkv(b, sq, sk, h, d, dtype, seed):
    import ml_dtypes

    dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float32).astype(dt)
                 for s in ((b, sq, h, d), (b, sk, h, d), (b, sk, h, d)))


def _fa_case(name, kernel, b, sq, sk, h, d, dtype, seed, **masks) -> Case:
    from flashsim.kernels.launch import run_kernel
    from flashsim.kernels.spec import get

    spec = get(kernel)
    function = spec.instance_for_headdim(d).function(dtype)

    def run(backend: str):
        q, k, v = _qkv(b, sq, sk, h, d, dtype, seed)
        run_kernel(kernel, q, k, v, backend="interp" if backend == "interp" else "gpu-cubin", **masks)

    extra = "".join(f" {m}" for m, on in masks.items() if on)
    return Case(name, spec.source, function, f"{kernel} b={b} sq={sq} sk={sk} h={h} d={d} {dtype}{extra}", run,
                spec.build_options())


def _extra_case(name, kernel, seed, **kw) -> Case:
    from flashsim.gpu import attn_extra

    spec = attn_extra.EXTRA_KERNELS[kernel]
    function = spec.function(kw.get("dtype", "float16"), kw.get("headdim", 64))

    def run(backend: str):
        attn_extra.make_problem(kernel, seed, **kw).run("interp" if backend == "interp" else "gpu")

    desc = " ".join(f"{k}={v}" for k, v in kw.items())
    return Case(name, spec.file, function, f"{kernel} {desc}", run, spec.options)


def _probe_case(name, function, file=PROBE_FILE, threads=32, gsrc_bytes=4096) -> Case:
    """One launch of ``function`` of the probe file ``file`` (gpu/kernels): one block of ``threads``
    threads, arguments (gsrc, sink): gsrc holds the bytes of the u32 values 0, 1, 2, ... (``gsrc_bytes``
    of them; byte 1 is a zero the compiler cannot see), sink one u32 per thread."""

    def run(backend: str):
        from flashsim.gpu import runtime

        gsrc = np.arange(gsrc_bytes // 4, dtype=np.uint32).view(np.uint8)  # cp.async reads gsrc + 16 * lane
        if backend == "interp":
            import flashsim.cuda as fc

            f = runtime.interpreted_module(file).get_function(function)
            f((1,), (threads,), (fc.asarray(gsrc), fc.zeros(threads, np.uint32)))
        else:
            cupy = runtime.require_gpu()
            k = runtime.get_cubin_kernel(file, function)
            runtime.launch(k, 1, threads, (cupy.asarray(gsrc), cupy.zeros(threads, cupy.uint32)))

    warps = "one warp" if threads == 32 else f"{threads // 32} warps"
    return Case(name, file, function, f"{function}: {warps}, one instruction per probe line", run, (), probe=True)


RANDOM_LDGSTS_FILE = "probe_ldgsts_random.cu"  # drawn cp.async patterns (case probe_ldgsts_random)
RANDOM_LDGSTS_PROBES = 48  # RL_PROBES of the file
RANDOM_LDGSTS_FORMS = ("cg16", "ca16", "ca8", "ca4", "cg16_ign", "cg16_sz")  # probe i has form i % 6


def random_ldgsts_tables(seed: int = 2026) -> np.ndarray:
    """gsrc of probe_ldgsts_random.cu: per probe and lane the destination offset, the source offset, the
    guard and the auxiliary word (ignore-src or src-size), then 8 KiB of source bytes. Destinations are drawn
    as permutations of slots, strides (1 to 32 slots), a few repeated slots or an XOR swizzle, in a window
    of 512 B to 8 KiB; sources as consecutive slots, permutations, one address for all or repeated ones;
    guards all on, half on at random, a prefix of lanes or none."""
    rng = np.random.default_rng(seed)
    n = RANDOM_LDGSTS_PROBES
    dst, src, on, aux = (np.zeros((n, 32), np.uint32) for _ in range(4))
    lane = np.arange(32)
    for i in range(n):
        form = RANDOM_LDGSTS_FORMS[i % 6]
        size = {"ca8": 8, "ca4": 4}.get(form, 16)
        window = int(rng.choice([512, 1024, 2048, 4096, 8192]))
        slots = window // size
        kind = rng.integers(4)
        if kind == 0:
            d = rng.permutation(slots)[:32] if slots >= 32 else rng.integers(slots, size=32)
        elif kind == 1:
            d = (lane * int(rng.choice([1, 2, 3, 4, 8, 16, 32])) + int(rng.integers(8))) % slots
        elif kind == 2:
            d = rng.choice(rng.integers(slots, size=int(rng.integers(1, 9))), size=32)
        else:
            d = (lane ^ int(rng.integers(32))) * int(rng.choice([1, 2, 8])) % slots
        skind = rng.integers(4)
        sslots = 8192 // size
        if skind == 0:
            s = lane + int(rng.integers(64))
        elif skind == 1:
            s = rng.permutation(sslots)[:32]
        elif skind == 2:
            s = np.full(32, int(rng.integers(sslots)))
        else:
            s = rng.choice(rng.integers(sslots, size=4), size=32)
        gkind = rng.random()
        g = (np.ones(32) if gkind < 0.4 else rng.random(32) < 0.5 if gkind < 0.75
             else lane < int(rng.integers(1, 32)) if gkind < 0.95 else np.zeros(32))
        dst[i], src[i] = (d % slots) * size, (s % sslots) * size
        on[i] = g if form in ("cg16", "ca16", "ca8", "ca4") else 1
        if form == "cg16_ign":
            aux[i] = rng.random(32) < float(rng.choice([0.0, 0.25, 0.5, 1.0]))
        elif form == "cg16_sz":
            aux[i] = rng.choice([0, 4, 8, 16], size=32) if rng.random() < 0.5 else int(rng.choice([0, 4, 8, 16]))
    data = np.arange(2048, dtype=np.uint32)
    return np.concatenate([dst.ravel(), src.ravel(), on.ravel(), aux.ravel(), data]).view(np.uint8)


def _random_ldgsts_case(name: str = "probe_ldgsts_random", seed: int = 2026) -> Case:
    """probe_ldgsts_random.cu (one kernel for every seed) on the tables of random_ldgsts_tables(seed)."""
    def run(backend: str):
        from flashsim.gpu import runtime

        gsrc = random_ldgsts_tables(seed)
        if backend == "interp":
            import flashsim.cuda as fc

            f = runtime.interpreted_module(RANDOM_LDGSTS_FILE).get_function("probe_ldgsts_random")
            f((1,), (32,), (fc.asarray(gsrc), fc.zeros(32, np.uint32)))
        else:
            cupy = runtime.require_gpu()
            k = runtime.get_cubin_kernel(RANDOM_LDGSTS_FILE, "probe_ldgsts_random")
            runtime.launch(k, 1, 32, (cupy.asarray(gsrc), cupy.zeros(32, cupy.uint32)))

    return Case(name, RANDOM_LDGSTS_FILE, "probe_ldgsts_random",
                f"{name}: one warp, 48 drawn cp.async patterns (seed {seed}; held out from the rule's fit)", run, (),
                probe=True)


def _cases() -> dict[str, Case]:
    cs = [
        _fa_case("v5", "v5", 1, 128, 128, 2, 128, "float16", 1),
        _fa_case("v6", "v6", 1, 128, 128, 2, 128, "float16", 2),
        _fa_case("kernel1", "kernel1", 1, 128, 128, 2, 128, "float16", 3),
        _fa_case("fa2", "fa2", 1, 256, 256, 1, 128, "float16", 4),
        _fa_case("fa2_causal_bf16", "fa2", 1, 200, 200, 1, 64, "bfloat16", 5, causal=True),
        _fa_case("fa2_sm8x_causal", "fa2_sm8x", 1, 200, 200, 1, 128, "bfloat16", 9, causal=True),
        _extra_case("attn_regs", "attn_regs", 6, seqlens_q=100, seqlens_k=130, headdim=64, dtype="float16",
                    causal=True),
        _extra_case("attn_spill", "attn_spill", 7, seqlens_q=130, seqlens_k=70, headdim=64, dtype="float16"),
        _extra_case("attn_varlen", "attn_varlen", 8, seqlens_q=[50, 0, 70], seqlens_k=[60, 30, 40], headdim=64,
                    dtype="float16"),
        _probe_case("probe_ldst", "probe_banks_ldst"),
        _probe_case("probe_matrix", "probe_banks_matrix"),
        _probe_case("probe_atomics", "probe_banks_atomics"),
        _probe_case("probe_atomics_more", "probe_banks_atomics_more"),
        _probe_case("probe_ldgsts", "probe_ldgsts", LDGSTS_PROBE_FILE, 32, 8192),
        _probe_case("probe_ldgsts_warps", "probe_ldgsts_warps", LDGSTS_PROBE_FILE, 64, 8192),
        _random_ldgsts_case(),
        _random_ldgsts_case("probe_ldgsts_random2", 2027),
        _random_ldgsts_case("probe_ldgsts_random3", 2028),
        _random_ldgsts_case("probe_ldgsts_random4", 2029),
        _probe_case("probe_ldgsts_zfill", "probe_ldgsts_zfill", ZFILL_PROBE_FILE, 32, 8192),
    ]
    return {c.name: c for c in cs}


CASES: dict[str, Case] = _cases()


def probe_lines(path: Path | None = None) -> dict[int, str]:
    """{source line: probe name} of a probe file (default gpu/kernels/probe_banks_source.cu): every use of
    a macro whose first parameter is NAME (``LDS_32(ld32_linear, true, lane * 4u);``) names the
    instruction(s) of its line. Preprocessor lines and comment lines are not uses."""
    from flashsim.gpu import runtime

    text = (path or runtime.kernel_path(PROBE_FILE)).read_text(encoding="utf-8")
    macros = set(re.findall(r"^#define\s+(\w+)\(NAME\b", text, re.MULTILINE))
    out: dict[int, str] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("#", "//")):
            continue
        for m in re.finditer(r"\b(\w+)\((\w+)\s*,", line.split("//", 1)[0]):
            if m.group(1) in macros:
                out[i] = m.group(2)
                break
    return out


# ---------------------------------------------------------------------------------------------- (b) interpreter


def _program(case: Case):
    from flashsim.gpu import runtime

    mod = runtime.interpreted_module(case.file, options=case.options)
    return mod, mod.get_function(case.function)._prog()


def interpret_case(name: str) -> dict:
    """Run case ``name`` in the interpreter under checking(banks=True): its program (pc, SASS, source
    line of every instruction), warp-level executions per PC and bank sites, as plain JSON data.
    ``error`` is set (and the counters empty) when the interpreter could not run it; ``error_kind`` is
    'unsupported' for an instruction it does not model, else 'failed'."""
    import flashsim.cuda as fc

    case = CASES[name]
    mod, prog = _program(case)
    from flashsim.gpu import runtime

    lines = probe_lines(runtime.kernel_path(case.file)) if case.probe else {}
    instructions = []
    for pc in sorted(prog.instructions):
        ins = prog.instructions[pc]
        ln = ins.line[1] if ins.line else None
        probe = lines.get(ln) if ln is not None and ins.line[0].endswith(case.file) else None
        instructions.append({"pc": pc, "sass": ins.text, "line": ln, "probe": probe})
    out = {"case": name, "kernel": case.function, "problem": case.problem, "cubin_sha256": mod.sha256,
           "error": None, "error_kind": None, "seconds": None, "instructions": instructions,
           "executed": [], "banks": [], "totals": {}}
    t = time.perf_counter()
    try:
        with fc.checking(banks=True) as rep:
            case.run("interp")
    except NotImplementedError as exc:
        out["error"], out["error_kind"] = f"{exc}", "unsupported"
    except Exception as exc:  # a fault or a bug: reported with the case, the others go on
        out["error"], out["error_kind"] = f"{type(exc).__name__}: {exc}", "failed"
    else:
        out["executed"] = sorted([pc, int(n)] for (_, pc), n in rep.executed(case.function).items())
        out["banks"] = [{"pc": s.pc, "sass": s.sass, "op": s.op, "executions": s.executions,
                         "wavefronts": s.wavefronts, "ideal": s.ideal, "line": s.line}
                        for s in rep.bank_sites(case.function, order="pc")]
        out["totals"] = rep.bank_totals().get(case.function, {"executions": 0, "wavefronts": 0, "ideal": 0,
                                                              "conflicts": 0})
    out["seconds"] = round(time.perf_counter() - t, 2)
    return out


def interpret_all(names: list[str], workers: int) -> dict[str, dict]:
    """interpret_case for every name, in ``workers`` processes (in this one when 1)."""
    if workers <= 1 or len(names) <= 1:
        return {n: interpret_case(n) for n in names}
    return _collect(_submit(names, workers))


def _submit(names: list[str], workers: int):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    # the slowest (FA) cases first
    order = sorted(names, key=lambda n: CASES[n].probe)
    return pool, {n: pool.submit(interpret_case, n) for n in order}


def _collect(submitted) -> dict[str, dict]:
    pool, futs = submitted
    try:
        out = {}
        for n, f in futs.items():
            try:
                out[n] = f.result()
            except Exception as exc:  # the worker died (e.g. out of memory): the case says so
                out[n] = {"case": n, "kernel": CASES[n].function, "problem": CASES[n].problem, "cubin_sha256": "",
                          "error": f"worker failed: {type(exc).__name__}: {exc}", "error_kind": "failed",
                          "seconds": None, "instructions": [], "executed": [], "banks": [], "totals": {}}
        return out
    finally:
        pool.shutdown()


# ---------------------------------------------------------------------------------------------- (a) ncu

_NUM_JUNK = str.maketrans("", "", ", \u00a0\u202f'")


def _number(cell: str, column: str, where: str, *, integral: bool = True):
    """A count from a cell: thousands separators dropped; '-', '' and 'N/A' are None (not applicable)."""
    t = cell.strip()
    if t in ("", "-", "N/A", "n/a"):
        return None
    t = t.translate(_NUM_JUNK)
    try:
        v = float(t)
    except ValueError:
        raise NcuSourceError(f"{where}: column {column!r} holds {cell!r}, not a number") from None
    if integral:
        if not v.is_integer():
            raise NcuSourceError(f"{where}: column {column!r} holds {cell!r}, not a whole count")
        return int(v)
    return v


@dataclass
class SourceRow:
    """One SASS instruction of ncu's source page."""

    address: int
    pc: int
    sass: str
    executed: int | None
    wavefronts: int | None
    ideal: int | None
    excessive: int | None = None
    nway: float | None = None
    space: str = ""
    access: str = ""
    size: str = ""


@dataclass
class SourceTable:
    """The SASS table of one profiled kernel launch."""

    kernel: str
    columns: list[str]
    rows: list[SourceRow]

    def by_pc(self) -> dict[int, SourceRow]:
        return {r.pc: r for r in self.rows}


REQUIRED = ("Address", "Source", "Instructions Executed", "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal")
_ADDR_RE = re.compile(r"^0x[0-9a-fA-F]+$")


def _kernel_base(name: str) -> str:
    return name.strip().split("(", 1)[0].strip()


def parse_source_csv(text: str) -> list[SourceTable]:
    """The SASS tables of ``ncu -i REP --page source --csv --print-source sass`` output, one per kernel
    launch: a ``"Kernel Name","NAME"`` line, then a header line ("Address","Source",...) and one row per
    instruction. Counts may carry thousands separators; '-' (not applicable) reads as None. Raises
    NcuSourceError naming the line for a missing column, a malformed row or no table at all."""
    if not isinstance(text, str):
        raise NcuSourceError(f"expected the CSV text as a str, got {type(text).__name__}")
    tables: list[SourceTable] = []
    kernel = ""
    header: list[str] | None = None
    col: dict[str, int] = {}
    cur: SourceTable | None = None
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), 1):
        cells = [c.strip() for c in row]
        if not any(cells):
            continue
        if cells[0] == "Kernel Name":
            if len(cells) < 2 or not cells[1]:
                raise NcuSourceError(f"line {lineno}: a 'Kernel Name' line without a name: {row!r}")
            kernel, header, cur = _kernel_base(cells[1]), None, None
            continue
        if cells[0] == "Address" and "Source" in cells:
            header = cells
            while header and header[-1] == "":
                header = header[:-1]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise NcuSourceError(f"line {lineno}: the source table has no column {missing} (was the "
                                     f"SourceCounters section collected?); columns: {header}")
            col = {c: header.index(c) for c in header}
            cur = SourceTable(kernel, header, [])
            tables.append(cur)
            continue
        if cur is None or header is None:
            continue  # text before the first table (ncu's notes)
        if not _ADDR_RE.match(cells[0]):
            cur, header = None, None  # the table ended
            continue
        while len(cells) > len(header) and cells[-1] == "":
            cells = cells[:-1]
        where = f"line {lineno}"
        if len(cells) != len(header):
            raise NcuSourceError(f"{where}: {len(cells)} cells for {len(header)} columns: {row!r}")
        addr = int(cells[0], 16)
        if cur.rows:
            prev = cur.rows[-1].address
            if addr <= prev or (addr - prev) % 16:
                raise NcuSourceError(f"{where}: address {cells[0]} does not follow {prev:#x} by a multiple of 16")
        base = cur.rows[0].address if cur.rows else addr

        def get(name, integral=True):
            i = col.get(name)
            return None if i is None else _number(cells[i], name, where, integral=integral)

        cur.rows.append(SourceRow(
            address=addr, pc=addr - base, sass=cells[col["Source"]],
            executed=get("Instructions Executed"), wavefronts=get("L1 Wavefronts Shared"),
            ideal=get("L1 Wavefronts Shared Ideal"), excessive=get("L1 Wavefronts Shared Excessive"),
            nway=get("L1 Conflicts Shared N-Way", integral=False),
            space=cells[col["Address Space"]] if "Address Space" in col else "",
            access=cells[col["Access Operation"]] if "Access Operation" in col else "",
            size=cells[col["Access Size"]] if "Access Size" in col else ""))
    tables = [t for t in tables if t.rows]
    if not tables:
        raise NcuSourceError("no SASS source table in the ncu output (expected a header line starting "
                             "\"Address\",\"Source\" followed by rows of instructions)")
    return tables


def table_for(tables: list[SourceTable], kernel: str) -> SourceTable:
    """The table of ``kernel`` (an unnamed table stands for it when it is the only one)."""
    named = [t for t in tables if t.kernel == kernel]
    if named:
        return named[0]
    if len(tables) == 1 and not tables[0].kernel:
        return tables[0]
    raise NcuSourceError(f"no source table for kernel {kernel!r} (tables for: {[t.kernel for t in tables]})")


def _ncu_report_module(ncu: str):
    """Nsight Compute's ``ncu_report`` Python module (extras/python beside the ncu binary), or None."""
    try:
        import ncu_report  # type: ignore

        return ncu_report
    except ImportError:
        pass
    roots = [Path(shutil.which(ncu) or ncu).resolve().parent, *sorted(Path("/opt/nvidia").glob("nsight-compute/*"))]
    for root in roots:
        cand = root / "extras" / "python"
        if (cand / "ncu_report.py").is_file():
            sys.path.insert(0, str(cand))
            try:
                import ncu_report  # type: ignore

                return ncu_report
            except ImportError:
                sys.path.remove(str(cand))
    return None


def tables_from_report(report_path: Path, ncu: str) -> list[SourceTable]:
    """The same per-PC numbers from the .ncu-rep file through ``ncu_report`` (the fallback when the
    source page gives no table): inst_executed, memory_l1_wavefronts_shared(_ideal) per correlation id
    (absolute PC); the lowest executed address is PC 0."""
    mod = _ncu_report_module(ncu)
    if mod is None:
        raise NcuSourceError("the ncu_report Python module (Nsight Compute extras/python) was not found")
    ctx = mod.load_report(str(report_path))
    tables = []
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            act = rng.action_by_idx(ai)
            per: dict[str, dict[int, int]] = {}
            for key, metric in (("executed", "inst_executed"), ("wavefronts", "memory_l1_wavefronts_shared"),
                                ("ideal", "memory_l1_wavefronts_shared_ideal")):
                m = act.metric_by_name(metric)
                vals: dict[int, int] = {}
                if m is not None and m.num_instances() > 0:
                    ids = m.correlation_ids()
                    for i in range(m.num_instances()):
                        vals[int(ids.as_uint64(i))] = int(m.as_uint64(i))
                per[key] = vals
            if not per["executed"]:
                continue
            base = min(per["executed"])
            addrs = sorted(set().union(*per.values()))
            sass_of = getattr(act, "sass_by_pc", None)
            rows = [SourceRow(a, a - base, (sass_of(a) if sass_of else "") or "", per["executed"].get(a, 0),
                              per["wavefronts"].get(a), per["ideal"].get(a)) for a in addrs if a >= base]
            tables.append(SourceTable(_kernel_base(act.name()), list(REQUIRED), rows))
    if not tables:
        raise NcuSourceError(f"{report_path}: no action with per-instruction inst_executed")
    return tables


def _run(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except FileNotFoundError:
        raise CheckError(f"{cmd[0]} not found: install Nsight Compute or pass --ncu PATH") from None
    except subprocess.TimeoutExpired:
        raise CheckError(f"timed out after {timeout:.0f} s: {' '.join(cmd[:8])} ...") from None


def profile_case(case: Case, ncu: str, raw: Path, timeout: float) -> tuple[SourceTable, dict]:
    """Profile ``case`` on the GPU (one launch) and read its SASS table; returns it with what the child
    printed about itself (cubin sha256, device) and the commands. Raises CheckError when ncu cannot."""
    rep = raw / case.name
    prof = [ncu, "--clock-control", "none", "--section", "SourceCounters", "--kernel-name",
            f"regex:^{re.escape(case.function)}$", "--launch-count", "1", "-f", "-o", str(rep),
            sys.executable, "-m", "flashsim.gpu.ncu_source", "--launch", case.name]
    proc = _run(prof, timeout, cwd=REPO)
    log = f"$ {' '.join(prof)}\n(exit {proc.returncode})\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}\n"
    (raw / f"{case.name}.log").write_text(log, encoding="utf-8")
    both = proc.stdout + proc.stderr
    if "ERR_NVGPUCTRPERM" in both:
        raise CheckError("ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root or "
                         "allow profiling for all users")
    child = {}
    for line in both.splitlines():
        if line.startswith(CHILD_TAG):
            child = json.loads(line[len(CHILD_TAG):])
    report = rep.with_suffix(".ncu-rep")
    if proc.returncode != 0 or not report.is_file():
        raise CheckError(f"ncu exited {proc.returncode} without a report for {case.name} "
                         f"(see {raw / (case.name + '.log')}): {both.strip().splitlines()[-1:]}")
    export = [ncu, "-i", str(report), "--page", "source", "--csv", "--print-source", "sass"]
    out = _run(export, timeout)
    (raw / f"{case.name}.csv").write_text(out.stdout, encoding="utf-8")
    meta = {"profile": " ".join(prof), "export": " ".join(export), "child": child, "source": "csv"}
    try:
        tables = parse_source_csv(out.stdout)
    except NcuSourceError as exc:
        with open(raw / f"{case.name}.log", "a", encoding="utf-8") as fh:
            fh.write(f"$ {' '.join(export)}\n(exit {out.returncode})\n{out.stderr}\nCSV: {exc}\n")
        tables = tables_from_report(report, ncu)  # raises with its own reason
        meta["source"] = f"ncu_report (the CSV gave: {exc})"
    return table_for(tables, case.function), meta


def launch_child(name: str) -> None:
    """The profiled process: one launch of the case on the GPU, from the interpreter's cubin."""
    from flashsim.gpu import runtime

    case = CASES[name]
    mod = runtime.interpreted_module(case.file, options=case.options)
    info = runtime.device_info()
    case.run("gpu")
    print(CHILD_TAG + json.dumps({"case": name, "kernel": case.function, "cubin_sha256": mod.sha256,
                                  "device": info.get("name"), "driver": info.get("driver_release")}),
          file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- comparing


def _norm(sass: str) -> str:
    return re.sub(r"\s+", " ", sass.strip().rstrip(";").strip()).upper()


def sass_form(sass: str) -> str:
    """The opcode with its modifiers ('LDS.U.128'), without a guard predicate."""
    toks = _norm(sass).split(" ")
    if toks and toks[0].startswith("@"):
        toks = toks[1:]
    return toks[0].rstrip(",") if toks else ""


def base_opcode(sass: str) -> str:
    return sass_form(sass).split(".", 1)[0]


def _compact(sass: str) -> str:
    return re.sub(r"\s+", "", _norm(sass))


def compare_case(interp: dict, table: SourceTable | None) -> dict:
    """Per-PC comparison of one case; ``table`` None: the interpreter's numbers only (a dry run).

    Returns a dict: ``status`` (agree / DIFFER / not measured / interpreter error / PC mapping broken),
    ``shared`` (one row per shared-memory PC), ``executed`` (instructions compared, differing PCs),
    ``mapping`` (SASS checks) and counts."""
    prog = {d["pc"]: d for d in interp.get("instructions", [])}
    executed = {pc: n for pc, n in interp.get("executed", [])}
    banks = {b["pc"]: b for b in interp.get("banks", [])}
    ran = interp.get("error") is None
    ncu = table.by_pc() if table is not None else {}
    res: dict = {"case": interp["case"], "kernel": interp["kernel"], "problem": interp.get("problem", ""),
                 "interp_error": interp.get("error"), "interp_error_kind": interp.get("error_kind"),
                 "interp_seconds": interp.get("seconds"), "interp_totals": interp.get("totals", {}),
                 "instructions": len(prog), "ncu_instructions": len(ncu) if table is not None else None}

    # ---- the SASS at every PC both sides list
    mism, text_diff = [], 0
    both = sorted(set(prog) & set(ncu))
    for pc in both:
        a, b = prog[pc]["sass"], ncu[pc].sass
        if base_opcode(a) != base_opcode(b):
            mism.append({"pc": pc, "interp": a, "ncu": b})
        elif _compact(a) != _compact(b):
            text_diff += 1
    broken = table is not None and len(mism) > max(2, len(both) // 20)
    only_ncu = sorted(set(ncu) - set(prog))
    only_interp = sorted(set(prog) - set(ncu)) if table is not None else []
    res["mapping"] = {"compared": len(both), "opcode_mismatches": len(mism), "examples": mism[:20],
                      "text_differs": text_diff, "only_ncu": len(only_ncu), "only_interp": len(only_interp),
                      "broken": broken}
    bad_pcs = {m["pc"] for m in mism}

    # ---- shared-memory instructions
    rows = []
    for pc in _shared_pcs(prog, banks, ncu):
        sass = prog[pc]["sass"] if pc in prog else ncu[pc].sass
        n = ncu.get(pc)
        site = banks.get(pc)
        base = base_opcode(sass)
        row = {"pc": pc, "sass": sass, "form": sass_form(sass), "probe": prog.get(pc, {}).get("probe"),
               "line": prog.get(pc, {}).get("line"), "op": site["op"] if site else "",
               "modelled": not _not_modelled(sass),
               "interp": None if not ran else {"executed": executed.get(pc, 0),
                                               "wavefronts": site["wavefronts"] if site else 0,
                                               "ideal": site["ideal"] if site else 0,
                                               "active_executions": site["executions"] if site else 0},
               "ncu": None if n is None else {"executed": n.executed, "wavefronts": n.wavefronts, "ideal": n.ideal,
                                              "excessive": n.excessive, "nway": n.nway, "space": n.space,
                                              "access": n.access, "size": n.size}}
        row["status"] = _row_status(row, table is not None, ran, pc in bad_pcs, broken, pc in prog)
        rows.append(row)
    res["shared"] = rows

    # ---- executions of every instruction
    ex_diff = []
    if table is not None and ran and not broken:
        for pc in sorted(set(prog) | set(ncu)):
            a = executed.get(pc, 0)
            b = (ncu[pc].executed or 0) if pc in ncu else 0
            if a != b:
                sass = prog[pc]["sass"] if pc in prog else ncu[pc].sass
                ex_diff.append({"pc": pc, "sass": sass, "interp": a, "ncu": b, "line": prog.get(pc, {}).get("line")})
    convergence = [x for x in ex_diff if base_opcode(x["sass"]) in CONVERGENCE]
    ex_diff = [x for x in ex_diff if base_opcode(x["sass"]) not in CONVERGENCE]
    by_op: dict[str, dict] = {}
    for x in ex_diff:
        d = by_op.setdefault(base_opcode(x["sass"]), {"pcs": 0, "ncu": 0, "interp": 0})
        d["pcs"] += 1
        d["ncu"] += x["ncu"]
        d["interp"] += x["interp"]
    res["executed"] = {"compared": len(set(prog) | set(ncu)) if table is not None and ran and not broken else 0,
                       "differ": len(ex_diff), "rows": ex_diff, "by_opcode": by_op,
                       "convergence_differ": len(convergence), "convergence_rows": convergence,
                       "interp_total": int(sum(executed.values())),
                       "ncu_total": int(sum((r.executed or 0) for r in ncu.values())) if table is not None else None}
    count = {s: sum(r["status"] == s for r in rows) for s in ("agree", "DIFFER", "not modelled", "not measured")}
    res["counts"] = count
    if table is None:
        res["status"] = "not measured" if ran else "interpreter error"
    elif broken:
        res["status"] = "PC mapping broken"
    elif not ran and interp.get("error_kind") != "unsupported":
        res["status"] = "interpreter error"
    elif count["DIFFER"] or ex_diff or any(r["status"] in ("SASS differs", "missing") for r in rows):
        res["status"] = "DIFFER"
    elif not ran:
        res["status"] = "not modelled"  # the interpreter cannot run it: ncu's numbers are shown
    else:
        res["status"] = "agree"
    return res


def _not_modelled(sass: str) -> bool:
    mods = sass_form(sass).split(".")
    return any(f"{mods[0]}.{m}" in NOT_MODELLED for m in mods[1:]) or (
        mods[0] in ("ATOMS", "ATOM", "RED") and any(m in ("64", "U64", "S64", "F64") for m in mods[1:]))


def _shared_pcs(prog: dict, banks: dict, ncu: dict) -> list[int]:
    out = set(banks)
    for pc, r in ncu.items():
        if r.wavefronts or r.ideal:
            out.add(pc)
    for pc, d in prog.items():
        base = base_opcode(d["sass"])
        if base in SHARED_OPCODES or (base in GENERIC_OPCODES and d.get("probe")):
            out.add(pc)
    return sorted(out)


def _row_status(row: dict, measured: bool, ran: bool, sass_bad: bool, broken: bool, in_prog: bool) -> str:
    if not row["modelled"]:
        return "not modelled"
    if not measured or not ran:
        return "not measured"
    if broken:
        return "PC mapping broken"
    if row["ncu"] is None or not in_prog:
        return "missing"
    if sass_bad:
        return "SASS differs"
    n, i = row["ncu"], row["interp"]
    same = ((n["executed"] or 0) == i["executed"] and (n["wavefronts"] or 0) == i["wavefronts"]
            and (n["ideal"] or 0) == i["ideal"])
    return "agree" if same else "DIFFER"


# ---------------------------------------------------------------------------------------------- the report


def _v(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return str(int(x)) if x.is_integer() else f"{x:g}"
    return str(x)


def _ncu(row, key):
    return _v(row["ncu"][key]) if row["ncu"] else "-"


def _int(row, key):
    return _v(row["interp"][key]) if row["interp"] else "-"


def case_line(r: dict) -> str:
    c, ex = r["counts"], r["executed"]
    if r["status"] in ("not measured", "interpreter error") and r.get("ncu_instructions") is None:
        t = r["interp_totals"]
        if r["interp_error"]:
            return f"{r['case']}: {r['kernel']}: interpreter error: {r['interp_error'][:200]}"
        return (f"{r['case']}: {r['kernel']}: interpreter {t.get('executions', 0)} shared executions, "
                f"{t.get('wavefronts', 0)} wavefronts, {t.get('ideal', 0)} ideal, {t.get('conflicts', 0)} conflicts; "
                f"{len(r['shared'])} shared PCs, {ex['interp_total']} warp instructions ({r['interp_seconds']} s)")
    m = r["mapping"]
    return (f"{r['case']}: {r['kernel']}: {m['compared']} PCs ({m['opcode_mismatches']} opcode mismatches); shared "
            f"{len(r['shared'])} PCs: {c['agree']} agree, {c['DIFFER']} differ, {c['not modelled']} not modelled; "
            f"executed: {ex['compared']} PCs, {ex['differ']} differ -> {r['status']}")


def summarize(results: list[dict], dry: bool) -> str:
    n = len(results)
    if dry:
        return f"ncu_source: {n} cases interpreted (dry run: nothing measured)"
    agree = sum(r["status"] == "agree" for r in results)
    differ = sum(r["status"] in ("DIFFER", "PC mapping broken", "interpreter error") for r in results)
    shared = sum(r["counts"]["agree"] + r["counts"]["DIFFER"] for r in results)
    sd = sum(r["counts"]["DIFFER"] for r in results)
    nm = sum(r["counts"]["not modelled"] for r in results)
    exd = sum(r["executed"]["differ"] for r in results)
    unmeasured = sum(r["status"] == "not measured" for r in results)
    return (f"ncu_source: {n} cases: {agree} agree, {differ} differ, {unmeasured} not measured; shared PCs: "
            f"{shared - sd}/{shared} agree, {nm} not modelled; executed-count differences: {exd}")


def form_summary(results: list[dict]) -> list[dict]:
    acc: dict[str, dict] = {}
    for r in results:
        for row in r["shared"]:
            d = acc.setdefault(row["form"], {"form": row["form"], "pcs": 0, "agree": 0, "differ": 0, "not_modelled": 0,
                                             "not_measured": 0, "ncu_executed": 0, "interp_executed": 0,
                                             "ncu_wavefronts": 0,
                                             "interp_wavefronts": 0, "ncu_ideal": 0, "interp_ideal": 0})
            d["pcs"] += 1
            d["agree"] += row["status"] == "agree"
            d["differ"] += row["status"] not in ("agree", "not modelled", "not measured")
            d["not_modelled"] += row["status"] == "not modelled"
            d["not_measured"] += row["status"] == "not measured"
            for side in ("ncu", "interp"):
                if row[side]:
                    for k in ("executed", "wavefronts", "ideal"):
                        d[f"{side}_{k}"] += row[side][k] or 0
    return sorted(acc.values(), key=lambda d: d["form"])


def write_report(results: list[dict], out: Path, meta: dict, dry: bool) -> str:
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(results, dry)
    L = ["# Shared-memory counters per instruction: Nsight Compute source counters vs the interpreter", "",
         f"- date: {meta.get('date', '-')}; GPU: {meta.get('gpu', '-')}; ncu: {meta.get('ncu_version', '-')}",
         f"- command: `{meta.get('command', '-')}`",
         "- ncu: `L1 Wavefronts Shared`, `L1 Wavefronts Shared Ideal`, `Instructions Executed` of the source page "
         "(SASS); interpreter: `flashsim.cuda.checking(banks=True)` (bank sites, executed warp instructions) on "
         "the same cubin and inputs. `-`: not applicable / not measured.",
         "", f"**{summary}**", "",
         "| case | kernel | problem | PCs (interp/ncu) | opcode mismatches | shared PCs | agree | differ | "
         "not modelled | executed PCs | executed differ | status |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        c, m, ex = r["counts"], r["mapping"], r["executed"]
        L.append(f"| {r['case']} | {r['kernel']} | {r['problem']} | {r['instructions']}/{_v(r['ncu_instructions'])} | "
                 f"{m['opcode_mismatches']} | {len(r['shared'])} | {c['agree']} | {c['DIFFER']} | "
                 f"{c['not modelled']} | "
                 f"{ex['compared']} | {ex['differ']} | {r['status']} |")
    L += ["", "## Interpreter totals per case", "",
          "| case | shared executions | wavefronts | ideal | conflicts | warp instructions | seconds | error |",
          "|---|---|---|---|---|---|---|---|"]
    for r in results:
        t = r["interp_totals"]
        L.append(f"| {r['case']} | {_v(t.get('executions'))} | {_v(t.get('wavefronts'))} | {_v(t.get('ideal'))} | "
                 f"{_v(t.get('conflicts'))} | {r['executed']['interp_total']} | {_v(r['interp_seconds'])} | "
                 f"{(r['interp_error'] or '')[:160]} |")
    for r in results:
        bad = [x for x in r["shared"] if x["status"] not in ("agree", "not modelled", "not measured")]
        if not (bad or r["executed"]["rows"] or r["mapping"]["examples"]):
            continue
        L += ["", f"## {r['case']}: differences", ""]
        if bad:
            L += ["| pc | SASS | probe | status | ncu exec | interp exec | ncu wf | interp wf | ncu ideal | "
                  "interp ideal |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
            L += [f"| {x['pc']:#06x} | `{x['sass']}` | {x['probe'] or ''} | {x['status']} | {_ncu(x, 'executed')} | "
                  f"{_int(x, 'executed')} | {_ncu(x, 'wavefronts')} | {_int(x, 'wavefronts')} | {_ncu(x, 'ideal')} | "
                  f"{_int(x, 'ideal')} |" for x in bad]
        if r["executed"]["rows"]:
            ops = ", ".join(f"{op}: {d['pcs']} PCs (ncu {d['ncu']}, interp {d['interp']})"
                            for op, d in sorted(r["executed"]["by_opcode"].items()))
            L += ["", f"Executions differing ({r['executed']['differ']} PCs; by opcode: {ops}; first 60):", "",
                  "| pc | SASS | line | ncu | interp |", "|---|---|---|---|---|"]
            L += [f"| {x['pc']:#06x} | `{x['sass']}` | {_v(x['line'])} | {x['ncu']} | {x['interp']} |"
                  for x in r["executed"]["rows"][:60]]
        if r["mapping"]["examples"]:
            L += ["", "Opcode mismatches (interpreter's SASS vs ncu's at the same PC):", "",
                  "| pc | interpreter | ncu |", "|---|---|---|"]
            L += [f"| {x['pc']:#06x} | `{x['interp']}` | `{x['ncu']}` |" for x in r["mapping"]["examples"]]
    forms = form_summary(results)
    L += ["", "## Per opcode form (all cases)", "",
          "| form | PCs | agree | differ | not modelled | not measured | ncu exec | interp exec | ncu wf | interp wf | "
          "ncu ideal | interp ideal |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    L += [f"| {d['form']} | {d['pcs']} | {d['agree']} | {d['differ']} | {d['not_modelled']} | {d['not_measured']} | "
          f"{d['ncu_executed']} | "
          f"{d['interp_executed']} | {d['ncu_wavefronts']} | {d['interp_wavefronts']} | {d['ncu_ideal']} | "
          f"{d['interp_ideal']} |" for d in forms]
    L += ["", "## Probe instructions (gpu/kernels/probe_banks_source.cu, probe_ldgsts.cu)", "",
          "One warp (probe_ldgsts_warps: two); every row one instruction of the probe named by its source line, "
          "summed over the warps. Atomics are measured only (no bank rule in flashsim.smem).", "",
          "| case | probe | pc | SASS | ncu exec | ncu wf | ncu ideal | ncu excessive | ncu n-way | "
          "ncu space/op/size | interp exec | interp wf | interp ideal | status |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for x in r["shared"]:
            if x["probe"] is None:
                continue
            sp = "/".join(v for v in (x["ncu"]["space"], x["ncu"]["access"], x["ncu"]["size"]) if v) if x["ncu"] else ""
            L.append(f"| {r['case']} | {x['probe']} | {x['pc']:#06x} | `{x['sass']}` | {_ncu(x, 'executed')} | "
                     f"{_ncu(x, 'wavefronts')} | {_ncu(x, 'ideal')} | {_ncu(x, 'excessive')} | "
                     f"{_ncu(x, 'nway')} | {sp} | "
                     f"{_int(x, 'executed')} | {_int(x, 'wavefronts')} | {_int(x, 'ideal')} | {x['status']} |")
    L.append("")
    (out / "ncu_source.md").write_text("\n".join(L), encoding="utf-8")
    (out / "ncu_source.json").write_text(json.dumps({"meta": meta, "summary": summary, "forms": forms,
                                                     "cases": results}, indent=1, default=str) + "\n",
                                         encoding="utf-8")
    return summary


# ---------------------------------------------------------------------------------------------- main


def _names(spec: list[str] | None) -> list[str]:
    if not spec:
        return list(CASES)
    names = [n.strip() for s in spec for n in s.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"ncu_source: unknown case(s) {unknown}; cases: {', '.join(CASES)}")
    return list(dict.fromkeys(names))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.ncu_source", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="output folder (ncu_source.md, ncu_source.json, raw/)")
    ap.add_argument("--ncu", default="ncu", help="the Nsight Compute CLI (default: ncu on PATH)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per ncu command (default 300)")
    ap.add_argument("--dry-run", action="store_true", help="the interpreter only: no GPU, no ncu")
    ap.add_argument("--cases", action="append", help=f"comma-separated case names (default all: {', '.join(CASES)})")
    ap.add_argument("--workers", type=int, default=None, help="interpreter processes (default: one per case, at "
                                                              "most the CPU count)")
    ap.add_argument("--csv-dir", type=Path, help="compare against DIR/raw/CASE.csv of an earlier run (no ncu)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--launch", help=argparse.SUPPRESS)  # the profiled child
    a = ap.parse_args(argv)
    if a.launch:
        launch_child(a.launch)
        return 0
    if a.list:
        for c in CASES.values():
            print(f"{c.name:<20} {c.function:<28} {c.problem}")
        return 0
    if a.out is None:
        ap.error("--out DIR is required")
    names = _names(a.cases)
    workers = a.workers if a.workers is not None else min(len(names), os.cpu_count() or 1)
    out: Path = a.out
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(["python -m flashsim.gpu.ncu_source"] + list(argv if argv is not None else sys.argv[1:])),
            "cases": names}
    if a.dry_run:
        interp = interpret_all(names, workers)
        results = [compare_case(interp[n], None) for n in names]
        summary = write_report(results, out, meta, True)
        for r in results:
            print(case_line(r))
        print(summary)
        return 1 if any(r["interp_error"] and r["interp_error_kind"] != "unsupported" for r in results) else 0

    # the interpreter runs in worker processes while ncu profiles the cases one by one
    submitted = _submit(names, workers) if workers > 1 and len(names) > 1 else None
    tables: dict[str, SourceTable | None] = {}
    errors: dict[str, str] = {}
    fatal = None
    ncu = shutil.which(a.ncu) or a.ncu
    try:
        if a.csv_dir is not None:
            meta["ncu_version"] = f"CSVs of {a.csv_dir}"
            for n in names:
                path = a.csv_dir / "raw" / f"{n}.csv"
                if not path.is_file() and path.with_suffix(".csv.gz").is_file():
                    path = path.with_suffix(".csv.gz")
                try:
                    text = (gzip.decompress(path.read_bytes()).decode("utf-8") if path.suffix == ".gz"
                            else path.read_text(encoding="utf-8"))
                    tables[n] = table_for(parse_source_csv(text), CASES[n].function)
                    (raw / f"{n}.csv").write_text(text, encoding="utf-8")
                except (OSError, NcuSourceError) as exc:
                    errors[n] = f"{path}: {exc}"
        else:
            meta["ncu_commands"] = {}
            try:
                ver = _run([ncu, "--version"], 60)
                meta["ncu_version"] = (ver.stdout.strip().splitlines() or ["?"])[-1]
            except CheckError as exc:
                fatal = str(exc)
            for n in names if fatal is None else []:
                try:
                    tables[n], m = profile_case(CASES[n], ncu, raw, a.timeout)
                    meta["ncu_commands"][n] = m
                    meta.setdefault("gpu", m["child"].get("device", "-"))
                    print(f"profiled {n} ({m['source']})", flush=True)
                except CheckError as exc:  # NcuSourceError included: this case is not measured
                    errors[n] = str(exc)
                    if "ERR_NVGPUCTRPERM" in str(exc):
                        fatal = str(exc)
                        break
    except BaseException:
        if submitted is not None:
            submitted[0].shutdown(cancel_futures=True)
        raise
    interp = _collect(submitted) if submitted is not None else interpret_all(names, 1)
    results = []
    for n in names:
        r = compare_case(interp[n], tables.get(n))
        if n in errors:
            r["ncu_error"] = errors[n]
        child = meta.get("ncu_commands", {}).get(n, {}).get("child", {})
        if child.get("cubin_sha256") and child["cubin_sha256"] != interp[n]["cubin_sha256"]:
            r["status"] = "DIFFER"
            r["ncu_error"] = (f"the GPU ran cubin {child['cubin_sha256'][:16]}, the interpreter "
                              f"{interp[n]['cubin_sha256'][:16]}")
        results.append(r)
    summary = write_report(results, out, meta, False)
    for r in results:
        print(case_line(r) + (f" [ncu: {r['ncu_error'][:300]}]" if r.get("ncu_error") else ""))
    print(summary)
    if fatal:
        print(f"ncu_source: error: {fatal}", file=sys.stderr)
        return 2
    if any(r["status"] in ("DIFFER", "PC mapping broken", "interpreter error") for r in results):
        return 1
    if any(r["status"] == "not measured" for r in results):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
