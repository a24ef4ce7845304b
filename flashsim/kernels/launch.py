"""Launching a FlashAttention kernel of ``flashsim.kernels.spec`` on numpy inputs: on the GPU, or its cubin
in flashsim's SASS interpreter on the CPU.

``prepare`` checks the arguments and the kernel's preconditions with the twin's own check (before any
device is touched, so every argument error is testable without a GPU), picks the instance, copies the
inputs to the device (the array module of the backend: cupy, or :mod:`flashsim.cuda`), builds the
kernel's parameter tuple (the twin's ``launch_args``), the grid and the dynamic smem of the spec, and
fetches the kernel from the backend. ``run_kernel`` launches it and returns (out, lse or None) as numpy in
flash_attn_func's layout. Backends: ``gpu`` (NVRTC on the device through cupy), ``interp`` (the cubin NVRTC
from its wheel makes, in the SASS interpreter), ``gpu-cubin`` (that very cubin on the GPU). The GPU is
reached only through :mod:`flashsim.device`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.errors import bad_argument
from flashsim.kernels.spec import get

__all__ = ["BACKENDS", "Prepared", "prepare", "run_fa", "run_kernel"]

BACKENDS = ("gpu", "interp", "gpu-cubin")
_DEFAULT_SMEM = 48 * 1024  # dynamic smem usable without opting in


#: the threads of a kernel launched after the main one (the split-KV combine kernel)
POST_THREADS = 128


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
    post: tuple = ()  # kernels launched after it, in order: (func, grid, params), 128 threads, static smem only

    def launch(self):
        if self.reset is not None:
            self.reset()
        self.func(self.grid, (self.threads,), self.params, shared_mem=self.smem)
        for func, grid, params in self.post:
            func(grid, (POST_THREADS,), params)

    def result(self):
        if self.reset is not None:
            self.reset()
        if self.interpreted:
            self.func(self.grid, (self.threads,), self.params, shared_mem=self.smem)
            for func, grid, params in self.post:
                func(grid, (POST_THREADS,), params)
        else:
            from flashsim import device

            device.launch(self.func, self.grid, self.threads, self.params, shared_mem=self.smem)
            for func, grid, params in self.post:
                device.launch(func, grid, POST_THREADS, params)
        return self.fetch()

    @property
    def interpreted(self) -> bool:
        return type(self.func).__module__.startswith("flashsim.cuda")


def _backend(backend: str):
    """(array module, kernel getter) of a backend: cupy on the GPU, or flashsim.cuda (the SASS
    interpreter running the same source's cubin on the CPU)."""
    if backend == "interp":
        import flashsim.cuda as fc
        from flashsim.kernels.sources import get_interpreted_kernel

        return fc, get_interpreted_kernel
    from flashsim import device

    getter = {"gpu": device.get_kernel, "gpu-cubin": device.get_cubin_kernel}.get(backend)
    if getter is None:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    return device.require_gpu(), getter


def check(kernel: str, q, k, v, softmax_scale=None, **kw):
    """The spec of ``kernel`` and the AttentionArgs of a call, checked by the twin (numpy inputs only)."""
    spec = get(kernel)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray):
            raise bad_argument(name, type(x).__name__, "expected a numpy array (batch, seqlen, heads, headdim)")
    return spec, spec.check(q, k, v, softmax_scale, **kw)


def prepare(kernel: str, q, k, v, softmax_scale=None, *, trace: bool = False, backend: str = "gpu",
            **kw) -> Prepared:
    """Check the arguments (before any device call), copy the inputs to the device and build the launch
    (``trace``: the traced build, whose trace buffers gpu/trace_gpu.py and flashsim.sass.fstrace set up;
    ``backend='interp'``: the kernel's cubin in flashsim's SASS interpreter, on the CPU; ``'gpu-cubin'``:
    that same cubin on the GPU)."""
    spec, args = check(kernel, q, k, v, softmax_scale, **kw)
    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    if args.launches_nothing:
        raise bad_argument("k.shape", k.shape, "seqlen_k == 0 (or no query rows in packed sequences): flash_attn_func "
                                               "launches no kernel (out 0, lse +inf)")
    inst = spec.instance_for(args)
    xp, get_kernel = _backend(backend)
    func = get_kernel(spec.source, inst.function(args.dtype, args), options=spec.build_options(trace), arch=spec.arch)
    smem = inst.smem_bytes
    if smem > _DEFAULT_SMEM:
        func.max_dynamic_shared_size_bytes = smem
    kv = {n: kw[n] for n in ("k_new", "v_new", "rotary_cos", "rotary_sin") if kw.get(n) is not None}
    params, fetch, reset, *post = spec.twin_module.launch_args(inst, args, q, k, v, xp, **kv)
    after = tuple((get_kernel(spec.source, name, options=spec.build_options(trace), arch=spec.arch), grid, p)
                  for name, grid, p in (post[0] if post else ()))
    return Prepared(func, inst.grid(args), inst.threads, params, smem, fetch, reset, after)


def run_kernel(kernel: str, q, k, v, softmax_scale=None, **kw):
    """Any kernel of the registry on numpy inputs (batch, seqlen, heads, headdim): (out, lse) for a kernel
    that writes LSE, else (out, None); with dropout and return_attn_probs (fa2) the probabilities third. seqlen_k == 0 returns out 0 (and lse +inf) without a launch, as
    flash_attn_func does. ``backend`` and ``trace`` as for :func:`prepare`."""
    spec, args = check(kernel, q, k, v, softmax_scale, **{n: x for n, x in kw.items() if n not in ("backend", "trace")})
    if args.launches_nothing:
        lse = np.full(args.lse_shape, np.inf, np.float32) if spec.writes_lse else None
        res = np.zeros(args.out_shape, args.np_dtype), lse
        return res + (np.zeros(args.s_dmask_shape, args.np_dtype),) if args.return_softmax else res
    if args.rng_state is not None:  # the philox state the check above took: a generator advances once per call
        kw = {**{n: x for n, x in kw.items() if n != "generator"}, "rng_state": args.rng_state}
    return prepare(kernel, q, k, v, softmax_scale, **kw).result()


def run_fa(kernel: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, softmax_scale: float | None = None) -> np.ndarray:
    """The out of ``run_kernel``."""
    return run_kernel(kernel, q, k, v, softmax_scale)[0]
