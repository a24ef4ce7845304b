"""Throughput of the bit-exact mma models (one core) against float32 numpy.matmul on the same work.

    python benchmarks/bench_mma.py [--tiles 20000] [--small 128,1024] [--repeat 5] [--inputs normal|bits]
                                   [--arch sm_90]

Prints, per modelled variant, mma tiles per second with --tiles tiles per call (best of --repeat), the
time numpy takes for the same multiply-adds as a batched float32 matmul plus C, and their ratio: the
cost of bit-exactness; then the tiles per second with the --small batch sizes per call (the SASS
interpreter's HMMA batches: one tile per warp), where the per-call overhead counts.
The kernel is serial (no numba threads): one core.
"""

from __future__ import annotations

import argparse
import os
import platform

# one core: the kernel is serial; keep numpy's BLAS on one thread too (set before numpy loads it)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from flashsim.numerics.mma import MODELLED, mma  # noqa: E402
from timing import best  # noqa: E402  (benchmarks/timing.py)


def _operands(rng, n: int, k: int, atype: str, ctype: str, inputs: str):
    if inputs == "bits":
        # uniformly random bit patterns: every class (zeros, subnormals, Inf, NaN) appears
        a = rng.integers(0, 1 << 16, (n, 16, k)).astype(np.uint16)
        b = rng.integers(0, 1 << 16, (n, k, 8)).astype(np.uint16)
        hi = 1 << (32 if ctype == "f32" else 16)
        c = rng.integers(0, hi, (n, 16, 8)).astype(np.uint32 if ctype == "f32" else np.uint16)
        return a, b, c
    if atype == "f16":
        enc = np.float16
    else:
        import ml_dtypes

        enc = ml_dtypes.bfloat16
    a = rng.standard_normal((n, 16, k)).astype(enc).view(np.uint16)
    b = rng.standard_normal((n, k, 8)).astype(enc).view(np.uint16)
    cf = np.float32 if ctype == "f32" else np.float16
    c = rng.standard_normal((n, 16, 8)).astype(cf).view(np.uint32 if ctype == "f32" else np.uint16)
    return a, b, c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=20_000, help="tiles per call (default 20000)")
    ap.add_argument("--small", default="128,1024",
                    help="small batch sizes (tiles per call, comma-separated) also timed; '' for none "
                         "(default 128,1024)")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per variant; the best counts (default 5)")
    ap.add_argument("--inputs", choices=("normal", "bits"), default="normal",
                    help="normal: N(0,1) values; bits: uniformly random bit patterns (default normal)")
    ap.add_argument("--arch", default="sm_90", help="model to time (default sm_90)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    small = [int(x) for x in args.small.split(",") if x.strip()]
    rng = np.random.default_rng(args.seed)
    print(f"# {platform.processor() or platform.machine()}, numpy {np.__version__}, tiles={args.tiles}, "
          f"repeat={args.repeat}, inputs={args.inputs}, arch={args.arch}")
    print(f"{'variant':<28}{'mma/s':>12}{'s/call':>10}{'numpy f32 s':>13}{'cost of bit-exactness':>24}"
          + "".join(f"{f'mma/s @{n}':>16}" for n in small))
    for k, atype, ctype in sorted(MODELLED, key=lambda v: (-v[0], v[1], v[2])):
        a, b, c = _operands(rng, args.tiles, k, atype, ctype, args.inputs)
        mma(a[:1], b[:1], c[:1], k=k, atype=atype, ctype=ctype, arch=args.arch)  # compile / load the cache
        t_exact = best(lambda: mma(a, b, c, k=k, atype=atype, ctype=ctype, arch=args.arch), args.repeat)
        # the same multiply-adds in float32: batched (16 x k) @ (k x 8) + C
        af = rng.standard_normal((args.tiles, 16, k), dtype=np.float32)
        bf = rng.standard_normal((args.tiles, k, 8), dtype=np.float32)
        cf = rng.standard_normal((args.tiles, 16, 8), dtype=np.float32)
        t_np = best(lambda: np.add(np.matmul(af, bf), cf), args.repeat)
        rates = []
        for n in small:
            # back-to-back calls of n tiles each (about --tiles tiles in all), best of --repeat
            sa, sb, sc = _operands(rng, n, k, atype, ctype, args.inputs)
            calls = max(1, args.tiles // n)

            def batch():
                for _ in range(calls):
                    mma(sa, sb, sc, k=k, atype=atype, ctype=ctype, arch=args.arch)

            rates.append(n * calls / best(batch, args.repeat))
        name = f"m16n8k{k} {atype}->{ctype}"
        print(f"{name:<28}{args.tiles / t_exact:>12,.0f}{t_exact:>10.3f}{t_np:>13.4f}{t_exact / t_np:>23.1f}x"
              + "".join(f"{r:>16,.0f}" for r in rates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
