"""PTX ``cvt`` between f32, f16 and bf16 on bit patterns, named by their PTX spelling.

PTX ISA, "Data Movement and Conversion Instructions: cvt":
  cvt{.frnd}{.ftz}{.sat}.f16.f32        .frnd = .rn .rz .rm .rp
  cvt.frnd2{.relu}{.satfinite}.f16.f32  .frnd2 = .rn .rz
  cvt.frnd2{.relu}{.satfinite}.bf16.f32 (and .rm/.rp forms where the ISA has them)
  cvt.rn{.relu}{.satfinite}.f16x2.f32 / .bf16x2.f32  d, a, b   (a goes to the upper half)
  cvt.f32.f16, cvt.f32.bf16             exact widening
"""

from __future__ import annotations

import re

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics.formats import BF16, F16, F32, ROUNDING_MODES, as_bits, requantize

_OP = re.compile(
    r"^cvt(?:\.(?P<rnd>rn|rz|rm|rp))?(?P<mods>(?:\.(?:ftz|relu|satfinite))*)"
    r"\.(?P<dst>f16x2|bf16x2|f16|bf16|f32)\.(?P<src>f16|bf16|f32)$")
_FMT = {"f16": F16, "bf16": BF16, "f32": F32, "f16x2": F16, "bf16x2": BF16}


def parse(op: str):
    """Split a PTX cvt spelling into (dst, src, rnd, set of modifiers), validating the combination."""
    m = _OP.match(op) if isinstance(op, str) else None
    if not m:
        raise bad_argument("op", op, "not a cvt between f32/f16/bf16 in PTX spelling, e.g. 'cvt.rn.f16.f32'")
    dst, src, rnd = m["dst"], m["src"], m["rnd"]
    mods = [x for x in m["mods"].split(".") if x]
    if len(set(mods)) != len(mods):
        raise bad_argument("op", op, "repeated modifier")
    narrowing = src == "f32" and dst != "f32"
    if narrowing and rnd is None:
        raise bad_argument("op", op, "a narrowing cvt needs a rounding modifier (.rn .rz .rm .rp)")
    if not narrowing:
        if dst != "f32" or src == "f32":
            raise NotImplementedError(f"{op}: only f32 -> f16/bf16 and f16/bf16 -> f32 conversions are modelled")
        if rnd is not None or mods:
            raise bad_argument("op", op, "widening to f32 is exact and takes no rounding or modifiers")
    if dst.endswith("x2") and rnd != "rn" and rnd != "rz":
        raise bad_argument("op", op, "packed x2 conversions take .rn or .rz")
    if ("relu" in mods or "satfinite" in mods) and rnd not in ("rn", "rz"):
        raise bad_argument("op", op, ".relu/.satfinite exist only with .rn or .rz")
    if "ftz" in mods and dst.endswith("x2"):
        raise bad_argument("op", op, ".ftz does not exist on the packed x2 forms")
    if "ftz" in mods and ("relu" in mods or "satfinite" in mods):
        raise bad_argument("op", op, ".ftz does not combine with .relu/.satfinite")
    return dst, src, rnd, frozenset(mods)


def _modelled_ops() -> tuple[str, ...]:
    to16 = ["rn", "rz", "rm", "rp", "rn.ftz", "rz.ftz", "rm.ftz", "rp.ftz", "rn.relu", "rz.relu",
            "rn.satfinite", "rz.satfinite", "rn.relu.satfinite", "rz.relu.satfinite"]
    x2 = ["rn", "rz", "rn.relu", "rz.relu", "rn.satfinite", "rz.satfinite", "rn.relu.satfinite", "rz.relu.satfinite"]
    ops = [f"cvt.{r}.{t}.f32" for t in ("f16", "bf16") for r in to16]
    ops += [f"cvt.f32.{t}" for t in ("f16", "bf16")]
    ops += [f"cvt.{r}.{t}.f32" for t in ("f16x2", "bf16x2") for r in x2]
    return tuple(ops)


#: Every cvt form modelled, each one that ptxas (CUDA 13.0) assembles for sm_90; the GPU probes run the same list.
MODELLED_OPS: tuple[str, ...] = _modelled_ops()


def cvt(op: str, a, b=None) -> np.ndarray:
    """Execute one PTX cvt on bit arrays. Packed ``x2`` forms take (a, b) and return uint32 with a high."""
    dst, src, rnd, mods = parse(op)
    sfmt, dfmt = _FMT[src], _FMT[dst]
    if dst.endswith("x2"):
        if b is None:
            raise bad_argument("b", b, f"{op} converts two f32 operands (a -> upper half, b -> lower half)")
        hi = _convert(as_bits(a, F32, "a"), sfmt, dfmt, rnd, mods)
        lo = _convert(as_bits(b, F32, "b"), sfmt, dfmt, rnd, mods)
        if hi.shape != lo.shape:
            raise bad_argument("b", lo.shape, f"shape differs from a's {hi.shape}")
        # packed register: bits 31..16 = a, bits 15..0 = b
        return (hi.astype(np.uint32) << np.uint32(16)) | lo.astype(np.uint32)
    if b is not None:
        raise bad_argument("b", "<array>", f"{op} takes one operand")
    return _convert(as_bits(a, sfmt, "a"), sfmt, dfmt, rnd, mods)


def _convert(bits, sfmt, dfmt, rnd, mods):
    if sfmt is BF16:
        # cvt.f32.bf16 is a 16-bit left shift on sm_90 (IMAD.U32 x, 0x10000): exact, NaN payloads kept
        return bits.astype(np.uint32) << np.uint32(16)
    # .ftz flushes a subnormal f32 source to a signed zero before rounding -- for a bf16 destination
    # only: for f16, ptxas emits the same F2F as without .ftz and the device does not flush
    # (cvt.rp.ftz.f16.f32 of 2^-149 gives 0x0001 on sm_90)
    ftz = "ftz" in mods and dfmt is BF16
    # f16 -> f32 (HADD2.F32) returns the canonical NaN 0x7FFFFFFF for every NaN input
    return requantize(bits, sfmt, dfmt, rnd or "rn", ftz_in=ftz, satfinite="satfinite" in mods,
                      relu="relu" in mods)


def f32_to_f16(x, mode: str = "rn", *, ftz: bool = False, relu: bool = False, satfinite: bool = False):
    """f32 bits -> f16 bits, ``cvt.<mode>{.ftz}{.relu}{.satfinite}.f16.f32``."""
    return cvt(_spell(mode, ftz, relu, satfinite, "f16"), x)


def f32_to_bf16(x, mode: str = "rn", *, ftz: bool = False, relu: bool = False, satfinite: bool = False):
    """f32 bits -> bf16 bits, ``cvt.<mode>{.ftz}{.relu}{.satfinite}.bf16.f32``."""
    return cvt(_spell(mode, ftz, relu, satfinite, "bf16"), x)


def f16_to_f32(x):
    """f16 bits -> f32 bits (exact), ``cvt.f32.f16``."""
    return cvt("cvt.f32.f16", x)


def bf16_to_f32(x):
    """bf16 bits -> f32 bits (exact), ``cvt.f32.bf16``."""
    return cvt("cvt.f32.bf16", x)


def float22half2_rn(x, y):
    """CUDA ``__float22half2_rn(make_float2(x, y))``: .x -> low half, .y -> high half (``cvt.rn.f16x2.f32 d, y, x``)."""
    return cvt("cvt.rn.f16x2.f32", y, x)


def float22bfloat162_rn(x, y):
    """CUDA ``__float22bfloat162_rn(make_float2(x, y))``: .x -> low half, .y -> high half."""
    return cvt("cvt.rn.bf16x2.f32", y, x)


def _spell(mode, ftz, relu, satfinite, dst):
    if mode not in ROUNDING_MODES:
        raise bad_argument("mode", mode, f"expected one of {ROUNDING_MODES}")
    mods = "".join(m for m, on in ((".ftz", ftz), (".relu", relu), (".satfinite", satfinite)) if on)
    return f"cvt.{mode}{mods}.{dst}.f32"
