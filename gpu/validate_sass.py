"""Whole kernels through the SASS interpreter against the H100, bit for bit.

    python -m flashsim.gpu.validate_sass --out DIR [--examples 200] [--kernels fa2,kernel1,...] [--seed 1]
                                [--workers 15] [--install]

For each FlashAttention kernel, ``--examples`` seeded random problems from ``flashsim.kernels.problems``
(a seed the twins' validation did not use): the GPU runs the interpreter's own cubin (NVRTC 13.0 on the
CPU; ``gpu.runtime.load_cubin`` checks the sha256 of the bytes it loads), ``flashsim.cuda`` runs the same
cubin on the CPU (spread over ``--workers`` processes), and the twin runs too; out (and fa2's LSE) must be
identical across all three (default: every kernel of flashsim.kernels.spec). Writes DIR/sass_report.json, DIR/sass_report.md and DIR/sass_golden.npz (the
inputs' parameters, cubins and GPU outputs of small problems, with provenance), which ``--install`` copies
to traces/sass/ for the CPU replay (tests/test_sass_golden.py). Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from flashsim.kernels import problems
from flashsim.kernels.spec import get
from flashsim.gpu.validate_fa import bits as _bits, first_diff

GI, IT = ("gpu", "interp"), ("interp", "twin")

GOLDEN_PER_KERNEL = 6
GOLDEN_MAX_ELEMENTS = 60_000
ROOT = Path(__file__).resolve().parents[1]


def interpret(params: dict):
    """Worker: the interpreter's and the twin's outputs for one problem (bits), with timings."""
    from flashsim.kernels import run_twin
    from flashsim.kernels.launch import run_kernel

    case = problems.make_case(params)
    t0 = time.perf_counter()
    i = run_kernel(params["kernel"], case.q, case.k, case.v, backend="interp", **case.kwargs)
    t1 = time.perf_counter()
    t = run_twin(params["kernel"], case.q, case.k, case.v, **case.kwargs)
    t2 = time.perf_counter()
    # with dropout and return_attn_probs the probabilities come third: compared with the LSE
    return _bits(i[0]), _lse_probs(i), _bits(t[0]), _lse_probs(t), t1 - t0, t2 - t1


def _lse_probs(res):
    """The LSE bits of a run, followed by its probabilities' bits (fa2 with dropout and return_attn_probs)."""
    lse = _bits(res[1])
    if len(res) < 3:
        return lse
    return np.concatenate([lse.view(np.uint16).ravel(), _bits(res[2]).ravel()])


def cubin_of(kernel: str) -> bytes:
    from flashsim.kernels.sources import interpreted_module

    spec = get(kernel)
    return interpreted_module(spec.source, options=spec.build_options()).cubin


def write_markdown(path: Path, report: dict) -> None:
    lines = ["# FlashAttention kernels: H100 vs SASS interpreter vs twin", "",
             f"Command: `{report['command']}`", "",
             "The GPU ran the interpreter's own cubin (same sha256); every output bit compared.", "",
             "| kernel | problems | GPU == interpreter (out) | LSE | interpreter == twin | cubin sha256 |",
             "|---|---|---|---|---|---|"]
    for k, s in report["summary"].items():
        lse = f"{s['lse_identical']}/{s['cases']}" if s["with_lse"] else "-"
        lines.append(f"| {k} | {s['cases']} | {s['gpu_interp_identical']}/{s['cases']} | {lse} | "
                     f"{s['interp_twin_identical']}/{s['cases']} | `{s['cubin_sha256'][:16]}` |")
    lines += ["", "Coverage (problems per feature):", ""]
    for k, s in report["summary"].items():
        lines.append(f"- {k}: " + ", ".join(f"{n} {c}" for n, c in sorted(s["coverage"].items())))
    lines += ["", f"Interpreter time per problem (on the GPU machine's CPUs, one process each): "
                  f"{report['timing']['interp_s_median']:.2f} s median, {report['timing']['interp_s_max']:.1f} s max."]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    from flashsim.gpu.validate import provenance
    from flashsim.gpu.validate_fa import coverage
    from flashsim.kernels.launch import run_kernel
    from flashsim.sass import toolchain

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--kernels", default=",".join(problems.KERNELS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--install", action="store_true", help="copy sass_golden.npz and the reports to traces/sass/")
    a = ap.parse_args(argv)
    kernels = [k for k in a.kernels.split(",") if k]
    for k in kernels:
        if k not in problems.KERNELS:
            ap.error(f"--kernels: unknown kernel {k!r} (expected {problems.KERNELS})")
    a.out.mkdir(parents=True, exist_ok=True)
    prov = provenance(a.seed)
    prov["toolchain"] = toolchain.versions() if _nvrtc_ok() else {"nvrtc": "cubins from the cache", **_dists()}
    report = {"command": "python -m flashsim.gpu.validate_sass " + " ".join(argv if argv is not None else sys.argv[1:]),
              "provenance": prov, "results": {}, "summary": {}}
    golden: dict = {}
    ok = True
    times = []
    import multiprocessing

    # spawned workers: the parent holds a CUDA context, which forked children must not inherit
    with ProcessPoolExecutor(max_workers=a.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for ki, kernel in enumerate(kernels):
            cubin = cubin_of(kernel)
            sha = hashlib.sha256(cubin).hexdigest()
            golden[f"cubin/{sha}"] = np.frombuffer(cubin, np.uint8)
            rng = np.random.default_rng([a.seed, ki])
            cases = [problems.random_case(rng, kernel) for _ in range(a.examples)]
            futures = [pool.submit(interpret, c.params) for c in cases]
            results, kept = [], 0
            for i, (case, fut) in enumerate(zip(cases, futures)):
                g = run_kernel(kernel, case.q, case.k, case.v, backend="gpu-cubin", **case.kwargs)
                g_out, g_lse = _bits(g[0]), _lse_probs(g)
                i_out, i_lse, t_out, t_lse, ti, tt = fut.result()
                times.append(ti)
                res = {"case": case.describe(), "params": case.params, "interp_s": round(ti, 3),
                       "gpu_interp_out": first_diff(g_out, i_out, GI), "gpu_interp_lse": first_diff(g_lse, i_lse, GI),
                       "interp_twin_out": first_diff(i_out, t_out, IT), "interp_twin_lse": first_diff(i_lse, t_lse, IT)}
                res["gpu_interp"] = res["gpu_interp_out"] is None and res["gpu_interp_lse"] is None
                res["interp_twin"] = res["interp_twin_out"] is None and res["interp_twin_lse"] is None
                ok &= res["gpu_interp"] and res["interp_twin"]
                results.append(res)
                size = case.q.size + case.k.size + case.v.size
                if kept < GOLDEN_PER_KERNEL and size <= GOLDEN_MAX_ELEMENTS and res["gpu_interp"]:
                    key = f"{kernel}/{kept}"
                    golden[f"{key}/params"] = np.array(json.dumps(case.params))
                    golden[f"{key}/inputs_sha256"] = np.array(problems.inputs_digest(case))
                    golden[f"{key}/cubin_sha256"] = np.array(sha)
                    golden[f"{key}/out"] = g_out
                    if g[1] is not None:
                        golden[f"{key}/lse"] = _bits(g[1])
                    kept += 1
                if (i + 1) % 50 == 0:
                    print(f"{kernel}: {i + 1}/{a.examples}: GPU == interp {sum(r['gpu_interp'] for r in results)}, "
                          f"interp == twin {sum(r['interp_twin'] for r in results)}", flush=True)
            report["results"][kernel] = results
            report["summary"][kernel] = {
                "cases": len(results), "cubin_sha256": sha,
                "gpu_interp_identical": sum(r["gpu_interp"] for r in results),
                "interp_twin_identical": sum(r["interp_twin"] for r in results),
                "with_lse": get(kernel).writes_lse,
                "lse_identical": sum(r["gpu_interp_lse"] is None for r in results),
                "coverage": coverage([r["params"] for r in results]),
            }
            print(kernel, json.dumps({k: v for k, v in report["summary"][kernel].items() if k != "coverage"}), flush=True)
    report["timing"] = {"interp_s_median": float(np.median(times)), "interp_s_max": float(np.max(times))}
    (a.out / "sass_report.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    write_markdown(a.out / "sass_report.md", report)
    np.savez_compressed(a.out / "sass_golden.npz", provenance=np.array(json.dumps(prov, sort_keys=True, default=str)),
                        **golden)
    if a.install:
        dest = ROOT / "traces" / "sass"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("sass_golden.npz", "sass_report.json", "sass_report.md"):
            shutil.copy(a.out / name, dest / name)
    return 0 if ok else 1


def _nvrtc_ok() -> bool:
    from flashsim.sass import toolchain

    try:
        toolchain.nvrtc_version()
        return True
    except Exception:  # the GPU machine may run from the carried cubin cache alone
        return False


def _dists() -> dict:
    from flashsim.sass import toolchain

    return {k: toolchain._dist_version(k) for k in ("nvidia-cuda-nvdisasm", "pyelftools")}


if __name__ == "__main__":
    sys.exit(main())
