"""Speed-up of a simulation spread over a local Dask cluster (flashsim.cluster): the fa2 twin and fa2's cubin
in the SASS interpreter (hdim 128, bf16), on 1, 2, ... worker processes of this machine.

    python benchmarks/bench_distributed.py [--workers 1,2,4,8,16] [--what twin,interp]
        [--batch 4 --heads 16 --seqlen 4096] [--interp-batch B --interp-heads H --interp-seqlen S]
        [--ctas-per-batch 32] [--in-process] [--json FILE]

Each worker count runs in a fresh process of its own (a new local cluster, one thread per worker, and a
client process whose simulated device memory holds only this run's arrays). Timed: the run itself, from
sending the inputs to the last output written, after a warm-up of every worker (numba's JIT, the cubin)
that is reported apart, as is the cluster's start. Reported per run: wall seconds, the speed-up over the
fewest workers measured, the peak resident memory of each worker process and of the client
(``ru_maxrss``), and the sha256 of the outputs, which must agree across every run (bit-identity).
Also: the CPU seconds the client and the workers spent in the run (user + system, from ``getrusage``:
on a machine other work shares, the cost of the run when the wall time is disturbed) and the load
average before and after. ``--in-process`` adds the one-process run (threads over the cores). The interpreted
launch runs in batches of ``--ctas-per-batch`` CTAs (the same batches, hence the same bits, for every
worker count); the twin's batches are the cluster's choice (at most 64 CTAs, about 4 per worker).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _inputs(b: int, h: int, s: int):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((b, s, h, 128), dtype=np.float32).astype(ml_dtypes.bfloat16) for _ in range(3)]


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for x in arrays:
        h.update(np.ascontiguousarray(x).view(np.uint8).tobytes())
    return h.hexdigest()


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _cpu_s() -> float:
    """CPU seconds (user + system, every thread) of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu_all(cl) -> float:
    """CPU seconds of this process and, with a cluster, of its workers."""
    return _cpu_s() + (sum(cl.client.run(_cpu_s).values()) if cl is not None else 0.0)


def warm() -> float:
    """In a worker (or here): numba's JIT and the cubin (cache), on the smallest problems."""
    t0 = time.perf_counter()
    from flashsim.gpu.fa_kernels import prepare
    from flashsim.kernels import run_twin

    small = _inputs(1, 1, 128)
    run_twin("fa2", *small)
    prepare("fa2", *small, backend="interp").result()
    return time.perf_counter() - t0


def one(what: str, workers: int, a) -> dict:
    """One measured run (in this process): ``workers`` 0 is the one-process run."""
    import flashsim.cuda as fc
    from flashsim.cluster import Cluster
    from flashsim.gpu.fa_kernels import prepare
    from flashsim.kernels import run_twin

    if what == "twin":
        b, h, s = a.batch, a.heads, a.seqlen
    else:
        b, h, s = a.interp_batch or a.batch, a.interp_heads or a.heads, a.interp_seqlen or a.seqlen
    q, k, v = _inputs(b, h, s)
    warm_here = warm()
    t0 = time.perf_counter()
    cl = Cluster(workers).start() if workers else None
    started = time.perf_counter() - t0
    out = {"what": what, "workers": workers, "problem": {"batch": b, "heads": h, "seqlen": s, "headdim": 128,
                                                         "dtype": "bfloat16"},
           "cluster_start_s": round(started, 2), "warm_up_s": round(warm_here, 2)}
    try:
        if cl is not None:
            t0 = time.perf_counter()
            cl.client.run(warm)
            out["warm_up_s"] = round(time.perf_counter() - t0, 2)
        ctas = b * h * -(-s // 128)
        out["load_before"] = [round(x, 2) for x in os.getloadavg()]
        cpu0 = _cpu_all(cl)
        if what == "twin":
            out["ctas"] = ctas
            out["ctas_per_batch"] = cl.batch_size(ctas, 64) if cl is not None else 64
            t0 = time.perf_counter()
            o, lse = run_twin("fa2", q, k, v, client=None if cl is None else cl.client)
            out["seconds"] = round(time.perf_counter() - t0, 2)
        else:
            p = prepare("fa2", q, k, v, backend="interp")
            per = a.ctas_per_batch
            out["ctas"], out["ctas_per_batch"] = ctas, per
            t0 = time.perf_counter()
            stats = p.func(p.grid, (p.threads,), p.params, shared_mem=p.smem,
                           exec_options=fc.ExecOptions(ctas_per_batch=per, cluster=cl))
            out["seconds"] = round(time.perf_counter() - t0, 2)
            out["warp_instructions"] = stats["warp_instructions"]
            o, lse = p.fetch()
        # CPU seconds of the client and the workers during the run: with a busy machine the wall time says
        # little, this says what the run cost
        out["cpu_s"] = round(_cpu_all(cl) - cpu0, 2)
        out["load_after"] = [round(x, 2) for x in os.getloadavg()]
        out["sha256"] = _digest(o, lse)
        if cl is not None:
            peaks = cl.client.run(_rss_gib)
            out["worker_peak_rss_gib"] = sorted(round(x, 3) for x in peaks.values())
    finally:
        if cl is not None:
            cl.close()
    out["client_peak_rss_gib"] = round(_rss_gib(), 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated (default: %(default)s)")
    ap.add_argument("--what", default="twin,interp", help="twin, interp or both (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--interp-batch", type=int, default=None, help="the interpreted launch's (default: --batch)")
    ap.add_argument("--interp-heads", type=int, default=None, help="(default: --heads)")
    ap.add_argument("--interp-seqlen", type=int, default=None, help="(default: --seqlen)")
    ap.add_argument("--ctas-per-batch", type=int, default=32, help="the interpreted launch's batches (default: 32)")
    ap.add_argument("--in-process", action="store_true", help="also the one-process run (threads over the cores)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: WHAT:WORKERS in this process
    a = ap.parse_args(argv)
    if a.one is not None:
        what, n = a.one.split(":")
        print(json.dumps(one(what, int(n), a)))
        return 0

    counts = [int(x) for x in a.workers.split(",") if x]
    whats = [w for w in a.what.split(",") if w]
    import distributed
    import numba

    doc = {"date": datetime.date.today().isoformat(), "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
           "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "memory_gib": round(_mem_gib(), 1)},
           "software": {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
                        "dask.distributed": distributed.__version__},
           "runs": []}
    base = list(sys.argv[1:] if argv is None else argv)
    for what in whats:
        first = None
        for n in ([0] if a.in_process else []) + counts:
            cmd = [sys.executable, str(Path(__file__).resolve()), *base, "--one", f"{what}:{n}"]
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if res.returncode != 0:
                print(res.stderr, file=sys.stderr)
                return 1
            r = json.loads(res.stdout.strip().splitlines()[-1])
            if n and first is None:
                first = r
            if n:  # over the run with the fewest workers
                r["speedup"] = round(first["seconds"] / r["seconds"], 2)
            doc["runs"].append(r)
            same = all(x["sha256"] == r["sha256"] for x in doc["runs"] if x["what"] == what)
            rss = r.get("worker_peak_rss_gib")
            print(f"{what:6s} {'in-process' if not n else f'{n:2d} workers':>10s}: {r['seconds']:8.2f} s"
                  + (f", speed-up {r['speedup']:5.2f}x" if n else "")
                  + (f", worker peak RSS {min(rss):.2f}-{max(rss):.2f} GiB" if rss else "")
                  + f", client {r['client_peak_rss_gib']:.2f} GiB, {r['ctas']} CTAs in batches of "
                    f"{r['ctas_per_batch']}, CPU {r['cpu_s']:.1f} s, load {r['load_before'][0]:.1f}, "
                    f"identical: {same}", flush=True)
    if a.json is not None:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_gib() -> float:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (AttributeError, OSError, ValueError):
        return 0.0


if __name__ == "__main__":
    sys.exit(main())
