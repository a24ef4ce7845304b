"""The Triton suite (gpu/triton_kernels.py) as cases run by Triton's JIT on the GPU and by flashsim.triton on
the CPU, bit for bit.

A :class:`Case` names a kernel, its grid, its arrays (drawn from a seed; outputs start as a poison pattern so
that an unwritten element shows), its arguments (arrays, 2-D host TensorDescriptors over them, scalars), its
constexprs and options. On the GPU (``python -m flashsim.gpu.triton_suite --out DIR``), per case:

1. Triton's JIT compiles and runs the call on torch CUDA tensors (the user's path); its outputs are recorded;
2. flashsim.triton compiles the same call for the simulated H100 in a fresh Triton cache: its cubin must be
   the JIT's, byte for byte (same specialisation, same compiler);
3. that cubin's bytes are loaded by cupy (sha256 checked) and launched with flashsim.triton's packing of
   Triton's launch ABI: its outputs must be the JIT's (the ABI is the launcher's).

The record (``triton_suite.npz``: inputs, GPU outputs, cubins, ``.text`` digests; ``triton_suite.json``: the
verdicts and provenance) replays on the CPU (:func:`replay_case`): flashsim.triton compiles the call here,
the ``.text`` of its cubin must equal the GPU's, and every output bit must equal the GPU's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["CASES", "Case", "case", "inputs", "text_digests", "replay_case", "run_sim", "main", "TRACE"]

TRACE = Path(__file__).resolve().parent.parent / "traces" / "triton"
POISON = 0xFF  # outputs start as 0xFF bytes: NaN for floats, -1 for ints


@dataclass(frozen=True)
class Array:
    """One array of a case: shape, numpy dtype name, how it is drawn ('normal', 'normal*S' for a scale,
    'ints:LO:HI', 'poison' for outputs)."""

    shape: tuple
    dtype: str
    init: str = "normal"


@dataclass(frozen=True)
class Desc:
    """A host TensorDescriptor over the 2-D view ``shape`` of array ``name`` with ``block``."""

    name: str
    shape: tuple
    block: tuple


@dataclass(frozen=True)
class Case:
    name: str
    kernel: str
    grid: tuple
    arrays: dict
    args: tuple  # ("a", name) | Desc | python scalar
    kwargs: dict
    outputs: tuple
    scratch: bool = False  # needs triton.set_allocator (device tensor descriptors)
    note: str = ""

    def kernel_fn(self):
        from flashsim.gpu import triton_kernels

        return getattr(triton_kernels, self.kernel)


def _np_dtype(name: str):
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def inputs(c: Case, seed: int) -> dict[str, np.ndarray]:
    """The case's arrays drawn from ``seed`` (outputs as the poison pattern)."""
    rng = np.random.default_rng([seed, len(c.name)])
    out = {}
    for name, a in c.arrays.items():
        dt = _np_dtype(a.dtype)
        if a.init == "poison":
            out[name] = np.full(int(np.prod(a.shape)) * dt.itemsize, POISON, np.uint8).view(dt).reshape(a.shape)
        elif a.init.startswith("ints"):
            _, lo, hi = a.init.split(":")
            out[name] = rng.integers(int(lo), int(hi), a.shape).astype(dt)
        else:
            scale = float(a.init.split("*")[1]) if "*" in a.init else 1.0
            out[name] = (rng.standard_normal(a.shape) * scale).astype(np.float32).astype(dt)
    return out


def _call(c: Case, tensors: dict, make_desc) -> tuple[list, dict]:
    args = []
    for a in c.args:
        if isinstance(a, Desc):
            args.append(make_desc(tensors[a.name], a.shape, a.block))
        elif isinstance(a, tuple) and a and a[0] == "a":
            args.append(tensors[a[1]])
        else:
            args.append(a)
    return args, dict(c.kwargs)


# ------------------------------------------------------------------------------------------------ the cases
def _attn_cases() -> list[Case]:
    out = []
    z, h, n = 1, 2, 256
    for mode in ("pointers", "host", "device"):
        for d in (64, 128):
            for dt in ("float16", "bfloat16"):
                for causal in (False, True):
                    name = f"attn_{mode}_d{d}_{'f16' if dt == 'float16' else 'bf16'}{'_causal' if causal else ''}"
                    arrays = {"q": Array((z, h, n, d), dt), "k": Array((z, h, n, d), dt), "v": Array((z, h, n, d), dt),
                              "o": Array((z, h, n, d), dt, "poison"), "m": Array((z * h, n), "float32", "poison")}
                    bm, bn = 128, 64
                    opts = {"num_warps": 8, "num_stages": 3 if d == 64 else 2}
                    if mode == "pointers":
                        st = (h * n * d, n * d, d)
                        args = (("a", "q"), ("a", "k"), ("a", "v"), 0.125 if d == 64 else 0.088, ("a", "m"), ("a", "o"),
                                *st, *st, *st, *st, h, n)
                        kw = {"HEAD_DIM": d, "BLOCK_M": bm, "BLOCK_N": bn, "CAUSAL": causal, **opts}
                        out.append(Case(name, "attn_fwd_pointers", (n // bm, z * h), arrays, args, kw, ("o", "m")))
                    else:
                        y = z * h * n
                        if mode == "host":
                            ds = (Desc("q", (y, d), (bm, d)), Desc("k", (y, d), (bn, d)), Desc("v", (y, d), (bn, d)),
                                  Desc("o", (y, d), (bm, d)))
                        else:
                            ds = (("a", "q"), ("a", "k"), ("a", "v"), ("a", "o"))
                        args = (0.125 if d == 64 else 0.088, ("a", "m"), z, h, *ds, n)
                        kw = {"HEAD_DIM": d, "BLOCK_M": bm, "BLOCK_N": bn, "CAUSAL": causal,
                              "DEVICE_DESC": mode == "device", **opts}
                        out.append(Case(name, "attn_fwd_descriptors", (n // bm, z * h), arrays, args, kw, ("o", "m"),
                                        scratch=mode == "device"))
    return out


def _matmul_cases() -> list[Case]:
    out = []
    for stages in (2, 3, 4):
        m, n, k = 256, 256, 192
        arrays = {"a": Array((m, k), "float16"), "b": Array((k, n), "float16"), "c": Array((m, n), "float16", "poison")}
        args = (("a", "a"), ("a", "b"), ("a", "c"), m, n, k, k, 1, n, 1, n, 1)
        kw = {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "ACTIVATION": "", "num_warps": 4, "num_stages": stages}
        out.append(Case(f"matmul_f16_s{stages}", "matmul_kernel", (4,), arrays, args, kw, ("c",)))
    m, n, k = 200, 184, 136  # ragged: masked K tail, wrapped rows and columns, masked stores
    arrays = {"a": Array((m, k), "float16"), "b": Array((k, n), "float16"), "c": Array((m, n), "float16", "poison")}
    kw = {"BM": 64, "BN": 64, "BK": 32, "GROUP_M": 4, "ACTIVATION": "leaky_relu", "num_warps": 4, "num_stages": 3}
    out.append(Case("matmul_f16_ragged_leaky", "matmul_kernel", (4 * 3,), arrays,
                    (("a", "a"), ("a", "b"), ("a", "c"), m, n, k, k, 1, n, 1, n, 1), kw, ("c",)))
    m, n, k = 128, 256, 128
    arrays = {"a": Array((m, k), "bfloat16"), "b": Array((k, n), "bfloat16"), "c": Array((m, n), "float32", "poison")}
    kw = {"BM": 128, "BN": 256, "BK": 64, "GROUP_M": 8, "ACTIVATION": "", "num_warps": 8, "num_stages": 3}
    out.append(Case("matmul_bf16_f32out_w8", "matmul_kernel", (1,), arrays,
                    (("a", "a"), ("a", "b"), ("a", "c"), m, n, k, k, 1, n, 1, n, 1), kw, ("c",)))
    m, n, k = 128, 128, 64
    arrays = {"a": Array((m, k), "float32"), "b": Array((k, n), "float32"), "c": Array((m, n), "float32", "poison")}
    kw = {"BM": 64, "BN": 128, "BK": 32, "GROUP_M": 8, "ACTIVATION": "", "num_warps": 4, "num_stages": 3}
    out.append(Case("matmul_tf32", "matmul_kernel", (2,), arrays,
                    (("a", "a"), ("a", "b"), ("a", "c"), m, n, k, k, 1, n, 1, n, 1), kw, ("c",),
                    note="tl.dot of f32 inputs: Triton's default input precision tf32"))
    for dev in (False, True):
        m, n, k = 256, 256, 128
        arrays = {"a": Array((m, k), "float16"), "b": Array((n, k), "float16"), "c": Array((m, n), "float16", "poison")}
        if dev:
            ds = (("a", "a"), ("a", "b"), ("a", "c"))
        else:
            ds = (Desc("a", (m, k), (128, 64)), Desc("b", (n, k), (128, 64)), Desc("c", (m, n), (128, 128)))
        kw = {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "NUM_SMS": 3, "DEVICE_DESC": dev, "num_warps": 4,
              "num_stages": 3}
        out.append(Case(f"matmul_tma_persistent_{'device' if dev else 'host'}", "matmul_tma_persistent_kernel", (3,),
                        arrays, (*ds, m, n, k), kw, ("c",), scratch=dev))
    return out


def _small_cases() -> list[Case]:
    out = [
        Case("add_f32", "add_kernel", (5,), {"x": Array((5000,), "float32"), "y": Array((5000,), "float32"),
                                             "out": Array((5000,), "float32", "poison")},
             (("a", "x"), ("a", "y"), ("a", "out"), 5000), {"BLOCK": 1024}, ("out",)),
        Case("softmax_f32", "softmax_kernel", (8,), {"x": Array((37, 300), "float32", "normal*4"),
                                                     "y": Array((37, 300), "float32", "poison")},
             (("a", "y"), ("a", "x"), 300, 300, 37, 300), {"BLOCK": 512, "STAGES": 2, "num_warps": 4}, ("y",)),
        Case("softmax_f16_w8", "softmax_kernel", (6,), {"x": Array((24, 1000), "float16", "normal*3"),
                                                        "y": Array((24, 1000), "float16", "poison")},
             (("a", "y"), ("a", "x"), 1000, 1000, 24, 1000), {"BLOCK": 1024, "STAGES": 3, "num_warps": 8}, ("y",)),
        Case("layernorm_f16", "layer_norm_kernel", (5,),
             {"x": Array((5, 1000), "float16"), "y": Array((5, 1000), "float16", "poison"),
              "w": Array((1000,), "float16"), "b": Array((1000,), "float16"),
              "mean": Array((5,), "float32", "poison"), "rstd": Array((5,), "float32", "poison")},
             (("a", "x"), ("a", "y"), ("a", "w"), ("a", "b"), ("a", "mean"), ("a", "rstd"), 1000, 1000, 1e-5),
             {"BLOCK": 256, "num_warps": 4}, ("y", "mean", "rstd")),
        Case("layernorm_bf16", "layer_norm_kernel", (3,),
             {"x": Array((3, 4096), "bfloat16", "normal*2"), "y": Array((3, 4096), "bfloat16", "poison"),
              "w": Array((4096,), "bfloat16"), "b": Array((4096,), "bfloat16"),
              "mean": Array((3,), "float32", "poison"), "rstd": Array((3,), "float32", "poison")},
             (("a", "x"), ("a", "y"), ("a", "w"), ("a", "b"), ("a", "mean"), ("a", "rstd"), 4096, 4096, 1e-6),
             {"BLOCK": 1024, "num_warps": 8}, ("y", "mean", "rstd")),
        Case("histogram", "histogram_kernel", (3,), {"x": Array((3000,), "int32", "ints:0:100000"),
                                                     "bins": Array((16,), "int32", "ints:0:1")},
             (("a", "x"), ("a", "bins"), 3000), {"NBINS": 16, "BLOCK": 1024}, ("bins",)),
        Case("cumsum_argmax", "cumsum_argmax_kernel", (4,), {"x": Array((4, 100), "float32"),
                                                             "s": Array((4, 100), "float32", "poison"),
                                                             "i": Array((4,), "int32", "poison")},
             (("a", "x"), ("a", "s"), ("a", "i"), 100), {"BLOCK": 128}, ("s", "i")),
        Case("dropout", "dropout_kernel", (3,), {"x": Array((3000,), "float32"), "o": Array((3000,), "float32", "poison")},
             (("a", "x"), ("a", "o"), 3000, 0.3, 20261202), {"BLOCK": 1024}, ("o",)),
    ]
    return out


def _more_cases() -> list[Case]:
    return [
        Case("dot_fp8_e4m3", "dot_small_kernel", (1,), {"a": Array((64, 64), "float8_e4m3fn"),
                                                        "b": Array((64, 64), "float8_e4m3fn"),
                                                        "c": Array((64, 64), "float32", "poison")},
             (("a", "a"), ("a", "b"), ("a", "c")), {"BM": 64, "BN": 64, "BK": 64}, ("c",)),
        Case("dot_int8", "dot_small_kernel", (1,), {"a": Array((64, 64), "int8", "ints:-100:100"),
                                                    "b": Array((64, 64), "int8", "ints:-100:100"),
                                                    "c": Array((64, 64), "int32", "poison")},
             (("a", "a"), ("a", "b"), ("a", "c")), {"BM": 64, "BN": 64, "BK": 64}, ("c",)),
        Case("sort_histogram", "sort_histogram_kernel", (1,), {"x": Array((256,), "float32"),
                                                              "s": Array((256,), "float32", "poison"),
                                                              "h": Array((16,), "int32", "poison")},
             (("a", "x"), ("a", "s"), ("a", "h")), {"N": 256, "NBINS": 16}, ("s", "h")),
        Case("math_mix", "math_mix_kernel", (3,), {"x": Array((3000,), "float32", "normal*3"),
                                                   "o": Array((3000,), "float32", "poison")},
             (("a", "x"), ("a", "o"), 3000), {"BLOCK": 1024}, ("o",)),
        Case("int_mix", "int_mix_kernel", (3,), {"x": Array((3000,), "int32", "ints:-2000000000:2000000000"),
                                                 "o": Array((3000,), "int32", "poison")},
             (("a", "x"), ("a", "o"), 3000), {"BLOCK": 1024}, ("o",)),
    ]


CASES: tuple[Case, ...] = tuple(_small_cases() + _matmul_cases() + _attn_cases() + _more_cases())


def case(name: str) -> Case:
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"no Triton suite case {name!r}")


# ------------------------------------------------------------------------------------------------ running
def text_digests(cubin: bytes) -> dict[str, str]:
    """sha256 of every .text section of ``cubin`` (the SASS, without the line tables that hold paths)."""
    from flashsim.sass.cubin import Cubin

    cb = Cubin(cubin)
    return {name: hashlib.sha256(sec.data()).hexdigest() for name, sec in sorted(cb.sections.items())
            if name.startswith(".text.")}


def _sim_desc(arr, shape, block):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(arr.reshape(shape), list(shape), [shape[1], 1], list(block))


def _allocator():
    """flashsim.triton allocates scratch itself; Triton's rule that an allocator be set holds as on the GPU."""
    return lambda size, align, stream: None


def run_sim(c: Case, arrays: dict[str, np.ndarray], *, exec_options=None):
    """The case in flashsim.triton on flashsim.cuda arrays: (outputs by name, flashsim.triton.Launched)."""
    import triton

    import flashsim.cuda as fc
    import flashsim.triton as ft

    dev = {k: fc.asarray(np.ascontiguousarray(v)) for k, v in arrays.items()}
    args, kw = _call(c, dev, _sim_desc)
    if c.scratch:
        triton.set_allocator(_allocator())
    r = ft.launch(c.kernel_fn(), tuple(c.grid), *args, exec_options=exec_options, **kw)
    return {k: dev[k].get() for k in c.outputs}, r


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8).ravel()


SMALL_INPUT = 32 * 1024  # inputs up to this size are stored in the record; larger ones are redrawn from the seed


def recorded_inputs(c: Case, record: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """A recorded case's inputs: stored ones as they are, the others drawn again from the seed and checked
    against their recorded sha256 (a numpy whose generator draws other numbers fails here, loudly)."""
    drawn = None
    out = {}
    for k in c.arrays:
        if f"in/{k}" in record:
            out[k] = record[f"in/{k}"].view(_np_dtype(c.arrays[k].dtype))  # bf16 comes back from npz as void
            continue
        drawn = drawn if drawn is not None else inputs(c, seed)
        want = bytes(record[f"digest/{k}"]).hex()
        if hashlib.sha256(bits(drawn[k])).hexdigest() != want:
            raise ValueError(f"{c.name}: input {k!r} drawn from seed {seed} is not the recorded one (sha256 {want[:16]})")
        out[k] = drawn[k]
    return out


def replay_case(c: Case, record: dict) -> list[str]:
    """Differences between the interpreter's run of ``c`` (compiled here) and the GPU's record: the cubin's
    SASS, then every output bit. Empty when identical."""
    arrays = recorded_inputs(c, record)
    outs, r = run_sim(c, arrays)
    msgs = []
    want_text = json.loads(bytes(record["text"]).decode())
    got_text = text_digests(r.cubin)
    if got_text != want_text:
        msgs.append(f"{c.name}: the cubin compiled here has other SASS than the GPU's (.text digests "
                    f"{got_text} != {want_text})")
    for k in c.outputs:
        g, w = bits(outs[k]), bits(record[f"out/{k}"])
        bad = np.nonzero(g != w)[0]
        if bad.size:
            msgs.append(f"{c.name}: output {k!r}: {bad.size} of {w.size} bytes differ from the GPU's (first at byte "
                        f"{int(bad[0])}: {int(g[bad[0]]):#04x} != {int(w[bad[0]]):#04x})")
    return msgs


def load_record(path: str | Path | None = None) -> dict[str, dict]:
    """{case name: {key: array}} of a recorded ``triton_suite.npz``."""
    from flashsim.gpu.records import by_case

    return by_case(Path(path) if path is not None else TRACE / "triton_suite.npz")


# ------------------------------------------------------------------------------------------------ the GPU
_TORCH_OF = {"bfloat16": ("uint16", "bfloat16"), "float8_e4m3fn": ("uint8", "float8_e4m3fn"),
             "float8_e5m2": ("uint8", "float8_e5m2")}


def _torch_of(a: np.ndarray):
    import torch

    if a.dtype.name in _TORCH_OF:
        raw, td = _TORCH_OF[a.dtype.name]
        return torch.from_numpy(np.ascontiguousarray(a).view(raw)).view(getattr(torch, td)).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def _numpy_of(t, like: np.ndarray) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if like.dtype.name in _TORCH_OF:
        return t.view(getattr(torch, _TORCH_OF[like.dtype.name][0])).numpy().view(like.dtype)
    return t.numpy()


def _gpu_desc(t, shape, block):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(t.view(*shape), list(shape), [shape[1], 1], list(block))


def run_gpu_jit(c: Case, arrays: dict[str, np.ndarray]):
    """The case through Triton's JIT on the GPU: (outputs, CompiledKernel)."""
    import torch
    import triton

    dev = {k: _torch_of(v) for k, v in arrays.items()}
    if c.scratch:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    args, kw = _call(c, dev, _gpu_desc)
    ck = c.kernel_fn()[tuple(c.grid)](*args, **kw)
    torch.cuda.synchronize()
    return {k: _numpy_of(dev[k], arrays[k]) for k in c.outputs}, ck


def compile_sim_fresh(c: Case, arrays: dict[str, np.ndarray]) -> bytes:
    """flashsim.triton's cubin for the call, compiled in a fresh Triton cache (not the JIT's cached one)."""
    import triton

    import flashsim.cuda as fc
    import flashsim.triton as ft

    saved = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="flashsim-triton-cache-") as tmp:
        os.environ["TRITON_CACHE_DIR"] = tmp
        try:
            fn = c.kernel_fn()
            dev = {k: fc.asarray(np.ascontiguousarray(v)) for k, v in arrays.items()}
            args, kw = _call(c, dev, _sim_desc)
            with ft.device():
                ck = fn.run(*args, grid=tuple(c.grid), warmup=True, **kw)
            return bytes(ck.asm["cubin"])
        finally:
            if saved is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved
            fn.device_caches.clear()  # the next use compiles through the cache again


def run_gpu_cubin(c: Case, arrays: dict[str, np.ndarray], ck, cubin: bytes) -> dict[str, np.ndarray]:
    """``cubin`` loaded by cupy (sha256 checked) and launched with flashsim.triton's packing of the call."""
    import cupy

    from flashsim.gpu import runtime
    from flashsim.triton import driver as drv

    mod = runtime.load_cubin(cubin)
    fn = mod.get_function(ck.metadata.name)
    if ck.metadata.shared > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = ck.metadata.shared
    dev = {k: cupy.asarray(np.ascontiguousarray(v).view(np.uint8)) for k, v in arrays.items()}

    class _Ptr:
        def __init__(self, a, dtype):
            self.a, self.dtype = a, dtype

        def data_ptr(self):
            return int(self.a.data.ptr)

    tensors = {k: _Ptr(dev[k], arrays[k].dtype) for k in arrays}

    def mk(t, shape, block):
        from triton.tools.tensor_descriptor import TensorDescriptor

        return TensorDescriptor(t, list(shape), [shape[1], 1], list(block))

    args, kw = _call(c, tensors, mk)
    bound = _bind(c, args, kw)
    launcher = drv.SimLauncher(ck.src, ck.metadata)
    values = [(ty, path, launcher._value(bound, path)) for ty, path in launcher.params]
    raw = []
    for ty, path, v in values:
        if ty == "constexpr":
            continue
        if ty.startswith("*"):
            raw.append(np.uint64(drv._pointer(v, "arg")).tobytes())
        elif ty == "nvTmaDesc":
            raw.append(v.data)  # the 128-byte CUtensorMap flashsim.triton encodes
        else:
            raw.append(drv._pack_scalar(ty, v, "arg"))
    scratch = []
    keep = []
    grid = tuple(c.grid) + (1,) * (3 - len(c.grid))
    for size, align in ((ck.metadata.global_scratch_size, ck.metadata.global_scratch_align),
                        (ck.metadata.profile_scratch_size, ck.metadata.profile_scratch_align)):
        if size:
            buf = cupy.empty(int(np.prod(grid)) * size + align, np.uint8)
            keep.append(buf)
            scratch.append((int(buf.data.ptr) + align - 1) // align * align)
        else:
            scratch.append(0)
    raw += [np.uint64(s).tobytes() for s in scratch]
    kargs = tuple(np.frombuffer(b, np.dtype((np.void, len(b)))).copy() for b in raw)
    fn(grid, (32 * ck.metadata.num_warps, 1, 1), kargs, shared_mem=ck.metadata.shared)
    cupy.cuda.Device().synchronize()
    return {k: cupy.asnumpy(dev[k]).view(arrays[k].dtype).reshape(arrays[k].shape) for k in c.outputs}


def _bind(c: Case, args, kw):
    """The kernel's arguments in signature order (defaults and keywords bound), as Triton's binder orders them."""
    import inspect

    sig = inspect.signature(c.kernel_fn().fn)
    b = sig.bind_partial(*args, **{k: v for k, v in kw.items() if k in sig.parameters})
    b.apply_defaults()
    return list(b.arguments.values())


def record(out_dir: Path, seed: int, names: Sequence[str] | None = None) -> dict:
    import torch
    import triton

    from flashsim.gpu import runtime
    from flashsim.sass.toolchain import versions

    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"device": runtime.device_info(), "triton": triton.__version__, "torch": torch.__version__,
                              "toolchain": versions(), "seed": seed, "date": time.strftime("%Y-%m-%d"),
                              "cases": {}}
    arrays: dict[str, np.ndarray] = {}
    for c in CASES:
        if names and c.name not in names:
            continue
        t0 = time.time()
        ins = inputs(c, seed)
        entry: dict[str, Any] = {"kernel": c.kernel, "grid": list(c.grid), "kwargs": {k: str(v) for k, v in c.kwargs.items()}}
        try:
            outs, ck = run_gpu_jit(c, ins)
            cubin = bytes(ck.asm["cubin"])
            entry.update(cubin_sha256=hashlib.sha256(cubin).hexdigest(), shared=ck.metadata.shared,
                         num_warps=ck.metadata.num_warps, num_stages=ck.metadata.num_stages,
                         unwritten={k: int((bits(v) == POISON).sum()) for k, v in outs.items()})
            sim_cubin = compile_sim_fresh(c, ins)
            entry["sim_cubin_sha256"] = hashlib.sha256(sim_cubin).hexdigest()
            entry["same_cubin"] = sim_cubin == cubin
            again = run_gpu_cubin(c, ins, ck, sim_cubin)
            entry["abi_equal"] = all(np.array_equal(bits(again[k]), bits(outs[k])) for k in c.outputs)
            for k, v in ins.items():  # small inputs as they are, large ones as digests (replay redraws them)
                if v.nbytes <= SMALL_INPUT:
                    arrays[f"{c.name}::in/{k}"] = v
                arrays[f"{c.name}::digest/{k}"] = np.frombuffer(hashlib.sha256(bits(v)).digest(), np.uint8)
            for k, v in outs.items():
                arrays[f"{c.name}::out/{k}"] = v
            arrays[f"{c.name}::cubin"] = np.frombuffer(cubin, np.uint8)
            arrays[f"{c.name}::text"] = np.frombuffer(json.dumps(text_digests(cubin)).encode(), np.uint8)
        except Exception as exc:  # recorded: the report says which case failed and how
            import traceback

            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()[-3000:]
        entry["seconds"] = round(time.time() - t0, 2)
        report["cases"][c.name] = entry
        print(f"{c.name:36s} {'ERROR ' + entry['error'][:200] if 'error' in entry else ''}"
              f"{'' if 'error' in entry else 'same cubin' if entry['same_cubin'] else 'OTHER CUBIN'} "
              f"{'' if 'error' in entry else 'abi ok' if entry['abi_equal'] else 'ABI DIFFERS'} {entry['seconds']}s",
              flush=True)
    np.savez_compressed(out_dir / "triton_suite.npz", **arrays)
    (out_dir / "triton_suite.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.triton_suite", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for triton_suite.npz and triton_suite.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--case", action="append", help="only these cases (repeatable)")
    a = ap.parse_args(argv)
    rep = record(a.out, a.seed, a.case)
    bad = [k for k, v in rep["cases"].items() if "error" in v or not v.get("same_cubin") or not v.get("abi_equal")]
    print(f"{len(rep['cases']) - len(bad)} of {len(rep['cases'])} cases: same cubin and same outputs through "
          f"flashsim.triton's launch ABI")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
