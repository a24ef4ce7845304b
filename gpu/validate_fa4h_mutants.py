"""fa4h.cu's planted protocol bugs (FH_MUTANT 1..12, gpu/fa4h_mutants.py) on the GPU and under compute-sanitizer.

    python -m flashsim.gpu.validate_fa4h_mutants --out DIR [--jobs 8] [--timeout 20] [--tool-timeout 60]
                                                 [--tools racecheck,synccheck,memcheck] [--sanitizer PATH]
                                                 [--mutants 1,2,...]
    python -m flashsim.gpu.validate_fa4h_mutants --run-one N --problem P --cubin FILE [--outputs FILE]
                                                 [--hang-after S]                                  (the child)

1. Builds: the correct kernel (FH_MUTANT=0) and each mutant, by flashsim's NVRTC for sm_90a with the spec's
   options (flashsim.kernels.sources.interpreted_module): the very cubins the interpreter judges in
   gpu/fa4h_mutants.py, written to DIR/cubins/ and loaded on the GPU as they are (gpu.runtime.load_cubin).
2. Each build runs on its problem of fa4h_mutants.PROBLEMS (the correct one on both) on one CTA, as the
   interpreter runs it: on the GPU, where a kernel still running after --hang-after seconds is a hang, and
   under ``compute-sanitizer --tool racecheck``, ``synccheck`` and ``memcheck``, each in a child process of
   its own process group, killed at the timeout (gpu.validate_hopper_kernels.run_child); the tools' summary
   lines and report headlines are kept (validate_hopper_kernels.parse_tool_output).
3. The GPU outcome of a mutant that finishes: its out and lse bit for bit against the correct build's on the
   same problem ("same bits" or how many elements differ); the correct build's against the twin.

Writes DIR/fa4h_mutants_gpu.json (provenance: device, driver, toolchain, sanitizer version, date, command; per
build its sha256; per mutant the catalogue entry, the interpreter's expected finding, the GPU outcome and each
tool's verdict) and DIR/fa4h_sanitizer_table.md, DIR/logs/ (each child's output): both files belong in
traces/fa4h/. Exit status 1 when the correct build hangs, faults, differs from the twin, or a tool reports on
it; the mutants' outcomes are data.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import functools
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim.gpu import fa4h_mutants as FM
from flashsim.gpu import validate_hopper_kernels as VH

MARK = "FA4H_MUTANT"


def build(n: int) -> bytes:
    """The cubin of FH_MUTANT=n (0: the correct kernel), as the interpreter runs it."""
    return FM.module(n).cubin


def _emit(rec: dict) -> None:
    print(f"{MARK} {json.dumps(rec)}", flush=True)


def run_one(n: int, problem: str, cubin_path: str, outputs: str | None, hang_after: float) -> int:
    """The child: the cubin on ``problem`` on one CTA; one FA4H_MUTANT line (status done / hang / fault /
    error, seconds) and the outputs in ``outputs`` (.npz). A kernel still running after ``hang_after`` seconds
    is a hang: the process ends at once (os._exit, no clean-up that would wait for the kernel)."""
    from flashsim.gpu import runtime
    from flashsim.kernels.launch import check

    rec: dict[str, Any] = {"problem": problem, "mutant": n}
    try:
        cupy = runtime.require_gpu()
        cupy.cuda.set_allocator(None)  # every array its own cudaMalloc: exact bounds for memcheck
        cubin = Path(cubin_path).read_bytes()
        q, k, v, kw = FM.inputs(problem)
        spec, args = check(FM.KERNEL, q, k, v, **kw)
        inst = spec.instance_for(args)
        fn = runtime.load_cubin(cubin).get_function(inst.function(args.dtype))
        fn.max_dynamic_shared_size_bytes = inst.smem_bytes
        params, fetch, _ = spec.twin_module.launch_args(inst, args, q, k, v, cupy)
        cupy.cuda.runtime.deviceSynchronize()
        _emit({"problem": None, "status": "loaded", "device": runtime.device_info(),
               "cubin_sha256": hashlib.sha256(cubin).hexdigest()})
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        rec.update(status="error", message=f"{type(exc).__name__}: {str(exc)[:2000]}")
        _emit(rec)
        return 2
    seconds = VH.launch_watched(cupy, lambda: fn((1, 1, 1), (spec.threads,), params, shared_mem=inst.smem_bytes),
                                rec, hang_after, _emit)
    out, lse = fetch()
    if outputs:
        np.savez(outputs, out=out.view(np.uint16), lse=lse.view(np.uint32))
    rec.update(status="done", seconds=round(seconds, 4))
    _emit(rec)
    return 0


def _job(n: int, problem: str, tool: str | None, cubins: Path, out: Path, sanitizer: str, timeout: float,
         tool_timeout: float, hang_after: float) -> dict:
    """One child (GPU run or a tool) of build ``n`` on ``problem``: its status and, under a tool, the verdict."""
    key = f"{tool or 'gpu'}_fh{n}_{problem}"
    outputs = out / "outputs" / f"fh{n}_{problem}.npz" if tool is None else None
    child = [sys.executable, "-m", "flashsim.gpu.validate_fa4h_mutants", "--run-one", str(n), "--problem", problem,
             "--cubin", str(cubins / f"fh{n}.cubin"), "--hang-after", f"{hang_after:g}"]
    if outputs is not None:
        child += ["--outputs", str(outputs)]
    cmd = child if tool is None else [sanitizer, "--tool", tool, *VH.TOOL_ARGS[tool], *VH.COMMON_TOOL_ARGS, *child]
    text, rc, timed_out, seconds = VH.run_child(cmd, tool_timeout if tool else timeout, out / "logs" / f"{key}.txt")
    loaded, probs = VH.marked_records(text, MARK)
    shown = " ".join(cmd).replace(sys.executable, "python").replace(str(out), "DIR").replace(sanitizer or "\0", "compute-sanitizer")
    res = {"status": VH.job_status((problem,), probs, timed_out, rc, text), "exit": rc, "timed_out": timed_out,
           "seconds": seconds, "device": (loaded or {}).get("device"), "command": shown}
    if tool is not None:
        res["tool"] = VH.parse_tool_output(tool, text)
    return res


def _compare(out: Path, n: int, problem: str) -> dict | None:
    """Mutant ``n``'s outputs against the correct build's on ``problem`` (None when either is missing)."""
    a, b = out / "outputs" / f"fh{n}_{problem}.npz", out / "outputs" / f"fh0_{problem}.npz"
    if not (a.is_file() and b.is_file()):
        return None
    got, ref = dict(np.load(a)), dict(np.load(b))
    return {name: int(np.count_nonzero(got[name] != ref[name])) for name in ("out", "lse")} | \
        {"elements": {name: int(ref[name].size) for name in ("out", "lse")}}


def _twin_check(out: Path, problem: str) -> dict | None:
    """The correct build's GPU outputs on ``problem`` against the twin, bit for bit."""
    f = out / "outputs" / f"fh0_{problem}.npz"
    if not f.is_file():
        return None
    from flashsim.kernels.spec import get

    q, k, v, kw = FM.inputs(problem)
    o_t, l_t = get(FM.KERNEL).twin_module.run(q, k, v, **kw)
    got = dict(np.load(f))
    return {"out_equal": bool(np.array_equal(got["out"], o_t.view(np.uint16))),
            "lse_equal": bool(np.array_equal(got["lse"], l_t.view(np.uint32)))}


def _outcome(res: dict, cmp: dict | None) -> str:
    st = res.get("status", "not run")
    if st != "done":
        return st
    if cmp is None:
        return "done (no outputs)"
    if not cmp["out"] and not cmp["lse"]:
        return "finishes, same bits as the correct build"
    e = cmp["elements"]
    return f"finishes, wrong: {cmp['out']} of {e['out']} out and {cmp['lse']} of {e['lse']} lse elements differ"


def validate(out: Path, *, jobs: int, timeout: float, tool_timeout: float, tools: Sequence[str],
             sanitizer: str | None, mutants: Sequence[int], log=print) -> dict:
    from flashsim.sass.toolchain import versions

    t0 = time.time()
    for sub in ("cubins", "logs", "outputs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m flashsim.gpu.validate_fa4h_mutants " + " ".join(sys.argv[1:]).replace(str(out), "DIR"),
        "source": "gpu/kernels/fa4h.cu", "toolchain": versions(), "tools": list(tools), "builds": {},
        "problems": {k: v for k, v in FM.PROBLEMS.items()}, "correct": {}, "mutants": {}}
    for n in (0, *mutants):
        cub = build(n)
        (out / "cubins" / f"fh{n}.cubin").write_bytes(cub)
        report["builds"][f"fh{n}"] = {"define": f"FH_MUTANT={n}", "sha256": hashlib.sha256(cub).hexdigest(),
                                      "bytes": len(cub)}
    log(f"{len(report['builds'])} builds in {time.time() - t0:.1f} s")
    sanitizer = VH.find_sanitizer(sanitizer) if tools else None
    report["sanitizer"] = {"path": sanitizer, "version": VH._tool_version(sanitizer)}
    by_n = {m.n: m for m in FM.MUTANTS}
    work = [(0, p, None) for p in FM.PROBLEMS] + [(0, p, t) for p in FM.PROBLEMS for t in (tools if sanitizer else ())]
    for n in mutants:
        p = by_n[n].problem
        work += [(n, p, None)] + [(n, p, t) for t in (tools if sanitizer else ())]
    # the expected hangs first: their timeouts overlap with the rest
    work.sort(key=lambda w: 0 if w[0] and by_n[w[0]].kind == "deadlock" else 1)
    run = functools.partial(_job, cubins=out / "cubins", out=out, sanitizer=sanitizer or "", timeout=timeout,
                            tool_timeout=tool_timeout, hang_after=max(2.0, timeout / 3))
    results: dict[tuple, dict] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = {pool.submit(run, n, p, t): (n, p, t) for n, p, t in work}
        for f in concurrent.futures.as_completed(futs):
            key = futs[f]
            try:
                results[key] = f.result()
            except Exception as exc:  # noqa: BLE001 - one job's failure is data
                results[key] = {"status": f"error: {type(exc).__name__}: {exc}"}
            r = results[key]
            log(f"  FH_MUTANT={key[0]:<2} {key[1]:9s} {key[2] or 'gpu':9s} {r.get('status', '?')[:50]:50s} "
                f"{r.get('seconds', 0):6.1f} s" + (f"  {r['tool']['verdict']}" if "tool" in r else ""))
    ok = True
    for p in FM.PROBLEMS:
        g = results[(0, p, None)]
        twin = _twin_check(out, p) if g.get("status") == "done" else None
        e = {"gpu": g, "twin": twin, **{t: results[(0, p, t)] for t in tools if (0, p, t) in results}}
        good = bool(twin and twin["out_equal"] and twin["lse_equal"])
        clean = all(e[t].get("tool", {}).get("verdict") == "clean" for t in tools if t in e)
        e["ok"], e["tools_clean"] = good, clean
        ok = ok and good and clean
        report["correct"][p] = e
        if g.get("device") and "device" not in report:
            report["device"] = g["device"]
    for n in mutants:
        m = by_n[n]
        g = results[(n, m.problem, None)]
        cmp = _compare(out, n, m.problem) if g.get("status") == "done" else None
        report["mutants"][str(n)] = {
            "what": m.what, "problem": m.problem, "interpreter": m.kind, "gpu": g, "gpu_compare": cmp,
            "gpu_outcome": _outcome(g, cmp), **{t: results[(n, m.problem, t)] for t in tools if (n, m.problem, t) in results}}
    report["ok"] = ok
    report["seconds"] = round(time.time() - t0, 1)
    (out / "fa4h_mutants_gpu.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    write_table(out, report)
    return report


def write_table(out: Path, report: dict) -> None:
    tools = report["tools"]
    device = (report.get("device") or {}).get("name", "no GPU")
    head = ["FH_MUTANT", "bug", "interpreter finds", "GPU (1 CTA)", *tools]
    lines = [f"# fa4h.cu's protocol mutants on the GPU and under compute-sanitizer ({device}, {report['date'][:10]})",
             "", f"Command: `{report['command']}`; sanitizer: {report['sanitizer']['version']}", "",
             "The interpreter column is what gpu/fa4h_mutants.py finds (tests/test_fa4h_mutants.py checks it in CI). "
             "A tool's cell: REPORT (its counts and first headline), clean, or no verdict when the kernel hung "
             "and the run was killed.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n, e in report["mutants"].items():
        row = [n, VH._md(e["what"]), e["interpreter"], VH._md(e["gpu_outcome"]),
               *(VH._md(VH._tool_cell(e.get(t))) for t in tools)]
        lines.append("| " + " | ".join(row) + " |")
    for p, e in report["correct"].items():
        tw = e.get("twin") or {}
        gpu = "finishes, equal to the twin" if tw.get("out_equal") and tw.get("lse_equal") else \
            VH._md(e["gpu"].get("status", "-") + (f" twin {tw}" if tw else ""))
        row = ["0", f"correct build on {p}", "nothing", gpu, *(VH._md(VH._tool_cell(e.get(t))) for t in tools)]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", *notes(report)]
    (out / "fa4h_sanitizer_table.md").write_text("\n".join(lines) + "\n")


def notes(report: dict) -> list[str]:
    """What the table shows, read from the report: which mutants a tool reported, which races left the bits as
    they were, which expected deadlocks finished on the GPU."""
    ms = report["mutants"]
    tools = report["tools"]
    caught = {n: [t for t in tools if (e.get(t) or {}).get("tool", {}).get("verdict") == "report"] for n, e in ms.items()}
    hung = [n for n, e in ms.items() if e["gpu_outcome"].startswith("hang")]
    same = [n for n, e in ms.items() if e["interpreter"] == "race" and "same bits" in e["gpu_outcome"]]
    wrong = [n for n, e in ms.items() if "wrong" in e["gpu_outcome"]]
    finished_deadlocks = [n for n in wrong if ms[n]["interpreter"] == "deadlock"]
    out = [f"- compute-sanitizer reports {sum(bool(v) for v in caught.values())} of the {len(ms)} mutants: "
           + (", ".join(f"{n} ({', '.join(v)})" for n, v in caught.items() if v) or "none") + "; the interpreter "
           f"finds all {len(ms)} (deadlock or race, with the place).",
           f"- Hangs on the GPU: {', '.join(hung) or 'none'}. A hung kernel under a tool is killed at the timeout, "
           "and the tool prints no verdict."]
    if same:
        out.append(f"- Races that left the bits as the correct build's in this run: {', '.join(same)}. The hazard is "
                   "there (the interpreter names the unordered pair of accesses); this run's timing did not expose it"
                   + (", and no tool reported it." if all(not caught[n] for n in same) else "."))
    if wrong:
        out.append(f"- Wrong bits on the GPU: {', '.join(wrong)}.")
    for n in finished_deadlocks:
        tool_hangs = [t for t in tools if str((ms[n].get(t) or {}).get("status", "")).startswith("hang")]
        out.append(f"- Mutant {n}: the interpreter's schedules end in a deadlock; the plain GPU run finished with wrong "
                   f"bits, while under {', '.join(tool_hangs) or 'no tool'} (slower) it hung: both are behaviours of "
                   "the bug, which one shows depends on when the waits run (gpu/fa4h_mutants.py, above MUTANTS).")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.validate_fa4h_mutants",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="directory for the report, the table, the cubins and the logs")
    ap.add_argument("--jobs", type=int, default=8, help="child processes at a time (default 8)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds before a GPU run is killed (default 20)")
    ap.add_argument("--tool-timeout", type=float, default=60.0, help="seconds before a tool's run is killed (default 60)")
    ap.add_argument("--tools", default=",".join(VH.TOOLS), help=f"compute-sanitizer tools (default {','.join(VH.TOOLS)})")
    ap.add_argument("--sanitizer", default=None, help="compute-sanitizer binary (default: PATH, CUDA's bin)")
    ap.add_argument("--mutants", default=None, help="only these mutants (comma-separated numbers)")
    ap.add_argument("--run-one", type=int, metavar="N", help="(child) run FH_MUTANT=N's cubin on --problem")
    ap.add_argument("--problem", choices=sorted(FM.PROBLEMS), help="(child) the problem")
    ap.add_argument("--cubin", help="(child) the cubin file")
    ap.add_argument("--outputs", help="(child) the .npz the outputs go to")
    ap.add_argument("--hang-after", type=float, default=5.0, help="(child) seconds before a running kernel is a hang")
    a = ap.parse_args(argv)
    if a.run_one is not None:
        if not a.cubin or not a.problem:
            ap.error("--run-one needs --cubin and --problem")
        return run_one(a.run_one, a.problem, a.cubin, a.outputs, a.hang_after)
    if a.out is None:
        ap.error("--out is required")
    tools = tuple(t for t in a.tools.split(",") if t.strip())
    for t in tools:
        if t not in VH.TOOL_ARGS:
            ap.error(f"--tools: unknown tool {t!r} (known: {', '.join(VH.TOOL_ARGS)})")
    if a.jobs < 1:
        ap.error(f"--jobs {a.jobs}: expected at least 1")
    for name, v in (("--timeout", a.timeout), ("--tool-timeout", a.tool_timeout)):
        if not v > 0:
            ap.error(f"{name} {v:g}: expected seconds > 0")
    known = [m.n for m in FM.MUTANTS]
    chosen = known
    if a.mutants:
        try:
            chosen = sorted({int(x) for x in a.mutants.split(",") if x})
        except ValueError:
            ap.error(f"--mutants {a.mutants!r}: expected comma-separated numbers")
        if set(chosen) - set(known):
            ap.error(f"--mutants: no mutant {sorted(set(chosen) - set(known))} (1..{len(known)})")
    rep = validate(a.out, jobs=a.jobs, timeout=a.timeout, tool_timeout=a.tool_timeout, tools=tools,
                   sanitizer=a.sanitizer, mutants=chosen, log=functools.partial(print, flush=True))
    print(f"correct build {'ok' if rep['ok'] else 'NOT OK'}; {len(rep['mutants'])} mutants; {rep['seconds']:.0f} s; "
          f"{a.out}/fa4h_sanitizer_table.md")
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
