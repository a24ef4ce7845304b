"""Host wrappers for the FlashAttention CUDA kernels in gpu/kernels/: numpy in and out.

v5, v6 (seed 001, fa_v5.cu), kernel1 (seed 002, kernel1.cu) and fa2 (seed 000, fa2.cu). ``run_kernel`` runs
any of them and returns (out, lse or None); ``run_fa`` is the v5/v6/kernel1 form that returns out only. Each
checks the arguments and the kernel's preconditions with the twin's own check (``flashsim.kernels.*.check``)
before touching cupy, so every argument error is testable without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.kernels import fa2 as fa2_twin
from flashsim.kernels import fa_v5, kernel1 as kernel1_twin
from flashsim.attention import check_args
from flashsim.errors import bad_argument
from flashsim.kernels import check_supported
from flashsim.gpu import runtime

__all__ = ["FA_KERNELS", "FaKernel", "Prepared", "fa_smem_bytes", "prepare", "run_fa", "run_kernel"]


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
    # seed 002: B_r = B_c = 64, d = 128; the function name gets the dtype (kernel1_f16, kernel1_bf16)
    "kernel1": FaKernel("kernel1.cu", "kernel1", threads=128, rows_per_cta=kernel1_twin.B_R),
    # seed 000: built with FA2's --use_fast_math; fa2_hdim{64,128}_{f16,bf16}
    "fa2": FaKernel("fa2.cu", "fa2", threads=128, rows_per_cta=fa2_twin.BLOCK_M, options=("--use_fast_math",)),
}

_MD_F_BYTES = 8  # struct {float m, d}
_DEFAULT_SMEM = 48 * 1024  # dynamic smem usable without opting in


def fa_smem_bytes(headdim: int) -> int:
    """Dynamic smem of v5/v6: s_Q [64, d], s_K and s_V [16, d], s_QK, s_S, s_O [64, 16] f16, 3 x 64 MD_F."""
    halves = 64 * headdim + 2 * 16 * headdim + 3 * 64 * 16
    return 2 * halves + 3 * 64 * _MD_F_BYTES


def _check(kernel: str, q: Any, k: Any, v: Any, softmax_scale: Any, **kw):
    if not isinstance(kernel, str) or kernel not in FA_KERNELS:
        raise bad_argument("kernel", kernel, f"expected one of {sorted(FA_KERNELS)}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray):
            raise bad_argument(name, type(x).__name__, "expected a numpy array (batch, seqlen, heads, headdim)")
    if kernel == "fa2":
        return fa2_twin.check(q, k, v, softmax_scale, kernel, **kw)
    check_supported(kernel, check_args(q, k, v, softmax_scale=softmax_scale, **kw))
    if kernel == "kernel1":
        return kernel1_twin.check(q, k, v, softmax_scale, kernel)
    return fa_v5.check(kernel, q, k, v, softmax_scale)


def function_names(kernel: str) -> list[str]:
    """The ``extern "C"`` entry points a kernel's wrapper launches."""
    spec = FA_KERNELS[kernel]
    if kernel == "kernel1":
        return [f"kernel1_{t}" for t in ("f16", "bf16")]
    if kernel == "fa2":
        return [f"fa2_hdim{d}_{t}" for d in sorted(fa2_twin.BLOCK_N) for t in ("f16", "bf16")]
    return [spec.function]


def _suffix(dtype: str) -> str:
    return {"float16": "f16", "bfloat16": "bf16"}[dtype]


_K1_SMEM = 3 * kernel1_twin.B_R * kernel1_twin.D_HEAD * 2  # s_Q, s_K, s_V: 48 KiB


def fa2_smem_bytes(headdim: int) -> int:
    """Dynamic smem of fa2: sQ (128 x d) and sK, sV (kBlockN x d), 16-bit."""
    return 2 * headdim * (fa2_twin.BLOCK_M + 2 * fa2_twin.BLOCK_N[headdim])


@dataclass
class Prepared:
    """A kernel launch with its inputs on the device: ``launch()`` enqueues it (no sync, for timing);
    ``result()`` synchronises and returns (out, lse or None) as numpy in flash_attn_func's layout."""

    func: Any
    grid: tuple
    threads: int
    params: tuple
    smem: int
    fetch: Any
    reset: Any = None  # clears outputs a kernel accumulates into (v5/v6 read O back)

    def launch(self):
        if self.reset is not None:
            self.reset()
        self.func(self.grid, (self.threads,), self.params, shared_mem=self.smem)

    def result(self):
        if self.reset is not None:
            self.reset()
        if self.interpreted:
            self.func(self.grid, (self.threads,), self.params, shared_mem=self.smem)
        else:
            runtime.launch(self.func, self.grid, self.threads, self.params, shared_mem=self.smem)
        return self.fetch()

    @property
    def interpreted(self) -> bool:
        return type(self.func).__module__.startswith("flashsim.cuda")


def build_options(kernel: str, trace: bool = False) -> tuple[str, ...]:
    """NVRTC options of a kernel's build; ``trace`` adds -DFS_TRACE_BUILD (gpu/kernels/trace.cuh)."""
    return FA_KERNELS[kernel].options + (("-DFS_TRACE_BUILD",) if trace else ())


BACKENDS = ("gpu", "interp", "gpu-cubin")


def _device(backend: str):
    """(array module, kernel getter) of a backend: cupy on the GPU, or flashsim.cuda (the SASS
    interpreter running the same source's cubin on the CPU)."""
    if backend == "gpu":
        return runtime.require_gpu(), runtime.get_kernel
    if backend == "interp":
        import flashsim.cuda as fc

        return fc, runtime.get_interpreted_kernel
    if backend == "gpu-cubin":  # the GPU running the interpreter's cubin, byte for byte
        return runtime.require_gpu(), runtime.get_cubin_kernel
    raise bad_argument("backend", backend, f"expected one of {BACKENDS}")


def prepare(kernel: str, q, k, v, softmax_scale=None, *, trace: bool = False, backend: str = "gpu",
            **kw) -> Prepared:
    """Check the arguments (before any cupy call), copy the inputs to the device and build the launch
    (``trace``: the traced build, whose trace buffers gpu/trace_gpu.py sets up; ``backend='interp'``:
    the kernel's cubin in flashsim's SASS interpreter, on the CPU; ``'gpu-cubin'``: that same cubin on
    the GPU)."""
    args = _check(kernel, q, k, v, softmax_scale, **kw)
    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    spec = FA_KERNELS[kernel]
    options = build_options(kernel, trace)
    if kernel == "fa2":
        if args.seqlen_k == 0:
            raise bad_argument("k.shape", k.shape, "seqlen_k == 0: flash_attn_func launches no kernel (out 0, lse +inf)")
        pb = fa2_twin.problem_from_args(args)
        cupy, get_kernel = _device(backend)
        d_q, d_k, d_v = (cupy.asarray(x) for x in fa2_twin.pad_inputs(args, q, k, v))
        d_o = cupy.zeros(d_q.shape, d_q.dtype)
        d_lse = cupy.zeros(args.lse_shape, np.float32)
        func = get_kernel(spec.file, f"fa2_hdim{pb.headdim}_{_suffix(pb.dtype)}", options=options)
        smem = fa2_smem_bytes(pb.headdim)
        if smem > _DEFAULT_SMEM:
            func.max_dynamic_shared_size_bytes = smem
        params = (d_q, d_k, d_v, d_o, d_lse, np.int32(pb.seqlen_q), np.int32(pb.seqlen_k), np.int32(pb.heads),
                  np.int32(pb.heads_k), np.float32(pb.scale_softmax), np.float32(pb.scale_softmax_log2),
                  np.float32(pb.softcap), np.int32(pb.window_left), np.int32(pb.window_right),
                  np.int32(pb.is_causal), np.int32(pb.is_local))

        def fetch():
            out = np.ascontiguousarray(cupy.asnumpy(d_o)[..., :args.headdim]).view(args.np_dtype)
            return out, cupy.asnumpy(d_lse)

        return Prepared(func, (pb.m_blocks, pb.heads, pb.batch), spec.threads, params, smem, fetch)
    cupy, get_kernel = _device(backend)
    if kernel == "kernel1":
        func = get_kernel(spec.file, f"{spec.function}_{_suffix(args.dtype)}", options=options)
        d_q, d_k, d_v = (cupy.asarray(np.ascontiguousarray(x).view(np.uint16)) for x in (q, k, v))
        d_o = cupy.zeros(d_q.shape, d_q.dtype)
        params = (d_q, d_k, d_v, d_o, np.int32(args.seqlen_q), np.int32(args.heads), np.float32(args.softmax_scale_f32))
        return Prepared(func, (args.seqlen_q // spec.rows_per_cta, args.heads, args.batch), spec.threads, params,
                        _K1_SMEM, lambda: (cupy.asnumpy(d_o).view(q.dtype), None))
    # v5 / v6: (batch, heads, seqlen, d) on the device
    func = get_kernel(spec.file, spec.function, options=options)
    smem = fa_smem_bytes(args.headdim)
    if smem > _DEFAULT_SMEM:
        func.max_dynamic_shared_size_bytes = smem
    d_q, d_k, d_v = (cupy.asarray(np.ascontiguousarray(np.swapaxes(x, 1, 2)).view(np.uint16)) for x in (q, k, v))
    d_o = cupy.zeros(d_q.shape, d_q.dtype)  # the kernel reads O back at every KV step: it must start at +0

    def fetch():
        out = cupy.asnumpy(d_o).view(np.float16)
        return np.ascontiguousarray(np.swapaxes(out, 1, 2)), None

    params = (d_q, d_k, d_v, d_o, np.int32(args.seqlen_q), np.int32(args.seqlen_k), np.int32(args.headdim),
              np.float32(args.softmax_scale_f32))
    return Prepared(func, (args.seqlen_q // spec.rows_per_cta, args.heads, args.batch), spec.threads, params, smem,
                    fetch, reset=lambda: d_o.fill(0))


def run_kernel(kernel: str, q, k, v, softmax_scale=None, **kw):
    """Any kernel of FA_KERNELS on numpy inputs (batch, seqlen, heads, headdim): (out, lse) for fa2, (out,
    None) for the others (which take no masks). fa2 with seqlen_k == 0 returns out 0 and lse +inf without a
    launch, as flash_attn_func does."""
    if kernel == "fa2":
        args = _check(kernel, q, k, v, softmax_scale, **{n: x for n, x in kw.items() if n != "backend"})
        if args.seqlen_k == 0:
            return np.zeros(args.q_shape, args.np_dtype), np.full(args.lse_shape, np.inf, np.float32)
    return prepare(kernel, q, k, v, softmax_scale, **kw).result()


def run_fa(kernel: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, softmax_scale: float | None = None) -> np.ndarray:
    """The out of ``run_kernel`` for the kernels without masks (v5, v6, kernel1)."""
    return run_kernel(kernel, q, k, v, softmax_scale)[0]
