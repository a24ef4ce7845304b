"""What compiling a Triton kernel for a CPU run costs, next to Triton's own compile.

flashsim.triton compiles through Triton's JIT itself (the same work Triton does for the GPU: front end, MLIR
passes, LLVM, ptxas 12.8); on top of that the interpreter reads the cubin (nvdisasm, ELF, one closure per
instruction). Per kernel of the Triton suite, cold (fresh Triton and flashsim caches, as a first run; a later
run finds the cubin in Triton's disk cache and its disassembly in flashsim's):

    triton_s     Triton's compile for sm_90 (the JIT's warmup with a fresh TRITON_CACHE_DIR)
    flashsim_s   flashsim's preparation of that cubin (flashsim.cuda.RawModule + the kernel's Program)
    run_s        one launch of the case in the interpreter (for scale)

    python benchmarks/bench_triton_compile.py [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

CASES = ("add_f32", "softmax_f16_w8", "layernorm_f16", "matmul_f16_s3", "matmul_tma_persistent_device",
         "attn_pointers_d64_f16_causal", "attn_host_d128_bf16", "attn_device_d64_f16")


def _cpu() -> str:
    flags = ""
    try:
        with open("/proc/cpuinfo") as fh:
            text = fh.read()
        model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
        flags = "avx512f" if " avx512f" in text else "no avx512"
        return f"{model} ({os.cpu_count()} cores, {flags})"
    except OSError:
        return platform.processor() or "?"


def measure(name: str) -> dict:
    import numpy as np

    import flashsim.cuda as fc
    import flashsim.triton as ft
    from flashsim.gpu import triton_suite as S

    from flashsim.sass import toolchain

    c = S.case(name)
    ins = S.inputs(c, 0)
    fn = c.kernel_fn()
    with tempfile.TemporaryDirectory(prefix="bench-triton-cache-") as tmp, \
            tempfile.TemporaryDirectory(prefix="bench-flashsim-cache-") as ftmp:
        saved = os.environ.get("TRITON_CACHE_DIR"), os.environ.get("FLASHSIM_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"], os.environ["FLASHSIM_CACHE_DIR"] = tmp, ftmp
        toolchain._disassemble_cached.cache_clear()  # a cold start: nvdisasm runs, as in a new process
        try:
            fn.device_caches.clear()
            dev = {k: fc.asarray(np.ascontiguousarray(v)) for k, v in ins.items()}
            args, kw = S._call(c, dev, S._sim_desc)
            t0 = time.perf_counter()
            with ft.device():
                ck = fn.run(*args, grid=c.grid, warmup=True, **kw)
            t1 = time.perf_counter()
            mod = fc.RawModule(cubin=bytes(ck.asm["cubin"]))
            mod.get_function(ck.metadata.name)._prog()
            t2 = time.perf_counter()
            S.run_sim(c, ins)
            t3 = time.perf_counter()
        finally:
            for var, old in zip(("TRITON_CACHE_DIR", "FLASHSIM_CACHE_DIR"), saved):
                if old is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = old
            fn.device_caches.clear()
    return {"triton_s": t1 - t0, "flashsim_s": t2 - t1, "run_s": t3 - t2}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import flashsim.triton as ft

    ft.require()
    measure("add_f32")  # imports, NVRTC/nvdisasm start-up and numba's compiled code out of the way
    rows = {}
    for name in CASES:
        runs = [measure(name) for _ in range(a.repeat)]
        rows[name] = {k: [round(min(r[k] for r in runs), 3), round(max(r[k] for r in runs), 3)] for k in runs[0]}
        r = rows[name]
        print(f"{name:32s} triton {r['triton_s'][0]:.2f}-{r['triton_s'][1]:.2f} s   flashsim +{r['flashsim_s'][0]:.2f}-"
              f"{r['flashsim_s'][1]:.2f} s   run {r['run_s'][0]:.2f}-{r['run_s'][1]:.2f} s", flush=True)
    out = {"date": time.strftime("%Y-%m-%d"), "cpu": _cpu(), "python": sys.version.split()[0], "rows": rows}
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
