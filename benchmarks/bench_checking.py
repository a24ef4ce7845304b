"""What the interpreter's diagnostics cost: fa2 (hdim 128, bf16, batch 1, 1 head) from its cubin, plain and
under ``flashsim.cuda.checking`` with banks, races, initcheck, and all three.

    python benchmarks/bench_checking.py [--seqlen 1024] [--repeat 3]

Prints, per mode: the best and worst wall time of --repeat launches and the ratio of the best to the plain
run's best; and checks that each mode's output is bit-identical to the plain run's. Compilation (NVRTC,
nvdisasm) and numba's JIT are warmed up first.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import ml_dtypes
import numpy as np

MODES = {"plain": None, "banks": dict(banks=True), "races": dict(banks=False, races=True),
         "initcheck": dict(banks=False, initcheck=True), "all": dict(banks=True, races=True, initcheck=True)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    import flashsim.cuda as fc
    from flashsim.gpu.fa_kernels import prepare

    rng = np.random.default_rng(0)
    small = [rng.standard_normal((1, 128, 1, 128)).astype(ml_dtypes.bfloat16) for _ in range(3)]
    with fc.checking(banks=True, races=True, initcheck=True):
        prepare("fa2", *small, backend="interp").result()
    q, k, v = (rng.standard_normal((1, a.seqlen, 1, 128)).astype(ml_dtypes.bfloat16) for _ in range(3))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; numpy {np.__version__}")
    print(f"fa2 seqlen {a.seqlen}, hdim 128, bf16; best / worst of {a.repeat}")
    print("mode      | best s | worst s | best / plain | output identical | findings")
    base = ref = None
    for mode, kw in MODES.items():
        times = []
        for _ in range(a.repeat):
            p = prepare("fa2", q, k, v, backend="interp")
            t = time.perf_counter()
            if kw is None:
                p.launch()
                rep = None
            else:
                with fc.checking(**kw) as rep:
                    p.launch()
            times.append(time.perf_counter() - t)
            out, lse = p.fetch()
        if ref is None:
            ref, base = (out, lse), min(times)
        same = np.array_equal(out.view(np.uint16), ref[0].view(np.uint16)) and np.array_equal(
            lse.view(np.uint32), ref[1].view(np.uint32))
        found = "" if rep is None else (f"{rep.race_count} races, {rep.uninit_count} uninitialised reads, "
                                        f"{sum(t['conflicts'] for t in rep.bank_totals().values())} conflicts")
        print(f"{mode:<9} | {min(times):6.2f} | {max(times):7.2f} | {min(times) / base:12.2f} | {same!s:16} | {found}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
