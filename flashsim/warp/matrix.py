"""ldmatrix / stmatrix / movmatrix (.m8n8 .b16): 8x8 matrices between shared memory and registers.

PTX ISA, "Warp-level matrix load instruction: ldmatrix", "... store instruction: stmatrix" (sm_90),
"... transpose instruction: movmatrix". For ``.xN`` (N = 1, 2, 4 matrices), lanes 8j..8j+7 give the
16-byte-aligned addresses of rows 0..7 of matrix j (lanes past 8N are ignored); lane T receives in
register j the elements (row T/4, columns 2(T%4), 2(T%4)+1) of matrix j, the lower column in bits 0-15::

    matrix j in shared memory (row r at addr[8j + r]):     lane T, register j:
        r\\c   0   1   2   3   4   5   6   7
        0    T0  T0  T1  T1  T2  T2  T3  T3                 .trans: (row 2(T%4), col T/4) in bits 0-15,
        1    T4  T4  T5  T5  ...                                    (row 2(T%4)+1, col T/4) in bits 16-31
        ...
        7    T28 T28 T29 T29 T30 T30 T31 T31

A row address that is not 16-byte aligned is a fault (misaligned address) on the device, reported here
the same way; so is a row outside the CTA's shared memory. The ``.aligned`` qualifier means every lane
of the warp executes the instruction: ``active`` is one bool per warp.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from flashsim.errors import SimulatedFault, bad_argument
from flashsim.smem import Event, SharedMemory
from flashsim.warp.fragments import FRAGMENTS, pack, unpack
from flashsim.warp.state import lane_array, regs_array, restore, warp_mask

__all__ = ["ldmatrix", "movmatrix", "stmatrix", "ldmatrix_op", "stmatrix_op"]

_M8N8 = FRAGMENTS[("ldmatrix.m8n8", "M")]


def ldmatrix_op(num: int, trans: bool) -> str:
    return f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"


def stmatrix_op(num: int, trans: bool) -> str:
    return f"stmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"


@numba.njit(cache=True, nogil=True)
def _first_bad_row(cta, addr, num, size):  # pragma: no cover - numba
    """The first row address (i * 32 + row) that is misaligned or out of bounds, or -1."""
    for i in range(addr.shape[0]):
        if cta[i] < 0:
            continue
        for r in range(8 * num):
            a = addr[i, r]
            if (a & 15) != 0 or a < 0 or a + 16 > size:
                return i * 32 + r
    return -1


@numba.njit(cache=True, nogil=True)
def _ldsm(d32, d16, cta, addr, num, trans, size, out):  # pragma: no cover - numba
    """Gather ``num`` matrices per warp instruction into out (n, 32, num); returns the first bad row
    (i * 32 + row) or -1."""
    bad = _first_bad_row(cta, addr, num, size)
    if bad >= 0:
        return bad
    n = addr.shape[0]
    for i in range(n):
        c = cta[i]
        if c < 0:
            continue
        for j in range(num):
            if not trans:
                for r in range(8):
                    w = addr[i, 8 * j + r] >> 2
                    for q in range(4):
                        out[i, 4 * r + q, j] = d32[c, w + q]
            else:
                for t in range(32):
                    row = 8 * j + 2 * (t & 3)
                    col = t >> 2
                    lo = np.uint32(d16[c, (addr[i, row] >> 1) + col])
                    hi = np.uint32(d16[c, (addr[i, row + 1] >> 1) + col])
                    out[i, t, j] = lo | (hi << np.uint32(16))
    return -1


@numba.njit(cache=True, nogil=True)
def _stsm(d32, d16, cta, addr, num, trans, size, regs):  # pragma: no cover - numba
    bad = _first_bad_row(cta, addr, num, size)
    if bad >= 0:
        return bad
    n = addr.shape[0]
    for i in range(n):
        c = cta[i]
        if c < 0:
            continue
        for j in range(num):
            if not trans:
                for r in range(8):
                    w = addr[i, 8 * j + r] >> 2
                    for q in range(4):
                        d32[c, w + q] = regs[i, 4 * r + q, j]
            else:
                for t in range(32):
                    row = 8 * j + 2 * (t & 3)
                    col = t >> 2
                    v = regs[i, t, j]
                    d16[c, (addr[i, row] >> 1) + col] = np.uint16(v & np.uint32(0xFFFF))
                    d16[c, (addr[i, row + 1] >> 1) + col] = np.uint16(v >> np.uint32(16))
    return -1


def _check_num(num: int, trans: bool) -> None:
    if num not in (1, 2, 4):
        raise bad_argument("num", num, "ldmatrix/stmatrix move 1, 2 or 4 matrices (.x1, .x2, .x4)")
    if not isinstance(trans, (bool, np.bool_)):
        raise bad_argument("trans", trans, "expected a bool")


def _prepare(smem: SharedMemory, addr: Any, active: Any, num: int):
    if not isinstance(smem, SharedMemory):
        raise bad_argument("smem", type(smem).__name__, "expected a flashsim.smem.SharedMemory")
    a, lead = lane_array("addr", addr)
    smem.check_shape(a.shape[:2])
    act = warp_mask("active", active, a.shape[:2])
    cta = np.where(act, np.arange(a.shape[0])[:, None], -1).reshape(-1).astype(np.int64)
    a2 = np.ascontiguousarray(a.reshape(-1, 32))
    lanes_active = np.broadcast_to(act[:, :, None], a.shape) & (np.arange(32) < 8 * num)
    return a, a2, lead, act, cta, lanes_active


def _fault(bad: int, a2: np.ndarray, warps: int, op: str) -> SimulatedFault:
    i, lane = divmod(bad, 32)
    c, w = divmod(i, warps)
    addr = int(a2[i, lane])
    if addr & 15:
        return SimulatedFault("misaligned shared address", cta=c, warp=w, lane=lane, addr=addr & 0xFFFFFFFFFFFFFFFF,
                              detail=f"{op}: row addresses must be 16-byte aligned")
    return SimulatedFault("out-of-bounds shared address", cta=c, warp=w, lane=lane, addr=addr & 0xFFFFFFFFFFFFFFFF,
                          detail=f"{op}: a 16-byte row at {addr} is outside the CTA's shared memory")


def ldmatrix(smem: SharedMemory, addr: Any, *, num: int = 4, trans: bool = False, active: Any = None,
             tag: str | None = None) -> tuple[np.ndarray, Event]:
    """``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``: registers (.., 32, num) uint32 and the event.

    ``addr``: byte addresses in the CTA's shared memory, (32,) or (ctas, warps, 32); ``active``: one
    bool per warp (default all). Inactive warps get zero registers and touch nothing.
    """
    _check_num(num, trans)
    op = ldmatrix_op(num, trans)
    a, a2, lead, act, cta, lanes_active = _prepare(smem, addr, active, num)
    out = np.zeros((a2.shape[0], 32, num), np.uint32)
    bad = _ldsm(smem.data.view(np.uint32), smem.data.view(np.uint16), cta, a2, num, bool(trans), smem.size, out)
    if bad >= 0:
        raise _fault(int(bad), a2, a.shape[1], op)
    tag = op if tag is None else tag
    wf, ideal = smem.account(tag, "ldsm", a, 16, lanes_active, num=num)
    races = smem.on_read(a, 16, lanes_active, tag) if smem.watching else ()
    regs = out.reshape(a.shape[:2] + (32, num))
    ev = Event(op, tag, "ldsm", 16, a, lanes_active, wf, ideal, races)
    return restore(regs, lead), ev


def stmatrix(smem: SharedMemory, addr: Any, regs: Any, *, num: int = 4, trans: bool = False, active: Any = None,
             tag: str | None = None) -> Event:
    """``stmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16`` (sm_90): the inverse of ldmatrix.

    Rows that two lanes name twice are written by one of them (the device does not say which; here
    the later matrix/lane wins).
    """
    _check_num(num, trans)
    op = stmatrix_op(num, trans)
    a, a2, lead, act, cta, lanes_active = _prepare(smem, addr, active, num)
    r, rlead = regs_array("regs", regs, num, lead=None)
    if r.shape[:2] != a.shape[:2] and not (rlead == () and lead == ()):
        raise bad_argument("regs", f"(ctas, warps) = {r.shape[:2]}", f"differs from addr's {a.shape[:2]}")
    r2 = np.ascontiguousarray(r.reshape(-1, 32, num))
    tag = op if tag is None else tag
    # check faults before any byte is written (the device faults the whole instruction)
    races = smem.on_write(a, 16, lanes_active, tag) if smem.watching else ()
    bad = _stsm(smem.data.view(np.uint32), smem.data.view(np.uint16), cta, a2, num, bool(trans), smem.size, r2)
    if bad >= 0:
        raise _fault(int(bad), a2, a.shape[1], op)
    wf, ideal = smem.account(tag, "stsm", a, 16, lanes_active, num=num)
    return Event(op, tag, "stsm", 16, a, lanes_active, wf, ideal, races)


def movmatrix(regs: Any, *, tag: str | None = None) -> tuple[np.ndarray, Event]:
    """``movmatrix.sync.aligned.m8n8.trans.b16``: the 8x8 .b16 matrix held as an ldmatrix fragment
    (one register per lane; shape (32,), (32, 1), (ctas, warps, 32) or (ctas, warps, 32, 1)),
    transposed, in the same fragment layout."""
    x = np.asarray(regs)
    squeeze = x.ndim in (1, 3)
    r, lead = regs_array("regs", x[..., None] if squeeze else x, 1)
    tile = unpack(_M8N8, r)
    out = pack(_M8N8, np.ascontiguousarray(np.swapaxes(tile, -1, -2)))
    out = restore(out, lead)
    op = "movmatrix.sync.aligned.m8n8.trans.b16"
    return (out[..., 0] if squeeze else out), Event(op, op if tag is None else tag)
