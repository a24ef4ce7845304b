"""The interpreter's wgmma (flashsim/sass/ops_gmma.py) against the GPU, bit for bit, on the very cubin bytes.

    python -m flashsim.gpu.validate_sass_wgmma --out DIR [--cases 8] [--seed 0] [--ns 8,64,256] [--forms ...]
                                               [--dry-run]

gpu/kernels/probe_wgmma.cu and gpu/kernels/wgmma_hazards.cu are built once for sm_90a by NVRTC
(validate_mbarrier.build: the pinned wheel, the NVRTC cupy uses) and the GPU loads the same bytes the
interpreter runs (gpu.runtime.load_cubin). On fresh seeded inputs (validate_wgmma's input sets), compared
element by element, GPU against interpreter and both against flashsim.numerics.wgmma:

  probe     every form the interpreter models (f16 / bf16 -> f32 and f16 -> f16 with A from shared memory and
            from registers, e4m3 -> f16), N in --ns, in configurations ``CONFIGS``: one instruction without
            swizzle and with the 128B swizzle, chains of 2 and 4 along K over the other arrangements, scale-d 0
            with a C of NaNs. Every form of the probe is modelled (e4m3 / e5m2 -> f32 included); a form that is
            not must be refused (NotImplementedError naming the form).
  hazards   wgmma_hazards (no planted bug; imm-scale-a / -b -1: .negA / .negB, which no H100 record covers),
            wgmma_two_groups (two groups, wait_group 1 then 0), wgmma_chain (two wgmma in one group),
            wgmma_pipeline (a loop of one group per k-step with wait_group 1, 4 k-steps).

``--dry-run`` runs the GPU side in the interpreter as well (no GPU: it checks this script). Writes
DIR/sass_wgmma_report.json; exit status 1 when the interpreter and the GPU differ anywhere, or the
interpreter does not refuse a form it does not model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from flashsim.gpu import validate_wgmma as V
from flashsim.gpu.validate_mbarrier import ProbeRun, build, run_probe
from flashsim.numerics import wgmma as W
from flashsim.warp.matrix_desc import ARRANGEMENTS

__all__ = ["CONFIGS", "HAZARD_FILE", "main", "modelled", "validate"]

HAZARD_FILE = "wgmma_hazards.cu"
#: (name, k-steps, arrangement of A, of B, scale-d, input set)
CONFIGS = (("one", 1, "none", "none", 1, "random"), ("one_128B", 1, "128B", "128B", 1, "specials"),
           ("chain2", 2, "none_mn", "32B", 1, "cancel"), ("chain4", 4, "64B", "128B", 1, "spread16"),
           ("scale_d0", 2, "128B", "none", 0, "random"))


def modelled(form: V.Form) -> bool:
    """The interpreter computes this form (else it refuses it): f16 / bf16, and every e4m3 / e5m2 pair."""
    return form.k in (16, 32)


def _diff(got: np.ndarray, want: np.ndarray) -> dict:
    bad = np.argwhere(got != want)
    out = {"mismatches": int(len(bad)), "outputs": int(want.size)}
    if len(bad):
        i = tuple(int(x) for x in bad[0])
        out["first"] = {"index": list(i), "got": hex(int(got[i])), "want": hex(int(want[i]))}
    return out


def _probe_runs(cases: int, seed: int, ns, forms, gpu: str, log) -> list[dict]:
    b = build(V.PROBE_FILE)
    rows = []
    for fi, form in enumerate(V.FORMS):
        if form not in forms:
            continue
        for n in ns:
            for ci, (name, steps, arr_a, arr_b, sd, set_name) in enumerate(CONFIGS):
                run = V.Run(name, form, n, steps, arr_a, arr_b, sd, set_name)
                a, bb, c = V.run_inputs(run, np.random.default_rng([seed, fi, n, ci]), cases)
                pr = ProbeRun(b, form.kernel(n), len(a), 128, [a, bb, c], [np.zeros_like(c), np.zeros(1, np.uint32)],
                              ("i", "i", "i", "o", np.int32(steps), np.int32(ARRANGEMENTS.index(arr_a)),
                               np.int32(ARRANGEMENTS.index(arr_b)), np.int32(sd), "o"))
                row = {"kernel": form.kernel(n), "form": form.name, "n": n, "config": name, "steps": steps,
                       "arr_a": arr_a, "arr_b": arr_b, "scale_d": sd, "set": set_name, "cases": len(a)}
                if modelled(form):
                    d_gpu, err = run_probe(pr, gpu)
                    row["probe_error_bits"] = int(err[0])
                    d_sim, _ = run_probe(pr, "interp")
                    row["interp_vs_gpu"] = _diff(d_sim, d_gpu)
                    d_model = V.model_d(form, V.hypotheses(form)["default"], a, bb, c, n, sd)
                    row["model_vs_gpu"] = _diff(d_model, d_gpu)
                else:  # the interpreter must refuse it (the GPU's answers are validate_wgmma's subject)
                    row["probe_error_bits"] = 0
                    try:
                        run_probe(pr, "interp")
                        row["refused"] = False
                    except NotImplementedError as exc:
                        row["refused"] = "not modelled" in str(exc)
                        row["refusal"] = str(exc)
                rows.append(row)
                log(f"{row['kernel']} {name}: " + (json.dumps(row.get("interp_vs_gpu")) if modelled(form)
                                                   else f"refused={row['refused']}"))
    return rows


def _hazard_runs(seed: int, gpu: str, log) -> list[dict]:
    rng = np.random.default_rng([seed, 99])

    def f16(shape):
        return (rng.integers(0x2000, 0x3C00, shape).astype(np.uint16)
                ^ (rng.integers(0, 2, shape).astype(np.uint16) << np.uint16(15)))

    def f32(shape):
        return rng.standard_normal(shape).astype(np.float32).view(np.uint32)

    rows = []
    flip = {1: lambda x: x, -1: lambda x: x ^ np.uint16(0x8000)}
    for sa, sb in ((1, 1), (-1, 1), (1, -1), (-1, -1)):
        b = build(HAZARD_FILE, (f"WGH_SCALE_A={sa}", f"WGH_SCALE_B={sb}"))
        a, bb, c = f16((64, 16)), f16((16, 8)), f32((64, 8))
        pr = ProbeRun(b, "wgmma_hazards", 1, 128, [a, bb, c], [np.zeros((64, 8), np.uint32), np.zeros(128, np.uint32)],
                      ("i", "i", "i", "o", "o", np.int32(1)))
        model = W.wgmma(flip[sa](a), flip[sb](bb), c, n=8, atype="f16", ctype="f32")
        rows.append(_pair(f"wgmma_hazards scale_a={sa} scale_b={sb}", pr, [model, None], gpu))
    b = build(HAZARD_FILE)
    a, b0, b1, c0, c1 = f16((64, 16)), f16((16, 8)), f16((16, 8)), f32((64, 8)), f32((64, 8))
    pr = ProbeRun(b, "wgmma_two_groups", 1, 128, [a, b0, b1, c0, c1], [np.zeros((64, 8), np.uint32)] * 2)
    rows.append(_pair("wgmma_two_groups", pr, [W.wgmma(a, x, c, n=8, atype="f16", ctype="f32")
                                               for x, c in ((b0, c0), (b1, c1))], gpu))
    a, bb, c = f16((64, 32)), f16((32, 8)), f32((64, 8))
    pr = ProbeRun(b, "wgmma_chain", 1, 128, [a, bb, c], [np.zeros((64, 8), np.uint32)])
    rows.append(_pair("wgmma_chain", pr, [W.wgmma_chain(a, bb, c, n=8, atype="f16", ctype="f32")], gpu))
    a, bb, c = f16((64, 64)), f16((64, 8)), f32((64, 8))
    pr = ProbeRun(b, "wgmma_pipeline", 1, 128, [a, bb, c], [np.zeros((64, 8), np.uint32)],
                  ("i", "i", "i", "o", np.int32(4)))
    rows.append(_pair("wgmma_pipeline", pr, [W.wgmma_chain(a, bb, c, n=8, atype="f16", ctype="f32")], gpu))
    for r in rows:
        log(f"{r['run']}: {json.dumps(r['interp_vs_gpu'])}")
    return rows


def _pair(name: str, pr: ProbeRun, models: list, gpu: str) -> dict:
    """One launch on the GPU (``gpu``: "gpu", or "interp" in a dry run) and in the interpreter: every output
    compared, and those with a model (``models``, None where there is none) against it."""
    on_gpu = run_probe(pr, gpu)
    sim = run_probe(pr, "interp")
    return {"run": name, "kernel": pr.kernel, "cubin_sha256": pr.build.sha256,
            "interp_vs_gpu": [_diff(s, g) for s, g in zip(sim, on_gpu)],
            "model_vs_gpu": [_diff(m, g) for m, g in zip(models, on_gpu) if m is not None]}


def validate(out: Path, *, cases: int, seed: int, ns: Sequence[int], forms: Sequence[V.Form] = V.FORMS,
             dry_run: bool = False, log=print) -> dict:
    """Run everything (see the module docstring); writes out/sass_wgmma_report.json and returns the report."""
    t0 = time.time()
    gpu = "interp" if dry_run else "gpu"
    if dry_run:
        prov = {"name": "dry run: the interpreter on both sides", "seed": seed}
    else:
        from flashsim.gpu import validate

        prov = validate.provenance(seed)
        if prov.get("arch") != "sm_90":
            raise SystemExit(f"wgmma needs an sm_90 GPU (H100 / H200); this one is {prov.get('arch')}")
    probe = _probe_runs(cases, seed, ns, tuple(forms), gpu, log)
    hazards = _hazard_runs(seed, gpu, log)
    bad = [r["kernel"] + " " + r["config"] for r in probe
           if r["probe_error_bits"] or ("interp_vs_gpu" in r and r["interp_vs_gpu"]["mismatches"])
           or r.get("refused") is False]
    bad += [r["run"] for r in hazards if any(d["mismatches"] for d in r["interp_vs_gpu"])]
    report = {"provenance": prov, "command": "python -m flashsim.gpu.validate_sass_wgmma " + " ".join(sys.argv[1:]),
              "cubins": {V.PROBE_FILE: build(V.PROBE_FILE).sha256, HAZARD_FILE: build(HAZARD_FILE).sha256},
              "probe": probe, "hazards": hazards, "failures": bad, "seconds": round(time.time() - t0, 1),
              "summary": {"probe_runs": len(probe), "modelled_runs": sum("interp_vs_gpu" in r for r in probe),
                          "interp_outputs_compared": sum(r["interp_vs_gpu"]["outputs"] for r in probe
                                                         if "interp_vs_gpu" in r),
                          "model_mismatches": sum(r["model_vs_gpu"]["mismatches"] for r in probe
                                                  if "model_vs_gpu" in r)}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "sass_wgmma_report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    log(f"SUMMARY: {report['summary']}; failures: {bad or 'none'}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--cases", type=int, default=8, help="cases (CTAs) per form, N and configuration (default 8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ns", default="8,64,256", help=f"comma-separated N of the probe, from {V.NS}")
    ap.add_argument("--forms", default="", help=f"comma-separated subset of {', '.join(V.FORMS_BY_NAME)}")
    ap.add_argument("--dry-run", action="store_true", help="run the GPU side in the interpreter too (no GPU)")
    args = ap.parse_args(argv)
    names = [x for x in args.forms.split(",") if x] or list(V.FORMS_BY_NAME)
    unknown = [x for x in names if x not in V.FORMS_BY_NAME]
    if unknown:
        ap.error(f"--forms: unknown {unknown}; expected {list(V.FORMS_BY_NAME)}")
    ns = tuple(int(x) for x in args.ns.split(",") if x)
    if not ns or any(n not in V.NS for n in ns):
        ap.error(f"--ns: the probe has N in {V.NS}")
    if args.cases < 1:
        ap.error("--cases must be >= 1")
    report = validate(args.out, cases=args.cases, seed=args.seed, ns=ns,
                      forms=[V.FORMS_BY_NAME[x] for x in names], dry_run=args.dry_run)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
