"""ld.shared / st.shared (8..128 bits) and cp.async with its groups (PTX ISA "Data Movement and
Conversion Instructions": ld, st, cp.async, cp.async.commit_group, cp.async.wait_group / wait_all).

Registers are uint32: an 8/16-bit load zero-extends (``signed=True``: sign-extends, as ld.shared.s8/s16
into a 32-bit register); a 64/128-bit access moves 2/4 consecutive registers (.v2.u32/.v4.u32), the
first register at the lowest address. Every address is a byte offset in the CTA's shared memory and
must be aligned to the access width (else a misaligned-address fault, as on the device).

cp.async (sm_80+): ``cp-size`` 4, 8 or 16 bytes (``.cg`` only 16); ``src-size`` < cp-size copies that
many bytes and fills the rest of the destination with zeros; a src-size above cp-size is undefined
(refused). The copy is asynchronous: its bytes reach shared memory only when the copying thread's
``cp.async.wait_group N`` (or ``wait_all``) covers its group, so a read before that sees the old bytes
here, and is reported as a hazard. ``wait_all`` is ``commit_group; wait_group 0``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashsim.errors import SimulatedFault, bad_argument
from flashsim.smem import Event, SharedMemory
from flashsim.warp.state import LANES, lane_array, regs_array, restore

__all__ = ["cp_async", "cp_async_commit_group", "cp_async_wait_all", "cp_async_wait_group", "ld_shared",
           "st_shared"]

_BITS = (8, 16, 32, 64, 128)


def _check_smem(smem: Any) -> None:
    if not isinstance(smem, SharedMemory):
        raise bad_argument("smem", type(smem).__name__, "expected a flashsim.smem.SharedMemory")


def _width(bits: int) -> int:
    if bits not in _BITS:
        raise bad_argument("bits", bits, f"ld/st.shared move {', '.join(map(str, _BITS))} bits")
    return bits // 8


def _lanes(smem: SharedMemory, addr: Any, active: Any):
    a, lead = lane_array("addr", addr)
    smem.check_shape(a.shape[:2])
    act = np.ones(a.shape, bool) if active is None else lane_array("active", active, kind="bool", lead=lead)[0]
    act = np.broadcast_to(act, a.shape)
    return a, lead, act


def _op(kind: str, bits: int, signed: bool = False) -> str:
    if bits <= 32:
        t = ("s" if signed else "u") + str(bits)
        return f"{kind}.shared.{t}"
    return f"{kind}.shared.v{bits // 32}.u32"


def ld_shared(smem: SharedMemory, addr: Any, *, bits: int = 32, active: Any = None, signed: bool = False,
              tag: str | None = None) -> tuple[np.ndarray, Event]:
    """``ld.shared`` of ``bits`` per lane: registers (.., 32, max(1, bits/32)) uint32 and the event.
    Inactive lanes get zeros."""
    _check_smem(smem)
    width = _width(bits)
    a, lead, act = _lanes(smem, addr, active)
    op = _op("ld", bits, signed)
    smem.check_access(a, width, act, op)
    safe = np.where(act, a, 0)
    cta = np.arange(a.shape[0])[:, None, None]
    data = smem.data
    if width >= 4:
        k = width // 4
        words = (safe >> 2)[..., None] + np.arange(k)
        regs = data.view(np.uint32)[cta[..., None], words]
    else:
        if width == 1:
            v = data[cta, safe]
            v = v.view(np.int8).astype(np.int32).view(np.uint32) if signed else v.astype(np.uint32)
        else:
            v = data.view(np.uint16)[cta, safe >> 1]
            v = v.view(np.int16).astype(np.int32).view(np.uint32) if signed else v.astype(np.uint32)
        regs = v[..., None]
    regs = np.where(act[..., None], regs, np.uint32(0)).astype(np.uint32)
    tag = op if tag is None else tag
    wf, ideal = smem.account(tag, "ld", a, width, act)
    races = smem.on_read(a, width, act, tag) if smem.watching else ()
    return restore(regs, lead), Event(op, tag, "ld", width, a, act, wf, ideal, races)


def st_shared(smem: SharedMemory, addr: Any, regs: Any, *, bits: int = 32, active: Any = None,
              tag: str | None = None) -> Event:
    """``st.shared`` of ``bits`` per lane from registers (.., 32, max(1, bits/32)) uint32 (the low bits
    for 8/16-bit stores). Lanes storing to the same bytes: one wins (the device does not say which;
    here the highest (cta, warp, lane))."""
    _check_smem(smem)
    width = _width(bits)
    a, lead, act = _lanes(smem, addr, active)
    nregs = max(1, width // 4)
    r, _ = regs_array("regs", regs, nregs, lead=lead if lead != () else None)
    r = np.broadcast_to(r, a.shape + (nregs,))
    op = _op("st", bits)
    smem.check_access(a, width, act, op)
    tag = op if tag is None else tag
    races = smem.on_write(a, width, act, tag) if smem.watching else ()
    c, w, l = np.nonzero(act)
    aa = a[c, w, l]
    vals = r[c, w, l]
    data = smem.data
    if width >= 4:
        k = width // 4
        data.view(np.uint32)[c[:, None], (aa >> 2)[:, None] + np.arange(k)] = vals
    elif width == 2:
        data.view(np.uint16)[c, aa >> 1] = (vals[:, 0] & 0xFFFF).astype(np.uint16)
    else:
        data[c, aa] = (vals[:, 0] & 0xFF).astype(np.uint8)
    wf, ideal = smem.account(tag, "st", a, width, act)
    return Event(op, tag, "st", width, a, act, wf, ideal, races)


def cp_async(smem: SharedMemory, gmem: Any, dst: Any, src: Any, *, cp_size: int = 16, src_size: Any = None,
             cache: str = "ca", active: Any = None, tag: str | None = None) -> Event:
    """``cp.async.<cache>.shared.global [dst], [src], cp_size{, src_size}`` for every active lane.

    gmem: the global memory as a 1-D uint8 array; src: byte offsets into it; dst: shared byte
    addresses; src_size: None (= cp_size), an int or one per lane. The bytes are read now and land in
    shared memory when a wait covers the copy's group.
    """
    _check_smem(smem)
    if cache not in ("ca", "cg"):
        raise bad_argument("cache", cache, "expected 'ca' or 'cg'")
    if cp_size not in (4, 8, 16):
        raise bad_argument("cp_size", cp_size, "cp.async copies 4, 8 or 16 bytes")
    if cache == "cg" and cp_size != 16:
        raise bad_argument("cp_size", cp_size, "cp.async.cg supports only cp-size 16")
    g = np.asarray(gmem)
    if g.dtype != np.uint8 or g.ndim != 1:
        raise bad_argument("gmem", getattr(g, "shape", g), "expected global memory as a 1-D uint8 array")
    d, lead, act = _lanes(smem, dst, active)
    s, _ = lane_array("src", src, lead=lead)
    s = np.broadcast_to(s, d.shape)
    if src_size is None:
        ss = np.full(d.shape, cp_size, np.int64)
    elif isinstance(src_size, (int, np.integer)) and not isinstance(src_size, bool):
        ss = np.full(d.shape, int(src_size), np.int64)
    else:
        ss = np.broadcast_to(lane_array("src_size", src_size, lead=lead)[0], d.shape)
    if (act & ((ss < 0) | (ss > cp_size))).any():
        bad = ss[act & ((ss < 0) | (ss > cp_size))][0]
        raise bad_argument("src_size", int(bad), f"must lie in 0..cp_size={cp_size} (a larger src-size is undefined)")
    op = f"cp.async.{cache}.shared.global"
    smem.check_access(d, cp_size, act, op)
    bad_align = act & ((s & (cp_size - 1)) != 0)
    if bad_align.any():
        c_, w_, l_ = (int(v) for v in np.argwhere(bad_align)[0])
        raise SimulatedFault("misaligned global address", cta=c_, warp=w_, lane=l_, addr=int(s[c_, w_, l_]),
                             detail=f"{op} needs {cp_size}-byte alignment")
    bad_oob = act & (ss > 0) & ((s < 0) | (s + ss > g.size))
    if bad_oob.any():
        c_, w_, l_ = (int(v) for v in np.argwhere(bad_oob)[0])
        raise SimulatedFault("out-of-bounds global address", cta=c_, warp=w_, lane=l_,
                             addr=int(s[c_, w_, l_]) & 0xFFFFFFFFFFFFFFFF,
                             detail=f"{op} reads {int(ss[c_, w_, l_])} bytes; global memory has {g.size}")
    tag = op if tag is None else tag
    races = smem.on_write(d, cp_size, act, tag, op="cp.async") if smem.watching else ()
    c, w, l = np.nonzero(act)
    k = np.arange(cp_size)
    sa = s[c, w, l]
    n_src = ss[c, w, l]
    take = k[None, :] < n_src[:, None]  # bytes past src-size are zero-filled
    payload = np.where(take, g[np.where(take, sa[:, None] + k[None, :], 0)], 0).astype(np.uint8)
    smem.add_pending(c, w, l, d[c, w, l], payload, tag)
    # counted as the SASS LDGSTS ptxas makes of it: a src-size strictly between 0 and cp-size needs the
    # .ZFILL form (a run-time size); 0 or cp-size in every lane is taken for the predicate form
    zfill = bool((act & (ss > 0) & (ss < cp_size)).any())
    wf, ideal = smem.account(tag, "ldgsts", d, cp_size, act, src=s, reads=act & (ss > 0), bypass=cache == "cg",
                             zfill=zfill)
    return Event(op, tag, "ldgsts", cp_size, d, act, wf, ideal, races)


def _threads(smem: SharedMemory, active: Any) -> np.ndarray:
    shape = (smem.ctas, smem.warps, LANES)
    if active is None:
        return np.ones(shape, bool)
    arr = np.asarray(active)
    if arr.dtype != np.bool_:
        raise bad_argument("active", getattr(arr, "shape", arr), "expected bools: per warp (ctas, warps) or per lane")
    if arr.shape == shape[:2]:
        arr = arr[..., None]
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise bad_argument("active", arr.shape, f"expected shape {shape[:2]} or {shape}") from None


def cp_async_commit_group(smem: SharedMemory, *, active: Any = None, tag: str | None = None) -> Event:
    """``cp.async.commit_group``: close each active thread's open group (an empty one if it has none)."""
    _check_smem(smem)
    act = _threads(smem, active)
    smem.cp_committed[act] += 1
    op = "cp.async.commit_group"
    return Event(op, op if tag is None else tag)


def cp_async_wait_group(smem: SharedMemory, n: int, *, active: Any = None, tag: str | None = None) -> Event:
    """``cp.async.wait_group n``: every group of an active thread but its ``n`` most recent committed
    ones completes; its bytes become visible."""
    _check_smem(smem)
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise bad_argument("n", n, "expected an int >= 0")
    act = _threads(smem, active)
    threshold = np.where(act, smem.cp_committed - int(n), -1)
    smem.complete(threshold)
    op = f"cp.async.wait_group {int(n)}"
    return Event(op, op if tag is None else tag)


def cp_async_wait_all(smem: SharedMemory, *, active: Any = None, tag: str | None = None) -> Event:
    """``cp.async.wait_all`` = ``cp.async.commit_group; cp.async.wait_group 0``."""
    cp_async_commit_group(smem, active=active)
    cp_async_wait_group(smem, 0, active=active)
    op = "cp.async.wait_all"
    return Event(op, op if tag is None else tag)
