"""The FlashAttention CUDA kernels of gpu/kernels/ on numpy inputs: the names the gpu/ scripts and the tests
use for the launches of :mod:`flashsim.kernels.launch`, which the kernels' specs (:mod:`flashsim.kernels.spec`)
drive.

``run_kernel`` runs any of them and returns (out, lse or None); ``run_fa`` returns out only; ``prepare``
builds a launch to time or trace. Each checks the arguments and the kernel's preconditions with the twin's
own check before touching cupy, so every argument error is testable without a GPU.
"""

from __future__ import annotations

from flashsim.kernels.launch import BACKENDS, Prepared, prepare, run_fa, run_kernel
from flashsim.kernels.spec import SPECS as FA_KERNELS
from flashsim.kernels.spec import get

__all__ = ["BACKENDS", "FA_KERNELS", "Prepared", "build_options", "function_names", "prepare", "run_fa", "run_kernel"]


def function_names(kernel: str) -> list[str]:
    """The ``extern "C"`` entry points of a kernel."""
    return get(kernel).function_names


def build_options(kernel: str, trace: bool = False) -> tuple[str, ...]:
    """NVRTC options of a kernel's build; ``trace`` adds -DFS_TRACE_BUILD (gpu/kernels/trace.cuh)."""
    return get(kernel).build_options(trace)
