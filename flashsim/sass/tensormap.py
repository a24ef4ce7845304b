"""The tensor map of sm_90's Tensor Memory Accelerator: what ``cuTensorMapEncodeTiled`` takes, checked as the
H100's driver checks it, and where the elements of one copy go.

The parameters are those of CUDA Driver API, "Tensor Map Object Management", ``cuTensorMapEncodeTiled``, with
its enums. The acceptance rules are the driver's as measured on the H100 (:func:`flashsim.sass.cutensormap.
driver_accepts`, which reproduces the return code of all 14,670 recorded calls; the documentation's list
differs in places: a box of more than 228 KiB, global addresses at or above 2^57 and inner box sizes not a
multiple of 16 bytes in interleaved maps are refused; zero strides are accepted): :meth:`TensorMap.encode_tiled`
(and the constructor) raise :class:`flashsim.sass.cutensormap.Rejected` naming the parameter.

The 128 bytes of a ``CUtensorMap`` are opaque to CUDA programs; their layout was derived from the same record
(:mod:`flashsim.sass.cutensormap`): :meth:`TensorMap.to_bytes` writes what the driver writes and
:meth:`TensorMap.from_bytes` reads them back. The interpreter reads the 128 bytes a TMA instruction names and
calls :meth:`TensorMap.from_bytes` on them.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass

import numpy as np

from flashsim.errors import bad_argument
from flashsim.sass import cutensormap

__all__ = ["Box", "CUDA_ERROR_INVALID_VALUE", "DataType", "Interleave", "L2Promotion", "MAX_RANK",
           "NAN_FILL", "OobFill", "PAD_ROWS_TO_SPAN", "REDUCE_OPS", "REDUCE_TYPES", "SHARED_ALIGN", "Swizzle",
           "TensorMap", "box_layout", "element_size", "fill_value", "is_float", "load_box", "reduce_elements",
           "STORE_CHUNK", "illegal_start", "in_order", "load_units", "INTERLEAVE_CHUNK", "store_box", "store_elements", "store_mask", "swizzle_address", "swizzle_span"]

CUDA_ERROR_INVALID_VALUE = 1  # what cuTensorMapEncodeTiled returns for a violated requirement
MAX_RANK = 5  # "the maximum supported dimensionality of 5"
#: the driver's parameter names of TensorMap's tuple fields
_PARAM = {"global_dim": "globalDim", "global_strides": "globalStrides", "box_dim": "boxDim",
          "element_strides": "elementStrides"}


class DataType(enum.IntEnum):
    """CUtensorMapDataType (cuda.h)."""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT32_FTZ = 10
    TFLOAT32 = 11
    TFLOAT32_FTZ = 12
    U4x16_ALIGN8B = 13  # CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B: packed 4-bit values (compute capability 10.0)
    U4x16_ALIGN16B = 14  # CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B
    U6x16_ALIGN16B = 15  # CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B


class Interleave(enum.IntEnum):
    """CUtensorMapInterleave: NC/8HWC8-style layouts whose innermost chunk is 16 or 32 bytes."""

    NONE = 0
    B16 = 1  # CU_TENSOR_MAP_INTERLEAVE_16B
    B32 = 2  # CU_TENSOR_MAP_INTERLEAVE_32B


class Swizzle(enum.IntEnum):
    """CUtensorMapSwizzle: "Swizzle 16B chunks within 32B / 64B / 128B span"; the 128B_ATOM_* modes (32- and
    64-byte chunks) are newer than sm_90."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3
    B128_ATOM_32B = 4
    B128_ATOM_32B_FLIP_8B = 5
    B128_ATOM_64B = 6


class L2Promotion(enum.IntEnum):
    """CUtensorMapL2promotion: the granularity of L2 fills from DRAM (no effect on the bits moved)."""

    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3


class OobFill(enum.IntEnum):
    """CUtensorMapFloatOOBfill: out-of-bound elements read as zero (NONE) or as a special NaN."""

    NONE = 0
    NAN_REQUEST_ZERO_FMA = 1


_SIZES = {DataType.UINT8: 1, DataType.UINT16: 2, DataType.UINT32: 4, DataType.INT32: 4, DataType.UINT64: 8,
          DataType.INT64: 8, DataType.FLOAT16: 2, DataType.FLOAT32: 4, DataType.FLOAT64: 8, DataType.BFLOAT16: 2,
          DataType.FLOAT32_FTZ: 4, DataType.TFLOAT32: 4, DataType.TFLOAT32_FTZ: 4}
_FLOATS = {DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64, DataType.BFLOAT16, DataType.FLOAT32_FTZ,
           DataType.TFLOAT32, DataType.TFLOAT32_FTZ}
_PACKED = {DataType.U4x16_ALIGN8B, DataType.U4x16_ALIGN16B, DataType.U6x16_ALIGN16B}
_SPAN = {Swizzle.NONE: 0, Swizzle.B32: 32, Swizzle.B64: 64, Swizzle.B128: 128, Swizzle.B128_ATOM_32B: 128,
         Swizzle.B128_ATOM_32B_FLIP_8B: 128, Swizzle.B128_ATOM_64B: 128}


def element_size(data_type) -> int:
    """Bytes per element of a CUtensorMapDataType (the sizes in the enum's comments)."""
    dt = _enum(DataType, data_type, "tensorDataType")
    if dt in _PACKED:
        raise NotImplementedError(f"tensorDataType {dt.name}: packed 4- and 6-bit types (compute capability 10.0) "
                                  "are not modelled")
    return _SIZES[dt]


def is_float(data_type) -> bool:
    """Whether the type "represents a floating-point data type" (the condition of the NaN OOB fill)."""
    return _enum(DataType, data_type, "tensorDataType") in _FLOATS


def swizzle_span(swizzle) -> int:
    """The span in bytes within which a swizzle permutes 16-byte chunks (0 for NONE)."""
    return _SPAN[_enum(Swizzle, swizzle, "swizzle")]


def _enum(cls, value, name: str):
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_argument(name, value, f"expected a {cls.__name__} (an int enum value)")
    try:
        return cls(value)
    except ValueError:
        raise bad_argument(name, value, f"not a {cls.__name__} value (known: "
                                        f"{', '.join(f'{m.name}={m.value}' for m in cls)})") from None


def _rank(r) -> int:
    if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= MAX_RANK:
        raise bad_argument("tensorRank", r, f"must be non-zero and at most {MAX_RANK}")
    return r


def _ints(name: str, values, n: int) -> tuple[int, ...]:
    try:
        out = tuple(values)
    except TypeError:
        raise bad_argument(name, values, f"expected a sequence of {n} ints") from None
    if len(out) != n or any(isinstance(v, bool) or not isinstance(v, int) for v in out):
        raise bad_argument(name, values, f"expected {n} ints (one per {'dimension' if n else 'nothing'})")
    return tuple(int(v) for v in out)


@dataclass(frozen=True)
class TensorMap(cutensormap.TiledFields):
    """One tiled tensor map: exactly the arguments of ``cuTensorMapEncodeTiled`` (innermost dimension first;
    the fields of :class:`flashsim.sass.cutensormap.TiledFields`, the enums as this module's enum types),
    checked on construction as the H100's driver checks them (see the module docstring).

    ``global_strides`` are in bytes, one per dimension above the innermost (rank - 1 of them); ``box_dim`` is
    the box traversed per copy in elements; ``element_strides`` its traversal step per dimension."""

    def __post_init__(self):
        set_ = object.__setattr__
        dt = _enum(DataType, self.data_type, "tensorDataType")
        sw = _enum(Swizzle, self.swizzle, "swizzle")
        set_(self, "data_type", dt)
        set_(self, "swizzle", sw)
        set_(self, "interleave", _enum(Interleave, self.interleave, "interleave"))
        set_(self, "l2_promotion", _enum(L2Promotion, self.l2_promotion, "l2Promotion"))
        set_(self, "oob_fill", _enum(OobFill, self.oob_fill, "oobFill"))
        if dt in _PACKED:
            raise NotImplementedError(f"tensorDataType {dt.name}: packed 4- and 6-bit types (compute capability "
                                      "10.0) are not modelled")
        if sw in (Swizzle.B128_ATOM_32B, Swizzle.B128_ATOM_32B_FLIP_8B, Swizzle.B128_ATOM_64B):
            raise NotImplementedError(f"swizzle {sw.name}: the 128B swizzles with 32- and 64-byte atoms (newer "
                                      "than sm_90) are not modelled")
        r = _rank(self.rank)
        for name, n in (("global_dim", r), ("global_strides", r - 1), ("box_dim", r), ("element_strides", r)):
            set_(self, name, _ints(_PARAM[name], getattr(self, name), n))
        # the rules are the H100 driver's, as measured (every one of 14,670 recorded calls), in its order
        cutensormap.check(self)

    # ------------------------------------------------------------------------------------ the driver's call
    @classmethod
    def encode_tiled(cls, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim,
                     elementStrides, interleave=Interleave.NONE, swizzle=Swizzle.NONE,
                     l2Promotion=L2Promotion.NONE, oobFill=OobFill.NONE) -> "TensorMap":
        """``cuTensorMapEncodeTiled``'s arguments in its order (the output pointer left out): the map, or an
        ArgumentError naming the parameter the driver would reject (CUDA_ERROR_INVALID_VALUE)."""
        r = _rank(tensorRank)
        return cls(tensorDataType, r, globalAddress, tuple(globalDim)[:r], tuple(globalStrides)[:r - 1],
                   tuple(boxDim)[:r], tuple(elementStrides)[:r], interleave, swizzle, l2Promotion, oobFill)

    # ------------------------------------------------------------------------------------ derived facts
    @property
    def element_size(self) -> int:
        return _SIZES[self.data_type]

    @property
    def unit_size(self) -> int:
        """The bytes of one step along dimension 0: the element size, or with interleave the 16- or 32-byte
        chunk (INTERLEAVE_CHUNK): an interleaved map counts globalDim[0], boxDim[0], elementStrides[0] and the
        start coordinate 0 in chunks, whatever the data type."""
        return INTERLEAVE_CHUNK.get(self.interleave, self.element_size)

    @property
    def elements_per_dim(self) -> tuple[int, ...]:
        """Units (:attr:`unit_size`) a copy moves along each dimension: ceil(boxDim[i] / elementStrides[i]),
        except that with interleave NONE "the first element of [elementStrides] is ignored" (boxDim[0]
        elements), and that an interleaved map moves one index of dimension rank - 2 (INTERLEAVE_CHUNK)."""
        out = []
        for i, (b, e) in enumerate(zip(self.box_dim, self.element_strides)):
            if i == 0 and self.interleave == Interleave.NONE:
                out.append(b)
            elif self.interleave != Interleave.NONE and i == self.rank - 2:
                out.append(1)
            else:
                out.append(-(-b // e))
        return tuple(out)

    @property
    def box_bytes(self) -> int:
        """The bytes of data one copy moves, what a load's complete-tx counts (with interleave: measured on the
        H100, the loads whose expect-tx was exactly this completed, those expecting less or more did not or
        not always)."""
        return math.prod(self.elements_per_dim) * self.unit_size

    # ------------------------------------------------------------------------------------ the opaque bytes
    @classmethod
    def from_bytes(cls, data: bytes, *, derived: bool = True) -> "TensorMap":
        """The map whose CUtensorMap bytes are ``data`` (128 bytes; :func:`flashsim.sass.cutensormap.decode`:
        bytes no accepted call writes raise BadTensorMapBytes naming the field; ``derived=False``: as the copy
        engine reads them, words 8 and 9 unchecked)."""
        f = cutensormap.decode(data, derived=derived)
        return cls(**{k.name: getattr(f, k.name) for k in dataclasses.fields(f)})

    def to_bytes(self) -> bytes:
        """The 128 bytes cuTensorMapEncodeTiled writes for this map (flashsim.sass.cutensormap.encode)."""
        return cutensormap.encode(self)

    def replace(self, **fields) -> "TensorMap":
        """A copy with ``fields`` changed (checked again)."""
        return dataclasses.replace(self, **fields)


# ================================================================================================ the box
# Where the elements of one copy go. Sources: CUDA Driver API, cuTensorMapEncodeTiled (boxDim, elementStrides,
# interleave, swizzle, oobFill); CUDA C++ Programming Guide, "Tensor Memory Access" / "TMA Swizzle" (the swizzle
# patterns as functions of the shared-memory address, the 128-byte alignment of the shared box, the rows of a
# box narrower than the swizzle span); PTX ISA, "Tensor Access Modes" / "Tiled mode" (bounding box, traversal
# stride, out-of-bound access) and "cp.async.bulk.tensor". Facts measured on the H100 (traces/tma/tma_probes.npz,
# made by gpu/validate_tma.py; "run 1" = its first record) say so; choices still open are named HYPOTHESIS.

SHARED_ALIGN = 128  # the shared box's alignment for every swizzle mode (Programming Guide, "TMA Swizzle" table;
# on the H100 a 128B-swizzled box at 1024 + 768 follows the pattern of its absolute address, run 1)

#: a box row (the boxDim[0] elements of one index of the outer dimensions) narrower than the swizzle span
#: occupies the whole span in shared memory (Programming Guide: "if the swizzle width exceeds the inner
#: dimension, the shared memory must be allocated to accommodate the full swizzle width"; measured on the H100,
#: run 1: every load, store and reduction with 16- and 32-byte rows under the 32B, 64B and 128B swizzles
#: matches). Not so in interleaved maps: their rows are packed (measured: 32-byte rows under the 64B swizzle,
#: tma_interleaved.npz load/395, loaded and stored at a 32-byte pitch)
PAD_ROWS_TO_SPAN = True

#: the NaN an out-of-bound element reads as under OobFill.NAN_REQUEST_ZERO_FMA, per element size: the 16-bit
#: pattern 0x7FF7 repeated (measured on the H100, traces/tma/tma_probes.npz run 1: BFLOAT16 0x7FF7, FLOAT64
#: 0x7FF77FF77FF77FF7; interleaved loads of FLOAT16 and FLOAT32 fill whole 16- and 32-byte chunks with it,
#: tma_interleaved.npz; the 4-byte value alone is not yet measured)
NAN_FILL = {2: 0x7FF7, 4: 0x7FF77FF7, 8: 0x7FF77FF77FF77FF7,
            16: int.from_bytes(b"\xf7\x7f" * 8, "little"), 32: int.from_bytes(b"\xf7\x7f" * 16, "little")}

#: a store or reduction writes dimension 0 in 16-byte chunks: an element past globalDim[0] that shares a 16-byte
#: chunk with the tensor's last element is written too (measured on the H100, run 1: 5 stores and 3
#: reductions whose box crossed the end of dimension 0; loads fill such elements as out of bounds)
STORE_CHUNK = 16

#: Interleaved maps (measured on the H100, traces/tma/tma_interleaved.npz: 22 cases that ran, loads and stores;
#: the record's other 12 stopped with an illegal address, each one whose box, laid out so, overruns its shared
#: allocation). Dimension 0 counts chunks of 16 (B16) or 32 (B32) bytes, whatever the data type: a box row is
#: ceil(boxDim[0] / elementStrides[0]) chunks read from globalAddress + c0 * chunk onwards, every
#: elementStrides[0]-th chunk, and chunks at or past globalDim[0] are out of bounds (filled on loads, not
#: written by stores). The documentation's reading (dimension 0 in elements, one chunk per row) gets 21 of the
#: 22 cases wrong. And dimension rank - 2 is not traversed: a copy moves only the start coordinate's index of
#: it (bounds checked), whatever boxDim[rank - 2] says (rank 3 moves one index of dimension 1, rank 4 of
#: dimension 2, rank 5 of dimension 3, in all 22 cases and the 12 overruns).
INTERLEAVE_CHUNK = {Interleave.B16: 16, Interleave.B32: 32}

_SWIZZLE_BITS = {Swizzle.B32: 1, Swizzle.B64: 2, Swizzle.B128: 3}


def swizzle_address(addr, swizzle):
    """The shared byte address a swizzled copy uses for the unswizzled address ``addr`` (ints or numpy int
    arrays): bits 4.. (the 16-byte chunk) XORed with bits 7.. (the 128-byte row), 1 / 2 / 3 bits for the 32B /
    64B / 128B swizzle (Programming Guide, "TMA Swizzle": ``smem[y][x] <-> smem[y][((y + offset) % n) ^ x]``
    with the row offset ``(address / 128) % n``; CuTe's Swizzle<1,4,3> / <2,4,3> / <3,4,3>). The pattern is a
    function of the absolute address: it repeats every 256 / 512 / 1024 bytes, and a box that starts between
    two repeats starts inside the pattern. An involution; NONE is the identity."""
    sw = Swizzle(int(swizzle))
    if sw == Swizzle.NONE:
        return addr
    if sw not in _SWIZZLE_BITS:
        raise NotImplementedError(f"swizzle {sw.name} is not modelled")
    mask = (1 << _SWIZZLE_BITS[sw]) - 1
    return addr ^ (((addr >> 7) & mask) << 4)


@dataclass(frozen=True)
class Box:
    """The elements of one copy of ``tm`` at ``start`` (tensor coordinates of the box's first element), in
    shared-memory order (dimension 0 fastest): per element its tensor coordinates, whether it lies inside the
    tensor, its global byte address (meaningful where inside) and its shared byte address (swizzled)."""

    tm: TensorMap
    start: tuple[int, ...]
    coords: np.ndarray  # (n, rank) int64
    inside: np.ndarray  # (n,) bool
    global_addr: np.ndarray  # (n,) uint64
    shared_addr: np.ndarray  # (n,) int64, the element's first byte
    row_pitch: int  # shared bytes from one box row to the next

    @property
    def shared_extent(self) -> int:
        """Bytes of shared memory the box spans from its start (rows x pitch)."""
        n = self.tm.elements_per_dim
        return math.prod(n[1:]) * self.row_pitch

    def shared_bytes(self) -> np.ndarray:
        """The shared byte address of every byte of every unit (TensorMap.unit_size), in unit order: a 32-byte
        interleave chunk spans two 16-byte granules, each swizzled on its own (measured, tma_interleaved.npz)."""
        es = self.tm.unit_size
        if es <= 16:  # an element lies within one 16-byte granule, which the swizzle moves whole
            return (self.shared_addr[:, None] + np.arange(es)).reshape(-1)
        plain = swizzle_address(self.shared_addr, self.tm.swizzle)  # the involution undoes it
        return swizzle_address(plain[:, None] + np.arange(es), self.tm.swizzle).reshape(-1)


def box_layout(tm: TensorMap, start, smem_addr: int) -> Box:
    """The :class:`Box` of a copy of ``tm`` at tensor coordinates ``start`` (int32 each, innermost first) whose
    shared box begins at shared address ``smem_addr``.

    Traversal (cuTensorMapEncodeTiled, elementStrides; PTX ISA, "Traversal-Stride"): along dimension i the
    copy visits ``start[i] + k * elementStrides[i]`` for k < ceil(boxDim[i] / elementStrides[i]); along
    dimension 0 of a non-interleaved map the stride is ignored (boxDim[0] consecutive elements). In shared
    memory the elements are packed in that order, dimension 0 fastest, each row of dimension-0 elements at
    ``row_pitch`` bytes from the previous one (its bytes, or the swizzle span / interleave chunk when wider:
    PAD_ROWS_TO_SPAN), and every address goes through :func:`swizzle_address`."""
    r = tm.rank
    start = tuple(int(c) for c in start)
    if len(start) != r:
        raise bad_argument("start", start, f"expected {r} coordinates (the map's rank)")
    for i, c in enumerate(start):
        if not -(1 << 31) <= c < (1 << 31):
            raise bad_argument(f"start[{i}]", c, "tensor coordinates are signed 32-bit integers")
    n = tm.elements_per_dim
    es = tm.unit_size
    step = [1 if (i == 0 and tm.interleave == Interleave.NONE) else tm.element_strides[i] for i in range(r)]
    # element k (dimension 0 fastest) -> its index along each dimension
    idx = np.indices(n[::-1], dtype=np.int64).reshape(r, -1)[::-1]  # (r, count), dim 0 varies fastest
    coords = np.stack([start[i] + idx[i] * step[i] for i in range(r)], axis=1)
    dims = np.array(tm.global_dim, np.int64)
    inside = ((coords >= 0) & (coords < dims)).all(axis=1)
    strides = np.array((es,) + tm.global_strides, np.int64)  # bytes per step of each dimension
    with np.errstate(over="ignore"):
        off = (np.where(inside[:, None], coords, 0) * strides).sum(axis=1)
        gaddr = np.uint64(tm.global_address) + off.astype(np.uint64)
    row = n[0] * es
    pitch = row
    if PAD_ROWS_TO_SPAN and tm.interleave == Interleave.NONE:
        pitch = max(row, swizzle_span(tm.swizzle))
    rows = np.zeros(idx.shape[1], np.int64)
    scale = 1
    for i in range(1, r):
        rows += idx[i] * scale
        scale *= n[i]
    plain = int(smem_addr) + rows * pitch + idx[0] * es
    return Box(tm, start, coords, inside, gaddr, swizzle_address(plain, tm.swizzle), pitch)


def fill_value(tm: TensorMap) -> int:
    """The bits an out-of-bound unit (an element, or an interleaved map's chunk: TensorMap.unit_size) reads as:
    0, or the NaN of NAN_FILL under NAN_REQUEST_ZERO_FMA."""
    if tm.oob_fill == OobFill.NAN_REQUEST_ZERO_FMA:
        return NAN_FILL[tm.unit_size]
    return 0


def load_box(tm: TensorMap, start, smem_addr: int, read) -> tuple[np.ndarray, np.ndarray]:
    """A load (global -> shared): (shared byte addresses, the bytes landing there), every element of the box
    (out-of-bound ones filled, :func:`fill_value`). ``read(addresses)`` returns the unit-size bytes (an element, or
    an interleaved map's chunk) at each global address of an in-bound unit as an (k, unit size) uint8 array."""
    b = box_layout(tm, start, smem_addr)
    return b.shared_bytes(), load_units(tm, b, read).reshape(-1)


def load_units(tm: TensorMap, b: Box, read) -> np.ndarray:
    """The (n, unit size) bytes a load of the laid-out box ``b`` brings: ``read`` (see :func:`load_box`) for the
    in-bound units, :func:`fill_value` for the others."""
    es = tm.unit_size
    data = np.frombuffer(int(fill_value(tm)).to_bytes(es, "little") * len(b.inside), np.uint8).reshape(-1, es).copy()
    if b.inside.any():
        data[b.inside] = np.asarray(read(b.global_addr[b.inside]), np.uint8).reshape(-1, es)
    return data


def store_mask(tm: TensorMap, box: Box) -> np.ndarray:
    """Which elements of ``box`` a store or reduction writes: those inside the tensor, and in dimension 0 also
    those past globalDim[0] in the tensor's last 16-byte chunk (STORE_CHUNK; an interleaved map's units are
    whole chunks)."""
    es = tm.unit_size
    c = box.coords
    dims = np.array(tm.global_dim, np.int64)
    outer = ((c[:, 1:] >= 0) & (c[:, 1:] < dims[1:])).all(axis=1)
    end0 = -(-(int(dims[0]) * es) // STORE_CHUNK) * STORE_CHUNK
    return outer & (c[:, 0] >= 0) & (c[:, 0] * es < end0)


def store_box(tm: TensorMap, start, smem_addr: int, smem: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A store (shared -> global): (global addresses of the elements written (:func:`store_mask`), their bytes
    (k, element size)), read from ``smem`` (the CTA's shared bytes, indexed by shared address); elements out of
    bounds in the outer dimensions are not written (PTX ISA, "Tiled mode")."""
    return store_elements(tm, box_layout(tm, start, smem_addr), smem)[:2]


def store_elements(tm: TensorMap, b: Box, smem: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`store_box` of the box ``b`` already laid out: (global addresses, bytes (k, element size), the
    shared byte addresses they were read from (k, element size)); units of TensorMap.unit_size bytes."""
    es = tm.unit_size
    keep = store_mask(tm, b)
    c = b.coords[keep]
    strides = np.array((es,) + tm.global_strides, np.int64)
    with np.errstate(over="ignore"):
        gaddr = np.uint64(tm.global_address) + (c * strides).sum(axis=1).astype(np.uint64)
    sb = b.shared_bytes().reshape(-1, es)[keep]
    return gaddr, np.asarray(smem)[sb].reshape(-1, es), sb


def in_order(addresses) -> list[np.ndarray]:
    """The indices of a copy's unit ``addresses`` in layers, each holding an address at most once (the j-th
    occurrence of every address in layer j): writing or reducing the layers in turn applies the units in box
    order. An interleaved map's rows can overlap in global memory; the H100 applies overlapping units in box
    order (measured, tma_interleaved.npz: a store's later rows win; an f16 .add of 42 chunks onto 30 matches
    box order bit for bit and not the reverse). Units are aligned to their size, so two either coincide or are
    disjoint. One layer (all indices) when no address repeats."""
    a = np.asarray(addresses)
    n = len(a)
    if len(np.unique(a)) == n:
        return [np.arange(n)]
    order = np.argsort(a, kind="stable")
    sa = a[order]
    first = np.r_[True, sa[1:] != sa[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    occurrence = np.empty(n, np.int64)
    occurrence[order] = np.arange(n) - group_start
    return [np.nonzero(occurrence == j)[0] for j in range(int(occurrence.max()) + 1)]


def illegal_start(tm: TensorMap, start, store: bool) -> str | None:
    """Why the H100 stops a copy of ``tm`` at ``start`` with an illegal-instruction error, or None. Measured
    (traces/tma/tma_probes.npz run 1): of 116 probe cases, the 27 that ran and 88 of the 89 that stopped are
    told apart by these two rules (the other one: an .xor reduction on INT64, see REDUCE_TYPES):

    * dimension 0's start must be 16-byte aligned, ``start[0] * element size`` a multiple of 16, for loads and
      stores alike (non-interleaved maps);
    * a store or reduction may not start at a negative coordinate in any dimension (loads may: the rows and
      elements below zero are filled)."""
    if tm.interleave == Interleave.NONE and (int(start[0]) * tm.element_size) % 16:
        return (f"tensor coordinate 0 = {int(start[0])} ({int(start[0]) * tm.element_size} bytes) is not 16-byte "
                "aligned")
    if store:
        neg = [i for i, c in enumerate(start) if int(c) < 0]
        if neg:
            return f"a store or reduction at negative tensor coordinate {neg[0]} = {int(start[neg[0]])}"
    return None


# ------------------------------------------------------------------------------------------------ reductions
REDUCE_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")

#: the tensor types each reduction takes (PTX ISA, "cp.reduce.async.bulk.tensor": .add .u32 .s32 .u64 .f32
#: .f16 .bf16; .min/.max .u32 .s32 .u64 .s64 .f16 .bf16; .inc/.dec .u32; .and/.or/.xor .b32 .b64)
REDUCE_TYPES = {
    "add": {DataType.UINT32, DataType.INT32, DataType.UINT64, DataType.FLOAT32, DataType.FLOAT32_FTZ,
            DataType.FLOAT16, DataType.BFLOAT16},
    "min": {DataType.UINT32, DataType.INT32, DataType.UINT64, DataType.INT64, DataType.FLOAT16, DataType.BFLOAT16},
    "max": {DataType.UINT32, DataType.INT32, DataType.UINT64, DataType.INT64, DataType.FLOAT16, DataType.BFLOAT16},
    "inc": {DataType.UINT32},
    "dec": {DataType.UINT32},
    # INT64 left out: an .xor on an INT64 map stopped the H100 with an illegal instruction (run 1, one case)
    "and": {DataType.UINT32, DataType.INT32, DataType.UINT64},
    "or": {DataType.UINT32, DataType.INT32, DataType.UINT64},
    "xor": {DataType.UINT32, DataType.INT32, DataType.UINT64},
}


def reduce_elements(op: str, data_type, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``old <op> new`` per element (uint8 arrays (k, w), w a multiple of the element size, little-endian; the
    result has the shape of ``old``): what a reduction leaves in
    global memory. Floating-point add rounds to nearest even once (flashsim.numerics: fp32.add, half.add);
    Measured on the H100 (run 1, every element bit for bit): .add on FLOAT16, UINT32, UINT64; .min on UINT32,
    BFLOAT16; .max on INT32; .inc on UINT32; .and on UINT32. HYPOTHESIS (not yet recorded): f32 add keeps
    subnormals (FLOAT32_FTZ flushes them); min/max of floats ignore a NaN operand (two NaNs: the canonical NaN)
    and order -0 below +0."""
    from flashsim.numerics import fp32, half

    dt = _enum(DataType, data_type, "tensorDataType")
    if op not in REDUCE_OPS:
        raise bad_argument("op", op, f"expected one of {REDUCE_OPS}")
    if dt not in REDUCE_TYPES[op]:
        raise NotImplementedError(f"cp.reduce.async.bulk.tensor .{op} on {dt.name} (not a type the PTX ISA lists "
                                  "for it, or one the H100 stopped) is not modelled")
    es = _SIZES[dt]
    view = {2: np.uint16, 4: np.uint32, 8: np.uint64}[es]
    a = np.ascontiguousarray(old, np.uint8).reshape(-1, es).view(view)[:, 0]
    b = np.ascontiguousarray(new, np.uint8).reshape(-1, es).view(view)[:, 0]
    if dt in (DataType.FLOAT32, DataType.FLOAT32_FTZ):
        out = fp32.add(a, b, ftz=dt == DataType.FLOAT32_FTZ)
    elif dt in (DataType.FLOAT16, DataType.BFLOAT16):
        fmt = "f16" if dt == DataType.FLOAT16 else "bf16"
        out = half.add(a, b, fmt=fmt) if op == "add" else _half_minmax(a, b, fmt, op == "max")
    else:
        signed = dt in (DataType.INT32, DataType.INT64)
        sdt = {4: np.int32, 8: np.int64}[es]
        with np.errstate(over="ignore"):
            if op == "add":
                out = a + b
            elif op in ("min", "max"):
                x, y = (a.view(sdt), b.view(sdt)) if signed else (a, b)
                out = (np.minimum(x, y) if op == "min" else np.maximum(x, y)).view(view)
            elif op == "inc":  # atom.inc: old >= new ? 0 : old + 1
                out = np.where(a >= b, view(0), a + view(1))
            elif op == "dec":  # atom.dec: old == 0 or old > new ? new : old - 1
                out = np.where((a == 0) | (a > b), b, a - view(1))
            else:
                out = {"and": a & b, "or": a | b, "xor": a ^ b}[op]
    width = np.asarray(old).shape[-1] if np.ndim(old) == 2 else es  # an interleaved map's chunks: several elements
    return np.asarray(out, view).reshape(-1, 1).view(np.uint8).reshape(-1, width)


def _half_minmax(a, b, fmt: str, want_max: bool):
    from flashsim.numerics.formats import BF16, F16
    from flashsim.numerics.half import CANONICAL_NAN, to_value

    f = F16 if fmt == "f16" else BF16
    x, y = to_value(a, f), to_value(b, f)
    sa = (a & 0x8000) != 0  # ties (-0 vs +0): max keeps +0, min keeps -0
    with np.errstate(invalid="ignore"):
        a_wins = (x > y) | ((x == y) & ~sa) if want_max else (x < y) | ((x == y) & sa)
    out = np.where(a_wins, a, b)
    nx, ny = np.isnan(x), np.isnan(y)
    out = np.where(nx & ~ny, b, np.where(ny & ~nx, a, out))
    return np.where(nx & ny, CANONICAL_NAN, out).astype(np.uint16)
