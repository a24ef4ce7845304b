"""Three attention forward kernels written to test the SASS interpreter (:mod:`flashsim.kernels.extra`: the
kernels' table, their host wrappers, problems and references), and their validation on the GPU:

    python -m flashsim.gpu.attn_extra --out DIR [--examples 100] [--install]
"""

from __future__ import annotations

import numpy as np

from flashsim.kernels.extra import (BACKENDS, EXTRA_KERNELS, ExtraKernel, Problem, cubin_sha256, function_names,
                                    make_problem, module, random_problem, reference, run)

__all__ = ["BACKENDS", "EXTRA_KERNELS", "ExtraKernel", "Problem", "cubin_sha256", "function_names", "make_problem",
           "module", "random_problem", "reference", "run"]

GOLDEN_PER_KERNEL = 8


def _interpret(kernel: str, seed: int):
    """Worker: the interpreter's outputs (bits) for random_problem(kernel, seed), with its time."""
    import time

    p = random_problem(kernel, seed)
    t = time.perf_counter()
    out, lse = p.run("interp")
    return out.view(np.uint16), lse.view(np.uint32), time.perf_counter() - t


def _digest(p: Problem) -> str:
    import hashlib

    h = hashlib.sha256()
    for x in (p.q, p.k, p.v, p.cu_seqlens_q, p.cu_seqlens_k):
        if x is not None:
            h.update(np.ascontiguousarray(x).view(np.uint8).tobytes())
    return h.hexdigest()


def main(argv=None) -> int:
    """``python -m flashsim.gpu.attn_extra --out DIR [--examples 100] [--install]``: every extra kernel on the GPU
    (the interpreter's cubin) and in the interpreter on seeded random problems, bit for bit; a report and
    golden data (problem seeds, input digests, cubins, GPU outputs) that tests/test_sass_attention.py
    replays on the CPU."""
    import argparse
    import json
    import multiprocessing
    import shutil
    import sys
    from concurrent.futures import ProcessPoolExecutor
    from pathlib import Path

    from flashsim.gpu.validate import provenance
    from flashsim.gpu.validate_fa import first_diff

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--examples", type=int, default=100)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--install", action="store_true", help="copy the report and golden data to traces/sass/")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    from flashsim.sass.toolchain import versions

    report = {"command": "python -m flashsim.gpu.attn_extra " + " ".join(argv if argv is not None else sys.argv[1:]),
              "provenance": {**provenance(0), "toolchain": versions()}, "summary": {}, "results": {}}
    golden: dict = {}
    ok = True
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=a.workers, mp_context=ctx) as pool:
        for kernel in sorted(EXTRA_KERNELS):
            sha = cubin_sha256(kernel)
            golden[f"cubin/{sha}"] = np.frombuffer(module(kernel).cubin, np.uint8)
            seeds = list(range(1000, 1000 + a.examples))
            futs = [pool.submit(_interpret, kernel, s) for s in seeds]
            res, kept = [], 0
            for s, f in zip(seeds, futs):
                p = random_problem(kernel, s)
                g_out, g_lse = p.run("gpu")
                g_out, g_lse = g_out.view(np.uint16), g_lse.view(np.uint32)
                i_out, i_lse, ti = f.result()
                r = {"problem": p.describe(), "seed": s, "interp_s": round(ti, 3),
                     "out": first_diff(g_out, i_out, ("gpu", "interp")),
                     "lse": first_diff(g_lse, i_lse, ("gpu", "interp"))}
                r["identical"] = r["out"] is None and r["lse"] is None
                ok &= r["identical"]
                res.append(r)
                if r["identical"] and kept < GOLDEN_PER_KERNEL and p.q.size <= 40_000:
                    key = f"{kernel}/{kept}"
                    golden[f"{key}/seed"] = np.array(s)
                    golden[f"{key}/inputs_sha256"] = np.array(_digest(p))
                    golden[f"{key}/cubin_sha256"] = np.array(sha)
                    golden[f"{key}/out"], golden[f"{key}/lse"] = g_out, g_lse
                    kept += 1
            report["results"][kernel] = res
            report["summary"][kernel] = {"cases": len(res), "identical": sum(r["identical"] for r in res),
                                         "cubin_sha256": sha}
            print(kernel, json.dumps(report["summary"][kernel]), flush=True)
    (a.out / "attn_extra_report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    lines = ["# Extra attention kernels: H100 vs SASS interpreter", "", f"Command: `{report['command']}`", "",
             "| kernel | problems | identical (out and LSE) | cubin sha256 |", "|---|---|---|---|"]
    lines += [f"| {k} | {s['cases']} | {s['identical']}/{s['cases']} | `{s['cubin_sha256'][:16]}` |"
              for k, s in report["summary"].items()]
    (a.out / "attn_extra_report.md").write_text("\n".join(lines) + "\n")
    np.savez_compressed(a.out / "attn_extra_golden.npz",
                        provenance=np.array(json.dumps(report["provenance"], default=str)), **golden)
    if a.install:
        dest = Path(__file__).resolve().parents[1] / "traces" / "sass"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("attn_extra_golden.npz", "attn_extra_report.json", "attn_extra_report.md"):
            shutil.copy(a.out / name, dest / name)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
