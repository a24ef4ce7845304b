"""The per-lane operands of warp instructions on shared memory, checked: byte addresses and lane masks of shape
(..., 32), as the bank and cp.async rules take them."""

from __future__ import annotations

from typing import Any

import numpy as np

from flashsim.errors import bad_argument


def _lane_addresses(name: str, v: Any) -> tuple[np.ndarray, np.ndarray]:
    """(the array as given, its rows of 32 lanes as contiguous int64) of per-lane byte addresses (..., 32)."""
    a = np.asarray(v)
    if a.dtype.kind not in "iu" or a.ndim < 1 or a.shape[-1] != 32:
        raise bad_argument(name, getattr(a, "shape", a), "expected integer byte addresses of shape (..., 32)")
    return a, np.ascontiguousarray(a.reshape(-1, 32), dtype=np.int64)


def _lane_bools(name: str, v: Any, shape: tuple) -> np.ndarray:
    b = np.asarray(v)
    if b.dtype != np.bool_:
        raise bad_argument(name, b.dtype, "expected a bool array")
    try:
        return np.ascontiguousarray(np.broadcast_to(b, shape))
    except ValueError:
        raise bad_argument(name, b.shape, f"expected a shape that broadcasts to {shape}") from None
