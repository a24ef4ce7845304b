"""The SASS interpreter on fa2 (hdim 128, bf16, batch 1, 1 head) from its cubin, against the fa2 twin on
the same problem in the same run.

    python benchmarks/bench_interp.py [--seqlens 1024,4096] [--repeat 1]

Prints, per seqlen: interpreter wall time (best of --repeat), warp-instructions executed and per second,
scheduling steps, the twin's wall time and the ratio. Compilation (NVRTC, nvdisasm) and numba's JIT
are warmed up first and reported apart.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import ml_dtypes
import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlens", default="1024,4096")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args(argv)
    from flashsim.kernels import run_twin
    from flashsim.gpu.fa_kernels import prepare

    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    small = [rng.standard_normal((1, 128, 1, 128)).astype(ml_dtypes.bfloat16) for _ in range(3)]
    prepare("fa2", *small, backend="interp").result()
    run_twin("fa2", *small)
    print(f"warm-up (NVRTC/nvdisasm or cache, numba JIT): {time.perf_counter() - t0:.1f} s")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; numpy {np.__version__}")
    print("seqlen | interpreter s | warp-instr | warp-instr/s | steps | twin s | interp/twin | identical")
    for s in (int(x) for x in a.seqlens.split(",")):
        q, k, v = (rng.standard_normal((1, s, 1, 128)).astype(ml_dtypes.bfloat16) for _ in range(3))
        best = None
        for _ in range(a.repeat):
            p = prepare("fa2", q, k, v, backend="interp")
            t = time.perf_counter()
            stats = p.func(p.grid, (p.threads,), p.params, shared_mem=p.smem)
            dt = time.perf_counter() - t
            out, lse = p.fetch()
            best = dt if best is None else min(best, dt)
        tt = None
        for _ in range(a.repeat):
            t = time.perf_counter()
            t_out, t_lse = run_twin("fa2", q, k, v)
            d = time.perf_counter() - t
            tt = d if tt is None else min(tt, d)
        same = np.array_equal(out.view(np.uint16), t_out.view(np.uint16)) and np.array_equal(lse.view(np.uint32), t_lse.view(np.uint32))
        wi = stats["warp_instructions"]
        print(f"{s:6d} | {best:13.2f} | {wi:10d} | {wi / best:12.0f} | {stats['steps']:5d} | {tt:6.2f} | "
              f"{best / tt:11.2f} | {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
