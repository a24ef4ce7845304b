"""A numba-cuda kernel on the CPU, compiled for cc 9.0 with no GPU (README: "Kernels from other compilers")."""

import numpy as np
from numba import cuda

import flashsim.numba as fnb


@cuda.jit
def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


x = np.arange(1000, dtype=np.float32)
y = np.ones(1000, np.float32)
out = np.zeros_like(x)
comp = fnb.kernel(axpy)[4, 256](np.float32(2), x, y, out)   # NVVM -> PTX -> ptxas 13.0 -> the interpreter
print(comp.name[:40], "...", out[:4], np.array_equal(out, 2 * x + 1))
