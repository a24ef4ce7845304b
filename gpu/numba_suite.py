"""The numba-cuda suite (gpu/numba_kernels.py) through flashsim.numba on the CPU and on the GPU, bit for bit.

The cubins are built where flashsim.numba builds them (cc 9.0, NVVM, ptxas 13.0, no GPU) and kept with the
record (``numba_suite.npz``): the GPU loads those very bytes (sha256 checked) and launches them with numba's
argument ABI as flashsim.numba packs it; where numba-cuda is installed on the GPU machine, numba's own JIT
also runs each case (its outputs recorded beside). The PTX is also loaded as PTX (the driver JIT-compiles it)
and run: its outputs must be the cubin's. The CPU replay (:func:`replay_case`) runs the recorded cubin in the
interpreter and compares every output bit with the GPU's.

``python -m flashsim.gpu.numba_suite --build DIR`` (no GPU: compiles and writes the cubins);
``python -m flashsim.gpu.numba_suite --cubins FILE --out DIR`` (on the GPU: records).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["CASES", "NCase", "build_all", "inputs", "replay_case", "TRACE"]

TRACE = Path(__file__).resolve().parent.parent / "traces" / "numba"


@dataclass(frozen=True)
class NCase:
    name: str
    kernel: str
    grid: Any
    block: Any
    arrays: dict  # name -> (shape, dtype, init): init 'normal', 'ints:lo:hi', 'zeros'
    args: tuple  # ("a", name) or a numpy scalar
    outputs: tuple
    shared: int = 0

    def kernel_fn(self):
        from flashsim.gpu import numba_kernels

        return getattr(numba_kernels, self.kernel)


CASES = (
    NCase("axpy", "axpy", 4, 256, {"x": ((1000,), "float32", "normal"), "y": ((1000,), "float32", "normal"),
                                  "out": ((1000,), "float32", "zeros")},
          (np.float32(2.5), ("a", "x"), ("a", "y"), ("a", "out")), ("out",)),
    NCase("block_sum", "block_sum", 8, 256, {"x": ((2000,), "float32", "normal"), "out": ((1,), "float32", "zeros")},
          (("a", "x"), ("a", "out")), ("out",)),
    NCase("histogram", "histogram", 20, 256, {"x": ((5000,), "int32", "ints:0:100000"),
                                             "bins": ((13,), "int32", "zeros")},
          (("a", "x"), ("a", "bins")), ("bins",)),
    NCase("warp_reduce", "warp_reduce", 4, 256, {"x": ((1000,), "float32", "normal"),
                                                "out": ((64,), "float32", "zeros")},
          (("a", "x"), ("a", "out")), ("out",)),
    NCase("matmul_tiled", "matmul_tiled", (2, 3), (16, 16), {"a": ((40, 50), "float32", "normal"),
                                                          "b": ((50, 30), "float32", "normal"),
                                                          "c": ((40, 30), "float32", "zeros")},
          (("a", "a"), ("a", "b"), ("a", "c")), ("c",)),
    NCase("scale_rows_dynamic", "scale_rows_dynamic", 3, 64, {"x": ((3, 64), "float32", "normal"),
                                                             "out": ((3, 64), "float32", "zeros")},
          (("a", "x"), 3, ("a", "out")), ("out",), shared=256),
)


def case(name: str) -> NCase:
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"no numba suite case {name!r}")


def inputs(c: NCase, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, len(c.name)])
    out = {}
    for name, (shape, dtype, init) in c.arrays.items():
        if init == "zeros":
            out[name] = np.zeros(shape, dtype)
        elif init.startswith("ints"):
            _, lo, hi = init.split(":")
            out[name] = rng.integers(int(lo), int(hi), shape).astype(dtype)
        else:
            out[name] = rng.standard_normal(shape).astype(dtype)
    return out


def _types(c: NCase, arrays):
    from flashsim.numba import _numba_type

    return [_numba_type(arrays[a[1]] if isinstance(a, tuple) else a, "arg") for a in c.args]


def build_all(seed: int = 0) -> dict[str, Any]:
    """{case: flashsim.numba.Compiled} for every case (no GPU needed)."""
    from flashsim.numba import compile_kernel

    out = {}
    for c in CASES:
        out[c.name] = compile_kernel(c.kernel_fn(), _types(c, inputs(c, seed)))
    return out


def run_sim(c: NCase, arrays: dict, cubin: bytes | None = None) -> dict[str, np.ndarray]:
    """The case in the interpreter (flashsim.numba; ``cubin``: these bytes instead of today's build)."""
    import flashsim.numba as fnb

    arrays = {k: v.copy() for k, v in arrays.items()}
    args = [arrays[a[1]] if isinstance(a, tuple) else a for a in c.args]
    if cubin is None:
        fnb.kernel(c.kernel_fn())[c.grid, c.block, 0, c.shared](*args)
    else:
        _launch_cubin_sim(c, cubin, args)
    return {k: arrays[k] for k in c.outputs}


def _flat(c: NCase, args, ptr_of):
    from flashsim.numba import _numba_type, pack

    return pack(args, [_numba_type(a, f"argument {i}") for i, a in enumerate(args)], ptr_of)


def _launch_cubin_sim(c: NCase, cubin: bytes, args):
    """``cubin`` in the interpreter on ``args`` (arrays updated in place); returns the kernel that ran."""
    import flashsim.cuda as fc

    mod = fc.RawModule(cubin=cubin)
    fn = mod.get_function(mod.kernels[0])
    dev = {i: fc.asarray(a) for i, a in enumerate(args) if isinstance(a, np.ndarray)}
    fn(c.grid, c.block, tuple(_flat(c, args, lambda i: dev[i].data.ptr)), shared_mem=c.shared)
    for i, d in dev.items():
        args[i][...] = d.get()
    return fn


def _launch_gpu(c: NCase, fn, args, shared: int) -> None:
    import cupy

    dev = {i: cupy.asarray(a) for i, a in enumerate(args) if isinstance(a, np.ndarray)}
    grid = c.grid if isinstance(c.grid, tuple) else (c.grid,)
    block = c.block if isinstance(c.block, tuple) else (c.block,)
    fn(grid, block, tuple(_flat(c, args, lambda i: int(dev[i].data.ptr))), shared_mem=shared)
    cupy.cuda.Device().synchronize()
    for i, d in dev.items():
        args[i][...] = cupy.asnumpy(d)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8).ravel()


def replay_case(c: NCase, rec: dict) -> list[str]:
    arrays = {k: rec[f"in/{k}"] for k in c.arrays}
    cubin = bytes(rec["cubin"])
    got = run_sim(c, arrays, cubin=cubin)
    msgs = []
    for k in c.outputs:
        g, w = bits(got[k]), bits(rec[f"out/{k}"])
        bad = np.nonzero(g != w)[0]
        if bad.size:
            msgs.append(f"{c.name}: output {k!r}: {bad.size} of {w.size} bytes differ from the GPU's")
    return msgs


def load_record(path: str | Path | None = None) -> dict[str, dict]:
    """{case name: {key: array}} of a recorded ``numba_suite.npz``."""
    from flashsim.gpu.records import by_case

    return by_case(Path(path) if path is not None else TRACE / "numba_suite.npz")


def write_build(out_dir: Path, seed: int) -> Path:
    """The cubins and PTX of every case, built here, for the GPU run to load."""
    from flashsim.sass.toolchain import ptxas_version

    out_dir.mkdir(parents=True, exist_ok=True)
    comps = build_all(seed)
    arrays = {}
    for name, comp in comps.items():
        arrays[f"{name}::cubin"] = np.frombuffer(comp.cubin, np.uint8)
        arrays[f"{name}::ptx"] = np.frombuffer(comp.ptx.encode(), np.uint8)
        arrays[f"{name}::kernel"] = np.frombuffer(comp.name.encode(), np.uint8)
    import numba

    meta = {"numba": numba.__version__, "ptxas": ptxas_version(), "seed": seed}
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    path = out_dir / "numba_cubins.npz"
    np.savez_compressed(path, **arrays)
    return path


def record(cubins: Path, out_dir: Path, seed: int) -> dict:
    from flashsim.gpu import runtime

    cupy = runtime.require_gpu()
    data = np.load(cubins)
    meta = json.loads(bytes(data["__meta__"]).decode())
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"device": runtime.device_info(), "built_with": meta, "seed": seed, "cases": {}}
    try:
        import numba
        from numba import cuda as ncuda
        report["numba_on_gpu_machine"] = numba.__version__
    except Exception as exc:  # numba-cuda absent there: its own JIT is not compared
        ncuda = None
        report["numba_on_gpu_machine"] = f"unavailable: {exc}"
    arrays = {}
    for c in CASES:
        entry: dict[str, Any] = {}
        try:
            cubin = bytes(data[f"{c.name}::cubin"])
            ptx = bytes(data[f"{c.name}::ptx"]).decode()
            kname = bytes(data[f"{c.name}::kernel"]).decode()
            ins = inputs(c, seed)
            args = [ins[a[1]].copy() if isinstance(a, tuple) else a for a in c.args]
            fn = runtime.load_cubin(cubin).get_function(kname)
            _launch_gpu(c, fn, args, c.shared)
            named = {a[1]: args[i] for i, a in enumerate(c.args) if isinstance(a, tuple)}
            entry["cubin_sha256"] = hashlib.sha256(cubin).hexdigest()
            # the PTX as PTX: the driver's JIT
            args2 = [ins[a[1]].copy() if isinstance(a, tuple) else a for a in c.args]
            pmod = cupy.RawModule(code=None, path=_write(out_dir, f"{c.name}.ptx", ptx))
            _launch_gpu(c, pmod.get_function(kname), args2, c.shared)
            named2 = {a[1]: args2[i] for i, a in enumerate(c.args) if isinstance(a, tuple)}
            entry["driver_jit_equal"] = all(np.array_equal(bits(named[k]), bits(named2[k])) for k in c.outputs)
            if ncuda is not None:
                try:
                    args3 = [ncuda.to_device(ins[a[1]].copy()) if isinstance(a, tuple) else a for a in c.args]
                    c.kernel_fn()[c.grid, c.block, 0, c.shared](*args3)
                    ncuda.synchronize()
                    named3 = {a[1]: args3[i].copy_to_host() for i, a in enumerate(c.args) if isinstance(a, tuple)}
                    entry["numba_jit_equal"] = all(np.array_equal(bits(named[k]), bits(named3[k])) for k in c.outputs)
                except Exception as exc:
                    entry["numba_jit_error"] = f"{type(exc).__name__}: {exc}"[:500]
            for k, v in ins.items():
                arrays[f"{c.name}::in/{k}"] = v
            for k in c.outputs:
                arrays[f"{c.name}::out/{k}"] = named[k]
            arrays[f"{c.name}::cubin"] = np.frombuffer(cubin, np.uint8)
        except Exception as exc:
            import traceback

            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()[-2000:]
        report["cases"][c.name] = entry
        print(c.name, json.dumps({k: v for k, v in entry.items() if k != "traceback"})[:300], flush=True)
    np.savez_compressed(out_dir / "numba_suite.npz", **arrays)
    (out_dir / "numba_suite.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def _write(d: Path, name: str, text: str) -> str:
    p = d / name
    p.write_text(text)
    return str(p)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.numba_suite", description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, help="write numba_cubins.npz here (no GPU needed)")
    ap.add_argument("--cubins", type=Path, help="the numba_cubins.npz to run on the GPU")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.build:
        print(write_build(a.build, a.seed))
        return 0
    if not (a.cubins and a.out):
        ap.error("--cubins FILE --out DIR, or --build DIR")
    rep = record(a.cubins, a.out, a.seed)
    bad = [k for k, v in rep["cases"].items() if "error" in v or not v.get("driver_jit_equal")]
    print(f"{len(rep['cases']) - len(bad)} of {len(rep['cases'])} cases recorded, driver JIT of the PTX equal")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
