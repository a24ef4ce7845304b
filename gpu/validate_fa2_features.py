"""fa2's dropout, ALiBi, returned probabilities and head dims above 128 on the GPU, against the twin (and the
SASS interpreter) bit for bit, against float64, and the dropout pattern against curand and statistics.

    python -m flashsim.gpu.validate_fa2_features --out DIR [--examples 200] [--seed 0] [--jobs N]
                                                 [--interp] [--deadline S] [--install]

- Philox: flashsim.numerics.philox against curand's Philox4_32_10 (``curand_init(seed, subsequence, 4 *
  offset)``, then ``curand4``) on 4096 (seed, subsequence, offset) triples, edge values included.
- Features (``--examples`` seeded problems each, from flashsim.kernels.problems with the feature forced on):
  ``dropout`` (dropout_p in 0.1-0.9), ``probs`` (dropout with return_attn_probs), ``alibi`` (slopes per head or
  per (batch, head)), ``hdim`` (head dims 136-256), ``hdim192`` (head dims 136-192 without dropout: flash-attn's
  8-warp traits, a third of them packed, ALiBi as the domain draws it), ``varlen`` (packed sequences of 1-5 entries, zero lengths
  included, with the domain's masks, dropout and ALiBi), ``splitkv`` (kernel fa2_splitkv: 2-128 splits and the
  combine kernel), ``kvcache`` (flash_attn_with_kvcache: plain, indexed and paged caches, appended keys with and
  without rotary, 1-5 splits; the caches after the call compared too). GPU == twin for out, LSE and S_dmask; with ``--interp`` the
  cubin in the SASS interpreter == twin too (within ``--deadline`` seconds per feature); out passes
  flash-attn's rule against float64 with the same dropout mask (finite inputs).
- Dropout statistics on flash-attn's test shapes (batch 4, 9 heads): the sign bits of the GPU's S_dmask equal
  the numpy keep pattern element for element, the kept fraction is within flash-attn's tolerance of 1 -
  dropout_p (0.01, 0.025 with a local window), the same (seed, offset) gives the same bytes and the next
  offset another pattern.

Writes DIR/fa2_features.json and .md, and DIR/golden_fa2_features.npz (small problems' GPU outputs with
provenance), which ``--install`` copies to traces/fa2x/ for the CPU replay (tests/test_fa2_features.py). The
twin and interpreter runs go to ``--jobs`` spawned processes. Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from flashsim.gpu.validate_fa import bits as _bits, first_diff

ROOT = Path(__file__).resolve().parents[1]
#: the parameters each feature's problems are drawn with instead of the domain's (problems.draw_params)
FEATURES = {
    "dropout": {"dropout_p": (0.1, 0.17, 0.5, 0.9), "softcap": (0.0,), "return_attn_probs": (False,)},
    "probs": {"dropout_p": (0.17, 0.5), "softcap": (0.0,), "return_attn_probs": (True,)},
    "alibi": {"alibi": ("heads", "batch")},
    "hdim": {"headdim": (136, 160, 192, 200, 224, 256)},
    "varlen": {"varlen": (True,)},
    "splitkv": {},
    "kvcache": {"kvcache": (True,)},
    "hdim192": {"headdim": (136, 160, 184, 192), "dropout_p": (0.0,), "varlen": (False, False, True)},
}
#: the kernel a feature's problems run on (default fa2)
FEATURE_KERNEL = {"splitkv": "fa2_splitkv", "kvcache": "fa2_splitkv1"}
#: the outputs compared, by their number
NAMES = {2: ("out", "lse"), 3: ("out", "lse", "probs"), 4: ("out", "lse", "k_cache", "v_cache")}
GOLDEN_PER_FEATURE = 6
GOLDEN_MAX_ELEMENTS = 120_000
#: flash-attn's test_flash_attn_output shapes for the dropout statistics: (seqlen, d, causal, local)
STAT_SHAPES = ((97, 64, False, False), (257, 128, True, False), (512, 192, False, True), (1025, 256, False, False))

_CURAND = r'''
#include <curand_kernel.h>
extern "C" __global__ void philox_curand(const unsigned long long* seed, const unsigned long long* sub,
                                         const unsigned long long* off, uint4* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    curandStatePhilox4_32_10_t st;
    curand_init(seed[i], sub[i], 4ull * off[i], &st);
    out[i] = curand4(&st);
}
'''


def outputs_sha256(*arrays) -> str:
    """sha256 of the bytes of a run's outputs, in order."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()


def check_philox(n: int = 4096, seed: int = 0) -> dict:
    """flashsim's Philox4x32-10 against curand's on the GPU."""
    import cupy as cp

    from flashsim.numerics.philox import philox4x32_10

    rng = np.random.default_rng(seed)
    edge = np.array([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1], np.uint64)
    s = rng.integers(0, 2**63, n, dtype=np.uint64) * 2 + rng.integers(0, 2, n, dtype=np.uint64)
    u = rng.integers(0, 2**63, n, dtype=np.uint64) * 2
    o = rng.integers(0, 2**62, n, dtype=np.uint64)  # 4 * offset stays below 2**64
    s[:edge.size], u[:edge.size], o[:edge.size] = edge, edge[::-1], np.minimum(edge, np.uint64(2**62 - 1))
    mod = cp.RawModule(code=_CURAND, options=("-I/usr/local/cuda/include", "--std=c++17"))
    f = mod.get_function("philox_curand")
    d_out = cp.zeros((n, 4), np.uint32)
    f(((n + 127) // 128,), (128,), (cp.asarray(s), cp.asarray(u), cp.asarray(o), d_out, np.int32(n)))
    got = cp.asnumpy(d_out)
    want = philox4x32_10(s, u, o)
    bad = np.nonzero((got != want).any(axis=1))[0]
    return {"triples": n, "equal": int(n - bad.size),
            "first_difference": None if not bad.size else {"seed": int(s[bad[0]]), "subsequence": int(u[bad[0]]),
                                                           "offset": int(o[bad[0]]), "curand": got[bad[0]].tolist(),
                                                           "flashsim": want[bad[0]].tolist()}}


def _host_side(params: dict) -> dict:
    """In a worker: the twin's outputs and the rule against float64."""
    from flashsim.attention import attention_lowp, attention_reference, check_args, passes_flash_attn_rule
    from flashsim.kernels import problems, run_twin

    case = problems.make_case(params)
    t0 = time.perf_counter()
    tw = run_twin(params["kernel"], case.q, case.k, case.v, threads=1, **case.kwargs)
    res = {"twin_s": round(time.perf_counter() - t0, 3), "twin": [np.ascontiguousarray(x) for x in tw]}
    if all(np.isfinite(x.astype(np.float32)).all() for x in (case.q, case.k, case.v)):
        args = check_args(case.q, case.k, case.v, **case.kwargs)
        kv = {n: case.kwargs[n] for n in ("k_new", "v_new", "rotary_cos", "rotary_sin") if n in case.kwargs}
        ref, _ = attention_reference(case.q, case.k, case.v, args, kv=kv)
        lowp, _ = attention_lowp(case.q, case.k, case.v, args, kv=kv)
        rule = passes_flash_attn_rule(tw[0], ref, lowp)
        res["rule"], res["rule_detail"] = bool(rule), str(rule)
    else:
        res["rule"], res["rule_detail"] = None, "n/a: non-finite inputs"
    return res


def _interp_side(params: dict) -> tuple[str, float]:
    """In a worker: the sha256 of the interpreter's outputs (the cubin in the SASS interpreter) and its time."""
    from flashsim.kernels import problems
    from flashsim.kernels.launch import run_kernel

    case = problems.make_case(params)
    t0 = time.perf_counter()
    it = run_kernel(params["kernel"], case.q, case.k, case.v, backend="interp", **case.kwargs)
    return outputs_sha256(*it), round(time.perf_counter() - t0, 3)


def run_feature(feature: str, examples: int, seed: int, pool, interp: bool, deadline: float):
    from flashsim.kernels import problems
    from flashsim.kernels.launch import run_kernel

    rng = np.random.default_rng([seed, 19, list(FEATURES).index(feature)])
    kernel = FEATURE_KERNEL.get(feature, "fa2")
    cases = [problems.random_case(rng, kernel, FEATURES[feature]) for _ in range(examples)]
    futures = [pool.submit(_host_side, c.params) for c in cases]
    interps = [pool.submit(_interp_side, c.params) for c in cases] if interp else [None] * len(cases)
    results, golden = [], []
    t_end = time.monotonic() + deadline
    for case, fut, ifut in zip(cases, futures, interps):
        g = run_kernel(case.params["kernel"], case.q, case.k, case.v, **case.kwargs)
        try:
            host = fut.result()
        except Exception as exc:  # a failure in the worker
            results.append({"case": case.describe(), "params": case.params, "error": f"{type(exc).__name__}: {exc}"})
            continue
        if ifut is not None:
            try:
                host["interp_sha"], host["interp_s"] = ifut.result(timeout=max(t_end - time.monotonic(), 0.01))
            except TimeoutError:
                ifut.cancel()  # past the deadline: not run, not counted
            except Exception as exc:
                host["interp_sha"], host["interp_s"] = f"error: {type(exc).__name__}: {exc}", None
        names = NAMES[len(g)]
        diffs = {n: first_diff(_bits(a), _bits(b)) for n, a, b in zip(names, g, host["twin"])}
        r = {"case": case.describe(), "params": case.params, "gpu_sha": outputs_sha256(*g), "twin_s": host["twin_s"],
             "diffs": {n: d for n, d in diffs.items() if d is not None}, "rule": host["rule"],
             "rule_detail": host["rule_detail"]}
        r["identical"] = not r["diffs"] and len(g) == len(host["twin"])
        if "interp_sha" in host:
            r["interp_identical"] = host["interp_sha"] == outputs_sha256(*host["twin"])
            r["interp_s"] = host["interp_s"]
        results.append(r)
        size = case.q.size + case.k.size + case.v.size
        if len(golden) < GOLDEN_PER_FEATURE and size <= GOLDEN_MAX_ELEMENTS and r["identical"]:
            golden.append((case, g))
    return results, golden


def dropout_statistics(seed: int) -> list[dict]:
    """The GPU's dropout pattern on flash-attn's test shapes: sign bits == numpy, kept fraction, repeatability."""
    import ml_dtypes

    from flashsim.attention import check_args
    from flashsim.kernels.launch import run_kernel

    out = []
    for i, (s, d, causal, local) in enumerate(STAT_SHAPES):
        rng = np.random.default_rng([seed, 23, i])
        dt = (np.float16, ml_dtypes.bfloat16)[i % 2]
        q, k, v = (rng.standard_normal((4, s, 9, d)).astype(np.float32).astype(dt) for _ in range(3))
        window = tuple(int(x) for x in rng.integers(0, s, 2)) if local else (-1, -1)
        kw = dict(dropout_p=0.17, causal=causal, window_size=window, return_attn_probs=True,
                  rng_state=(int(rng.integers(2**63)), 4 * int(rng.integers(2**20))))
        g = run_kernel("fa2", q, k, v, **kw)
        again = run_kernel("fa2", q, k, v, **kw)
        nxt = run_kernel("fa2", q, k, v, **{**kw, "rng_state": (kw["rng_state"][0], kw["rng_state"][1] + 4 * 9 * 32)})
        args = check_args(q, k, v, **kw)
        keep = args.keep_mask()
        valid = np.broadcast_to(args.key_mask(), keep.shape)
        probs = g[2][:, :, :s, :s].view(np.uint16)
        kept_gpu = (probs & 0x8000) == 0
        frac = float(1 - kept_gpu[valid].mean())
        out.append({"shape": f"b=4 h=9 s={s} d={d} {np.dtype(dt).name} causal={causal} window={window}",
                    "sign_bits_equal_numpy_on_attended": bool(np.array_equal(kept_gpu[valid], keep[valid])),
                    "dropped_fraction": round(frac, 5), "tolerance": 0.025 if local else 0.01,
                    "fraction_ok": abs(frac - 0.17) <= (0.025 if local else 0.01),
                    "same_state_same_bytes": all(np.array_equal(_bits(a), _bits(b)) for a, b in zip(g, again)),
                    "next_offset_other_pattern": not np.array_equal(_bits(g[2]), _bits(nxt[2]))})
        print("stats", json.dumps(out[-1]), flush=True)
    return out


def main(argv=None) -> int:
    from flashsim.gpu.validate import provenance
    from flashsim.kernels import problems

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--features", default=",".join(FEATURES))
    ap.add_argument("--interp", action="store_true", help="also run each problem's cubin in the SASS interpreter")
    ap.add_argument("--deadline", type=float, default=600.0, help="seconds per feature for the host side")
    ap.add_argument("--install", action="store_true", help="copy the golden data and the reports to traces/fa2x/")
    a = ap.parse_args(argv)
    feats = [f for f in a.features.split(",") if f]
    for f in feats:
        if f not in FEATURES:
            ap.error(f"--features: unknown feature {f!r} (expected {tuple(FEATURES)})")
    if a.examples < 1 or a.jobs < 1 or not a.deadline > 0:
        ap.error("--examples and --jobs must be >= 1 and --deadline > 0")
    a.out.mkdir(parents=True, exist_ok=True)
    report = {"command": "python -m flashsim.gpu.validate_fa2_features " + " ".join(argv if argv is not None else sys.argv[1:]),
              "provenance": provenance(a.seed)}
    report["philox"] = check_philox(seed=a.seed)
    print("philox", json.dumps(report["philox"]), flush=True)
    ok = report["philox"]["equal"] == report["philox"]["triples"]
    golden, report["features"], report["summary"] = {}, {}, {}
    with ProcessPoolExecutor(a.jobs, mp_context=mp.get_context("spawn")) as pool:
        for f in feats:
            t0 = time.perf_counter()
            results, gold = run_feature(f, a.examples, a.seed, pool, a.interp, a.deadline)
            report["features"][f] = results
            s = {"problems": len(results), "errors": sum("error" in r for r in results),
                 "gpu_eq_twin": sum(r.get("identical", False) for r in results),
                 "rule": sum(r.get("rule") is True for r in results),
                 "rule_na": sum(r.get("rule", 0) is None for r in results),
                 "interp_eq_twin": sum(r.get("interp_identical", False) for r in results),
                 "interp_runs": sum("interp_identical" in r for r in results),
                 "seconds": round(time.perf_counter() - t0, 1)}
            report["summary"][f] = s
            ok &= s["errors"] == 0 and s["gpu_eq_twin"] == s["problems"] and s["rule"] + s["rule_na"] == s["problems"]
            ok &= s["interp_eq_twin"] == s["interp_runs"]
            print(f, json.dumps(s), flush=True)
            for case, g in gold:
                key = str(sum(k.endswith("/params") for k in golden))
                golden[f"{key}/params"] = np.array(json.dumps(case.params))
                golden[f"{key}/inputs_sha256"] = np.array(problems.inputs_digest(case))
                golden[f"{key}/feature"] = np.array(f)
                for name, x in zip(NAMES[len(g)], g):
                    golden[f"{key}/{name}"] = _bits(x)
    report["dropout_statistics"] = dropout_statistics(a.seed)
    ok &= all(r["sign_bits_equal_numpy_on_attended"] and r["fraction_ok"] and r["same_state_same_bytes"]
              and r["next_offset_other_pattern"] for r in report["dropout_statistics"])
    report["ok"] = bool(ok)
    (a.out / "fa2_features.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    write_markdown(a.out / "fa2_features.md", report)
    np.savez_compressed(a.out / "golden_fa2_features.npz",
                        provenance=np.array(json.dumps(report["provenance"], sort_keys=True)), **golden)
    if a.install:
        dest = ROOT / "traces" / "fa2x"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("golden_fa2_features.npz", "fa2_features.json", "fa2_features.md"):
            shutil.copy(a.out / name, dest / name)
    print("ok" if ok else "MISMATCH", flush=True)
    return 0 if ok else 1


def write_markdown(path: Path, report: dict) -> None:
    p = report["provenance"]
    lines = ["# fa2's dropout, ALiBi, probabilities, head dims above 128, packed sequences and split-KV: GPU against twin",
             "",
             f"Device: {p.get('name', '?')} (cc {p.get('compute_capability', '?')}), driver {p.get('driver_release', '?')}, "
             f"NVRTC {p.get('nvrtc_version', '?')}, date {p.get('date', '?')}. Command: `{report['command']}`.", "",
             f"Philox4x32-10 against curand: {report['philox']['equal']}/{report['philox']['triples']} triples equal.", "",
             "| feature | problems | GPU == twin | interpreter == twin | flash-attn rule (finite inputs) | errors |",
             "| --- | --- | --- | --- | --- | --- |"]
    for f, s in report["summary"].items():
        lines.append(f"| {f} | {s['problems']} | {s['gpu_eq_twin']} | {s['interp_eq_twin']}/{s['interp_runs']} | "
                     f"{s['rule']}/{s['problems'] - s['rule_na']} | {s['errors']} |")
    lines += ["", "Dropout on flash-attn's test shapes (dropout_p 0.17):", "",
              "| shape | sign bits == numpy | dropped fraction | within | same state, same bytes | next offset differs |",
              "| --- | --- | --- | --- | --- | --- |"]
    for r in report["dropout_statistics"]:
        lines.append(f"| {r['shape']} | {r['sign_bits_equal_numpy_on_attended']} | {r['dropped_fraction']} | "
                     f"{r['tolerance']}: {r['fraction_ok']} | {r['same_state_same_bytes']} | "
                     f"{r['next_offset_other_pattern']} |")
    bad = [r for f in report["features"] for r in report["features"][f]
           if "error" in r or not r.get("identical") or r.get("rule") is False or r.get("interp_identical") is False]
    lines += ["", f"Problems with a difference, a failed rule or an error: {len(bad)}", ""]
    for r in bad[:40]:
        lines.append(f"- {r['case']}: {r.get('error') or r.get('diffs')}, rule {r.get('rule_detail')}, "
                     f"interp {r.get('interp_identical')}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
