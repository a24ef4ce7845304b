"""Race detection: flashsim's shared-memory race detector against compute-sanitizer racecheck.

    python -m flashsim.gpu.check_races --out DIR [--sanitizer PATH] [--timeout S] [--dry-run]

For every case in CASES (a race_* kernel of gpu/kernels/probe_smem.cu, one block of two warps, and its
Python twin written with flashsim.warp), it
1. runs ``compute-sanitizer --tool racecheck --racecheck-report all python -m flashsim.gpu.check_races --launch CASE``
   and reads whether racecheck reported a hazard (its "RACECHECK SUMMARY: N hazards displayed" line, or
   any "hazard detected" / "Race reported" line);
2. runs the twin on the simulator (SharedMemory with races=True) and reads whether it reported one;
3. writes ``DIR/races.md`` and ``DIR/races.json`` (expected, racecheck, simulator, agreement, the first
   race the simulator reported, the raw tool output in ``DIR/racecheck_<case>.txt``), prints one line per
   case and a summary line. Exit status 0 when racecheck and the simulator agree on every case that is
   not marked informational, 1 when one differs, 2 when the tool could not run.

``--dry-run`` runs only the simulator twins (no GPU), which the CPU tests use.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from flashsim.errors import CheckError
from flashsim.gpu import runtime

from flashsim.smem import SharedMemory
from flashsim.warp.memory import cp_async, cp_async_commit_group, cp_async_wait_all, cp_async_wait_group, ld_shared, st_shared
from flashsim.warp.sync import syncthreads, syncwarp

FILE = "probe_smem.cu"
LANE = np.arange(32, dtype=np.int64)
GMEM = np.arange(4096, dtype=np.uint32).view(np.uint8)  # the kernels' gsrc buffer (16 KiB)


def _sm() -> SharedMemory:
    return SharedMemory(1, 1024, warps=2)


def _warp(w: int) -> np.ndarray:
    a = np.zeros((1, 2, 32), bool)
    a[0, w] = True
    return a


def _both(addr) -> np.ndarray:
    return np.broadcast_to(np.asarray(addr, np.int64), (1, 2, 32))


def _vals(v) -> np.ndarray:
    return np.broadcast_to(np.asarray(v, np.uint32)[..., None], (1, 2, 32, 1))


TID = np.stack([LANE, LANE + 32])[None]  # (1, 2, 32) thread index


# -------------------------------------------------------------------------------- twins (one per kernel)

def twin_raw_no_barrier(sm):
    st_shared(sm, _both(LANE * 4), _vals(LANE + 1), active=_warp(0), tag="warp0 st vb[lane]")
    ld_shared(sm, _both(LANE * 4), active=_warp(1), tag="warp1 ld vb[lane]")


def twin_raw_syncthreads(sm):
    st_shared(sm, _both(LANE * 4), _vals(LANE + 1), active=_warp(0), tag="warp0 st vb[lane]")
    syncthreads(sm)
    ld_shared(sm, _both(LANE * 4), active=_warp(1), tag="warp1 ld vb[lane]")


def twin_war_no_barrier(sm):
    st_shared(sm, TID * 4, _vals(TID + 1), tag="init vb[tid]")
    syncthreads(sm)
    ld_shared(sm, _both(LANE * 4), active=_warp(1), tag="warp1 ld vb[lane]")
    st_shared(sm, _both(LANE * 4), _vals(LANE + 100), active=_warp(0), tag="warp0 st vb[lane]")


def twin_war_syncthreads(sm):
    st_shared(sm, TID * 4, _vals(TID + 1), tag="init vb[tid]")
    syncthreads(sm)
    ld_shared(sm, _both(LANE * 4), active=_warp(1), tag="warp1 ld vb[lane]")
    syncthreads(sm)
    st_shared(sm, _both(LANE * 4), _vals(LANE + 100), active=_warp(0), tag="warp0 st vb[lane]")


def twin_waw_no_barrier(sm):
    st_shared(sm, _both(LANE * 4), _vals(TID + 1), tag="both warps st vb[lane]")
    syncthreads(sm)
    ld_shared(sm, TID * 4, tag="ld vb[tid]")


def _copy(sm):
    cp_async(sm, GMEM, _both(16 * LANE), _both(16 * LANE), cp_size=16, cache="cg", active=_warp(0), tag="warp0 cp.async")


def twin_cp_async_wait_syncthreads(sm):
    _copy(sm)
    cp_async_commit_group(sm, active=_warp(0))
    cp_async_wait_group(sm, 0, active=_warp(0))
    syncthreads(sm)
    ld_shared(sm, _both(16 * LANE), active=_warp(1), tag="warp1 ld")


def twin_cp_async_no_wait(sm):
    _copy(sm)
    cp_async_commit_group(sm, active=_warp(0))
    syncthreads(sm)
    ld_shared(sm, _both(16 * LANE), active=_warp(1), tag="warp1 ld")
    cp_async_wait_group(sm, 0, active=_warp(0))


def twin_cp_async_no_barrier(sm):
    _copy(sm)
    cp_async_wait_all(sm, active=_warp(0))
    ld_shared(sm, _both(16 * LANE), active=_warp(1), tag="warp1 ld")


def twin_intra_warp_syncwarp(sm):
    st_shared(sm, _both(LANE * 4), _vals(LANE + 1), active=_warp(0), tag="st vb[lane]")
    syncwarp(sm)
    ld_shared(sm, _both(((LANE + 1) % 32) * 4), active=_warp(0), tag="ld vb[lane+1]")


def twin_intra_warp_no_syncwarp(sm):
    st_shared(sm, _both(LANE * 4), _vals(LANE + 1), active=_warp(0), tag="st vb[lane]")
    ld_shared(sm, _both(((LANE + 1) % 32) * 4), active=_warp(0), tag="ld vb[lane+1]")


@dataclass(frozen=True)
class Case:
    kernel: str
    expected: bool  # a hazard is expected
    twin: Callable
    what: str
    informational: bool = False  # racecheck's answer is recorded but not required to agree


CASES: tuple[Case, ...] = (
    Case("race_raw_no_barrier", True, twin_raw_no_barrier, "missing __syncthreads: warp 1 reads what warp 0 wrote"),
    Case("race_raw_syncthreads", False, twin_raw_syncthreads, "control: __syncthreads between write and read"),
    Case("race_war_no_barrier", True, twin_war_no_barrier, "WAR across warps: warp 0 overwrites what warp 1 reads"),
    Case("race_war_syncthreads", False, twin_war_syncthreads, "control: __syncthreads between read and write"),
    Case("race_waw_no_barrier", True, twin_waw_no_barrier, "WAW: both warps write the same words"),
    Case("race_cp_async_wait_syncthreads", False, twin_cp_async_wait_syncthreads,
         "control: cp.async, wait_group 0, __syncthreads, then another warp reads"),
    Case("race_cp_async_no_wait", True, twin_cp_async_no_wait,
         "cp.async read before its wait (a __syncthreads does not complete the copy)", informational=True),
    Case("race_cp_async_no_barrier", True, twin_cp_async_no_barrier,
         "cp.async and wait_all, but no __syncthreads before another warp reads"),
    Case("race_intra_warp_syncwarp", False, twin_intra_warp_syncwarp, "control: __syncwarp between lanes' write and read"),
    Case("race_intra_warp_no_syncwarp", True, twin_intra_warp_no_syncwarp,
         "lanes of one warp read each other's words with no __syncwarp", informational=True),
)


def simulate(case: Case) -> tuple[bool, list[str]]:
    """Run the twin; (hazard reported?, the simulator's race messages)."""
    sm = _sm()
    case.twin(sm)
    return sm.race_count > 0, [str(r) for r in sm.races[:5]]


# -------------------------------------------------------------------------------- racecheck

_SUMMARY_RE = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?", re.IGNORECASE)
_HAZARD_RE = re.compile(r"(hazard detected|Race reported between)", re.IGNORECASE)


def parse_racecheck(text: str) -> int | None:
    """Number of hazards racecheck reported, or None if its output has no verdict."""
    m = _SUMMARY_RE.search(text)
    if m:
        return int(m.group(1))
    n = len(_HAZARD_RE.findall(text))
    if n:
        return n
    if "ERROR SUMMARY: 0 errors" in text:
        return 0
    return None


def launch(kernel: str) -> None:
    cupy = runtime.require_gpu()
    k = runtime.get_kernel(FILE, kernel)
    out = cupy.zeros(64, dtype=cupy.uint32)
    runtime.launch(k, 1, 64, (cupy.asarray(GMEM), out))



def run_racecheck(sanitizer: str, case: Case, timeout: float) -> tuple[int | None, str]:
    cmd = [sanitizer, "--tool", "racecheck", "--racecheck-report", "all", sys.executable, "-m", "flashsim.gpu.check_races",
           "--launch", case.kernel]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise CheckError(f"{sanitizer} not found: install the CUDA toolkit or pass --sanitizer PATH") from None
    except subprocess.TimeoutExpired:
        return None, f"$ {' '.join(cmd)}\ntimed out after {timeout:.0f} s"
    text = f"$ {' '.join(cmd)}\n(exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}"
    return parse_racecheck(proc.stdout + proc.stderr), text


@dataclass
class Row:
    case: str
    what: str
    expected: bool
    simulator: bool
    racecheck: int | None
    informational: bool
    status: str
    first_race: str


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="output folder")
    ap.add_argument("--sanitizer", default="compute-sanitizer", help="compute-sanitizer binary (default: on PATH)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case (default 300)")
    ap.add_argument("--dry-run", action="store_true", help="simulator twins only (no GPU)")
    ap.add_argument("--launch", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.launch:
        launch(args.launch)
        return 0
    if args.out is None:
        ap.error("--out DIR is required")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    sanitizer = shutil.which(args.sanitizer) or args.sanitizer
    rows: list[Row] = []
    error = None
    for case in CASES:
        sim, msgs = simulate(case)
        rc = None
        if not args.dry_run and error is None:
            try:
                rc, text = run_racecheck(sanitizer, case, args.timeout)
                (out / f"racecheck_{case.kernel}.txt").write_text(text)
            except CheckError as exc:
                error = str(exc)
        if rc is None:
            status = "simulator only" if args.dry_run else "racecheck gave no verdict"
        else:
            status = "agree" if (rc > 0) == sim else "DIFFER"
        if sim != case.expected:
            status += " (simulator differs from the expected answer)"
        rows.append(Row(case.kernel, case.what, case.expected, sim, rc, case.informational, status,
                        msgs[0] if msgs else ""))
    lines = ["# Race detection: flashsim vs compute-sanitizer racecheck", "",
             f"- date: {time.strftime('%Y-%m-%d %H:%M:%S')}; tool: `{sanitizer} --tool racecheck --racecheck-report all`",
             "- informational cases: racecheck's answer is recorded, agreement is not required "
             "(racecheck's handling of cp.async completion and of hazards inside one warp is not documented).", "",
             "| case | what | expected | racecheck hazards | simulator | status | first simulated race |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        rcs = "-" if r.racecheck is None else str(r.racecheck)
        lines.append(f"| {r.case}{' (info)' if r.informational else ''} | {r.what} | {'hazard' if r.expected else 'none'} | "
                     f"{rcs} | {'hazard' if r.simulator else 'none'} | {r.status} | {r.first_race} |")
    required = [r for r in rows if not r.informational]
    agree = sum(r.status.startswith("agree") for r in required)
    differ = sum(r.status.startswith("DIFFER") for r in required)
    sim_ok = sum(r.simulator == r.expected for r in rows)
    summary = (f"check_races: {len(rows)} cases ({len(required)} required): {agree} agree, {differ} differ, "
               f"{len(required) - agree - differ} without a racecheck verdict; simulator as expected on {sim_ok}/{len(rows)}")
    if error:
        summary += f" (error: {error})"
    lines += ["", summary, ""]
    (out / "races.md").write_text("\n".join(lines))
    (out / "races.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    for r in rows:
        print(f"{r.case:<34} expected {'hazard' if r.expected else 'none  '}  racecheck "
              f"{'-' if r.racecheck is None else r.racecheck:>3}  simulator {'hazard' if r.simulator else 'none  '}  {r.status}")
    print(summary)
    if error:
        print(f"check_races: error: {error}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0 if sim_ok == len(rows) else 1
    return 0 if differ == 0 and agree == len(required) and sim_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
