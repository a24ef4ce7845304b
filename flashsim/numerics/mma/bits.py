"""Bit primitives both numba engines compile in: the count of leading zeros (an LLVM intrinsic), the bit length."""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.core.extending import intrinsic


@intrinsic
def _clz64(typingctx, x):
    """LLVM ctlz on an int64 (count of leading zero bits; 64 for 0)."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]),
                                            "llvm.ctlz.i64")
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 0)])  # 0 in: defined (64)
    return numba.types.int64(numba.types.int64), codegen


@numba.njit(cache=True, inline="always")
def _bit_length(x):
    """Bit length of a non-negative int64 (0 for 0)."""
    return 64 - _clz64(np.int64(x))
