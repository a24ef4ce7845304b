"""The warp-specialised wgmma GEMM (gpu/kernels/wgmma_gemm.cu: TMA loads with the 128-byte swizzle, a 4-stage
mbarrier pipeline, one producer warp and two consumer warpgroups) at M = N = K = 1024, bf16 -> f32, in the
interpreter: plain, and with hazard tracking on (``flashsim.cuda.checking(races=True)``: the happens-before race
detector over warps and the async proxy, wgmma register hazards, the mbarrier protocol checks). Deadlock
detection is part of every run (it costs nothing until no lane can run).

    python benchmarks/bench_hopper_gemm.py [--repeat 3] [--problem gg_1024]

Prints per mode the best and worst wall time of --repeat launches, warp-instructions per second (of the
best), the ratio to the plain run's best, and whether C's sha256 equals the H100's (traces/hopper).
"""

from __future__ import annotations

import argparse
import os
import platform
import time


MODES = {"plain": None, "hazards": dict(races=True), "hazards + timeline": dict(races=True, timeline=True)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--problem", default="gg_1024")
    a = ap.parse_args(argv)
    import numpy as np

    from flashsim.gpu import hopper_interp as H
    from flashsim.gpu import validate_hopper_kernels as V

    b = V.build("wgmma_gemm", 0, GG_CONSUMERS=2, GG_STAGES=4)
    want = H.gpu_digests(b.key, a.problem)
    H.run(b, "gg_one", races=True)  # warm up: disassembly, numba
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; numpy {np.__version__}")
    print(f"{b.key} on {a.problem} {V.HM.PROBLEMS[a.problem].dims}; best / worst of {a.repeat}")
    print("mode               | best s | worst s | warp instr | M warp instr/s | / plain | H100 bits | findings")
    base = None
    for name, kw in MODES.items():
        times, o = [], None
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            o = H.run(b, a.problem, races=bool(kw and kw.get("races")), timeline=bool(kw and kw.get("timeline")))
            times.append(time.perf_counter() - t0)
        best = min(times)
        base = base or best
        finds = (o.report.race_count + len(o.report.protocol)) if kw else "-"
        print(f"{name:18s} | {best:6.2f} | {max(times):7.2f} | {o.warp_instructions:10d} | "
              f"{o.warp_instructions / best / 1e6:14.3f} | {best / base:7.2f} | {str(o.digests == want):9s} | "
              f"{finds}{'' if o.error is None else ' ' + type(o.error).__name__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
