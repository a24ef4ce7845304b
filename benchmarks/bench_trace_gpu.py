"""Cost of per-warp tracing on the GPU: each kernel's untraced build, its traced build recording nothing,
and its traced build recording every warp of one CTA (the first or the last of the grid), in one run.

    python benchmarks/bench_trace_gpu.py [--batch 4 --heads 16 --seqlen 4096 --headdim 128] [--json FILE]

Times are CUDA-event medians of repeated launches on device-resident inputs (bench_fa_gpu.time_events).
The trace size is the words the recorded warps wrote, per warp and per KV step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None):
    import ml_dtypes

    from bench_fa_gpu import shape_parser, time_events
    from flashsim.attention import check_args
    from flashsim.trace import spec
    from flashsim.gpu import runtime, trace_gpu
    from flashsim.gpu.fa_kernels import prepare

    a = shape_parser(__doc__).parse_args(argv)
    b, h, s, d = a.batch, a.heads, a.seqlen, a.headdim
    rng = np.random.default_rng(0)
    base = [rng.standard_normal((b, s, h, d)).astype(np.float32) for _ in range(3)]
    rows = []
    for kernel, dtype in (("fa2", "bfloat16"), ("kernel1", "float16"), ("v5", "float16"), ("v6", "float16")):
        dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
        q, k, v = (x.astype(dt) for x in base)
        args = check_args(q, k, v)
        _, steps, n_ctas = spec.instance(kernel, args)
        plain = prepare(kernel, q, k, v)
        row = {"kernel": kernel, "dtype": dtype, "ctas": n_ctas, "kv_steps": steps,
               "untraced_s": time_events(plain.launch, a.reps)}
        del plain
        for which, cta in (("first", 0), ("last", n_ctas - 1)):
            armed = trace_gpu.arm(kernel, q, k, v, ctas=[cta])
            try:
                if which == "first":
                    armed.disarm()  # the traced build with nothing selected
                    row["traced_build_idle_s"] = time_events(armed.launch, a.reps)
                    armed = trace_gpu.arm(kernel, q, k, v, ctas=[cta])
                row[f"traced_{which}_cta_s"] = time_events(armed.launch, a.reps)
                events, used = armed.events()
            finally:
                armed.disarm()
            words = max(used.values())
            row[f"slowdown_{which}_cta"] = row[f"traced_{which}_cta_s"] / row["untraced_s"]
            row["bytes_per_warp"] = 4 * words
            row["bytes_per_warp_per_kv_step"] = 4 * words / steps
            row["events_per_warp"] = len(events) // len(used)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"device": runtime.device_info(), "shape": {"batch": b, "heads": h, "seqlen": s, "headdim": d},
           "rows": rows}
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
