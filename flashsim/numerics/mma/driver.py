"""The drivers: ``mma`` (and ``mma_m16n8k16`` / ``mma_m16n8k8``) for the PTX variants with a model,
``fused_mma`` for any input formats, ``gemm`` as warps chain mma tiles over K; each call is checked and
planned once per combination, then run on the engine of the plan.

``fused_mma`` is the same engine for other instructions that share the rule (flashsim.numerics.wgmma):
A and B of any formats up to 16 bits, e4m3/e5m2 included (their k32 steps and mixed A/B formats run on
the generic kernel), and any number of products per step.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np

from flashsim.errors import bad_argument
from flashsim.numerics.formats import BF16, F16, F32, FloatFormat
from flashsim.numerics.mma.fast import _fast_kernel, _fast_params
from flashsim.numerics.mma.generic import _step
from flashsim.numerics.mma.model import MODELS, MmaModel, _is_int

ATYPES = types.MappingProxyType({"f16": F16, "bf16": BF16})
CTYPES = types.MappingProxyType({"f32": F32, "f16": F16})
ARCHS = ("sm_90", "sm_80")
ENGINES = ("numba", "generic", "round_exact")

# (k, atype, ctype) combinations with a model; every other PTX variant raises NotImplementedError.
MODELLED = frozenset({(16, "f16", "f32"), (16, "bf16", "f32"), (16, "f16", "f16"),
                      (8, "f16", "f32"), (8, "bf16", "f32")})


# ---- the Python driver ----------------------------------------------------------------------------

def _check_operand(x, name: str, dtype: np.dtype, trailing: tuple) -> np.ndarray:
    arr = x if type(x) is np.ndarray else np.asarray(x)
    if arr.dtype != dtype:
        raise bad_argument(name, arr.dtype, f"expected {dtype.name} bit patterns")
    shape = arr.shape
    if len(shape) < 2 or shape[-2:] != trailing:
        raise bad_argument(name, shape, f"expected shape (..., {trailing[0]}, {trailing[1]})")
    return arr


@dataclass(frozen=True, eq=False)
class _Plan:
    afmt: FloatFormat
    bfmt: FloatFormat
    dfmt: FloatFormat
    model: MmaModel
    step: int
    engine: str
    ddtype: np.dtype  # D's (and C's) bit-pattern dtype
    params: np.ndarray | None  # _fast_kernel's constants (engine "numba"; never written)


_U16 = np.dtype(np.uint16)
_PLANS: dict = {}  # (k, atype, ctype, arch, model, engine) -> _Plan, for valid calls only


def _make_plan(k: int, afmt: FloatFormat, bfmt: FloatFormat, dfmt: FloatFormat, model: MmaModel, engine: str) -> _Plan:
    """The plan of a fused dot product of k products per output (arguments already validated)."""
    step = k if model.products_per_step is None else model.products_per_step
    if k % step:
        raise bad_argument("model", model.name, f"products_per_step={step} does not divide k={k}")
    # the fast kernel is unrolled for 8 or 16 products per step and decodes A and B as one IEEE 16-bit format
    if engine == "numba" and (step not in (8, 16) or afmt is not bfmt or afmt not in (F16, BF16)):
        engine = "generic"
    params = _fast_params(afmt, dfmt, model) if engine == "numba" else None
    return _Plan(afmt, bfmt, dfmt, model, step, engine, np.dtype(dfmt.dtype), params)


def _plan(k, atype, ctype, arch, model, engine) -> _Plan:
    """Validate the non-array arguments of mma once per combination; later calls are a dict lookup."""
    key = (k, atype, ctype, arch, model, engine)
    try:
        return _PLANS[key]
    except (KeyError, TypeError):  # new, or an unhashable argument (rejected below)
        pass
    if k not in (8, 16):
        raise bad_argument("k", k, "expected 16 (mma.m16n8k16) or 8 (mma.m16n8k8)")
    if atype not in ATYPES:
        raise bad_argument("atype", atype, f"expected one of {sorted(ATYPES)}")
    if ctype not in CTYPES:
        raise bad_argument("ctype", ctype, f"expected one of {sorted(CTYPES)}")
    if arch not in ARCHS:
        raise bad_argument("arch", arch, f"expected one of {ARCHS}")
    if engine not in ENGINES:
        raise bad_argument("engine", engine, f"expected one of {ENGINES}")
    if atype == "bf16" and ctype == "f16":
        raise bad_argument("ctype", ctype, "PTX mma has no bf16 variant with an f16 accumulator (use ctype='f32')")
    if (k, atype, ctype) not in MODELLED:
        raise NotImplementedError(
            f"mma.m16n8k{k} with atype={atype!r}, ctype={ctype!r} is not modelled; modelled "
            f"(k, atype, ctype): {sorted(MODELLED)}")
    if model is None:
        model = MODELS[arch]
    elif not isinstance(model, MmaModel):
        raise bad_argument("model", model, "expected an MmaModel (see flashsim.numerics.mma.MODELS)")
    afmt = ATYPES[atype]
    plan = _make_plan(k, afmt, afmt, CTYPES[ctype], model, engine)
    if len(_PLANS) < 256:
        _PLANS[key] = plan
    return plan


def _run(plan: _Plan, a, b, c, k: int) -> np.ndarray:
    """D = A @ B + C over checked (..., 16, k), (..., k, 8), (..., 16, 8) operands with equal batch shapes."""
    step = plan.step
    if plan.engine == "numba":
        # (T, 16*k), (T, k*8), (T, 128) row-major views (copies only of non-contiguous operands)
        a2 = np.ascontiguousarray(a.reshape(-1, 16 * k))
        b2 = np.ascontiguousarray(b.reshape(-1, 8 * k))
        d = np.ascontiguousarray(c.reshape(-1, 128))
        for k0 in range(0, k, step):
            out = np.empty(d.shape, plan.ddtype)
            _fast_kernel(a2, b2, d, k0, step, plan.params, out)
            d = out
        return d.reshape(c.shape)
    a3 = np.ascontiguousarray(a.reshape(-1, 16, k))
    b3 = np.ascontiguousarray(b.reshape(-1, k, 8))
    d = np.ascontiguousarray(c.reshape(-1, 16, 8))
    # chained steps (sm_80): each step's D, rounded to D's format, is the next step's C
    for k0 in range(0, k, step):
        d = _step(a3, b3, d, k0, step, plan.afmt, plan.bfmt, plan.dfmt, plan.model, plan.engine)
    return d.reshape(c.shape)


def _check_batch(a, b, c) -> None:
    batch = a.shape[:-2]
    if b.shape[:-2] != batch:
        raise bad_argument("b", b.shape, f"batch shape {b.shape[:-2]} differs from a's {batch} (no broadcasting)")
    if c.shape[:-2] != batch:
        raise bad_argument("c", c.shape, f"batch shape {c.shape[:-2]} differs from a's {batch} (no broadcasting)")


def mma(a, b, c, *, k: int, atype: str, ctype: str, arch: str = "sm_90", model: MmaModel | None = None,
        engine: str = "numba") -> np.ndarray:
    """D = A @ B + C for batches of m16n8k{k} tiles, bit for bit as the tensor core computes it.

    a: (..., 16, k) uint16 A patterns (row-major); b: (..., k, 8) uint16 B patterns (K x N);
    c: (..., 16, 8) C patterns (uint32 for ctype="f32", uint16 for "f16"); equal batch shapes.
    ``model`` overrides ``MODELS[arch]`` (for experiments). ``engine``: "numba" (the fast kernel),
    "generic" (the scalar per-output kernel it replaced, kept as a cross-check) or "round_exact"
    (the generic kernel's exact sums rounded by formats.round_exact); all give the same bits.
    """
    plan = _plan(k, atype, ctype, arch, model, engine)
    a = _check_operand(a, "a", _U16, (16, k))
    b = _check_operand(b, "b", _U16, (k, 8))
    c = _check_operand(c, "c", plan.ddtype, (16, 8))
    _check_batch(a, b, c)
    return _run(plan, a, b, c, k)


_FUSED_PLANS: dict = {}  # (k, afmt, bfmt, dfmt, model, engine) -> _Plan


def fused_mma(a, b, c, *, k: int, afmt: FloatFormat, bfmt: FloatFormat, dfmt: FloatFormat, model: MmaModel,
              engine: str = "numba") -> np.ndarray:
    """The fused tensor-core dot product of ``model`` on m16n8k{k} tiles of any input formats: the engine of
    :func:`mma`, for instructions that share its rule (wgmma: flashsim.numerics.wgmma).

    a: (..., 16, k) patterns of ``afmt`` (uint16, or uint8 for e4m3/e5m2), b: (..., k, 8) of ``bfmt``,
    c: (..., 16, 8) of ``dfmt`` (f32 or f16). ``model`` is required: which rule holds for which
    instruction is the caller's claim. k: any positive multiple of ``model.products_per_step``.
    """
    key = (k, afmt, bfmt, dfmt, model, engine)
    plan = _FUSED_PLANS.get(key)
    if plan is None:
        if not _is_int(k) or not 1 <= k <= 256:
            raise bad_argument("k", k, "expected a positive int (products per output), at most 256")
        for name, fmt in (("afmt", afmt), ("bfmt", bfmt)):
            if not isinstance(fmt, FloatFormat) or fmt.nbits > 16:
                raise bad_argument(name, fmt, "expected a FloatFormat of at most 16 bits (f16, bf16, e4m3, e5m2)")
        if dfmt not in (F32, F16):
            raise bad_argument("dfmt", dfmt, "the accumulator is F32 or F16")
        if not isinstance(model, MmaModel):
            raise bad_argument("model", model, "expected an MmaModel")
        if engine not in ENGINES:
            raise bad_argument("engine", engine, f"expected one of {ENGINES}")
        plan = _make_plan(k, afmt, bfmt, dfmt, model, engine)
        if len(_FUSED_PLANS) < 256:
            _FUSED_PLANS[key] = plan
    a = _check_operand(a, "a", np.dtype(afmt.dtype), (16, k))
    b = _check_operand(b, "b", np.dtype(bfmt.dtype), (k, 8))
    c = _check_operand(c, "c", plan.ddtype, (16, 8))
    _check_batch(a, b, c)
    return _run(plan, a, b, c, k)


def mma_m16n8k16(a, b, c, *, atype: str, ctype: str, arch: str = "sm_90", model: MmaModel | None = None) -> np.ndarray:
    """mma.sync.aligned.m16n8k16.row.col: (..., 16, 16) A, (..., 16, 8) B, (..., 16, 8) C -> D (c's dtype)."""
    return mma(a, b, c, k=16, atype=atype, ctype=ctype, arch=arch, model=model)


def mma_m16n8k8(a, b, c, *, atype: str, ctype: str, arch: str = "sm_90", model: MmaModel | None = None) -> np.ndarray:
    """mma.sync.aligned.m16n8k8.row.col: (..., 16, 8) A, (..., 8, 8) B, (..., 16, 8) C -> D (c's dtype)."""
    return mma(a, b, c, k=8, atype=atype, ctype=ctype, arch=arch, model=model)


def gemm(a, b, c, *, atype: str, arch: str = "sm_90") -> np.ndarray:
    """C + A @ B as warps compute it with mma.m16n8k16 and f32 accumulators: for each 16-wide slice of K in
    increasing order, one mma per 16x8 tile of C (the order of the tiles within a slice does not change any
    bit: each element of D depends only on its own row of A, column of B and C).

    a: (..., M, K) uint16 patterns, b: (..., K, N) uint16, c: (..., M, N) uint32 f32 patterns; M % 16,
    N % 8 and K % 16 == 0. Returns D (..., M, N) uint32.
    """
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    if a.ndim < 2 or b.ndim != a.ndim or c.ndim != a.ndim:
        raise bad_argument("a", a.shape, "a, b and c need the same rank >= 2: (..., M, K), (..., K, N), (..., M, N)")
    *batch, m, k = a.shape
    n = b.shape[-1]
    if b.shape[-2] != k or c.shape[-2:] != (m, n) or tuple(b.shape[:-2]) != tuple(batch) or tuple(c.shape[:-2]) != tuple(batch):
        raise bad_argument("b", b.shape, f"shapes do not chain: a {a.shape}, b {b.shape}, c {c.shape}")
    if m % 16 or n % 8 or k % 16:
        raise bad_argument("a", a.shape, f"need M % 16, N % 8, K % 16 == 0 (M={m}, N={n}, K={k})")
    bt = (*batch, m // 16, n // 8)
    d = np.ascontiguousarray(c.reshape(*batch, m // 16, 16, n // 8, 8).swapaxes(-3, -2))
    for k0 in range(0, k, 16):
        at = a[..., k0:k0 + 16].reshape(*batch, m // 16, 1, 16, 16)
        btile = b[..., k0:k0 + 16, :].reshape(*batch, 16, n // 8, 8).swapaxes(-3, -2)[..., None, :, :, :]
        d = mma(np.broadcast_to(at, (*bt, 16, 16)), np.broadcast_to(btile, (*bt, 16, 8)), d, k=16, atype=atype,
                ctype="f32", arch=arch)
    return np.ascontiguousarray(d.swapaxes(-3, -2)).reshape(*batch, m, n)
