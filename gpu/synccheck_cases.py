"""Barrier misuse planted in gpu/kernels/synccheck_planted.cu: compute-sanitizer's synccheck and the plain GPU run
on the H100, next to flashsim's interpreter with synccheck on, case by case.

    python -m flashsim.gpu.synccheck_cases --out DIR [--sanitizer PATH] [--timeout S] [--jobs N]
                                           [--cases NAME,NAME...] [--dry-run]

Every case of CASES launches one kernel of synccheck_planted.cu in one CTA (its block size and the int
arguments after ``out`` are in the table; ``out`` is 4 * block ints of zeros). For each case:

1. flashsim: the file is compiled once by NVRTC as the project compiles every kernel
   (``flashsim.kernels.sources.interpreted_module``) and the case runs in the interpreter inside
   ``flashsim.cuda.checking(synccheck=True)``: its findings (kind, rule, warp, lanes, PC, SASS, source line),
   whether the launch completed, deadlocked (BarrierDeadlock) or was refused (NotImplementedError), and ``out``;
2. on the GPU (not ``--dry-run``), each in a fresh child process (``python -m flashsim.gpu.synccheck_cases
   --launch CASE --cubin FILE``: cupy loads the SAME cubin bytes and launches the case once), with a timeout
   (``--timeout``, 20 s), at most ``--jobs`` at a time:
   a. under ``compute-sanitizer --tool synccheck``: its exit status, whether it hung, its error records
      (the message after "Barrier error detected.", the PC, the source line, the thread and block it names) and
      its raw output (trimmed in the JSON, whole in DIR/raw/);
   b. plainly: whether the kernel completed, hung (killed at the timeout) or failed, and ``out`` (compared
      with the interpreter's, bit for bit);
3. DIR/synccheck_cases.json and DIR/synccheck_cases.md: per case the guess (``expected``: what compute-sanitizer
   and the plain run were guessed to do, the guesses flashsim's decision points were set by), the sanitizer's
   verdict, the plain run, flashsim's verdict, and whether flashsim and the sanitizer agree (the same set of
   kinds; and whether every source line the sanitizer names is one of flashsim's). The header says what the
   measured verdicts make of each decision point of flashsim.sass.synccheck (EXITED_THREADS,
   WARPSYNC_EXITED_LANES), next to the value flashsim has.

One case failing (a child that cannot load the cubin, a tool that crashes) is recorded and the others go on; with
every case's two runs at most 8 at a time (the cases that may hang first) and 20 s timeouts, the run takes well
under two minutes. Exit status: 0 when flashsim and the sanitizer agree wherever both gave a verdict, 1 when
they differ on a case, 2 when the tool could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FILE = "synccheck_planted.cu"
REL_PATH = f"gpu/kernels/{FILE}"
REPO = Path(__file__).resolve().parent.parent
TOOL_ARGS = ("--tool", "synccheck", "--show-backtrace", "no", "--print-limit", "0")
DEFAULT_TIMEOUT = 20.0
RESULT_MARK = "SYNCCHECK_CASE"  # the child's one JSON line
RAW_CHARS = 4000  # raw output kept per run in the JSON

# the kinds flashsim reports (flashsim.sass.synccheck.KINDS), as the table writes them
BLOCK, WARP, ARGS = "divergent block", "divergent warp", "invalid arguments"
CLEAN, HANG, FAULT = "clean", "hang", "fault"  # FAULT: the kernel stopped with an error


@dataclass(frozen=True)
class Case:
    """One planted case: ``kernel`` of synccheck_planted.cu in one CTA of ``block`` threads, the int32 ``args``
    after ``out``; ``marker`` the ``// SYNC:<marker>`` of the barrier it plants; ``sanitizer`` what
    compute-sanitizer 2025.3.1's synccheck reported on the H200 (2026-12-03, traces/synccheck: the kinds,
    ``("clean",)``, ``("hang",)`` or ``("fault",)``); ``plain`` what the plain H200 run did ('completes' / 'hangs' /
    'faults'); ``may_hang``: a barrier that may wait for threads that never come
    (the runner's timeout ends it); ``decides``: the decision point of flashsim.sass.synccheck it settles."""

    name: str
    kernel: str
    block: int
    args: tuple
    what: str
    marker: str
    sanitizer: tuple
    plain: str = "completes"
    may_hang: bool = False
    decides: str = ""
    note: str = ""


_EXIT = "EXITED_THREADS"
_WSX = "WARPSYNC_EXITED_LANES"

CASES: tuple[Case, ...] = (
    Case("ctrl", "sync_ctrl", 64, (), "control: every thread reaches the one __syncthreads", "ctrl", (CLEAN,)),
    Case("div_block_exit", "sync_div_block_exit", 64, (32,),
         "if (tid < 32) __syncthreads(); 64 threads: warp 1 skips it, writes, exits while warp 0 waits",
         "div_block_exit", (CLEAN,), decides=_EXIT,
         note="ptxas predicates the barrier (@!P0 BAR.SYNC): warp 1 executes it with its guard false"),
    Case("two_sites", "sync_div_block_two_sites", 64, (32,),
         "warp 0 at one __syncthreads, warp 1 at a later one (two barrier instructions of barrier 0), then warp 0 "
         "alone at the later one while warp 1 exits", "two_sites_first", (BLOCK,)),
    Case("div_warp_32", "sync_div_warp", 32, (16,), "if (tid < 16) __syncthreads(); one warp: lanes 16..31 skip it",
         "div_warp", (WARP,)),
    Case("div_warp_64", "sync_div_warp", 64, (16,),
         "if (tid < 16) __syncthreads(); 64 threads: lanes 16..31 of warp 0 and all of warp 1 skip it", "div_warp",
         (WARP,)),
    Case("early_return_warp", "sync_early_return", 64, (32,),
         "if (tid >= 32) return; __syncthreads(); warp 1 exits before warp 0 reaches the barrier", "early_return",
         (CLEAN,), decides=_EXIT),
    Case("early_return_half", "sync_early_return", 64, (48,),
         "if (tid >= 48) return; __syncthreads(); lanes 16..31 of warp 1 exit first", "early_return", (CLEAN,),
         decides=_EXIT),
    Case("bar64_ctrl", "bar_sync_64", 64, (), "control: bar.sync 1, 64 by the CTA's 64 threads", "bar_sync_64",
         (CLEAN,)),
    Case("bar64_excess", "bar_sync_64", 96, (),
         "bar.sync 1, 64 by 96 threads: one warp more than the count", "bar_sync_64", (HANG,), plain="hangs",
         may_hang=True, note="the third warp waits for a second generation of the barrier that nobody completes"),
    Case("bar64_short", "bar_sync_64", 32, (), "bar.sync 1, 64 by 32 threads: the count exceeds the CTA",
         "bar_sync_64", (HANG,), plain="hangs", may_hang=True),
    Case("bar_n48", "bar_sync_n", 64, (48,), "bar.sync 1, 48 (a register count) by 64 threads: not a multiple of 32",
         "bar_sync_n", (FAULT,), plain="faults", note="cudaErrorIllegalInstruction"),
    Case("syncwarp_exited", "syncwarp_exited", 32, (16, 32),
         "__syncwarp(0xffffffff) after lanes 16..31 returned (in a branch: WARPSYNC.ALL)", "syncwarp_exited",
         (CLEAN,), decides=_WSX,
         note="the CUDA C++ Programming Guide asks only the non-exited lanes of the mask to take part"),
    Case("syncwarp_exited_nop", "syncwarp_exited_nop", 32, (16,),
         "the same __syncwarp in converged code: ptxas makes it a NOP", "syncwarp_exited_nop", (CLEAN,)),
    Case("syncwarp_not_in_mask", "syncwarp_not_in_mask", 32, (32,),
         "__syncwarp(0x0000ffff) executed by all 32 lanes (WARPSYNC R): lanes 16..31 not in it",
         "syncwarp_not_in_mask", (ARGS,), plain="faults", may_hang=True,
         note="the PTX ISA leaves it undefined; the plain run stops with cudaErrorIllegalInstruction"),
    Case("syncwarp_sample", "syncwarp_sample", 32, (16,),
         "compute-sanitizer's illegal_syncwarp sample: lanes 0..16 at __syncwarp(ballot(tid < 16)): lane 16 not in it",
         "syncwarp_sample", (ARGS,), plain="faults", may_hang=True,
         note="the PTX ISA leaves it undefined; the plain run stops with cudaErrorIllegalInstruction"),
    Case("syncwarp_split_ctrl", "syncwarp_split_masks", 32, (16,),
         "control: each half of the warp in its own branch syncs with a mask of exactly its lanes", "split_low",
         (CLEAN,)),
    Case("syncwarp_mixed_masks", "syncwarp_mixed_masks", 32, (16,),
         "one WARPSYNC R, lanes 0..15 with 0x0000ffff, lanes 16..31 with 0xffffffff", "syncwarp_mixed_masks",
         (CLEAN,), may_hang=True),
    Case("cg_sync", "cg_sync_divergent", 64, (32,),
         "cooperative_groups this_thread_block().sync() taken by warp 0 only", "cg_sync", (CLEAN,)),
    Case("sync_count", "sync_count_divergent", 64, (32,), "__syncthreads_count taken by warp 0 only", "sync_count",
         (CLEAN,)),
    Case("sync_and", "sync_and_divergent", 64, (32,), "__syncthreads_and taken by warp 0 only", "sync_and", (CLEAN,)),
    Case("sync_or", "sync_or_divergent", 64, (32,), "__syncthreads_or taken by warp 0 only", "sync_or", (CLEAN,)),
)

CASE_BY_NAME = {c.name: c for c in CASES}
assert len(CASE_BY_NAME) == len(CASES), "case names must be unique"


def out_words(case: Case) -> int:
    return 4 * case.block


# ----------------------------------------------------------------------------------------------------
# The source: markers
# ----------------------------------------------------------------------------------------------------

_MARK_RE = re.compile(r"//\s*SYNC:(\w+)")


def source_path() -> Path:
    return REPO / "gpu" / "kernels" / FILE


def markers(text: str | None = None) -> dict[str, int]:
    """{marker: line number} of the ``// SYNC:<marker>`` comments of synccheck_planted.cu."""
    text = source_path().read_text(encoding="utf-8") if text is None else text
    return {m.group(1): i for i, line in enumerate(text.splitlines(), 1) for m in _MARK_RE.finditer(line)}


# ----------------------------------------------------------------------------------------------------
# flashsim
# ----------------------------------------------------------------------------------------------------


def compile_module():
    """synccheck_planted.cu as the interpreter builds every kernel (``.cubin``: the bytes the GPU loads too)."""
    from flashsim.kernels.sources import interpreted_module

    return interpreted_module(FILE)


def _base(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def finding_dict(f) -> dict:
    """A flashsim.sass.checking.SyncFinding as JSON: the kernel's own line is the outermost of ``lines``."""
    from flashsim.sass.synccheck import ranges

    a = f.access
    return {"kind": f.kind, "reason": f.reason, "cta": a.cta, "warp": a.warp, "lanes": ranges(f.lanes),
            "threads": ranges(f.threads), "pc": a.pc, "sass": a.sass, "file": _base(a.file), "line": a.line,
            "lines": sorted({ln for fn, ln in f.lines if _base(fn) == FILE}),
            "sites": [{"pc": s.pc, "warp": s.warp, "line": s.line} for s in f.sites], "message": f.message}


def interpret(module, case: Case) -> dict:
    """The case in the interpreter with synccheck on: status, findings, kinds, ``out``."""
    import flashsim.cuda as fc
    from flashsim.errors import SimulatedFault
    from flashsim.sass.machine import BarrierDeadlock

    res: dict = {"status": "", "kinds": [], "findings": [], "count": 0, "out": None, "error": ""}
    try:
        out = fc.zeros((out_words(case),), np.int32)
        args = (out,) + tuple(np.int32(v) for v in case.args)
        with fc.checking(banks=False, synccheck=True) as rep:
            try:
                module.get_function(case.kernel)((1,), (case.block,), args)
                res["status"] = "completes"
                res["out"] = [int(x) for x in out.get()]
            except BarrierDeadlock as exc:
                res["status"] = "deadlock"
                res["error"] = str(exc).splitlines()[0]
            except SimulatedFault as exc:
                res["status"] = "faults"
                res["error"] = str(exc)[:400]
            except NotImplementedError as exc:
                res["status"] = "refused"
                res["error"] = str(exc)[:400]
    except Exception as exc:  # noqa: BLE001 - the case itself failed: recorded, the others go on
        res["status"] = "error"
        res["error"] = f"{type(exc).__name__}: {exc}"[:400]
        return res
    res["findings"] = [finding_dict(f) for f in rep.sync_findings]
    res["count"] = rep.sync_count
    res["kinds"] = sorted({f.kind for f in rep.sync_findings})
    return res


def flashsim_verdict(sim: dict) -> str:
    if sim["status"] == "error":
        return "error: " + sim["error"][:120]
    v = " + ".join(sim["kinds"]) or CLEAN
    return v + ("" if sim["status"] == "completes" else f" ({sim['status']})")


# ----------------------------------------------------------------------------------------------------
# compute-sanitizer's output
# ----------------------------------------------------------------------------------------------------

_PREFIX_RE = re.compile(r"^=+ ?")
_BARRIER_RE = re.compile(r"^Barrier error detected\.?\s*(.*?)\s*$", re.IGNORECASE)
_BY_RE = re.compile(r"^by thread \((\d+),(\d+),(\d+)\)(?: in block \((\d+),(\d+),(\d+)\))?", re.IGNORECASE)
_SUMMARY_RE = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?", re.IGNORECASE)
_KIND_OF = (("divergent thread(s) in warp", WARP), ("divergent thread(s) in block", BLOCK),
            ("invalid argument", ARGS))


def kind_of(message: str) -> str:
    """flashsim's kind for the message after "Barrier error detected." ('other: <message>' for the rest)."""
    low = message.lower()
    for text, kind in _KIND_OF:
        if low.startswith(text):
            return kind
    return f"other: {message}"


def parse_synccheck(text: str) -> dict:
    """compute-sanitizer synccheck's output: {"errors": the ERROR SUMMARY count (None: no summary), "records":
    [{"message", "kind", "pc", "file", "line", "thread", "block"}], "kinds": sorted kinds}."""
    from flashsim.gpu.check_diagnostics import parse_location

    records: list[dict] = []
    errors = None
    cur = None
    for raw in text.splitlines():
        line = _PREFIX_RE.sub("", raw.rstrip()).strip()
        if not line:
            cur = None
            continue
        m = _SUMMARY_RE.search(line)
        if m:
            if errors is None:  # past --print-limit a second summary line follows: the count is the first's
                errors = int(m.group(1))
            cur = None
            continue
        m = _BARRIER_RE.match(line)
        if m:
            cur = {"message": m.group(1), "kind": kind_of(m.group(1)), "pc": None, "file": "", "line": None,
                   "thread": None, "block": None}
            records.append(cur)
            continue
        if cur is None:
            continue
        if line.lower().startswith("at ") and cur["pc"] is None and cur["line"] is None:
            cur["pc"], cur["file"], cur["line"] = parse_location(line[3:])
            continue
        m = _BY_RE.match(line)
        if m:
            cur["thread"] = [int(x) for x in m.group(1, 2, 3)]
            if m.group(4) is not None:
                cur["block"] = [int(x) for x in m.group(4, 5, 6)]
    return {"errors": errors, "records": records, "kinds": sorted({r["kind"] for r in records})}


def sanitizer_kinds(run: dict | None) -> list | None:
    """The kinds the tool reported ([] for clean), or None when its run gave no verdict (hung with nothing
    reported, did not launch, no summary)."""
    if run is None:
        return None
    p = run.get("parsed") or {}
    if p.get("records"):
        return list(p["kinds"])
    if not run.get("hung") and p.get("errors") == 0 and run.get("launched"):
        return []
    return None


def sanitizer_verdict(run: dict | None) -> str:
    """'clean', the kinds ('divergent block + divergent warp'; '(hung)' when it then hung), 'hang', or
    'no verdict (...)'."""
    if run is None:
        return "-"
    kinds = sanitizer_kinds(run)
    if kinds is None:
        return HANG if run.get("hung") else f"no verdict ({run.get('message') or 'exit %s' % run.get('exit')})"
    return (" + ".join(kinds) or CLEAN) + (" (hung)" if run.get("hung") else "")


# ----------------------------------------------------------------------------------------------------
# Running on the GPU
# ----------------------------------------------------------------------------------------------------


def find_sanitizer(given: str | None) -> str:
    from flashsim.gpu.check_diagnostics import find_sanitizer as find

    return find(given)


def _kill_group(proc) -> None:
    from flashsim.gpu.check_diagnostics import _kill_group as kill

    kill(proc)


def child_command(case: Case, cubin: Path) -> list[str]:
    return [sys.executable, "-m", "flashsim.gpu.synccheck_cases", "--launch", case.name, "--cubin", str(cubin)]


def run_child(cmd: list[str], timeout: float) -> dict:
    """Run ``cmd`` in its own process group; {"exit", "hung", "seconds", "text", "result" (the child's JSON
    line or None), "launched", "message"}."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO), env=env,
                                start_new_session=True)
    except OSError as exc:  # no such binary, not executable
        return {"exit": None, "hung": False, "seconds": 0.0, "text": "", "result": None, "launched": False,
                "message": f"cannot run {cmd[0]}: {exc}", "unavailable": True}
    hung = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        _kill_group(proc)
        stdout, stderr = proc.communicate()
    text = f"$ {' '.join(cmd)}\n(exit {proc.returncode}{', killed after %.0f s' % timeout if hung else ''})\n" \
           f"{stdout}\n{stderr}"
    result = None
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARK + " "):
            try:
                result = json.loads(line[len(RESULT_MARK) + 1:])
            except json.JSONDecodeError:
                pass
    launched = hung or (result is not None and result.get("status") == "done")
    msg = "" if launched else ((result or {}).get("error") or " | ".join((stdout + stderr).strip().splitlines()[-3:]))
    return {"exit": proc.returncode, "hung": hung, "seconds": round(time.perf_counter() - t0, 2), "text": text,
            "result": result, "launched": launched, "message": msg[:400]}


def run_sanitizer(sanitizer: str, case: Case, cubin: Path, timeout: float) -> dict:
    res = run_child([sanitizer, *TOOL_ARGS, *child_command(case, cubin)], timeout)
    res["parsed"] = parse_synccheck(res["text"])
    return res


def run_plain(case: Case, cubin: Path, timeout: float) -> dict:
    res = run_child(child_command(case, cubin), timeout)
    r = res["result"]
    res["outcome"] = ("hangs" if res["hung"] else "completes" if res["launched"] else
                      "fails: " + (res["message"] or f"exit {res['exit']}"))
    res["out"] = r.get("out") if r else None
    return res


def launch_case(name: str, cubin_path: str) -> int:
    """The child: load the cubin with cupy, launch the case once, print one RESULT_MARK line."""
    case = CASE_BY_NAME.get(name)
    if case is None:
        print(f"synccheck_cases: no case {name!r} (cases: {', '.join(CASE_BY_NAME)})", file=sys.stderr)
        return 2
    from flashsim.errors import LaunchError
    from flashsim.gpu import runtime

    try:
        cupy = runtime.require_gpu()
        mod = runtime.load_cubin(Path(cubin_path).read_bytes())
        kernel = mod.get_function(case.kernel)
        out = cupy.zeros(out_words(case), np.int32)
        args = (out,) + tuple(np.int32(v) for v in case.args)
        print(f"{RESULT_MARK} " + json.dumps({"case": name, "status": "launching"}), flush=True)
        runtime.launch(kernel, (1,), (case.block,), args)
        got = [int(x) for x in cupy.asnumpy(out)]
    except LaunchError as exc:
        print(f"{RESULT_MARK} " + json.dumps({"case": name, "status": "failed", "error": str(exc)[:400]}), flush=True)
        return 3
    except Exception as exc:  # noqa: BLE001 - the child reports whatever stopped it, one line
        print(f"{RESULT_MARK} " + json.dumps({"case": name, "status": "error",
                                              "error": f"{type(exc).__name__}: {exc}"[:400]}), flush=True)
        return 4
    print(f"{RESULT_MARK} " + json.dumps({"case": name, "status": "done", "out": got}), flush=True)
    return 0


# ----------------------------------------------------------------------------------------------------
# Comparing and reporting
# ----------------------------------------------------------------------------------------------------


def expected_text(case: Case) -> str:
    return f"synccheck: {' + '.join(case.sanitizer)}; plain: {case.plain}"


def compare(case: Case, sim: dict, tool: dict | None, plain: dict | None, marks: dict) -> dict:
    """flashsim against the sanitizer (the same kinds; the sanitizer's lines among flashsim's) and against
    the plain run (completes / deadlock-hang; the same ``out``)."""
    out: dict = {"kinds_agree": None, "lines_covered": None, "missing_lines": [], "hang_agree": None,
                 "out_same": None, "on_marker": None}
    lines = {ln for f in sim["findings"] for ln in f["lines"]}
    if case.marker in marks and sim["findings"]:
        out["on_marker"] = marks[case.marker] in lines
    got = sanitizer_kinds(tool)
    if got is not None and sim["status"] != "error":
        out["kinds_agree"] = sorted(got) == sim["kinds"]
        tlines = {r["line"] for r in tool["parsed"]["records"] if r["line"] is not None and r["file"] in ("", FILE)}
        if tlines:
            miss = sorted(tlines - lines)
            out["lines_covered"], out["missing_lines"] = not miss, miss
    if plain is not None and (sim["status"] == "faults" or plain["outcome"].startswith("fails")):
        # the H200 stops such a kernel with cudaErrorIllegalInstruction; the interpreter with a SimulatedFault
        out["fault_agree"] = (sim["status"] == "faults") == ("IllegalInstruction" in plain["outcome"])
    if plain is not None and sim["status"] in ("completes", "deadlock"):
        if plain["outcome"] in ("completes", "hangs"):
            out["hang_agree"] = (plain["outcome"] == "hangs") == (sim["status"] == "deadlock")
        if plain.get("out") is not None and sim["out"] is not None:
            g, s = np.asarray(plain["out"], np.int64), np.asarray(sim["out"], np.int64)
            out["out_same"] = bool(g.shape == s.shape and (g == s).all())
            if not out["out_same"] and g.shape == s.shape:
                out["out_differ_at"] = [int(i) for i in np.nonzero(g != s)[0][:16]]
    return out


def status_of(case: Case, sim: dict, tool: dict | None, cmp: dict, dry_run: bool) -> str:
    if sim["status"] == "error":
        return "flashsim error"
    if dry_run:
        return "flashsim only"
    if tool is None:
        return "tool did not run"
    if cmp.get("fault_agree") is False:
        return "DIFFER (fault)"
    if sanitizer_kinds(tool) is None:
        if cmp.get("fault_agree"):
            return "agree (both fault)"
        return "tool hung" if tool.get("hung") else "no tool verdict"
    if not cmp["kinds_agree"]:
        return "DIFFER (kinds)"
    if cmp["lines_covered"] is False:
        return "DIFFER (lines)"
    return "agree"


def decisions(rows: list[dict]) -> list[str]:
    """What the measured verdicts make of the decision points of flashsim.sass.synccheck."""
    from flashsim.sass import synccheck as sc

    by = {r["case"]: r for r in rows}

    def reported(name: str, kind: str) -> bool | None:
        r = by.get(name)
        kinds = None if r is None else sanitizer_kinds(r["sanitizer"])
        return None if kinds is None else kind in kinds

    out = []
    exit_block = reported("div_block_exit", BLOCK)
    early = [reported(n, k) for n in ("early_return_warp", "early_return_half") for k in (BLOCK, WARP)]
    if exit_block is None or None in early:
        reading = "not measured (a case without a verdict)"
    elif exit_block and not any(early):
        reading = "'during'"
    elif exit_block and any(early):
        reading = "'always'"
    elif not exit_block and not any(early):
        reading = "'never'"
    else:
        reading = "inconsistent (early returns reported, the divergent __syncthreads not)"
    out.append(f"- `EXITED_THREADS`: flashsim {sc.EXITED_THREADS!r}; the measured verdicts read {reading} "
               "(div_block_exit, early_return_warp, early_return_half)")
    wsx = reported("syncwarp_exited", ARGS)
    out.append(f"- `WARPSYNC_EXITED_LANES`: flashsim {sc.WARPSYNC_EXITED_LANES}; the measured verdict reads "
               + ("not measured" if wsx is None else str(wsx)) + " (syncwarp_exited)")
    return out


def _md(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _yn(v) -> str:
    return "-" if v is None else ("yes" if v else "NO")


def write_report(out: Path, rows: list[dict], header: list[str], summary: str) -> None:
    lines = ["# Planted barrier misuse: compute-sanitizer synccheck, the plain GPU run, flashsim", "", *header, "",
             "| case | what | H200 (recorded) | synccheck | plain run | flashsim | agree | lines | out same | "
             "flashsim's first finding |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        case = CASE_BY_NAME[r["case"]]
        sim, cmp = r["flashsim"], r["comparison"]
        t = r["sanitizer"]
        tsum = sanitizer_verdict(t) if t is not None else "-"
        if t is not None and t.get("parsed", {}).get("records"):
            rec = t["parsed"]["records"][0]
            tsum += f" (line {rec['line']}, thread {tuple(rec['thread']) if rec['thread'] else '?'}; " \
                    f"{t['parsed']['errors']} errors)"
        plain = r["plain"]["outcome"] if r["plain"] is not None else "-"
        first = sim["findings"][0] if sim["findings"] else None
        ff = (f"{first['kind']} ({first['reason']}) line {','.join(map(str, first['lines'])) or first['line']} "
              f"warp={first['warp']} lanes={first['lanes']}" if first else "")
        what = case.what + (f" — {case.note}" if case.note else "") + (" (may hang)" if case.may_hang else "")
        lines.append(f"| {_md(case.name)} | {_md(what)} | {_md(expected_text(case))} | {_md(tsum)} | {_md(plain)} | "
                     f"{_md(flashsim_verdict(sim))} | {_md(r['status'])} | {_yn(cmp['lines_covered'])} | "
                     f"{_yn(cmp['out_same'])} | {_md(ff)} |")
    lines += ["", summary, ""]
    (out / "synccheck_cases.md").write_text("\n".join(lines), encoding="utf-8")


def _trim(run: dict | None) -> dict | None:
    if run is None:
        return None
    d = dict(run)
    text = d.pop("text", "")
    d["raw"] = text if len(text) <= RAW_CHARS else text[:RAW_CHARS] + f"\n... ({len(text) - RAW_CHARS} more chars)"
    return d


def select_cases(spec: str | None) -> list[Case]:
    if not spec:
        return list(CASES)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in CASE_BY_NAME]
    if bad:
        raise SystemExit(f"synccheck_cases: unknown case(s) {', '.join(bad)} (cases: {', '.join(CASE_BY_NAME)})")
    return [CASE_BY_NAME[n] for n in names]


def _versions(sanitizer: str | None) -> list[str]:
    out = []
    try:
        from flashsim.gpu import runtime

        info = runtime.device_info()
        out.append(f"- GPU: {info['name']} ({info['arch']}), driver {info['driver_release']}, CUDA runtime "
                   f"{info['cuda_runtime_version']}, cupy {info['cupy_version']}")
    except Exception as exc:  # noqa: BLE001 - the header says what it could not learn
        out.append(f"- GPU: unknown ({type(exc).__name__}: {str(exc)[:120]})")
    if sanitizer:
        try:
            p = subprocess.run([sanitizer, "--version"], capture_output=True, text=True, timeout=15)
            ver = " ".join(p.stdout.strip().splitlines()[-1:]) or p.stderr.strip()[:120]
        except (OSError, subprocess.TimeoutExpired) as exc:
            ver = f"unknown ({exc})"
        out.append(f"- tool: `{sanitizer} {' '.join(TOOL_ARGS)}` ({ver})")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="output folder")
    ap.add_argument("--sanitizer", default=None, help="compute-sanitizer binary (default: on PATH, else "
                                                      "/usr/local/cuda/bin/compute-sanitizer)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help=f"seconds per run before it counts as hung and is killed (default {DEFAULT_TIMEOUT:g})")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                    help="runs at once (default min(8, cores))")
    ap.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    ap.add_argument("--dry-run", action="store_true", help="the interpreter only (no GPU)")
    ap.add_argument("--launch", help=argparse.SUPPRESS)
    ap.add_argument("--cubin", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.launch:
        if not args.cubin:
            ap.error("--launch needs --cubin FILE")
        return launch_case(args.launch, args.cubin)
    if args.out is None:
        ap.error("--out DIR is required")
    if args.timeout <= 0:
        ap.error(f"--timeout must be positive, got {args.timeout}")
    cases = select_cases(args.cases)
    out: Path = args.out
    (out / "raw").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    module = compile_module()
    cubin = out / "synccheck_planted.cubin"
    cubin.write_bytes(module.cubin)
    marks = markers()
    sims = {c.name: interpret(module, c) for c in cases}
    sanitizer = None if args.dry_run else find_sanitizer(args.sanitizer)
    tools: dict = {}
    plains: dict = {}
    tool_error = ""
    if not args.dry_run:
        def one(job):
            kind, case = job
            try:
                res = run_sanitizer(sanitizer, case, cubin, args.timeout) if kind == "tool" else \
                    run_plain(case, cubin, args.timeout)
            except Exception as exc:  # noqa: BLE001 - one case failing must not stop the others
                res = {"exit": None, "hung": False, "launched": False, "text": "", "result": None, "parsed": None,
                       "outcome": f"fails: {type(exc).__name__}: {exc}", "out": None,
                       "message": f"{type(exc).__name__}: {exc}"}
            (out / "raw" / f"{case.name}.{'synccheck' if kind == 'tool' else 'plain'}.txt").write_text(
                res.get("text", ""), encoding="utf-8")
            return kind, case.name, res

        # the cases that may hang first: their timeouts run while the others do
        jobs = [(k, c) for c in sorted(cases, key=lambda c: not c.may_hang) for k in ("tool", "plain")]
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for kind, name, res in pool.map(one, jobs):
                (tools if kind == "tool" else plains)[name] = res
                if kind == "tool" and res.get("unavailable") and not tool_error:
                    tool_error = res["message"]
    rows = []
    for case in cases:
        sim, tool, plain = sims[case.name], tools.get(case.name), plains.get(case.name)
        cmp = compare(case, sim, tool, plain, marks)
        st = status_of(case, sim, tool, cmp, args.dry_run)
        rows.append({"case": case.name, "kernel": case.kernel, "block": case.block, "args": list(case.args),
                     "what": case.what, "note": case.note, "may_hang": case.may_hang, "decides": case.decides,
                     "marker_line": marks.get(case.marker), "expected": {"synccheck": list(case.sanitizer),
                                                                          "plain": case.plain},
                     "flashsim": sim, "flashsim_verdict": flashsim_verdict(sim), "sanitizer": _trim(tool),
                     "sanitizer_verdict": sanitizer_verdict(tool) if tool is not None else None,
                     "plain": _trim(plain), "comparison": cmp, "status": st})
        print(f"{case.name:<22} expected {' + '.join(case.sanitizer):<34} synccheck "
              f"{(sanitizer_verdict(tool) if tool is not None else '-')[:34]:<34} plain "
              f"{(plain['outcome'] if plain else '-')[:10]:<10} flashsim {flashsim_verdict(sim)[:48]:<48} {st}")
    agree = sum(r["status"] == "agree" for r in rows)
    differ = sum(r["status"].startswith("DIFFER") for r in rows)
    summary = (f"synccheck_cases: {len(rows)} cases in {time.perf_counter() - t0:.0f} s: "
               + ("dry run (the interpreter only)" if args.dry_run else
                  f"{agree} agree, {differ} differ, {len(rows) - agree - differ} without a comparable tool verdict"))
    if tool_error:
        summary += f" (error: {tool_error})"
    from flashsim.sass import synccheck as sc

    header = [f"- date: {time.strftime('%Y-%m-%d %H:%M:%S')}; source: `{REL_PATH}`; cubin sha256 `{module.sha256}`",
              "- flashsim: `flashsim.cuda.checking(synccheck=True)`, the default schedule; decision points "
              f"`EXITED_THREADS={sc.EXITED_THREADS!r}`, `WARPSYNC_EXITED_LANES={sc.WARPSYNC_EXITED_LANES}`",
              *([] if args.dry_run else _versions(sanitizer)),
              f"- every run in its own process, killed after {args.timeout:g} s (`hang`); raw output in `raw/`",
              "- H200 (recorded): what compute-sanitizer and the plain run gave on the H200 on 2026-12-03 (the table "
              "in gpu/synccheck_cases.py); agree: the same set of kinds "
              "(divergent block / divergent warp / invalid arguments); lines: every line the tool names is one of "
              "flashsim's; out same: the plain GPU run's `out` equals the interpreter's",
              "", "Decision points (flashsim.sass.synccheck):", *decisions(rows)]
    write_report(out, rows, header, summary)
    (out / "synccheck_cases.json").write_text(json.dumps({"header": header, "summary": summary, "cases": rows},
                                                         indent=1, default=str), encoding="utf-8")
    print(summary)
    print(f"wrote {out / 'synccheck_cases.md'} and {out / 'synccheck_cases.json'}")
    if tool_error:
        print(f"synccheck_cases: error: {tool_error}", file=sys.stderr)
        return 2
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
