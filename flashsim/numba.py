"""Run numba-cuda kernels (``@cuda.jit``) on the CPU, launched as ``kernel[grid, block](...)`` is on a GPU.

    from numba import cuda
    import flashsim.numba as fn
    @cuda.jit
    def axpy(a, x, y, out): ...
    fn.kernel(axpy)[blocks, threads](np.float32(2), x, y, out)      # x, y, out: numpy or flashsim.cuda arrays

The kernel is compiled for compute capability 9.0 with no GPU, as numba-cuda compiles it for an H100: its
types from the arguments (``numba.typeof``: an array's dtype, rank and layout; a Python int is int64, a float
float64), NVVM (the ``nvidia-nvvm`` wheel numba-cuda finds) to PTX, then that PTX assembled by ptxas 13.0
(:func:`flashsim.sass.toolchain.assemble_ptx`, the driver's JIT of the H100 machine's CUDA release). The cubin
runs in the SASS interpreter with numba's argument ABI: an array of rank d is the 5 + 2d words of its data
model (meminfo, parent, nitems, itemsize, data, shape[d], strides[d] in bytes). numpy arrays are copied in and
back (views of one buffer alias, as flashsim.triton stages them); ``shared_mem`` (the fourth launch
configuration item) is the dynamic shared memory. numba-cuda is an optional dependency: ``pip install
"flashsim[numba]"``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Sequence

import numpy as np

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["Compiled", "NumbaUnavailable", "compile_kernel", "kernel"]

CC = (9, 0)


class NumbaUnavailable(FlashsimError, ImportError):
    """numba-cuda is not installed."""


def _cuda():
    try:
        from numba import cuda
    except ImportError as exc:
        raise NumbaUnavailable(f"flashsim.numba needs numba-cuda ({exc}): pip install 'flashsim[numba]'") from None
    return cuda


@dataclasses.dataclass(frozen=True)
class Compiled:
    """One specialisation of a kernel: its numba signature, PTX, the cubin and the flashsim.cuda module."""

    signature: tuple
    ptx: str
    cubin: bytes
    name: str
    module: Any

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.cubin).hexdigest()


_CACHE: dict = {}


def _pyfunc(k):
    cuda = _cuda()
    from numba.cuda.dispatcher import CUDADispatcher

    if isinstance(k, CUDADispatcher):
        return k.py_func, dict(k.targetoptions)
    if callable(k) and not isinstance(k, type):
        return k, {}
    raise bad_argument("kernel", k, "expected a @numba.cuda.jit kernel or a Python function")


def _numba_type(a: Any, what: str):
    import numba

    from flashsim.cuda.memory import ndarray

    if isinstance(a, ndarray):
        return numba.types.Array(numba.from_dtype(a.dtype), a.ndim, "C")
    if isinstance(a, np.ndarray):
        return numba.typeof(a)
    if isinstance(a, (bool, int, float, complex, np.generic)):
        return numba.typeof(a)
    raise bad_argument(what, type(a).__name__, "expected a numpy array, a flashsim.cuda array or a scalar")


def compile_kernel(k, argtypes: Sequence) -> Compiled:
    """The kernel compiled for cc 9.0 with these numba argument types (cached per process)."""
    cuda = _cuda()
    import flashsim.cuda as fc
    from flashsim.sass.toolchain import assemble_ptx

    py, opts = _pyfunc(k)
    key = (py, tuple(argtypes), tuple(sorted((o, str(v)) for o, v in opts.items())))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    kw = {o: opts[o] for o in ("fastmath", "opt", "lineinfo", "debug") if o in opts}
    kw.setdefault("lineinfo", True)
    if kw.get("debug"):
        raise NotImplementedError("numba kernels built with debug=True (exception checks, -G code) are not modelled")
    try:
        ptx, restype = cuda.compile_ptx(py, tuple(argtypes), cc=CC, **kw)
    except (AttributeError, ImportError) as exc:
        if "numba" not in "".join(__import__("traceback").format_tb(exc.__traceback__)):
            raise
        # numba-cuda's own modules failing to load (a numba-cuda older than the numpy beside it): not the kernel
        raise NumbaUnavailable(f"numba-cuda cannot compile here ({type(exc).__name__}: {exc}); flashsim.numba needs "
                               f"a numba-cuda that works with numpy {np.__version__}") from exc
    import numba

    if restype != numba.types.void:
        raise bad_argument("kernel", py.__name__, f"a kernel returns nothing; this one returns {restype}")
    cubin = assemble_ptx(ptx, name=f"{py.__name__}.ptx", lineinfo=True)
    mod = fc.RawModule(cubin=cubin, name=f"{py.__name__}.cubin")
    names = mod.kernels
    if len(names) != 1:
        raise FlashsimError(f"numba built {len(names)} kernels for {py.__name__}: {names}")
    out = _CACHE[key] = Compiled(tuple(argtypes), ptx, cubin, names[0], mod)
    return out


def _array_words(addr: int, shape, strides_b, itemsize: int) -> list:
    """An array argument as numba's data model passes it: meminfo, parent, nitems, itemsize, data, shape,
    strides (bytes)."""
    n = int(np.prod(shape)) if len(shape) else 1
    return [np.uint64(0), np.uint64(0), np.int64(n), np.int64(itemsize), np.uint64(addr),
            *[np.int64(s) for s in shape], *[np.int64(s) for s in strides_b]]


def pack(args: Sequence, types: Sequence, address_of) -> list:
    """The kernel's parameters for ``args`` of numba ``types``: each array's words (``address_of(i)``: the
    device address of argument i's data), each scalar as its type."""
    flat = []
    for i, (a, ty) in enumerate(zip(args, types)):
        if hasattr(a, "shape") and hasattr(a, "strides") and not isinstance(a, np.generic):
            flat += _array_words(address_of(i), a.shape, a.strides, a.itemsize)
        else:
            flat.append(_scalar(ty, a))
    return flat


def _scalar(ty, a):
    import numba

    if isinstance(ty, numba.types.Boolean):
        return np.uint8(bool(a))
    if isinstance(ty, (numba.types.Integer, numba.types.Float)):
        return np.dtype(str(ty)).type(a)
    raise NotImplementedError(f"a kernel argument of numba type {ty} is not modelled")


class _Launch:
    def __init__(self, k, grid, block, shared_mem, exec_options):
        self.k, self.grid, self.block, self.shared_mem, self.exec_options = k, grid, block, shared_mem, exec_options

    def __call__(self, *args):
        from flashsim.cuda.memory import ndarray
        from flashsim.triton.staging import Stage

        types = [_numba_type(a, f"argument {i}") for i, a in enumerate(args)]
        comp = compile_kernel(self.k, types)
        fn = comp.module.get_function(comp.name)
        stage = Stage()
        ok = False
        try:
            def address_of(i):
                a = args[i]
                return a.data.ptr if isinstance(a, ndarray) else stage.put(a, f"argument {i}").data_ptr()

            flat = pack(args, types, address_of)
            if self.shared_mem > fn.max_dynamic_shared_size_bytes:
                fn.max_dynamic_shared_size_bytes = int(self.shared_mem)
            self.counters = fn(self.grid, self.block, tuple(flat), shared_mem=int(self.shared_mem),
                               exec_options=self.exec_options)
            ok = True
        finally:
            stage.finish(copy_back=ok)
        self.compiled = comp
        return comp


class _Kernel:
    def __init__(self, k, exec_options=None):
        _pyfunc(k)
        self.k, self.exec_options = k, exec_options

    def __getitem__(self, config):
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise bad_argument("launch configuration", config, "expected [grid, block] or [grid, block, stream, "
                                                               "shared_mem]")
        grid, block = config[0], config[1]
        shared = config[3] if len(config) == 4 else 0
        return _Launch(self.k, grid, block, shared, self.exec_options)


def kernel(k, *, exec_options=None) -> _Kernel:
    """Wrap a numba-cuda kernel so that ``kernel(k)[grid, block](...)`` runs it on the simulated H100."""
    return _Kernel(k, exec_options)
