"""Batched warp state: the (ctas, warps, 32[, nregs]) arrays every instruction takes, and their checks.

A single warp may be passed without the leading axes: lane arrays of shape (32,) and register arrays of
shape (32, nregs) are read as (1, 1, 32[, nregs]), and results come back in the shape they came in.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["FULL_MASK", "LANES", "UndefinedResult", "Summary", "lane_ids", "lane_array", "regs_array",
           "restore", "warp_mask"]

LANES = 32
FULL_MASK = 0xFFFFFFFF


class UndefinedResult(FlashsimError):
    """The PTX ISA leaves the result undefined (e.g. shfl.sync reading a lane outside membermask):
    flashsim refuses to pick a value. ``what`` (the operation), ``cta``/``warp``/``lane`` (the first lane at
    fault, cta counted in the arrays given) and ``detail`` let the SASS interpreter restate it with the
    grid's CTA index, the PC, its SASS and source line (``located``)."""

    def __init__(self, message: str, *, what: str | None = None, cta: int | None = None, warp: int | None = None,
                 lane: int | None = None, detail: str = "", located: bool = False):
        super().__init__(message)
        self.what, self.cta, self.warp, self.lane, self.detail, self.located = what, cta, warp, lane, detail, located


class Summary:
    """Shows an array in an error message by shape and dtype instead of its contents."""

    def __init__(self, arr: np.ndarray):
        self.text = f"array(shape={arr.shape}, dtype={arr.dtype})"

    def __repr__(self) -> str:
        return self.text


def _show(x: Any) -> Any:
    return Summary(x) if isinstance(x, np.ndarray) else x


def lane_ids() -> np.ndarray:
    """0..31 as int64 (the %laneid of every lane)."""
    return np.arange(LANES, dtype=np.int64)


def lane_array(name: str, x: Any, *, kind: str = "int", lead: tuple | None = None) -> tuple[np.ndarray, tuple]:
    """``x`` as a (ctas, warps, 32) array plus the leading shape it came with (() for one warp).

    kind 'int': integers (returned as int64); 'bool': booleans; 'u32': uint32 register values.
    ``lead``: the leading shape another operand fixed; a scalar or a (32,) array broadcasts to it.
    """
    arr = np.asarray(x)
    if kind == "int":
        if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
            raise bad_argument(name, _show(arr), f"expected integers (one per lane), got dtype {arr.dtype}")
    elif kind == "bool":
        if arr.dtype != np.bool_:
            raise bad_argument(name, _show(arr), f"expected a bool array (one per lane), got dtype {arr.dtype}")
    elif kind == "u32":
        if arr.dtype != np.uint32:
            raise bad_argument(name, _show(arr), f"expected uint32 register values (one per lane), got dtype {arr.dtype}")
    if arr.ndim == 0 and lead is not None:
        arr = np.broadcast_to(arr, lead + (LANES,))
    if arr.ndim not in (1, 3):
        raise bad_argument(name, _show(arr), "expected shape (32,) for one warp or (ctas, warps, 32)")
    if arr.shape[-1] != LANES:
        raise bad_argument(name, _show(arr), f"the lane axis has {arr.shape[-1]} entries: a warp has 32 lanes")
    this_lead = arr.shape[:-1]
    if lead is not None and this_lead != lead:
        if this_lead == ():
            arr = np.broadcast_to(arr, lead + (LANES,))
        else:
            raise bad_argument(name, _show(arr), f"leading (ctas, warps) shape {this_lead} differs from {lead}")
    out = arr.reshape((1, 1, LANES) if arr.ndim == 1 else arr.shape)
    if kind == "int":
        out = out.astype(np.int64, copy=False)
    return out, (this_lead if lead is None else lead)


def regs_array(name: str, x: Any, nregs: int, *, lead: tuple | None = None) -> tuple[np.ndarray, tuple]:
    """Registers as (ctas, warps, 32, nregs) uint32, plus the leading shape they came with."""
    arr = np.asarray(x)
    if arr.dtype != np.uint32:
        raise bad_argument(name, _show(arr), f"registers must be uint32 bit patterns, got dtype {arr.dtype}")
    if arr.ndim not in (2, 4) or arr.shape[-2:] != (LANES, nregs):
        if arr.ndim >= 2 and arr.shape[-2] != LANES:
            raise bad_argument(name, _show(arr), f"the lane axis has {arr.shape[-2]} entries: a warp has 32 lanes")
        raise bad_argument(name, _show(arr), f"expected shape (32, {nregs}) for one warp or (ctas, warps, 32, {nregs})")
    this_lead = arr.shape[:-2]
    if lead is not None and this_lead != lead:
        raise bad_argument(name, _show(arr), f"leading (ctas, warps) shape {this_lead} differs from {lead}")
    return arr.reshape((1, 1, LANES, nregs) if arr.ndim == 2 else arr.shape), this_lead


def warp_mask(name: str, x: Any, shape: tuple[int, int]) -> np.ndarray:
    """A per-warp bool (or None = every warp) as a (ctas, warps) array."""
    if x is None:
        return np.ones(shape, dtype=bool)
    arr = np.asarray(x)
    if arr.dtype != np.bool_:
        raise bad_argument(name, _show(arr), "expected a bool per warp")
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise bad_argument(name, _show(arr), f"expected a bool per warp, shape {shape}") from None


def restore(arr: np.ndarray, lead: tuple, trailing: int = 0) -> np.ndarray:
    """Give a (ctas, warps, 32, ...) result the leading shape its inputs had."""
    if lead == ():
        return arr.reshape(arr.shape[2:])
    return arr
