"""Real CUDA kernels (``gpu/kernels/*.cu``) and how to compile and run them through cupy.

Importing this package does not import cupy: that happens on first use, and a missing cupy or GPU is
reported as :class:`gpu.runtime.GpuUnavailable`.
"""

from flashsim.gpu.runtime import CompileError, GpuUnavailable, LaunchError

__all__ = ["CompileError", "GpuUnavailable", "LaunchError"]
