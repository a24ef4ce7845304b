"""Compare the numerics models with the GPU on millions of cases; write a report and golden samples.

    python -m flashsim.gpu.validate --out DIR [--tiles-per-set 512] [--cvt-random 10000000] [--f32-per-set 1250000]

Writes into DIR: ``report.json`` (counts, mismatches per instruction and input set, provenance),
``validation.json`` (the records ``flashsim info`` reads), and golden samples
``mma_k16.npz``, ``mma_k8.npz``, ``cvt.npz``, ``f32.npz`` (inputs, GPU outputs, provenance) that the
CPU tests replay. Mismatching cases are kept in the samples so they can be studied without a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import hashlib
import json
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

from flashsim import __version__
from flashsim.numerics import cvt as cvt_mod
from flashsim.numerics import fp32
from flashsim.gpu import cases, probes, runtime

MMA_VARIANTS = [  # (shape, atype, ctype)
    ("m16n8k16", "f16", "f32"), ("m16n8k16", "bf16", "f32"), ("m16n8k16", "f16", "f16"),
    ("m16n8k8", "f16", "f32"), ("m16n8k8", "bf16", "f32"),
]

def mma_ptx(shape, atype, ctype):
    return f"mma.sync.aligned.{shape}.row.col.{ctype}.{atype}.{atype}.{ctype}"


def source_hashes() -> dict[str, str]:
    kdir = Path(__file__).parent / "kernels"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sorted(kdir.glob("*.cu*"))}


def provenance(seed: int) -> dict:
    info = runtime.device_info()
    return {
        **info,
        "date": _dt.date.today().isoformat(),
        "flashsim": __version__,
        "seed": seed,
        "sources": source_hashes(),
        "compile_options": list(getattr(runtime, "DEFAULT_OPTIONS", ())),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
    }


def _f32_model(name, *arrays):
    return fp32.OPS[name][2](*arrays)


def _cvt_model(op, x, y=None):
    return cvt_mod.cvt(op, x, y)


def parallel(fn, *arrays, chunk: int = 1 << 20):
    """Apply an elementwise model to 1-D arrays in chunks on every core (the CPU side of a sweep)."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    n = len(arrays[0])
    if n <= chunk or (os.cpu_count() or 1) == 1:
        return fn(*arrays)
    starts = range(0, n, chunk)
    with ProcessPoolExecutor(max_workers=min(os.cpu_count(), 16)) as pool:
        parts = pool.map(fn, *([a[s:s + chunk] for s in starts] for a in arrays))
        return np.concatenate(list(parts))


def validate_mma(rng, tiles_per_set: int, keep_per_set: int, log) -> tuple[list, dict]:
    from flashsim.numerics import mma as mma_mod  # numba: imported on first use

    results, samples = [], {}
    for shape, atype, ctype in MMA_VARIANTS:
        k = 16 if shape == "m16n8k16" else 8
        fn = mma_mod.mma_m16n8k16 if k == 16 else mma_mod.mma_m16n8k8
        candidates = candidate_models(mma_mod)
        sets = cases.mma_sets(rng, atype, ctype, k, tiles_per_set)
        keep_a, keep_b, keep_c, keep_d, keep_set = [], [], [], [], []
        per_set = {}
        total = {name: 0 for name in candidates}
        outputs = 0
        t0 = time.time()
        for set_name, (a, b, c) in sets.items():
            d_gpu = probes.run_mma(a, b, c, shape=shape, atype=atype, ctype=ctype)
            counts = {}
            base_bad = None
            for cname, model in candidates.items():
                d_sim = fn(a, b, c, atype=atype, ctype=ctype, model=model)
                bad = np.any(d_sim.reshape(len(a), -1) != d_gpu.reshape(len(a), -1), axis=1)
                counts[cname] = int(np.sum(d_sim != d_gpu))
                total[cname] += counts[cname]
                if cname == "default":
                    base_bad = bad
            outputs += d_gpu.size
            per_set[set_name] = counts
            idx = np.arange(min(keep_per_set, len(a)))
            idx = np.union1d(idx, np.nonzero(base_bad)[0][:keep_per_set])
            keep_a.append(a[idx]); keep_b.append(b[idx]); keep_c.append(c[idx]); keep_d.append(d_gpu[idx])
            keep_set.append(np.full(len(idx), list(sets).index(set_name), np.int16))
        name = mma_ptx(shape, atype, ctype)
        results.append({"instruction": name, "arch": "sm_90", "outputs": outputs, "mismatches": total["default"],
                        "candidates": total, "per_set": per_set, "seconds": round(time.time() - t0, 2)})
        log(f"{name}: {outputs} outputs, mismatches {total}")
        samples[name] = {"a": np.concatenate(keep_a), "b": np.concatenate(keep_b), "c": np.concatenate(keep_c),
                         "d": np.concatenate(keep_d), "set": np.concatenate(keep_set),
                         "set_names": np.array(list(sets))}
    return results, samples


def candidate_models(mma_mod) -> dict:
    """The shipped sm_90 model and alternatives for each open edge case, to see which the GPU follows."""
    base = mma_mod.MODELS["sm_90"]
    cands = {"default": base}
    cands.update({name: m for name, m in mma_mod.MODELS.items() if name.startswith("sm_90") and name != "sm_90"})
    fields = {f.name for f in dataclasses.fields(base)}
    alts = {
        "zero_policy": ["exclude", "exponent_field"],
        "overflow": ["inf", "saturate"],
        "zero_sign": ["+0", "ieee"],
        "underflow_sign": ["keep", "+0"],
        "frac_bits": [24, 26],
        "e_floor": [None, -9, -8, -7, -6, -5, 0],
    }
    for field, values in alts.items():
        if field not in fields:
            continue
        for v in values:
            if getattr(base, field) != v:
                try:
                    cands[f"{field}={v}"] = dataclasses.replace(base, **{field: v})
                except Exception:  # a value this model does not accept
                    pass
    if "zero_exp" in fields:
        for v in (-126, -14):
            try:
                cands[f"zero_policy=exponent_field,zero_exp={v}"] = dataclasses.replace(
                    base, zero_policy="exponent_field", zero_exp=v)
            except Exception:
                pass
    return cands


def validate_f32(rng, per_set: int, keep: int, log):
    sets = cases.f32_operands(rng, per_set)
    results, sample = [], {}
    keep_idx = {}
    for op, (ptx, argnames, model) in fp32.OPS.items():
        total = bad_total = 0
        per = {}
        t0 = time.time()
        for set_name, (a, b, c) in sets.items():
            args = {"a": a, "b": b, "c": c}
            gpu_out = probes.run_f32(op, *(args[n] for n in argnames))
            sim = parallel(partial(_f32_model, op), *(args[n] for n in argnames))
            bad = np.nonzero(sim != gpu_out)[0]
            per[set_name] = int(bad.size)
            total += a.size
            bad_total += bad.size
            idx = np.union1d(np.arange(keep), bad[:1000])
            keep_idx.setdefault(set_name, set()).update(idx.tolist())
        results.append({"instruction": ptx, "arch": "sm_90", "outputs": total, "mismatches": bad_total,
                        "per_set": per, "seconds": round(time.time() - t0, 2)})
        log(f"{ptx}: {total} cases, {bad_total} mismatches {per}")
    # golden sample: the kept operands of every set, with every op's GPU output
    for set_name, (a, b, c) in sets.items():
        idx = np.array(sorted(keep_idx[set_name]))
        sample.setdefault("a", []).append(a[idx]); sample.setdefault("b", []).append(b[idx])
        sample.setdefault("c", []).append(c[idx])
    ga, gb, gc = (np.concatenate(sample[n]) for n in "abc")
    golden = {"a": ga, "b": gb, "c": gc}
    for op, (_, argnames, _) in fp32.OPS.items():
        golden[f"out:{op}"] = probes.run_f32(op, *(golden[n] for n in argnames))
    return results, golden


def validate_cvt(rng, n_random: int, keep: int, log):
    x = cases.cvt_inputs(rng, n_random)
    y = np.roll(x, 12345)
    x16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    results = []
    sel = np.union1d(rng.choice(len(x), keep, replace=False), np.arange(0, len(x), max(1, len(x) // keep)))
    golden = {"x": x[sel], "y": y[sel], "x16": x16}
    extra = set()
    for op in probes.CVT_OPS:
        t0 = time.time()
        dst, src, rnd, mods = cvt_mod.parse(op)
        if src == "f32":
            pair = dst.endswith("x2")
            gpu_out = probes.run_cvt(op, x, y if pair else None)
            sim = parallel(partial(_cvt_model, op), *((x, y) if pair else (x,)))
            n = x.size
        else:
            gpu_out = probes.run_cvt(op, x16)
            sim = cvt_mod.cvt(op, x16)
            n = x16.size
        bad = np.nonzero(sim != gpu_out)[0]
        if src == "f32":
            extra.update(bad[:500].tolist())
        results.append({"instruction": op, "arch": "sm_90", "outputs": int(n), "mismatches": int(bad.size),
                        "seconds": round(time.time() - t0, 2),
                        "examples": [[hex(int(x[i] if src == 'f32' else x16[i])), hex(int(gpu_out[i])), hex(int(sim[i]))]
                                     for i in bad[:8]]})
        log(f"{op}: {n} cases, {bad.size} mismatches")
    if extra:
        e = np.array(sorted(extra))
        golden["x"] = np.concatenate([golden["x"], x[e]])
        golden["y"] = np.concatenate([golden["y"], y[e]])
    for op in probes.CVT_OPS:
        dst, src, _, _ = cvt_mod.parse(op)
        if src == "f32":
            golden[f"out:{op}"] = probes.run_cvt(op, golden["x"], golden["y"] if dst.endswith("x2") else None)
        else:
            golden[f"out:{op}"] = probes.run_cvt(op, golden["x16"])
    return results, golden


def records_from_report(report: dict, report_path: str = "traces/numerics/report.json") -> list[dict]:
    """The verification records ``flashsim info`` reads, one per instruction of a validation report
    (results carry "outputs" or "inputs" as their case count; the arch defaults to sm_90)."""
    prov = report["provenance"]
    return [{"instruction": r["instruction"], "arch": r.get("arch", "sm_90"), "gpu": prov["name"],
             "cc": prov["compute_capability"], "driver": prov["driver_release"],
             "cuda_runtime": prov["cuda_runtime_version"], "nvrtc": prov["nvrtc_version"],
             "cases": r.get("outputs", r.get("inputs")), "mismatches": r["mismatches"], "date": prov["date"],
             "report": report_path}
            for r in report["results"]]


GOLDEN_FILES = ("mma_k16.npz", "mma_k8.npz", "f32.npz", "cvt.npz", "report.json", "validate.log")


def install(out: Path, root: Path) -> None:
    """Copy a validation run's golden samples, report and records into a checkout (atomically per file)."""
    import os
    import shutil

    dest = root / "traces" / "numerics"
    dest.mkdir(parents=True, exist_ok=True)
    pairs = [(out / n, dest / n) for n in GOLDEN_FILES] + [
        (out / "validation.json", root / "flashsim" / "data" / "validation.json")]
    for src, dst in pairs:
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)


def save_npz(path: Path, arrays: dict, prov: dict):
    np.savez_compressed(path, provenance=np.array(json.dumps(prov, sort_keys=True)), **arrays)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--tiles-per-set", type=int, default=512)
    ap.add_argument("--keep-tiles", type=int, default=64, help="tiles per input set kept in the golden sample")
    ap.add_argument("--f32-per-set", type=int, default=1_250_000)
    ap.add_argument("--cvt-random", type=int, default=6_500_000)
    ap.add_argument("--only", choices=["mma", "f32", "cvt"], action="append")
    ap.add_argument("--install", action="store_true",
                    help="also copy the golden samples and report to traces/numerics/ and the records to "
                         "flashsim/data/validation.json of this checkout (only after a full, clean run)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / "validate.log", "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    rng = np.random.default_rng(args.seed)
    prov = provenance(args.seed)
    log(json.dumps(prov))
    report = {"provenance": prov, "results": []}
    todo = args.only or ["mma", "f32", "cvt"]
    if "mma" in todo:
        res, samples = validate_mma(rng, args.tiles_per_set, args.keep_tiles, log)
        report["results"] += res
        for k in (16, 8):
            arrays = {}
            for name, s in samples.items():
                if f"k{k}." in name:
                    arrays.update({f"{name}/{key}": v for key, v in s.items()})
            save_npz(args.out / f"mma_k{k}.npz", arrays, prov)
    if "f32" in todo:
        res, golden = validate_f32(rng, args.f32_per_set, 4000, log)
        report["results"] += res
        save_npz(args.out / "f32.npz", golden, prov)
    if "cvt" in todo:
        res, golden = validate_cvt(rng, args.cvt_random, 40000, log)
        report["results"] += res
        save_npz(args.out / "cvt.npz", golden, prov)
    (args.out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    records = records_from_report(report)
    (args.out / "validation.json").write_text(json.dumps(records, indent=1))
    bad = [r for r in report["results"] if r["mismatches"]]
    if args.install:
        if bad or args.only:
            log("not installing: the run had mismatches or was partial")
        else:
            install(args.out, Path(__file__).resolve().parent.parent)
            log("installed golden data into traces/numerics and records into flashsim/data")
    log(f"SUMMARY: {len(report['results'])} instructions, {len(bad)} with mismatches: "
        + ", ".join(f"{r['instruction']}={r['mismatches']}" for r in bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
