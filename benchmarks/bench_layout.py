"""Evaluate layouts over all their coordinates with flashsim.layout (numpy, one core), and pycute side by side.

    python benchmarks/bench_layout.py [--repeat 5] [--pycute-coords 50000]

Cases: a plain hierarchical layout and FlashAttention-2's swizzled sQ layout tiled to 4096x4096 (16.8M
coordinates), each evaluated (a) over every coordinate in order (``evaluate(L)``) and (b) at an arbitrary
integer array of 1-D coordinates (``evaluate(L, idx)``, here a random permutation). pycute (CUTLASS's
Python package, ``pip install nvidia-cutlass``) evaluates one coordinate per Python call; it is timed
on a prefix of the coordinates and checked for equal results. Numbers are coordinates per second.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core: numpy's element-wise kernels are single-threaded anyway

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from flashsim.layout import S, Layout, Swizzle, composition, evaluate, tile_to_shape  # noqa: E402
from timing import best  # noqa: E402  (benchmarks/timing.py)


def cases():
    atom = Layout((S(8), S(64)), (S(64), S(1)))
    plain = tile_to_shape(atom, (S(4096), S(4096)))
    swz = tile_to_shape(composition(Swizzle(3, 3, 3), atom), (S(4096), S(4096)))
    return [("plain  " + str(plain), plain), ("swizzled  " + str(swz), swz)]


def pycute_layout(x):
    import pycute
    from pycute.swizzle import ComposedLayout as PyComposed, Swizzle as PySwizzle

    def plain(L):
        def conv(t):
            return tuple(conv(e) for e in t) if isinstance(t, tuple) else int(t)
        return pycute.Layout(conv(L.shape), conv(L.stride))

    if getattr(x, "_composed", False):
        sw = x.layout_a
        return PyComposed(PySwizzle(sw.B, sw.M, sw.S), int(x.offset), plain(x.layout_b))
    return plain(x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pycute-coords", type=int, default=50000, help="coordinates pycute evaluates (it is slow)")
    args = ap.parse_args(argv)
    try:
        import pycute  # noqa: F401
        have_pycute = True
    except ImportError:
        have_pycute = False
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}, "
          f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")
    print(f"{'case':<72} {'coords':>10} {'all (coords/s)':>15} {'idx (coords/s)':>15} {'pycute':>12}")
    rng = np.random.default_rng(0)
    worst = float("inf")
    for name, L in cases():
        n = int(L.size())
        idx = rng.permutation(n)
        full = evaluate(L)
        assert np.array_equal(evaluate(L, idx), full[idx])
        t_all = best(lambda: evaluate(L), args.repeat)
        t_idx = best(lambda: evaluate(L, idx), args.repeat)
        py = "n/a"
        if have_pycute:
            P = pycute_layout(L)
            k = min(args.pycute_coords, n)
            sample = idx[:k].tolist()
            t = time.perf_counter()
            got = [P(i) for i in sample]
            t_py = time.perf_counter() - t
            assert got == full[idx[:k]].tolist(), "pycute disagrees"
            py = f"{k / t_py:,.0f}"
        worst = min(worst, n / t_all, n / t_idx)
        print(f"{name:<72} {n:>10,} {n / t_all:>15,.0f} {n / t_idx:>15,.0f} {py:>12}")
    if not have_pycute:
        print("# pycute not installed: pip install nvidia-cutlass to compare")
    print(f"# slowest flashsim rate: {worst:,.0f} coordinates/s (target >= 10,000,000)")
    return 0 if worst >= 1e7 else 1


if __name__ == "__main__":
    sys.exit(main())
