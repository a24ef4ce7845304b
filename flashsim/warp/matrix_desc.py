"""The shared-memory matrix descriptor of wgmma.mma_async: its 64 bits, and the byte each element is read from.

PTX ISA, "Asynchronous Warpgroup Level Matrix Shared Memory Layout" > "Matrix Descriptor" (the sm_90
format; tcgen05's differs)::

     63 62 61      52 51   49 48  46 45            32 31 30 29            16 15 14 13             0
    +-----+----------+-------+------+----------------+-----+----------------+-----+----------------+
    | swz | 0        | base  | 0    | SBO >> 4       | 0   | LBO >> 4       | 0   | start >> 4     |
    |     |          | offset|      | (14 bits)      |     | (14 bits)      |     | (14 bits)      |
    +-----+----------+-------+------+----------------+-----+----------------+-----+----------------+
    swz: 0 no swizzle, 1 128B, 2 64B, 3 32B; addresses and offsets are (x & 0x3FFFF) >> 4

Same PTX ISA section, its canonical layouts (K-major; strides; swizzling modes): the operand (A: 64 x K, or B
stored as N x K: B transposed) is made of *core matrices* of 8 rows x 16 bytes (8 x 8 16-bit or
8 x 16 8-bit elements). One instruction reads 32 bytes of K per row (k16 x 2 bytes, k32 x 1 byte).

- no swizzle ("interleave"): a core matrix is 128 contiguous bytes (row i at +16i); the core matrix
  next along K is at +LBO (leading dimension byte offset), the next 8 rows at +SBO (stride byte offset):
      addr(r, kb) = start + (r // 8) * SBO + (kb // 16) * LBO + (r % 8) * 16 + kb % 16
- 32B / 64B / 128B swizzle: rows of W = 32 / 64 / 128 bytes, 8 rows a swizzle atom (8W bytes), the
  next 8 rows at +SBO; LBO is unused for K-major swizzled layouts (CUTLASS writes 1). The 16-byte
  chunks of a row are permuted by the address itself (CuTe ``Swizzle<B,4,3>`` on byte addresses,
  B = 1, 2, 3): bits [4, 4+B) ^= bits [7, 7+B):
      addr(r, kb) = swizzle(start + (r // 8) * SBO + (r % 8) * W + kb)
  so the pattern repeats every 8W bytes (256 / 512 / 1024) and is tied to absolute shared-memory
  addresses: a tile must start on that boundary; advancing ``start`` by 32 bytes per k-step inside a
  row (as CUTLASS does) is then consistent. ``base_offset`` (bits 49-51) is for patterns that do not
  start on the boundary; it is 0 in every layout here, and a nonzero one is not modelled.

MN-major operands (imm-trans-a / imm-trans-b 1, 16-bit elements): a core matrix is 8 elements of
M/N (16 contiguous bytes) x 8 of K, rows of K 16 bytes apart; with a swizzle a row of K spans W bytes
(W / 2 elements of M/N) and 8 rows make the atom. For element (mn, k):
    no swizzle: start + (mn % 8) * 2 + (mn // 8) * SBO + (k % 8) * 16 + (k // 8) * LBO
    swizzled:   swizzle(start + (mn % (W/2)) * 2 + (mn // (W/2)) * LBO + (k % 8) * W + (k // 8) * SBO)
(the canonical MN-major layouts of CuTe's make_gmma_desc; gpu/validate_wgmma_mn.py measures them on the H100).

``CanonicalTile`` is one concrete arrangement of a whole K-major operand tile (rows x kbytes) and the
descriptor of each of its k-steps: the layouts gpu/kernels/probe_wgmma.cu builds (gpu/kernels/wgmma.cuh
has the same functions in C++, compared with these by tests/test_wgmma.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashsim.errors import bad_argument
from flashsim.swizzle import cute_swizzle

__all__ = ["ARRANGEMENTS", "CanonicalTile", "MatrixDescriptor", "SWIZZLES", "element_address", "load_operand",
           "swizzle_address"]

#: swizzle mode -> the 2-bit field value (bits 62-63)
SWIZZLES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
_MODE_OF = {v: k for k, v in SWIZZLES.items()}
#: row width W of a swizzled K-major layout (bytes): also the swizzle atom's row
WIDTH = {"32B": 32, "64B": 64, "128B": 128}
#: bytes of K one instruction reads per row (k16 x 2 bytes or k32 x 1 byte)
K_BYTES = 32
_FIELD = 0x3FFFF  # 18-bit shared-memory byte addresses


def _check_field(name: str, v) -> int:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 0 <= v <= _FIELD or v % 16:
        raise bad_argument(name, v, "expected a multiple of 16 bytes in [0, 2^18)")
    return int(v)


@dataclass(frozen=True)
class MatrixDescriptor:
    """The fields of a wgmma shared-memory matrix descriptor, in bytes (see the module docstring)."""

    start_address: int
    leading_byte_offset: int
    stride_byte_offset: int
    swizzle: str = "none"
    base_offset: int = 0

    def __post_init__(self):
        for name in ("start_address", "leading_byte_offset", "stride_byte_offset"):
            _check_field(name, getattr(self, name))
        if self.swizzle not in SWIZZLES:
            raise bad_argument("swizzle", self.swizzle, f"expected one of {list(SWIZZLES)}")
        if not isinstance(self.base_offset, (int, np.integer)) or not 0 <= self.base_offset <= 7:
            raise bad_argument("base_offset", self.base_offset, "expected an int in 0..7 (3 bits)")

    def encode(self) -> int:
        """The 64-bit descriptor value (a Python int; the PTX operand is a .b64 register)."""
        return ((self.start_address >> 4)
                | (self.leading_byte_offset >> 4) << 16
                | (self.stride_byte_offset >> 4) << 32
                | self.base_offset << 49
                | SWIZZLES[self.swizzle] << 62)

    @classmethod
    def decode(cls, value: int) -> "MatrixDescriptor":
        """The fields of a 64-bit descriptor; bits outside the fields must be 0."""
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= int(value) < 1 << 64:
            raise bad_argument("value", value, "expected a 64-bit unsigned int")
        v = int(value)
        fields = 0x3FFF | 0x3FFF << 16 | 0x3FFF << 32 | 0x7 << 49 | 0x3 << 62
        if v & ~fields:
            raise bad_argument("value", hex(v), f"reserved bits set ({hex(v & ~fields)}): not an sm_90 descriptor")
        return cls(start_address=(v & 0x3FFF) << 4, leading_byte_offset=((v >> 16) & 0x3FFF) << 4,
                   stride_byte_offset=((v >> 32) & 0x3FFF) << 4, base_offset=(v >> 49) & 0x7,
                   swizzle=_MODE_OF[(v >> 62) & 0x3])


def swizzle_address(addr, swizzle: str):
    """The physical byte address of logical ``addr`` under a swizzle mode: CuTe's ``Swizzle<B,4,3>`` on byte
    addresses, bits [4, 4+B) ^= bits [7, 7+B) (B = 1, 2, 3 for 32B, 64B, 128B; the identity for 'none').
    Works on ints and int arrays."""
    if swizzle not in SWIZZLES:
        raise bad_argument("swizzle", swizzle, f"expected one of {list(SWIZZLES)}")
    if swizzle == "none":
        return addr
    phys = cute_swizzle(addr, (WIDTH[swizzle] // 16).bit_length() - 1, 4, 3)  # B = log2(W / 16)
    return type(addr)(phys) if isinstance(addr, (int, np.integer)) else phys


def element_address(desc: MatrixDescriptor, row, kbyte, *, major: str = "K"):
    """Byte address (shared state space) the instruction reads for byte ``kbyte`` (0..31) of K of row ``row``
    (A: m in 0..63; B: n in 0..N-1) of the operand described by ``desc``, K-major or (``major="MN"``, 16-bit
    elements only: imm-trans 1) MN-major (see the module docstring); ints or int arrays."""
    if major not in ("K", "MN"):
        raise bad_argument("major", major, "expected 'K' or 'MN'")
    if desc.base_offset:
        raise NotImplementedError(f"base_offset={desc.base_offset}: descriptors whose swizzle pattern does not "
                                  "start on its repeat boundary are not modelled")
    row = np.asarray(row, np.int64)
    kb = np.asarray(kbyte, np.int64)
    if np.any(row < 0) or np.any(kb < 0) or np.any(kb >= K_BYTES):
        raise bad_argument("row/kbyte", (row.min(initial=0), kb.max(initial=0)),
                           f"expected row >= 0 and kbyte in [0, {K_BYTES})")
    start, lbo, sbo = desc.start_address, desc.leading_byte_offset, desc.stride_byte_offset
    if major == "MN":
        mn, k, byte = row, kb // 2, kb % 2
        if desc.swizzle == "none":
            addr = start + (mn % 8) * 2 + (mn // 8) * sbo + (k % 8) * 16 + (k // 8) * lbo + byte
        else:
            w = WIDTH[desc.swizzle]
            addr = swizzle_address(start + (mn % (w // 2)) * 2 + (mn // (w // 2)) * lbo + (k % 8) * w
                                   + (k // 8) * sbo + byte, desc.swizzle)
        return addr if addr.ndim else int(addr)
    if desc.swizzle == "none":
        addr = start + (row // 8) * sbo + (kb // 16) * lbo + (row % 8) * 16 + kb % 16
    else:
        addr = swizzle_address(start + (row // 8) * sbo + (row % 8) * WIDTH[desc.swizzle] + kb, desc.swizzle)
    return addr if addr.ndim else int(addr)


def load_operand(smem, desc: MatrixDescriptor, rows: int, esize: int, major: str = "K") -> np.ndarray:
    """The (rows, 32 / esize) operand (K-major, or MN-major: 2-byte elements only) one instruction reads
    through ``desc`` from the CTA's shared memory ``smem`` (a uint8 array indexed by shared-state-space byte
    address), as bit patterns (uint16 for 2-byte elements, uint8 for 1-byte), element k of a row
    little-endian at its bytes."""
    mem = np.asarray(smem)
    if mem.dtype != np.uint8 or mem.ndim != 1:
        raise bad_argument("smem", f"array(shape={mem.shape}, dtype={mem.dtype})", "expected a 1-D uint8 array")
    if esize not in (1, 2):
        raise bad_argument("esize", esize, "expected 2 (f16/bf16) or 1 (e4m3/e5m2) bytes")
    if not isinstance(rows, (int, np.integer)) or rows <= 0 or rows % 8:
        raise bad_argument("rows", rows, "expected a positive multiple of 8")
    if major == "MN" and esize != 2:
        raise bad_argument("esize", esize, "MN-major operands (imm-trans 1) have 2-byte elements (f16 / bf16)")
    r, kb = np.meshgrid(np.arange(rows), np.arange(K_BYTES), indexing="ij")
    addr = element_address(desc, r, kb, major=major)
    if addr.max() >= mem.size:
        bad = int(addr.max())
        raise bad_argument("desc", desc, f"reads shared memory at addr={bad:#x}, beyond the {mem.size} bytes given")
    b = mem[addr]
    if esize == 1:
        return b.copy()
    return (b[:, 0::2].astype(np.uint16) | (b[:, 1::2].astype(np.uint16) << 8))


#: tile arrangements CanonicalTile builds: no swizzle with core matrices adjacent along K ("none") or along
#: M/N ("none_mn"), and the three swizzles
ARRANGEMENTS = ("none", "none_mn", "32B", "64B", "128B")


@dataclass(frozen=True)
class CanonicalTile:
    """A K-major operand tile of ``rows`` x ``kbytes`` bytes at shared-memory address ``base`` in one of
    ARRANGEMENTS, with the descriptor of each k-step (32 bytes of K: one wgmma).

    "none": core matrix (g, c) (8-row group g, 16-byte chunk c) at base + (g * kbytes/16 + c) * 128:
            LBO = 128, SBO = kbytes/16 * 128.
    "none_mn": core matrix (g, c) at base + (c * rows/8 + g) * 128: LBO = rows/8 * 128, SBO = 128.
    "32B"/"64B"/"128B": atom (g, a) (8 rows, W-byte column block a) at base + (a * rows/8 + g) * 8W, rows
            W bytes apart inside it (a row takes W bytes even when kbytes < W), swizzled: SBO = 8W,
            LBO field 16 (unused); step s starts at base + (32s // W) * rows/8 * 8W + 32s % W.
    """

    rows: int
    kbytes: int
    arrangement: str
    base: int = 0

    def __post_init__(self):
        if not isinstance(self.rows, int) or self.rows <= 0 or self.rows % 8:
            raise bad_argument("rows", self.rows, "expected a positive multiple of 8")
        if not isinstance(self.kbytes, int) or self.kbytes <= 0 or self.kbytes % K_BYTES:
            raise bad_argument("kbytes", self.kbytes, f"expected a positive multiple of {K_BYTES}")
        if self.arrangement not in ARRANGEMENTS:
            raise bad_argument("arrangement", self.arrangement, f"expected one of {ARRANGEMENTS}")
        align = 16 if self.arrangement.startswith("none") else 8 * WIDTH[self.arrangement]
        if not isinstance(self.base, int) or self.base < 0 or self.base % align:
            raise bad_argument("base", self.base, f"{self.arrangement} tiles start on a {align}-byte boundary")
        if self.base + self.nbytes > _FIELD + 1:
            raise bad_argument("base", self.base, "the tile does not fit in 256 KiB of shared memory")

    @property
    def swizzle(self) -> str:
        return "none" if self.arrangement.startswith("none") else self.arrangement

    @property
    def nbytes(self) -> int:
        """Bytes the tile spans (a swizzled row takes W bytes even when kbytes < W)."""
        if self.swizzle == "none":
            return self.rows * self.kbytes
        w = WIDTH[self.arrangement]
        return -(-self.kbytes // w) * self.rows * w

    @property
    def steps(self) -> int:
        return self.kbytes // K_BYTES

    def address(self, row, kbyte):
        """Physical byte address of byte ``kbyte`` (0..kbytes-1) of K of ``row``: ints or int arrays."""
        r = np.asarray(row, np.int64)
        kb = np.asarray(kbyte, np.int64)
        g, i = r // 8, r % 8
        if self.arrangement == "none":
            a = self.base + (g * (self.kbytes // 16) + kb // 16) * 128 + i * 16 + kb % 16
        elif self.arrangement == "none_mn":
            a = self.base + ((kb // 16) * (self.rows // 8) + g) * 128 + i * 16 + kb % 16
        else:
            w = WIDTH[self.arrangement]
            a = swizzle_address(self.base + ((kb // w) * (self.rows // 8) + g) * 8 * w + i * w + kb % w,
                                self.arrangement)
        return a if a.ndim else int(a)

    def descriptor(self, step: int) -> MatrixDescriptor:
        """The descriptor of k-step ``step`` (bytes 32*step .. 32*step+31 of K of every row)."""
        if not isinstance(step, (int, np.integer)) or not 0 <= step < self.steps:
            raise bad_argument("step", step, f"expected 0..{self.steps - 1}")
        kb0 = K_BYTES * int(step)
        g_count, c_count = self.rows // 8, self.kbytes // 16
        if self.arrangement == "none":
            return MatrixDescriptor(self.base + (kb0 // 16) * 128, 128, c_count * 128)
        if self.arrangement == "none_mn":
            return MatrixDescriptor(self.base + (kb0 // 16) * g_count * 128, g_count * 128, 128)
        w = WIDTH[self.arrangement]
        return MatrixDescriptor(self.base + (kb0 // w) * g_count * 8 * w + kb0 % w, 16, 8 * w,
                                swizzle=self.arrangement)

    def store(self, smem: np.ndarray, matrix) -> None:
        """Write ``matrix`` (rows x kbytes/esize element bit patterns, uint16 or uint8) into ``smem`` (uint8)
        in this arrangement: what the probe kernel does before its wgmma."""
        m = np.asarray(matrix)
        esize = m.dtype.itemsize
        if m.dtype not in (np.uint8, np.uint16) or m.shape != (self.rows, self.kbytes // esize):
            raise bad_argument("matrix", f"array(shape={m.shape}, dtype={m.dtype})",
                               f"expected ({self.rows}, {self.kbytes // 2}) uint16 or "
                               f"({self.rows}, {self.kbytes}) uint8")
        b = np.ascontiguousarray(m).view(np.uint8).reshape(self.rows, self.kbytes)  # little-endian bytes
        r, kb = np.meshgrid(np.arange(self.rows), np.arange(self.kbytes), indexing="ij")
        smem[self.address(r, kb)] = b
