"""Speed and memory of the fa2 twin (the CPU simulator), bit-exact as it always is.

    python benchmarks/bench_fa_sim.py speed  [--seqlens 1024 4096] [--threads N]
    python benchmarks/bench_fa_sim.py memory [--batch 4 --heads 16 --seqlen 4096]
    python benchmarks/bench_fa_sim.py features [--seqlen 4096] [--dropout 0.1] [--threads N] [--repeat 2]

speed: batch 1, 1 head, headdim 128, bf16, no mask; wall time of ``flashsim.kernels.fa2.run`` next to a
float32 numpy attention of the same shape (softmax(q k^T scale) v with numpy matmuls) in the same run.
memory: the same kernel on a large grid, streamed in CTA batches; reports wall time and the peak
resident set size of the process (``ru_maxrss``), inputs and outputs included.
features: batch 1, 1 head, bf16, no mask: the twin at head dim 256 with dropout (64 x 64 tiles, fa2.cu's
kExt build) against head dim 128 with and without dropout (128 x 32), in one run; best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flashsim.kernels import fa2  # noqa: E402
from flashsim.kernels.common import default_threads  # noqa: E402


def numpy_attention(q, k, v, scale):
    q32, k32, v32 = (x.astype(np.float32)[0, :, 0] for x in (q, k, v))
    s = (q32 @ k32.T) * np.float32(scale)
    s -= s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=1, keepdims=True)) @ v32


def speed(a):
    rng = np.random.default_rng(0)
    warm = [rng.standard_normal((1, 256, 1, 128)).astype(ml_dtypes.bfloat16) for _ in range(3)]
    fa2.run(*warm, threads=a.threads)  # numba compilation and table loading
    for s in a.seqlens:
        q, k, v = (rng.standard_normal((1, s, 1, 128)).astype(ml_dtypes.bfloat16) for _ in range(3))
        t0 = time.perf_counter()
        fa2.run(q, k, v, threads=a.threads)
        t_sim = time.perf_counter() - t0
        t0 = time.perf_counter()
        numpy_attention(q, k, v, 128 ** -0.5)
        t_np = time.perf_counter() - t0
        print(f"seqlen {s}: fa2 twin {t_sim:.2f} s, numpy float32 attention {t_np:.3f} s, ratio {t_sim / t_np:.0f}x "
              f"({a.threads or default_threads()} threads)", flush=True)


def memory(a):
    rng = np.random.default_rng(0)
    shape = (a.batch, a.seqlen, a.heads, 128)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32).astype(ml_dtypes.bfloat16) for _ in range(3))
    done = [0]

    def progress(n, total):
        if n * 10 // total != done[0] * 10 // total:
            print(f"  {n}/{total} CTAs, {time.perf_counter() - t0:.0f} s, peak RSS "
                  f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB", flush=True)
        done[0] = n

    t0 = time.perf_counter()
    fa2.run(q, k, v, threads=a.threads, progress=progress)
    t = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    inputs = 3 * q.nbytes / 2**30
    print(f"batch {a.batch}, heads {a.heads}, seqlen {a.seqlen}, headdim 128, bf16: {t:.0f} s, peak RSS {peak:.2f} GiB "
          f"(inputs {inputs:.2f} GiB, output {q.nbytes / 2**30:.2f} GiB)")


def features(a):
    rng = np.random.default_rng(0)
    warm = [rng.standard_normal((1, 128, 1, 256)).astype(ml_dtypes.bfloat16) for _ in range(3)]
    fa2.run(*warm, threads=a.threads, dropout_p=a.dropout, rng_state=(1, 0))  # numba compilation, tables
    times = {}
    for d, p in ((128, 0.0), (128, a.dropout), (256, a.dropout)):
        q, k, v = (rng.standard_normal((1, a.seqlen, 1, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
        kw = dict(dropout_p=p, rng_state=(1, 0)) if p else {}
        best = float("inf")
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            fa2.run(q, k, v, threads=a.threads, **kw)
            best = min(best, time.perf_counter() - t0)
        times[(d, p)] = best
        print(f"headdim {d}, dropout {p}: {best:.2f} s", flush=True)
    base = times[(128, a.dropout)]
    print(f"seqlen {a.seqlen}, bf16, {a.threads or default_threads()} threads: headdim 256 with dropout "
          f"{times[(256, a.dropout)]:.2f} s = {times[(256, a.dropout)] / base:.2f}x headdim 128 with dropout "
          f"({base:.2f} s); dropout costs {base / times[(128, 0.0)]:.2f}x at headdim 128")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("speed")
    sp.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096])
    sp.add_argument("--threads", type=int, default=None)
    mp = sub.add_parser("memory")
    mp.add_argument("--batch", type=int, default=4)
    mp.add_argument("--heads", type=int, default=16)
    mp.add_argument("--seqlen", type=int, default=4096)
    mp.add_argument("--threads", type=int, default=None)
    fp = sub.add_parser("features")
    fp.add_argument("--seqlen", type=int, default=4096)
    fp.add_argument("--dropout", type=float, default=0.1)
    fp.add_argument("--threads", type=int, default=None)
    fp.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args(argv)
    {"speed": speed, "memory": memory, "features": features}[a.cmd](a)


if __name__ == "__main__":
    main()
