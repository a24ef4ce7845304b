"""Memory SASS semantics: LDG/STG, LDS/STS, LDL/STL, LDC/ULDC, LD/ST (generic), LDSM/STSM, LDGSTS with
LDGDEPBAR/DEPBAR groups, and global/shared atomics (ATOMG, REDG, ATOMS, ATOM).

Shared accesses go through flashsim.warp (bytes, faults, the bank ledger under the instruction's PC,
the race shadow when it is on); global ones through :class:`flashsim.sass.gmem.GlobalMemory`, bounds
checked against the allocations. A memory instruction completes when it executes (loads see every
earlier store of any warp): the device only promises that much for accesses ordered by barriers,
fences or the same thread, which is what a correct kernel relies on.
"""

from __future__ import annotations

import numpy as np

from flashsim.numerics import fp32
from flashsim.errors import location
from flashsim.sass.isa import RZ, URZ, Operand
from flashsim.sass.launch import LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from flashsim.sass.machine import fault, lanes_of, warps_of
from flashsim.sass.program import Ctx, semantic
from flashsim.smem import CP_ASYNC_P0, SM90
from flashsim.warp import ldmatrix, ld_shared, st_shared, stmatrix
from flashsim.warp.memory import cp_async_commit_group, cp_async_wait_group

_WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "32": 4, "64": 8, "128": 16}


def _width(ctx: Ctx) -> tuple[int, bool]:
    w, signed = 4, False
    for mod in ctx.ins.mods:
        if mod in _WIDTH:
            w = _WIDTH[mod]
            signed = mod.startswith("S")
    return w, signed


def _address(ctx: Ctx, i: int, wide: bool):
    """Reader of a memory operand's address per lane: register (pair) + uniform (pair) + offset. An .E
    (64-bit) global access uses a register pair even where nvdisasm prints it without .64 (ATOMG.E.CAS)."""
    op = ctx.ops[i]
    ctx.need(op.kind == "mem", f"a memory operand, got {op.text!r}")
    sfx = set(op.suffix) - {"U32"}
    ctx.need(not sfx, f"address modifier .{'.'.join(sorted(sfx))} in {op.text}")
    reg, reg64, ureg, ureg64, off = op.reg, op.reg64, op.ureg, op.ureg64, op.value
    if wide and "E" in ctx.mods and reg != RZ and not reg64 and "U32" not in op.suffix:
        reg64 = True
    dt = np.uint64 if wide else np.int64

    def addr(m):
        a = np.full(m.st.shape, off, np.int64).astype(dt)
        if reg != RZ:
            r = m.R[reg].astype(dt)
            if reg64:
                r = r | (m.R[reg + 1].astype(dt) << dt(32))
            a = a + r
        if ureg != URZ:
            u = m.UR[ureg].astype(dt)
            if ureg64:
                u = u | (m.UR[ureg + 1].astype(dt) << dt(32))
            a = a + u[..., None]
        return a
    return addr


def _regs_of(ctx: Ctx, i: int, words: int):
    op = ctx.ops[i]
    if op.kind == "r" and op.index == RZ:
        return lambda m: np.zeros(m.st.shape + (words,), np.uint32)
    ctx.need(op.kind == "r", f"register data operand, got {op.text!r}")
    return ctx.src_n(i, words)


def _write_loaded(ctx: Ctx, i: int, words: int):
    op = ctx.ops[i]
    if op.kind == "r" and op.index == RZ:
        return lambda m, v, ex: None
    return ctx.dst_n(i, words)


# ------------------------------------------------------------------------------------------------ global
def _global_check(m, ctx, lanes, addr, width):
    a = addr[lanes]
    mis = (a & np.uint64(width - 1)) != 0
    if mis.any():
        bad = np.zeros(lanes.shape, bool)
        bad[lanes] = mis
        raise fault("misaligned global address", m, ctx.ins, bad, addr, f"a {width}-byte access")
    idx = m.mem.locate(a, width)
    if (idx < 0).any():
        bad = np.zeros(lanes.shape, bool)
        bad[lanes] = idx < 0
        first = int(addr[bad][0])
        raise fault("out-of-bounds global address", m, ctx.ins, bad, addr,
                    f"a {width}-byte access {m.mem.describe(first)}")
    return a, idx


@semantic("LDG", family="mem")
def ldg(ctx: Ctx):
    width, signed = _width(ctx)
    words = max(1, width // 4)
    addr = _address(ctx, 1, True)
    wd = _write_loaded(ctx, 0, words)

    def run(m, ex):
        lanes = lanes_of(m, ex)
        if not lanes.any():
            return
        ad = addr(m)
        a, idx = _global_check(m, ctx, lanes, ad, width)
        if m.probe is not None:
            m.probe.global_read(m, ctx.ins, lanes, ad, width)
        got = m.mem.gather(a, idx, width)
        if signed and width < 4:
            got[:, 0] = _sign_extend(got[:, 0], width)
        out = np.zeros(lanes.shape + (words,), np.uint32)
        out[lanes] = got
        wd(m, out, lanes)
    return run


@semantic("STG", family="mem")
def stg(ctx: Ctx):
    width, _ = _width(ctx)
    words = max(1, width // 4)
    addr = _address(ctx, 0, True)
    rd = _regs_of(ctx, 1, words)

    def run(m, ex):
        lanes = lanes_of(m, ex)
        if not lanes.any():
            return
        ad = addr(m)
        a, idx = _global_check(m, ctx, lanes, ad, width)
        data = rd(m)
        if m.probe is not None and m.probe.report.watch_global is not None:
            m.probe.global_write(m, ctx.ins, lanes, ad, width, data, _src_reg(ctx, 1))
        m.mem.scatter(a, idx, data[lanes], width)
    return run


def _src_reg(ctx: Ctx, i: int):
    op = ctx.ops[i]
    return op.index if op.kind == "r" and op.index != RZ else None


# ------------------------------------------------------------------------------------------------ shared
def _shared_addr(ctx: Ctx, i: int):
    # a shared address: the CTA's byte offset (bits 24.. would hold its rank in a cluster, SR_CgaCtaId,
    # which is 0 without clusters; anything above the CTA's size faults)
    return _address(ctx, i, False)


@semantic("LDS", family="mem")
def lds(ctx: Ctx):
    width, signed = _width(ctx)
    ctx.need(not ({"ZD", "X4"} & ctx.mods), f"LDS form {ctx.ins.name}")
    words = max(1, width // 4)
    addr = _shared_addr(ctx, 1)
    wd = _write_loaded(ctx, 0, words)
    tag = f"{ctx.ins.pc:#06x}"

    def run(m, ex):
        lanes = lanes_of(m, ex)
        if not lanes.any():
            return
        regs, _ = ld_shared(m.smem, addr(m), bits=8 * width, active=lanes, signed=signed, tag=tag)
        wd(m, regs, lanes)
    return run


@semantic("STS", family="mem")
def sts(ctx: Ctx):
    width, _ = _width(ctx)
    words = max(1, width // 4)
    addr = _shared_addr(ctx, 0)
    rd = _regs_of(ctx, 1, words)
    tag = f"{ctx.ins.pc:#06x}"

    def run(m, ex):
        lanes = lanes_of(m, ex)
        if not lanes.any():
            return
        st_shared(m.smem, addr(m), rd(m), bits=8 * width, active=lanes, tag=tag)
    return run


def _matrix_form(ctx: Ctx) -> tuple[int, bool]:
    """(matrices, transposed) of an LDSM/STSM: .16.M88 or .16.MT88, then .2 or .4 (none for one matrix)."""
    mods = ctx.ins.mods
    ctx.need(len(mods) >= 2 and mods[0] == "16" and mods[1] in ("M88", "MT88") and
             (len(mods) == 2 or mods[2:] in (("2",), ("4",))), f"{ctx.ins.opcode} form {ctx.ins.name}")
    return (int(mods[2]) if len(mods) == 3 else 1), mods[1] == "MT88"


@semantic("LDSM", family="mem")
def ldsm(ctx: Ctx):
    # LDSM.16.{M88,MT88}[.2|.4] d, [a]: ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16
    num, trans = _matrix_form(ctx)
    addr = _shared_addr(ctx, 1)
    wd = _write_loaded(ctx, 0, num)
    tag = f"{ctx.ins.pc:#06x}"

    def run(m, ex):
        lanes = lanes_of(m, ex)
        regs, _ = ldmatrix(m.smem, addr(m), num=num, trans=trans, active=lanes.any(axis=2), tag=tag)
        wd(m, regs, lanes)
    return run


@semantic("STSM", family="mem")
def stsm(ctx: Ctx):
    # STSM.16.{M88,MT88}[.2|.4] [a], r: stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16
    num, trans = _matrix_form(ctx)
    addr = _shared_addr(ctx, 0)
    rd = _regs_of(ctx, 1, num)
    tag = f"{ctx.ins.pc:#06x}"

    def run(m, ex):
        lanes = lanes_of(m, ex)
        stmatrix(m.smem, addr(m), rd(m), num=num, trans=trans, active=lanes.any(axis=2), tag=tag)
    return run


# ------------------------------------------------------------------------------------------------ local
def _local_check(m, ctx, lanes, addr, width):
    bad_al = lanes & ((addr & (width - 1)) != 0)
    if bad_al.any():
        raise fault("misaligned local address", m, ctx.ins, bad_al, addr, f"a {width}-byte access")
    oob = lanes & ((addr < 0) | (addr + width > m.local_size))
    if oob.any():
        raise fault("out-of-bounds local address", m, ctx.ins, oob, addr,
                    f"the thread's local memory (stack) has {m.local_size} bytes")


def _sign_extend(v: np.ndarray, width: int) -> np.ndarray:
    """8/16-bit loaded values (in uint32) sign-extended to 32 bits."""
    bits = 8 * width
    v = np.asarray(v).astype(np.int64)
    return np.where(v >= (1 << (bits - 1)), v - (1 << bits), v).astype(np.uint32)


def local_load(m, ctx, lanes, off, width: int, signed: bool) -> np.ndarray:
    """Each lane of ``lanes`` reads ``width`` bytes of its own local memory at ``off``: (A, W, 32, words)."""
    _local_check(m, ctx, lanes, off, width)
    words = max(1, width // 4)
    a, w, l = np.nonzero(lanes)
    o = off[a, w, l]
    out = np.zeros(lanes.shape + (words,), np.uint32)
    raw = m.local[a[:, None], w[:, None], l[:, None], o[:, None] + np.arange(width)]  # (n, width) bytes
    if width >= 4:
        out[a, w, l] = np.ascontiguousarray(raw).view(np.uint32)
    else:
        v = raw.astype(np.uint32) @ (np.uint32(1) << (8 * np.arange(width, dtype=np.uint32)))
        out[a, w, l, 0] = _sign_extend(v, width) if signed else v
    return out


def local_store(m, ctx, lanes, off, data, width: int) -> None:
    """Each lane of ``lanes`` writes the low ``width`` bytes of its ``data`` (A, W, 32, words) at ``off``."""
    _local_check(m, ctx, lanes, off, width)
    a, w, l = np.nonzero(lanes)
    if a.size == 0:  # every lane predicated off
        return
    o = off[a, w, l]
    raw = np.ascontiguousarray(data[a, w, l]).view(np.uint8).reshape(len(a), -1)[:, :width]
    m.local[a[:, None], w[:, None], l[:, None], o[:, None] + np.arange(width)] = raw


@semantic("LDL", family="mem")
def ldl(ctx: Ctx):
    width, signed = _width(ctx)
    addr = _address(ctx, 1, False)
    wd = _write_loaded(ctx, 0, max(1, width // 4))

    def run(m, ex):
        lanes = lanes_of(m, ex)
        wd(m, local_load(m, ctx, lanes, addr(m), width, signed), lanes)
    return run


@semantic("STL", family="mem")
def stl(ctx: Ctx):
    width, _ = _width(ctx)
    addr = _address(ctx, 0, False)
    rd = _regs_of(ctx, 1, max(1, width // 4))

    def run(m, ex):
        lanes = lanes_of(m, ex)
        local_store(m, ctx, lanes, addr(m), rd(m), width)
    return run


# ------------------------------------------------------------------------------------------------ constant
@semantic("LDC", "ULDC", family="mem")
def ldc(ctx: Ctx):
    # LDC[.64|.U8|...] d, c[bank][offset (+ register)]
    width, signed = _width(ctx)
    src = ctx.ops[1]
    ctx.need(src.kind == "c", f"{ctx.ins.name} source {src.text}")
    if width < 4:
        # LDC.{U8,S8,U16,S16} (Triton's i8 / u16 scalar parameters, indexed tables of bytes or halves): the
        # bytes of the bank, little-endian, zero- or sign-extended to 32 bits as ld.const.{u,s}{8,16} define
        top = np.uint32(1 << (8 * width - 1))
        wd = ctx.dst(0)
        if src.reg == RZ and src.ureg == URZ:
            ctx.need(src.value % width == 0, f"{ctx.ins.text} (a misaligned sub-word constant load)")
        read = _const_reader(ctx, src, width)

        def run(m, ex):
            v = np.asarray(read(m, ex), np.uint32)
            if signed:
                v = (v ^ top) - top  # sign extension in 32-bit wrap-around arithmetic
            wd(m, np.asarray(v, np.uint32), ex)
        return run
    read = _const_reader(ctx, src, width)
    wd = ctx.dst64(0) if width == 8 else ctx.dst(0)
    return lambda m, ex: wd(m, read(m, ex), ex)


def _const_reader(ctx: Ctx, src: Operand, width: int):
    """(m, ex) -> the constants an LDC / ULDC reads. An indexed load reads (and can fault) only where it
    executes: its lanes, or for ULDC its warps (the differential fuzzer found lanes waiting at another PC, and
    warps elsewhere in the program, faulting here on the registers their own code left)."""
    rd = ctx.const(src, width)
    if src.reg == RZ and src.ureg == URZ:
        return lambda m, ex: rd(m)
    if ctx.uniform:
        return lambda m, ex: rd(m, warps_of(m, ex))
    return lambda m, ex: rd(m, lanes_of(m, ex))


# ------------------------------------------------------------------------------------------------ cp.async
@semantic("LDGSTS", family="mem")
def ldgsts(ctx: Ctx):
    # LDGSTS.E[.BYPASS][.LTC128B].{32,64,128} [shared], desc[..][global.64][, p]: cp.async.{ca,cg}.shared.
    # global; the bytes land when a DEPBAR wait covers the copy's group (LDGDEPBAR commits). With p (what
    # ptxas makes of a src-size of cp-size or 0), lanes where p is false read nothing and write zeros.
    # .LTC*B are L2 prefetch hints. .ZFILL (a src-size only known at run time): ptxas puts the number of
    # bytes to zero-fill, (cp-size - src-size) mod cp-size, in the low bits of the aligned source address
    # and makes p false for src-size 0; the copy reads cp-size minus that many bytes and zero-fills the rest.
    # Wavefronts: flashsim.smem.cp_async_wavefronts, over the lanes Nsight Compute counts: the lanes that
    # copy, except that for LDGSTS.BYPASS its counters read a guard or a p held in P0 as CP_ASYNC_P0 says
    # (a p in P0, `, P0` or `, !P0`: every lane reads)
    # (measured on the H100: traces/sass/ncu_source/README.md), which needs the lanes at this PC before
    # the guard: the run then takes (m, ex, active) like a control semantic.
    width, _ = _width(ctx)
    ctx.need(len(ctx.ops) in (2, 3), f"{ctx.ins.text}")
    zfill = "ZFILL" in ctx.mods
    bypass = "BYPASS" in ctx.mods
    dst = _shared_addr(ctx, 0)
    src = _address(ctx, 1, True)
    fill = ctx.pred(2) if len(ctx.ops) == 3 else None
    tag = f"{ctx.ins.pc:#06x}"
    guard = ctx.ins.guard
    in_p0 = SM90.cp_async_p0 and bypass
    p0_guard = in_p0 and guard is not None and guard.kind == "p" and guard.index == 0
    # None: count the lanes that copy; else whether every lane at this PC counts (True) or none (False)
    guard_seen = (CP_ASYNC_P0["guard"] != guard.invert) if p0_guard else None
    fop = ctx.ops[2] if fill is not None else None
    p0_fill = in_p0 and fop is not None and fop.kind == "p" and fop.index == 0
    fill_seen = CP_ASYNC_P0["source"] if p0_fill else None  # `, P0` and `, !P0` alike

    def run(m, ex, active=None):
        lanes = lanes_of(m, ex)
        if guard_seen is None:
            counted = lanes
        else:
            counted = lanes_of(m, active) if guard_seen else np.zeros(lanes.shape, bool)
        if not lanes.any() and not counted.any():
            return
        d = dst(m)
        smem = m.smem
        s = src(m)
        if zfill:
            nzero = (s & np.uint64(width - 1)).astype(np.int64)
            s = s & ~np.uint64(width - 1)
        p = None if fill is None else np.broadcast_to(fill(m), lanes.shape)
        if lanes.any():
            smem.check_access(d, width, lanes, f"cp.async ({ctx.ins.text})")
            reads = lanes if p is None else lanes & p
            if zfill:  # lanes that read nothing read nothing
                reads = reads & ((width - nzero) > 0)
            payload = np.zeros((int(lanes.sum()), width), np.uint8)
            if reads.any():
                if zfill:  # only the bytes read must lie in an allocation (padding keeps the 16-byte gather safe)
                    keep = width - nzero[reads]
                    a = s[reads]
                    idx = m.mem.locate(a, np.maximum(keep, 1))
                    bad = idx < 0
                    if bad.any():
                        mask = np.zeros(lanes.shape, bool)
                        mask[reads] = bad
                        raise fault("out-of-bounds global address", m, ctx.ins, mask, s,
                                    f"cp.async reads {int(keep[bad][0])} bytes {m.mem.describe(int(a[bad][0]))}")
                    got = m.mem.gather(a, idx, width).view(np.uint8).reshape(-1, max(width, 4))[:, :width]
                    got = np.where(np.arange(width)[None, :] < keep[:, None], got, 0).astype(np.uint8)
                else:
                    a, idx = _global_check(m, ctx, reads, s, width)
                    got = m.mem.gather(a, idx, width).view(np.uint8).reshape(-1, max(width, 4))[:, :width]
                payload[reads[lanes]] = got
                if m.probe is not None:
                    if zfill:  # each lane read its first width - nzero bytes
                        for n_read in np.unique(width - nzero[reads]):
                            m.probe.global_read(m, ctx.ins, reads & (width - nzero == n_read), s, int(n_read))
                    else:
                        m.probe.global_read(m, ctx.ins, reads, s, width)
            c, w, l = np.nonzero(lanes)
            if smem.watching:
                smem.on_write(d, width, lanes, tag, op="cp.async")
            smem.add_pending(c, w, l, d[c, w, l], payload.copy(), tag)
        counted_reads = counted
        if fill_seen is not None:
            counted_reads = counted if fill_seen else np.zeros(counted.shape, bool)
        elif p is not None:
            counted_reads = counted & p
        if zfill:
            counted_reads = counted_reads & ((width - nzero) > 0)
        # (the observer, a trace, sees the counted lanes too: its records add up to the counts)
        if zfill:  # the bytes each lane reads (its src-size)
            smem.account(tag, "ldgsts", d, width, counted, src=s, reads=counted_reads, bypass=bypass, zfill=zfill,
                         nread=width - nzero)
        else:
            smem.account(tag, "ldgsts", d, width, counted, src=s, reads=counted_reads, bypass=bypass, zfill=zfill)
    if p0_guard:
        run.control = True
    return run


@semantic("LDGDEPBAR", family="mem")
def ldgdepbar(ctx: Ctx):
    def run(m, ex):
        cp_async_commit_group(m.smem, active=lanes_of(m, ex))
    return run


@semantic("DEPBAR", family="mem")
def depbar(ctx: Ctx):
    # DEPBAR.LE SB0, n: wait until at most n LDGSTS groups are pending (cp.async.wait_group n). Other
    # scoreboards track in-flight register results, which this in-order model completes at once.
    # DEPBAR {s,...} (ptxas puts DEPBAR {5,4,3,2,1,0} before a tensor-map fence): wait until every scoreboard
    # of the set is clear, so with SB0 in it every LDGSTS group has landed, as DEPBAR.LE SB0, 0x0.
    ops = ctx.ops
    ctx.need(ctx.ins.mods in ((), ("LE",)), f"{ctx.ins.name}")
    if ops and ops[0].kind == "sblist":
        ctx.need(len(ops) == 1 and ctx.ins.mods == (), f"{ctx.ins.text}")
        n = 0 if ops[0].value & 1 else None  # SB0 in the set: every group
    elif ops and ops[0].kind == "sb" and ops[0].index == 0:
        ctx.need("LE" in ctx.mods and len(ops) >= 2 and ops[1].kind == "imm", f"{ctx.ins.text}")
        n = ops[1].value
    else:
        n = None
    if n is not None:
        def run(m, ex):
            lanes = lanes_of(m, ex)
            cp_async_wait_group(m.smem, n, active=lanes)
            clocks = m.smem.clocks
            if clocks is not None:  # also cp.async.bulk.wait_group[.read] n: the bulk stores' groups
                for a, w in zip(*np.nonzero(lanes.any(axis=2))):
                    clocks.wait_stores(int(a), int(w), n)
        return run
    return lambda m, ex: None


# ------------------------------------------------------------------------------------------------ atomics
_ATOM_OPS = ("ADD", "MIN", "MAX", "INC", "DEC", "AND", "OR", "XOR", "EXCH", "CAS", "SAFEADD")


def _atomic_apply(op: str, typ: str, old: np.ndarray, val: np.ndarray, cmp: np.ndarray | None, ftz: bool):
    """The new values of one atomic step on arrays of words (uint32, or uint64 for 64-bit types)."""
    if typ == "F32":
        if op == "ADD":  # RED/ATOM.ADD.F32.FTZ.RN: an FADD.FTZ
            return fp32.add(old.astype(np.uint32), val.astype(np.uint32), ftz=ftz)
        if op in ("MIN", "MAX"):
            f = fp32.fmin if op == "MIN" else fp32.fmax
            return f(old.astype(np.uint32), val.astype(np.uint32))
        raise NotImplementedError(f"atomic {op}.F32")
    dt = np.uint64 if typ in ("64", "U64", "S64") else np.uint32
    o, v = old.astype(dt), val.astype(dt)
    if op in ("MIN", "MAX"):
        sdt = np.int64 if dt is np.uint64 else np.int32
        a, b = (o.view(sdt), v.view(sdt)) if typ in ("S32", "S64") else (o, v)
        r = np.minimum(a, b) if op == "MIN" else np.maximum(a, b)
        return np.asarray(r).view(dt)
    table = {
        "ADD": lambda: o + v, "SAFEADD": lambda: o + v, "AND": lambda: o & v, "OR": lambda: o | v,
        "XOR": lambda: o ^ v, "EXCH": lambda: v,
        "INC": lambda: np.where(o >= v, dt(0), o + dt(1)),  # atom.inc: wraps to 0 past val
        "DEC": lambda: np.where((o == 0) | (o > v), v, o - dt(1)),  # atom.dec: wraps to val at 0 or past it
        "CAS": lambda: np.where(o == cmp.astype(dt), v, o),
    }
    if op not in table:
        raise NotImplementedError(f"atomic {op}")
    with np.errstate(over="ignore"):
        return np.asarray(table[op]()).astype(dt)


def _atomic_words(buf: np.ndarray, k: np.ndarray, op: str, typ: str, vals, cmps, ftz: bool) -> np.ndarray:
    """Apply the atomics of lanes (in order) to words ``k`` of ``buf``; returns each lane's old word.

    Lanes apply one after another in (cta, warp, lane) order (for a float add this order decides the
    rounding, which the device leaves unspecified). Vectorised by rounds: each round applies, at once,
    the earliest pending lane of every word, so the rounds are as many as the most lanes on one word."""
    old = np.empty(k.shape, buf.dtype)
    pending = np.arange(k.size)
    while pending.size:
        _, first = np.unique(k[pending], return_index=True)
        sel = pending[first]
        cur = buf[k[sel]]
        old[sel] = cur
        buf[k[sel]] = _atomic_apply(op, typ, cur, vals[sel], None if cmps is None else cmps[sel], ftz)
        pending = np.delete(pending, first)
    return old


def _refuse_contended_spin64(ctx: Ctx, m, c, w, l, k) -> None:
    """ATOMS.CAST.SPIN.64 with two lanes of one warp on one word: the H200 does not take them in lane order
    (traces/triton/form_probes.json, probe_atoms_cast and probe_atoms_f64: lanes 0, 4, ..., 28 on one word won
    in the order 0, 8, 16, 24, 4, 20, 28, 12) and its order is not modelled, so the old values and a float
    sum would be guesses. The 32-bit form's lane order is measured and modelled."""
    key = (c.astype(np.int64) * m.W + w) * (1 << 40) + k
    uniq, first, counts = np.unique(key, return_index=True, return_counts=True)
    if (counts > 1).any():
        j = first[np.argmax(counts > 1)]
        raise NotImplementedError(
            f"{location(cta=int(m.cta_ids[c[j]]), warp=int(w[j]), lane=int(l[j]))} and another lane of its warp "
            f"contend for one 64-bit word in {ctx.ins.name}: the order the GPU takes them in is not modelled: "
            f"{ctx.ins.where()}")


def _atomic_factory(ctx: Ctx, space: str):
    # ATOMG.E.op[.type] d, [addr], v (CAS: d, [addr], cmp, v); REDG.E.op [addr], v; ATOMS.op d, [addr], v
    mods = ctx.mods
    op = next((o for o in _ATOM_OPS if o in mods), None)
    # ATOMS.CAST.SPIN[.64] d, [a], cmp, new: compare-and-store; d = 1 where the store happened, else 0 (a pair
    # (1, 0) / (0, 0) for .64). ptxas loops on it (LDS, compute, CAST.SPIN, branch back unless d == 1) for the
    # shared atomics sm_90 has no instruction for: f32 / f64 / f16x2 / bf16x2 add, 64-bit add, min, max, and, or,
    # xor. Lanes of one execution on one word go in (cta, warp, lane) order as every atomic here does, so one
    # lane (the lowest) of those that read the same value wins each trip round the loop (measured for the
    # 32-bit form; the 64-bit form's order differs and is refused where lanes of a warp contend).
    cast = "CAST" in mods
    if cast:
        ctx.need("SPIN" in mods and space == "shared" and op is None, f"atomic {ctx.ins.name}")
        op = "CAS"
    ctx.need(op is not None, f"atomic {ctx.ins.name}")
    typ = "F32" if "F32" in mods else "64" if ("64" in mods or "U64" in mods or "S64" in mods) else \
        "S32" if "S32" in mods else "U32"
    ctx.need(not ({"F16x2", "BF16x2", "F64"} & mods), f"atomic type in {ctx.ins.name}")
    if typ == "64" and "S64" in mods:
        typ = "S64"
    ftz = "FTZ" in mods
    red = ctx.ins.opcode.startswith("RED")
    words = 2 if typ in ("64", "S64") else 1
    i = 0
    wd = None
    ops = ctx.ops
    if ops and ops[0].kind == "p":
        # ATOMG.E.op PT, d, [a], v: a predicate destination before the register one; only PT seen
        ctx.need(ops[0].index == 7 and not ops[0].invert, f"{ctx.ins.text} (a predicate result)")
        i = 1
    if not red:
        wd = _write_loaded(ctx, i, words)
        i += 1
    wide = space == "global"
    if space == "generic-shared":
        gaddr = _address(ctx, i, True)
        addr = lambda m: (gaddr(m) - np.uint64(SHARED_WINDOW)).astype(np.int64)  # noqa: E731
        space = "shared"
    else:
        addr = _address(ctx, i, wide) if space != "shared" else _shared_addr(ctx, i)
    cas = op == "CAS"
    popc = "POPC" in mods
    if popc:
        # ATOMS.POPC.INC.32 RZ, [a]: the warp-aggregated atomicAdd(p, 1): every active lane adds 1 (the
        # hardware adds their count once); the value each lane would get back is not modelled
        ctx.need(op == "INC" and len(ctx.ops) == i + 1 and ctx.ops[0].kind == "r" and ctx.ops[0].index == RZ,
                 f"{ctx.ins.text} (a POPC.INC whose result is used)")
        op = "ADD"
    else:
        ctx.need(len(ctx.ops) == i + (3 if cas else 2), f"{ctx.ins.text} (operands)")
    rcmp = _regs_of(ctx, i + 1, words) if cas else None
    rval = (lambda m: np.ones(m.st.shape + (1,), np.uint32)) if popc else _regs_of(ctx, i + 2 if cas else i + 1, words)
    width = 4 * words

    def run(m, ex):
        lanes = lanes_of(m, ex)
        if not lanes.any():
            return
        ad = addr(m)
        vals = rval(m)
        cmps = rcmp(m) if cas else None
        out = np.zeros(lanes.shape + (words,), np.uint32)
        if space == "global":
            a, idx = _global_check(m, ctx, lanes, ad, width)
            if m.probe is not None and not red:
                m.probe.global_read(m, ctx.ins, lanes, ad, width)
            m.mem.mark_accesses(a, idx, width)
        else:
            m.smem.check_access(ad, width, lanes, ctx.ins.text)
            m.smem.on_atomic(ad, width, lanes, f"{ctx.ins.pc:#06x}", reads=not red, cas=cas)
        c, w, l = np.nonzero(lanes)  # lane order: (cta, warp, lane)
        wdt = np.uint64 if words == 2 else np.uint32
        v = np.ascontiguousarray(vals[c, w, l]).view(wdt)[:, 0]
        cv = np.ascontiguousarray(cmps[c, w, l]).view(wdt)[:, 0] if cas else None
        got = np.empty(v.shape, wdt)
        if space == "global":
            for i_ in np.unique(idx):  # one word array per allocation
                sel = idx == i_
                k = ((a[sel] - np.uint64(m.mem.start(int(i_)))) // np.uint64(width)).astype(np.int64)
                got[sel] = _atomic_words(m.mem.word_view(int(i_), wdt), k, op, typ, v[sel],
                                         None if cv is None else cv[sel], ftz)
        else:  # every CTA's shared memory, as one word array
            k = c * (m.smem.size // width) + ad[c, w, l] // width
            if cast and words == 2:
                _refuse_contended_spin64(ctx, m, c, w, l, k)
            got = _atomic_words(m.smem.data.reshape(-1).view(wdt), k, op, typ, v, cv, ftz)
        if cast:  # the success flag, not the old word
            got = (got == cv).astype(wdt)
        out[c, w, l] = got[:, None].view(np.uint32).reshape(-1, words)
        if wd is not None:
            wd(m, out, lanes)
    return run


@semantic("ATOMG", "REDG", family="atomic")
def atomg(ctx: Ctx):
    return _atomic_factory(ctx, "global")


@semantic("ATOM", "RED", family="atomic")
def atom_generic(ctx: Ctx):
    # a generic atomic: global unless the address lies in the shared window
    glob = _atomic_factory(ctx, "global")
    shared = _atomic_factory(ctx, "generic-shared")
    i = 0 if ctx.ins.opcode == "RED" else 1
    if ctx.ops and ctx.ops[0].kind == "p":  # ATOM.E.op PT, d, [a], v: a predicate destination first
        i += 1
    addr = _address(ctx, i, True)

    def run(m, ex):
        lanes = lanes_of(m, ex)
        sh, lo, gl, _, _ = _generic_spaces(m, lanes, addr(m))
        if lo.any():
            raise fault("atomic on a local address", m, ctx.ins, lo, addr(m), "atomics need global or shared memory")
        if gl.any():
            glob(m, gl)
        if sh.any():
            shared(m, sh)
    return run


@semantic("ATOMS", family="atomic")
def atoms(ctx: Ctx):
    return _atomic_factory(ctx, "shared")


@semantic("MEMBAR", "ERRBAR", "CCTL", "CCTLL", family="mem")
def membar(ctx: Ctx):
    # memory ordering: every access completes when it executes here, so fences have nothing to order
    # (FENCE, which also marks the async proxy's fences, is in flashsim.sass.ops_sync)
    return lambda m, ex: None


# ------------------------------------------------------------------------------------------------ generic
def _generic_spaces(m, lanes, addr):
    """Split generic addresses into (shared lanes, local lanes, global lanes) and window offsets."""
    a = addr.astype(np.uint64)
    sh = lanes & (a >= np.uint64(SHARED_WINDOW)) & (a < np.uint64(SHARED_WINDOW + WINDOW_SIZE))
    lo = lanes & (a >= np.uint64(LOCAL_WINDOW)) & (a < np.uint64(LOCAL_WINDOW + WINDOW_SIZE))
    gl = lanes & ~sh & ~lo
    off_sh = np.where(sh, a - np.uint64(SHARED_WINDOW), 0).astype(np.int64)
    off_lo = np.where(lo, a - np.uint64(LOCAL_WINDOW), 0).astype(np.int64)
    return sh, lo, gl, off_sh, off_lo


@semantic("LD", family="mem")
def ld_generic(ctx: Ctx):
    # LD.E[.width] d, [generic address]: shared, local or global by the address's window
    width, signed = _width(ctx)
    words = max(1, width // 4)
    addr = _address(ctx, 1, True)
    wd = _write_loaded(ctx, 0, words)
    tag = f"{ctx.ins.pc:#06x}"

    def run(m, ex):
        lanes = lanes_of(m, ex)
        if not lanes.any():
            return
        ad = addr(m)
        sh, lo, gl, off_sh, off_lo = _generic_spaces(m, lanes, ad)
        out = np.zeros(lanes.shape + (words,), np.uint32)
        pw = gl & (ad >= np.uint64(PARAM_WINDOW)) & (ad < np.uint64(PARAM_WINDOW + WINDOW_SIZE))
        if pw.any():  # the parameter window: a __grid_constant__ parameter read through its address
            gl = gl & ~pw
            out[pw] = _param_load(m, ctx, pw, ad, width)
        if gl.any():
            a, idx = _global_check(m, ctx, gl, ad, width)
            if m.probe is not None:
                m.probe.global_read(m, ctx.ins, gl, ad, width)
            got = m.mem.gather(a, idx, width)
            out[gl] = got
        if sh.any():  # every space loads zero-extended; sign extension follows, once, for all
            regs, _ = ld_shared(m.smem, off_sh, bits=8 * width, active=sh, signed=False, tag=tag)
            out[sh] = regs[sh]
        if lo.any():
            out[lo] = local_load(m, ctx, lo, off_lo, width, False)[lo]
        if signed and width < 4:
            out[..., 0] = _sign_extend(out[..., 0], width)
        wd(m, out, lanes)
    return run


def _param_load(m, ctx, lanes, addr, width: int) -> np.ndarray:
    """Loads of ``lanes`` from the parameter window (flashsim.sass.launch.PARAM_WINDOW): (n, words) uint32,
    narrower loads zero-extended."""
    words = max(1, width // 4)
    a = addr[lanes].astype(np.uint64)
    mis = (a & np.uint64(width - 1)) != 0
    out = np.zeros((len(a), words), np.uint32)
    for i, x in enumerate(a):
        raw = None if mis[i] else m.launch.param_read(int(x) - PARAM_WINDOW, width)
        if raw is None:
            bad = np.zeros(lanes.shape, bool)
            bad[tuple(np.argwhere(lanes)[i])] = True
            kind = "misaligned parameter address" if mis[i] else "out-of-bounds parameter address"
            raise fault(kind, m, ctx.ins, bad, addr, f"a {width}-byte load from the parameter window (the kernel "
                                                     f"has {m.kernel.param_bytes} bytes of parameters)")
        out[i] = np.frombuffer(raw.ljust(4 * words, b"\0"), np.uint32)
    return out


@semantic("ST", family="mem")
def st_generic(ctx: Ctx):
    width, _ = _width(ctx)
    words = max(1, width // 4)
    addr = _address(ctx, 0, True)
    rd = _regs_of(ctx, 1, words)
    tag = f"{ctx.ins.pc:#06x}"

    def run(m, ex):
        lanes = lanes_of(m, ex)
        if not lanes.any():
            return
        ad = addr(m)
        sh, lo, gl, off_sh, off_lo = _generic_spaces(m, lanes, ad)
        data = rd(m)
        if gl.any():
            a, idx = _global_check(m, ctx, gl, ad, width)
            if m.probe is not None and m.probe.report.watch_global is not None:
                m.probe.global_write(m, ctx.ins, gl, ad, width, data, _src_reg(ctx, 1))
            m.mem.scatter(a, idx, data[gl], width)
        if sh.any():
            st_shared(m.smem, off_sh, data, bits=8 * width, active=sh, tag=tag)
        if lo.any():
            local_store(m, ctx, lo, off_lo, data, width)
    return run
