"""The Tensor Memory Accelerator in SASS: UTMALDG (tensor loads), UTMASTG (stores), UTMAREDG (reductions),
UTMAPF (L2 prefetch) and UTMACCTL (tensor-map fences and prefetch).

What each PTX instruction becomes (NVRTC 13.0, sm_90 / sm_90a; gpu/kernels/probe_tma.cu shows them):

=============================================================  =================================================
cp.async.bulk.tensor.Nd.shared::cluster.global.tile             UTMALDG.ND [URd], [URm]  (URd: shared destination,
  .mbarrier::complete_tx::bytes [d], [map, {c0..}], [bar]        URd+1: the mbarrier, URd+2..: the coordinates;
                                                                URm:URm+1: the tensor map's generic address)
cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group            UTMASTG.ND [URs], [URm]  (URs+1..: coordinates)
  [map, {c0..}], [s]
cp.reduce.async.bulk.tensor.Nd.global.shared::cta.<op>.tile     UTMAREDG.ND.<OP> [URs], [URm]  (OP: ADD MIN MAX
  .bulk_group [map, {c0..}], [s]                                 INC DEC AND OR XOR)
cp.async.bulk.prefetch.tensor.Nd.L2.global.tile [map, {c0..}]   UTMAPF.L2.ND [URc], [URm]  (URc..: coordinates)
cp.async.bulk.commit_group / wait_group{.read} n                UTMACMDFLUSH / DEPBAR.LE SB0, n (ops_sync, ops_mem)
fence.proxy.tensormap::generic.acquire.* [map], 128             DEPBAR {5,4,3,2,1,0}; UTMACCTL.IV [URm]
prefetch.tensormap [map]                                        UTMACCTL.PF [URm]
.multicast::cluster, .im2col forms                              UTMALDG.ND.MULTICAST / .IM2COL [..], [..], URx
.L2::cache_hint forms                                           a third operand desc[URx] (cache policy)
=============================================================  =================================================

A uniform instruction issues one copy per warp that executes it (ptxas wraps each in an ELECT loop that
issues it once per active thread, as PTX's per-thread semantics require). The tensor map is read from the
generic address URm:URm+1 when the instruction executes: the parameter window of a __grid_constant__
parameter (flashsim.sass.launch.PARAM_WINDOW) or global memory; its 128 bytes become a
:class:`flashsim.sass.tensormap.TensorMap` through ``TensorMap.from_bytes``. Where every element goes is
:mod:`flashsim.sass.tensormap` (box_layout, load_box, store_box, reduce_elements). A load reads global memory
when issued and lands later, with a complete-tx of the box's bytes on its mbarrier
(AsyncState.issue_tensor_copy); stores and reductions complete when issued, so their bulk-group waits have
nothing left to wait for.

Checks (faults name cta/warp/lane, the PC and the field): the tensor map 64-byte aligned (CUDA Driver API,
cuTensorMapEncodeTiled: "tensorMap address must be aligned to 64 bytes"; PTX ISA, "Tensor-map": the object
lives in the .param, .const or .global space); the shared box 128-byte aligned for every swizzle mode (CUDA
C++ Programming Guide, "TMA Swizzle" table; the swizzle pattern follows the absolute address, so 1024 is not
required) and inside the CTA's shared memory; the mbarrier 8-byte aligned in the CTA's shared memory; every
in-bound element inside a global allocation; and the starts the H100 stops with an illegal instruction
(``tensormap.illegal_start``: dimension 0 not 16-byte aligned; a store or reduction at a negative
coordinate). Interleaved maps move chunks (``tensormap.INTERLEAVE_CHUNK``, measured). Multicast, im2col, cache
hints and clusters of more than one CTA raise NotImplementedError.
"""

from __future__ import annotations

import numpy as np

from flashsim.sass import tensormap as T
from flashsim.sass.isa import RZ, URZ
from flashsim.sass.launch import LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from flashsim.sass.machine import fault, warp_lanes, warps_of
from flashsim.sass.program import Ctx, semantic

__all__ = ["MAP_ALIGN", "read_tensor_map"]

MAP_ALIGN = 64  # "tensorMap address must be aligned to 64 bytes"
MAP_BYTES = 128
_REDUCE = {"ADD": "add", "MIN": "min", "MAX": "max", "INC": "inc", "DEC": "dec", "AND": "and", "OR": "or",
           "XOR": "xor"}
_UNMODELLED = {"MULTICAST": "multicast (.multicast::cluster)", "IM2COL": "im2col mode",
               "IM2COL_W": "im2col::w mode", "GATHER4": "tile::gather4 mode"}


def _rank(ctx: Ctx) -> int:
    """The ND modifier, checked; other modifiers not modelled raise NotImplementedError."""
    nd = [m for m in ctx.ins.mods if len(m) == 2 and m[1] == "D" and m[0] in "12345"]
    ctx.need(len(nd) == 1, f"{ctx.ins.name} (no 1D..5D modifier)")
    for m in ctx.ins.mods:
        if m in _UNMODELLED:
            raise ctx.unsupported(f"{ctx.ins.name}: {_UNMODELLED[m]}")
    return int(nd[0][0])


def _ureg(ctx: Ctx, i: int, what: str) -> tuple[int, int]:
    """A uniform memory operand [URn(+off)]: (n, off)."""
    op = ctx.ops[i]
    ctx.need(op.kind == "mem" and op.reg == RZ and op.ureg != URZ and not op.suffix and op.desc < 0,
             f"operand {op.text} as {what}")
    return op.ureg, op.value


def _operands(ctx: Ctx, what_first: str) -> tuple[tuple[int, int], tuple[int, int]]:
    if len(ctx.ops) != 2:
        extra = ctx.ops[2].text if len(ctx.ops) > 2 else "none"
        raise ctx.unsupported(f"{ctx.ins.text} (operand {extra}: cache hints, multicast masks and im2col offsets)")
    return _ureg(ctx, 0, what_first), _ureg(ctx, 1, "the tensor map's address")


def _u64(m, u: int, off: int, a: int, w: int) -> int:
    return (int(m.UR[u][a, w]) | (int(m.UR[u + 1][a, w]) << 32)) + off & 0xFFFFFFFFFFFFFFFF


def _coords(m, first: int, rank: int, a: int, w: int) -> tuple[int, ...]:
    """Coordinates from URfirst.. as signed 32-bit integers."""
    return tuple(int(np.int32(np.uint32(m.UR[first + i][a, w]))) for i in range(rank))


def read_tensor_map(m, ins, mask, addr: int) -> bytes:
    """The 128 bytes of the tensor map at generic address ``addr``: from the parameter window (a
    __grid_constant__ parameter) or global memory; faults for a misaligned or unreadable address."""
    if addr % MAP_ALIGN:
        raise fault("misaligned tensor map address", m, ins, mask, np.uint64(addr),
                    f"the tensor map (operand 2) must be {MAP_ALIGN}-byte aligned")
    if PARAM_WINDOW <= addr < PARAM_WINDOW + WINDOW_SIZE:
        raw = m.launch.param_read(addr - PARAM_WINDOW, MAP_BYTES)
        if raw is None:
            raise fault("out-of-bounds parameter address", m, ins, mask, np.uint64(addr),
                        f"the tensor map's {MAP_BYTES} bytes are not among the kernel's parameters")
        return raw
    if SHARED_WINDOW <= addr < SHARED_WINDOW + WINDOW_SIZE or LOCAL_WINDOW <= addr < LOCAL_WINDOW + WINDOW_SIZE:
        raise fault("tensor map outside .param, .const and .global", m, ins, mask, np.uint64(addr),
                    "a tensor copy reads its tensor map from the parameter, constant or global space (PTX ISA)")
    a = np.array([addr], np.uint64)
    idx = m.mem.locate(a, MAP_BYTES)
    if idx[0] < 0:
        raise fault("out-of-bounds global address", m, ins, mask, np.uint64(addr),
                    f"the tensor map's {MAP_BYTES} bytes {m.mem.describe(addr)}")
    return _gather_bytes(m, np.uint64(addr) + np.arange(MAP_BYTES, dtype=np.uint64)).tobytes()


def _tensor_map(m, ins, mask, addr: int, rank: int) -> T.TensorMap:
    raw = read_tensor_map(m, ins, mask, addr)
    try:
        tm = T.TensorMap.from_bytes(raw, derived=False)
    except NotImplementedError as exc:
        raise NotImplementedError(f"{exc}: {ins.where()}") from None
    if tm.rank != rank:
        raise fault("tensor map misuse", m, ins, mask, np.uint64(addr),
                    f"a {rank}D instruction with a tensor map of rank {tm.rank}")
    return tm


def _check_start(m, ins, mask, tm: T.TensorMap, coords, store: bool) -> None:
    why = T.illegal_start(tm, coords, store)
    if why is not None:
        raise fault("illegal instruction", m, ins, mask, np.int64(coords[0]),
                    f"{why} (the H100 stops such a copy: flashsim.sass.tensormap.illegal_start)")


def _gather_bytes(m, addrs: np.ndarray) -> np.ndarray:
    """Global bytes at ``addrs`` (located: every one inside an allocation)."""
    idx = m.mem.locate(addrs, 1)
    return (m.mem.gather(addrs, idx, 1)[:, 0] & 0xFF).astype(np.uint8)


def _global_elements(m, ins, mask, box_addr: np.ndarray, es: int, coords: np.ndarray, write: bool):
    """Locate element addresses (each ``es`` bytes); a fault names the first element outside every allocation."""
    idx = m.mem.locate(box_addr, es)
    if (idx < 0).any():
        j = int(np.argmax(idx < 0))
        raise fault("out-of-bounds global address", m, ins, mask, box_addr[j],
                    f"the tensor {'store' if write else 'load'}'s element at tensor coordinates "
                    f"{tuple(int(c) for c in coords[j])}: {es} bytes {m.mem.describe(int(box_addr[j]))}")
    return idx


def _elements_read(m, addrs: np.ndarray, idx: np.ndarray, es: int) -> np.ndarray:
    """(k, es) bytes of the elements at ``addrs``."""
    got = m.mem.gather(addrs, idx, es)
    if es >= 4:
        return np.ascontiguousarray(got).view(np.uint8).reshape(-1, es)
    return (got[:, :1].astype(np.uint32).view(np.uint8)[:, :es]).reshape(-1, es).copy()


def _elements_write(m, addrs: np.ndarray, idx: np.ndarray, data: np.ndarray, es: int) -> None:
    if len(addrs) == 0:
        return
    if es >= 4:
        words = np.ascontiguousarray(data, np.uint8).reshape(-1, es).view(np.uint32)
    else:
        words = np.zeros((len(addrs), 1), np.uint32)
        words.view(np.uint8)[:, :es] = np.asarray(data, np.uint8).reshape(-1, es)
    m.mem.scatter(addrs, idx, words, es)


def _check_box(m, ins, mask, tm: T.TensorMap, start: int, what: str) -> T.Box:
    if start % T.SHARED_ALIGN:
        raise fault("misaligned shared address", m, ins, mask, np.int64(start),
                    f"the {what} of a tensor copy must be {T.SHARED_ALIGN}-byte aligned (swizzle {tm.swizzle.name})")
    if start >= (1 << 24):
        raise NotImplementedError(f"a tensor copy to shared::cluster address {start:#x} of another CTA: clusters of "
                                  f"more than one CTA are not modelled: {ins.where()}")
    return start


def _box_in_shared(m, ins, mask, box: T.Box, start: int, what: str, keep: np.ndarray | None = None) -> np.ndarray:
    """The box's shared bytes, all of which a load writes (out-of-bound units filled); a store or reduction
    reads only the units it writes (``keep``): on the H100 an interleaved reduction whose out-of-bound units lay
    past the allocation ran (tma_interleaved.npz, 2 cases), every load whose box did stopped (10 cases)."""
    sb = box.shared_bytes()
    chk = sb if keep is None else sb.reshape(len(keep), -1)[keep].reshape(-1)
    if len(chk) and (int(chk.min()) < 0 or int(chk.max()) >= m.smem.size):
        raise fault("out-of-bounds shared address", m, ins, mask, np.int64(start),
                    f"the {what}'s box spans shared bytes {int(chk.min()):#x}..{int(chk.max()):#x}; the CTA has "
                    f"{m.smem.size} bytes")
    return sb


# ------------------------------------------------------------------------------------------------ UTMALDG
@semantic("UTMALDG", family="sync")
def utmaldg(ctx: Ctx):
    rank = _rank(ctx)
    (ud, doff), (um, moff) = _operands(ctx, "the shared destination")
    ins = ctx.ins

    def run(m, ex):
        warps = warps_of(m, ex)
        if not warps.any():
            return
        S = m.async_state()
        for a, w in zip(*np.nonzero(warps)):
            a, w = int(a), int(w)
            mask = warp_lanes(m, a, w)
            dst = int(m.UR[ud][a, w]) + doff
            bar = int(m.UR[ud + 1][a, w])
            full = np.zeros(m.st.shape, np.int64)
            full[a, w] = bar
            S.check(m, ins, mask, full, "cp.async.bulk.tensor's mbarrier", need_init=False)
            tm = _tensor_map(m, ins, mask, _u64(m, um, moff, a, w), rank)
            _check_box(m, ins, mask, tm, dst, "shared destination")
            coords = _coords(m, ud + 2, rank, a, w)
            _check_start(m, ins, mask, tm, coords, False)
            box = T.box_layout(tm, coords, dst)
            sb = _box_in_shared(m, ins, mask, box, dst, "load")
            es = tm.unit_size  # an element, or an interleaved map's chunk

            def read(ga, box=box, es=es, mask=mask):
                return _elements_read(m, ga, _global_elements(m, ins, mask, ga, es, box.coords[box.inside], False), es)

            data = T.load_units(tm, box, read)
            S.issue_tensor_copy(m, a, w, sb, data.reshape(-1), bar, tm.box_bytes, ins.pc)
            S.role(a, w, "producer")
    return run


# ------------------------------------------------------------------------------------------------ UTMASTG / UTMAREDG
def _store_factory(ctx: Ctx, op: str | None):
    rank = _rank(ctx)
    (us, soff), (um, moff) = _operands(ctx, "the shared source")
    ins = ctx.ins

    def run(m, ex):
        warps = warps_of(m, ex)
        if not warps.any():
            return
        for a, w in zip(*np.nonzero(warps)):
            a, w = int(a), int(w)
            mask = warp_lanes(m, a, w)
            src = int(m.UR[us][a, w]) + soff
            tm = _tensor_map(m, ins, mask, _u64(m, um, moff, a, w), rank)
            _check_box(m, ins, mask, tm, src, "shared source")
            coords = _coords(m, us + 1, rank, a, w)
            if op is not None and tm.data_type not in T.REDUCE_TYPES[op]:
                raise NotImplementedError(f"cp.reduce.async.bulk.tensor .{op} on {tm.data_type.name} (not a type the "
                                          "PTX ISA lists for it, or one the H100 stopped) is not modelled: "
                                          f"{ins.where()}")
            _check_start(m, ins, mask, tm, coords, True)
            box = T.box_layout(tm, coords, src)
            es = tm.unit_size
            keep = T.store_mask(tm, box)  # in dimension 0 whole 16-byte chunks (T.STORE_CHUNK)
            _box_in_shared(m, ins, mask, box, src, "store", keep)
            if not keep.any():
                continue
            ga, data, read = T.store_elements(tm, box, m.smem.data[a])
            clocks = m.smem.clocks
            if clocks is not None:  # the store reads shared memory through the async proxy
                col, vec = clocks.issue(a, w, "store")
                m.smem.on_async_read(a, col, vec, read, f"{ins.pc:#06x}")
            idx = _global_elements(m, ins, mask, ga, es, box.coords[keep], True)
            if op is None:
                _elements_write(m, ga, idx, data, es)  # repeated addresses: the later unit wins, as on the H100
                continue
            for lay in T.in_order(ga):  # overlapping units reduce in box order
                try:
                    new = T.reduce_elements(op, tm.data_type, _elements_read(m, ga[lay], idx[lay], es), data[lay])
                except NotImplementedError as exc:
                    raise NotImplementedError(f"{exc}: {ins.where()}") from None
                _elements_write(m, ga[lay], idx[lay], new, es)
    return run


@semantic("UTMASTG", family="sync")
def utmastg(ctx: Ctx):
    # bulk_group completion: the bytes are in global memory when the instruction has executed, so
    # cp.async.bulk.wait_group{.read} (DEPBAR.LE SB0, n) has nothing to wait for
    return _store_factory(ctx, None)


@semantic("UTMAREDG", family="sync")
def utmaredg(ctx: Ctx):
    ops = [m for m in ctx.ins.mods if m in _REDUCE]
    ctx.need(len(ops) == 1, f"{ctx.ins.name} (a reduction operation)")
    return _store_factory(ctx, _REDUCE[ops[0]])


# ------------------------------------------------------------------------------------------------ UTMAPF, UTMACCTL
@semantic("UTMAPF", family="sync")
def utmapf(ctx: Ctx):
    # cp.async.bulk.prefetch.tensor.L2: a hint; the tensor map is read and checked, nothing moves
    rank = _rank(ctx)
    (_uc, _), (um, moff) = _operands(ctx, "the coordinates")
    ins = ctx.ins

    def run(m, ex):
        warps = warps_of(m, ex)
        for a, w in zip(*np.nonzero(warps)):
            _tensor_map(m, ins, warp_lanes(m, int(a), int(w)), _u64(m, um, moff, int(a), int(w)), rank)
    return run


@semantic("UTMACCTL", family="sync")
def utmacctl(ctx: Ctx):
    # UTMACCTL.PF [URm] (prefetch.tensormap): a hint, nothing to do (H100: traces/tma run 3, 36 replayed cases).
    # UTMACCTL.IV [URm] (fence.proxy.tensormap::generic.acquire, after the kernel wrote the map with generic
    # stores): drops the copy engine's cached map. Every TMA instruction here reads the map's 128 bytes from
    # memory when it executes, so no stale copy exists to drop.
    ctx.need(ctx.ins.mods in (("PF",), ("IV",)) and len(ctx.ops) == 1, f"{ctx.ins.text}")
    _ureg(ctx, 0, "the tensor map's address")
    return lambda m, ex: None
