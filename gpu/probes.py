"""Host wrappers for the instruction probes in gpu/kernels/probe_*.cu: numpy bit arrays in and out.

Each wrapper validates its arguments before touching cupy, so argument errors are testable without a
GPU. ``CVT_OPS`` and ``F32_OPS`` are the machine-readable lists of what the probes offer, named as the
PTX instruction (``"cvt.rn.relu.satfinite.bf16.f32"``) so the simulator can mirror them one to one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.numerics.cvt import MODELLED_OPS, parse as parse_cvt
from flashsim.errors import bad_argument
from flashsim.gpu import runtime

__all__ = [
    "BLOCK",
    "CVT_OPS",
    "CVT_SPECS",
    "F32_ARITY",
    "F32_OPS",
    "MMA_KERNELS",
    "cvt_kernel_name",
    "f32_kernel_name",
    "mma_kernel_name",
    "run_cvt",
    "run_f32",
    "run_mma",
]

#: Threads per block for every probe launch (8 warps).
BLOCK = 256

_U16 = np.dtype(np.uint16)
_U32 = np.dtype(np.uint32)

# ------------------------------------------------------------------------------------------------
# mma
# ------------------------------------------------------------------------------------------------

#: (shape, atype, ctype) -> kernel in probe_mma.cu; D has C's type. bf16 needs an f32 accumulator (PTX).
MMA_KERNELS: dict[tuple[str, str, str], str] = {
    ("m16n8k16", "f16", "f32"): "mma_m16n8k16_f32_f16_f16_f32",
    ("m16n8k16", "bf16", "f32"): "mma_m16n8k16_f32_bf16_bf16_f32",
    ("m16n8k16", "f16", "f16"): "mma_m16n8k16_f16_f16_f16_f16",
    ("m16n8k8", "f16", "f32"): "mma_m16n8k8_f32_f16_f16_f32",
    ("m16n8k8", "bf16", "f32"): "mma_m16n8k8_f32_bf16_bf16_f32",
}
_MMA_K = {"m16n8k16": 16, "m16n8k8": 8}
_C_DTYPE = {"f32": _U32, "f16": _U16}


def mma_kernel_name(shape: str, atype: str, ctype: str) -> str:
    """Name of the probe kernel for ``mma.sync.aligned.<shape>.row.col.<ctype>.<atype>.<atype>.<ctype>``."""
    if shape not in _MMA_K:
        raise bad_argument("shape", shape, f"expected one of {sorted(_MMA_K)}")
    key = (shape, atype, ctype)
    if key not in MMA_KERNELS:
        offered = ", ".join(f"atype={a!r} ctype={c!r}" for s, a, c in MMA_KERNELS if s == shape)
        raise bad_argument("atype/ctype", (atype, ctype), f"{shape} probes offer: {offered}")
    return MMA_KERNELS[key]


class _Summary:
    """Shows an array in an error message by shape and dtype instead of its contents."""

    def __init__(self, arr: np.ndarray):
        self.text = f"array(shape={arr.shape}, dtype={arr.dtype})"

    def __repr__(self) -> str:
        return self.text


def _show(x: Any) -> Any:
    """What an error message shows for an argument: arrays by shape and dtype."""
    return _Summary(x) if isinstance(x, np.ndarray) else x


def _as_bits(name: str, x: Any, dtype: np.dtype, what: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != dtype:
        raise bad_argument(
            name, _Summary(arr), f"expected a {dtype.name} array of {what} bit patterns, got dtype {arr.dtype} "
            f"(view a float array as bits with .view(np.{dtype.name}))"
        )
    return np.asarray(arr, order="C")


def run_mma(a: Any, b: Any, c: Any, *, shape: str = "m16n8k16", atype: str, ctype: str) -> np.ndarray:
    """D = A @ B + C on the GPU with one ``mma.sync`` per tile; bit patterns in, bit patterns out.

    Same conventions as ``flashsim.numerics.mma_m16n8k16``: a uint16 (..., 16, K) row-major, b uint16
    (..., K, 8) (K x N, row-major), c (..., 16, 8) uint32 for ctype 'f32' or uint16 for ctype 'f16',
    with equal batch shapes (one tile: no batch axes); K is 16 for m16n8k16 and 8 for m16n8k8; atype is
    'f16' or 'bf16'. Returns D with c's dtype and shape.
    """
    kernel_name = mma_kernel_name(shape, atype, ctype)
    k = _MMA_K[shape]
    a = _as_bits("a", a, _U16, atype)
    b = _as_bits("b", b, _U16, atype)
    c = _as_bits("c", c, _C_DTYPE[ctype], ctype)
    for name, arr, rows, cols in (("a", a, 16, k), ("b", b, k, 8), ("c", c, 16, 8)):
        if arr.ndim < 2 or arr.shape[-2:] != (rows, cols):
            raise bad_argument(name, _Summary(arr), f"{shape} needs {name} of shape (..., {rows}, {cols})")
    batch = a.shape[:-2]
    if b.shape[:-2] != batch or c.shape[:-2] != batch:
        raise bad_argument("b/c", (_Summary(b), _Summary(c)), f"the batch shapes must equal a's {batch}")
    tiles = int(np.prod(batch, dtype=np.int64))
    if tiles == 0:
        return c.copy()
    cupy = runtime.require_gpu()
    kernel = runtime.get_kernel("probe_mma.cu", kernel_name)
    d_a, d_b, d_c = cupy.asarray(a), cupy.asarray(b), cupy.asarray(c)
    d_d = cupy.empty_like(d_c)
    grid = -(-tiles * 32 // BLOCK)
    runtime.launch(kernel, grid, BLOCK, (d_a, d_b, d_c, d_d, np.uint64(tiles)))
    return cupy.asnumpy(d_d).reshape(c.shape)


# ------------------------------------------------------------------------------------------------
# f32 elementwise
# ------------------------------------------------------------------------------------------------

#: op -> number of operands; the kernel is ``probe_<op>`` in probe_f32.cu (PTX named in the comments).
F32_ARITY: dict[str, int] = {
    "ffma_rn": 3,  # fma.rn.f32 d, a, b, c
    "ffma_rn_ftz": 3,  # fma.rn.ftz.f32
    "fadd_rn": 2,  # add.rn.f32 (explicit .rn: never contracted)
    "fadd_rn_ftz": 2,  # add.rn.ftz.f32
    "fmul_rn": 2,  # mul.rn.f32
    "fmul_rn_ftz": 2,  # mul.rn.ftz.f32
    "fmax": 2,  # max.f32 (fmaxf)
    "fmin": 2,  # min.f32 (fminf)
    "fmax_ftz": 2,  # max.ftz.f32
    "fmin_ftz": 2,  # min.ftz.f32
    "fmax_nan": 2,  # max.NaN.f32
    "fmin_nan": 2,  # min.NaN.f32
}
F32_OPS: tuple[str, ...] = tuple(F32_ARITY)


def f32_kernel_name(op: str) -> str:
    """Kernel name in probe_f32.cu for an F32_OPS entry."""
    if not isinstance(op, str) or op not in F32_ARITY:
        raise bad_argument("op", op, f"expected one of F32_OPS: {', '.join(F32_OPS)}")
    return "probe_" + op


def _elementwise(names: tuple[str, ...], arrays: tuple[Any, ...], dtype: np.dtype, what: str) -> list[np.ndarray]:
    bits = [_as_bits(n, x, dtype, what) for n, x in zip(names, arrays)]
    try:
        return [np.asarray(x, order="C") for x in np.broadcast_arrays(*bits)]
    except ValueError:
        raise bad_argument("/".join(names), tuple(x.shape for x in bits), "shapes do not broadcast together") from None


def _run_elementwise(file: str, kernel_name: str, inputs: list[np.ndarray], out_dtype: np.dtype) -> np.ndarray:
    shape = inputs[0].shape
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.empty(shape, dtype=out_dtype)
    cupy = runtime.require_gpu()
    kernel = runtime.get_kernel(file, kernel_name)
    d_in = [cupy.asarray(x.reshape(-1)) for x in inputs]
    d_out = cupy.empty(n, dtype=out_dtype)
    grid = min(-(-n // BLOCK), 1 << 20)  # grid-stride loop covers the rest
    runtime.launch(kernel, grid, BLOCK, (*d_in, d_out, np.uint64(n)))
    return cupy.asnumpy(d_out).reshape(shape)


def run_f32(op: str, a: Any, b: Any = None, c: Any = None) -> np.ndarray:
    """Apply the f32 instruction ``op`` (an F32_OPS name) elementwise to uint32 bit patterns.

    ``ffma_*`` take a, b, c (d = a*b + c); the others take a, b. Inputs broadcast; returns uint32.
    """
    kernel_name = f32_kernel_name(op)  # validates op
    arity = F32_ARITY[op]
    given = (a, b, c)
    for i, name in enumerate(("a", "b", "c")):
        if i < arity and given[i] is None:
            raise bad_argument(name, None, f"{op} takes {arity} operands")
        if i >= arity and given[i] is not None:
            raise bad_argument(name, _show(given[i]), f"{op} takes only {arity} operands")
    names = ("a", "b", "c")[:arity]
    inputs = _elementwise(names, given[:arity], _U32, "f32")
    return _run_elementwise("probe_f32.cu", kernel_name, inputs, _U32)


# ------------------------------------------------------------------------------------------------
# cvt
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CvtSpec:
    """One cvt form of probe_cvt.cu: its PTX name, operand count and the bit-pattern dtypes."""

    op: str
    arity: int  # 1, or 2 for the packed x2 forms (d = {cvt(x) -> bits 16-31, cvt(y) -> bits 0-15})
    src: np.dtype
    dst: np.dtype

    def __post_init__(self) -> None:
        if not self.op.startswith("cvt.") or self.arity not in (1, 2):
            raise bad_argument("op", self.op, "not a cvt form this probe can run")

    @property
    def kernel(self) -> str:
        return cvt_kernel_name(self.op)


def _cvt_specs() -> dict[str, CvtSpec]:
    specs = []
    for op in MODELLED_OPS:
        dst, src, _, _ = parse_cvt(op)
        if src != "f32":
            specs.append(CvtSpec(op, 1, _U16, _U32))
        else:
            specs.append(CvtSpec(op, 2, _U32, _U32) if dst.endswith("x2") else CvtSpec(op, 1, _U32, _U16))
    return {s.op: s for s in specs}


#: Every cvt form probe_cvt.cu offers (each assembled with ptxas for sm_90, CUDA 13.0), by PTX name.
CVT_SPECS: dict[str, CvtSpec] = _cvt_specs()
CVT_OPS: tuple[str, ...] = tuple(CVT_SPECS)


def cvt_kernel_name(op: str) -> str:
    """Kernel name in probe_cvt.cu for a cvt form: ``'cvt.rn.f16.f32'`` -> ``'probe_cvt_rn_f16_f32'``."""
    return "probe_" + op.replace(".", "_")


def run_cvt(op: str, x: Any, y: Any = None) -> np.ndarray:
    """Apply the cvt form ``op`` (a CVT_OPS name) elementwise to bit patterns.

    f32 -> f16/bf16: x uint32, returns uint16. f16/bf16 -> f32: x uint16, returns uint32.
    Packed ``cvt.*.f16x2.f32`` / ``.bf16x2.f32``: x and y uint32 are PTX's first and second sources,
    returns uint32 ``cvt(x) << 16 | cvt(y)`` (the first source lands in the upper half).
    """
    spec = CVT_SPECS.get(op) if isinstance(op, str) else None
    if spec is None:
        raise bad_argument("op", op, "expected one of gpu.probes.CVT_OPS, e.g. 'cvt.rn.f16.f32'")
    if spec.arity == 2 and y is None:
        raise bad_argument("y", y, f"{op} packs two sources: give x (upper half) and y (lower half)")
    if spec.arity == 1 and y is not None:
        raise bad_argument("y", _show(y), f"{op} takes one source")
    what = "f32" if spec.src == _U32 else op.rsplit(".", 1)[1]
    names, arrays = (("x", "y"), (x, y)) if spec.arity == 2 else (("x",), (x,))
    inputs = _elementwise(names, arrays, spec.src, what)
    return _run_elementwise("probe_cvt.cu", spec.kernel, inputs, spec.dst)
