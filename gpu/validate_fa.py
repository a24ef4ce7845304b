"""The FlashAttention kernels on the GPU against their twins, bit for bit, and against float64.

    python -m flashsim.gpu.validate_fa --out DIR [--examples 200] [--kernels fa2,kernel1,...] [--seed 0]
                              [--install]

For each kernel (default: every kernel of flashsim.kernels.spec), ``--examples`` seeded random problems from
``flashsim.kernels.problems`` (shapes, GQA, masks, softcap, dtypes and value kinds of the kernel's domain):
the CUDA kernel's out (and LSE for the kernels that write it)
must equal the twin's bit for bit, and out must pass flash-attn's rule against a float64 reference with
the kernel's own precisions. Writes DIR/fa_report.json and DIR/fa_report.md, and DIR/golden_fa.npz: the
inputs and GPU outputs of the small problems, with provenance, which ``--install`` copies to traces/fa/ for
the CPU replay (tests/test_fa_golden.py). Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from flashsim.kernels import problems, run_twin
from flashsim.kernels.spec import get

GOLDEN_PER_KERNEL = 8
GOLDEN_MAX_ELEMENTS = 120_000  # q + k + v elements of a problem kept as golden data
ROOT = Path(__file__).resolve().parents[1]


def bits(x):
    """An output's bit patterns (16-bit elements as uint16, 32-bit as uint32), None for None."""
    return None if x is None else np.ascontiguousarray(x).view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


def first_diff(a, b, names=("gpu", "twin")):
    """None when the bit arrays ``a`` and ``b`` are equal (both None counts as equal), else how many
    elements differ and the first one's index and both values, under ``names``."""
    if a is None and b is None:
        return None
    a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
    i = np.nonzero(a != b)[0]
    if i.size == 0:
        return None
    j = int(i[0])
    return {"count": int(i.size), "first_index": j, names[0]: hex(int(a[j])), names[1]: hex(int(b[j]))}


def check_case(case, run_gpu):
    """GPU vs twin for one Case: a dict of results (mismatch details when there are some)."""
    from flashsim.attention import attention_lowp, attention_reference, check_args, passes_flash_attn_rule

    kernel = case.params["kernel"]
    t0 = time.perf_counter()
    g = run_gpu(kernel, case.q, case.k, case.v, **case.kwargs)
    t1 = time.perf_counter()
    s = run_twin(kernel, case.q, case.k, case.v, **case.kwargs)
    t2 = time.perf_counter()
    (g_out, g_lse), (s_out, s_lse) = g[:2], s[:2]
    res = {"case": case.describe(), "params": case.params, "gpu_s": round(t1 - t0, 4), "twin_s": round(t2 - t1, 4)}
    res["out_diff"] = first_diff(g_out.view(np.uint16), s_out.view(np.uint16))
    res["lse_diff"] = None if g_lse is None else first_diff(g_lse.view(np.uint32), s_lse.view(np.uint32))
    # with dropout and return_attn_probs: the probabilities (S_dmask) too
    res["probs_diff"] = first_diff(g[2].view(np.uint16), s[2].view(np.uint16)) if len(g) > 2 else None
    res["identical"] = res["out_diff"] is None and res["lse_diff"] is None and res["probs_diff"] is None
    finite = all(np.isfinite(x.astype(np.float32)).all() for x in (case.q, case.k, case.v))
    if not finite:
        # NaN/Inf inputs: where they propagate (0 * Inf in the mma, exp2 underflow ahead of an Inf value) is
        # the hardware's to say, and bit-identity above is the check; flash-attn's rule does not apply
        res["rule"], res["rule_detail"] = None, "n/a: non-finite inputs"
        return res, (g_out, g_lse)
    args = check_args(case.q, case.k, case.v, **case.kwargs)
    ref, _ = attention_reference(case.q, case.k, case.v, args)
    lowp, _ = attention_lowp(case.q, case.k, case.v, args, acc=get(kernel).acc)
    rule = passes_flash_attn_rule(g_out, ref, lowp)
    res["rule"] = bool(rule)
    res["rule_detail"] = str(rule)
    return res, (g_out, g_lse)


def coverage(params_list):
    c = Counter()
    for p in params_list:
        c[f"kind={p['kind']}"] += 1
        c[f"dtype={p['dtype']}"] += 1
        if p["causal"]:
            c["causal"] += 1
        if p["window_size"] != (-1, -1) and list(p["window_size"]) != [-1, -1]:
            c["local"] += 1
        if p["softcap"]:
            c["softcap"] += 1
        if p["heads"] != p["heads_k"]:
            c["gqa/mqa"] += 1
        if p["seqlen_q"] != p["seqlen_k"]:
            c["seqlen_q != seqlen_k"] += 1
        inst = get(p["kernel"]).instance_for_headdim(p["headdim"])
        if p["seqlen_q"] % inst.block_m or p["seqlen_k"] % inst.block_n:
            c["seqlens not multiples of the blocks"] += 1
        if p["headdim"] % 8:
            c["head dim padded to a multiple of 8"] += 1
    return dict(sorted(c.items()))


def write_markdown(path: Path, report: dict) -> None:
    lines = ["# FlashAttention kernels: GPU against twin", "",
             f"Device: {report['provenance'].get('name', '?')} (cc {report['provenance'].get('compute_capability', '?')}), "
             f"driver {report['provenance'].get('driver_release', '?')}, CUDA runtime "
             f"{report['provenance'].get('cuda_runtime_version', '?')}, NVRTC {report['provenance'].get('nvrtc_version', '?')}, "
             f"date {report['provenance'].get('date', '?')}. "
             f"Command: `{report['command']}`.", "",
             "| kernel | problems | out bit-identical | LSE bit-identical | flash-attn rule vs float64 (finite inputs) |",
             "| --- | --- | --- | --- | --- |"]
    for k, s in report["summary"].items():
        lse = f"{s['lse_identical']}/{s['with_lse']}" if s["with_lse"] else "(no LSE)"
        lines.append(f"| {k} | {s['cases']} | {s['out_identical']}/{s['cases']} | {lse} | "
                     f"{s['rule']}/{s['cases'] - s['rule_na']} |")
    lines += ["", "Coverage (problems per feature):", ""]
    for k, s in report["summary"].items():
        lines.append(f"- {k}: " + ", ".join(f"{name} {n}" for name, n in s["coverage"].items()))
    lines += ["", "Problems with NaN/Inf inputs are compared bit for bit only: where NaN and Inf propagate is the "
              "hardware's to say (for example 0 * Inf inside the mma after exp2 underflows to 0)."]
    bad = [r for k in report["results"] for r in report["results"][k] if not (r["identical"] and r["rule"] is not False)]
    lines += ["", f"Problems with a difference or a failed rule: {len(bad)}", ""]
    for r in bad[:40]:
        lines.append(f"- {r['case']}: out {r['out_diff']}, lse {r['lse_diff']}, rule {r['rule_detail']}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    from flashsim.gpu.validate import provenance
    from flashsim.kernels.launch import run_kernel

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--kernels", default=",".join(problems.KERNELS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--install", action="store_true", help="copy golden_fa.npz and the reports to traces/fa/")
    a = ap.parse_args(argv)
    kernels = [k for k in a.kernels.split(",") if k]
    for k in kernels:
        if k not in problems.KERNELS:
            ap.error(f"--kernels: unknown kernel {k!r} (expected {problems.KERNELS})")
    a.out.mkdir(parents=True, exist_ok=True)
    report = {"command": "python -m flashsim.gpu.validate_fa " + " ".join(argv if argv is not None else sys.argv[1:]),
              "provenance": provenance(a.seed), "results": {}, "summary": {}}
    golden = {}
    n_golden = 0
    ok = True
    for ki, kernel in enumerate(kernels):
        rng = np.random.default_rng([a.seed, ki])
        results, kept = [], 0
        for i in range(a.examples):
            case = problems.random_case(rng, kernel)
            res, (g_out, g_lse) = check_case(case, run_kernel)
            results.append(res)
            ok &= res["identical"] and res["rule"] is not False
            size = case.q.size + case.k.size + case.v.size
            if kept < GOLDEN_PER_KERNEL and size <= GOLDEN_MAX_ELEMENTS and res["identical"]:
                key = f"{n_golden}"
                golden[f"{key}/params"] = np.array(json.dumps(case.params))
                golden[f"{key}/inputs_sha256"] = np.array(problems.inputs_digest(case))
                golden[f"{key}/out"] = g_out.view(np.uint16)
                if g_lse is not None:
                    golden[f"{key}/lse"] = g_lse.view(np.uint32)
                kept += 1
                n_golden += 1
            if (i + 1) % 25 == 0:
                print(f"{kernel}: {i + 1}/{a.examples}, identical so far "
                      f"{sum(r['identical'] for r in results)}, rule {sum(r['rule'] is True for r in results)}", flush=True)
        report["results"][kernel] = results
        report["summary"][kernel] = {
            "cases": len(results), "out_identical": sum(r["out_diff"] is None for r in results),
            "with_lse": len(results) if get(kernel).writes_lse else 0,
            "lse_identical": sum(r["lse_diff"] is None for r in results) if get(kernel).writes_lse else 0,
            "rule": sum(r["rule"] is True for r in results), "rule_na": sum(r["rule"] is None for r in results),
            "coverage": coverage([r["params"] for r in results]),
        }
        print(kernel, json.dumps(report["summary"][kernel]), flush=True)
    (a.out / "fa_report.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    write_markdown(a.out / "fa_report.md", report)
    np.savez_compressed(a.out / "golden_fa.npz", provenance=np.array(json.dumps(report["provenance"], sort_keys=True)),
                        **golden)
    print(f"golden problems: {n_golden}; report in {a.out}")
    if a.install:
        dest = ROOT / "traces" / "fa"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("golden_fa.npz", "fa_report.json", "fa_report.md"):
            shutil.copy(a.out / name, dest / name)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
