"""Copy and MMA atoms as data: which thread holds which element, as CuTe's thread-value layouts.

A copy atom's layouts map (thread, value) to a *bit* of the copied block; ``Copy_Atom(op, T)`` recasts
them to elements of type T (cute/atom/copy_atom.hpp). An MMA atom's layouts map (thread, value) to the
column-major index m + M*k (A), n + N*k (B) and m + M*n (C) within one instruction's tile. Each atom is a
frozen dataclass that checks itself: every element of the tile is owned by exactly one (thread, value).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flashsim.errors import bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout import layout as L
from flashsim.layout.evaluate import evaluate
from flashsim.layout.inttuple import C
from flashsim.layout.layout import Layout
from flashsim.warp.fragments import fragment


@dataclass(frozen=True)
class DType:
    """An element type by CuTe name and width in bits."""

    name: str
    bits: int

    def __post_init__(self):
        if self.bits not in (1, 4, 8, 16, 32, 64, 128):
            raise bad_argument("bits", self.bits, "unsupported element width")

    def __str__(self):
        return self.name


DTYPES = {d.name: d for d in (
    DType("half_t", 16), DType("bfloat16_t", 16), DType("float", 32), DType("tfloat32_t", 32),
    DType("double", 64), DType("int8_t", 8), DType("uint8_t", 8), DType("int16_t", 16), DType("uint16_t", 16),
    DType("int32_t", 32), DType("uint32_t", 32), DType("int64_t", 64), DType("uint64_t", 64),
    DType("uint128_t", 128),
)}
DTYPE_ALIASES = {"f16": "half_t", "bf16": "bfloat16_t", "f32": "float", "f64": "double", "tf32": "tfloat32_t"}


def dtype(x) -> DType:
    if isinstance(x, DType):
        return x
    name = DTYPE_ALIASES.get(x, x)
    if name not in DTYPES:
        raise bad_argument("dtype", x, f"unknown element type; known: {', '.join(sorted(DTYPES))}")
    return DTYPES[name]


def _L(shape, stride=None):
    return Layout(shape, stride)


_ = it._
s = C


def _derived(name, thr_shape, val_shape, table) -> Layout:
    """The TV layout ``(thr_shape, val_shape)`` (CuTe's mode shapes, one level deep) whose strides are read off
    ``table[thread, value] -> index`` (a fragment table of flashsim.warp.fragments) at the unit step of each
    mode, checked against the whole table: the shapes are CuTe's, the element facts come from the one home of
    the fragment tables."""
    table = np.asarray(table, np.int64)
    modes = []
    for shape, axis in ((thr_shape, 0), (val_shape, 1)):
        dims = shape if isinstance(shape, tuple) else (shape,)
        steps, lin = [], 1
        for d in dims:
            unit = table[lin, 0] if axis == 0 else table[0, lin]
            steps.append(s(int(unit - table[0, 0])))
            lin *= d
        sh = tuple(s(d) for d in dims)
        modes.append((sh, tuple(steps)) if isinstance(shape, tuple) else (sh[0], steps[0]))
    lay = _L((modes[0][0], modes[1][0]), (modes[0][1], modes[1][1]))
    nt, nv = table.shape
    got = evaluate(lay).reshape(nv, nt).T if int(L.size(lay)) == table.size else None
    if got is None or not np.array_equal(got, table):
        raise bad_argument("table", name, f"no layout of shape ({thr_shape}, {val_shape}) has these fragments")
    return lay


# ---------------------------------------------------------------------------------------------
# Copy operations (bit layouts), cute/atom/copy_traits_sm75.hpp / _sm80.hpp / copy_traits.hpp
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CopyOp:
    """A copy instruction: its threads, and (thread, value) -> bit maps of source, destination, reference."""

    name: str
    thr_id: Layout
    src: Layout
    dst: Layout
    ref: Layout
    ptx: str = ""

    def __post_init__(self):
        for nm in ("src", "dst", "ref"):
            lay = getattr(self, nm)
            if int(L.size(lay, 0)) != int(L.size(self.thr_id)):
                raise bad_argument(nm, str(lay), f"{self.name}: mode 0 must have one entry per thread")

    def __str__(self):
        return self.name


def _single_thread_op(name, sbits, dbits, ptx):
    src = _L((s(1), s(sbits)))
    dst = _L((s(1), s(dbits)))
    return CopyOp(name, _L(s(1)), src, dst, src, ptx)


def SM80_CP_ASYNC_CACHEGLOBAL(S, D=None):
    """cp.async.cg.shared.global (16 bytes, L2 only): one thread copies one S."""
    S = dtype(S)
    D = dtype(D) if D is not None else S
    return _single_thread_op(f"SM80_CP_ASYNC_CACHEGLOBAL<{S},{D}>" if D != S else f"SM80_CP_ASYNC_CACHEGLOBAL<{S}>",
                             S.bits, D.bits, "cp.async.cg.shared.global")


def SM80_CP_ASYNC_CACHEALWAYS(S, D=None):
    """cp.async.ca.shared.global: one thread copies one S."""
    S = dtype(S)
    D = dtype(D) if D is not None else S
    return _single_thread_op(f"SM80_CP_ASYNC_CACHEALWAYS<{S}>", S.bits, D.bits, "cp.async.ca.shared.global")


def UniversalCopy(S, D=None):
    """A plain (vectorised) load/store of one S per thread."""
    S = dtype(S)
    D = dtype(D) if D is not None else S
    return _single_thread_op(f"UniversalCopy<{S}>", S.bits, D.bits, "ld/st")


def _ldsm(name, src, dst, ptx):
    return CopyOp(name, _L(s(32)), src, dst, dst, ptx)


# ldmatrix (PTX ISA "Warp-level matrix load instruction: ldmatrix"): lanes 8j..8j+7 give the row addresses of
# matrix j (128 bits each: the source layouts); destination register j holds matrix j (64 elements further),
# each lane's 32 bits as the m8n8 fragment of flashsim.warp.fragments gives them (.trans: of the transpose).
_M8N8 = fragment("ldmatrix.m8n8")


def _ldsm_dst(nmat: int, trans: bool):
    """(lane, value) -> bit of the nmat 8x8 b16 matrices: register j's element half h, bit b (``.trans``:
    the element at the transposed (row, col))."""
    bit = np.arange(16)
    cols = []
    for j in range(nmat):
        for h in range(2):
            r, c = _M8N8.row[:, 0, h], _M8N8.col[:, 0, h]
            if trans:
                r, c = c, r
            cols.append(1024 * j + 16 * (8 * r + c)[:, None] + bit[None, :])
    return np.concatenate(cols, axis=1)


def _ldsm_n(x):
    return _derived(f"SM75_U32x{x}_LDSM_N", 32, 32 if x == 1 else (32, x), _ldsm_dst(x, False))


def _ldsm_t(x):
    return _derived(f"SM75_U16x{2 * x}_LDSM_T", (4, 8), (16, 2) if x == 1 else (16, 2, x), _ldsm_dst(x, True))


SM75_U32x1_LDSM_N = _ldsm("SM75_U32x1_LDSM_N", _L(((s(8), s(4)), s(128)), ((s(128), s(0)), s(1))), _ldsm_n(1),
                          "ldmatrix.sync.aligned.m8n8.x1.shared.b16")
SM75_U32x2_LDSM_N = _ldsm("SM75_U32x2_LDSM_N", _L(((s(16), s(2)), s(128)), ((s(128), s(0)), s(1))), _ldsm_n(2),
                          "ldmatrix.sync.aligned.m8n8.x2.shared.b16")
SM75_U32x4_LDSM_N = _ldsm("SM75_U32x4_LDSM_N", _L((s(32), s(128)), (s(128), s(1))), _ldsm_n(4),
                          "ldmatrix.sync.aligned.m8n8.x4.shared.b16")
SM75_U16x2_LDSM_T = _ldsm("SM75_U16x2_LDSM_T", _L(((s(8), s(4)), s(128)), ((s(128), s(0)), s(1))), _ldsm_t(1),
                          "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16")
SM75_U16x4_LDSM_T = _ldsm("SM75_U16x4_LDSM_T", _L(((s(16), s(2)), s(128)), ((s(128), s(0)), s(1))), _ldsm_t(2),
                          "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16")
SM75_U16x8_LDSM_T = _ldsm("SM75_U16x8_LDSM_T", _L((s(32), s(128)), (s(128), s(1))), _ldsm_t(4),
                          "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16")

COPY_OPS = {
    "SM80_CP_ASYNC_CACHEGLOBAL": SM80_CP_ASYNC_CACHEGLOBAL,
    "SM80_CP_ASYNC_CACHEALWAYS": SM80_CP_ASYNC_CACHEALWAYS,
    "UniversalCopy": UniversalCopy,
    "SM75_U32x1_LDSM_N": SM75_U32x1_LDSM_N,
    "SM75_U32x2_LDSM_N": SM75_U32x2_LDSM_N,
    "SM75_U32x4_LDSM_N": SM75_U32x4_LDSM_N,
    "SM75_U16x2_LDSM_T": SM75_U16x2_LDSM_T,
    "SM75_U16x4_LDSM_T": SM75_U16x4_LDSM_T,
    "SM75_U16x8_LDSM_T": SM75_U16x8_LDSM_T,
}


@dataclass(frozen=True)
class CopyAtom:
    """``Copy_Atom<Op, T>``: the op's bit layouts recast to elements of T (thread, value) -> element."""

    op: CopyOp
    value_type: DType
    val_src: Layout = field(init=False)
    val_dst: Layout = field(init=False)
    val_ref: Layout = field(init=False)

    def __post_init__(self):
        if not isinstance(self.op, CopyOp):
            raise bad_argument("op", self.op, "expected a copy operation such as SM75_U32x4_LDSM_N")
        bits = self.value_type.bits
        for nm, lay in (("val_src", self.op.src), ("val_dst", self.op.dst), ("val_ref", self.op.ref)):
            try:
                v = L.recast_layout(1, bits, lay)
            except Exception as e:  # noqa: BLE001 - rewrap with the operands named
                raise bad_argument("value_type", str(self.value_type),
                                   f"{self.op.name} cannot move {bits}-bit values: {e}")
            if int(L.size(v, 0)) != int(L.size(self.op.thr_id)):
                raise bad_argument("value_type", str(self.value_type),
                                   f"{self.op.name} is not valid for {bits}-bit values")
            object.__setattr__(self, nm, v)

    @property
    def thr_id(self):
        return self.op.thr_id

    @property
    def num_val_src(self):
        return L.size(self.val_src, 1)

    @property
    def num_val_dst(self):
        return L.size(self.val_dst, 1)

    def __str__(self):
        return ("Copy_Atom\n"
                f"  ThrID:        {self.thr_id}\n"
                f"  ValLayoutSrc: {self.val_src}\n"
                f"  ValLayoutDst: {self.val_dst}\n"
                f"  ValLayoutRef: {self.val_ref}\n"
                f"  ValueType:    {self.value_type.bits}b\n")


def Copy_Atom(op, value_type):
    return CopyAtom(op, dtype(value_type))


# ---------------------------------------------------------------------------------------------
# MMA atoms, cute/atom/mma_traits_sm80.hpp / _sm75.hpp
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MMAAtom:
    """An MMA instruction's tile (M,N,K), its threads and the (thread, value) -> element maps of A, B, C."""

    name: str
    shape_mnk: tuple
    thr_id: Layout
    layout_a: Layout
    layout_b: Layout
    layout_c: Layout
    type_d: DType
    type_a: DType
    type_b: DType
    type_c: DType
    ptx: str = ""

    def __post_init__(self):
        M, N, K = (int(x) for x in self.shape_mnk)
        nthr = int(L.size(self.thr_id))
        for nm, lay, extent in (("layout_a", self.layout_a, M * K), ("layout_b", self.layout_b, N * K),
                                ("layout_c", self.layout_c, M * N)):
            if int(L.size(lay, 0)) != nthr:
                raise bad_argument(nm, str(lay), f"{self.name}: mode 0 must have one entry per thread ({nthr})")
            if int(L.size(lay)) != extent:
                raise bad_argument(nm, str(lay), f"{self.name}: must cover {extent} elements")
            img = np.sort(evaluate(lay))
            if not np.array_equal(img, np.arange(extent)):
                raise bad_argument(nm, str(lay), f"{self.name}: every element must be owned exactly once")

    def __str__(self):
        return ("MMA_Atom\n"
                f"  ThrID:      {self.thr_id}\n"
                f"  Shape_MNK:  {it.fmt(self.shape_mnk)}\n"
                f"  LayoutA_TV: {self.layout_a}\n"
                f"  LayoutB_TV: {self.layout_b}\n"
                f"  LayoutC_TV: {self.layout_c}\n")


# The (thread, value) layouts of the m16n8 atoms (cute/atom/mma_traits_sm80.hpp's shapes: threads (4, 8) =
# (t, g) of the PTX ISA, values the binary digits of CuTe's V# = elems * reg + half), their strides read off the
# fragment tables of flashsim.warp.fragments (the PTX ISA's "Matrix Fragments for mma.m16n8k16 / m16n8k8"):
# A's index is m + M k, B's n + N k, C's m + M n.
def _mma_tv(instruction, operand, dtype, major):
    frag = fragment(instruction, operand, dtype)
    rows, cols = frag.row.reshape(32, -1), frag.col.reshape(32, -1)  # [lane, v]
    table = rows + frag.rows * cols if major == "row" else cols + frag.cols * rows
    nv = table.shape[1]
    val = tuple([2] * (nv.bit_length() - 1))
    return _derived(frag.name, (4, 8), val if len(val) > 1 else val[0], table)


_A_16x8x16 = _mma_tv("mma.m16n8k16", "A", "f16", "row")
_B_16x8x16 = _mma_tv("mma.m16n8k16", "B", "f16", "col")  # B is K x N: index n + N k
_SM80_16x8_Row = _mma_tv("mma.m16n8k16", "C", "f32", "row")
_SM80_16x8_Row_F16 = _mma_tv("mma.m16n8k16", "C", "f16", "row")  # the same layout, from the f16 table
_A_16x8x8 = _mma_tv("mma.m16n8k8", "A", "f16", "row")
_B_16x8x8 = _mma_tv("mma.m16n8k8", "B", "f16", "col")


def _mma(name, mnk, a, b, c, td, ta, tb, tc, ptx):
    return MMAAtom(name, tuple(s(x) for x in mnk), _L(s(32)), a, b, c, dtype(td), dtype(ta), dtype(tb), dtype(tc), ptx)


SM80_16x8x16_F32F16F16F32_TN = _mma("SM80_16x8x16_F32F16F16F32_TN", (16, 8, 16), _A_16x8x16, _B_16x8x16,
                                    _SM80_16x8_Row, "float", "half_t", "half_t", "float",
                                    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
SM80_16x8x16_F32BF16BF16F32_TN = _mma("SM80_16x8x16_F32BF16BF16F32_TN", (16, 8, 16), _A_16x8x16, _B_16x8x16,
                                      _SM80_16x8_Row, "float", "bfloat16_t", "bfloat16_t", "float",
                                      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
SM80_16x8x16_F16F16F16F16_TN = _mma("SM80_16x8x16_F16F16F16F16_TN", (16, 8, 16), _A_16x8x16, _B_16x8x16,
                                    _SM80_16x8_Row_F16, "half_t", "half_t", "half_t", "half_t",
                                    "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16")
SM80_16x8x8_F32F16F16F32_TN = _mma("SM80_16x8x8_F32F16F16F32_TN", (16, 8, 8), _A_16x8x8, _B_16x8x8,
                                   _SM80_16x8_Row, "float", "half_t", "half_t", "float",
                                   "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32")
SM75_16x8x8_F32F16F16F32_TN = _mma("SM75_16x8x8_F32F16F16F32_TN", (16, 8, 8), _A_16x8x8, _B_16x8x8,
                                   _SM80_16x8_Row, "float", "half_t", "half_t", "float",
                                   "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32")
SM75_16x8x8_F16F16F16F16_TN = _mma("SM75_16x8x8_F16F16F16F16_TN", (16, 8, 8), _A_16x8x8, _B_16x8x8,
                                   _SM80_16x8_Row_F16, "half_t", "half_t", "half_t", "half_t",
                                   "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16")
UniversalFMA_F32 = MMAAtom("UniversalFMA<float,float,float>", (s(1), s(1), s(1)), _L(s(1)),
                           _L((s(1), s(1))), _L((s(1), s(1))), _L((s(1), s(1))),
                           dtype("float"), dtype("float"), dtype("float"), dtype("float"), "fma.rn.f32")

MMA_OPS = {a.name: a for a in (
    SM80_16x8x16_F32F16F16F32_TN, SM80_16x8x16_F32BF16BF16F32_TN, SM80_16x8x16_F16F16F16F16_TN,
    SM80_16x8x8_F32F16F16F32_TN, SM75_16x8x8_F32F16F16F32_TN, SM75_16x8x8_F16F16F16F16_TN,
)}


def make_mma_atom(shape_mnk, thr_id, layout_a, layout_b, layout_c, types=("float", "half_t", "half_t", "float"),
                  name="MMA_Traits"):
    """An MMA atom given by its traits (Shape_MNK, ThrID, ALayout, BLayout, CLayout), e.g. one not modelled here."""
    shape_mnk = it.as_inttuple(shape_mnk, "shape_mnk")
    if not isinstance(shape_mnk, tuple) or len(shape_mnk) != 3:
        raise bad_argument("shape_mnk", shape_mnk, "expected (M, N, K)")
    td, ta, tb, tc = (dtype(t) for t in types)
    return MMAAtom(name, shape_mnk, thr_id, layout_a, layout_b, layout_c, td, ta, tb, tc)


def MMA_Atom(op):
    """``MMA_Atom<Op>``: the atoms here already are MMA atoms."""
    if not isinstance(op, MMAAtom):
        raise bad_argument("op", op, "expected an MMA operation such as SM80_16x8x16_F32F16F16F32_TN")
    return op
