"""Warp-level mma.sync: fragments in, fragments out, arithmetic from flashsim.numerics (bit-exact).

``mma(a, b, c, shape=..., atype=..., ctype=...)`` takes the registers a warp holds (PTX ISA, "Matrix
Fragments for mma.m16n8k16 with floating point type" / "... mma.m16n8k8"), unpacks them into row-major
tiles with :mod:`flashsim.warp.fragments`, calls ``flashsim.numerics.mma`` (the fused sm_90 model) and
packs D the way the device leaves it in registers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashsim.errors import bad_argument
from flashsim.smem import Event
from flashsim.warp.fragments import FRAGMENTS, pack, unpack
from flashsim.warp.state import regs_array, restore

__all__ = ["SHAPES", "mma", "mma_op"]

SHAPES = {"m16n8k16": 16, "m16n8k8": 8}


def mma_op(shape: str, atype: str, ctype: str) -> str:
    return f"mma.sync.aligned.{shape}.row.col.{ctype}.{atype}.{atype}.{ctype}"


def mma(a: Any, b: Any, c: Any, *, shape: str = "m16n8k16", atype: str = "f16", ctype: str = "f32",
        arch: str = "sm_90", model=None, tag: str | None = None) -> tuple[np.ndarray, Event]:
    """D fragments of ``mma.sync.aligned.<shape>.row.col.<ctype>.<atype>.<atype>.<ctype>``.

    a: (.., 32, 4) uint32 for m16n8k16 (2 for m16n8k8); b: (.., 32, 2) (1 for k8); c: (.., 32, 4)
    for an f32 accumulator (one f32 per register) or (.., 32, 2) for f16 (f16x2 registers); leading
    axes (ctas, warps) or none. Returns D with c's layout, and the event.
    """
    if shape not in SHAPES:
        raise bad_argument("shape", shape, f"expected one of {sorted(SHAPES)}")
    if ctype not in ("f32", "f16"):
        raise bad_argument("ctype", ctype, "the accumulator is 'f32' or 'f16'")
    if atype not in ("f16", "bf16"):
        raise bad_argument("atype", atype, "A and B are 'f16' or 'bf16'")
    key = f"mma.{shape}"
    fa, fb, fc = FRAGMENTS[(key, "A")], FRAGMENTS[(key, "B")], FRAGMENTS[(key, f"C.{ctype}")]
    ra, lead = regs_array("a", a, fa.regs)
    rb, _ = regs_array("b", b, fb.regs, lead=lead)
    rc, _ = regs_array("c", c, fc.regs, lead=lead)
    from flashsim.numerics.mma import mma as mma_tiles  # numba: imported on first use

    d = mma_tiles(unpack(fa, ra), unpack(fb, rb), unpack(fc, rc), k=SHAPES[shape], atype=atype, ctype=ctype,
                  arch=arch, model=model)
    op = mma_op(shape, atype, ctype)
    return restore(pack(fc, d), lead), Event(op, op if tag is None else tag)
