"""A kernel's SASS made executable: every instruction compiled once into a Python closure over the
batched machine state, through the opcode table (:mod:`flashsim.sass.opcodes`).

:class:`Ctx` is what a semantic sees while it is compiled: typed readers and writers for its operands,
so each semantic states only its arithmetic. Vector instructions read (A, W, 32) lane arrays (uniform
registers and immediates broadcast); uniform ones (the U* datapath) read (A, W) arrays, one per warp.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from flashsim.sass import modifiers
from flashsim.sass.isa import PT, RZ, URZ, Instr, Operand, f64_immediate
from flashsim.sass.machine import RUN, Machine

__all__ = ["Ctx", "Program", "SEMANTICS", "semantic"]

M32 = np.uint32(0xFFFFFFFF)
Reader = Callable[[Machine], np.ndarray]

#: opcode -> (factory(ctx) -> run(m, ex), family); filled by the op modules through :func:`semantic`.
SEMANTICS: dict[str, tuple[Callable, str]] = {}


def semantic(*opcodes: str, family: str):
    """Register a factory for one or more base opcodes."""

    def deco(fn):
        for o in opcodes:
            SEMANTICS[o] = (fn, family)
        return fn

    return deco


#: operand kind -> (machine array, the row that reads as zero / true and drops writes)
_STATE = {"r": ("R", RZ), "ur": ("UR", URZ), "p": ("P", PT), "up": ("UP", PT)}


def _row_writer(kind: str, idx: int):
    """Writer of row ``idx`` of a machine state array: all of it (ex None) or where ``ex`` holds."""
    name, zero = _STATE[kind]
    if idx == zero:
        return lambda m, v, ex: None

    def w(m, v, ex):
        row = getattr(m, name)[idx]
        if ex is None:
            row[...] = v
        else:
            np.copyto(row, v, where=ex, casting="unsafe")
    return w


class _Watched:
    """An operand as a semantic sees it (``Ctx.ops``): every field of the Operand, and a note when its
    ``suffix`` is read, so that an operand selector no semantic looked at is refused (Program._compile)
    rather than read as the plain register (``R2P PR, R0.B1``: the differential fuzzer, seed 6)."""

    __slots__ = ("_op", "_seen", "_i")

    def __init__(self, op: Operand, seen: set, i: int):
        self._op, self._seen, self._i = op, seen, i

    def __getattr__(self, name):
        if name == "suffix":
            self._seen.add(self._i)
        return getattr(self._op, name)


class Ctx:
    """Compile-time view of one instruction: operand readers/writers for its semantic."""

    def __init__(self, ins: Instr, program: "Program"):
        self.ins = ins
        self.program = program
        self.suffix_read: set[int] = set()  # the operands whose suffix the semantic read
        self.ops = tuple(_Watched(op, self.suffix_read, i) for i, op in enumerate(ins.operands))
        self.mods = set(ins.mods)
        # the uniform datapath (U* opcodes, and S2UR / R2UR / VOTEU, which write uniform registers)
        self.uniform = ins.opcode.startswith("U") or ins.opcode in ("S2UR", "R2UR", "VOTEU")

    # ------------------------------------------------------------------------------------ errors
    def unsupported(self, what: str) -> NotImplementedError:
        return NotImplementedError(f"{what} is not modelled: {self.ins.where()}")

    def need(self, cond: bool, what: str) -> None:
        if not cond:
            raise self.unsupported(what)

    # ------------------------------------------------------------------------------------ readers
    def raw(self, i: int) -> Reader:
        """Operand ``i`` as uint32 bits, no modifier applied."""
        op = self.ops[i]
        k = op.kind
        if k == "r":
            if op.index == RZ:
                return lambda m: np.uint32(0)
            idx = op.index
            if self.uniform:
                raise self.unsupported(f"a vector register {op.text} in a uniform instruction")
            return lambda m: m.R[idx]
        if k == "ur":
            if op.index == URZ:
                return lambda m: np.uint32(0)
            idx = op.index
            if self.uniform:
                return lambda m: m.UR[idx]
            return lambda m: m.UR[idx][..., None]
        if k in ("imm", "fimm"):
            v = np.uint32(op.value & 0xFFFFFFFF)
            return lambda m: v
        if k == "c":
            if op.reg != RZ or op.ureg != URZ:  # only LDC / ULDC index, through const() with who executes
                raise self.unsupported(f"the register-indexed constant operand {op.text!r}")
            return self.const(op, 4)
        if k == "sr":
            return self.special(op)
        raise self.unsupported(f"operand {op.text!r} as a 32-bit source")

    def const(self, op: Operand, width: int) -> Reader:
        bank, off = op.index, op.value
        if op.reg == RZ and op.ureg == URZ:
            def read(m, bank=bank, off=off):
                return m.launch.const_word(bank, off, width)
            return read
        reg, ureg = op.reg, op.ureg

        def read_indexed(m, lanes=None):
            # lanes: the lanes executing the load, which a lane-register index needs (only they read the bank,
            # so only their addresses can fault: a lane waiting at another PC holds whatever its branch left)
            assert lanes is not None, "an indexed constant read needs its executing lanes (warps for ULDC)"
            idx = np.int64(off)
            if reg != RZ:
                idx = idx + m.R[reg].astype(np.int64)
            if ureg != URZ:
                u = m.UR[ureg].astype(np.int64)
                idx = idx + (u if self.uniform else u[..., None])
            return m.launch.const_gather(bank, np.broadcast_to(idx, np.shape(lanes)), width, self.ins, m, lanes)
        return read_indexed

    def u32(self, i: int) -> Reader:
        """Operand ``i`` as an integer: '-' negates (two's complement), '~' inverts."""
        op = self.ops[i]
        r = self.raw(i)
        if op.kind in ("imm",):
            return r
        if op.neg and op.invert:
            raise self.unsupported(f"operand {op.text!r}")
        if op.neg:
            return lambda m: (np.uint32(0) - r(m)).astype(np.uint32)
        if op.invert:
            return lambda m: ~np.asarray(r(m), np.uint32)
        return r

    def f32(self, i: int) -> Reader:
        """Operand ``i`` as f32 bits: '|x|' clears the sign, then '-' flips it (bit operations, as the
        device applies operand modifiers)."""
        op = self.ops[i]
        r = self.raw(i)
        if op.kind in ("imm", "fimm") or not (op.neg or op.absolute):
            return r
        clear = np.uint32(0x7FFFFFFF) if op.absolute else M32
        flip = np.uint32(0x80000000) if op.neg else np.uint32(0)
        return lambda m: (np.asarray(r(m), np.uint32) & clear) ^ flip

    def u64(self, i: int, *, imm_high: bool = False) -> Reader:
        """A 64-bit operand: a register pair (Rn, Rn+1), an uniform pair, a 64-bit constant, or an
        immediate: zero-extended, or with ``imm_high`` the high word of the value (its low word zero), as
        the 64-bit-source conversions encode it (``I2F.S64.RP R0, 0x1`` converts 2^32: the H100, found by
        the differential fuzzer)."""
        op = self.ops[i]
        if op.kind == "r":
            if op.index == RZ:
                return lambda m: np.uint64(0)
            lo = op.index
            return lambda m: m.R[lo].astype(np.uint64) | (m.R[lo + 1].astype(np.uint64) << np.uint64(32))
        if op.kind == "ur":
            if op.index == URZ:
                return lambda m: np.uint64(0)
            lo = op.index
            if self.uniform:
                return lambda m: m.UR[lo].astype(np.uint64) | (m.UR[lo + 1].astype(np.uint64) << np.uint64(32))
            return lambda m: (m.UR[lo].astype(np.uint64) | (m.UR[lo + 1].astype(np.uint64) << np.uint64(32)))[..., None]
        if op.kind == "c":
            if op.reg != RZ or op.ureg != URZ:
                raise self.unsupported(f"the register-indexed constant operand {op.text!r}")
            return self.const(op, 8)
        if op.kind == "imm":
            v = np.uint64((op.value & 0xFFFFFFFF) << (32 if imm_high else 0))
            return lambda m: v
        raise self.unsupported(f"operand {op.text!r} as a 64-bit source")

    def f64(self, i: int) -> Reader:
        """A binary64 operand as uint64 bits: a register pair (Rn, Rn+1), a uniform pair or a 64-bit constant,
        '|x|' clearing the sign (bit 63, bit 31 of the odd register), then '-' flipping it (-RZ is -0), or an
        immediate (the double nvdisasm prints, :func:`flashsim.sass.isa.f64_immediate`)."""
        op = self.ops[i]
        if op.kind == "fimm":
            bits = f64_immediate(op.text)
            if bits is None:
                raise self.unsupported(f"the binary64 immediate {op.text!r}")
            v = np.uint64(bits)
            return lambda m: v
        if op.kind not in ("r", "ur", "c"):
            raise self.unsupported(f"operand {op.text!r} as a binary64 source")
        r = self.u64(i)
        if not (op.neg or op.absolute):
            return r
        clear = np.uint64(0x7FFFFFFFFFFFFFFF) if op.absolute else np.uint64(0xFFFFFFFFFFFFFFFF)
        flip = np.uint64(1 << 63) if op.neg else np.uint64(0)
        return lambda m: (np.asarray(r(m), np.uint64) & clear) ^ flip

    def pred(self, i: int) -> Reader:
        """A predicate operand as bools ('!' applied); UP broadcast over lanes in vector instructions."""
        op = self.ops[i]
        return self.pred_of(op)

    def pred_of(self, op: Operand, uniform: bool | None = None) -> Reader:
        """A predicate as bools: per lane (A, W, 32) for a vector instruction (an UP broadcast over the
        lanes), per warp (A, W) for a uniform one; ``uniform`` overrides the instruction's datapath."""
        uniform = self.uniform if uniform is None else uniform
        inv = op.invert
        if op.kind not in ("p", "up"):
            raise self.unsupported(f"operand {op.text!r} as a predicate")
        if op.kind == "p" and uniform:
            raise self.unsupported(f"a lane predicate {op.text} in a uniform instruction")
        if op.index == PT:
            v = np.bool_(not inv)
            return lambda m: v
        idx = op.index
        if op.kind == "p":
            return (lambda m: ~m.P[idx]) if inv else (lambda m: m.P[idx])
        if uniform:
            return (lambda m: ~m.UP[idx]) if inv else (lambda m: m.UP[idx])
        return (lambda m: ~m.UP[idx][..., None]) if inv else (lambda m: m.UP[idx][..., None])

    def special(self, op: Operand) -> Reader:
        name = op.name
        if name == "SRZ":
            return lambda m: np.uint32(0)
        table = {
            "SR_TID.X": lambda m: m.tid[0].astype(np.uint32)[None],
            "SR_TID.Y": lambda m: m.tid[1].astype(np.uint32)[None],
            "SR_TID.Z": lambda m: m.tid[2].astype(np.uint32)[None],
            "SR_LANEID": lambda m: np.arange(32, dtype=np.uint32),
            "SR_CTAID.X": lambda m: m.ctaid[0].astype(np.uint32)[:, None, None],
            "SR_CTAID.Y": lambda m: m.ctaid[1].astype(np.uint32)[:, None, None],
            "SR_CTAID.Z": lambda m: m.ctaid[2].astype(np.uint32)[:, None, None],
            "SR_NTID.X": lambda m: np.uint32(m.launch.block[0]),
            "SR_NCTAID.X": lambda m: np.uint32(m.launch.grid[0]),
            # no clusters: every CTA is CTA 0 of its own cluster of one
            "SR_CgaCtaId": lambda m: np.uint32(0),
            # the generic shared window's high word (flashsim.sass.launch.SHARED_WINDOW)
            "SR_SWINHI": lambda m: np.uint32(0x7FFF),
            "SR_SWINLO": lambda m: np.uint32(0),
            "SR_CLOCKLO": lambda m: np.uint32(m.clock & 0xFFFFFFFF),
            "SR_CLOCKHI": lambda m: np.uint32((m.clock >> 32) & 0xFFFFFFFF),
            "SR_GLOBALTIMERLO": lambda m: np.uint32((m.clock * 1000) & 0xFFFFFFFF),
            "SR_GLOBALTIMERHI": lambda m: np.uint32(((m.clock * 1000) >> 32) & 0xFFFFFFFF),
            "SR_WARPID": lambda m: np.arange(m.W, dtype=np.uint32)[None, :, None],
            "SR_VIRTID": lambda m: np.arange(m.W, dtype=np.uint32)[None, :, None],
            "SR_LTMASK": lambda m: ((np.uint64(1) << np.arange(32, dtype=np.uint64)) - np.uint64(1)).astype(np.uint32),
            "SR_LEMASK": lambda m: ((np.uint64(2) << np.arange(32, dtype=np.uint64)) - np.uint64(1)).astype(np.uint32),
            "SR_EQMASK": lambda m: (np.uint64(1) << np.arange(32, dtype=np.uint64)).astype(np.uint32),
            "SR_GTMASK": lambda m: (~((np.uint64(2) << np.arange(32, dtype=np.uint64)) - np.uint64(1))).astype(np.uint32),
            "SR_GEMASK": lambda m: (~((np.uint64(1) << np.arange(32, dtype=np.uint64)) - np.uint64(1))).astype(np.uint32),
        }
        fn = table.get(name)
        if fn is None:
            raise self.unsupported(f"special register {name}")
        if self.uniform:
            lane_dependent = name in ("SR_TID.X", "SR_TID.Y", "SR_TID.Z", "SR_LANEID") or name.endswith("MASK")
            if lane_dependent:
                raise self.unsupported(f"the lane-dependent {name} in a uniform instruction")
            return lambda m: np.broadcast_to(fn(m), (m.A, m.W, 1))[..., 0]
        return fn

    # ------------------------------------------------------------------------------------ writers
    def dst(self, i: int) -> Callable[[Machine, np.ndarray, object], None]:
        """Writer of a 32-bit destination register (R, UR), or a predicate destination (P, UP)."""
        op = self.ops[i]
        if op.kind not in _STATE:
            raise self.unsupported(f"destination {op.text!r}")
        return _row_writer(op.kind, op.index)

    def dst64(self, i: int):
        """Writer of a register pair (Rn, Rn+1) or (URn, URn+1) from uint64 values."""
        op = self.ops[i]
        if op.kind not in ("r", "ur"):
            raise self.unsupported(f"destination {op.text!r} as a pair")
        lo_w, hi_w = _row_writer(op.kind, op.index), _row_writer(op.kind, op.index + 1)
        if op.is_zero_reg:
            return lambda m, v, ex: None

        def w(m, v, ex):
            v = np.asarray(v, np.uint64)
            lo_w(m, (v & np.uint64(0xFFFFFFFF)).astype(np.uint32), ex)
            hi_w(m, (v >> np.uint64(32)).astype(np.uint32), ex)
        return w

    def dst_n(self, i: int, n: int):
        """Writer of ``n`` consecutive registers from a (..., n) uint32 array."""
        op = self.ops[i]
        if op.is_zero_reg:
            return lambda m, v, ex: None
        base = op.index
        if op.kind == "r":
            def w(m, v, ex):
                for j in range(n):
                    if ex is None:
                        m.R[base + j][...] = v[..., j]
                    else:
                        np.copyto(m.R[base + j], v[..., j], where=ex, casting="unsafe")
            return w
        raise self.unsupported(f"destination {op.text!r} of {n} registers")

    def src_n(self, i: int, n: int) -> Reader:
        """``n`` consecutive registers as a (A, W, 32, n) array (RZ reads zeros)."""
        op = self.ops[i]
        if op.kind != "r":
            raise self.unsupported(f"operand {op.text!r} as {n} registers")
        if op.index == RZ:
            return lambda m: np.zeros(m.R.shape[1:] + (n,), np.uint32)
        base = op.index
        return lambda m: np.moveaxis(m.R[base:base + n], 0, -1)


#: control-family opcodes that neither move a lane's PC nor make it wait
_STRAIGHT_CONTROL = frozenset({"NOP", "PMTRIG", "B2R", "BMOV"})


def straight_line(ins: Instr) -> bool:
    """Whether ``ins`` is straight-line code: not control flow, a barrier, a wait or a yield (the semantic
    families "control" and "sync"). A diverged warp runs one path through such instructions before another
    of its paths: ptxas can give two paths one uniform register (``ULDC UR4`` then ``FRND R15, UR4`` on one,
    ``REDUX.MIN UR4`` on the other), and the H200's outputs are those of that rule (the differential
    fuzzer, campaign seed 4)."""
    entry = SEMANTICS.get(ins.opcode)
    return entry is None or entry[1] not in ("control", "sync") or ins.opcode in _STRAIGHT_CONTROL


class Program:
    """One kernel's instructions and their compiled closures (``compiled``: pc -> fn(m, active))."""

    def __init__(self, kernel, instructions: list[Instr], symbols: dict[str, int], cubin_sha256: str | None = None):
        self.kernel = kernel
        self.instructions = {ins.pc: ins for ins in instructions}
        self.symbols = symbols
        self.cubin_sha256 = cubin_sha256  # the cubin it came from
        # warpgroup-collective instructions (wgmma.mma_async .sync.aligned: HGMMA / QGMMA): a warp executes one
        # only together with the other three warps of its warpgroup (flashsim.sass.machine gates them)
        self.warpgroup_pcs = np.array(sorted(pc for pc, ins in self.instructions.items()
                                             if ins.opcode in ("HGMMA", "QGMMA")), np.int64)
        self.compiled: dict[int, Callable] = {}
        # pc -> release(m, cta, warp) of a WARPSYNC.COLLECTIVE / .EXCLUSIVE (flashsim.sass.ops_ctrl): runs the
        # region of every group of lanes complete at it (Machine._release_convergence calls it)
        self.collective_release: dict[int, Callable] = {}
        # executions (scheduling steps) of the instruction at each PC, summed over every launch
        self.hits = np.zeros(max(ins.pc for ins in instructions) // 16 + 1 if instructions else 1, np.int64)
        # warp-level executions at each PC (every warp with lanes at the PC, guard true or not), as Nsight
        # Compute's inst_executed counts them
        self.warp_hits = np.zeros_like(self.hits)
        from flashsim.sass import opcodes  # noqa: F401  (registers every semantic)

        # per PC: whether the instruction is straight-line (not control flow, a barrier, a wait or a yield):
        # a warp that ran it on one of its paths runs that path's next instruction too (Machine._pick)
        self.straight = np.zeros_like(self.hits, bool)
        # per PC: whether it is a branch (BRA, BRX, JMP, JMX; not CALL / RET): a branch back is a loop's trip
        self.branch = np.zeros_like(self.hits, bool)
        for ins in instructions:
            self.compiled[ins.pc] = self._compile(ins)
            self.straight[ins.pc >> 4] = straight_line(ins)
            self.branch[ins.pc >> 4] = ins.opcode in ("BRA", "BRX", "JMP", "JMX")

    def __reduce__(self):
        # the closures do not pickle: a worker process compiles the instructions again (counters start at 0)
        return Program, (self.kernel, list(self.instructions.values()), self.symbols, self.cubin_sha256)

    def executed_forms(self) -> dict[str, int]:
        """{instruction form (opcode with modifiers): times executed} over every launch so far."""
        out: dict[str, int] = {}
        for pc, ins in self.instructions.items():
            n = int(self.hits[pc >> 4])
            if n:
                out[ins.name] = out.get(ins.name, 0) + n
        return out

    def describe(self, pc: int) -> str:
        ins = self.instructions.get(pc)
        return ins.where() if ins is not None else f"pc={pc:#06x}"

    def describe_site(self, pc: int) -> str:
        """:meth:`describe`, plus the call sites when the instruction belongs to an inlined function (a
        wrapper in a header): ``... (mbarrier.cuh:121) inlined at ws_pipeline.cu:80``."""
        return self.describe(pc) + "".join(f" inlined at {f}:{n}" for f, n in self.inline_chain(pc))

    def source_line(self, pc: int) -> str:
        """``file:line`` of the kernel's own code that ``pc`` belongs to: the outermost call site of inlined
        code, else the instruction's line; ``pc=0x...`` without line tables."""
        chain = self.inline_chain(pc)
        if chain:
            return f"{chain[-1][0]}:{chain[-1][1]}"
        ins = self.instructions.get(pc)
        return f"{ins.line[0]}:{ins.line[1]}" if ins is not None and ins.line else f"pc={pc:#06x}"

    def inline_chain(self, pc: int) -> tuple[tuple[str, int], ...]:
        """The call sites of the inlined function ``pc`` belongs to, ((file, line), ...) outermost last; ()
        for code of the kernel's own body (or a cubin without line tables)."""
        if self.cubin_sha256 is None:
            return ()
        from flashsim.sass.toolchain import inline_sites

        return inline_sites(self.cubin_sha256).get(self.kernel.name, {}).get(pc, ())

    def _compile(self, ins: Instr):
        g = ins.guard
        if g is not None and g.kind in ("p", "up") and g.index == PT and g.invert:
            return lambda m, active: None  # @!PT: never executes (ptxas's padding), whatever it holds
        entry = SEMANTICS.get(ins.opcode)
        if entry is None:
            return _raiser(NotImplementedError(
                f"SASS opcode {ins.name} is not modelled: {ins.where()}"))
        factory, _family = entry
        if "nan_immediate" in ins.attrs:
            return _raiser(NotImplementedError(
                f"SASS {ins.name}: the NaN immediate {ins.attrs['nan_immediate']} is not one of the printed class, "
                f"so its bits are not known: {ins.where()}"))
        odd = modifiers.unmodelled(ins.opcode, ins.mods)
        if odd:
            return _raiser(NotImplementedError(
                f"SASS {ins.name}: the modifier{'s' if len(odd) > 1 else ''} {', '.join('.' + m for m in odd)} of "
                f"{ins.opcode} {'are' if len(odd) > 1 else 'is'} not modelled: {ins.where()}"))
        ctx = Ctx(ins, self)
        try:
            run = factory(ctx)
        except NotImplementedError as exc:
            return _raiser(exc)
        unread = [op.text for i, op in enumerate(ins.operands) if op.suffix and i not in ctx.suffix_read]
        if unread:
            return _raiser(NotImplementedError(
                f"the operand selector{'s' if len(unread) > 1 else ''} {', '.join(unread)} of {ins.name} "
                f"{'are' if len(unread) > 1 else 'is'} not modelled: {ins.where()}"))
        return _guarded(ctx, ins, run)


def _raiser(exc: Exception):
    def fn(m, active):
        raise type(exc)(str(exc))
    return fn


def _guarded(ctx: Ctx, ins: Instr, run):
    """Wrap ``run(m, ex)`` with the guard predicate and the active lanes."""
    control = getattr(run, "control", False)
    g = ins.guard
    if g is not None and g.kind in ("p", "up") and g.index == PT:
        if g.invert:  # @!PT: never executes (ptxas's padding)
            return lambda m, active: None
        g = None
    if ctx.uniform:
        if getattr(run, "lanes", False) or (g is not None and g.kind == "p"):
            # a uniform instruction that needs its lanes (a control that moves them, R2UR guarded by a lane
            # predicate): run(m, warps, executing lanes, lanes at this PC)
            gl = None if g is None else ctx.pred_of(g, uniform=False)

            def ful(m, active):
                act = (m.st == RUN) if active is None else active
                lanes = act if gl is None else np.broadcast_to(gl(m), m.st.shape) & act
                return run(m, lanes.any(axis=2), lanes, act)
            if not getattr(run, "lanes", False):
                return _raiser(ctx.unsupported(f"a lane predicate {g.text} guarding a uniform instruction"))
            return ful
        if g is None:
            def fu(m, active):
                return run(m, None if active is None else active.any(axis=2))
            return fu
        gp = ctx.pred_of(g)

        def fug(m, active):
            ex = gp(m)
            if active is not None:
                ex = ex & active.any(axis=2)
            return run(m, ex)
        return fug
    if g is None:
        if control:
            return lambda m, active: run(m, active, active)
        return run
    gp = ctx.pred_of(g, uniform=False)

    def fg(m, active):
        ex = np.broadcast_to(gp(m), m.st.shape)
        ex = ex & (m.st == RUN) if active is None else ex & active
        return run(m, ex, active) if control else run(m, ex)
    return fg
