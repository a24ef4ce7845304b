"""Barriers: bar.sync / __syncthreads (whole CTA) and bar.warp.sync / __syncwarp (one warp).

They change no data; they order shared-memory accesses for the race detector (flashsim.smem). Only the
forms that order whole CTAs / whole warps are modelled: a named barrier over part of a CTA
(``bar.sync id, count`` with count < the CTA's threads) or a partial ``__syncwarp(mask)`` raises
NotImplementedError rather than being approximated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashsim.errors import bad_argument
from flashsim.smem import Event, SharedMemory
from flashsim.warp.state import FULL_MASK

__all__ = ["bar_sync", "syncthreads", "syncwarp"]


def bar_sync(smem: SharedMemory, barrier: int = 0, threads: int | None = None, *, ctas: Any = None,
             tag: str | None = None) -> Event:
    """``bar.sync barrier{, threads}`` executed by every thread of the CTAs ``ctas`` (default all)."""
    if not isinstance(smem, SharedMemory):
        raise bad_argument("smem", type(smem).__name__, "expected a flashsim.smem.SharedMemory")
    if not isinstance(barrier, (int, np.integer)) or not 0 <= barrier <= 15:
        raise bad_argument("barrier", barrier, "barrier ids are 0..15")
    if threads is not None and threads != smem.warps * 32:
        raise NotImplementedError(f"bar.sync {barrier}, {threads}: a barrier over part of the CTA "
                                  f"({smem.warps * 32} threads) is not modelled by the race detector")
    smem.barrier(ctas)
    op = f"bar.sync {barrier}"
    return Event(op, op if tag is None else tag)


def syncthreads(smem: SharedMemory, *, ctas: Any = None, tag: str | None = None) -> Event:
    """``__syncthreads()`` (bar.sync 0)."""
    return bar_sync(smem, 0, ctas=ctas, tag="__syncthreads" if tag is None else tag)


def syncwarp(smem: SharedMemory, mask: int = FULL_MASK, *, warps: Any = None, tag: str | None = None) -> Event:
    """``__syncwarp(mask)`` (bar.warp.sync) by the warps where ``warps`` (ctas, warps) is True (default all)."""
    if not isinstance(smem, SharedMemory):
        raise bad_argument("smem", type(smem).__name__, "expected a flashsim.smem.SharedMemory")
    if mask != FULL_MASK:
        raise NotImplementedError(f"__syncwarp({mask:#x}): a partial-warp barrier is not modelled by the race detector")
    shape = (smem.ctas, smem.warps)
    sel = np.ones(shape, bool) if warps is None else np.broadcast_to(np.asarray(warps, bool), shape)
    smem.warp_barrier(sel)
    op = "bar.warp.sync"
    return Event(op, "__syncwarp" if tag is None else tag)
