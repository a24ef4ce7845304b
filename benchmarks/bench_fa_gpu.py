"""GPU throughput of the FlashAttention CUDA kernels next to torch's flash SDPA, in one run.

    python benchmarks/bench_fa_gpu.py [--batch 4 --heads 16 --seqlen 4096 --headdim 128] [--json FILE]

Each kernel is timed with CUDA events over repeated launches on device-resident inputs (median of the
runs after a warm-up); TFLOP/s counts 4 * batch * heads * seqlen^2 * headdim flops (halved for causal).
The reference is ``torch.nn.functional.scaled_dot_product_attention`` under the FLASH_ATTENTION backend
on (batch, heads, seqlen, headdim) tensors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def time_events(fn, reps, warmup=2):
    import cupy as cp

    for _ in range(warmup):
        fn()
    cp.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
    return statistics.median(times)


def time_torch(fn, reps, warmup=2):
    """Median seconds of ``fn()`` over ``reps`` runs after ``warmup``, timed with torch's CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1e3)
    return statistics.median(times)


def shape_parser(doc: str) -> argparse.ArgumentParser:
    """The options of the GPU benchmarks: the attention shape, repetitions and a JSON output file."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--headdim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", type=Path)
    return ap


def main(argv=None):
    import ml_dtypes

    from flashsim.gpu import runtime
    from flashsim.gpu.fa_kernels import prepare

    a = shape_parser(__doc__).parse_args(argv)
    b, h, s, d = a.batch, a.heads, a.seqlen, a.headdim
    flops = 4 * b * h * s * s * d
    rng = np.random.default_rng(0)
    base = [rng.standard_normal((b, s, h, d)).astype(np.float32) for _ in range(3)]
    rows = []
    configs = [("v5", "float16", {}), ("v6", "float16", {}), ("kernel1", "float16", {}), ("kernel1", "bfloat16", {}),
               ("fa2", "float16", {}), ("fa2", "bfloat16", {}), ("fa2", "bfloat16", {"causal": True})]
    for kernel, dtype, kw in configs:
        dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
        q, k, v = (x.astype(dt) for x in base)
        prep = prepare(kernel, q, k, v, **kw)
        reps = a.reps if kernel not in ("v5", "v6") else max(2, a.reps // 5)
        t = time_events(prep.launch, reps)
        f = flops / 2 if kw.get("causal") else flops
        rows.append({"impl": kernel, "dtype": dtype, "causal": bool(kw.get("causal")), "ms": t * 1e3, "tflops": f / t / 1e12})
        print(f"{kernel:8s} {dtype:9s} causal={bool(kw.get('causal'))!s:5s} {t * 1e3:9.3f} ms {f / t / 1e12:8.2f} TFLOP/s", flush=True)
        del prep
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    for dtype, causal in (("float16", False), ("bfloat16", False), ("bfloat16", True)):
        tdt = torch.float16 if dtype == "float16" else torch.bfloat16
        q, k, v = (torch.from_numpy(x).to("cuda", tdt).transpose(1, 2).contiguous() for x in base)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            def fn():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            t = time_torch(fn, a.reps)
        f = flops / 2 if causal else flops
        rows.append({"impl": "torch_sdpa_flash", "dtype": dtype, "causal": causal, "ms": t * 1e3, "tflops": f / t / 1e12})
        print(f"sdpa     {dtype:9s} causal={causal!s:5s} {t * 1e3:9.3f} ms {f / t / 1e12:8.2f} TFLOP/s", flush=True)
    out = {"shape": {"batch": b, "heads": h, "seqlen": s, "headdim": d}, "device": runtime.device_info(),
           "torch": torch.__version__, "rows": rows}
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
