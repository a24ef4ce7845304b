"""Bit-exact models of the tensor-core arithmetic of mma.sync.m16n8k16 / m16n8k8 (f16/bf16 in, f32/f16 out).

Engines (all give the same bits; tests hold them to each other and to a Python-int reference): "numba"
(the default, :mod:`~flashsim.numerics.mma.fast`), "generic" and "round_exact"
(:mod:`~flashsim.numerics.mma.generic`).

- :mod:`~flashsim.numerics.mma.model`: what the hardware computes, :class:`MmaModel` and ``MODELS``;
- :mod:`~flashsim.numerics.mma.generic`, :mod:`~flashsim.numerics.mma.fast`: the engines
  (:mod:`~flashsim.numerics.mma.bits`: the bit primitives they share);
- :mod:`~flashsim.numerics.mma.driver`: ``mma``, ``mma_m16n8k16``, ``mma_m16n8k8``, ``fused_mma``, ``gemm``.
"""

from flashsim.numerics.mma.driver import (
    ARCHS, ATYPES, CTYPES, ENGINES, MODELLED, fused_mma, gemm, mma, mma_m16n8k8, mma_m16n8k16,
)
from flashsim.numerics.mma.model import MODELS, MmaModel

__all__ = [
    "MODELS", "MmaModel", "fused_mma", "gemm", "mma", "mma_m16n8k16", "mma_m16n8k8",
    # the arguments mma takes, and the (k, atype, ctype) variants with a model
    "ARCHS", "ATYPES", "CTYPES", "ENGINES", "MODELLED",
]
