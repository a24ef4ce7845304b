"""Bit-level model of one warpgroup MMA, wgmma.mma_async.sync.aligned.m64nNk16 / m64nNk32, on whole matrices.

    D (64 x N) = A (64 x K) @ B (K x N) + (scale_d ? C : 0)      K = 16 (f16/bf16), 32 (e4m3/e5m2)

Every element of D depends only on its row of A, its column of B and its C, so one wgmma is the
m16n8 tiles of the mma.sync engine (``flashsim.numerics.mma.fused_mma``) laid side by side: 4 x N/8
tiles, each with all K products in one fused step. Which rule holds is a claim per input type:

- f16 / bf16 (k16): the sm_90 mma.sync rule (``mma.MODELS["sm_90"]``, measured on mma.sync): one fused
  step over the 16 products plus C, every term truncated to 25 fraction bits below the largest
  exponent, one rounding (RZ for an f32 D, RN for an f16 D). On the H100 (``python -m
  flashsim.gpu.validate_wgmma``, traces/wgmma): bit-exact on every f16/bf16 form, A from registers or from
  shared memory, N 8 to 256, every swizzle, chains of 1 to 4 along K in issue order.
- e4m3 / e5m2 (k32) -> f16: ``"fp8_13"`` (:data:`FP8_DEFAULT`): the same fused step over all 32 products
  plus C, but only 13 fraction bits kept below the largest exponent, then RN to f16. On the H100: every
  e4m3 / e5m2 pair bit for bit.
- e4m3 / e5m2 (k32) -> f32: ``"fp8_f32"`` (:data:`FP8_F32`, :class:`Fp8Accumulator`), measured on the
  H100 (traces/wgmma): ``"fp8_13"``'s fused step (the 32 products and C aligned to the largest exponent,
  each truncated to 13 fraction bits below it, the sum rounded toward zero to f32), then kept as a 1-8-13
  number: the 10 low fraction bits of the f32 result cleared. An f16 D rounds the same sum to f16; an f32
  D holds 14 significant bits. The other hypotheses are in :data:`FP8_HYPOTHESES`: ``"fp8_25"`` (the
  f16/bf16 rule), ``"fp8_13_c_exact"`` (the products summed with 13 bits, C added exactly, one rounding)
  and ``"exact"`` (the exact sum, rounded once).

A chain of wgmma along K (``wgmma_chain``) is the instructions in the order the SASS issues them:
each one's D, rounded to D's format, is the next one's C (PTX: accumulating into the same registers).

Operands are bit patterns (flashsim.numerics conventions): A (..., 64, K) and B (..., K, N) uint16 for
f16/bf16, uint8 for e4m3/e5m2 (B row-major K x N, the mathematical matrix whatever its shared-memory
layout); C and D (..., 64, N) uint32 for an f32 accumulator, uint16 for f16. Leading axes batch.

Sources of facts: PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
(wgmma.mma_async: shapes m64nNk16 for .f16/.bf16 and m64nNk32 for .e4m3/.e5m2 with N a multiple of 8
up to 256, .bf16 only with an .f32 D, fp8 A and B types chosen independently, scale-d a predicate
that drops C); the fraction-bit counts are the public models' (see flashsim.numerics.mma).
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics import mma as _mma
from flashsim.numerics.formats import BF16, E4M3, E5M2, F16, F32, FINITE, INF, NAN, ZERO, FloatFormat, decode
from flashsim.numerics.mma import MmaModel
from flashsim.numerics.mma.generic import _finish_round_exact

__all__ = ["EXACT", "FP8_DEFAULT", "FP8_F32", "FP8_HYPOTHESES", "Fp8Accumulator", "K_OF", "M", "M_WARP",
           "ProductsThenC", "WGMMA_K16_MODEL", "check_types", "exact_add", "exact_sum_model", "resolve_model", "wgmma", "wgmma_chain", "wgmma_m64nNk16",
           "wgmma_m64nNk32", "wgmma_ptx", "wgmma_warp"]

M = 64  # rows of A and D: one warpgroup, 16 per warp
M_WARP = 16  # rows of A and D one warp of the warpgroup holds (warp w: rows 16w..16w+15)

ATYPES = types.MappingProxyType({"f16": F16, "bf16": BF16, "e4m3": E4M3, "e5m2": E5M2})
CTYPES = types.MappingProxyType({"f32": F32, "f16": F16})
#: products per instruction (the K of m64nNkK) by input type
K_OF = types.MappingProxyType({"f16": 16, "bf16": 16, "e4m3": 32, "e5m2": 32})
_NOT_MODELLED = ("tf32", "s8", "u8", "b1")

#: the name of the "exact" hypothesis: the exact sum of the products and C, rounded once (RZ / RN)
EXACT = "exact"

_UNCHECKED = "not checked on hardware for wgmma"

#: f16/bf16 wgmma (k16): the mma.sync sm_90 rule, the claim of the public models
WGMMA_K16_MODEL = dataclasses.replace(
    _mma.MODELS["sm_90"], name="sm_90_wgmma_k16",
    provenance=f"the mma.sync sm_90 rule (measured on mma.sync); {_UNCHECKED}: gpu/validate_wgmma.py decides")

_FP8_13 = dataclasses.replace(
    _mma.MODELS["sm_90"], name="sm_90_wgmma_fp8_13", frac_bits=13,
    provenance=f"hypothesis of the public models: 13 fraction bits below the largest exponent; {_UNCHECKED}")
_FP8_25 = dataclasses.replace(
    _mma.MODELS["sm_90"], name="sm_90_wgmma_fp8_25",
    provenance=f"hypothesis: the f16/bf16 rule (25 fraction bits); {_UNCHECKED}")


@dataclasses.dataclass(frozen=True)
class ProductsThenC:
    """A rule in two parts: the products alone summed by ``model``'s fused rule (C = +0, the sum kept in f32,
    where it is exact for the fp8 rules), then C added to that sum exactly, with one rounding to D's format
    as the mma rule rounds. The accumulator C is never truncated."""

    model: MmaModel
    name: str

    def __post_init__(self):
        if not isinstance(self.model, MmaModel):
            raise bad_argument("model", self.model, "expected an MmaModel")


@dataclasses.dataclass(frozen=True)
class Fp8Accumulator:
    """The fp8 -> f32 rule of the module docstring: ``model``'s fused step rounded to f32, then kept as a
    1-8-``acc_bits`` number in the f32 register (the low 23 - acc_bits fraction bits cleared)."""

    model: MmaModel
    name: str
    acc_bits: int = 13

    def __post_init__(self):
        if not isinstance(self.model, MmaModel):
            raise bad_argument("model", self.model, "expected an MmaModel")
        if not isinstance(self.acc_bits, int) or not 0 <= self.acc_bits <= 23:
            raise bad_argument("acc_bits", self.acc_bits, "expected 0..23 fraction bits")

    def keep(self, d: np.ndarray) -> np.ndarray:
        """f32 bit patterns kept to acc_bits fraction bits (Inf and NaN as they are)."""
        d = np.asarray(d, np.uint32)
        drop = np.uint32((1 << (23 - self.acc_bits)) - 1)
        return np.where((d & np.uint32(0x7F800000)) == np.uint32(0x7F800000), d, d & ~drop).astype(np.uint32)


#: the fp8 -> f32 rule measured on the H100 (traces/wgmma/README.md)
FP8_F32 = Fp8Accumulator(_FP8_13, "fp8_f32")

#: the competing hypotheses for e4m3/e5m2 (k32): an MmaModel, a ProductsThenC, an Fp8Accumulator or EXACT each
FP8_HYPOTHESES = types.MappingProxyType({
    "fp8_13": _FP8_13, "fp8_25": _FP8_25, "fp8_13_c_exact": ProductsThenC(_FP8_13, "fp8_13_c_exact"),
    "fp8_f32": FP8_F32, EXACT: EXACT})
#: the rule fp8 wgmma with an f16 D uses unless told otherwise (switch it with model=...); an f32 D uses FP8_F32
FP8_DEFAULT = "fp8_13"


def wgmma_ptx(n: int, atype: str, ctype: str, btype: str | None = None) -> str:
    """The PTX spelling: ``wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16``."""
    btype = atype if btype is None else btype
    return f"wgmma.mma_async.sync.aligned.m64n{n}k{K_OF.get(atype, '?')}.{ctype}.{atype}.{btype}"


def check_types(n, atype, btype, ctype, k_expected: int | None = None) -> tuple[FloatFormat, ...]:
    """The formats of A, B and D of a wgmma form, after checking that PTX has it and flashsim models it."""
    if atype in _NOT_MODELLED or btype in _NOT_MODELLED:
        raise NotImplementedError(f"wgmma with .{atype}/.{btype} inputs is not modelled (f16, bf16, e4m3, e5m2 are)")
    if atype not in ATYPES:
        raise bad_argument("atype", atype, f"expected one of {sorted(ATYPES)}")
    if btype not in ATYPES:
        raise bad_argument("btype", btype, f"expected one of {sorted(ATYPES)}")
    if ctype not in CTYPES:
        raise bad_argument("ctype", ctype, f"expected one of {sorted(CTYPES)}")
    k = K_OF[atype]
    if k_expected is not None and k != k_expected:
        other = "wgmma_m64nNk32" if k == 32 else "wgmma_m64nNk16"
        raise bad_argument("atype", atype, f"m64nNk{k_expected} takes {'f16/bf16' if k_expected == 16 else 'e4m3/e5m2'}"
                                           f" inputs (use {other})")
    if k == 16 and btype != atype:
        raise bad_argument("btype", btype, f"f16/bf16 wgmma has B of A's type ({atype!r})")
    if K_OF[btype] != k:
        raise bad_argument("btype", btype, "e4m3/e5m2 A takes an e4m3/e5m2 B")
    if atype == "bf16" and ctype != "f32":
        raise bad_argument("ctype", ctype, "PTX wgmma has no .bf16 variant with an .f16 D (use ctype='f32')")
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or not (8 <= n <= 256 and n % 8 == 0):
        raise bad_argument("n", n, "expected N in 8, 16, ..., 256 (m64nNkK)")
    return ATYPES[atype], ATYPES[btype], CTYPES[ctype]


def resolve_model(atype: str, model=None, ctype: str = "f16"):
    """The rule a call uses: ``model`` (an MmaModel, a ProductsThenC, an Fp8Accumulator, a name of
    FP8_HYPOTHESES, or EXACT) or the default of the form (WGMMA_K16_MODEL for f16/bf16, FP8_F32 for e4m3/e5m2
    with an f32 D, FP8_HYPOTHESES[FP8_DEFAULT] with an f16 D)."""
    if model is None:
        if K_OF.get(atype) == 16:
            return WGMMA_K16_MODEL
        return FP8_F32 if ctype == "f32" else FP8_HYPOTHESES[FP8_DEFAULT]
    if isinstance(model, str):
        if model in FP8_HYPOTHESES:
            return FP8_HYPOTHESES[model]
        if model in _mma.MODELS:
            return _mma.MODELS[model]
        raise bad_argument("model", model, f"expected an MmaModel or one of {sorted(FP8_HYPOTHESES)} "
                                           f"or {sorted(_mma.MODELS)}")
    if not isinstance(model, (MmaModel, ProductsThenC, Fp8Accumulator)):
        raise bad_argument("model", model, "expected an MmaModel, a ProductsThenC, an Fp8Accumulator, a hypothesis "
                                           "name or 'exact'")
    return model


def _rule(atype: str, btype: str, ctype: str, model):
    """resolve_model for a form: the Fp8Accumulator rule is for fp8 inputs and an f32 D only."""
    rule = resolve_model(atype, model, ctype)
    if isinstance(rule, Fp8Accumulator) and (K_OF.get(atype) != 32 or ctype != "f32"):
        raise bad_argument("model", model, f"{rule.name} is the e4m3/e5m2 -> f32 rule, not for {atype} -> {ctype}")
    return rule


def _operand(x, name: str, fmt: FloatFormat, shape: tuple) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != np.dtype(fmt.dtype):
        raise bad_argument(name, arr.dtype, f"expected {np.dtype(fmt.dtype).name} bit patterns of {fmt.name}")
    if arr.ndim < 2 or arr.shape[-2:] != shape:
        raise bad_argument(name, arr.shape, f"expected shape (..., {shape[0]}, {shape[1]})")
    return arr


def _operands(a, b, c, n, k, afmt, bfmt, dfmt):
    a = _operand(a, "a", afmt, (M, k))
    b = _operand(b, "b", bfmt, (k, n))
    c = _operand(c, "c", dfmt, (M, n))
    if not a.shape[:-2] == b.shape[:-2] == c.shape[:-2]:
        raise bad_argument("b/c", (b.shape, c.shape), f"batch shapes must equal a's {a.shape[:-2]} (no broadcasting)")
    return a, b, c


def _one_step(a, b, c, n, k, afmt, bfmt, dfmt, rule, engine) -> np.ndarray:
    """D of one instruction: a (..., rows, k), b (..., k, n), c (..., rows, n) checked bit patterns (rows: 64,
    or the 16 of one warp)."""
    if isinstance(rule, str):  # EXACT
        return exact_sum_model(a, b, c, afmt=afmt, bfmt=bfmt, dfmt=dfmt)
    if isinstance(rule, Fp8Accumulator):
        return rule.keep(_one_step(a, b, c, n, k, afmt, bfmt, dfmt, rule.model, engine))
    if isinstance(rule, ProductsThenC):
        p = _one_step(a, b, np.zeros(c.shape, np.uint32), n, k, afmt, bfmt, F32, rule.model, engine)
        return exact_add(c, p, dfmt=dfmt)
    batch = a.shape[:-2]
    rows = a.shape[-2]
    tiles = (*batch, rows // 16, n // 8)
    # the rows/16 x N/8 m16n8 tiles: tile (i, j) takes rows 16i.. of A, columns 8j.. of B and C's block (i, j)
    at = np.broadcast_to(a.reshape(*batch, rows // 16, 1, 16, k), (*tiles, 16, k))
    bt = np.broadcast_to(np.swapaxes(b.reshape(*batch, k, n // 8, 8), -3, -2)[..., None, :, :, :], (*tiles, k, 8))
    ct = np.swapaxes(c.reshape(*batch, rows // 16, 16, n // 8, 8), -3, -2)
    d = _mma.fused_mma(at, bt, ct, k=k, afmt=afmt, bfmt=bfmt, dfmt=dfmt, model=rule, engine=engine)
    return np.ascontiguousarray(np.swapaxes(d, -3, -2)).reshape(*batch, rows, n)


def _scaled_c(c, scale_d, dfmt) -> np.ndarray:
    if scale_d not in (0, 1) or isinstance(scale_d, float):
        raise bad_argument("scale_d", scale_d, "expected 0 (D = A*B, C ignored) or 1 (D = A*B + C)")
    # scale-d false: the device ignores C's registers (any bits, NaN included); a +0 C is the same sum under
    # every rule here (a zero C takes no part in the alignment and an exact zero sum is +0)
    return np.zeros_like(c) if scale_d == 0 else c


def wgmma(a, b, c, *, n: int, atype: str, ctype: str, btype: str | None = None, scale_d: int = 1, model=None,
          engine: str = "numba") -> np.ndarray:
    """D of one ``wgmma.mma_async.sync.aligned.m64n{n}k{K}.{ctype}.{atype}.{btype}`` (K from the input type).

    a (..., 64, K), b (..., K, n), c (..., 64, n) bit patterns (see the module docstring); scale_d 0 or 1;
    ``model``: see :func:`resolve_model`. ``engine`` picks the mma engine ("numba", "generic", "round_exact").
    """
    btype = atype if btype is None else btype
    afmt, bfmt, dfmt = check_types(n, atype, btype, ctype, None)
    k = K_OF[atype]
    a, b, c = _operands(a, b, c, n, k, afmt, bfmt, dfmt)
    rule = _rule(atype, btype, ctype, model)
    return _one_step(a, b, _scaled_c(c, scale_d, dfmt), n, k, afmt, bfmt, dfmt, rule, engine)


def wgmma_warp(a, b, c, *, n: int, atype: str, ctype: str, btype: str | None = None, scale_d: int = 1, model=None,
               engine: str = "numba") -> np.ndarray:
    """The 16 rows of D that one warp of the warpgroup computes and holds: :func:`wgmma` restricted to rows
    16w..16w+15 (every element of D depends only on its row of A, all of B and its C, so the rule and the tiles
    are the same). a (..., 16, K) the warp's rows of A, b (..., K, n) all of B, c (..., 16, n) its rows of C;
    leading axes batch (the interpreter passes one entry per warp). The rule is :func:`wgmma`'s."""
    btype = atype if btype is None else btype
    afmt, bfmt, dfmt = check_types(n, atype, btype, ctype, None)
    k = K_OF[atype]
    a = _operand(a, "a", afmt, (M_WARP, k))
    b = _operand(b, "b", bfmt, (k, n))
    c = _operand(c, "c", dfmt, (M_WARP, n))
    if not a.shape[:-2] == b.shape[:-2] == c.shape[:-2]:
        raise bad_argument("b/c", (b.shape, c.shape), f"batch shapes must equal a's {a.shape[:-2]} (no broadcasting)")
    rule = _rule(atype, btype, ctype, model)
    return _one_step(a, b, _scaled_c(c, scale_d, dfmt), n, k, afmt, bfmt, dfmt, rule, engine)


def wgmma_m64nNk16(a_bits, b_bits, c_bits, *, n: int, atype: str, ctype: str, scale_d: int = 1, model=None,
                   engine: str = "numba") -> np.ndarray:
    """``wgmma.mma_async.sync.aligned.m64n{n}k16.{ctype}.{atype}.{atype}``: atype 'f16' or 'bf16', ctype 'f32'
    or 'f16' (f16 inputs only). A (..., 64, 16) uint16, B (..., 16, n) uint16, C (..., 64, n) -> D."""
    check_types(n, atype, atype, ctype, 16)
    return wgmma(a_bits, b_bits, c_bits, n=n, atype=atype, ctype=ctype, scale_d=scale_d, model=model, engine=engine)


def wgmma_m64nNk32(a_bits, b_bits, c_bits, *, n: int, atype: str, ctype: str, btype: str | None = None,
                   scale_d: int = 1, model=None) -> np.ndarray:
    """``wgmma.mma_async.sync.aligned.m64n{n}k32.{ctype}.{atype}.{btype}``: atype/btype 'e4m3' or 'e5m2', ctype
    'f32' or 'f16'. A (..., 64, 32) uint8, B (..., 32, n) uint8, C (..., 64, n) -> D. ``model`` defaults
    to the hypothesis FP8_DEFAULT; pass "fp8_25", "exact" or an MmaModel to switch."""
    btype = atype if btype is None else btype
    check_types(n, atype, btype, ctype, 32)
    return wgmma(a_bits, b_bits, c_bits, n=n, atype=atype, btype=btype, ctype=ctype, scale_d=scale_d, model=model)


def wgmma_chain(a, b, c, *, n: int, atype: str, ctype: str, btype: str | None = None, scale_d: int = 1,
                model=None, order=None, engine: str = "numba") -> np.ndarray:
    """D of K / k wgmma instructions accumulating into the same registers: a (..., 64, K), b (..., K, n) with
    K a multiple of the instruction's k; instruction s takes columns s*k..(s+1)*k-1 of A (rows of B).

    ``order``: the instructions' issue order (default 0, 1, 2, ...: program order, which the SASS keeps);
    ``scale_d`` applies to the first issued instruction only (the others accumulate: scale-d true).
    """
    btype = atype if btype is None else btype
    afmt, bfmt, dfmt = check_types(n, atype, btype, ctype, None)
    k = K_OF[atype]
    a = np.asarray(a)
    if a.ndim < 2 or a.shape[-1] % k or a.shape[-1] == 0:
        raise bad_argument("a", a.shape, f"expected (..., 64, K) with K a positive multiple of {k}")
    kk = a.shape[-1]
    a = _operand(a, "a", afmt, (M, kk))
    b = _operand(b, "b", bfmt, (kk, n))
    c = _operand(c, "c", dfmt, (M, n))
    steps = kk // k
    order = list(range(steps)) if order is None else [int(s) for s in order]
    if sorted(order) != list(range(steps)):
        raise bad_argument("order", order, f"expected a permutation of 0..{steps - 1}")
    rule = _rule(atype, btype, ctype, model)
    d = _scaled_c(c, scale_d, dfmt)
    for s in order:
        a_s = np.ascontiguousarray(a[..., s * k:(s + 1) * k])
        b_s = np.ascontiguousarray(b[..., s * k:(s + 1) * k, :])
        d = _one_step(a_s, b_s, d, n, k, afmt, bfmt, dfmt, rule, engine)
    return d


# ---- the "exact" hypothesis ---------------------------------------------------------------------

_LIMB = 28  # bits per limb: a limb product (< 2^56) summed over k <= 64 products stays below 2^62


def _as_ints(bits, fmt: FloatFormat):
    """Exact values as integers in units of 2^(emin - mbits) (0 for Inf/NaN), the finite mask and the unit.

    int64 when every value of the format fits in 62 bits (f16, e4m3, e5m2), else Python ints (object)."""
    sign, sig, exp, cls = decode(bits, fmt)
    unit = fmt.emin - fmt.mbits
    finite = (cls == FINITE) | (cls == ZERO)
    shift = np.where(finite, exp - unit, 0)
    signed = np.where(finite, np.where(sign == 1, -sig, sig), 0)
    if fmt.mbits + 1 + fmt.emax - fmt.emin <= 62:
        return signed << shift, finite, unit
    return signed.astype(object) * (2 ** shift.astype(object)), finite, unit


def _exact_matmul(ai, bi) -> np.ndarray:
    """A @ B exactly, as Python ints (object): int64 operands by 28-bit limbs (numpy int64 matmuls, no
    overflow), Python-int operands directly."""
    if ai.dtype == object or bi.dtype == object:
        return np.matmul(ai.astype(object), bi.astype(object))
    if ai.shape[-1] > 64:
        raise bad_argument("a", ai.shape, "at most 64 products per sum")

    def limbs(x):
        sgn, mag = np.sign(x), np.abs(x)
        n = max(1, -(-int(mag.max(initial=0)).bit_length() // _LIMB))
        return [sgn * ((mag >> (_LIMB * i)) & ((1 << _LIMB) - 1)) for i in range(n)]

    total = None
    for i, la in enumerate(limbs(ai)):
        for j, lb in enumerate(limbs(bi)):
            part = np.matmul(la, lb).astype(object) * (1 << (_LIMB * (i + j)))
            total = part if total is None else total + part
    return total


_BIT_LENGTH = np.frompyfunc(int.bit_length, 1, 1)


def _round_ints(total, unit: int, dfmt: FloatFormat) -> np.ndarray:
    """Bits of the exact integers ``total`` (object or int64 array) times 2^unit, rounded once to dfmt as the mma
    rule rounds (RZ for f32, RN for f16; overflow to Inf; a nonzero sum rounded to zero and an exact zero: +0)."""
    rule = _mma.MODELS["sm_90"]
    flat = np.asarray(total, dtype=object).reshape(-1)
    sign = (flat < 0).astype(np.uint8)
    mag_big = np.abs(flat)
    length = _BIT_LENGTH(mag_big).astype(np.int64)
    # keep 53 bits (more than the 25 a rounding to f32 needs with its guard bit) and a sticky bit for the rest
    shift = np.maximum(length - 53, 0)
    shift_o = shift.astype(object)
    mag = (mag_big >> shift_o).astype(np.int64)
    sticky = (mag_big & ((1 << shift_o) - 1)).astype(bool)
    exp = unit + shift
    code = np.zeros(flat.size, np.uint8)  # _C_FINITE
    mode = rule.round_f32 if dfmt is F32 else rule.round_f16
    return _finish_round_exact(sign, mag, exp, code, dfmt, mode, rule, sticky=sticky).reshape(np.shape(total))


def exact_sum_model(a, b, c, *, afmt: FloatFormat, bfmt: FloatFormat, dfmt: FloatFormat) -> np.ndarray:
    """The EXACT hypothesis for one instruction: D = round(C + sum_k A[i,k] B[k,j]) with the sum exact (Python
    integers) and one rounding as the mma rule rounds (RZ for an f32 D, RN for f16; overflow to Inf, a
    nonzero sum that rounds to zero and an exact zero give +0). Outputs with an Inf or NaN operand take the
    special-value rule of the mma model (shared by every hypothesis).

    a (..., 64, k), b (..., k, n), c (..., 64, n) bit patterns of afmt, bfmt, dfmt.
    """
    ai, af, ua = _as_ints(a, afmt)
    bi, bf, ub = _as_ints(b, bfmt)
    ci, cf, uc = _as_ints(c, dfmt)
    unit = min(ua + ub, uc)
    total = _exact_matmul(ai, bi) * (2 ** (ua + ub - unit)) + ci.astype(object) * (2 ** (uc - unit))
    d = _round_ints(total, unit, dfmt)
    special = ~(np.all(af, axis=-1)[..., :, None] & np.all(bf, axis=-2)[..., None, :] & cf)
    if special.any():
        # Inf/NaN operands: the canonical NaN or the Inf of the Inf terms, as in every other hypothesis
        n, k = c.shape[-1], a.shape[-1]
        fallback = _one_step(a, b, c, n, k, afmt, bfmt, dfmt, _mma.MODELS["sm_90"], "generic")
        d = np.where(special, fallback, d)
    return d


def exact_add(c, p, *, dfmt: FloatFormat) -> np.ndarray:
    """round(C + P): C bit patterns of dfmt, P f32 bit patterns, summed exactly and rounded once as the mma rule
    rounds (ProductsThenC's second part). A NaN, or Infs of both signs, give the canonical NaN; an Inf, itself."""
    ci, cf, uc = _as_ints(c, dfmt)
    pi, pf, up = _as_ints(p, F32)
    unit = min(uc, up)
    d = _round_ints(ci.astype(object) * (2 ** (uc - unit)) + pi.astype(object) * (2 ** (up - unit)), unit, dfmt)
    cs, _, _, ccls = decode(c, dfmt)
    ps, _, _, pcls = decode(p, F32)
    nan = (ccls == NAN) | (pcls == NAN) | ((ccls == INF) & (pcls == INF) & (cs != ps))
    inf_neg = np.where(ccls == INF, cs, ps).astype(np.int64)
    inf = (ccls == INF) | (pcls == INF)
    d = np.where(inf, (dfmt.inf + inf_neg * dfmt.sign_bit).astype(dfmt.dtype), d)
    return np.where(nan, np.asarray(dfmt.canonical_nan, dfmt.dtype), d).astype(dfmt.dtype)
