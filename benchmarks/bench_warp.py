"""Throughput of the warp-level simulator on one core: bank accounting and ldmatrix.x4.

    python benchmarks/bench_warp.py [--n 200000] [--repeat 5]

Prints warp instructions per second (best of --repeat calls, each simulating --n warp instructions in one
batched call) for:
  - bank accounting of 128-bit shared loads at random 16-byte-aligned addresses (flashsim.smem.wavefronts);
  - ldmatrix.sync.aligned.m8n8.x4.shared.b16 at random row addresses (flashsim.warp.ldmatrix: fault
    checks, the gather into fragments and the bank accounting), without and with race detection;
  - the same for .trans. The issue's target is >= 1,000,000 warp instructions/s for the first two.
"""

from __future__ import annotations

import argparse
import os
import platform

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from flashsim.smem import SharedMemory, wavefronts  # noqa: E402
from flashsim.warp import ldmatrix  # noqa: E402
from timing import best  # noqa: E402  (benchmarks/timing.py)

SMEM = 48 * 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="warp instructions per call (default 200000)")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls; the best counts (default 5)")
    args = ap.parse_args(argv)
    n = args.n
    rng = np.random.default_rng(0)
    print(f"flashsim warp benchmarks: {n:,} warp instructions per call, best of {args.repeat}; "
          f"{platform.processor() or platform.machine()}, python {platform.python_version()}, numpy {np.__version__}")
    results = []

    addr128 = rng.integers(0, SMEM // 16, (n, 32)) * 16
    t = best(lambda: wavefronts(addr128, width=16, op="ld"), args.repeat, warmup=True)
    results.append(("bank accounting, ld.shared.v4 (128-bit), random addresses", n / t))

    ctas, warps = 1000, n // 1000
    rows = rng.integers(0, SMEM // 16, (ctas, warps, 32)) * 16
    for races in (False, True):
        for trans in (False, True):
            sm = SharedMemory(ctas, SMEM, warps=warps, races=races)
            sm.data[:] = rng.integers(0, 256, sm.data.shape, dtype=np.uint8)
            t = best(lambda: ldmatrix(sm, rows, num=4, trans=trans, tag="bench"), args.repeat, warmup=True)
            what = f"ldmatrix.x4{'.trans' if trans else ''}, random rows, race detection {'on' if races else 'off'}"
            results.append((what, ctas * warps / t))
            if races:
                break  # one race-detection figure is enough
    width = max(len(w) for w, _ in results)
    for what, rate in results:
        print(f"  {what:<{width}}  {rate:>14,.0f} warp instructions/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
