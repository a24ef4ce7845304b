"""Shared-memory counters of the FlashAttention kernels from Nsight Compute, per launch, for the
simulator's per-tag bank report to be compared with (totals per kernel and op class).

    python -m flashsim.gpu.ncu_fa --out DIR [--ncu PATH] [--timeout S]

Runs ``ncu --clock-control none --csv`` over ``python -m flashsim.gpu.ncu_fa --launch``, which launches each kernel
once on the problems of LAUNCHES (fixed shapes; bank counts depend on addresses only), with the
instruction-level shared-memory wavefront/conflict counters that gpu.check_banks validated and the
executed shared-memory instruction counts. Writes DIR/ncu_fa.json (per launch: kernel, problem, metrics)
and the raw CSV.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from flashsim.errors import CheckError
from flashsim.gpu.check_banks import _run, choose_metrics, parse_ncu_csv, query_metrics, results_by_launch

#: (kernel, batch, seqlen_q, seqlen_k, heads, headdim, dtype, masks)
LAUNCHES = [
    ("v5", 1, 64, 64, 1, 64, "float16", {}),
    ("v6", 1, 64, 64, 1, 64, "float16", {}),
    ("v5", 1, 128, 128, 2, 128, "float16", {}),
    ("v6", 1, 128, 128, 2, 128, "float16", {}),
    ("kernel1", 1, 128, 128, 1, 128, "float16", {}),
    ("fa2", 1, 128, 128, 1, 128, "float16", {}),
    ("fa2", 1, 256, 256, 1, 64, "bfloat16", {"causal": True}),
]
OPS = ["ld", "st", "ldsm", "ldgsts"]


def problem(spec):
    import ml_dtypes

    _, b, sq, sk, h, d, dtype, _ = spec
    dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(sq * 7 + d)
    return tuple(rng.standard_normal(s).astype(dt) for s in ((b, sq, h, d), (b, sk, h, d), (b, sk, h, d)))


def launch_all():
    from flashsim.gpu.fa_kernels import run_kernel

    for spec in LAUNCHES:
        q, k, v = problem(spec)
        run_kernel(spec[0], q, k, v, **spec[7])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.launch:
        launch_all()
        return 0
    if a.out is None:
        ap.error("--out is required")
    a.out.mkdir(parents=True, exist_ok=True)
    ncu = shutil.which(a.ncu) or a.ncu
    try:
        available = query_metrics(ncu, 300, a.out)
        chosen = choose_metrics(available, OPS)
        names = sorted({n for op in chosen.values() for q in op.values() for n in q})
        names += sorted(m for m in available if m.startswith("smsp__sass_inst_executed_op_")
                        and any(t in m for t in ("shared", "ldsm", "ldgsts")))
        cmd = [ncu, "--clock-control", "none", "--csv", "--kernel-name", "regex:^(fa_v|kernel1_|fa2_)",
               "--metrics", ",".join(f"{n}.sum" for n in names), sys.executable, "-m", "flashsim.gpu.ncu_fa", "--launch"]
        proc = _run(cmd, a.timeout)
    except CheckError as exc:
        print(f"ncu_fa: {exc}")
        return 2
    (a.out / "ncu_fa.csv").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    launches = results_by_launch(parse_ncu_csv(proc.stdout))
    report = {"command": " ".join(cmd), "metrics": chosen, "launches": []}
    for spec, res in zip(LAUNCHES, launches):
        report["launches"].append({"kernel": spec[0], "ncu_kernel": res["kernel"], "problem": list(spec[1:7]),
                                   "masks": spec[7], "metrics": res["metrics"]})
        print(spec[0], res["kernel"], {k: v for k, v in res["metrics"].items() if "wavefronts" in k or "conflicts" in k})
    (a.out / "ncu_fa.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0 if len(launches) == len(LAUNCHES) else 1


if __name__ == "__main__":
    sys.exit(main())
