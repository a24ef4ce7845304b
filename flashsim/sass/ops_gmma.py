"""Hopper's warpgroup MMA in SASS: HGMMA / QGMMA (wgmma.mma_async), WARPGROUP.ARRIVE (wgmma.fence) and
WARPGROUP.DEPBAR (wgmma.wait_group), asynchronous as on the device, with the hazards of what is in flight.

What each PTX instruction becomes (NVRTC 13.0, sm_90a; gpu/kernels/probe_wgmma.cu and
gpu/kernels/wgmma_hazards.cu show every row)::

    wgmma.fence.sync.aligned                     WARPGROUP.ARRIVE (ptxas also injects one before a wgmma
                                                 whose registers other code wrote: ptxas info C7519)
    wgmma.mma_async.sync.aligned.m64nNk16        HGMMA.64xNx16.F32 Rd, gdesc[URa], Rc[, p][, gsb0]
      .f32.f16.f16 d, da, db, p, 1, 1, 0, 0      (A's descriptor in URa:URa+1, B's in URa+2:URa+3)
      .f32.bf16.bf16 / .f16.f16.f16              HGMMA.64xNx16.F32.BF16 / HGMMA.64xNx16.F16
      .m64nNk32.<d>.<a>.<b> (e4m3, e5m2)         QGMMA.64xNx32.<D>.<A>.<B>
      A in registers: d, {a0, a1, a2, a3}, db    HGMMA ... Rd, Ra, gdesc[URx], Rc ... (B in URx+2:URx+3;
                                                 URx:URx+1 unused): Ra..Ra+3 hold the warp's A fragment
      imm-trans-a / imm-trans-b 1 (MN-major)     gdesc[URa].tnspA / .tnspB
      imm-scale-a / imm-scale-b -1               gdesc[URa].negA / .negB; register A: -Ra
      scale-d p                                  UPn / !UPn; no operand when ptxas knows p is true; !UPT
                                                 when it is false (then Rc is RZ if C is known zero too)
    wgmma.commit_group.sync.aligned              gsb0 on the last HGMMA / QGMMA of the group; where the group
                                                 has none right before the commit (an empty group, or ptxas
                                                 already waited for the wgmma) a placeholder
                                                 ``HGMMA.64x8x16.F16 RZ, gdesc[URZ], RZ, !UPT, gsb0``
    wgmma.wait_group.sync.aligned N              WARPGROUP.DEPBAR.LE gsb0, N: at most N committed groups
                                                 stay pending. ptxas also injects ``DEPBAR.LE gsb0, 0x0``
                                                 before any instruction that uses a register a wgmma in
                                                 flight writes (ptxas info C7517), and on the way to an EXIT

A chain along K in straight-line code is HGMMAs without gsb0 and one with it (one group); a wgmma in a
branch or a loop that the unroller does not flatten is issued, committed and waited for on its own
(``ARRIVE; HGMMA ... gsb0; DEPBAR.LE gsb0, 0x0``), as ptxas serialises it.

The model (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions": wgmma.fence,
wgmma.mma_async, wgmma.commit_group, wgmma.wait_group, "Register Fragments", "Asynchronous Warpgroup Level
Matrix Shared Memory Layout"):

- A wgmma is issued by each of the four warps 4g..4g+3 of warpgroup g, every thread active. Warp w holds
  rows 16(w % 4)..+15 of A (register form) and of D, so each warp computes its own 16 rows
  (:func:`flashsim.numerics.wgmma.wgmma_warp`) from its A rows, all of B (shared memory, through the
  descriptors: :mod:`flashsim.warp.matrix_desc`) and its C registers, with the fragment tables of
  :func:`flashsim.warp.fragments.wgmma_fragment`.
- Operands are read when the instruction issues; D goes to the registers only when a WARPGROUP.DEPBAR
  retires its group, in issue order (on the device D is only defined after wgmma.wait_group). The
  exception of the PTX ISA: wgmma instructions of the same shape accumulating into the same registers are
  ordered by the hardware, so a wgmma whose C is the D of one still in flight reads that D.
- Modelled bit-exactly (H100: traces/wgmma): f16 / bf16 -> f32, f16 -> f16, every e4m3 / e5m2 pair -> f16
  and -> f32 (the 1-8-13 accumulator of flashsim.numerics.wgmma.FP8_F32), A from shared memory or registers,
  every K-major layout, and MN-major operands (.tnspA / .tnspB: flashsim.warp.matrix_desc, measured by
  gpu/validate_wgmma_mn.py). Not modelled (NotImplementedError naming the form and the PC): descriptors
  with a base offset or reserved bits set.
  The negations (.negA / .negB / -Ra: imm-scale -1) flip the inputs' sign bits: the rule takes products
  exactly and truncates symmetrically, so this is the PTX ISA's "multiply by -1"; no recorded H100 case
  covers it.

Hazards (inside ``flashsim.cuda.checking(races=True)``, reported as :class:`WgmmaHazard`, kind
``"wgmma in flight"``, into the report's race list): while a wgmma is in flight (issued, not yet retired by
a WARPGROUP.DEPBAR), (a) an instruction of its warp that reads or writes one of its D registers (or, register
form, its A registers): another wgmma of the same shape on the same accumulator is the ordered exception;
(b) a warp leaving (EXIT) with a wgmma in flight. ptxas's injected waits keep both out of the code it
builds from PTX (a kernel that reads an accumulator before wgmma.wait_group gets a wait: ptxas info C7517).
A kernel without wgmma pays one attribute test per scheduling step; one with wgmma a call that returns at
once unless a report is collected and a wgmma is in flight.

Shared memory: a wgmma's operand reads are accesses of the async proxy in the race detector
(:meth:`flashsim.smem.SharedMemory.on_async_read`, agent 'wgmma' of the issuing warp), ordered after
the writes that happen before its issue (with a fence.proxy.async by the writing warp for thread
writes), and before what its warp does after the WARPGROUP.DEPBAR that retires it. So a thread
overwriting an operand before that wait (a WAR race: ptxas cannot see it), a producer refilling a stage
whose wgmma have not retired, or a wgmma reading a tile no barrier orders after its copy are reported
as races, whatever the interleaving.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from flashsim.errors import ArgumentError, location
from flashsim.sass.checking import Access, RaceSite
from flashsim.sass.isa import PT, RZ, URZ
from flashsim.sass.machine import EXITED, NONE, fault, lanes_of
from flashsim.sass.program import Ctx, semantic

__all__ = ["WGMMA_IN_FLIGHT", "GmmaForm", "WgmmaHazard", "WgmmaState"]

#: the kind of every hazard of an in-flight wgmma in a checking report
WGMMA_IN_FLIGHT = "wgmma in flight"

_HGMMA_TYPES = {("F32",): ("f16", "f16", "f32"), ("F32", "BF16"): ("bf16", "bf16", "f32"),
                ("F16",): ("f16", "f16", "f16")}
_FP8 = {"E4M3": "e4m3", "E5M2": "e5m2"}
_CTYPES = {"F32": "f32", "F16": "f16"}


@dataclass(frozen=True)
class GmmaForm:
    """One HGMMA / QGMMA form: m64nNkK with its types, where A comes from, and the input negations."""

    n: int
    k: int
    atype: str
    btype: str
    ctype: str
    a_regs: bool
    neg_a: bool = False
    neg_b: bool = False
    mn_a: bool = False  # .tnspA: A M-major (imm-trans-a 1)
    mn_b: bool = False  # .tnspB: B N-major (imm-trans-b 1)

    @property
    def nd(self) -> int:
        """D (and C) registers per thread: N/2 for an f32 accumulator, N/4 for f16x2."""
        return self.n // 2 if self.ctype == "f32" else self.n // 4

    @property
    def esize(self) -> int:
        return 2 if self.k == 16 else 1

    @property
    def ptx(self) -> str:
        from flashsim.numerics.wgmma import wgmma_ptx

        return wgmma_ptx(self.n, self.atype, self.ctype, self.btype)


@dataclass(frozen=True)
class WgmmaHazard(RaceSite):
    """A hazard with a wgmma in flight: ``first`` is the wgmma (issued, not yet retired by a
    WARPGROUP.DEPBAR), ``second`` the access that conflicts with it; ``resource`` names what they share (a
    register, a shared-memory byte, or the warp's exit). ``addr``: the shared byte address, the register
    number, or 0 for an exit."""

    resource: str = ""

    def __str__(self) -> str:
        return (f"{self.kind} hazard on {self.resource}: {self.first}, then {self.second}, before a "
                "WARPGROUP.DEPBAR (wgmma.wait_group) retired the wgmma")


# ------------------------------------------------------------------------------------------------ tables
@functools.lru_cache(maxsize=None)
def _warp_maps(operand: str, dtype: str, n: int | None):
    """(gather, scatter) between one warp's registers of a wgmma operand, viewed as elements in (register,
    lane, element) order, and its 16-row tile in row-major order: the warpgroup table of the PTX ISA
    ("Register Fragments", flashsim.warp.fragments.wgmma_fragment) for warp 0, whose rows are 0..15 (every
    warp's table is warp 0's moved down by 16(w % 4) rows)."""
    from flashsim.warp.fragments import wgmma_fragment

    frag = wgmma_fragment(operand, n=n, dtype=dtype)
    e = frag.elems
    lane, reg, half = np.meshgrid(np.arange(32), np.arange(frag.regs), np.arange(e), indexing="ij")
    pos = (reg * (32 * e) + lane * e + half).reshape(-1)
    tile = (frag.row[:32] * frag.cols + frag.col[:32]).reshape(-1)
    gather = np.empty(16 * frag.cols, np.int64)
    gather[tile] = pos
    scatter = np.empty(pos.size, np.int64)
    scatter[pos] = tile
    gather.setflags(write=False)
    scatter.setflags(write=False)
    return gather, scatter


def _regs_to_tiles(regs: np.ndarray, maps, dt) -> np.ndarray:
    """(nregs, warps, 32) uint32 -> (warps, 16, cols) element bits of dtype ``dt``."""
    gather, _ = maps
    per = np.ascontiguousarray(regs.transpose(1, 0, 2)).view(dt).reshape(regs.shape[1], -1)
    return per[:, gather].reshape(regs.shape[1], 16, -1)


def _tiles_to_regs(tiles: np.ndarray, maps, nregs: int) -> np.ndarray:
    """(warps, 16, cols) element bits -> (nregs, warps, 32) uint32."""
    _, scatter = maps
    flat = np.ascontiguousarray(tiles.reshape(tiles.shape[0], -1)[:, scatter])
    return flat.view(np.uint32).reshape(tiles.shape[0], nregs, 32).transpose(1, 0, 2)


# ------------------------------------------------------------------------------------------------ forms
def _form(ctx: Ctx, a_regs: bool, neg_a: bool, neg_b: bool, mn_a: bool = False, mn_b: bool = False) -> GmmaForm:
    ins = ctx.ins
    mods = ins.mods
    ctx.need(len(mods) >= 2 and mods[0].count("x") == 2, f"{ins.name}")
    m_, n_, k_ = mods[0].split("x")
    ctx.need(m_ == "64" and n_.isdigit() and k_.isdigit(), f"{ins.name}")
    n, k = int(n_), int(k_)
    ctx.need(8 <= n <= 256 and n % 8 == 0, f"{ins.name} (N = {n})")
    if ins.opcode == "HGMMA":
        types = _HGMMA_TYPES.get(tuple(mods[1:]))
        ctx.need(types is not None and k == 16, f"{ins.name} (tf32, sparse and other HGMMA forms)")
        atype, btype, ctype = types
    else:
        ctx.need(len(mods) == 4 and mods[1] in _CTYPES and mods[2] in _FP8 and mods[3] in _FP8 and k == 32,
                 f"{ins.name}")
        ctype, atype, btype = _CTYPES[mods[1]], _FP8[mods[2]], _FP8[mods[3]]
    ctx.need(not (mn_a or mn_b) or k == 16, f"{ins.name} (MN-major operands of 8-bit types)")
    ctx.need(not (mn_a and a_regs), f"{ins.name} (an MN-major A from registers)")
    return GmmaForm(n, k, atype, btype, ctype, a_regs, neg_a, neg_b, mn_a, mn_b)


def _scale_d(ctx: Ctx, op):
    """The scale-d predicate as a reader of (A, W) bools (per warp: it is uniform), or a constant."""
    ctx.need(op.kind in ("p", "up"), f"scale-d operand {op.text} of {ctx.ins.text}")
    if op.index == PT:
        v = not op.invert
        return lambda m, a, w: np.full(len(a), v)
    ctx.need(op.kind == "up", f"a lane predicate {op.text} as the scale-d of {ctx.ins.text}")
    idx, inv = op.index, op.invert
    return lambda m, a, w: m.UP[idx][a, w] != inv


def _check_warpgroup(m, ins, lanes: np.ndarray, warps: np.ndarray) -> None:
    """Faults unless every thread of every executing warp executes, and its warpgroup's four warps exist."""
    bad = warps & ~lanes.all(axis=2)
    if bad.any():
        a, w = (int(v) for v in np.argwhere(bad)[0])
        n = int(lanes[a, w].sum())
        raise fault("wgmma with inactive threads", m, ins, lanes & bad[..., None], np.int64(0),
                    f"{location(warp=w)} executes {ins.opcode} with {n} of its 32 threads; "
                    f"wgmma.mma_async.sync.aligned needs every thread of warpgroup {w // 4} (warps {4 * (w // 4)}.."
                    f"{4 * (w // 4) + 3})")
    present = (m.st != NONE).all(axis=2)
    pad = (-m.W) % 4
    if pad:
        present = np.concatenate([present, np.zeros((m.A, pad), bool)], axis=1)
    whole = present.reshape(m.A, -1, 4).all(axis=2).repeat(4, axis=1)[:, :m.W]
    bad = warps & ~whole
    if bad.any():
        a, w = (int(v) for v in np.argwhere(bad)[0])
        raise fault("wgmma without a whole warpgroup", m, ins, lanes & bad[..., None], np.int64(0),
                    f"{location(warp=w)} executes {ins.opcode}, but its warpgroup {w // 4} (warps {4 * (w // 4)}.."
                    f"{4 * (w // 4) + 3}) is not complete in a block of {m.launch.block} threads")


def _descriptor(value: int, ins, which: str):
    from flashsim.warp.matrix_desc import MatrixDescriptor

    try:
        return MatrixDescriptor.decode(int(value))
    except ArgumentError:
        raise NotImplementedError(
            f"a wgmma {which} descriptor {int(value):#018x} with reserved bits set (not the sm_90 layout of the "
            f"PTX ISA's \"Matrix Descriptor\") is not modelled: {ins.where()}") from None


def _addresses(desc, rows: np.ndarray, ins, which: str, major: str = "K") -> np.ndarray:
    """(rows, 32) byte addresses of ``rows`` of a K-major or MN-major operand (flashsim.warp.matrix_desc)."""
    from flashsim.warp.matrix_desc import element_address

    try:
        return np.asarray(element_address(desc, rows[:, None], np.arange(32)[None, :], major=major), np.int64)
    except NotImplementedError as exc:
        raise NotImplementedError(f"wgmma {which} operand: {exc}: {ins.where()}") from None


# ------------------------------------------------------------------------------------------------ HGMMA/QGMMA
@semantic("HGMMA", "QGMMA", family="mma")
def gmma(ctx: Ctx):
    # HGMMA / QGMMA Rd, [Ra,] gdesc[URx], Rc[, scale-d][, gsb0] (see the module docstring)
    ins = ctx.ins
    ops = ctx.ops
    ctx.need(len(ops) >= 3 and ops[0].kind == "r", f"{ins.text}")
    d_op = ops[0]
    a_op = ops[1] if ops[1].kind == "r" else None
    i = 2 if a_op is not None else 1
    ctx.need(len(ops) > i + 1 and ops[i].kind == "gdesc" and ops[i + 1].kind == "r", f"{ins.text}")
    g_op, c_op = ops[i], ops[i + 1]
    pred_op, commit = None, False
    for op in ops[i + 2:]:
        if op.kind == "target" and op.name == "gsb0" and not commit:
            commit = True
        elif op.kind in ("p", "up") and pred_op is None and not commit:
            pred_op = op
        else:
            raise ctx.unsupported(f"operand {op.text} of {ins.text}")
    if d_op.index == RZ:
        # the placeholder ptxas emits for a commit_group with no wgmma of its own: it computes nothing
        # and closes a (possibly empty) group
        def run_commit(m, ex):
            lanes = lanes_of(m, ex)
            warps = lanes.any(axis=2)
            if warps.any():
                _check_warpgroup(m, ins, lanes, warps)
                m.gmma_state().issue(m, *np.nonzero(warps), None, commit)
        return run_commit
    sfx = set(g_op.suffix)
    ctx.need(sfx <= {"tnspA", "tnspB", "negA", "negB"}, f"descriptor operand {g_op.text}")
    ctx.need(g_op.index != URZ, f"{ins.text} (a wgmma reading descriptors from URZ)")
    if a_op is not None:
        ctx.need(not (a_op.absolute or a_op.invert) and a_op.index != RZ and "negA" not in sfx, f"operand {a_op.text}")
    form = _form(ctx, a_op is not None, "negA" in sfx or (a_op is not None and a_op.neg), "negB" in sfx,
                 "tnspA" in sfx, "tnspB" in sfx)
    nd = form.nd
    ctx.need(d_op.index + nd <= RZ and (c_op.index == RZ or c_op.index + nd <= RZ), f"{ins.text} (registers)")
    ctx.need(a_op is None or a_op.index + 4 <= RZ, f"{ins.text} (registers)")
    scale = _scale_d(ctx, pred_op) if pred_op is not None else (lambda m, a, w: np.ones(len(a), bool))
    d0, c0 = d_op.index, c_op.index
    a0 = a_op.index if a_op is not None else None
    g = g_op.index
    edt = np.uint16 if form.esize == 2 else np.uint8
    cdt = np.uint32 if form.ctype == "f32" else np.uint16
    sign = edt(0x8000 if form.esize == 2 else 0x80)
    dmaps = _warp_maps("D", form.ctype, form.n)
    amaps = _warp_maps("A", form.atype, None) if a_op is not None else None

    def run(m, ex):
        from flashsim.numerics.wgmma import wgmma_warp  # numba: imported on first use

        lanes = lanes_of(m, ex)
        warps = lanes.any(axis=2)
        if not warps.any():
            return
        _check_warpgroup(m, ins, lanes, warps)
        S = m.gmma_state()
        aw, ww = np.nonzero(warps)
        nw = len(aw)
        clocks = m.smem.clocks
        a_t, b_t, reads = _shared_operands(m, ins, form, g, aw, ww, clocks is not None)
        clk = None
        if clocks is not None:  # the operand reads, through the async proxy, in the race detector's order
            clk = {}
            for j, (a, w) in enumerate(zip(aw.tolist(), ww.tolist())):
                col, vec = clocks.issue(a, w, "wgmma")
                clk[(a, w)] = int(vec[col])
                m.smem.on_async_read(a, col, vec, reads[j], f"{ins.pc:#06x}")
        if a_op is not None:
            a_t = _regs_to_tiles(m.R[a0:a0 + 4][:, aw, ww], amaps, edt)
        if form.neg_a:
            a_t = a_t ^ sign  # imm-scale-a -1: the sign bits of A
        if form.neg_b:
            b_t = b_t ^ sign
        sd = np.asarray(scale(m, aw, ww), bool)
        if c0 == RZ:
            c_t = np.zeros((nw, 16, form.n), cdt)
        else:
            c_t = _regs_to_tiles(S.pending(m, aw, ww, c0, nd), dmaps, cdt)
        # scale-d false: C is ignored (its bits, NaN included), as numerics.wgmma's scale_d=0 does
        c_t = np.where(sd[:, None, None], c_t, cdt(0))
        d_t = wgmma_warp(a_t, b_t, c_t, n=form.n, atype=form.atype, btype=form.btype, ctype=form.ctype)
        S.issue(m, aw, ww, _Issue(S.next_seq(), ins, form, d0, nd, a0, c0, _tiles_to_regs(d_t, dmaps, nd), aw, ww,
                                  m.st.shape[:2], clk), commit)
    return run


def _shared_operands(m, ins, form: GmmaForm, g: int, aw, ww, checking: bool):
    """A (warps, 16, K) (the warp's rows; None in the register form) and B (warps, K, N) read from shared
    memory through the descriptors in the warps' uniform registers, and (checking) per warp the sorted shared
    byte addresses it read."""
    def pair(u):
        return m.UR[u][aw, ww].astype(np.uint64) | (m.UR[u + 1][aw, ww].astype(np.uint64) << np.uint64(32))

    nw, n, k = len(aw), form.n, form.k
    edt = np.uint16 if form.esize == 2 else np.uint8
    db = pair(g + 2)
    da = np.zeros(nw, np.uint64) if form.a_regs else pair(g)
    quad = (ww % 4).astype(np.uint64)
    keys, inv = np.unique(np.stack([da, db, quad]), axis=1, return_inverse=True)
    inv = inv.reshape(-1)
    a_t = None if form.a_regs else np.empty((nw, 16, k), edt)
    b_t = np.empty((nw, k, n), edt)
    reads = [None] * nw if checking else None
    data = m.smem.data
    for j in range(keys.shape[1]):
        sel = np.nonzero(inv == j)[0]
        mask = np.zeros(m.st.shape, bool)
        mask[aw[sel], ww[sel]] = True
        parts = []
        for which, value, rows, out, mn in (("B", keys[1, j], np.arange(n), b_t, form.mn_b),
                                            ("A", keys[0, j], 16 * int(keys[2, j]) + np.arange(16), a_t, form.mn_a)):
            if out is None:
                continue
            addr = _addresses(_descriptor(value, ins, which), rows, ins, which, "MN" if mn else "K")
            lo, hi = int(addr.min()), int(addr.max())
            if lo < 0 or hi >= m.smem.size:
                raise fault("out-of-bounds shared address", m, ins, mask, np.int64(hi),
                            f"the wgmma's {which} operand (descriptor {int(value):#018x}) reads shared bytes "
                            f"{lo:#x}..{hi:#x}; the CTA has {m.smem.size} bytes")
            raw = data[aw[sel][:, None, None], addr[None]]  # (warps, rows, 32 bytes of K)
            # element k of a row is little-endian at its bytes; B's rows are its columns (B is N x K in memory)
            el = raw if form.esize == 1 else raw[..., 0::2].astype(np.uint16) | (raw[..., 1::2].astype(np.uint16) << 8)
            out[sel] = el if which == "A" else np.swapaxes(el, 1, 2)
            parts.append(addr.reshape(-1))
        if checking:  # the bytes read, per operand pair: a pipeline reuses a few (one per stage and k-step)
            cache = m.gmma_state().reads
            key = (int(keys[0, j]), int(keys[1, j]), int(keys[2, j]), form.a_regs, form.n, form.k, form.esize,
                   form.mn_a, form.mn_b)
            used = cache.get(key)
            if used is None:
                used = cache[key] = np.unique(np.concatenate(parts))
            for s in sel:
                reads[s] = used
    return a_t, b_t, reads


# ------------------------------------------------------------------------------------------------ WARPGROUP
@semantic("WARPGROUP", family="mma")
def warpgroup(ctx: Ctx):
    mods = ctx.ins.mods
    ops = ctx.ops
    if mods == ("ARRIVE",):
        # wgmma.fence: orders the warp's register accesses before the wgmma that follow; the interpreter
        # reads a wgmma's operands when it issues, so there is nothing left to order
        ctx.need(not ops, f"{ctx.ins.text}")
        return lambda m, ex: None
    ctx.need(mods == ("DEPBAR", "LE") and len(ops) == 2 and ops[0].kind == "target" and ops[0].name == "gsb0"
             and ops[1].kind == "imm", f"{ctx.ins.text}")
    keep = ops[1].value

    def run(m, ex):
        # wgmma.wait_group N: the warp's committed groups retire, oldest first, until at most N are pending
        if m.gmma is None:
            return
        warps = lanes_of(m, ex).any(axis=2)
        if warps.any():
            m.gmma.retire(m, *np.nonzero(warps), keep)
    return run


# ------------------------------------------------------------------------------------------------ in flight
class _Issue:
    """One HGMMA / QGMMA executed by some warps at one step: their D values (nd, warps, 32), waiting for the
    WARPGROUP.DEPBAR that retires them, and what it read."""

    __slots__ = ("seq", "ins", "form", "d0", "nd", "a0", "c0", "values", "col", "clk")

    def __init__(self, seq, ins, form, d0, nd, a0, c0, values, aw, ww, shape, clk):
        self.seq, self.ins, self.form = seq, ins, form
        self.d0, self.nd, self.a0, self.c0 = d0, nd, a0, c0
        self.values = values
        self.col = np.full(shape, -1, np.int32)  # (A, W) -> the warp's column of ``values``
        self.col[aw, ww] = np.arange(len(aw), dtype=np.int32)
        self.clk = clk  # (a, w) -> its number among the warp's wgmma (the race detector's clock), or None


class WgmmaState:
    """Per-machine state of the warpgroup MMA: per warp, the wgmma issued since its last commit (gsb0) and
    its committed groups not yet retired; with a checking report, the hazard checks (module docstring)."""

    def __init__(self, m):
        A, W = m.A, m.W
        self._seq = 0
        self.open: dict = {}  # (a, w) -> [_Issue] issued since the warp's last commit
        self.groups: dict = {}  # (a, w) -> [[_Issue]] committed groups, oldest first
        self.busy = np.zeros((A, W), bool)  # warps with a wgmma in flight
        self.live = 0  # how many
        self.reads: dict = {}  # (descriptors, quad, form) -> the shared bytes one warp's operands read (checking)
        probe = m.probe
        self.probe = probe if probe is not None and probe.report.races else None
        self.checking = self.probe is not None
        self.watch = False  # per-step checks due: checking and something in flight
        if self.checking:
            self.regs = np.zeros((A, W, 256), bool)  # registers of in-flight wgmma (D, and A of the register form)
            self._sites: dict = {}
            self._seen: set = set()

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def inflight(self, a: int, w: int) -> list:
        """The warp's wgmma in flight, in issue order."""
        out = [x for grp in self.groups.get((a, w), ()) for x in grp]
        return out + self.open.get((a, w), [])

    # ---------------------------------------------------------------------------------- issue and retire
    def issue(self, m, aw, ww, iss: _Issue | None, commit: bool) -> None:
        """Warps (aw, ww) issue ``iss`` (None: the placeholder, nothing); gsb0 (``commit``) closes their
        open group (a placeholder with nothing open closes an empty group)."""
        for a, w in zip(aw.tolist(), ww.tolist()):
            key = (a, w)
            if iss is not None:
                if self.checking:
                    self._issue_hazards(m, iss, a, w)
                self.open.setdefault(key, []).append(iss)
            if commit:
                self.groups.setdefault(key, []).append(self.open.pop(key, []))
            self._update(a, w)

    def retire(self, m, aw, ww, keep: int) -> None:
        """WARPGROUP.DEPBAR.LE gsb0, keep by warps (aw, ww): their oldest groups retire (D written) until at
        most ``keep`` are pending."""
        todo: dict = {}
        clocks = m.smem.clocks
        for a, w in zip(aw.tolist(), ww.tolist()):
            gs = self.groups.get((a, w))
            if not gs or len(gs) <= keep:
                continue
            upto = 0
            while len(gs) > keep:
                for iss in gs.pop(0):
                    todo.setdefault(iss, []).append((a, w))
                    if iss.clk is not None:
                        upto = max(upto, iss.clk[(a, w)])
            if clocks is not None and upto:  # the warp is now ordered after the retired wgmma's reads
                clocks.agent_acquire(a, w, "wgmma", upto)
            self._update(a, w)
        for iss in sorted(todo, key=lambda x: x.seq):  # issue order: a later wgmma's D wins
            aa, ww_ = (np.array(v) for v in zip(*todo[iss]))
            m.R[iss.d0:iss.d0 + iss.nd][:, aa, ww_] = iss.values[:, iss.col[aa, ww_]]

    def pending(self, m, aw, ww, c0: int, nc: int) -> np.ndarray:
        """Registers c0..c0+nc-1 of warps (aw, ww), (nc, warps, 32), as a wgmma reads its C: with the D of the
        wgmma still in flight on them (the hardware orders accumulations into the same registers)."""
        vals = m.R[c0:c0 + nc][:, aw, ww]
        if not self.live:
            return vals
        busy = np.nonzero(self.busy[aw, ww])[0]
        by: dict = {}
        for j in busy.tolist():
            by.setdefault(tuple(self.inflight(int(aw[j]), int(ww[j]))), []).append(j)
        for issues, js in by.items():
            js = np.array(js)
            for iss in issues:
                lo, hi = max(c0, iss.d0), min(c0 + nc, iss.d0 + iss.nd)
                if lo < hi:
                    vals[lo - c0:hi - c0][:, js] = iss.values[lo - iss.d0:hi - iss.d0][:, iss.col[aw[js], ww[js]]]
        return vals

    def _update(self, a: int, w: int) -> None:
        key = (a, w)
        if not self.groups.get(key):
            self.groups.pop(key, None)
        if not self.open.get(key):
            self.open.pop(key, None)
        now = key in self.groups or key in self.open
        if now != self.busy[a, w]:
            self.busy[a, w] = now
            self.live += 1 if now else -1
        if self.checking:
            row = self.regs[a, w]
            row[:] = False
            for iss in self.inflight(a, w):
                row[iss.d0:iss.d0 + iss.nd] = True
                if iss.a0 is not None:
                    row[iss.a0:iss.a0 + 4] = True
            self.watch = self.live > 0

    # ---------------------------------------------------------------------------------- hazards
    def before(self, m, pc: int, active) -> None:
        """Called before each scheduling step (Machine.run): (a) register accesses and (c) exits of warps with
        a wgmma in flight. Returns at once unless a checking report is collected and something is in flight."""
        if not self.watch:
            return
        site = self._sites.get(pc)
        if site is None:
            site = self._sites[pc] = _Site.of(m.program, pc)
        if site.skip:
            return
        lanes = lanes_of(m, active)
        warps = lanes.any(axis=2) & self.busy
        if not warps.any():
            return
        if not site.exit:
            hit = self.regs[:, :, site.regs].any(axis=2) & warps
            if not hit.any():
                return
            warps = hit
        ex = lanes & np.broadcast_to(site.guard(m), lanes.shape) if site.guard is not None else lanes
        for a, w in np.argwhere(warps & ex.any(axis=2)).tolist():
            lane = int(np.argmax(ex[a, w]))
            flight = self.inflight(a, w)
            if site.exit:
                iss = flight[0]
                regs = f"R{iss.d0}..R{iss.d0 + iss.nd - 1}"
                self._report(m, iss, a, w, lane, site.ins, "exit", f"the exit of {location(warp=w)} with D {regs} "
                             "in flight", 0)
                live = (m.st[a, w] != NONE) & (m.st[a, w] != EXITED)
                if not (live & ~ex[a, w]).any():  # the whole warp leaves: its wgmma are gone
                    self.open.pop((a, w), None)
                    self.groups.pop((a, w), None)
                    self._update(a, w)
                continue
            for r, op in zip(site.regs.tolist(), site.ops):
                iss = next((x for x in reversed(flight) if x.d0 <= r < x.d0 + x.nd
                            or (x.a0 is not None and x.a0 <= r < x.a0 + 4)), None)
                if iss is not None:
                    part = "D" if iss.d0 <= r < iss.d0 + iss.nd else "A"
                    self._report(m, iss, a, w, lane, site.ins, f"{op} R{r}", f"R{r} ({part} of the wgmma)", r)

    def _issue_hazards(self, m, iss: _Issue, a: int, w: int) -> None:
        """(a) between a new wgmma and those in flight in its warp: its C / D on their D (allowed for the same
        form on the same registers), its A registers on their D, its D on their A registers."""
        for old in self.inflight(a, w):
            f, g = old.form, iss.form
            same = old.d0 == iss.d0 and (f.n, f.k, f.ctype) == (g.n, g.k, g.ctype)  # "the same shape"
            spans = [("read", iss.c0, iss.nd, "C"), ("write", iss.d0, iss.nd, "D")]
            if iss.a0 is not None:
                spans.append(("read", iss.a0, 4, "A"))
            for op, lo, n, what in spans:
                if lo == RZ:
                    continue
                if what in ("C", "D") and same and lo == old.d0:
                    continue  # accumulating into the same registers: ordered by the hardware
                regs = [r for r in range(lo, lo + n) if old.d0 <= r < old.d0 + old.nd
                        or (op == "write" and old.a0 is not None and old.a0 <= r < old.a0 + 4)]
                if regs:
                    r = regs[0]
                    part = "D" if old.d0 <= r < old.d0 + old.nd else "A"
                    self._report(m, old, a, w, 0, iss.ins, f"{op} R{r} (as {what})", f"R{r} ({part} of the wgmma)", r)

    def _report(self, m, iss: _Issue, a: int, w: int, lane: int, ins, op: str, resource: str, addr: int,
                first_warp: int | None = None) -> None:
        """One hazard into the checking report (each (wgmma, instruction, warp, resource) once per batch)."""
        fw = w if first_warp is None else first_warp
        key = (iss.ins.pc, ins.pc, a, w, fw, resource)
        if key in self._seen:
            return
        self._seen.add(key)
        rep = self.probe.report
        rep.race_count += 1
        if len(rep.race_sites) >= rep.max_records:
            return
        first = self._access(m, iss.ins, a, fw, lane if first_warp is None else 0, "wgmma")
        second = self._access(m, ins, a, w, lane, op)
        rep.race_sites.append(WgmmaHazard(WGMMA_IN_FLIGHT, addr, first, second, resource))

    def _access(self, m, ins, a: int, w: int, lane: int, op: str) -> Access:
        f, ln = ins.line if ins.line else ("", None)
        return Access(self.probe.name, op, ins.pc, ins.text, f, ln, int(m.cta_ids[a]), m.cta_coords(a), int(w),
                      int(lane), m.program.inline_chain(ins.pc))


@dataclass(frozen=True)
class _Site:
    """What the per-step check needs of one instruction: its general registers (``ops``: read / write each),
    whether it is an EXIT, and its guard (a reader of lanes), or skip (the wgmma instructions check
    themselves; uniform-only instructions touch no R register)."""

    ins: object
    skip: bool
    exit: bool
    regs: np.ndarray
    ops: tuple
    guard: object

    @classmethod
    def of(cls, program, pc: int) -> "_Site":
        from flashsim.sass.tracing import operand_registers

        ins = program.instructions[pc]
        if ins.opcode in ("HGMMA", "QGMMA", "WARPGROUP"):
            return cls(ins, True, False, np.zeros(0, np.int64), (), None)
        guard = None
        g = ins.guard
        if g is not None and not (g.index == PT and not g.invert):
            guard = Ctx(ins, program).pred_of(g, uniform=False)
        if ins.opcode == "EXIT":
            return cls(ins, False, True, np.zeros(0, np.int64), (), guard)
        dst, src = operand_registers(ins)
        regs, ops = [], []
        for names, op in ((dst, "write"), (src, "read")):
            for n in names:
                if n.startswith("R") and n[1:].isdigit() and int(n[1:]) not in regs:
                    regs.append(int(n[1:]))
                    ops.append(op)
        return cls(ins, not regs, False, np.array(regs, np.int64), tuple(ops), guard)
