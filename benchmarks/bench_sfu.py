"""Throughput of the bit-exact MUFU.EX2 model (ex2.approx.ftz.f32) on one core, against numpy.exp2.

    python benchmarks/bench_sfu.py [--n 16777216] [--repeat 7]

Inputs: "softmax" = x*scale - max style values uniform in [-30, 0]; "bits" = uniformly random bit
patterns. numpy.exp2 on the same float32 values is timed in the same run as the reference.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np

from flashsim.numerics import sfu
from timing import best  # noqa: E402  (benchmarks/timing.py)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    inputs = {
        "softmax": rng.uniform(-30, 0, args.n).astype(np.float32).view(np.uint32),
        "bits": rng.integers(0, 1 << 32, args.n, dtype=np.uint64).astype(np.uint32),
    }
    sfu.mufu_ex2(inputs["bits"][:16])  # compile and load the tables outside the timing
    print(f"# {platform.machine()}, numpy {np.__version__}, n={args.n}, repeat={args.repeat} (best)")
    print(f"{'inputs':10} {'ex2.approx.ftz M/s':>20} {'numpy.exp2 f32 M/s':>20} {'ratio':>8}")
    for name, x in inputs.items():
        xf = x.view(np.float32)
        t_model = best(lambda: sfu.mufu_ex2(x), args.repeat)
        with np.errstate(all="ignore"):
            t_np = best(lambda: np.exp2(xf), args.repeat)
        print(f"{name:10} {args.n / t_model / 1e6:20.1f} {args.n / t_np / 1e6:20.1f} {t_model / t_np:8.2f}")


if __name__ == "__main__":
    main()
