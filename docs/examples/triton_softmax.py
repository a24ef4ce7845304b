"""A Triton kernel on the CPU, as kernel[grid](...) runs it on an H100 (README: "Kernels from other compilers")."""

import numpy as np
import triton
import triton.language as tl

import flashsim.cuda as fc
import flashsim.triton as ft


@triton.jit
def softmax(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


x = np.random.default_rng(0).standard_normal((4, 100)).astype(np.float32)
y = np.empty_like(x)
run = ft.kernel(softmax)[(4,)](y, x, 100, BLOCK=128)        # Triton's JIT, sm_90 cubin, the SASS interpreter
print(run.compiled.metadata.num_warps, "warps;", run.counters["warp_instructions"], "warp-instructions; cubin",
      run.cubin_sha256[:12])
print("row sums:", y.sum(axis=1))

with fc.checking(banks=True) as report:                       # every flashsim.cuda diagnostic applies
    ft.kernel(softmax)[(4,)](y, x, 100, BLOCK=128)
print(report.launches[0])
