"""Register fragments of mma.sync, ldmatrix and wgmma as data: (lane, register, half) -> (row, col) of a tile.

Notation of the PTX ISA: ``g = lane >> 2`` (groupID), ``t = lane % 4`` (threadID_in_group). A 32-bit
register holding two 16-bit elements keeps the lower-indexed one in bits 0-15 (gpu/kernels/fragments.cuh
has the same tables in C++)::

     31            16 15             0
    +----------------+----------------+
    | element  half 1| element  half 0|       value index v = elems * reg + half  (CuTe's V#)
    +----------------+----------------+

One frozen dataclass per hardware shape (validated in ``__post_init__``: every element of the tile is
owned exactly once) and one generic engine: ``pack`` (tile -> registers) and ``unpack`` (registers ->
tile), vectorised over any leading axes.

The warpgroup instructions (wgmma) spread a fragment over the 128 threads of 4 consecutive warps: there
``lane`` is the thread's index in the warpgroup (warp w = thread >> 5 holds rows 16w..16w+15) and the
registers come as (..., 128, regs), i.e. (..., 4, 32, regs) reshaped: the warps axis of the batched
warp arrays. 8-bit elements (e4m3/e5m2) sit four to a register, element q in bits 8q..8q+7.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from flashsim.errors import bad_argument
from flashsim.warp.state import LANES, Summary

__all__ = ["FRAGMENTS", "Fragment", "fragment", "group_id", "pack", "quad_columns", "thread_in_group", "unpack",
           "wgmma_fragment"]


def group_id(lane):
    """The PTX ISA's groupID ``g = lane >> 2``: the quad of four lanes that shares a fragment row."""
    return lane >> 2


def thread_in_group(lane):
    """The PTX ISA's threadID_in_group ``t = lane % 4``: the lane's place in its quad."""
    return lane & 3


_g, _t = group_id, thread_in_group


# PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", multiplicand A (16x16, .row):
#   a0,a1: (g, 2t..2t+1)  a2,a3: (g+8, 2t..)  a4,a5: (g, 2t+8..)  a6,a7: (g+8, 2t+8..)
def _a_k16(lane, reg, half):
    return _g(lane) + 8 * (reg & 1), 2 * _t(lane) + half + 8 * (reg >> 1)


# PTX ISA, "Matrix Fragments for mma.m16n8k8", multiplicand A (16x8, .row): reg0 (g, 2t..), reg1 (g+8, 2t..)
def _a_k8(lane, reg, half):
    return _g(lane) + 8 * reg, 2 * _t(lane) + half


# PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", multiplicand B (16x8, K x N,
# .col): b0,b1: (k = 2t..2t+1, n = g)  b2,b3: (k = 2t+8..2t+9, n = g)
def _b_k16(lane, reg, half):
    return 2 * _t(lane) + half + 8 * reg, _g(lane) + 0 * reg


# PTX ISA, "Matrix Fragments for mma.m16n8k8", multiplicand B (8x8, K x N, .col): b0,b1: (k = 2t.., n = g)
def _b_k8(lane, reg, half):
    return 2 * _t(lane) + half + 0 * reg, _g(lane) + 0 * reg


# PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (same table for m16n8k8),
# accumulators C/D .f32: c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
def _c_f32(lane, reg, half):
    return _g(lane) + 8 * (reg >> 1), 2 * _t(lane) + (reg & 1) + 0 * half


# accumulators C/D .f16 (two f16x2 registers): reg0 {(g, 2t), (g, 2t+1)}, reg1 {(g+8, 2t), (g+8, 2t+1)}
def _c_f16(lane, reg, half):
    return _g(lane) + 8 * reg, 2 * _t(lane) + half


# PTX ISA, "Warp-level matrix load instruction: ldmatrix" (and stmatrix, movmatrix): one 8x8 .b16
# matrix; lane T holds row T/4, columns 2(T%4) and 2(T%4)+1.
def _m8n8(lane, reg, half):
    return _g(lane) + 0 * reg, 2 * _t(lane) + half


@dataclass(frozen=True)
class Fragment:
    """How one operand of one instruction is spread over the 32 lanes of a warp (or the 128 threads of a
    warpgroup: ``threads=128``)."""

    name: str  # e.g. "mma.m16n8k16 A"
    rows: int
    cols: int
    regs: int  # 32-bit registers per lane
    elems: int  # elements per register (4 for 8-bit types, 2 for b16x2, 1 for f32)
    dtypes: tuple  # element types this layout serves
    ptx: str  # the PTX ISA section the table is copied from
    index: Callable = field(repr=False, compare=False)  # (lane, reg, half) -> (row, col), numpy-vectorised
    threads: int = LANES  # 32 (a warp) or 128 (a warpgroup)
    row: np.ndarray = field(init=False, repr=False, compare=False)  # (32, regs, elems)
    col: np.ndarray = field(init=False, repr=False, compare=False)
    owner_lane: np.ndarray = field(init=False, repr=False, compare=False)  # (rows, cols)
    owner_value: np.ndarray = field(init=False, repr=False, compare=False)  # v = elems * reg + half
    # flat index maps between the registers viewed as elements, in (lane, reg, half) order (a uint32
    # register holds element half 0 in bits 0-15: on a little-endian host its two uint16 views are
    # halves 0 and 1), and the tile in row-major (row, col) order
    gather: np.ndarray = field(init=False, repr=False, compare=False)  # tile[i] = elements[gather[i]]
    scatter: np.ndarray = field(init=False, repr=False, compare=False)  # elements[j] = tile[scatter[j]]
    # the same maps with the elements in register-major (reg, lane, half) order: the interpreter's register
    # file is (regs, ctas, warps, 32), so a fragment is read row by row
    gather_rm: np.ndarray = field(init=False, repr=False, compare=False)
    scatter_rm: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for name in ("rows", "cols", "regs", "elems"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise bad_argument(name, v, "must be a positive int")
        if self.elems not in (1, 2, 4):
            raise bad_argument("elems", self.elems,
                               "a 32-bit register holds one 32-bit, two 16-bit or four 8-bit elements")
        if self.threads not in (LANES, 4 * LANES):
            raise bad_argument("threads", self.threads, "a warp (32) or a warpgroup (128)")
        if self.threads * self.regs * self.elems != self.rows * self.cols:
            raise bad_argument("regs", self.regs,
                               f"{self.threads} lanes x {self.regs} x {self.elems} != {self.rows}x{self.cols}")
        lane, reg, half = np.meshgrid(np.arange(self.threads), np.arange(self.regs), np.arange(self.elems),
                                      indexing="ij")
        r, c = self.index(lane, reg, half)
        r, c = np.asarray(r, np.int64), np.asarray(c, np.int64)
        if r.min() < 0 or c.min() < 0 or r.max() >= self.rows or c.max() >= self.cols:
            raise bad_argument("index", self.name, "maps outside the tile")
        owner_lane = np.full((self.rows, self.cols), -1, np.int64)
        owner_value = np.full((self.rows, self.cols), -1, np.int64)
        count = np.zeros((self.rows, self.cols), np.int64)
        np.add.at(count, (r, c), 1)
        if not (count == 1).all():
            raise bad_argument("index", self.name, "does not own every element exactly once")
        owner_lane[r, c] = lane
        owner_value[r, c] = reg * self.elems + half
        gather = (owner_lane * (self.regs * self.elems) + owner_value).reshape(-1)
        scatter = (r * self.cols + c).reshape(-1)
        reg_of, half_of = owner_value // self.elems, owner_value % self.elems
        gather_rm = (reg_of * (self.threads * self.elems) + owner_lane * self.elems + half_of).reshape(-1)
        scatter_rm = (r * self.cols + c).transpose(1, 0, 2).reshape(-1)
        for name, v in (("row", r), ("col", c), ("owner_lane", owner_lane), ("owner_value", owner_value),
                        ("gather", gather), ("scatter", scatter), ("gather_rm", gather_rm),
                        ("scatter_rm", scatter_rm)):
            v.setflags(write=False)
            object.__setattr__(self, name, v)

    @property
    def elem_dtype(self) -> np.dtype:
        """uint8 for 8-bit elements, uint16 for 16-bit elements, uint32 for 32-bit ones."""
        return np.dtype({4: np.uint8, 2: np.uint16, 1: np.uint32}[self.elems])

    def coords(self, lane: int, reg: int, half: int = 0) -> tuple[int, int]:
        """(row, col) of the element in bits ``(32 / elems) * half`` of register ``reg`` of ``lane``."""
        if not (0 <= lane < self.threads and 0 <= reg < self.regs and 0 <= half < self.elems):
            raise bad_argument("(lane, reg, half)", (lane, reg, half),
                               f"lane < {self.threads}, reg < {self.regs}, half < {self.elems}")
        return int(self.row[lane, reg, half]), int(self.col[lane, reg, half])

    def owner(self, row: int, col: int) -> tuple[int, int, int]:
        """(lane, reg, half) holding element (row, col)."""
        if not (0 <= row < self.rows and 0 <= col < self.cols):
            raise bad_argument("(row, col)", (row, col), f"outside the {self.rows}x{self.cols} tile")
        v = int(self.owner_value[row, col])
        return int(self.owner_lane[row, col]), v // self.elems, v % self.elems


def pack(frag: Fragment, tile: Any) -> np.ndarray:
    """Tile(s) (..., rows, cols) of element bits -> registers (..., threads, regs) uint32 (threads 32 or 128)."""
    t = np.asarray(tile)
    if t.dtype != frag.elem_dtype:
        raise bad_argument("tile", Summary(t), f"{frag.name} elements are {frag.elem_dtype} bit patterns, got {t.dtype}")
    if t.ndim < 2 or t.shape[-2:] != (frag.rows, frag.cols):
        raise bad_argument("tile", Summary(t), f"{frag.name} needs tiles of shape (..., {frag.rows}, {frag.cols})")
    lead = t.shape[:-2]
    elems = np.ascontiguousarray(t.reshape(lead + (-1,))[..., frag.scatter])
    return elems.view(np.uint32).reshape(lead + (frag.threads, frag.regs))


def unpack(frag: Fragment, regs: Any) -> np.ndarray:
    """Registers (..., threads, regs) uint32 -> tile(s) (..., rows, cols) of element bits."""
    r = np.asarray(regs)
    if r.dtype != np.uint32:
        raise bad_argument("regs", Summary(r), f"registers must be uint32 bit patterns, got dtype {r.dtype}")
    if r.ndim < 2 or r.shape[-2:] != (frag.threads, frag.regs):
        if r.ndim >= 2 and r.shape[-2] != frag.threads:
            what = "a warp has 32 lanes" if frag.threads == LANES else "a warpgroup has 128 threads"
            raise bad_argument("regs", Summary(r), f"the lane axis has {r.shape[-2]} entries: {what}")
        raise bad_argument("regs", Summary(r),
                           f"{frag.name} needs registers of shape (..., {frag.threads}, {frag.regs})")
    lead = r.shape[:-2]
    elems = np.ascontiguousarray(r).view(frag.elem_dtype).reshape(lead + (-1,))
    return elems[..., frag.gather].reshape(lead + (frag.rows, frag.cols))


_SEC16 = 'PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type"'
_SEC8 = 'PTX ISA "Matrix Fragments for mma.m16n8k8"'
_SECLD = 'PTX ISA "Warp-level matrix load instruction: ldmatrix" (same layout for stmatrix, movmatrix)'

#: (instruction, operand) -> Fragment; C and D share a layout, keyed by the accumulator type.
FRAGMENTS: dict[tuple[str, str], Fragment] = {
    ("mma.m16n8k16", "A"): Fragment("mma.m16n8k16 A (16x16, row)", 16, 16, 4, 2, ("f16", "bf16"), _SEC16, _a_k16),
    ("mma.m16n8k16", "B"): Fragment("mma.m16n8k16 B (16x8 KxN, col)", 16, 8, 2, 2, ("f16", "bf16"), _SEC16, _b_k16),
    ("mma.m16n8k16", "C.f32"): Fragment("mma.m16n8k16 C/D .f32 (16x8)", 16, 8, 4, 1, ("f32",), _SEC16, _c_f32),
    ("mma.m16n8k16", "C.f16"): Fragment("mma.m16n8k16 C/D .f16 (16x8)", 16, 8, 2, 2, ("f16",), _SEC16, _c_f16),
    ("mma.m16n8k8", "A"): Fragment("mma.m16n8k8 A (16x8, row)", 16, 8, 2, 2, ("f16", "bf16"), _SEC8, _a_k8),
    ("mma.m16n8k8", "B"): Fragment("mma.m16n8k8 B (8x8 KxN, col)", 8, 8, 1, 2, ("f16", "bf16"), _SEC8, _b_k8),
    ("mma.m16n8k8", "C.f32"): Fragment("mma.m16n8k8 C/D .f32 (16x8)", 16, 8, 4, 1, ("f32",), _SEC8, _c_f32),
    ("mma.m16n8k8", "C.f16"): Fragment("mma.m16n8k8 C/D .f16 (16x8)", 16, 8, 2, 2, ("f16",), _SEC8, _c_f16),
    ("ldmatrix.m8n8", "M"): Fragment("ldmatrix/stmatrix/movmatrix .m8n8 .b16 (8x8)", 8, 8, 1, 2, ("b16", "f16", "bf16"), _SECLD, _m8n8),
}

INSTRUCTIONS = ("mma.m16n8k16", "mma.m16n8k8", "ldmatrix.m8n8")


@functools.lru_cache(maxsize=None)
def quad_columns(ncols: int) -> np.ndarray:
    """(4, ncols // 4) column indices: the columns of one accumulator row of ``ncols // 8`` side-by-side
    m16n8 f32 C tiles that lane t of the row's quad holds, in its register order (tile by tile, then the
    registers of the C table on that row: columns 8n + 2t, 8n + 2t + 1)."""
    if not isinstance(ncols, (int, np.integer)) or ncols <= 0 or ncols % 8:
        raise bad_argument("ncols", ncols, "an accumulator row has a positive multiple of 8 columns")
    c = FRAGMENTS[("mma.m16n8k16", "C.f32")]
    quad = np.arange(4)  # the lanes of quad 0: row g = 0
    on_row = [r for r in range(c.regs) if (c.row[quad, r, 0] == 0).all()]
    cols = c.col[quad][:, on_row, 0]                                     # (4, registers on the row)
    out = (c.cols * np.arange(ncols // c.cols)[None, :, None] + cols[:, None, :]).reshape(4, -1)
    out.setflags(write=False)
    return out


def fragment(instruction: str, operand: str = "A", dtype: str | None = None) -> Fragment:
    """The Fragment of ``operand`` (A, B, C or D) of ``instruction``; ``dtype`` picks the C/D layout
    (f32 or f16) and is checked against the A/B element types. ldmatrix/stmatrix/movmatrix.m8n8 has one
    operand, any of A/B/M/D names it."""
    aliases = {"movmatrix.m8n8": "ldmatrix.m8n8", "stmatrix.m8n8": "ldmatrix.m8n8", "mma.sync.m16n8k16": "mma.m16n8k16",
               "mma.sync.m16n8k8": "mma.m16n8k8"}
    instruction = aliases.get(instruction, instruction)
    if instruction not in INSTRUCTIONS:
        raise bad_argument("instruction", instruction, f"expected one of {INSTRUCTIONS}")
    op = operand.upper() if isinstance(operand, str) else operand
    if op not in ("A", "B", "C", "D", "M"):
        raise bad_argument("operand", operand, "expected A, B, C or D")
    if instruction == "ldmatrix.m8n8":
        frag = FRAGMENTS[(instruction, "M")]
    elif op in ("C", "D"):
        dt = "f32" if dtype is None else dtype
        if dt not in ("f32", "f16"):
            raise bad_argument("dtype", dtype, "the accumulator C/D is f32 or f16")
        frag = FRAGMENTS[(instruction, f"C.{dt}")]
    elif op == "M":
        raise bad_argument("operand", operand, f"{instruction} has operands A, B, C, D")
    else:
        frag = FRAGMENTS[(instruction, op)]
    if dtype is not None and dtype not in frag.dtypes:
        raise bad_argument("dtype", dtype, f"{frag.name} holds {', '.join(frag.dtypes)} elements")
    return frag


# ---- wgmma (warpgroup) fragments -----------------------------------------------------------------
#
# PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" > "Register Fragments
# and Shared Memory Matrix Layouts" > "Register Fragments": each warp w = thread >> 5 of the warpgroup
# holds rows 16w..16w+15 of A (register form) and of D, laid out as in the m16n8 mma fragments; with
# g = (thread % 32) >> 2 and t = thread % 4:

_SECWG = ('PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions", '
          '"Register Fragments" (wgmma.mma_async .m64nNk16 / .m64nNk32)')


def _wg_row(thread, r):
    return 16 * (thread >> 5) + _g(thread & 31) + 8 * (r & 1)


def _per_warp(index):
    """A warp's m16n8 table placed at rows 16w..16w+15 of the warpgroup's tile (w = thread >> 5)."""
    def wg(thread, reg, half):
        r, c = index(thread & 31, reg, half)
        return 16 * (thread >> 5) + r, c
    return wg


# A of m64nNk16 (.f16/.bf16, 64x16, 4 registers of two elements a0..a7):
#   reg r, half h: row 16w + g + 8*(r % 2), col 2t + h + 8*(r // 2)        (mma.m16n8k16's A per warp)
_wg_a_k16 = _per_warp(_a_k16)


# A of m64nNk32 (.e4m3/.e5m2, 64x32, 4 registers of four elements a0..a15):
#   reg r, byte q: row 16w + g + 8*(r % 2), col 4t + q + 16*(r // 2)
def _wg_a_k32(thread, reg, byte):
    return _wg_row(thread, reg), 4 * _t(thread) + byte + 16 * (reg >> 1)


# D of m64nN, .f32 (N/2 registers d0..d(N/2-1) of one element):
#   d_i: row 16w + g + 8*((i >> 1) % 2), col 8*(i >> 2) + 2t + (i % 2)     (mma's C per 16x8 block)
def _wg_d_f32(thread, i, half):
    r, c = _per_warp(_c_f32)(thread, i & 3, half)
    return r, 8 * (i >> 2) + c


# D of m64nN, .f16 (N/4 registers of two elements; element 2r + h is the f32 layout's d_(2r+h)):
#   reg r, half h: row 16w + g + 8*(r % 2), col 8*(r >> 1) + 2t + h
def _wg_d_f16(thread, reg, half):
    return _wg_d_f32(thread, 2 * reg + half, 0)


@functools.lru_cache(maxsize=None)
def _wg_fragment(key: tuple) -> Fragment:
    if key == ("A", 16):
        return Fragment("wgmma.m64nNk16 A (64x16, registers)", 64, 16, 4, 2, ("f16", "bf16"), _SECWG, _wg_a_k16,
                        threads=4 * LANES)
    if key == ("A", 32):
        return Fragment("wgmma.m64nNk32 A (64x32, registers)", 64, 32, 4, 4, ("e4m3", "e5m2"), _SECWG, _wg_a_k32,
                        threads=4 * LANES)
    _, dtype, n = key
    if dtype == "f32":
        return Fragment(f"wgmma.m64n{n} C/D .f32 (64x{n})", 64, n, n // 2, 1, ("f32",), _SECWG, _wg_d_f32,
                        threads=4 * LANES)
    return Fragment(f"wgmma.m64n{n} C/D .f16 (64x{n})", 64, n, n // 4, 2, ("f16",), _SECWG, _wg_d_f16,
                    threads=4 * LANES)


def wgmma_fragment(operand: str, *, n: int | None = None, dtype: str = "f32") -> Fragment:
    """The warpgroup Fragment (threads=128) of wgmma.mma_async's register operands.

    operand "A" (register-A form): dtype 'f16'/'bf16' (m64nNk16, 64x16) or 'e4m3'/'e5m2' (m64nNk32, 64x32);
    operand "C"/"D" (accumulator, 64 x n): dtype 'f32' or 'f16', n in 8, 16, ..., 256.
    B always comes from shared memory (flashsim.warp.matrix_desc).
    """
    op = operand.upper() if isinstance(operand, str) else operand
    if op == "A":
        if dtype in ("f16", "bf16"):
            return _wg_fragment(("A", 16))
        if dtype in ("e4m3", "e5m2"):
            return _wg_fragment(("A", 32))
        raise bad_argument("dtype", dtype, "register A of wgmma holds f16, bf16, e4m3 or e5m2 elements")
    if op in ("C", "D"):
        if dtype not in ("f32", "f16"):
            raise bad_argument("dtype", dtype, "the accumulator C/D is f32 or f16")
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or not (8 <= n <= 256 and n % 8 == 0):
            raise bad_argument("n", n, "expected N in 8, 16, ..., 256 (m64nNkK)")
        return _wg_fragment(("D", dtype, int(n)))
    raise bad_argument("operand", operand, "expected A (register form), C or D; B is read from shared memory")
