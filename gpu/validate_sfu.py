"""Record the MUFU tables on a GPU and check the special-function models on every input.

    python -m flashsim.gpu.validate_sfu --out DIR [--record] [--install] [--ops NAME ...]

--record  sweeps the table regions (one binade per MUFU op, the tanh blocks, all 16-bit inputs) and
          writes DIR/sfu_tables.npz (with --install also flashsim/data/sfu_tables.npz);
then every f32 instruction in ``flashsim.numerics.sfu.SWEPT`` is run on all 2^32 inputs on the GPU
and compared with the model on all CPU cores (per block of 2^22 inputs, by a 64-bit checksum; a block
whose checksums differ is compared element by element), the 16-bit forms on all 65,536 inputs, and
div.rn on 10 million pairs. Writes DIR/sfu_report.json, DIR/sfu_golden.npz (1,000,000 inputs across
every range plus the specials and boundaries, with each instruction's GPU output) and
DIR/sfu_validation.json (records for ``flashsim info``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

BLOCK = 1 << 22
CHUNK = 1 << 27


def checksum(out: np.ndarray, start: int):
    """A 64-bit position-weighted sum (wrapping), computed identically by numpy and cupy."""
    xp = sys.modules["cupy"] if type(out).__module__.startswith("cupy") else np
    idx = xp.arange(out.size, dtype=xp.uint64) + xp.uint64(start)
    w = idx * xp.uint64(0x9E3779B97F4A7C15) + xp.uint64(0x632BE59BD9B4E019)
    return int((out.astype(xp.uint64) * w).sum())


def _model_block(args):
    name, start, n = args
    from flashsim.numerics import sfu

    x = (np.arange(n, dtype=np.uint64) + start).astype(np.uint32)
    return start, checksum(sfu.SWEPT[name][1](x), start)


def sweep(name: str, start: int, n: int):
    import cupy as cp

    from flashsim.gpu.runtime import launch, load_module

    k = load_module("probe_sfu.cu").get_function(f"sweep_{name}")
    out = cp.empty(n, cp.uint32)
    launch(k, ((n + 255) // 256,), (256,), (np.uint32(start & 0xFFFFFFFF), out, np.uint64(n)))
    return out


def array_op(name: str, *xs):
    import cupy as cp

    from flashsim.gpu.runtime import launch, load_module

    k = load_module("probe_sfu.cu").get_function(f"array_{name}")
    ins = [cp.asarray(x) for x in xs]
    out = cp.empty(ins[0].size, cp.uint32)
    launch(k, ((ins[0].size + 255) // 256,), (256,), (*ins, out, np.uint64(ins[0].size)))
    return out.get()


def binade(name, e, sign=0):
    return sweep(name, (sign << 31) | ((e + 127) << 23), 1 << 23).get()


def record_tables(log) -> dict:
    from flashsim.numerics.sfu import TANH_BINADES

    t = {"ex2_pos": binade("ex2_approx_ftz_f32", 0), "ex2_neg": binade("ex2_approx_ftz_f32", 0, 1),
         "rcp": binade("rcp_approx_ftz_f32", 0), "lg2_b0": binade("lg2_approx_ftz_f32", 0),
         "lg2_bm1": binade("lg2_approx_ftz_f32", -1),
         "rsq_e0": binade("rsqrt_approx_ftz_f32", 0), "rsq_e1": binade("rsqrt_approx_ftz_f32", 1),
         "sqrt_e0": binade("sqrt_approx_ftz_f32", 0), "sqrt_e1": binade("sqrt_approx_ftz_f32", 1)}
    bits = []
    for e in TANH_BINADES:
        o = binade("tanh_approx_f32", e)
        for p in range(1, 24):
            blocks = o.reshape(1 << p, -1)
            if np.all(blocks == blocks[:, :1]):
                break
        bits.append(p)
        t[f"tanh_e{e}"] = blocks[:, 0].copy()
    t["tanh_bits"] = np.array(bits, np.int64)
    h = np.arange(1 << 16, dtype=np.uint32)
    for key, name in (("ex2_f16", "ex2_approx_f16x2"), ("ex2_bf16", "ex2_approx_ftz_bf16x2")):
        o = array_op(name, (h << 16) | h)
        if not np.all((o >> 16) == (o & 0xFFFF)):
            raise RuntimeError(f"{name}: the two halves disagree on equal inputs")
        t[key] = (o & 0xFFFF).astype(np.uint16)
    log(f"tables recorded; tanh block bits per binade {dict(zip(TANH_BINADES, bits))}")
    return t


def validate_swept(name: str, pool, log) -> dict:
    import cupy as cp

    from flashsim.numerics import sfu

    t0 = time.time()
    bad_blocks, mismatches, examples = [], 0, []
    bad_inputs = []
    for cstart in range(0, 1 << 32, CHUNK):
        out = sweep(name, cstart, CHUNK)
        gpu_sums = [checksum(out[i:i + BLOCK], cstart + i) for i in range(0, CHUNK, BLOCK)]
        sim_sums = dict(pool.map(_model_block, [(name, cstart + i, BLOCK) for i in range(0, CHUNK, BLOCK)]))
        for j, i in enumerate(range(0, CHUNK, BLOCK)):
            if gpu_sums[j] != sim_sums[cstart + i]:
                x = (np.arange(BLOCK, dtype=np.uint64) + cstart + i).astype(np.uint32)
                g = out[i:i + BLOCK].get()
                s = sfu.SWEPT[name][1](x)
                bad = np.nonzero(g != s)[0]
                mismatches += bad.size
                bad_blocks.append(cstart + i)
                if len(bad_inputs) < 20000:
                    bad_inputs.append(x[bad[:2000]])
                examples += [[hex(int(x[k])), hex(int(g[k])), hex(int(s[k]))] for k in bad[:3]]
        del out
        cp.get_default_memory_pool().free_all_blocks()
    res = {"instruction": sfu.SWEPT[name][0], "inputs": 1 << 32, "mismatches": int(mismatches),
           "bad_blocks": len(bad_blocks), "examples": examples[:40], "seconds": round(time.time() - t0, 1)}
    log(f"{res['instruction']}: all 2^32 inputs, {mismatches} mismatches in {len(bad_blocks)} blocks "
        f"({res['seconds']} s) {examples[:3]}")
    res["_bad_inputs"] = np.concatenate(bad_inputs) if bad_inputs else np.zeros(0, np.uint32)
    return res


def validate_cuda_math(x: np.ndarray, rng, log, out_dir: Path) -> list[dict]:
    """Build gpu/kernels/cuda_math.cu with nvcc four ways (plain, --use_fast_math, -ftz=true, and
    --use_fast_math -ftz=false) and compare every function with its model in that setting, on ``x`` plus
    inputs where results or inputs are subnormal (where ftz matters)."""
    import subprocess

    import cupy as cp

    from flashsim.numerics import cuda_math
    from flashsim.gpu.runtime import kernel_path, launch

    src = kernel_path("cuda_math.cu")
    extra = [rng.uniform(-104, -87, 200_000), rng.uniform(-150, -126, 100_000)]
    big = (rng.integers(0, 1 << 24, 100_000) | (np.uint32(252) << 23)).astype(np.uint32)  # |x| in [2^125, 2^128)
    big |= (rng.integers(0, 2, big.size).astype(np.uint32) << 31)
    x = np.concatenate([x] + [e.astype(np.float32).view(np.uint32) for e in extra] + [big])
    n = x.size
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    scale = np.float32(0.08838834764831845 * 1.4426950408889634).view(np.uint32)
    sc = np.full(n, scale, np.uint32)
    mx = (x.view(np.float32) * sc.view(np.float32) + rng.normal(0, 4, n).astype(np.float32)).astype(np.float32).view(np.uint32)
    results = []
    settings = [(False, False, []), (True, True, ["--use_fast_math"]), (False, True, ["-ftz=true"]),
                (True, False, ["--use_fast_math", "-ftz=false"])]
    for fast, ftz, flags in settings:
        cubin = out_dir / f"cuda_math{''.join(f.replace('-', '_').replace('=', '_') for f in flags)}.cubin"
        cmd = ["nvcc", "-arch=sm_90", "-cubin", "-o", str(cubin), str(src)] + flags
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        mod = cp.RawModule(path=str(cubin))
        for name, (arity, model) in cuda_math.FUNCTIONS.items():
            ins = [x, b, mx][:arity] if name != "scaled_exp2" else [x, sc, mx]
            k = mod.get_function(f"cm_{name}")
            out = cp.empty(n, cp.uint32)
            launch(k, ((n + 255) // 256,), (256,), (*[cp.asarray(a) for a in ins], out, np.uint64(n)))
            g = out.get()
            sim = model(*ins, fast_math=fast, ftz=ftz)
            bad = np.nonzero(g != sim)[0]
            label = f"{name}{' ' + ' '.join(flags) if flags else ''}"
            results.append({"instruction": f"cuda_math.{label}", "inputs": int(n), "mismatches": int(bad.size),
                            "examples": [[hex(int(ins[0][i])), hex(int(g[i])), hex(int(sim[i]))] for i in bad[:5]]})
            log(f"cuda_math {label}: {n} inputs, {bad.size} mismatches {results[-1]['examples'][:2]}")
        cubin.unlink()
    return results


def golden_inputs(rng) -> np.ndarray:
    """1,000,000 f32 inputs: first every special value and boundary (both signs), then every binade
    densely, then random bit patterns."""
    specials = [0, 1, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x3F800000]
    edges = []
    for v in (-126.0, -125.0, -127.0, -149.0, -150.0, 127.0, 128.0, 2.0**-126, 2.0**126, 2.0**-8, 8.0, 0.6,
              9.010913848876953, 1.0, 0.5, 2.0, 4.0, 256.0, 2.0**-23, 2.0**-24):
        b = int(np.float32(abs(v)).view(np.uint32))
        edges += list(range(b - 64, b + 65))
    e = np.array(specials + edges, np.int64) & 0x7FFFFFFF
    sub = np.arange(0, 1 << 23, 211, dtype=np.int64)
    base = np.concatenate([e, sub])
    first = np.concatenate([base, base | 0x80000000]).astype(np.uint32)
    exps = rng.integers(1, 255, 300_000)
    dense = ((exps << 23) | rng.integers(0, 1 << 23, 300_000) | (rng.integers(0, 2, 300_000) << 31)).astype(np.uint32)
    rest = rng.integers(0, 1 << 32, 1_000_000 - first.size - dense.size, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([first, dense, rest])


GOLDEN_FULL = ("ex2_approx_ftz_f32", "lg2_approx_ftz_f32", "rcp_approx_ftz_f32", "tanh_approx_f32")
SMALL = 150_000  # the non-ftz wrappers and rcp.rn are kept on the first inputs (all boundaries included)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--install", action="store_true")
    ap.add_argument("--ops", nargs="*")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--cuda-math-only", action="store_true",
                    help="only the CUDA math calls, in the four ftz/fast-math builds (writes cuda_math_report.json)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / "sfu_validate.log", "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    from flashsim.numerics import sfu
    from flashsim.gpu.validate import provenance, records_from_report

    prov = provenance(args.seed)
    log(json.dumps(prov))
    if args.cuda_math_only:
        rng = np.random.default_rng(args.seed)
        results = validate_cuda_math(golden_inputs(rng), rng, log, args.out)
        (args.out / "cuda_math_report.json").write_text(json.dumps({"provenance": prov, "results": results}, indent=1))
        bad = sum(r["mismatches"] for r in results)
        log(f"cuda_math: {len(results)} function x build checks, {bad} mismatches")
        return 0 if bad == 0 else 1
    root = Path(__file__).resolve().parent.parent
    if args.record:
        t = record_tables(log)
        arrays = sfu.table_arrays(t)
        np.savez_compressed(args.out / "sfu_tables.npz", **arrays)
        if args.install:
            dst = root / "flashsim" / sfu.TABLE_FILE
            tmp = dst.with_name("sfu_tables.tmp.npz")
            np.savez_compressed(tmp, **arrays)
            os.replace(tmp, dst)
        sfu.tables.cache_clear()
    sfu.tables()  # load the tables and compile the kernels before forking the workers
    for _, fn in sfu.SWEPT.values():
        fn(np.zeros(4, np.uint32))
    report = {"provenance": prov, "results": []}
    ops = args.ops or list(sfu.SWEPT)
    bad_inputs = []
    with ProcessPoolExecutor(max_workers=min(os.cpu_count() or 1, 16)) as pool:
        for name in ops:
            r = validate_swept(name, pool, log)
            bad_inputs.append(r.pop("_bad_inputs"))
            report["results"].append(r)
    # 16-bit forms on every input, in both halves with different patterns
    h = np.arange(1 << 16, dtype=np.uint32)
    packed = (h << 16) | h[::-1]
    for name, ptx, model in (("ex2_approx_f16x2", "ex2.approx.f16x2", sfu.ex2_approx_f16x2),
                             ("ex2_approx_ftz_bf16x2", "ex2.approx.ftz.bf16x2", sfu.ex2_approx_ftz_bf16x2)):
        g = array_op(name, packed)
        bad = int(np.sum(g != model(packed)))
        report["results"].append({"instruction": ptx, "inputs": 1 << 16, "mismatches": bad})
        log(f"{ptx}: all 65536 inputs (both halves), {bad} mismatches")
    # div.rn on 10 million pairs
    rng = np.random.default_rng(args.seed)
    a = rng.integers(0, 1 << 32, 10_000_000, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 1 << 32, 10_000_000, dtype=np.uint64).astype(np.uint32)
    b[::3] = (b[::3] & 0x807FFFFF) | (a[::3] & 0x7F800000)  # similar exponents: quotients near 1
    import cupy as cp

    from flashsim.gpu.runtime import launch, load_module

    k = load_module("probe_sfu.cu").get_function("array_div_rn_f32")
    out = cp.empty(a.size, cp.uint32)
    launch(k, ((a.size + 255) // 256,), (256,), (cp.asarray(a), cp.asarray(b), out, np.uint64(a.size)))
    div_out = out.get()
    bad = int(np.sum(div_out != sfu.div_rn_f32(a, b)))
    report["results"].append({"instruction": "div.rn.f32", "inputs": int(a.size), "mismatches": bad})
    log(f"div.rn.f32: 10,000,000 pairs, {bad} mismatches")
    # golden sample, and the CUDA math calls on the same inputs
    x = golden_inputs(rng)
    report["results"] += validate_cuda_math(x, rng, log, args.out)
    bad_x = np.concatenate(bad_inputs)[:100_000] if bad_inputs else np.zeros(0, np.uint32)
    x_small = np.concatenate([bad_x[:50_000], x[:SMALL]])
    x = np.concatenate([bad_x, x])
    pa = {"x": x}
    pb = {"x_small": x_small}
    for name in sfu.SWEPT:
        if name in GOLDEN_FULL[:2]:
            pa[f"out:{name}"] = array_op(name, x)
        elif name in GOLDEN_FULL:
            pb[f"out:{name}"] = array_op(name, x)
        else:
            pb[f"out:{name}"] = array_op(name, x_small)
    pb["x16"] = packed
    pb["out:ex2_approx_f16x2"] = array_op("ex2_approx_f16x2", packed)
    pb["out:ex2_approx_ftz_bf16x2"] = array_op("ex2_approx_ftz_bf16x2", packed)
    pb["div_a"], pb["div_b"] = a[:100_000], b[:100_000]
    pb["out:div_rn_f32"] = div_out[:100_000]
    for suffix, arrays in (("a", pa), ("b", pb)):
        np.savez_compressed(args.out / f"sfu_golden_{suffix}.npz", provenance=np.array(json.dumps(prov, sort_keys=True)),
                            **arrays)
    (args.out / "sfu_report.json").write_text(json.dumps(report, indent=1))
    records = records_from_report(report, "traces/numerics/sfu_report.json")
    (args.out / "sfu_validation.json").write_text(json.dumps(records, indent=1))
    bad = [r["instruction"] for r in report["results"] if r["mismatches"]]
    log(f"SUMMARY: {len(report['results'])} instructions, mismatches in: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
