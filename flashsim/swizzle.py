"""The two XOR swizzles FlashAttention kernels use, as plain integer functions, named apart.

``cute_swizzle(x, B, M, S)`` is CuTe's ``Swizzle<BBits, MBase, SShift>`` (cute/swizzle.hpp) applied to an
offset: the B bits that sit S above the M kept low bits are XORed onto the B bits just above them::

        bit:  ... | M+S+B-1 .. M+S | ... | M+B-1 .. M | M-1 .. 0
                    \\___ yyy ___/          \\__ zzz _/   kept
        cute_swizzle(x) = x ^ ((x & yyy_mask) >> S),   yyy_mask = (2^B - 1) << (M + S)

CuTe requires |S| >= B (the two bit fields do not overlap) and allows a negative S (the shift then
goes left: zzz sits above yyy).

``seed_swizzle(x, B, M, S)`` is the hand-written ``swizzle<B, M, S>`` helper of seed 001
(``((addr >> S) & (((1 << B) - 1) << M)) ^ addr`` on a ``uint32_t``). Its author reads the parameters
differently: M = log2 of the elements one thread moves as a unit (3 for 8 halves), S = log2 of the
number of such units in one row of the tile (4 for a row of d = 128 halves; 3 when a row has fewer
than 64 halves), B = log2 of the rows remapped as a group (3 for 8 rows; 1 for the 16x16 tiles).
So the seed's S is "units per row", CuTe's S is a bit distance; the seed applies its helper to an
element index relative to the tile (not to the absolute address), wraps at 32 bits, has no negative
S and accepts overlapping fields (B > S), which CuTe rejects.

The relation (tested over whole domains in tests/test_warp_swizzle.py): on CuTe's domain (0 <= B <= S,
offsets below 2^32) the two are the same function, ``seed_swizzle(x, B, M, S) == cute_swizzle(x, B,
M, S)``; so the seed's ``swizzle<3,3,4>`` on an f16 element index equals CuTe's ``Sw<3,3,4>`` on the
element offset and ``Sw<3,4,4>`` on the byte offset (``byte_swizzle``). For B > S they differ.
Both are bijections; both are involutions on CuTe's domain.

Both functions work on Python ints and on numpy integer arrays (element-wise); the CuTe *layout object*
``Swizzle`` lives in flashsim.layout and uses these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from flashsim.errors import bad_argument

__all__ = ["SwizzleSpec", "byte_swizzle", "cute_swizzle", "parse_swizzle", "seed_swizzle"]

_MASK32 = 0xFFFFFFFF


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_params(B, M, S, *, allow_negative_s: bool) -> None:
    for name, v in (("B", B), ("M", M), ("S", S)):
        if not _is_int(v):
            raise bad_argument(name, v, "expected an int")
    if B < 0 or M < 0:
        raise bad_argument("B, M", (B, M), "must be >= 0")
    if S < 0 and not allow_negative_s:
        raise bad_argument("S", S, "must be >= 0 (the seed helper shifts right by S on a uint32_t)")
    if B + M + abs(S) > 62:
        raise bad_argument("(B, M, S)", (B, M, S), "the swizzled bits must lie below bit 62")


def _as_int_array(x, name: str):
    """x as int64 numpy data (or a Python int), rejecting floats, bools and negatives."""
    if _is_int(x):
        if x < 0:
            raise bad_argument(name, x, "offsets must be >= 0")
        return int(x)
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise bad_argument(name, arr.dtype, "expected integer offsets (an int or an integer numpy array)")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise bad_argument(name, int(arr.min()), "offsets must be >= 0")
    return arr


def cute_swizzle(x, B: int, M: int, S: int):
    """CuTe ``Swizzle<B,M,S>`` of offset(s) x: ``x ^ ((x & yyy_mask) >> S)`` (left shift for S < 0).

    Raises ArgumentError for |S| < B (CuTe's static_assert: overlapping bit fields).
    """
    _check_params(B, M, S, allow_negative_s=True)
    if abs(S) < B:
        raise bad_argument("(B, M, S)", (B, M, S), "CuTe's Swizzle needs |S| >= B (the YYY and ZZZ fields may not overlap)")
    x = _as_int_array(x, "x")
    bit_msk = (1 << B) - 1
    if S >= 0:
        yyy = bit_msk << (M + S)
        return x ^ ((x & yyy) >> S)
    yyy = bit_msk << M
    return x ^ ((x & yyy) << (-S))


def seed_swizzle(x, B: int, M: int, S: int):
    """Seed 001's ``swizzle<B,M,S>(uint32_t addr)``: ``((addr >> S) & (((1 << B) - 1) << M)) ^ addr``.

    The helper computes on uint32_t: offsets must be below 2^32 (larger ones would wrap on the device).
    """
    _check_params(B, M, S, allow_negative_s=False)
    x = _as_int_array(x, "x")
    if (isinstance(x, int) and x > _MASK32) or (not isinstance(x, int) and x.size and x.max() > _MASK32):
        raise bad_argument("x", x if isinstance(x, int) else int(x.max()), "the seed helper takes a uint32_t (below 2^32)")
    bmask = ((1 << B) - 1) << M
    return ((x >> S) & bmask) ^ x


def byte_swizzle(x_bytes, B: int, M: int, S: int, elem_bytes: int):
    """CuTe ``Sw<B,M,S>`` defined on element offsets, applied to a byte offset of elements of
    ``elem_bytes`` (a power of two): equals ``cute_swizzle(x_bytes, B, M + log2(elem_bytes), S)``."""
    if not _is_int(elem_bytes) or elem_bytes <= 0 or elem_bytes & (elem_bytes - 1):
        raise bad_argument("elem_bytes", elem_bytes, "expected a power of two")
    return cute_swizzle(x_bytes, B, M + int(elem_bytes).bit_length() - 1, S)


@dataclass(frozen=True)
class SwizzleSpec:
    """A swizzle named on the command line: ``kind`` is 'cute' or 'seed', applied to element offsets."""

    kind: str
    B: int
    M: int
    S: int

    def __post_init__(self):
        if self.kind not in ("cute", "seed"):
            raise bad_argument("kind", self.kind, "expected 'cute' or 'seed'")
        fn = cute_swizzle if self.kind == "cute" else seed_swizzle
        fn(0, self.B, self.M, self.S)  # validates the parameters

    def __call__(self, x):
        fn = cute_swizzle if self.kind == "cute" else seed_swizzle
        return fn(x, self.B, self.M, self.S)

    def __str__(self) -> str:
        if self.kind == "cute":
            return f"Sw<{self.B},{self.M},{self.S}>"
        return f"swizzle<{self.B},{self.M},{self.S}> (seed helper)"


_SPEC_RE = re.compile(
    r"^\s*(?:(?P<kind>cute|seed)\s*:\s*(?P<a>-?\d+)\s*,\s*(?P<b>-?\d+)\s*,\s*(?P<c>-?\d+)"
    r"|(?P<sw>Sw|swizzle)\s*<\s*(?P<d>-?\d+)\s*,\s*(?P<e>-?\d+)\s*,\s*(?P<f>-?\d+)\s*>)\s*$"
)


def parse_swizzle(text: str) -> SwizzleSpec:
    """Parse ``cute:B,M,S`` / ``Sw<B,M,S>`` (CuTe) or ``seed:B,M,S`` / ``swizzle<B,M,S>`` (seed helper)."""
    m = _SPEC_RE.match(text) if isinstance(text, str) else None
    if not m:
        raise bad_argument(
            "swizzle", text,
            "expected 'cute:B,M,S' or 'Sw<B,M,S>' (CuTe Swizzle) or 'seed:B,M,S' or 'swizzle<B,M,S>' (seed 001's helper)",
        )
    if m.group("kind"):
        return SwizzleSpec(m.group("kind"), int(m.group("a")), int(m.group("b")), int(m.group("c")))
    kind = "cute" if m.group("sw") == "Sw" else "seed"
    return SwizzleSpec(kind, int(m.group("d")), int(m.group("e")), int(m.group("f")))
