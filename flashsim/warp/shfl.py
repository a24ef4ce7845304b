"""shfl.sync (PTX ISA, "Data Movement and Conversion Instructions: shfl.sync") and the CUDA intrinsics.

The PTX semantics, for each lane (``b`` and ``c`` may differ per lane)::

    bval = b[4:0]; cval = c[4:0]; segmask = c[12:8]
    maxLane = (lane & segmask) | (cval & ~segmask);  minLane = lane & segmask
    .up:   j = lane - bval;              pval = (j >= maxLane)
    .down: j = lane + bval;              pval = (j <= maxLane)
    .bfly: j = lane ^ bval;              pval = (j <= maxLane)
    .idx:  j = minLane | (bval & ~segmask); pval = (j <= maxLane)
    if !pval: j = lane;   d = a[j];   p = pval

Undefined by the ISA, and refused here with :class:`UndefinedResult`: an executing lane that is not in
``membermask``, and a lane whose source lane j is inactive or not in ``membermask``.

The CUDA intrinsics pack ``c`` from ``width`` (a power of two up to 32) as CUDA's headers do:
``__shfl_sync``/``__shfl_down_sync``/``__shfl_xor_sync``: ``c = ((32 - width) << 8) | 0x1f``;
``__shfl_up_sync``: ``c = (32 - width) << 8``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashsim.errors import bad_argument, location
from flashsim.smem import Event
from flashsim.warp.state import FULL_MASK, UndefinedResult, lane_array, restore

__all__ = ["MODES", "shfl_down", "shfl_idx", "shfl_sync", "shfl_up", "shfl_xor", "shfl_c"]

MODES = ("up", "down", "bfly", "idx")


def _operand(name: str, x: Any, lead: tuple) -> np.ndarray:
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return np.full((1, 1, 32), int(x), np.int64) if lead == () else np.full(lead + (32,), int(x), np.int64)
    arr, _ = lane_array(name, x, lead=lead)
    return arr


def _membermask(x: Any, shape: tuple) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
        raise bad_argument("membermask", x, "expected a 32-bit integer mask (one per warp)")
    if arr.size and (arr.min() < 0 or arr.max() > FULL_MASK):
        raise bad_argument("membermask", x, "expected a 32-bit mask (0 .. 0xffffffff)")
    try:
        return np.broadcast_to(arr.astype(np.int64), shape)
    except ValueError:
        raise bad_argument("membermask", x, f"expected one mask per warp, shape {shape}") from None


def shfl_sync(mode: str, a: Any, b: Any, c: Any, membermask: Any = FULL_MASK, *, active: Any = None,
              tag: str | None = None) -> tuple[np.ndarray, np.ndarray, Event]:
    """``shfl.sync.<mode>.b32 d|p, a, b, c, membermask``: returns d (uint32, like a), p (bool), event.

    a: uint32 (32,) or (ctas, warps, 32); b, c: ints or per-lane int arrays; membermask: an int or one
    per warp; active: bool per lane (default all). Inactive lanes get d = 0, p = False.
    """
    if mode not in MODES:
        raise bad_argument("mode", mode, f"expected one of {MODES}")
    av, lead = lane_array("a", a, kind="u32")
    bv = _operand("b", b, lead)
    cv = _operand("c", c, lead)
    act = np.ones(av.shape, bool) if active is None else lane_array("active", active, kind="bool", lead=lead)[0]
    mm = _membermask(membermask, av.shape[:2])
    lane = np.arange(32, dtype=np.int64)
    bval, cval, seg = bv & 31, cv & 31, (cv >> 8) & 31
    max_lane = (lane & seg) | (cval & ~seg)
    min_lane = lane & seg
    if mode == "up":
        j = lane - bval
        pval = j >= max_lane
    elif mode == "down":
        j = lane + bval
        pval = j <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        pval = j <= max_lane
    else:
        j = min_lane | (bval & ~seg)
        pval = j <= max_lane
    j = np.where(pval, j, lane)
    in_mask = ((mm[..., None] >> lane) & 1).astype(bool)
    outside = act & ~in_mask
    if outside.any():
        c_, w_, l_ = (int(v) for v in np.argwhere(outside)[0])
        detail = (f"executes it but is not in membermask {int(mm[c_, w_]):#010x}: the PTX ISA leaves the behaviour "
                  "undefined")
        raise UndefinedResult(f"shfl.sync.{mode}: {location(cta=c_, warp=w_, lane=l_)} {detail}",
                              what=f"shfl.sync.{mode}", cta=c_, warp=w_, lane=l_, detail=detail)
    src_ok = np.take_along_axis(act & in_mask, j, axis=-1)
    bad = act & ~src_ok
    if bad.any():
        c_, w_, l_ = (int(v) for v in np.argwhere(bad)[0])
        src = int(j[c_, w_, l_])
        detail = (f"reads source lane={src}, which is inactive or not in membermask {int(mm[c_, w_]):#010x}: d is "
                  "undefined (PTX ISA)")
        raise UndefinedResult(f"shfl.sync.{mode}: {location(cta=c_, warp=w_, lane=l_)} {detail}",
                              what=f"shfl.sync.{mode}", cta=c_, warp=w_, lane=l_, detail=detail)
    d = np.where(act, np.take_along_axis(av, j, axis=-1), np.uint32(0)).astype(np.uint32)
    p = act & pval
    op = f"shfl.sync.{mode}.b32"
    return restore(d, lead), restore(p, lead), Event(op, op if tag is None else tag)


def shfl_c(width: int, mode: str) -> int:
    """The ``c`` operand CUDA's __shfl_*_sync intrinsics pass for ``width``."""
    if not isinstance(width, (int, np.integer)) or isinstance(width, bool) or width < 1 or width > 32 \
            or width & (width - 1):
        raise bad_argument("width", width, "expected a power of two from 1 to 32 (CUDA leaves others undefined)")
    return ((32 - int(width)) << 8) | (0 if mode == "up" else 0x1F)


def shfl_idx(var: Any, src_lane: Any, width: int = 32, mask: Any = FULL_MASK, *, active: Any = None,
             tag: str | None = None) -> tuple[np.ndarray, Event]:
    """``__shfl_sync(mask, var, srcLane, width)``."""
    d, _, ev = shfl_sync("idx", var, src_lane, shfl_c(width, "idx"), mask, active=active, tag=tag)
    return d, ev


def shfl_up(var: Any, delta: Any, width: int = 32, mask: Any = FULL_MASK, *, active: Any = None,
            tag: str | None = None) -> tuple[np.ndarray, Event]:
    """``__shfl_up_sync(mask, var, delta, width)``."""
    d, _, ev = shfl_sync("up", var, delta, shfl_c(width, "up"), mask, active=active, tag=tag)
    return d, ev


def shfl_down(var: Any, delta: Any, width: int = 32, mask: Any = FULL_MASK, *, active: Any = None,
              tag: str | None = None) -> tuple[np.ndarray, Event]:
    """``__shfl_down_sync(mask, var, delta, width)``."""
    d, _, ev = shfl_sync("down", var, delta, shfl_c(width, "down"), mask, active=active, tag=tag)
    return d, ev


def shfl_xor(var: Any, lane_mask: Any, width: int = 32, mask: Any = FULL_MASK, *, active: Any = None,
             tag: str | None = None) -> tuple[np.ndarray, Event]:
    """``__shfl_xor_sync(mask, var, laneMask, width)`` (shfl.sync.bfly)."""
    d, _, ev = shfl_sync("bfly", var, lane_mask, shfl_c(width, "bfly"), mask, active=active, tag=tag)
    return d, ev
