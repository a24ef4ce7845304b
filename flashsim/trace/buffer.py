"""The trace buffers of a traced build (``-DFS_TRACE_BUILD``, gpu/kernels/trace.cuh), wherever it runs: on
the GPU (gpu/trace_gpu.py) or in the SASS interpreter (``flashsim.session``, backend 'interp').

The build finds its buffers through the device global ``fs_trace_params``: a pointer to the buffer, the
per-CTA slot table of the run-time filter, the words per recorded warp and the mask of recorded warps.
Each recorded warp owns ``cap_words`` words: two counters (words used, events dropped), then its events,
each a header word (tag id in the low 16 bits, register count in the high 16), the event's sequence number
and 32 words per register (lane-major within a register). A warp that runs out of room drops events and
counts them: decoding such a buffer is an error naming the warp (``TraceOverflow``), never a shorter trace.
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import FlashsimError, TraceError, bad_argument, location
from flashsim.trace import spec
from flashsim.trace.record import LANES, RegEvent

__all__ = ["TraceOverflow", "capacity", "decode", "decode_all", "params_bytes"]


class TraceOverflow(FlashsimError, RuntimeError):
    """A recorded warp dropped events: its buffer was too small."""


def params_bytes(buf_ptr: int, slot_ptr: int, cap_words: int, warp_mask: int, n_warps: int) -> np.ndarray:
    """fstrace::Params as 32 bytes: two pointers, an unsigned long long, an unsigned and an int."""
    p = np.zeros(4, np.uint64)
    p[0], p[1], p[2] = buf_ptr, slot_ptr, cap_words
    p[3] = np.uint64(warp_mask) | (np.uint64(n_warps) << np.uint64(32))
    return p


def capacity(cap_words, need: int) -> int:
    """The words per recorded warp: ``cap_words``, or ``need`` (the kernel's program) when None."""
    cap = need if cap_words is None else cap_words
    if not isinstance(cap, (int, np.integer)) or isinstance(cap, bool) or not 2 <= cap < 2**32:
        raise bad_argument("cap_words", cap_words, "expected the words per recorded warp, an int from 2 (its "
                                                   "counters) to 2**32 - 1")
    return int(cap)


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


def decode_all(buf: np.ndarray, ctas, warps, kernel: str, headdim: int, need: int) -> tuple[list, dict]:
    """Every recorded warp's events of a buffer (recorded CTAs, recorded warps, cap words) and the words
    each used; TraceOverflow naming the warps that dropped events."""
    events, used, overflow = [], {}, []
    for i, c in enumerate(ctas):
        for j, w in enumerate(warps):
            ev, dropped = decode(buf[i, j], c, w, kernel, headdim)
            used[(c, w)] = int(buf[i, j, 0])
            if dropped:
                overflow.append(f"{location(cta=c, warp=w)} dropped {dropped} events")
            events.extend(ev)
    if overflow:
        raise TraceOverflow(f"trace buffer of {buf.shape[-1]} words per warp too small ({need} needed by the "
                            "kernel's program): " + "; ".join(overflow))
    return events, used
