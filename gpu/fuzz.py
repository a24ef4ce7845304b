"""The differential fuzzing campaign: random programs (flashsim.fuzz) on the GPU and in the interpreter.

    python -m flashsim.gpu.fuzz --programs N --seed S --out DIR [--workers K] [--time-limit SECONDS]

The programs are drawn in chunks (chunk c from seed S and c, so the chunks are drawn in parallel and the
campaign is the same whatever the number of workers); each chunk is compiled into one module per build
(NVRTC 13.0, and NVRTC's PTX through Triton's ptxas 12.8) and run in the interpreter by worker processes,
while the main process runs the same cubins on the GPU, twice (a program whose two GPU runs differ is
reported as undefined, never compared). Every program's whole output (each lane's values, the global
atomics) is compared bit for bit. A program whose outputs differ is shrunk (flashsim.fuzz.shrink, on the GPU
and in the interpreter) to a minimal program that still differs, kept with the GPU's outputs as a
regression probe.

Writes DIR/fuzz_report.json (counts, forms executed, refusals, differences), DIR/fuzz_report.md,
DIR/corpus.jsonl.xz (every compared program with the GPU's output digest per build, and under "gpu_only" the
digests of the programs the interpreter refused or failed on) and
DIR/regressions.json (the shrunk programs with their GPU outputs), and the rows to commit under traces/fuzz:
DIR/sample.jsonl.xz (every 60th compared program) and DIR/gpu_only.jsonl.xz (the programs the interpreter
refused or failed on). tests/test_fuzz.py replays both in the interpreter.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import lzma
import multiprocessing as mp
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from flashsim import fuzz as fz

__all__ = ["campaign", "chunk_programs", "main", "run_gpu", "write_report"]

PER_CHUNK = 40


def chunk_programs(seed: int, chunk: int, per: int = PER_CHUNK) -> list[dict]:
    """The programs of one chunk of a campaign."""
    return fz.draw_programs(per, seed * 100_003 + chunk)


def _compile(progs: list[dict], which: str) -> tuple[fz.Batch | None, list[int], list[tuple[int, str]]]:
    """One module of the chunk's programs; a program that does not compile is left out (and reported:
    the generator must only make programs that compile)."""
    from flashsim.sass.toolchain import CompileError

    try:
        return fz.compile_batch(progs, which), list(range(len(progs))), []
    except CompileError:
        pass
    good, bad = [], []
    for i, p in enumerate(progs):
        try:
            fz.build(fz.render_module([p]), which)
            good.append(i)
        except CompileError as e:
            bad.append((i, str(e)[-800:]))
    return (fz.compile_batch([progs[i] for i in good], which) if good else None), good, bad


def _chunk_job(job: tuple) -> dict:
    """Worker: draw, compile (every build) and interpret one chunk."""
    seed, chunk, per, builds = job
    t0 = time.time()
    progs = chunk_programs(seed, chunk, per)
    res = {"chunk": chunk, "progs": progs, "builds": {}}
    for which in builds:
        batch, index, bad = _compile(progs, which)
        entry = {"compile_errors": bad, "cubin": None, "index": [], "outcomes": []}
        if batch is not None:
            entry["cubin"] = batch.cubin
            entry["index"] = index
            entry["outcomes"] = fz.run_interp(batch)
        res["builds"][which] = entry
    res["seconds"] = time.time() - t0
    return res


def run_gpu(cubin: bytes, progs: Sequence[dict], names: Sequence[str], repeats: int = 2) -> list[list[np.ndarray]]:
    """Each program of a module on the GPU, ``repeats`` times: [[out, out], ...]."""
    from flashsim.gpu import runtime

    cp = runtime.require_gpu()
    mod = runtime.load_cubin(cubin)
    res = []
    for prog, name in zip(progs, names):
        table, out0, (s0, s1) = fz.inputs(prog)
        f = mod.get_function(name)
        runs = []
        for _ in range(repeats):
            d_in, d_out = cp.asarray(table), cp.asarray(out0)
            f((int(prog["grid"]),), (int(prog["block"]),), (d_in, d_out, np.uint32(s0), np.uint32(s1)))
            runs.append(cp.asnumpy(d_out))
        res.append(runs)
    cp.cuda.Device().synchronize()
    return res


_FORM = re.compile(r"`(?:@!?U?P\w+ )?([A-Z0-9_]+(?:\.[A-Z0-9_]+)*)")


def refusal_key(msg: str) -> str:
    """A refusal or error message grouped by what is not modelled or what went wrong (the SASS form, without
    PC, line, lanes, addresses or other numbers)."""
    m = _FORM.search(msg)
    head = re.sub(r"0x[0-9a-fA-F]+|\d+", "N", msg.split(": pc=")[0].split("`")[0])
    return f"{head} [{m.group(1)}]" if m else head


def _differs(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape != b.shape or not np.array_equal(a, b)


def _first_difference(sim: np.ndarray, gpu: np.ndarray, prog: dict) -> dict:
    idx = int(np.flatnonzero(sim != gpu)[0])
    n = int(prog["grid"]) * int(prog["block"]) * fz.NV
    if idx >= n:
        return {"where": f"global atomic accumulator {idx - n}", "gpu": f"{int(gpu[idx]):#010x}",
                "interp": f"{int(sim[idx]):#010x}", "count": int((sim != gpu).sum())}
    thread, var = divmod(idx, fz.NV)
    cta, tid = divmod(thread, int(prog["block"]))
    return {"where": f"cta={cta} warp={tid // 32} lane={tid % 32} v{var}", "gpu": f"{int(gpu[idx]):#010x}",
            "interp": f"{int(sim[idx]):#010x}", "count": int((sim != gpu).sum())}


def _still_differs(which: str, gpu: Callable) -> Callable[[dict], bool]:
    def check(prog: dict) -> bool:
        try:
            batch = fz.compile_batch([prog], which)
        except Exception:
            return False
        (o,) = fz.run_interp(batch)
        if o.out is None:
            return False
        runs = gpu(batch.cubin, [prog], batch.names)[0]
        return not _differs(runs[0], runs[1]) and _differs(o.out, runs[0])
    return check


def campaign(n: int, seed: int, *, builds: Sequence[str] = fz.BUILDS, workers: int = 2, per: int = PER_CHUNK,
             gpu: Callable = run_gpu, time_limit: float | None = None, shrink_budget: int = 300,
             shrink_seconds: float = 120.0, corpus: Path | None = None, log=print) -> dict:
    """Run ``n`` programs (rounded up to whole chunks) on the GPU (``gpu``: a function as :func:`run_gpu`)
    and in the interpreter. Returns the report (see :func:`write_report`)."""
    if n < 1:
        raise ValueError(f"--programs must be at least 1, got {n}")
    t0 = time.time()
    chunks = (n + per - 1) // per
    stats = {w: {"compared": 0, "equal": 0, "refused": 0, "interp_errors": 0, "compile_errors": 0,
                 "gpu_undefined": 0} for w in builds}
    forms: dict[str, dict[str, int]] = {}
    refusals: dict[str, int] = {}
    diffs, errors, undefined = [], [], []
    error_counts: dict[str, int] = {}

    def error(entry: dict) -> None:
        # grouped by message (without PC and line); a few programs kept per group, so the report stays small
        key = f"{entry['kind']}: {refusal_key(entry['message'])[:300]}"
        error_counts[key] = error_counts.get(key, 0) + 1
        if error_counts[key] <= 3:
            errors.append(entry)
    sink = lzma.open(corpus, "wt", encoding="utf-8") if corpus else None
    done = 0
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx) as pool:
        jobs = ((seed, c, per, tuple(builds)) for c in range(chunks))
        pending = []
        it = iter(jobs)
        for _ in range(max(1, workers) * 2):
            j = next(it, None)
            if j is not None:
                pending.append(pool.submit(_chunk_job, j))
        while pending:
            res = pending.pop(0).result()
            stop = time_limit is not None and time.time() - t0 > time_limit
            if not stop:
                j = next(it, None)
                if j is not None:
                    pending.append(pool.submit(_chunk_job, j))
            progs = res["progs"]
            # "gpu": the GPU's output digest of each build compared; "gpu_only": of each build the interpreter
            # refused or failed (a hardware answer for whoever models that form next: tests/test_fuzz.py)
            record = {i: {"chunk": res["chunk"], "i": i, "prog": p, "gpu": {}, "gpu_only": {}}
                      for i, p in enumerate(progs)}
            for which, entry in res["builds"].items():
                st = stats[which]
                st["compile_errors"] += len(entry["compile_errors"])
                for i, msg in entry["compile_errors"]:
                    error({"kind": "compile", "build": which, "chunk": res["chunk"], "i": i, "prog": progs[i],
                           "message": msg})
                if entry["cubin"] is None:
                    continue
                index = entry["index"]
                names = [f"fz{k}" for k in range(len(index))]
                runs = gpu(entry["cubin"], [progs[i] for i in index], names)
                for k, (i, o) in enumerate(zip(index, entry["outcomes"])):
                    g0, g1 = runs[k]
                    if (o.refused or o.error) and not _differs(g0, g1):
                        record[i]["gpu_only"][which] = fz.digest(g0)
                    if o.refused:
                        st["refused"] += 1
                        key = refusal_key(o.refused)
                        refusals[key] = refusals.get(key, 0) + 1
                        continue
                    if o.error:
                        st["interp_errors"] += 1
                        error({"kind": "interp", "build": which, "chunk": res["chunk"], "i": i, "prog": progs[i],
                               "message": o.error[-800:]})
                        continue
                    if _differs(g0, g1):
                        st["gpu_undefined"] += 1
                        if len(undefined) < 20:
                            undefined.append({"build": which, "chunk": res["chunk"], "i": i, "prog": progs[i]})
                        continue
                    st["compared"] += 1
                    record[i]["gpu"][which] = fz.digest(g0)
                    for form, cnt in o.forms.items():
                        f = forms.setdefault(form, {"programs": 0, "executions": 0})
                        f["programs"] += 1
                        f["executions"] += int(cnt)
                    if _differs(o.out, g0):
                        diffs.append({"build": which, "chunk": res["chunk"], "i": i, "prog": progs[i],
                                      "first": _first_difference(o.out, g0, progs[i])})
                        log(f"DIFFERENCE chunk {res['chunk']} program {i} ({which}): {diffs[-1]['first']}")
                    else:
                        st["equal"] += 1
            if sink:
                for r in record.values():
                    if r["gpu"] or r["gpu_only"]:
                        sink.write(json.dumps(r, separators=(",", ":")) + "\n")
            done += 1
            if done % 10 == 0 or not pending:
                cmp_ = sum(s["compared"] for s in stats.values())
                log(f"{done}/{chunks} chunks, {done * per} programs, {cmp_} compared, {len(diffs)} differ, "
                    f"{time.time() - t0:.0f} s")
            if stop:
                for p in pending:
                    p.cancel()
                pending = [p for p in pending if not p.cancelled()]
    if sink:
        sink.close()
    # shrink each difference (a bounded time overall)
    shrunk = []
    t_shrink = time.time()
    for d in diffs:
        if time.time() - t_shrink > shrink_seconds:
            break
        small, tries = fz.shrink(d["prog"], _still_differs(d["build"], gpu), budget=shrink_budget)
        batch = fz.compile_batch([small], d["build"])
        (o,) = fz.run_interp(batch)
        g = gpu(batch.cubin, [small], batch.names)[0][0]
        shrunk.append({"build": d["build"], "prog": small, "tries": tries, "source": fz.render(small),
                       "gpu_out": [int(x) for x in g], "interp_out": None if o.out is None else
                       [int(x) for x in o.out], "first": _first_difference(o.out, g, small) if o.out is not None
                       and _differs(o.out, g) else None})
    return {"programs": done * per, "chunks_done": done, "seed": seed, "per_chunk": per, "builds": list(builds),
            "stats": stats, "forms": dict(sorted(forms.items())), "refusals": dict(sorted(refusals.items(),
                                                                                          key=lambda t: -t[1])),
            "differences": diffs, "shrunk": shrunk, "errors": errors, "error_counts": error_counts,
            "gpu_undefined": undefined,
            "seconds": round(time.time() - t0, 1)}


def provenance() -> dict:
    import hypothesis

    from flashsim._version import __version__
    from flashsim.gpu import runtime
    from flashsim.sass.toolchain import versions

    try:
        dev = runtime.device_info()
    except Exception as exc:  # recorded for provenance only
        dev = {"error": str(exc)}
    try:
        import flashsim.triton as ft
        from flashsim.sass.toolchain import ptxas_version
        ptxas128 = ptxas_version(ft.bundled_ptxas())
    except Exception as exc:
        ptxas128 = f"unavailable: {exc}"
    return {**dev, "date": _dt.date.today().isoformat(), "flashsim": __version__, "python": sys.version.split()[0],
            "hypothesis": hypothesis.__version__, "generator_version": fz.GENERATOR_VERSION,
            "toolchain": versions(), "ptxas128": ptxas128}


def write_report(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz_report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    regs = [{"build": s["build"], "prog": s["prog"], "gpu_out": s["gpu_out"], "source": s["source"]}
            for s in report["shrunk"]]
    (out / "regressions.json").write_text(json.dumps(regs, indent=1) + "\n")
    st = report["stats"]
    lines = [f"# Differential fuzzing: {report['programs']:,} programs, seed {report['seed']}", "",
             f"{report.get('provenance', {}).get('name', 'GPU')}, {report.get('provenance', {}).get('date', '')}; "
             f"{report['seconds']} s", "",
             "| build | compared | equal | differ | refused | interpreter errors | compile errors | GPU undefined |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for w, s in st.items():
        nd = sum(1 for d in report["differences"] if d["build"] == w)
        lines.append(f"| {w} | {s['compared']:,} | {s['equal']:,} | {nd} | {s['refused']:,} | {s['interp_errors']} | "
                     f"{s['compile_errors']} | {s['gpu_undefined']} |")
    lines += ["", f"{len(report['forms'])} SASS forms executed in compared programs.", "", "## Refusals", ""]
    lines += [f"- {n:,} x {k}" for k, n in report["refusals"].items()] or ["none"]
    lines += ["", "## Interpreter and compile errors", ""]
    lines += [f"- {n:,} x {k}" for k, n in sorted(report.get("error_counts", {}).items(), key=lambda t: -t[1])] or \
        ["none"]
    lines += ["", "## Differences (shrunk)", ""]
    for s in report["shrunk"]:
        lines += [f"### {s['build']}: {s['first']}", "", "```cuda", s["source"], "```", ""]
    if not report["shrunk"]:
        lines.append("none")
    (out / "fuzz_report.md").write_text("\n".join(lines) + "\n")


def write_samples(corpus: Path, report: dict, out: Path, every: int = 60) -> tuple[int, int]:
    """From a campaign's corpus, the rows to commit: ``sample.jsonl.xz``, every ``every``-th compared program
    (differences left out) with the GPU's digests, and ``gpu_only.jsonl.xz``, every program the interpreter
    refused or failed on with the GPU's digest of those builds. Returns the two row counts."""
    differ = {(d["chunk"], d["i"]) for d in report["differences"]}
    n_sample = n_only = k = 0
    with lzma.open(corpus, "rt", encoding="utf-8") as src, \
            lzma.open(out / "sample.jsonl.xz", "wt", encoding="utf-8") as sample, \
            lzma.open(out / "gpu_only.jsonl.xz", "wt", encoding="utf-8") as only:
        for line in src:
            r = json.loads(line)
            if r.get("gpu_only"):
                only.write(json.dumps({**r, "gpu": {}}, separators=(",", ":")) + "\n")
                n_only += 1
            if r["gpu"] and (r["chunk"], r["i"]) not in differ:
                if k % every == 0:
                    sample.write(json.dumps({**r, "gpu_only": {}}, separators=(",", ":")) + "\n")
                    n_sample += 1
                k += 1
    return n_sample, n_only


def main(argv: Sequence[str] | None = None) -> int:
    import os

    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--per-chunk", type=int, default=PER_CHUNK)
    ap.add_argument("--builds", default=",".join(fz.BUILDS))
    ap.add_argument("--time-limit", type=float, default=None, help="stop drawing new chunks after this many seconds")
    ap.add_argument("--shrink-seconds", type=float, default=120.0)
    ap.add_argument("--sample-every", type=int, default=60, help="keep every N-th compared program in sample.jsonl.xz")
    args = ap.parse_args(argv)
    builds = [b for b in args.builds.split(",") if b]
    for b in builds:
        if b not in fz.BUILDS:
            ap.error(f"--builds: unknown build {b!r} (expected {', '.join(fz.BUILDS)})")
    args.out.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, flush=True)
        with open(args.out / "fuzz.log", "a") as fh:
            fh.write(msg + "\n")

    report = campaign(args.programs, args.seed, builds=builds, workers=args.workers, per=args.per_chunk,
                      time_limit=args.time_limit, shrink_seconds=args.shrink_seconds,
                      corpus=args.out / "corpus.jsonl.xz", log=log)
    report["provenance"] = provenance()
    write_report(report, args.out)
    n_sample, n_only = write_samples(args.out / "corpus.jsonl.xz", report, args.out, every=args.sample_every)
    log(f"samples: {n_sample} compared programs (sample.jsonl.xz), {n_only} answered by the GPU alone "
        f"(gpu_only.jsonl.xz)")
    log(f"done: {report['programs']} programs, {len(report['differences'])} differences, "
        f"{sum(s['refused'] for s in report['stats'].values())} refused, {len(report['errors'])} errors")
    return 1 if report["differences"] or report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
