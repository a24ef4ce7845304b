"""The cupy-shaped face of the SASS interpreter: compile or load an sm_90 kernel and run it on the CPU.

    import flashsim.cuda as fc          # instead of: import cupy as cp
    k = fc.RawKernel(src, "saxpy")
    x = fc.asarray(np.arange(8, dtype=np.float32))
    k((1,), (8,), (x, np.float32(2)))
    print(x.get())
"""

from flashsim.cuda.memory import (MemoryPointer, arange, asarray, asnumpy, device_memory, empty, empty_like, full,
                                  full_like, ndarray, ones, ones_like, zeros, zeros_like)
from flashsim.cuda.module import Function, LaunchError, RawKernel, RawModule
from flashsim.sass.checking import Report, checking
from flashsim.sass.machine import BarrierDeadlock, ExecOptions, SpinDetected, StepBudgetExceeded
from flashsim.sass.cubin import CubinError
from flashsim.sass.toolchain import CompileError

__all__ = ["BarrierDeadlock", "CompileError", "CubinError", "ExecOptions", "Function", "LaunchError",
           "MemoryPointer", "RawKernel", "RawModule", "Report", "checking", "SpinDetected", "StepBudgetExceeded", "asarray", "asnumpy",
           "arange", "device_memory", "empty", "empty_like", "full", "full_like", "ndarray", "ones", "ones_like", "zeros",
           "zeros_like"]
