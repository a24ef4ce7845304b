"""Recording per-warp traces of the FlashAttention kernels on the GPU.

The traced build (``-DFS_TRACE_BUILD``, gpu/kernels/trace.cuh) finds its buffers through the device global
``fs_trace_params`` (:mod:`flashsim.trace.buffer`: the layout, the decoding). ``record`` sizes the buffer
from the kernel's program (``flashsim.trace.spec.warp_words``) unless told otherwise, launches, and decodes
the buffer into events; a warp that ran out of room is an error naming it (``TraceOverflow``), never a
shorter trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashsim.kernels.launch import prepare
from flashsim.kernels.spec import get
from flashsim.trace import spec
from flashsim.trace.buffer import TraceOverflow, capacity, decode, decode_all, params_bytes
from flashsim.trace.record import check_filter
from flashsim.gpu import runtime

__all__ = ["Armed", "GpuTrace", "TraceOverflow", "arm", "decode", "record"]


@dataclass
class GpuTrace:
    out: np.ndarray
    lse: np.ndarray | None
    events: list
    cap_words: int
    used_words: dict        # (cta, warp) -> words written


def _set_params(module, value: np.ndarray) -> None:
    cupy = runtime.require_gpu()
    ptr = module.get_global("fs_trace_params")
    dst = cupy.ndarray((value.size,), np.uint64, memptr=ptr)
    dst.set(value)


class Armed:
    """A traced build's buffers set up for one filter: ``launch()`` records (the buffers are reused, each
    launch rewrites them), ``events()`` decodes them, ``disarm()`` clears the device global."""

    def __init__(self, kernel: str, prep, args, ctas, warps, cap_words: int | None):
        headdim, steps, n_ctas, n_warps = spec.instance(kernel, args)
        ctas, warps = check_filter(ctas, warps, n_ctas, n_warps)
        self.need = spec.warp_words(kernel, headdim, steps)
        cap = capacity(cap_words, self.need)
        cupy = runtime.require_gpu()
        slot = np.full(n_ctas, -1, np.int32)
        slot[ctas] = np.arange(len(ctas), dtype=np.int32)
        self.kernel, self.prep, self.headdim, self.steps = kernel, prep, headdim, steps
        self.ctas, self.warps, self.cap = ctas, warps, cap
        self.d_slot = cupy.asarray(slot)
        self.d_buf = cupy.zeros(len(ctas) * len(warps) * cap, np.uint32)
        k = get(kernel)
        self.module = runtime.load_module(k.source, options=k.build_options(trace=True))
        _set_params(self.module, params_bytes(self.d_buf.data.ptr, self.d_slot.data.ptr, cap,
                                              sum(1 << w for w in warps), len(warps)))

    def launch(self):
        self.prep.launch()

    def disarm(self):
        _set_params(self.module, np.zeros(4, np.uint64))

    def events(self):
        """(events, words used per (cta, warp)); TraceOverflow if any warp dropped events."""
        cupy = runtime.require_gpu()
        buf = cupy.asnumpy(self.d_buf).reshape(len(self.ctas), len(self.warps), self.cap)
        return decode_all(buf, self.ctas, self.warps, self.kernel, self.headdim, self.need)


def arm(kernel: str, q, k, v, softmax_scale=None, *, ctas=(0,), warps=None, cap_words: int | None = None,
        **kw) -> Armed:
    """The traced build of ``kernel`` on numpy inputs, armed to record the CTAs ``ctas`` (linear ids
    x + X (y + Y z)) and warps ``warps`` (None: every warp of a CTA). Every argument is checked before the GPU is used."""
    from flashsim.attention import check_args

    args = check_args(q, k, v, softmax_scale=softmax_scale, **kw)
    headdim, steps, n_ctas, n_warps = spec.instance(kernel, args)
    check_filter(ctas, warps, n_ctas, n_warps)
    capacity(cap_words, spec.warp_words(kernel, headdim, steps))
    prep = prepare(kernel, q, k, v, softmax_scale, trace=True, **kw)
    return Armed(kernel, prep, args, ctas, warps, cap_words)


def record(kernel: str, q, k, v, softmax_scale=None, *, ctas=(0,), warps=None, cap_words: int | None = None,
           **kw) -> GpuTrace:
    """Run the traced build once and return its outputs and the recorded events."""
    a = arm(kernel, q, k, v, softmax_scale, ctas=ctas, warps=warps, cap_words=cap_words, **kw)
    try:
        out, lse = a.prep.result()
    finally:
        a.disarm()
    events, used = a.events()
    return GpuTrace(out, lse, events, a.cap, used)
