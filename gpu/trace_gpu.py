"""Recording per-warp traces of the FlashAttention kernels on the GPU.

The traced build (``-DFS_TRACE_BUILD``, gpu/kernels/trace.cuh) finds its buffers through the device global
``fs_trace_params``: a pointer to the buffer, the per-CTA slot table of the run-time filter, the words
per recorded warp and the mask of recorded warps. ``record`` sizes the buffer from the kernel's program
(``flashsim.trace.spec.warp_words``) unless told otherwise, launches, and decodes the buffer into events;
a warp that ran out of room is an error naming it (``TraceOverflow``), never a shorter trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashsim.errors import FlashsimError, TraceError, bad_argument, location
from flashsim.trace import spec
from flashsim.trace.record import LANES, RegEvent, check_filter
from flashsim.gpu import fa_kernels, runtime


class TraceOverflow(FlashsimError, RuntimeError):
    """A recorded warp dropped events: its buffer was too small."""


@dataclass
class GpuTrace:
    out: np.ndarray
    lse: np.ndarray | None
    events: list
    cap_words: int
    used_words: dict        # (cta, warp) -> words written


def _params_bytes(buf_ptr: int, slot_ptr: int, cap_words: int, warp_mask: int, n_warps: int) -> np.ndarray:
    """fstrace::Params as 32 bytes: two pointers, an unsigned long long, an unsigned and an int."""
    p = np.zeros(4, np.uint64)
    p[0], p[1], p[2] = buf_ptr, slot_ptr, cap_words
    p[3] = np.uint64(warp_mask) | (np.uint64(n_warps) << np.uint64(32))
    return p


def _set_params(module, value: np.ndarray) -> None:
    cupy = runtime.require_gpu()
    ptr = module.get_global("fs_trace_params")
    dst = cupy.ndarray((value.size,), np.uint64, memptr=ptr)
    dst.set(value)


def decode(words: np.ndarray, cta: int, warp: int, kernel: str, headdim: int) -> tuple[list, int]:
    """Events of one warp's buffer (uint32 words) and the count of dropped events."""
    used, dropped = int(words[0]), int(words[1])
    if used < 2 or used > words.size:
        raise TraceError(f"trace buffer of {location(cta=cta, warp=warp)} is corrupt: {used} words used of "
                         f"{words.size}")
    events, pos = [], 2
    while pos < used:
        head = int(words[pos])
        tag_id, nregs = head & 0xFFFF, head >> 16
        if tag_id >= len(spec.TAGS):
            raise TraceError(f"{location(cta=cta, warp=warp)}: unknown tag id {tag_id} at word {pos}")
        tag = spec.TAGS[tag_id]
        expect = len(spec.registers(kernel, tag, headdim))
        if nregs != expect:
            raise TraceError(f"{location(cta=cta, warp=warp)}: {tag} has {nregs} registers, flashsim.trace.spec says "
                             f"{expect}")
        seq = int(words[pos + 1])
        regs = words[pos + 2:pos + 2 + 32 * nregs].reshape(nregs, LANES).T.copy()
        events.append(RegEvent(cta, warp, seq, tag, regs))
        pos += 2 + 32 * nregs
    return events, dropped


class Armed:
    """A traced build's buffers set up for one filter: ``launch()`` records (the buffers are reused, each
    launch rewrites them), ``events()`` decodes them, ``disarm()`` clears the device global."""

    def __init__(self, kernel: str, prep, args, ctas, warps, cap_words: int | None):
        headdim, steps, n_ctas = spec.instance(kernel, args)
        ctas, warps = check_filter(ctas, warps, n_ctas)
        self.need = spec.warp_words(kernel, headdim, steps)
        cap = _capacity(cap_words, self.need)
        cupy = runtime.require_gpu()
        slot = np.full(n_ctas, -1, np.int32)
        slot[ctas] = np.arange(len(ctas), dtype=np.int32)
        self.kernel, self.prep, self.headdim, self.steps = kernel, prep, headdim, steps
        self.ctas, self.warps, self.cap = ctas, warps, cap
        self.d_slot = cupy.asarray(slot)
        self.d_buf = cupy.zeros(len(ctas) * len(warps) * cap, np.uint32)
        self.module = runtime.load_module(fa_kernels.FA_KERNELS[kernel].file,
                                          options=fa_kernels.build_options(kernel, True))
        _set_params(self.module, _params_bytes(self.d_buf.data.ptr, self.d_slot.data.ptr, cap,
                                               sum(1 << w for w in warps), len(warps)))

    def launch(self):
        self.prep.launch()

    def disarm(self):
        _set_params(self.module, np.zeros(4, np.uint64))

    def events(self):
        """(events, words used per (cta, warp)); TraceOverflow if any warp dropped events."""
        cupy = runtime.require_gpu()
        buf = cupy.asnumpy(self.d_buf).reshape(len(self.ctas), len(self.warps), self.cap)
        events, used, overflow = [], {}, []
        for i, c in enumerate(self.ctas):
            for j, w in enumerate(self.warps):
                ev, dropped = decode(buf[i, j], c, w, self.kernel, self.headdim)
                used[(c, w)] = int(buf[i, j, 0])
                if dropped:
                    overflow.append(f"{location(cta=c, warp=w)} dropped {dropped} events")
                events.extend(ev)
        if overflow:
            raise TraceOverflow(f"trace buffer of {self.cap} words per warp too small ({self.need} needed by "
                                "the kernel's program): " + "; ".join(overflow))
        return events, used


def _capacity(cap_words, need: int) -> int:
    cap = need if cap_words is None else cap_words
    if not isinstance(cap, (int, np.integer)) or isinstance(cap, bool) or not 2 <= cap < 2**32:
        raise bad_argument("cap_words", cap_words, "expected the words per recorded warp, an int from 2 (its "
                                                   "counters) to 2**32 - 1")
    return int(cap)


def arm(kernel: str, q, k, v, softmax_scale=None, *, ctas=(0,), warps=None, cap_words: int | None = None,
        **kw) -> Armed:
    """The traced build of ``kernel`` on numpy inputs, armed to record the CTAs ``ctas`` (linear ids
    x + X (y + Y z)) and warps ``warps`` (None: all 4). Every argument is checked before the GPU is used."""
    from flashsim.attention import check_args

    args = check_args(q, k, v, softmax_scale=softmax_scale, **kw)
    headdim, steps, n_ctas = spec.instance(kernel, args)
    check_filter(ctas, warps, n_ctas)
    _capacity(cap_words, spec.warp_words(kernel, headdim, steps))
    prep = fa_kernels.prepare(kernel, q, k, v, softmax_scale, trace=True, **kw)
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
