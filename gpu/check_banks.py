"""Shared-memory banks: flashsim's predicted wavefronts/conflicts against Nsight Compute on the GPU.

    python -m flashsim.gpu.check_banks --out DIR [--ncu PATH] [--timeout S] [--dry-run] [--one-by-one]

What it does, in order:
1. ``ncu --query-metrics`` (retried with ``--chip gh100``) lists the metrics this ncu/GPU offers; for each
   op class (ld, st, ldsm, stsm, ldgsts) it picks the instruction-level SASS counters
   ``smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_<op>`` and
   ``smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_<op>`` (else the ``sm__sass_`` ones,
   else the ``_cache_access``/``_cache_bypass`` halves for ldgsts), the op-less totals over all shared
   ops, and, for information only, the hardware ``l1tex__data_..._op_<op>`` counters, which L1 effects can
   pollute. It fails with a clear message if no instruction-level shared wavefront metric exists.
2. Runs ``ncu --clock-control none --csv --kernel-name regex:^bank_ --metrics ...`` on this same module
   with ``--launch``: every pattern in PATTERNS launches its kernel of gpu/kernels/probe_smem.cu once
   (one block of 32 threads; each bank_* kernel executes exactly one shared-memory warp instruction of
   its kind with the pattern's per-lane byte offsets and active lanes).
3. Compares, per pattern, the measured wavefronts and conflicts (the op's SASS metric; the all-ops
   total when the op has none: the kernel has one shared instruction, so they are equal) with
   ``flashsim.smem.wavefronts`` under the documented model ("phases") and the alternative
   plain "phases" rule, and writes ``DIR/banks.md`` (a Markdown table), ``DIR/banks.json`` and the
   raw ncu output; prints one line per pattern and a summary line. Exit status 0 when every measured
   pattern agrees with the phases model, 1 when one differs, 2 when it could not measure.

``--dry-run`` writes the table of predictions without a GPU (no ncu).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


from flashsim.errors import CheckError, bad_argument
from flashsim.gpu import runtime
from flashsim.smem import PHASES, SM90, wavefronts
from flashsim.swizzle import cute_swizzle, seed_swizzle

FILE = "probe_smem.cu"
LANE = np.arange(32, dtype=np.int64)
FULL = 0xFFFFFFFF

#: kernel -> (op class, bytes per lane, matrices)
KERNELS: dict[str, tuple[str, int, int]] = {
    "bank_ld8": ("ld", 1, 0), "bank_ld16": ("ld", 2, 0), "bank_ld32": ("ld", 4, 0), "bank_ld64": ("ld", 8, 0),
    "bank_ld128": ("ld", 16, 0),
    "bank_st8": ("st", 1, 0), "bank_st16": ("st", 2, 0), "bank_st32": ("st", 4, 0), "bank_st64": ("st", 8, 0),
    "bank_st128": ("st", 16, 0),
    "bank_ldsm_x1": ("ldsm", 16, 1), "bank_ldsm_x2": ("ldsm", 16, 2), "bank_ldsm_x4": ("ldsm", 16, 4),
    "bank_ldsm_x1_trans": ("ldsm", 16, 1), "bank_ldsm_x2_trans": ("ldsm", 16, 2), "bank_ldsm_x4_trans": ("ldsm", 16, 4),
    "bank_stsm_x1": ("stsm", 16, 1), "bank_stsm_x2": ("stsm", 16, 2), "bank_stsm_x4": ("stsm", 16, 4),
    "bank_stsm_x4_trans": ("stsm", 16, 4),
    "bank_ldgsts_ca4": ("ldgsts", 4, 0), "bank_ldgsts_ca8": ("ldgsts", 8, 0), "bank_ldgsts_ca16": ("ldgsts", 16, 0),
    "bank_ldgsts_cg16": ("ldgsts", 16, 0),
}
BANK_SMEM = 49152


@dataclass(frozen=True)
class Pattern:
    """One warp instruction: kernel, per-lane byte offsets, active-lane mask, what it shows."""

    name: str
    kernel: str
    offs: tuple
    active: int = FULL
    note: str = ""

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise bad_argument("kernel", self.kernel, f"pattern {self.name}: not a kernel of {FILE}")
        op, width, num = KERNELS[self.kernel]
        offs = np.asarray(self.offs, np.int64)
        if offs.shape != (32,) or offs.min() < 0 or offs.max() + width > BANK_SMEM:
            raise bad_argument("offs", self.offs,
                               f"pattern {self.name}: expected 32 offsets in [0, {BANK_SMEM - width}]")
        used = np.arange(32) < (8 * num if num else 32)
        act = ((self.active >> LANE) & 1).astype(bool)
        if ((offs % width != 0) & act & used).any():
            raise bad_argument("offs", self.offs, f"pattern {self.name}: offsets must be {width}-byte aligned")

    @property
    def op(self) -> str:
        return KERNELS[self.kernel][0]

    def predict(self, model=SM90) -> tuple[int, int]:
        op, width, num = KERNELS[self.kernel]
        act = ((self.active >> LANE) & 1).astype(bool)
        wf, ideal = wavefronts(np.asarray(self.offs, np.int64), width=width, op=op, active=act, num=num or 4, model=model)
        return int(wf), int(wf - ideal)


def _p(name: str, kernel: str, offs, active: int = FULL, note: str = "") -> Pattern:
    offs = np.broadcast_to(np.asarray(offs, np.int64), (32,))
    num = KERNELS[kernel][2]
    if num:  # lanes past 8*num give ignored row addresses: pass a harmless valid one
        offs = np.where(np.arange(32) < 8 * num, offs, 0)
    return Pattern(name, kernel, tuple(int(x) for x in offs), active, note)


def _lanes_below(n: int) -> int:
    return (1 << n) - 1


def patterns() -> list[Pattern]:
    """The suite (>= 30 patterns): strided, padded, broadcast, 8..128-bit ld/st, ldmatrix/stmatrix x1/x2/x4
    plain and .trans, cp.async, and the tiles of seed 001 with and without its swizzles."""
    L = LANE
    d = 128  # seed 001: d = 128 halves per row of Q/K/V
    q_logical = (L % 16) * d + (L // 16) * 8  # s_Q A-operand rows (halves)
    k_logical = (L % 8) * d + ((L // 8) % 2) * 8 + (L // 16) * 8 * d  # s_K B-operand rows
    s_logical = (L % 16) * 16 + (L // 16) * 8  # s_S 16x16 tile, row stride 16 halves
    c_logical = (L // 4) * 16 + (L % 4) * 2  # seed 2.7: C fragment 32-bit stores into a 16x16 tile
    atom = (L % 16) * 64 + (L // 16) * 8  # two 8x64 f16 atoms stacked (row stride 64 halves)
    P = [
        # ---- 32-bit loads
        _p("ld32_linear", "bank_ld32", L * 4, note="consecutive words: 1 wavefront"),
        _p("ld32_stride2", "bank_ld32", L * 8, note="2-word stride: 2-way"),
        _p("ld32_stride16", "bank_ld32", L * 64, note="16-word stride: 16-way"),
        _p("ld32_stride32", "bank_ld32", L * 128, note="32-word stride: every lane bank 0, 32-way"),
        _p("ld32_padded33", "bank_ld32", L * 132, note="row of 32 words padded to 33: conflict-free column"),
        _p("ld32_broadcast", "bank_ld32", 0 * L, note="one word for all lanes: broadcast"),
        _p("ld32_two_words_one_bank", "bank_ld32", (L % 2) * 128, note="two words of bank 0, 16 lanes each"),
        _p("ld32_permuted", "bank_ld32", ((L * 7) % 32) * 4, note="a permutation of 32 words"),
        _p("ld32_multicast4", "bank_ld32", (L // 4) * 4, note="8 words, 4 lanes each"),
        _p("ld32_partial_stride32", "bank_ld32", L * 128, _lanes_below(8), note="only lanes 0-7 active: 8-way"),
        _p("ld8_bytes", "bank_ld8", L, note="32 bytes = 8 words"),
        _p("ld16_stride64B", "bank_ld16", L * 64, note="16-bit at 64-byte stride: 16-way"),
        # ---- 64-bit loads
        _p("ld64_linear", "bank_ld64", L * 8, note="ideal: 2 half-warp phases"),
        _p("ld64_stride16B", "bank_ld64", L * 16, note="2-way within each half-warp"),
        _p("ld64_stride256B", "bank_ld64", L * 256, note="all lanes banks 0-1: 16 per half"),
        _p("ld64_broadcast", "bank_ld64", 0 * L, note="one 8-byte word for all: phases 2, pair-broadcast 1"),
        _p("ld64_pairs", "bank_ld64", (L // 2) * 8, note="addr[n] == addr[n^1]: pair-broadcast packs"),
        # ---- 128-bit loads
        _p("ld128_linear", "bank_ld128", L * 16, note="ideal: 4 quarter-warp phases"),
        _p("ld128_stride32B", "bank_ld128", L * 32, note="2-way within each quarter"),
        _p("ld128_stride128B", "bank_ld128", L * 128, note="8-way within each quarter"),
        _p("ld128_padded144B", "bank_ld128", L * 144, note="128-byte rows padded by 16 bytes: conflict-free"),
        _p("ld128_broadcast", "bank_ld128", 0 * L, note="one 16-byte word for all: phases 4, pair-broadcast 2"),
        _p("ld128_tid_mod4", "bank_ld128", (L % 4) * 16, note="forum case addr = (tid%4)*16: no pair rule"),
        _p("ld128_pairs", "bank_ld128", (L // 2) * 16, note="addr[n] == addr[n^1]: pair-broadcast packs"),
        _p("ld128_quarter0_only_conflicts", "bank_ld128", np.where(L < 8, L * 128, L * 16),
           note="lanes 0-7 8-way, others clean: phases 8+1+1+1 (a whole-warp scheduler would give 8)"),
        _p("ld128_partial_quarter1", "bank_ld128", L * 16, 0x0000FF00, note="only lanes 8-15 active: 1 phase"),
        # ---- stores
        _p("st32_linear", "bank_st32", L * 4),
        _p("st32_stride2", "bank_st32", L * 8, note="2-way"),
        _p("st32_same_word", "bank_st32", 0 * L, note="all lanes store one word: one wins, 1 wavefront"),
        _p("st8_bytes", "bank_st8", L),
        _p("st16_linear", "bank_st16", L * 2),
        _p("st64_linear", "bank_st64", L * 8),
        _p("st64_stride256B", "bank_st64", L * 256),
        _p("st128_linear", "bank_st128", L * 16),
        _p("st128_stride128B", "bank_st128", L * 128, note="8-way in each quarter"),
        _p("st32_seed_cfrag_unswizzled", "bank_st32", c_logical * 2,
           note="seed 001 sec. 2.7: C fragment to a 16x16 f16 tile, rows g and g+4 collide"),
        _p("st32_seed_cfrag_swizzle133", "bank_st32", seed_swizzle(c_logical, 1, 3, 3) * 2,
           note="the same through seed 001's swizzle<1,3,3>"),
        # ---- ldmatrix
        _p("ldsm_x1_contiguous", "bank_ldsm_x1", L * 16),
        _p("ldsm_x2_contiguous", "bank_ldsm_x2", L * 16),
        _p("ldsm_x4_contiguous", "bank_ldsm_x4", L * 16, note="ideal: 1 wavefront per matrix"),
        _p("ldsm_x1_trans_contiguous", "bank_ldsm_x1_trans", L * 16),
        _p("ldsm_x2_trans_contiguous", "bank_ldsm_x2_trans", L * 16),
        _p("ldsm_x4_trans_contiguous", "bank_ldsm_x4_trans", L * 16),
        _p("ldsm_x4_rows_broadcast", "bank_ldsm_x4", 0 * L, note="every row address the same"),
        _p("ldsm_x4_seed_Q_unswizzled", "bank_ldsm_x4", q_logical * 2,
           note="seed 001: 16x128 f16 tile, A rows at 256 B stride: 4x7-way conflicts (32 wavefronts)"),
        _p("ldsm_x4_seed_Q_swizzle334", "bank_ldsm_x4", seed_swizzle(q_logical, 3, 3, 4) * 2,
           note="seed 001's swizzle<3,3,4>: conflict-free"),
        _p("ldsm_x4_seed_K_unswizzled", "bank_ldsm_x4", k_logical * 2, note="seed 001: K (B operand) rows"),
        _p("ldsm_x4_seed_K_swizzle334", "bank_ldsm_x4", seed_swizzle(k_logical, 3, 3, 4) * 2),
        _p("ldsm_x4_trans_seed_V_unswizzled", "bank_ldsm_x4_trans", q_logical * 2, note="seed 001: V with .trans"),
        _p("ldsm_x4_trans_seed_V_swizzle334", "bank_ldsm_x4_trans", seed_swizzle(q_logical, 3, 3, 4) * 2),
        _p("ldsm_x4_seed_S_unswizzled", "bank_ldsm_x4", s_logical * 2,
           note="seed 001 sec. 3.3: 16x16 tile, rows 0-3 collide with 4-7 (2 wavefronts per matrix)"),
        _p("ldsm_x4_seed_S_swizzle133", "bank_ldsm_x4", seed_swizzle(s_logical, 1, 3, 3) * 2,
           note="seed 001's swizzle<1,3,3>"),
        _p("ldsm_x4_atom8x64_unswizzled", "bank_ldsm_x4", atom * 2, note="8x64 f16 atoms, 128 B rows: 8-way"),
        _p("ldsm_x4_atom8x64_Sw333", "bank_ldsm_x4", cute_swizzle(atom, 3, 3, 3) * 2, note="CuTe Sw<3,3,3>"),
        _p("ldsm_x4_padded_144B", "bank_ldsm_x4", ((L % 16) * 72 + (L // 16) * 8) * 2, note="rows padded to 72 halves"),
        # ---- stmatrix (sm_90)
        _p("stsm_x1_contiguous", "bank_stsm_x1", L * 16),
        _p("stsm_x2_contiguous", "bank_stsm_x2", L * 16),
        _p("stsm_x4_contiguous", "bank_stsm_x4", L * 16),
        _p("stsm_x4_trans_contiguous", "bank_stsm_x4_trans", L * 16),
        _p("stsm_x4_seed_Q_unswizzled", "bank_stsm_x4", q_logical * 2),
        _p("stsm_x4_seed_Q_swizzle334", "bank_stsm_x4", seed_swizzle(q_logical, 3, 3, 4) * 2),
        # ---- cp.async (LDGSTS)
        _p("ldgsts_ca4_linear", "bank_ldgsts_ca4", L * 4),
        _p("ldgsts_ca8_linear", "bank_ldgsts_ca8", L * 8),
        _p("ldgsts_ca16_linear", "bank_ldgsts_ca16", L * 16),
        _p("ldgsts_cg16_linear", "bank_ldgsts_cg16", L * 16, note="cp.async 16 B: 4 quarter-warp phases"),
        _p("ldgsts_cg16_stride128B", "bank_ldgsts_cg16", L * 128, note="8-way in each quarter"),
        _p("ldgsts_cg16_seed_Q_store_swizzle334", "bank_ldgsts_cg16", seed_swizzle(L * 8, 3, 3, 4) * 2,
           note="seed 001's swizzled gmem->smem store of Q (as cp.async)"),
        _p("ldgsts_ca4_partial", "bank_ldgsts_ca4", L * 128, _lanes_below(4), note="4 lanes, one bank"),
    ]
    names = [p.name for p in P]
    assert len(names) == len(set(names)), "pattern names must be unique"
    return P


# ------------------------------------------------------------------------------------------ metrics

def metric_candidates(op: str) -> dict[str, list[list[str]]]:
    """For an op class: ordered alternatives (each a list of base names to add up) per quantity."""
    def alt(fmt: str) -> list[list[str]]:
        out = [[fmt.format(p="smsp__sass_", op=op)], [fmt.format(p="sm__sass_", op=op)]]
        if op == "ldgsts":
            for p in ("smsp__sass_", "sm__sass_"):
                out.append([fmt.format(p=p, op="ldgsts_cache_access"), fmt.format(p=p, op="ldgsts_cache_bypass")])
        return out

    return {
        "wavefronts": alt("{p}l1tex_data_pipe_lsu_wavefronts_mem_shared_op_{op}"),
        "conflicts": alt("{p}l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_{op}"),
        "hw_wavefronts": [[f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}"]],
        "hw_conflicts": [[f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}"]],
    }


TOTALS = {
    "total_wavefronts": [["smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared"],
                         ["sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared"]],
    "total_conflicts": [["smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared"],
                        ["sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared"]],
}

_METRIC_RE = re.compile(r"^\s*([a-z0-9]+__[a-z0-9_]+)\b")


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names from ``ncu --query-metrics`` output (the first token of each metric line)."""
    return {m.group(1) for m in (_METRIC_RE.match(line) for line in text.splitlines()) if m}


def choose_metrics(available: set[str], ops: list[str]) -> dict[str, dict[str, list[str]]]:
    """op -> quantity -> the chosen base names (empty when none is available)."""
    chosen: dict[str, dict[str, list[str]]] = {}
    for op in ops:
        chosen[op] = {}
        for q, alts in {**metric_candidates(op), **TOTALS}.items():
            pick = next((a for a in alts if all(n in available for n in a)), [])
            chosen[op][q] = pick
    return chosen



def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise CheckError(f"{cmd[0]} not found: install Nsight Compute or pass --ncu PATH") from None
    except subprocess.TimeoutExpired:
        raise CheckError(f"timed out after {timeout:.0f} s: {' '.join(cmd[:6])} ...") from None


def query_metrics(ncu: str, timeout: float, out: Path) -> set[str]:
    tries = [[ncu, "--query-metrics"], [ncu, "--query-metrics", "--chip", "gh100"]]
    log = []
    for cmd in tries:
        proc = _run(cmd, timeout)
        log.append(f"$ {' '.join(cmd)}\n(exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}")
        names = parse_query_metrics(proc.stdout)
        if names:
            (out / "query_metrics.txt").write_text("\n".join(log))
            return names
    (out / "query_metrics.txt").write_text("\n".join(log))
    raise CheckError(f"`{ncu} --query-metrics` listed no metrics (see {out / 'query_metrics.txt'})")


def parse_ncu_csv(text: str) -> list[dict]:
    """Rows of ``ncu --csv`` output (header with 'Metric Name'), other lines ignored."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Metric Name"' in line or line.startswith("ID,")), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    return [dict(zip(header, r)) for r in rows[1:] if len(r) == len(header)]


def _num(text: str) -> float | None:
    t = text.replace(",", "").strip()
    try:
        return float(t)
    except ValueError:
        return None


def results_by_launch(rows: list[dict]) -> list[dict]:
    """Per profiled kernel launch (in launch order): kernel name and {metric: value}."""
    by: dict[int, dict] = {}
    for r in rows:
        try:
            i = int(r.get("ID", ""))
        except ValueError:
            continue
        e = by.setdefault(i, {"kernel": r.get("Kernel Name", ""), "metrics": {}})
        name = r.get("Metric Name", "")
        v = _num(r.get("Metric Value", ""))
        if name and v is not None:
            e["metrics"][name.removesuffix(".sum")] = v
    return [by[i] for i in sorted(by)]


# ------------------------------------------------------------------------------------------ launching


def launch_all(names: list[str] | None = None) -> None:
    """Launch every pattern's kernel once (run under ncu by ``main``)."""
    cupy = runtime.require_gpu()
    pats = [p for p in patterns() if names is None or p.name in names]
    gsrc = cupy.asarray(np.arange(4096, dtype=np.uint32).view(np.uint8))
    sink = cupy.zeros(32, dtype=cupy.uint32)
    for i, p in enumerate(pats):
        kernel = runtime.get_kernel(FILE, p.kernel)
        offs = cupy.asarray(np.asarray(p.offs, np.uint32))
        runtime.launch(kernel, 1, 32, (offs, np.uint32(p.active), gsrc, sink))
        print(f"launched {i} {p.name} ({p.kernel})", file=sys.stderr)


# ------------------------------------------------------------------------------------------ the report


@dataclass
class Row:
    name: str
    kernel: str
    op: str
    note: str
    predicted_wavefronts: int
    predicted_conflicts: int
    pair_broadcast_wavefronts: int
    measured_wavefronts: float | None = None
    measured_conflicts: float | None = None
    hw_wavefronts: float | None = None
    hw_conflicts: float | None = None
    source: str = ""
    status: str = "not measured"
    matches: list = field(default_factory=list)


def _value(metrics: dict, names: list[str]) -> float | None:
    if not names or any(n not in metrics for n in names):
        return None
    return float(sum(metrics[n] for n in names))


def compare(pats: list[Pattern], launches: list[dict] | None, chosen: dict | None) -> list[Row]:
    rows = []
    for i, p in enumerate(pats):
        wf, cf = p.predict(SM90)
        wf2, _ = p.predict(PHASES)
        row = Row(p.name, p.kernel, p.op, p.note, wf, cf, wf2)
        if launches is not None and chosen is not None:
            if i >= len(launches):
                row.status = "no ncu result"
            else:
                res = launches[i]
                if p.kernel not in res["kernel"]:
                    row.status = f"launch order mismatch (ncu result {i} is {res['kernel']!r})"
                else:
                    m = res["metrics"]
                    ch = chosen[p.op]
                    mw, mc = _value(m, ch["wavefronts"]), _value(m, ch["conflicts"])
                    row.source = f"op_{p.op}"
                    if mw is None:
                        mw, mc = _value(m, ch["total_wavefronts"]), _value(m, ch["total_conflicts"])
                        row.source = "all shared ops (no op-specific metric)"
                    row.measured_wavefronts, row.measured_conflicts = mw, mc
                    row.hw_wavefronts, row.hw_conflicts = _value(m, ch["hw_wavefronts"]), _value(m, ch["hw_conflicts"])
                    if mw is None:
                        row.status = "no metric"
                    else:
                        row.matches = [n for n, w in (("sm_90", wf), ("phases", wf2)) if mw == w]
                        row.status = _judge(row)
                        if p.kernel.startswith("bank_ldgsts_cg") and mw == 0:
                            # measured on sm_90 with ncu 2025.3: cp.async.cg (L1 bypass) is not counted
                            # by any instruction-level ldgsts counter, so there is nothing to compare
                            row.status = "not counted by ncu"
        rows.append(row)
    return rows


def _judge(row: Row) -> str:
    """'agree' when the measured wavefronts (and conflicts, where a counter exists) are the predicted ones."""
    ok = row.measured_wavefronts == row.predicted_wavefronts and (
        row.measured_conflicts is None or row.measured_conflicts == row.predicted_conflicts)
    return "agree" if ok else "DIFFER"


def _fmt(v) -> str:
    if v is None:
        return "-"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def write_report(rows: list[Row], out: Path, meta: dict) -> str:
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Shared-memory banks: flashsim vs Nsight Compute",
        "",
        f"- GPU: {meta.get('gpu', '-')}; ncu: {meta.get('ncu_version', '-')}; date: {meta.get('date', '-')}",
        f"- command: `{meta.get('command', '-')}`",
        "- predicted: `flashsim.smem.wavefronts` (model `sm_90`); `phases wf` = the plain phase rule of the documentation.",
        "- measured: the instruction-level SASS counters (`smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_*`,"
        " `..._bank_conflicts_..._op_*`); `hw` = the hardware `l1tex__data_*` counters, shown for information"
        " only (L1 effects can pollute them).",
        "",
        "| pattern | kernel | pred. wf | pred. conflicts | phases wf | measured wf | measured conflicts | hw wf | hw conflicts | status | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(f"| {r.name} | {r.kernel} | {r.predicted_wavefronts} | {r.predicted_conflicts} | "
                     f"{r.pair_broadcast_wavefronts} | {_fmt(r.measured_wavefronts)} | {_fmt(r.measured_conflicts)} | "
                     f"{_fmt(r.hw_wavefronts)} | {_fmt(r.hw_conflicts)} | {r.status} | {r.note} |")
    summary = summarize(rows)
    lines += ["", summary, ""]
    (out / "banks.md").write_text("\n".join(lines))
    (out / "banks.json").write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1))
    return summary


def summarize(rows: list[Row]) -> str:
    agree = sum(r.status == "agree" for r in rows)
    differ = sum(r.status == "DIFFER" for r in rows)
    other = len(rows) - agree - differ
    uncounted = sum(r.status == "not counted by ncu" for r in rows)
    return (f"check_banks: {len(rows)} patterns: {agree} agree, {differ} differ, {uncounted} not counted by ncu, "
            f"{other - uncounted} not measured")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="output folder (banks.md, banks.json, raw ncu output)")
    ap.add_argument("--ncu", default="ncu", help="the Nsight Compute CLI (default: ncu on PATH)")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds for the ncu run (default 1200)")
    ap.add_argument("--dry-run", action="store_true", help="predictions only: no GPU, no ncu")
    ap.add_argument("--one-by-one", action="store_true", help="one ncu run per pattern (slower, for a confused launch order)")
    ap.add_argument("--repredict", action="store_true",
                    help="recompute the predictions of an existing OUT/banks.json with the current model (same "
                         "measurements, no GPU) and rewrite the report")
    ap.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)  # the profiled child
    ap.add_argument("--only", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.launch:
        launch_all(args.only)
        return 0
    if args.out is None:
        ap.error("--out DIR is required")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    pats = patterns()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(["python -m flashsim.gpu.check_banks"] + (argv or sys.argv[1:]))}
    if args.repredict:
        old = json.loads((out / "banks.json").read_text())
        by_name = {p.name: p for p in pats}
        rows = []
        for d in old["rows"]:
            r = Row(**{k: v for k, v in d.items()})
            p = by_name[r.name]
            r.predicted_wavefronts, r.predicted_conflicts = p.predict(SM90)
            r.pair_broadcast_wavefronts = p.predict(PHASES)[0]
            if r.measured_wavefronts is not None and r.status in ("agree", "DIFFER"):
                r.status = _judge(r)
            rows.append(r)
        meta = dict(old["meta"], repredicted=meta["date"])
        print(write_report(rows, out, meta))
        return 0
    if args.dry_run:
        rows = compare(pats, None, None)
        summary = write_report(rows, out, meta)
        for r in rows:
            print(f"{r.name:<40} predicted {r.predicted_wavefronts:>3} wavefronts, {r.predicted_conflicts:>3} conflicts")
        print(summary + " (dry run: nothing measured)")
        return 0
    try:
        ncu = shutil.which(args.ncu) or args.ncu
        ver = _run([ncu, "--version"], 60)
        meta["ncu_version"] = (ver.stdout.strip().splitlines() or ["?"])[-1]
        try:
            meta["gpu"] = runtime.device_info()["name"]
        except Exception as exc:  # the measurement itself will fail loudly if there is no GPU
            meta["gpu"] = f"unknown ({exc})"
        available = query_metrics(ncu, 300, out)
        ops = sorted({p.op for p in pats})
        chosen = choose_metrics(available, ops)
        if not any(chosen[op]["wavefronts"] or chosen[op]["total_wavefronts"] for op in ops):
            raise CheckError("this ncu offers no instruction-level shared-memory wavefront metric "
                             "(smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared*); see query_metrics.txt")
        meta["metrics"] = chosen
        names = sorted({n for op in ops for q in chosen[op].values() for n in q})
        base = [ncu, "--clock-control", "none", "--csv", "--kernel-name", "regex:^bank_",
                "--metrics", ",".join(n + ".sum" for n in names)]
        child = [sys.executable, "-m", "flashsim.gpu.check_banks", "--launch"]
        if args.one_by_one:
            launches = []
            raw = []
            for p in pats:
                proc = _run(base + child + ["--only", p.name], args.timeout)
                raw.append(proc.stdout + proc.stderr)
                res = results_by_launch(parse_ncu_csv(proc.stdout))
                launches.append(res[0] if res else {"kernel": "", "metrics": {}})
            (out / "ncu_raw.txt").write_text("\n".join(raw))
        else:
            proc = _run(base + child, args.timeout)
            (out / "ncu_raw.txt").write_text(f"$ {' '.join(base + child)}\n(exit {proc.returncode})\n"
                                             f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
            if "ERR_NVGPUCTRPERM" in proc.stdout + proc.stderr:
                raise CheckError("ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root "
                                 "or allow profiling for all users")
            launches = results_by_launch(parse_ncu_csv(proc.stdout))
            if proc.returncode != 0 or not launches:
                raise CheckError(f"ncu exited {proc.returncode} with {len(launches)} results; see {out / 'ncu_raw.txt'}")
            if len(launches) != len(pats):
                raise CheckError(f"ncu profiled {len(launches)} launches for {len(pats)} patterns; rerun with --one-by-one")
    except CheckError as exc:
        rows = compare(pats, None, None)
        write_report(rows, out, meta)
        print(f"check_banks: error: {exc}", file=sys.stderr)
        print(f"check_banks: {len(pats)} patterns: 0 agree, 0 differ, {len(pats)} not measured (error: {exc})")
        return 2
    rows = compare(pats, launches, chosen)
    summary = write_report(rows, out, meta)
    for r in rows:
        print(f"{r.name:<40} predicted {r.predicted_wavefronts:>3}/{r.predicted_conflicts:>3}  measured "
              f"{_fmt(r.measured_wavefronts):>4}/{_fmt(r.measured_conflicts):>4}  {r.status}")
    print(summary)
    return 0 if all(r.status in ("agree", "not counted by ncu") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
