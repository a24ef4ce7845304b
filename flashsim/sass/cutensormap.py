"""The 128 bytes of a ``CUtensorMap`` as ``cuTensorMapEncodeTiled`` writes them for an sm_90 device, and the
rules by which the driver accepts or refuses a call: :func:`encode`, :func:`decode`, :func:`driver_accepts`,
:func:`driver_output`.

Source: 14,670 calls of ``cuTensorMapEncodeTiled`` recorded on an H100 (driver 580.159.04, CUDA 13.0;
traces/tma/tma_probes.npz, keys ``encode/*``, made by gpu/validate_tma.py): 10 base maps (ranks 1-5, a FLOAT32
map without swizzle and a BFLOAT16 map with the 128B swizzle, L2 256B and the NaN fill), 11,060 sweeps that move
one argument of a base map at a time ("dtype", "addr bit k", "addr", "dims[i]", "strides[i]", "box[i]",
"estr[i]", "interleave", "swizzle", "l2", "oob", "tensorMap misaligned"), 3,000 random maps valid by the
documentation and 600 random maps each breaking one documented rule. :func:`encode` reproduces the 128 bytes of
all 8,390 accepted calls, :func:`driver_accepts` the return code of all 14,670 and :func:`driver_output` the
128 bytes every one of them left at its output, refused calls included (tests/test_cutensormap.py).

The map is 16 little-endian 64-bit words; word ``w`` is bytes ``8w .. 8w+7``. In the table ``stride >> 4``
is a global stride in units of 16 bytes, and a "slot" of a dimension at or above ``tensorRank`` holds 0.

======  ==========  ====================================================  ============================================
word    bits        field and encoding                                    evidence
======  ==========  ====================================================  ============================================
0       0-63        globalAddress, as given (bits 0-3 and 57-63 are 0     sweep "addr bit k": bit k of the word
                    in every accepted map)                                follows bit k of the address, k = 4..56;
                                                                          sweep "addr": 0, 2^47, 2^57 - 16
1       0           0: a tiled map (1 in all 12 cuTensorMapEncodeIm2col   the im2col records
                    records)
1       1-3         0 in every record
1       4-6         tensorRank - 1                                        the base maps, ranks 1..5
1       7-10        the type code: UINT8 0, UINT16 1, UINT32 2, INT32 3,  sweep "dtype" over 0..16, 255, 2^31 (75
                    UINT64 4, INT64 5, FLOAT16 6, FLOAT32 7,              accepted); note FLOAT32_FTZ = 8 and
                    FLOAT32_FTZ 8, FLOAT64 9, BFLOAT16 10; TFLOAT32 and   FLOAT64 = 9 although the enum numbers
                    TFLOAT32_FTZ write FLOAT32's / FLOAT32_FTZ's code     them 10 and 8
                    (7 / 8) and set bit 16. Codes 11-15: never written
1       11-12       interleave (0 NONE, 1 16B, 2 32B)                     sweep "interleave"
1       13-14       swizzle (0 NONE, 1 32B, 2 64B, 3 128B)                sweep "swizzle"
1       15          oobFill (1: NAN_REQUEST_ZERO_FMA)                     sweep "oob"
1       16          1 for TFLOAT32 and TFLOAT32_FTZ                       sweep "dtype" (types 11, 12)
1       17-18       l2Promotion (0 NONE .. 3 L2_256B)                     sweep "l2"
1       19-31       0 in every record
1       32-63       bits 0-31 of globalStrides[0] >> 4                    sweep "strides[0]"
2       0-31        bits 0-31 of globalStrides[1] >> 4                    sweep "strides[1]"
2       32-63       bits 0-31 of globalStrides[2] >> 4                    sweep "strides[2]"
3       0-31        bits 0-31 of globalStrides[3] >> 4                    sweep "strides[3]"
3       32+4k..     bits 32-35 of globalStrides[k] >> 4 (stride bits      sweeps "strides[k]" at 2^39, 2^40 - 32,
        35+4k       36-39), k = 0..3                                      2^40 - 16 (72 accepted strides >= 2^36)
3       48-63       0 in every record
4       0-31        globalDim[0] - 1                                      sweep "dims[0]" over 1 .. 2^32
4       32-63       globalDim[1] - 1                                      sweep "dims[1]"
5       0-31        globalDim[2] - 1                                      sweep "dims[2]"
5       32-63       globalDim[3] - 1                                      sweep "dims[3]"
6       0-31        globalDim[4] - 1                                      sweep "dims[4]"
6       32+3k..     elementStrides[k] - 1, k = 0..4                       sweeps "estr[k]" over 1..8
        34+3k
6       47-55       0 in every record
6       56-63       boxDim[0] - 1                                         sweep "box[0]" over 1..256
7       8k-8k+7     boxDim[k+1] - 1, k = 0..3                             sweeps "box[1]" .. "box[4]"
7       32-63       0 in every record
8       0-63        the bytes of one box: the product over all            3,239 accepted maps where floor and
                    dimensions of boxDim[i] // elementStrides[i] (rounded  ceiling differ, 509 where
                    down; elementStrides[0] counts also without           elementStrides[0] changes the count;
                    interleave), times the element size; 0 when some      2,178 maps with an element stride above
                    elementStrides[i] > boxDim[i]. At most 233,472        its box dimension hold 0
9       0-63        16, 256, 512, 1024 for swizzle NONE, 32B, 64B, 128B   every accepted map (interleave does not
                    (the span after which the swizzle pattern repeats;    change it)
                    16 without swizzle)
10-15   0-63        0 in every record
======  ==========  ====================================================  ============================================

The driver's acceptance rules, in the order the driver checks them (CUDA_ERROR_INVALID_VALUE at the first one
broken). "documented" marks a rule the Driver API's list of requirements states, "found" one the record shows
and the documentation does not state or states otherwise. The order is read off what a refused call leaves in
the output (:func:`driver_output` reproduces the 128 bytes of all 6,280 refused calls too): steps 1 leave it
untouched (179 calls), steps 2 leave it zeroed, and from step 3 on the driver writes each field right after
checking it, so the fields before the failing check are in place and words 8 and 9 (written last) are 0.

1. Before writing anything: tensorRank is not 0, and no globalDim[i], boxDim[i] or elementStrides[i]
   (i < tensorRank) is 0 (documented: "non-zero"). Which of these comes first is not visible.
2. Output zeroed. tensorRank <= 5 (documented). globalAddress is a multiple of 16 (documented) and below 2^57
   (found: each of bits 57..63 is refused, 2^57 - 16 and the address 0 are accepted; 347 calls valid by the
   documentation refused); with interleave 32B, a multiple of 32 (documented). interleave != NONE needs
   tensorRank >= 3 (documented; any non-zero interleave value is refused here, 3 included).
3. Word 0 written, then word 1 field by field, each checked first: tensorRank; tensorDataType is 0..12
   (found: 13..15, the packed 4- and 6-bit types CUDA 13 documents for compute capability 10.0, are refused
   on sm_90, as is every other value); interleave is 0..2; swizzle is 0..3 (found: the 128B_ATOM_* swizzles
   4..6 are refused on sm_90); oobFill is 0..1 and NAN_REQUEST_ZERO_FMA needs a floating-point tensorDataType
   (FLOAT16 .. TFLOAT32_FTZ, 6..12) (documented); l2Promotion is 0..3 (documented).
4. Each globalStrides[k] in turn: a multiple of 16 and below 2^40 (documented), a multiple of 32 with
   interleave 32B (documented). 0 is accepted (found: 28 accepted calls), and so is a stride smaller than the
   extent of the dimension below it (found).
5. Per dimension k in turn: globalDim[k] <= 2^32 (documented), then elementStrides[k] <= 8 (documented).
6. Each boxDim[k] in turn: <= 256 (documented). A box larger than the tensor is accepted (found).
7. The rules that combine fields (their order among themselves leaves no trace):
   a. boxDim[0] * element size is a multiple of 16 bytes WITH OR WITHOUT interleave (found: the documentation
      states it for interleave NONE only; 326 interleaved calls valid by the documentation refused).
      elementStrides[0] does not enter it.
   b. With interleave NONE and a swizzle, boxDim[0] * element size is at most the swizzle span, 32 / 64 / 128
      bytes (documented). With interleave 16B or 32B there is no such bound (found: 944 inner bytes with the
      32B swizzle accepted), and interleave 32B does not need swizzle 32B (found: the documentation says it
      does; 32B interleave with swizzle NONE, 64B and 128B accepted, 8 calls).
   c. The bytes of one box, word 8 (the product of boxDim[i] // elementStrides[i], rounded down, times the
      element size), are at most 233,472 = 228 KiB, the shared memory of an H100 SM (found: the largest
      accepted box holds 233,472 bytes, the smallest refused 235,056; rounded down, not up: 109 accepted
      calls exceed the limit when rounded up; 2,186 calls valid by the documentation refused).
8. Words 8 and 9 written: CUDA_SUCCESS.

The ``tensorMap`` pointer's alignment is not checked (found: the documentation requires 64 bytes; outputs 8,
16, 32 and 48 bytes past a 64-byte boundary were written in full, 41 calls), so it is not a field here.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass

from flashsim.errors import ArgumentError

__all__ = ["BadTensorMapBytes", "DATA_TYPE_NAMES", "INTERLEAVE_NAMES", "L2_PROMOTION_NAMES", "MAX_ADDRESS",
           "MAX_BOX", "MAX_DIM", "MAX_ELEMENT_STRIDE", "MAX_RANK", "MAX_STRIDE", "OOB_FILL_NAMES", "Rejected",
           "SHARED_BOX_LIMIT", "SWIZZLE_NAMES", "SWIZZLE_REPEAT", "TiledFields", "box_bytes", "decode",
           "driver_accepts", "driver_output", "element_size", "encode"]

# ------------------------------------------------------------------------------------------------ the enums
# Spelled as flashsim.sass.tensormap's enums (DataType, Interleave, Swizzle, L2Promotion, OobFill) spell them.
DATA_TYPE_NAMES = {0: "UINT8", 1: "UINT16", 2: "UINT32", 3: "INT32", 4: "UINT64", 5: "INT64", 6: "FLOAT16",
                   7: "FLOAT32", 8: "FLOAT64", 9: "BFLOAT16", 10: "FLOAT32_FTZ", 11: "TFLOAT32", 12: "TFLOAT32_FTZ",
                   13: "U4x16_ALIGN8B", 14: "U4x16_ALIGN16B", 15: "U6x16_ALIGN16B"}
INTERLEAVE_NAMES = {0: "NONE", 1: "B16", 2: "B32"}
SWIZZLE_NAMES = {0: "NONE", 1: "B32", 2: "B64", 3: "B128", 4: "B128_ATOM_32B", 5: "B128_ATOM_32B_FLIP_8B",
                 6: "B128_ATOM_64B"}
L2_PROMOTION_NAMES = {0: "NONE", 1: "L2_64B", 2: "L2_128B", 3: "L2_256B"}
OOB_FILL_NAMES = {0: "NONE", 1: "NAN_REQUEST_ZERO_FMA"}

_SIZES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
_FLOATS = frozenset(range(6, 13))
_PACKED = frozenset((13, 14, 15))
_SPAN = {1: 32, 2: 64, 3: 128}

# ------------------------------------------------------------------------------------------------ the limits
MAX_RANK = 5
MAX_DIM = 1 << 32  # globalDim[i] <= 2^32 (stored as globalDim[i] - 1 in 32 bits)
MAX_STRIDE = 1 << 40  # globalStrides[i] < 2^40 (stored >> 4 in 36 bits)
MAX_BOX = 256  # boxDim[i] <= 256 (stored - 1 in 8 bits)
MAX_ELEMENT_STRIDE = 8  # elementStrides[i] <= 8 (stored - 1 in 3 bits)
MAX_ADDRESS = 1 << 57  # globalAddress < 2^57 (each of bits 57..63 is refused)
SHARED_BOX_LIMIT = 233472  # bytes of one box: 228 KiB, an H100 SM's shared memory
#: word 9 per swizzle: the span after which the swizzle pattern repeats (16 without swizzle)
SWIZZLE_REPEAT = {0: 16, 1: 256, 2: 512, 3: 1024}

# word 1: the type codes (the code, the TF32 flag) per CUtensorMapDataType
_TYPE_CODE = {0: (0, 0), 1: (1, 0), 2: (2, 0), 3: (3, 0), 4: (4, 0), 5: (5, 0), 6: (6, 0), 7: (7, 0), 8: (9, 0),
              9: (10, 0), 10: (8, 0), 11: (7, 1), 12: (8, 1)}
_TYPE_OF_CODE = {v: k for k, v in _TYPE_CODE.items()}
_M32 = (1 << 32) - 1


# ------------------------------------------------------------------------------------------------ the errors
class Rejected(ArgumentError):
    """The driver refuses these arguments (CUDA_ERROR_INVALID_VALUE): ``.field`` names the parameter
    (``boxDim[2]``), ``.reason`` is the rule broken."""

    def __init__(self, field: str, reason: str):
        self.field, self.reason = field, reason
        super().__init__(f"cuTensorMapEncodeTiled refuses these arguments: {reason}")


class BadTensorMapBytes(ArgumentError):
    """128 bytes that no accepted cuTensorMapEncodeTiled call writes: ``.field`` names the field of the map
    (a parameter name such as ``globalDim[1]``, or the bits of a word that are 0 in every map)."""

    def __init__(self, field: str, why: str):
        self.field = field
        super().__init__(f"not a tiled CUtensorMap: {field}: {why}")


# ------------------------------------------------------------------------------------------------ the fields
def _int(name: str, v, bits: int) -> int:
    try:
        if isinstance(v, bool):
            raise TypeError
        v = operator.index(v)  # ints, int enums, numpy integers
    except TypeError:
        raise ArgumentError(f"{name}={v!r}: expected an int") from None
    if not 0 <= v < 1 << bits:
        raise ArgumentError(f"{name}={v!r}: not representable as the {bits}-bit unsigned value the driver takes")
    return v


def _ints(name: str, values, bits: int) -> tuple[int, ...]:
    try:
        items = tuple(values)
    except TypeError:
        raise ArgumentError(f"{name}={values!r}: expected a sequence of ints") from None
    return tuple(_int(f"{name}[{i}]", v, bits) for i, v in enumerate(items))


@dataclass(frozen=True)
class TiledFields:
    """The arguments of one ``cuTensorMapEncodeTiled`` call, the output pointer left out, in its parameter
    order and under flashsim.sass.tensormap.TensorMap's names: innermost dimension first; ``global_strides``
    in bytes, one per dimension above the innermost (rank - 1 of them). Enum arguments are plain ints (int
    enums compare equal to them). Any value the C parameter types can carry is allowed, so that rejected
    calls can be described too; with a rank of 1..5 the tuples must have the rank's lengths."""

    data_type: int
    rank: int
    global_address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: int = 0
    swizzle: int = 0
    l2_promotion: int = 0
    oob_fill: int = 0

    def __post_init__(self):
        set_ = object.__setattr__
        for name in ("data_type", "rank", "interleave", "swizzle", "l2_promotion", "oob_fill"):
            set_(self, name, _int(name, getattr(self, name), 32))
        set_(self, "global_address", _int("global_address", self.global_address, 64))
        set_(self, "global_dim", _ints("global_dim", self.global_dim, 64))
        set_(self, "global_strides", _ints("global_strides", self.global_strides, 64))
        set_(self, "box_dim", _ints("box_dim", self.box_dim, 32))
        set_(self, "element_strides", _ints("element_strides", self.element_strides, 32))
        r = self.rank
        if 1 <= r <= MAX_RANK:
            for name, n in (("global_dim", r), ("global_strides", r - 1), ("box_dim", r), ("element_strides", r)):
                if len(getattr(self, name)) != n:
                    raise ArgumentError(f"{name}={getattr(self, name)!r}: expected {n} entries for rank {r}")

    @classmethod
    def of(cls, obj) -> "TiledFields":
        """The fields of any object with these attributes (a flashsim.sass.tensormap.TensorMap)."""
        return cls(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)})

    def replace(self, **changes) -> "TiledFields":
        return dataclasses.replace(self, **changes)


def element_size(data_type: int) -> int:
    """Bytes per element of a CUtensorMapDataType the sm_90 driver accepts (0..12)."""
    if data_type not in _SIZES:
        raise ArgumentError(f"data_type={data_type!r}: not a CUtensorMapDataType accepted on sm_90 (0..12)")
    return _SIZES[data_type]


def box_bytes(f: TiledFields) -> int:
    """Word 8 of the map: the product over all dimensions of boxDim[i] // elementStrides[i] (rounded down,
    elementStrides[0] included), times the element size. The driver bounds it by SHARED_BOX_LIMIT."""
    n = element_size(f.data_type)
    for k, (b, e) in enumerate(zip(f.box_dim, f.element_strides)):
        if e == 0:
            raise ArgumentError(f"element_strides[{k}]=0: the box of a map with a zero element stride has no size")
        n *= b // e
    return n


# ------------------------------------------------------------------------------------------------ the driver
def _enum_text(value: int, names: dict) -> str:
    return f"{value} ({names[value]})" if value in names else str(value)


def _run(f: TiledFields) -> tuple[list[int] | None, tuple[str, str] | None]:
    """cuTensorMapEncodeTiled's steps, in the driver's order: (the 16 words the output holds afterwards, or
    None where the driver did not touch it; the first rule broken as (field, reason), or None).

    The order is the one the leftovers of refused calls show (see the module docstring): checks of zero
    arguments before anything is written; then the output is zeroed; then the rank, the address and
    interleave's rank; then each field is checked and written in turn, word 1's flags from bit 4 up, the
    strides, per dimension its size and element stride, the box sizes; the rules that combine fields; and
    words 8 and 9 last."""
    r, dt, il, sw = f.rank, f.data_type, f.interleave, f.swizzle
    n5 = min(r, MAX_RANK)
    # 1. nothing written yet
    if r == 0:
        return None, ("tensorRank", "tensorRank = 0 is zero")
    for name, values in (("globalDim", f.global_dim), ("boxDim", f.box_dim), ("elementStrides", f.element_strides)):
        for k, v in enumerate(values[:n5]):
            if v == 0:
                return None, (f"{name}[{k}]", f"{name}[{k}] = 0 is zero")
    # 2. the output zeroed
    w = [0] * 16

    def fail(field: str, reason: str):
        return w, (field, reason)

    if r > MAX_RANK:
        return fail("tensorRank", f"tensorRank = {r} exceeds {MAX_RANK}")
    a = f.global_address
    if a % 16:
        return fail("globalAddress", f"globalAddress = {a:#x} is not a multiple of 16")
    if a >= MAX_ADDRESS:
        return fail("globalAddress", f"globalAddress = {a:#x} is not below 2^57 (bits 57..63 must be 0)")
    if il == 2 and a % 32:
        return fail("globalAddress", f"globalAddress = {a:#x} is not a multiple of 32 (interleave 32B)")
    if il and r < 3:
        return fail("interleave", f"interleave = {_enum_text(il, INTERLEAVE_NAMES)} needs tensorRank >= 3, not {r}")
    # 3. word 0, then word 1's flags in bit order
    w[0] = a
    w[1] = (r - 1) << 4
    if dt in _PACKED:
        return fail("tensorDataType", f"tensorDataType = {_enum_text(dt, DATA_TYPE_NAMES)}: the packed 4- and "
                                      "6-bit types are refused on sm_90")
    if dt not in _TYPE_CODE:
        return fail("tensorDataType", f"tensorDataType = {dt} is not a CUtensorMapDataType (0..12 on sm_90)")
    code, tf32 = _TYPE_CODE[dt]
    w[1] |= (code << 7) | (tf32 << 16)
    if il not in INTERLEAVE_NAMES:
        return fail("interleave", f"interleave = {il} is not a CUtensorMapInterleave (0..2)")
    w[1] |= il << 11
    if sw in (4, 5, 6):
        return fail("swizzle", f"swizzle = {_enum_text(sw, SWIZZLE_NAMES)} is refused on sm_90 (0..3 only)")
    if sw not in SWIZZLE_REPEAT:
        return fail("swizzle", f"swizzle = {sw} is not a CUtensorMapSwizzle (0..3 on sm_90)")
    w[1] |= sw << 13
    if f.oob_fill not in OOB_FILL_NAMES:
        return fail("oobFill", f"oobFill = {f.oob_fill} is not a CUtensorMapFloatOOBfill (0..1)")
    if f.oob_fill and dt not in _FLOATS:
        return fail("oobFill", f"oobFill = 1 (NAN_REQUEST_ZERO_FMA) needs a floating-point tensorDataType, not "
                               f"{_enum_text(dt, DATA_TYPE_NAMES)}")
    w[1] |= f.oob_fill << 15
    if f.l2_promotion not in L2_PROMOTION_NAMES:
        return fail("l2Promotion", f"l2Promotion = {f.l2_promotion} is not a CUtensorMapL2promotion (0..3)")
    w[1] |= f.l2_promotion << 17
    # 4. the strides, one by one
    for k, s in enumerate(f.global_strides):
        if s % 16:
            return fail(f"globalStrides[{k}]", f"globalStrides[{k}] = {s} is not a multiple of 16")
        if s >= MAX_STRIDE:
            return fail(f"globalStrides[{k}]", f"globalStrides[{k}] = {s} is not below 2^40")
        if il == 2 and s % 32:
            return fail(f"globalStrides[{k}]", f"globalStrides[{k}] = {s} is not a multiple of 32 (interleave 32B)")
        v = s >> 4
        w[1 + (k + 1) // 2] |= (v & _M32) << (32 * ((k + 1) % 2))  # words 1 hi, 2 lo, 2 hi, 3 lo
        w[3] |= (v >> 32) << (32 + 4 * k)
    # 5. per dimension: its size, then its element stride
    for k in range(r):
        d = f.global_dim[k]
        if d > MAX_DIM:
            return fail(f"globalDim[{k}]", f"globalDim[{k}] = {d} exceeds 2^32")
        w[4 + k // 2] |= (d - 1) << (32 * (k % 2))  # words 4 lo, 4 hi, 5 lo, 5 hi, 6 lo
        e = f.element_strides[k]
        if e > MAX_ELEMENT_STRIDE:
            return fail(f"elementStrides[{k}]", f"elementStrides[{k}] = {e} exceeds {MAX_ELEMENT_STRIDE}")
        w[6] |= (e - 1) << (32 + 3 * k)
    # 6. the box
    for k, b in enumerate(f.box_dim):
        if b > MAX_BOX:
            return fail(f"boxDim[{k}]", f"boxDim[{k}] = {b} exceeds {MAX_BOX}")
        if k == 0:
            w[6] |= (b - 1) << 56
        else:
            w[7] |= (b - 1) << (8 * (k - 1))
    # 7. the rules that combine fields (their order among themselves leaves no trace in the bytes)
    es = _SIZES[dt]
    inner = f.box_dim[0] * es
    inner_text = f"boxDim[0] = {f.box_dim[0]} x {es} bytes of tensorDataType {DATA_TYPE_NAMES[dt]} = {inner}"
    if inner % 16:
        return fail("boxDim[0]", f"the inner box dimension in bytes ({inner_text}) is not a multiple of 16")
    if il == 0 and sw and inner > _SPAN[sw]:
        return fail("boxDim[0]", f"the inner box dimension in bytes ({inner_text}) exceeds the {_SPAN[sw]}B "
                                 f"swizzle span (swizzle = {_enum_text(sw, SWIZZLE_NAMES)})")
    n = box_bytes(f)
    if n > SHARED_BOX_LIMIT:
        return fail("boxDim", f"the box holds {n} bytes (the product of boxDim[i] // elementStrides[i], times the "
                              f"element size {es}), more than the {SHARED_BOX_LIMIT} bytes (228 KiB) of an SM's "
                              "shared memory")
    # 8. the derived words
    w[8] = n
    w[9] = SWIZZLE_REPEAT[sw]
    return w, None


def _bytes(words: list[int]) -> bytes:
    return b"".join(x.to_bytes(8, "little") for x in words)


def check(f: TiledFields) -> None:
    """Raise :class:`Rejected` (naming the parameter) when the sm_90 driver refuses ``f``."""
    v = _run(f)[1]
    if v is not None:
        raise Rejected(*v)


def driver_accepts(f: TiledFields) -> tuple[bool, str]:
    """(True, "") when the sm_90 driver accepts the call (CUDA_SUCCESS), else (False, the first rule broken in
    the driver's order, naming the parameter): CUDA_ERROR_INVALID_VALUE."""
    v = _run(f)[1]
    return (True, "") if v is None else (False, v[1])


def encode(f: TiledFields) -> bytes:
    """The 128 bytes cuTensorMapEncodeTiled writes for ``f`` (see the table in the module docstring); a call
    the driver refuses raises :class:`Rejected`."""
    check(f)
    return _bytes(_run(f)[0])


def driver_output(f: TiledFields, before: bytes) -> bytes:
    """The 128 bytes at the ``tensorMap`` pointer after the call, accepted or not, given the bytes ``before``
    it: a refused call leaves them untouched (a zero rank, size, box size or element stride) or zeroed with
    the fields written up to the failing check (any other rule)."""
    before = bytes(before)
    if len(before) != 128:
        raise ArgumentError(f"before={before[:16]!r}...: expected 128 bytes, got {len(before)}")
    words = _run(f)[0]
    return before if words is None else _bytes(words)


def _bits(word: int, lo: int, n: int) -> int:
    return (word >> lo) & ((1 << n) - 1)


def decode(data, *, derived: bool = True) -> TiledFields:
    """The arguments of the cuTensorMapEncodeTiled call that wrote ``data`` (128 bytes: bytes, bytearray,
    memoryview or a uint8 array). Bytes that no accepted call writes raise :class:`BadTensorMapBytes` naming
    the field: the leftovers of a refused call (word 9 is 0) or an untouched buffer, bits that are 0 in every
    map, a code no argument maps to, an unused dimension slot that is not 0, a derived word (8, 9) that
    disagrees with the fields, or fields the driver would refuse.

    ``derived=False`` reads a map as the copy engine does: words 8 and 9, which the driver derives from the
    fields and ``tensormap.replace`` on the device never writes (a map a kernel builds in place holds 0 there),
    are not checked (H100: the Triton suite's device-descriptor kernels, traces/triton/triton_suite.json, build
    their maps with tensormap.replace, so with words 8 and 9 left 0, and the interpreter reading them so gives
    the H100's bytes on all 10 of those cases)."""
    raw = bytes(memoryview(data).cast("B")) if not isinstance(data, (bytes, bytearray)) else bytes(data)
    if len(raw) != 128:
        raise ArgumentError(f"data={raw[:16]!r}...: expected the 128 bytes of a CUtensorMap, got {len(raw)}")
    w = [int.from_bytes(raw[8 * i:8 * i + 8], "little") for i in range(16)]
    fill = f" (all 128 bytes are {raw[0]:#04x}: nothing was written there)" if raw == raw[:1] * 128 and raw[0] else ""

    def bad(field: str, why: str):
        return BadTensorMapBytes(field, why + fill)

    if derived and w[9] not in SWIZZLE_REPEAT.values():
        hint = ("; the driver writes words 8 and 9 last: a refused call leaves them 0, and in the words before "
                "them the fields it checked before the failing rule") if w[9] == 0 and not fill else ""
        raise bad("word 9 (the swizzle's repeat)", f"{w[9]:#x}: 16, 256, 512 or 1024 in every map{hint}")
    a = w[0]
    if a % 16 or a >= MAX_ADDRESS:
        raise bad("globalAddress", f"word 0 = {a:#x} is not a multiple of 16 below 2^57")
    flags = w[1] & _M32
    if flags & 1:
        raise bad("word 1 bit 0", "set: an im2col map (cuTensorMapEncodeIm2col), not a tiled one")
    if _bits(flags, 1, 3):
        raise bad("word 1 bits 1-3", f"{_bits(flags, 1, 3):#x}, 0 in every map")
    if flags >> 19:
        raise bad("word 1 bits 19-31", f"{flags >> 19:#x}, 0 in every map")
    r = _bits(flags, 4, 3) + 1
    if r > MAX_RANK:
        raise bad("tensorRank", f"word 1 bits 4-6 = {r - 1}: rank {r} exceeds {MAX_RANK}")
    key = (_bits(flags, 7, 4), _bits(flags, 16, 1))
    if key not in _TYPE_OF_CODE:
        raise bad("tensorDataType", f"word 1 bits 7-10 = {key[0]} with bit 16 = {key[1]}: no data type has this "
                                    "code")
    dt = _TYPE_OF_CODE[key]
    il = _bits(flags, 11, 2)
    if il not in INTERLEAVE_NAMES:
        raise bad("interleave", f"word 1 bits 11-12 = {il}: not an interleave")
    sw, oob, l2 = _bits(flags, 13, 2), _bits(flags, 15, 1), _bits(flags, 17, 2)
    strides = []
    lows = (w[1] >> 32, w[2] & _M32, w[2] >> 32, w[3] & _M32)
    for k in range(4):
        v = (_bits(w[3], 32 + 4 * k, 4) << 32 | lows[k]) << 4
        if k < r - 1:
            strides.append(v)
        elif v:
            raise bad(f"globalStrides[{k}]", f"{v} in the slot of a dimension that a rank-{r} map does not have")
    if w[3] >> 48:
        raise bad("word 3 bits 48-63", f"{w[3] >> 48:#x}, 0 in every map")
    dslots = (w[4] & _M32, w[4] >> 32, w[5] & _M32, w[5] >> 32, w[6] & _M32)
    eslots = tuple(_bits(w[6], 32 + 3 * k, 3) for k in range(5))
    bslots = (w[6] >> 56,) + tuple(_bits(w[7], 8 * k, 8) for k in range(4))
    for name, slots in (("globalDim", dslots), ("elementStrides", eslots), ("boxDim", bslots)):
        for k in range(r, 5):
            if slots[k]:
                raise bad(f"{name}[{k}]", f"{slots[k] + 1} in the slot of a dimension that a rank-{r} map does "
                                          "not have")
    if _bits(w[6], 47, 9):
        raise bad("word 6 bits 47-55", f"{_bits(w[6], 47, 9):#x}, 0 in every map")
    if w[7] >> 32:
        raise bad("word 7 bits 32-63", f"{w[7] >> 32:#x}, 0 in every map")
    f = TiledFields(dt, r, a, tuple(x + 1 for x in dslots[:r]), tuple(strides), tuple(x + 1 for x in bslots[:r]),
                    tuple(x + 1 for x in eslots[:r]), il, sw, l2, oob)
    v = _run(f)[1]
    if v is not None:
        raise bad(v[0], f"the driver refuses these fields ({v[1]})")
    if derived and w[8] != box_bytes(f):
        raise bad("word 8 (the bytes of one box)", f"{w[8]}, but the fields give {box_bytes(f)}")
    if derived and w[9] != SWIZZLE_REPEAT[sw]:
        raise bad("word 9 (the swizzle's repeat)", f"{w[9]}, but swizzle {SWIZZLE_NAMES[sw]} gives "
                                                   f"{SWIZZLE_REPEAT[sw]}")
    for k in range(10, 16):
        if w[k]:
            raise bad(f"word {k}", f"{w[k]:#x}, 0 in every map")
    return f
