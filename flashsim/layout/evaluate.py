"""Vectorised evaluation of layouts over many coordinates with numpy (no per-coordinate Python).

``evaluate(L)`` gives ``L(i)`` for every 1-D coordinate i in colexicographic order (mode 0 fastest), built
as an outer sum of one small ``arange * stride`` per flattened mode. ``evaluate(L, idx)`` maps an integer
array of 1-D coordinates with one divmod per mode (the last mode takes the remaining quotient, as CuTe's
crd2idx does). A composed layout ``A o off o B`` evaluates B, adds the offset and applies A (a swizzle is
one vectorised XOR, ``flashsim.swizzle.cute_swizzle``).
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout.inttuple import ScaledBasis


def _flat_modes(layout):
    fs = it.flatten_to_tuple(layout.shape)
    fd = it.flatten_to_tuple(layout.stride)
    return [int(s) for s in fs], list(fd)


def _basis_columns(strides):
    """Columns (coordinate modes) that ScaledBasis strides point at; only single-level bases are supported."""
    cols = []
    for d in strides:
        if isinstance(d, ScaledBasis):
            if len(d.modes) != 1:
                raise NotImplementedError(f"vectorised evaluation of the nested coordinate stride {d} is not modelled")
            if d.modes[0] not in cols:
                cols.append(d.modes[0])
    return sorted(cols)


def evaluate(layout, idx=None):
    """L(i) for all i in range(size(L)) (idx None) or for an integer array idx of 1-D coordinates.

    Returns int64 data; for a coordinate layout (ScaledBasis strides, e.g. an identity tensor) the result has
    one extra trailing axis holding the coordinate's modes.
    """
    if getattr(layout, "_composed", False):
        inner = evaluate(layout.layout_b, idx)
        off = layout.offset
        off = off.value if hasattr(off, "value") and not isinstance(off, int) else int(off)
        x = inner + off
        a = layout.layout_a
        if hasattr(a, "yyy_msk"):  # a Swizzle
            return a(x)
        return evaluate(a, x)
    if callable(getattr(layout, "layout", None)) and not hasattr(layout, "stride"):
        layout = layout.layout()
    shapes, strides = _flat_modes(layout)
    basis = any(isinstance(d, ScaledBasis) for d in strides)
    if basis:
        cols = _basis_columns(strides)
        outs = []
        for c in cols:
            sub = [int(d.value) if isinstance(d, ScaledBasis) and d.modes[0] == c else 0 for d in strides]
            outs.append(_eval_int(shapes, sub, idx))
        return np.stack(outs, axis=-1)
    return _eval_int(shapes, [int(d) for d in strides], idx)


def _eval_int(shapes, strides, idx):
    n = len(shapes)
    if idx is None:
        if n == 0:
            return np.zeros(1, dtype=np.int64)
        acc = np.arange(shapes[-1], dtype=np.int64) * strides[-1]
        for k in range(n - 2, -1, -1):
            acc = np.add.outer(acc, np.arange(shapes[k], dtype=np.int64) * strides[k])
        return acc.reshape(-1)
    idx = np.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise bad_argument("idx", idx.dtype, "expected integer coordinates")
    q = idx.astype(np.int64, copy=True)
    out = np.zeros(q.shape, dtype=np.int64)
    for k in range(n):
        s, d = shapes[k], strides[k]
        if k == n - 1:
            out += q * d
            break
        if s == 1:
            continue
        if s & (s - 1) == 0:  # power of two: shift and mask
            sh = s.bit_length() - 1
            if d:
                out += (q & (s - 1)) * d
            q >>= sh
        else:
            q, r = np.divmod(q, s)
            if d:
                out += r * d
    return out


def coordinates(shape, idx=None):
    """The natural coordinates of 1-D indices within shape, one column per flattened mode (colex order)."""
    fs = [int(s) for s in it.flatten_to_tuple(shape)]
    total = 1
    for s in fs:
        total *= s
    q = np.arange(total, dtype=np.int64) if idx is None else np.asarray(idx, dtype=np.int64).copy()
    cols = []
    for k, s in enumerate(fs):
        if k == len(fs) - 1:
            cols.append(q)
        else:
            q, r = np.divmod(q, s)
            cols.append(r)
    return np.stack(cols, axis=-1)
