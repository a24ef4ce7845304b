"""Host wrappers for the FlashAttention CUDA kernels in gpu/kernels/ (v5, v6 of seed 001): numpy in and out.

``run_fa`` checks the arguments and the kernel's preconditions (``flashsim.kernels.fa_v5.check``, shared with the twin)
preconditions before touching cupy, so every argument error is testable without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.kernels import fa_v5
from flashsim.errors import bad_argument
from gpu import runtime

__all__ = ["FA_KERNELS", "FaKernel", "fa_smem_bytes", "run_fa"]


@dataclass(frozen=True)
class FaKernel:
    """One CUDA FlashAttention kernel: its source file, entry point, launch shape and build options."""

    file: str
    function: str
    threads: int  # threads per CTA
    rows_per_cta: int  # query rows per CTA (grid x = seqlen_q / rows_per_cta)
    # The seed builds with plain nvcc (-O3, no fast math, -ftz=false); cupy's NVRTC appends -ftz=true after
    # any option given here, so no option can undo it: the kernels run with f32 flush-to-zero.
    options: tuple[str, ...] = ()


#: Seed 001 (v5: ldmatrix + mma f16; v6: v5 with swizzled smem). Br = Bc = Bd = 16, 4 warps per CTA.
FA_KERNELS: dict[str, FaKernel] = {
    # tile sizes and preconditions live with the twin (flashsim.kernels.fa_v5), which checks for both
    "v5": FaKernel("fa_v5.cu", "fa_v5", threads=128, rows_per_cta=fa_v5.ROWS_PER_CTA),
    "v6": FaKernel("fa_v5.cu", "fa_v6", threads=128, rows_per_cta=fa_v5.ROWS_PER_CTA),
}

_MD_F_BYTES = 8  # struct {float m, d}
_DEFAULT_SMEM = 48 * 1024  # dynamic smem usable without opting in


def fa_smem_bytes(headdim: int) -> int:
    """Dynamic smem of v5/v6: s_Q [64, d], s_K and s_V [16, d], s_QK, s_S, s_O [64, 16] f16, 3 x 64 MD_F."""
    halves = 64 * headdim + 2 * 16 * headdim + 3 * 64 * 16
    return 2 * halves + 3 * 64 * _MD_F_BYTES


def _check(kernel: str, q: Any, k: Any, v: Any, softmax_scale: Any):
    if not isinstance(kernel, str) or kernel not in FA_KERNELS:
        raise bad_argument("kernel", kernel, f"expected one of {sorted(FA_KERNELS)}")
    spec = FA_KERNELS[kernel]
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray):
            raise bad_argument(name, type(x).__name__, "expected a numpy float16 array (batch, seqlen, heads, headdim)")
    args = fa_v5.check(kernel, q, k, v, softmax_scale)
    return spec, args


def run_fa(kernel: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, softmax_scale: float | None = None) -> np.ndarray:
    """FlashAttention forward with the CUDA kernel ``kernel`` ("v5" or "v6"); returns out as numpy float16.

    q (batch, seqlen_q, heads, d), k and v (batch, seqlen_k, heads, d), float16. The scale defaults to
    d^-0.5 and is passed to the kernel as float32. The kernels use (batch, heads, seqlen, d), so the inputs
    are transposed on the host.
    """
    spec, args = _check(kernel, q, k, v, softmax_scale)
    cupy = runtime.require_gpu()
    func = runtime.get_kernel(spec.file, spec.function, options=spec.options)
    smem = fa_smem_bytes(args.headdim)
    if smem > _DEFAULT_SMEM:
        func.max_dynamic_shared_size_bytes = smem

    def to_dev(x: np.ndarray):
        return cupy.asarray(np.ascontiguousarray(np.swapaxes(x, 1, 2)).view(np.uint16))

    d_q, d_k, d_v = to_dev(q), to_dev(k), to_dev(v)
    d_o = cupy.zeros_like(d_q)  # the kernel reads O back at every KV step: it must start at +0
    grid = (args.seqlen_q // spec.rows_per_cta, args.heads, args.batch)
    runtime.launch(
        func,
        grid,
        spec.threads,
        (d_q, d_k, d_v, d_o, np.int32(args.seqlen_q), np.int32(args.seqlen_k), np.int32(args.headdim),
         np.float32(args.softmax_scale_f32)),
        shared_mem=smem,
    )
    out = cupy.asnumpy(d_o).view(np.float16)
    return np.ascontiguousarray(np.swapaxes(out, 1, 2))
