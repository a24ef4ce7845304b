"""Read the special-function unit's behaviour off the GPU: structure tests over all 2^32 inputs and raw tables.

    python -m gpu.sfu_explore --out DIR

This is how the tables behind ``flashsim.numerics.sfu`` were obtained. For MUFU.EX2 / LG2 / RCP /
TANH (the .ftz approx PTX forms, one MUFU each on sm_90) it records the outputs over [1, 2) (and a
few more binades), checks candidate structural laws over every f32 input on the GPU (scale
invariance of rcp, 2^n * T[frac] for ex2 with several fixed-point quantisations, oddness and
piecewise structure of tanh), and stores the 16-bit ex2 forms over all 65,536 inputs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

CHUNK = 1 << 27


def sweep(name: str, start: int, n: int):
    """Run sweep_<name> over bit patterns start .. start+n-1; returns a cupy uint32 array."""
    import cupy as cp

    from gpu.runtime import launch, load_module

    k = load_module("probe_sfu.cu").get_function(f"sweep_{name}")
    out = cp.empty(n, cp.uint32)
    launch(k, ((n + 255) // 256,), (256,), (np.uint32(start), out, np.uint64(n)))
    return out


def all_inputs(name: str):
    """Yield (start, x bits (cupy), out bits (cupy)) over all 2^32 inputs in chunks."""
    import cupy as cp

    for start in range(0, 1 << 32, CHUNK):
        x = cp.arange(start, start + CHUNK, dtype=cp.uint64).astype(cp.uint32)
        yield start, x, sweep(name, start, CHUNK)


def binade(name: str, e: int, sign: int = 0):
    """Outputs for every f32 of the binade [2^e, 2^(e+1)) (2^23 values), as numpy uint32."""
    start = (sign << 31) | ((e + 127) << 23)
    return sweep(name, start, 1 << 23).get()


def pack(a: np.ndarray) -> np.ndarray:
    """Delta-encode a smooth uint32 sequence (compresses well in npz)."""
    return np.diff(a.astype(np.int64), prepend=0).astype(np.int64)


def ex2_hypotheses(T, log):
    """out(x) == 2^n * T[f] with x*2^23 quantised (floor / trunc / rne) to n.f, over every input."""
    import cupy as cp

    Tg = cp.asarray(T)
    res = {m: 0 for m in ("floor", "trunc", "rne")}
    examples = {m: [] for m in res}
    for start, x, out in all_inputs("ex2_approx_ftz_f32"):
        xf = x.view(cp.float32).astype(cp.float64)
        finite = cp.isfinite(xf) & (cp.abs(xf) < 200)
        y = cp.where(finite, xf, 0) * 2.0**23
        for m in res:
            q = cp.floor(y) if m == "floor" else cp.trunc(y) if m == "trunc" else cp.rint(y)
            qi = q.astype(cp.int64)
            n = qi >> 23
            f = qi & ((1 << 23) - 1)
            val = Tg[f].view(cp.float32).astype(cp.float64) * 0.5 * cp.exp2(n.astype(cp.float64) + 1)
            val = cp.where(val < 2.0**-126, 0.0, val)  # FTZ
            model = val.astype(cp.float32).view(cp.uint32)
            sel = finite & (cp.abs(xf) < 127)
            bad = sel & (model != out)
            nb = int(bad.sum())
            res[m] += nb
            if nb and len(examples[m]) < 50:
                idx = cp.nonzero(bad)[0][:10].get()
                examples[m] += [[hex(int(x[i])), hex(int(out[i])), hex(int(model[i]))] for i in idx]
    log(f"ex2 2^n*T[f] mismatches (|x|<127): {res}")
    return {"mismatches": res, "examples": examples}


def rcp_hypothesis(T, log):
    """out(+-2^e * 1.m) == +-2^-e * T[m] (FTZ) over every normal input."""
    import cupy as cp

    Tg = cp.asarray(T)
    bad_total = 0
    examples = []
    special = {}
    for start, x, out in all_inputs("rcp_approx_ftz_f32"):
        ef = (x >> 23) & 0xFF
        m = x & 0x7FFFFF
        normal = (ef != 0) & (ef != 0xFF)
        t = Tg[m].view(cp.float32).astype(cp.float64)
        val = t * cp.exp2(127.0 - ef.astype(cp.float64))
        val = cp.where(val < 2.0**-126, 0.0, val)
        model = val.astype(cp.float32).view(cp.uint32) | (x & 0x80000000)
        bad = normal & (model != out)
        nb = int(bad.sum())
        bad_total += nb
        if nb and len(examples) < 50:
            idx = cp.nonzero(bad)[0][:10].get()
            examples += [[hex(int(x[i])), hex(int(out[i])), hex(int(model[i]))] for i in idx]
        for lab, sel in (("zero_or_sub", ef == 0), ("inf_nan", ef == 0xFF)):
            special.setdefault(lab, set()).update(cp.unique(out[sel]).get().tolist()[:16])
    log(f"rcp scale-invariance mismatches: {bad_total}")
    return {"mismatches": bad_total, "examples": examples, "special_outputs": {k: sorted(hex(v) for v in s)[:16] for k, s in special.items()}}


def lg2_hypotheses(L, log):
    """out(2^e * 1.m) == fl32(e + L[m]) (L = outputs on [1,2)), over every normal input."""
    import cupy as cp

    Lg = cp.asarray(L)
    bad_total, examples = 0, []
    per_e = {}
    for start, x, out in all_inputs("lg2_approx_ftz_f32"):
        ef = (x >> 23) & 0xFF
        m = x & 0x7FFFFF
        pos_normal = (ef != 0) & (ef != 0xFF) & ((x >> 31) == 0)
        lv = Lg[m].view(cp.float32).astype(cp.float64)
        model = ((ef.astype(cp.float64) - 127) + lv).astype(cp.float32).view(cp.uint32)
        bad = pos_normal & (model != out)
        nb = int(bad.sum())
        bad_total += nb
        if nb:
            e_bad = (ef[bad].astype(cp.int64) - 127)
            u, c = cp.unique(e_bad, return_counts=True)
            for a, b in zip(u.get().tolist(), c.get().tolist()):
                per_e[a] = per_e.get(a, 0) + b
            if len(examples) < 50:
                idx = cp.nonzero(bad)[0][:10].get()
                examples += [[hex(int(x[i])), hex(int(out[i])), hex(int(model[i]))] for i in idx]
    log(f"lg2 fl(e + L[m]) mismatches: {bad_total}")
    return {"mismatches": bad_total, "per_exponent": per_e, "examples": examples}


def tanh_structure(log):
    """Oddness, saturation and identity thresholds, and per-binade block constancy of MUFU.TANH."""
    import cupy as cp

    odd_bad = 0
    pos = {}
    for start, x, out in all_inputs("tanh_approx_f32"):
        if start >= (1 << 31):
            continue
        neg = sweep("tanh_approx_f32", start | (1 << 31), CHUNK)
        xf = x.view(cp.float32)
        ok = ~cp.isnan(xf)
        odd_bad += int((ok & (neg != (out ^ cp.uint32(0x80000000)))).sum())
    # thresholds on the positive axis
    res = {"odd_mismatches": odd_bad}
    for e in range(-30, 5):
        o = binade("tanh_approx_f32", e)
        x = ((e + 127) << 23) + np.arange(1 << 23, dtype=np.uint32)
        info = {"identity": int(np.sum(o == x)), "one": int(np.sum(o == 0x3F800000)),
                "distinct": int(len(np.unique(o))),
                "min_trailing_zeros": int(min(((int(v) & -int(v)).bit_length() - 1) if v & 0x7FFFFF else 23 for v in np.unique(o)[:4096]))}
        for p in range(4, 24):
            blocks = o.reshape(1 << p, -1)
            if np.all(blocks == blocks[:, :1]):
                info["constant_blocks_p"] = p
                break
        pos[e] = info
    res["binades"] = pos
    log(f"tanh odd mismatches {odd_bad}; binades {json.dumps(pos)[:2000]}")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / "explore.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    from gpu.runtime import device_info

    t0 = time.time()
    report = {"device": device_info()}
    tables = {}
    ex2_t = binade("ex2_approx_ftz_f32", 0)       # x in [1, 2): T[j] = out(1 + j 2^-23) = 2 * 2^f
    rcp_t = binade("rcp_approx_ftz_f32", 0)
    lg2_t = binade("lg2_approx_ftz_f32", 0)
    for name, t in (("ex2_b0", ex2_t), ("rcp_b0", rcp_t), ("lg2_b0", lg2_t)):
        tables[name] = pack(t)
    tables["lg2_bm1"] = pack(binade("lg2_approx_ftz_f32", -1))
    tables["ex2_bm1"] = pack(binade("ex2_approx_ftz_f32", -1))
    tables["ex2_neg_b0"] = pack(binade("ex2_approx_ftz_f32", 0, sign=1))
    tables["tanh_b0"] = pack(binade("tanh_approx_f32", 0))
    tables["tanh_bm2"] = pack(binade("tanh_approx_f32", -2))
    log(f"tables read in {time.time() - t0:.1f}s")
    report["ex2"] = ex2_hypotheses(ex2_t, log)
    report["rcp"] = rcp_hypothesis(rcp_t, log)
    report["lg2"] = lg2_hypotheses(lg2_t, log)
    report["tanh"] = tanh_structure(log)
    # 16-bit forms over every input: x2 instructions with the same pattern in both halves
    import cupy as cp

    h = cp.arange(1 << 16, dtype=cp.uint32)
    for name in ("ex2_approx_f16x2", "ex2_approx_ftz_bf16x2"):
        from gpu.runtime import launch, load_module

        k = load_module("probe_sfu.cu").get_function(f"array_{name}")
        out = cp.empty(1 << 16, cp.uint32)
        launch(k, (256,), (256,), ((h << 16) | h, out, np.uint64(1 << 16)))
        o = out.get()
        tables[name] = o
        report[name] = {"halves_agree": bool(np.all((o >> 16) == (o & 0xFFFF)))}
    np.savez_compressed(args.out / "sfu_tables.npz", **tables)
    report["seconds"] = round(time.time() - t0, 1)
    (args.out / "sfu_explore.json").write_text(json.dumps(report, indent=1, default=str))
    log(f"done in {report['seconds']}s")


if __name__ == "__main__":
    main()
