"""Build flashsim/data/sass_evidence.json, the table ``flashsim info`` prints (:mod:`flashsim.sass.evidence`
reads it), from the reports the harness commits under traces/sass: the whole FlashAttention kernels
compared bit for bit (``validate_sass``: sass_report.json, ``attn_extra``: attn_extra_report.json) and the
per-opcode probes (``sass_probes``: probes.json).

    python -m flashsim.gpu.sass_evidence            # rebuild flashsim/data/sass_evidence.json from traces/sass

For every instruction form (opcode with its modifiers, as nvdisasm prints it) the record says in how many
H100-compared problems (bit-identical on the GPU, per kernel) the interpreter executed it, and how many
per-opcode probe cases ran it. The problems are re-run in the interpreter (on the CPU) from their recorded
parameters with execution counts on (Program.hits), so a form that sits in a cubin but never ran is not
credited. It runs the kernels and reads the repository's traces/, so it lives here, above the kernels and
the interpreter, next to the scripts that write those reports.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import flashsim
from flashsim.sass.evidence import DATA

__all__ = ["DEFAULT_TRACES", "build", "main"]

#: the reports of the GPU runs (traces/sass of the repository)
DEFAULT_TRACES = Path(__file__).resolve().parents[1] / "traces" / "sass"


def _executed(job: tuple) -> tuple[str, set[str]]:
    """Worker: run one recorded problem in the interpreter; the forms it executed."""
    kind, kernel, params = job
    if kind == "fa":
        from flashsim.kernels import problems
        from flashsim.kernels.launch import run_kernel
        from flashsim.kernels.sources import interpreted_module
        from flashsim.kernels.spec import get

        case = problems.make_case(params)
        mod = interpreted_module(get(kernel).source, options=get(kernel).build_options())
        before = {n: f._prog().executed_forms() for n, f in ((n, mod.get_function(n)) for n in mod.kernels)}
        run_kernel(kernel, case.q, case.k, case.v, backend="interp", **case.kwargs)
        after = {n: mod.get_function(n)._prog().executed_forms() for n in mod.kernels}
    else:
        from flashsim.kernels import extra

        mod = extra.module(kernel)
        before = {n: mod.get_function(n)._prog().executed_forms() for n in mod.kernels}
        extra.random_problem(kernel, int(params)).run("interp")
        after = {n: mod.get_function(n)._prog().executed_forms() for n in mod.kernels}
    ran = {f for n in after for f, c in after[n].items() if c > before[n].get(f, 0)}
    return kernel, ran


def build(traces: Path, workers: int = 2) -> dict:
    """Evidence from traces/sass: {form: {"kernels": {kernel: problems}, "problems": n, "probe_cases": m}}."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    forms: dict[str, dict] = {}
    prov: dict = {}
    jobs = []
    for report, kind, key in (("sass_report.json", "fa", "gpu_interp"),
                              ("attn_extra_report.json", "extra", "identical")):
        rp = traces / report
        if not rp.exists():
            continue
        rep = json.loads(rp.read_text())
        p = rep["provenance"]
        prov = {"gpu": p.get("name"), "date": p.get("date"), "driver": p.get("driver_release"),
                "toolchain": p.get("toolchain")}
        for kernel, results in rep["results"].items():
            for r in results:
                if r[key]:  # only problems whose every output bit matched the GPU
                    jobs.append((kind, kernel, r["params"] if kind == "fa" else r["seed"]))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        for kernel, ran in pool.map(_executed, jobs, chunksize=4):
            for form in ran:
                rec = forms.setdefault(form, {"kernels": {}, "problems": 0, "probe_cases": 0})
                rec["kernels"][kernel] = rec["kernels"].get(kernel, 0) + 1
                rec["problems"] += 1
    probes = traces / "probes.json"  # python -m flashsim.gpu.sass_probes: per form, launches and lanes compared
    if probes.exists():
        rep = json.loads(probes.read_text())
        for form, rec in rep.get("opcodes", {}).items():
            r = forms.setdefault(form, {"kernels": {}, "problems": 0, "probe_cases": 0})
            if rec.get("equal", 0) == rec.get("cases", -1):  # every launch of every probe bit-identical
                r["probe_cases"] += int(rec.get("elements", 0))
    return {"provenance": prov, "forms": forms}


#: the other compilers' records (traces/triton: the Triton suite and the form probes; traces/numba)
COMPILER_TRACES = Path(__file__).resolve().parents[1] / "traces"


def compilers(traces: Path = COMPILER_TRACES) -> dict[str, dict]:
    """Evidence from the other compilers' H100 records: {form: {"kernels": {"triton:<case>": 1, ...},
    "problems": n, "probe_cases": lanes}}. The recorded Triton and numba calls are re-run in the interpreter
    with execution counts (only those whose every output byte equals the GPU's are credited); the form
    probes' report already names the forms each probe executed."""
    from flashsim.gpu import form_probes, numba_suite, triton_suite

    forms: dict[str, dict] = {}

    def credit(form: str, kernel: str | None = None, lanes: int = 0):
        r = forms.setdefault(form, {"kernels": {}, "problems": 0, "probe_cases": 0})
        if kernel is not None:
            r["kernels"][kernel] = r["kernels"].get(kernel, 0) + 1
            r["problems"] += 1
        r["probe_cases"] += lanes

    def executed(mod):
        return {n: dict(mod.get_function(n)._prog().executed_forms()) for n in mod.kernels}

    rec = triton_suite.load_record(traces / "triton" / "triton_suite.npz")
    for c in triton_suite.CASES:
        if c.name not in rec:
            continue
        try:
            ins = triton_suite.recorded_inputs(c, rec[c.name])
            outs, r = triton_suite.run_sim(c, ins)
        except NotImplementedError:
            continue  # refused (not modelled): nothing to credit
        if all(np.array_equal(triton_suite.bits(outs[k]), triton_suite.bits(rec[c.name][f"out/{k}"]))
               for k in c.outputs):
            for form in executed(r.module).get(r.compiled.metadata.name, {}):
                credit(form, f"triton:{c.name}")
    nrec = numba_suite.load_record(traces / "numba" / "numba_suite.npz")
    for c in numba_suite.CASES:
        rec = nrec.get(c.name)
        if rec is None:
            continue
        args = [rec[f"in/{a[1]}"].copy() if isinstance(a, tuple) else a for a in c.args]
        fn = numba_suite._launch_cubin_sim(c, bytes(rec["cubin"]), args)
        outs = {a[1]: args[i] for i, a in enumerate(c.args) if isinstance(a, tuple)}
        if all(np.array_equal(numba_suite.bits(outs[k]), numba_suite.bits(rec[f"out/{k}"])) for k in c.outputs):
            for form in fn._prog().executed_forms():
                credit(form, f"numba:{c.name}")
    fp = traces / "triton" / "form_probes.json"
    if fp.exists():
        rep = json.loads(fp.read_text())
        for which, b in rep["builds"].items():
            for name, e in b["probes"].items():
                if e["equal"] and not e["forms_missing"]:
                    pr = form_probes.probe(name)
                    lanes = e["cases"] * (pr.grid * pr.block if pr.uniform else pr.n)  # elements compared
                    for form in e.get("executed", {}):
                        credit(form, lanes=lanes)
    return forms


def fuzz(traces: Path = COMPILER_TRACES) -> tuple[dict[str, int], str]:
    """The differential fuzzer's H200 campaigns (traces/fuzz/**/fuzz_report.json): {form: compared programs
    (summed over builds and campaigns) that executed it, bit-identical to the GPU}, and where and when."""
    counts: dict[str, int] = {}
    where, total = set(), 0
    for path in sorted((traces / "fuzz").rglob("fuzz_report.json")):  # a campaign, or the replays of its record
        rep = json.loads(path.read_text())
        if any(not d.get("fixed_by") for d in rep["differences"]):
            continue  # a report with a difference not fixed credits nothing
        for form, r in rep["forms"].items():
            counts[form] = counts.get(form, 0) + int(r["programs"])
        prov = rep.get("provenance", {})
        where.add(f"{prov.get('name', 'GPU')}, {prov.get('date', '')}")
        total += sum(st["compared"] for st in rep["stats"].values())
    return counts, f"{'; '.join(sorted(where))} (traces/fuzz: {total:,} compared programs)" if where else ""


def merge_fuzz(data: dict, counts: dict[str, int], where: str) -> dict:
    """``data`` with the fuzzer's counts as each form's ``fuzz_programs`` (replacing an earlier merge's)."""
    for rec in data["forms"].values():
        rec.pop("fuzz_programs", None)
    for form, n in counts.items():
        data["forms"].setdefault(form, {"kernels": {}, "problems": 0, "probe_cases": 0})["fuzz_programs"] = n
    data.setdefault("provenance", {})["fuzz"] = where
    return data


def merge(data: dict, extra: dict) -> dict:
    """``data`` with the compilers' evidence added (replacing what an earlier merge added)."""
    forms = data["forms"]
    for rec in forms.values():
        for k in [k for k in rec["kernels"] if k.startswith(("triton:", "numba:"))]:
            rec["problems"] -= rec["kernels"].pop(k)
        rec["probe_cases"] -= rec.pop("form_probe_lanes", 0)
    for form, e in extra.items():
        r = forms.setdefault(form, {"kernels": {}, "problems": 0, "probe_cases": 0})
        for k, n in e["kernels"].items():
            r["kernels"][k] = r["kernels"].get(k, 0) + n
            r["problems"] += n
        r["probe_cases"] += e["probe_cases"]
        r["form_probe_lanes"] = e["probe_cases"]
    data.setdefault("provenance", {})["compilers"] = "NVIDIA H200, 2026-12-02 (traces/triton, traces/numba)"
    return data


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="the folder of the reports (traces/sass)")
    p.add_argument("--workers", type=int, default=2, help="processes re-running the problems (default 2)")
    p.add_argument("--compilers-only", action="store_true",
                   help="keep the table's traces/sass evidence, (re)merge only the other compilers' records")
    p.add_argument("--fuzz-only", action="store_true",
                   help="keep the table, (re)merge only the differential fuzzer's counts (traces/fuzz)")
    a = p.parse_args(argv)
    from flashsim.sass.evidence import load

    if a.fuzz_only:
        data = load()
    elif a.compilers_only:
        data = merge(load(), compilers())
    else:
        data = merge(build(a.traces, workers=a.workers), compilers())
    data = merge_fuzz(data, *fuzz())
    dest = Path(flashsim.__file__).resolve().parent / "data" / DATA
    dest.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(data['forms'])} instruction forms -> {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
