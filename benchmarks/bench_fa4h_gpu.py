"""GPU throughput of fa4h (seed 004's warp-specialised pipeline on sm_90) next to torch SDPA (flash and cuDNN
backends) and flashsim's fa2, in one run.

    python benchmarks/bench_fa4h_gpu.py [--batch 4 --heads 16 --seqlen 4096] [--reps 10] [--json FILE]

Shapes: head dim 128 (bf16, causal and not) and the seed's qk 192 / v 128 (bf16, causal and not). fa4h runs
the cubin the interpreter runs (backend "gpu-cubin"); fa2 its NVRTC build through cupy. Each is timed with CUDA
events over repeated launches on device-resident inputs (median after a warm-up). TFLOP/s counts
2 * batch * heads * seqlen^2 * (d_qk + d_v) flops, halved for causal. SDPA takes (batch, heads, seqlen, d)
tensors; a backend that refuses a shape is reported as such.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_fa_gpu import shape_parser, time_events, time_torch  # noqa: E402


def main(argv=None):
    import json

    import ml_dtypes
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashsim.gpu import runtime
    from flashsim.kernels.launch import prepare

    a = shape_parser(__doc__).parse_args(argv)
    b, h, s = a.batch, a.heads, a.seqlen
    rng = np.random.default_rng(0)
    rows = []

    def report(impl, dqk, dv, causal, t, note=""):
        flops = 2 * b * h * s * s * (dqk + dv) / (2 if causal else 1)
        row = {"impl": impl, "dtype": "bfloat16", "hdim_qk": dqk, "hdim_v": dv, "causal": causal,
               "ms": None if t is None else t * 1e3, "tflops": None if t is None else flops / t / 1e12, "note": note}
        rows.append(row)
        shown = "-" if t is None else f"{t * 1e3:9.3f} ms {flops / t / 1e12:8.1f} TFLOP/s"
        print(f"{impl:18s} d {dqk}/{dv} causal={causal!s:5s} {shown} {note}", flush=True)

    for dqk, dv in ((128, 128), (192, 128)):
        q = rng.standard_normal((b, s, h, dqk)).astype(np.float32).astype(ml_dtypes.bfloat16)
        k = rng.standard_normal((b, s, h, dqk)).astype(np.float32).astype(ml_dtypes.bfloat16)
        v = rng.standard_normal((b, s, h, dv)).astype(np.float32).astype(ml_dtypes.bfloat16)
        for causal in (False, True):
            prep = prepare("fa4h", q, k, v, backend="gpu-cubin", causal=causal)
            report("fa4h", dqk, dv, causal, time_events(prep.launch, a.reps))
            del prep
            if dqk == dv:
                prep = prepare("fa2", q, k, v, causal=causal)
                report("fa2", dqk, dv, causal, time_events(prep.launch, a.reps))
                del prep
            tq, tk, tv = (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).to("cuda").transpose(1, 2).contiguous()
                          for x in (q, k, v))
            for name, backend in (("torch_sdpa_flash", SDPBackend.FLASH_ATTENTION),
                                  ("torch_sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        def fn():
                            F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
                        report(name, dqk, dv, causal, time_torch(fn, a.reps))
                except RuntimeError as exc:
                    report(name, dqk, dv, causal, None, f"refused: {str(exc).splitlines()[0][:120]}")
            torch.cuda.empty_cache()
    out = {"shape": {"batch": b, "heads": h, "seqlen": s}, "device": runtime.device_info(),
           "torch": torch.__version__, "reps": a.reps, "rows": rows}
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
