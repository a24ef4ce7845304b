"""Warp state and instruction semantics: ldmatrix, stmatrix, movmatrix, mma and wgmma fragments, wgmma matrix
descriptors (flashsim.warp.matrix_desc), shfl, cp.async, ld/st.shared and barriers, over batched warp arrays
(ctas, warps, 32[, nregs]) of uint32 bit patterns.

Every instruction is a function returning its outputs and an :class:`flashsim.smem.Event`; shared memory
(:class:`flashsim.smem.SharedMemory`) carries the bytes, the bank ledger and the race shadow.
"""

from flashsim.warp.fragments import FRAGMENTS, Fragment, fragment, pack, unpack, wgmma_fragment
from flashsim.warp.matrix import ldmatrix, movmatrix, stmatrix
from flashsim.warp.memory import (cp_async, cp_async_commit_group, cp_async_wait_all, cp_async_wait_group,
                                  ld_shared, st_shared)
from flashsim.warp.mma import mma
from flashsim.warp.shfl import shfl_down, shfl_idx, shfl_sync, shfl_up, shfl_xor
from flashsim.warp.state import FULL_MASK, UndefinedResult, lane_ids
from flashsim.warp.sync import bar_sync, syncthreads, syncwarp

__all__ = [
    "FRAGMENTS", "FULL_MASK", "Fragment", "UndefinedResult", "bar_sync", "cp_async", "cp_async_commit_group",
    "cp_async_wait_all", "cp_async_wait_group", "fragment", "lane_ids", "ld_shared", "ldmatrix", "mma",
    "movmatrix", "pack", "shfl_down", "shfl_idx", "shfl_sync", "shfl_up", "shfl_xor", "st_shared", "stmatrix",
    "syncthreads", "syncwarp", "unpack", "wgmma_fragment",
]
