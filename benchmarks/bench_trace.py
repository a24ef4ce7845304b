"""Write and read speed of the trace container (flashsim.trace): a realistic trace of --size-mb of raw payload.

    python benchmarks/bench_trace.py [--size-mb 1024] [--ctas 132] [--warps 4] [--dir DIR] [--verify]

Builds a trace in a temporary directory (under --dir) the way a traced FlashAttention run produces one: in
steps, each step adding one event to every (cta, warp); an event has 4..168 registers per lane (uniform) and
a quarter of the events carry 32..128 shared-memory accesses. The register bits are attention-like values,
drawn from a pool made of 1024-word blocks of: f32 scores N(0, 2), f32 probabilities exp(N(-2, 1)), f32 output
accumulators N(0, 0.5), f32 row statistics, f16x2 and bf16x2 packed pairs, and f16 values zero-extended to
32 bits (what the v5 kernel records). Each event takes a slice of the pool at a random offset.

Prints progress, then one JSON line: write MB/s of raw payload (bytes of registers and shared-memory records
accepted, divided by the time from the first add_event to the end of close(), fsync included), the file size,
the compression ratio, and the time to open the trace and read all events of one warp, both with the file's
pages evicted from the page cache (posix_fadvise DONTNEED, where available) and warm. The targets are
>= 100 MB/s writing on two cores and < 1 s for open + one warp of a 1 GB trace.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from flashsim.trace import SMEM_DTYPE, TraceWriter, open_trace  # noqa: E402

TAGS = ["empty", "init_ml", "load_q", "load_k", "load_v", "load_kv", "mma_qk", "store_s", "mask", "softmax",
        "mma_pv", "store_o", "update_o", "next_ml", "normalize"]


def attention_pool(words: int, rng: np.random.Generator) -> np.ndarray:
    """``words`` uint32 register values: 1024-word blocks of attention-like bit patterns in random order."""
    block = 1024
    nblocks = words // block

    def f32(x):
        return x.astype(np.float32).view(np.uint32)

    def pairs(h):   # two 16-bit patterns per register, lower column in the low half
        return (h[0::2].astype(np.uint32) | (h[1::2].astype(np.uint32) << 16))

    def bf16(x):
        b = x.astype(np.float32).view(np.uint32)
        return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)

    makers = [
        (0.25, lambda n: f32(rng.normal(0, 2, n))),                        # scores
        (0.20, lambda n: f32(np.exp(rng.normal(-2, 1, n)))),               # probabilities
        (0.25, lambda n: f32(rng.normal(0, 0.5, n))),                      # output accumulators
        (0.05, lambda n: f32(np.repeat(rng.normal(3, 1, n // 8), 8))),     # row max / sum, repeated per quad
        (0.10, lambda n: pairs(rng.normal(0, 1, 2 * n).astype(np.float16).view(np.uint16))),   # f16x2
        (0.05, lambda n: pairs(bf16(rng.normal(0, 1, 2 * n)))),                                 # bf16x2
        (0.10, lambda n: rng.normal(0, 1, n).astype(np.float16).view(np.uint16).astype(np.uint32)),  # f16
    ]
    p = np.array([w for w, _ in makers])
    kinds = rng.choice(len(makers), nblocks, p=p / p.sum())
    pool = np.empty(nblocks * block, np.uint32)
    for k, (_, make) in enumerate(makers):
        where = np.flatnonzero(kinds == k)
        if len(where):
            pool.reshape(nblocks, block)[where] = make(len(where) * block).reshape(len(where), block)
    return pool


def smem_pool(n: int, rng: np.random.Generator) -> np.ndarray:
    s = np.zeros(n, SMEM_DTYPE)
    s["lane"] = np.arange(n) % 32
    s["addr"] = (rng.integers(0, 48 * 1024 // 16, n) * 16).astype(np.uint32)
    s["nbytes"] = 16
    s["store"] = rng.random(n) < 0.3
    s["wavefront"] = rng.integers(0, 8, n)
    return s


def evict(path: Path) -> bool:
    """Drop the file's pages from the page cache (clean pages only; harmless), so the read is from disk."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def read_one_warp(path: Path, cta: int, warp: int) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    with open_trace(path) as r:
        n = nbytes = 0
        for e in r.events(cta=cta, warp=warp):
            n += 1
            nbytes += e.regs.nbytes + (0 if e.smem is None else e.smem.nbytes)
        chunks = r.chunks_read
    return time.perf_counter() - t0, n, chunks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1024, help="raw payload to write, MB (default 1024)")
    ap.add_argument("--ctas", type=int, default=132, help="CTAs (default 132, one wave on an H100)")
    ap.add_argument("--warps", type=int, default=4, help="warps per CTA (default 4)")
    ap.add_argument("--dir", type=Path, default=None, help="where to make the temporary directory")
    ap.add_argument("--threads", type=int, default=None, help="compression threads (default: the writer's)")
    ap.add_argument("--level", type=int, default=1, help="zlib level (default 1)")
    ap.add_argument("--compress", default="zlib", choices=["zlib", "none"])
    ap.add_argument("--chunk-kb", type=int, default=4096, help="chunk_bytes in KiB (default 4096)")
    ap.add_argument("--verify", action="store_true", help="also time verify() (reads the whole file)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    target = int(args.size_mb * 1e6)
    print(f"trace benchmark: {target / 1e6:,.0f} MB of raw payload, {args.ctas} CTAs x {args.warps} warps; "
          f"{os.cpu_count()} cores, python {platform.python_version()}, numpy {np.__version__}", flush=True)
    t0 = time.perf_counter()
    pool = attention_pool(8 << 20, rng)
    spool = smem_pool(1 << 16, rng)
    print(f"  register pool built in {time.perf_counter() - t0:.1f} s", flush=True)

    # per-event choices drawn in advance, so the timed loop is the writer plus slicing
    batch = 1 << 11
    keys = [(c, w) for c in range(args.ctas) for w in range(args.warps)]
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench_trace_") as tmp:
        path = Path(tmp) / "bench.fstrace"
        meta = {"gpu": "synthetic", "kernel": "bench", "seed": args.seed, "size_mb": args.size_mb}
        writer = TraceWriter(path, meta, TAGS, chunk_bytes=args.chunk_kb << 10, compress=args.compress,
                             level=args.level, threads=args.threads)
        t_write = 0.0
        step = 0
        next_report = 0.1
        maxrss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        while writer.bytes_in < target:
            nregs = rng.integers(4, 169, batch)
            offs = rng.integers(0, len(pool) - 32 * 168, batch)
            has_smem = rng.random(batch) < 0.25
            nsm = rng.integers(32, 129, batch)
            soffs = rng.integers(0, len(spool) - 128, batch)
            tags = rng.integers(0, len(TAGS), batch)
            i = 0
            t = time.perf_counter()
            while i + len(keys) <= batch and writer.bytes_in < target:
                tag = TAGS[tags[i]]
                for cta, warp in keys:
                    k, o = int(nregs[i]), int(offs[i])
                    sm = spool[soffs[i]:soffs[i] + nsm[i]] if has_smem[i] else None
                    writer.add_event(cta, warp, step, tag, pool[o:o + 32 * k].reshape(32, k), sm)
                    i += 1
                step += 1
            t_write += time.perf_counter() - t
            if writer.bytes_in >= next_report * target:
                print(f"  {writer.bytes_in / 1e6:8,.0f} MB written, {writer.bytes_in / 1e6 / t_write:6.1f} MB/s",
                      flush=True)
                while writer.bytes_in >= next_report * target:
                    next_report += 0.1
        t = time.perf_counter()
        writer.close()
        t_close = time.perf_counter() - t
        t_write += t_close
        size = path.stat().st_size
        rss_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - maxrss0) / 1024
        print(f"  closed in {t_close:.2f} s: {size / 1e6:,.0f} MB on disk", flush=True)

        cta, warp = keys[len(keys) // 2]
        evicted = evict(path)
        t_cold, n_events, chunks = read_one_warp(path, cta, warp)
        t_warm = min(read_one_warp(path, cta, warp)[0] for _ in range(3))
        with open_trace(path) as r:
            t = time.perf_counter()
            n_tag = r.count(tags=["softmax", "mma_pv"])
            t_count = time.perf_counter() - t
            total_events, n_chunks = r.n_events, r.n_chunks
            t_verify = None
            if args.verify:
                t = time.perf_counter()
                r.verify()
                t_verify = time.perf_counter() - t
        result = {
            "bench": "trace",
            "raw_payload_mb": round(writer.bytes_in / 1e6, 1),
            "events": total_events,
            "keys": len(keys),
            "chunks": n_chunks,
            "write_s": round(t_write, 2),
            "write_mb_s": round(writer.bytes_in / 1e6 / t_write, 1),
            "file_mb": round(size / 1e6, 1),
            "compression_ratio": round(writer.bytes_in / size, 3),
            "writer_peak_rss_growth_mb": round(rss_mb, 1),
            "read_one_warp": {"cta": cta, "warp": warp, "events": n_events, "chunks_read": chunks,
                              "cold_s": round(t_cold, 4), "page_cache_evicted": evicted, "warm_s": round(t_warm, 4)},
            "count_by_tag_s": round(t_count, 5),
            "count_by_tag": n_tag,
            "verify_s": None if t_verify is None else round(t_verify, 2),
            "settings": {"compress": args.compress, "level": args.level, "chunk_kb": args.chunk_kb,
                         "threads": args.threads, "cores": os.cpu_count()},
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
