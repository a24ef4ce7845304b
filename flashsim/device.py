"""The one door from flashsim to a GPU: every use of the GPU harness (:mod:`flashsim.gpu`: cupy, NVRTC
builds for the device, launches, device-side trace buffers) by the rest of flashsim goes through here.

Core packages (numerics, layout, warp, smem, kernels, attention, trace, sass, cuda) never import
``flashsim.gpu``; ``tests/test_layering.py`` checks it. Importing this module is cheap and works on a
machine without cupy or a GPU: the harness is imported at the first call, and a missing cupy or device
raises :class:`flashsim.errors.GpuUnavailable` saying why.
"""

from __future__ import annotations

import importlib
from typing import Any, Sequence

from flashsim.errors import CompileError, GpuUnavailable, LaunchError

__all__ = ["CompileError", "GpuUnavailable", "LaunchError", "device_info", "get_cubin_kernel", "get_kernel",
           "launch", "load_cubin", "require_gpu"]


def _runtime():
    return importlib.import_module("flashsim.gpu.runtime")


def require_gpu() -> Any:
    """The cupy module, after checking that a CUDA device is usable; else GpuUnavailable."""
    return _runtime().require_gpu()


def device_info(device: int | None = None) -> dict[str, str]:
    """Name, compute capability, architecture, driver and CUDA versions of a device (provenance)."""
    return _runtime().device_info(device)


def get_kernel(source: str, function: str, *, options: Sequence[str] = (), arch: str | None = None) -> Any:
    """The ``extern "C"`` kernel ``function`` of the kernel source ``source`` (a file of flashsim's kernel
    directory), built by NVRTC for the current device, as a ``cupy.RawKernel``."""
    return _runtime().get_kernel(source, function, options=options, arch=arch)


def get_cubin_kernel(source: str, function: str, *, options: Sequence[str] = (), arch: str = "sm_90") -> Any:
    """The kernel ``function`` of the very cubin the SASS interpreter runs for ``source``, on the GPU."""
    return _runtime().get_cubin_kernel(source, function, options=options, arch=arch)


def encode_tensor_map(args: tuple, address: int) -> bytes:
    """The 128 bytes the driver's cuTensorMapEncodeTiled writes for ``args`` = (data type, rank, dims, strides
    in bytes, box, element strides, interleave, swizzle, L2 promotion, OOB fill enums) at device ``address``."""
    return _runtime().encode_tensor_map(args, address)


def load_cubin(cubin: bytes) -> Any:
    """A ``cupy.RawModule`` of exactly these cubin bytes."""
    return _runtime().load_cubin(cubin)


def launch(kernel: Any, grid: Any, block: Any, args: Sequence[Any], shared_mem: int = 0) -> None:
    """Launch a cupy kernel and synchronise; a CUDA error raises LaunchError naming the kernel."""
    _runtime().launch(kernel, grid, block, args, shared_mem=shared_mem)


def record_trace(kernel: str, q, k, v, softmax_scale=None, *, ctas=(0,), warps=None, cap_words: int | None = None,
                 **kw) -> Any:
    """One run of ``kernel``'s traced build (-DFS_TRACE_BUILD) on the GPU on numpy inputs, recording the
    CTAs ``ctas`` and warps ``warps`` (None: all): its outputs and events (``out``, ``lse``, ``events``,
    ``cap_words``, ``used_words``; gpu/trace_gpu.py)."""
    trace_gpu = importlib.import_module("flashsim.gpu.trace_gpu")
    return trace_gpu.record(kernel, q, k, v, softmax_scale, ctas=ctas, warps=warps, cap_words=cap_words, **kw)


__all__ += ["record_trace"]
