"""Warp state and instruction semantics: ldmatrix, stmatrix, movmatrix, mma and wgmma fragments, wgmma matrix
descriptors (flashsim.warp.matrix_desc), shfl, cp.async, ld/st.shared and barriers, over batched warp arrays
(ctas, warps, 32[, nregs]) of uint32 bit patterns.

Every instruction is a function returning its outputs and an :class:`flashsim.smem.Event`; shared memory
(:class:`flashsim.smem.SharedMemory`) carries the bytes, the bank ledger and the race shadow.
"""

from flashsim.warp.fragments import FRAGMENTS, Fragment, fragment, pack, unpack, wgmma_fragment
from flashsim.warp.state import FULL_MASK, UndefinedResult, lane_ids

__all__ = [
    "FRAGMENTS", "FULL_MASK", "Fragment", "UndefinedResult", "bar_sync", "cp_async", "cp_async_commit_group",
    "cp_async_wait_all", "cp_async_wait_group", "fragment", "lane_ids", "ld_shared", "ldmatrix", "mma",
    "movmatrix", "pack", "shfl_down", "shfl_idx", "shfl_sync", "shfl_up", "shfl_xor", "st_shared", "stmatrix",
    "syncthreads", "syncwarp", "unpack", "wgmma_fragment",
]

# The instructions load on first use (they need shared memory and numba): the fragment tables, which the
# layout atoms and the trace register maps read, stay a light import.
_LAZY = {
    "flashsim.warp.matrix": ("ldmatrix", "movmatrix", "stmatrix"),
    "flashsim.warp.memory": ("cp_async", "cp_async_commit_group", "cp_async_wait_all", "cp_async_wait_group",
                             "ld_shared", "st_shared"),
    "flashsim.warp.mma": ("mma",),
    "flashsim.warp.shfl": ("shfl_down", "shfl_idx", "shfl_sync", "shfl_up", "shfl_xor"),
    "flashsim.warp.sync": ("bar_sync", "syncthreads", "syncwarp"),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'flashsim.warp' has no attribute {name!r}")
    import importlib

    mod = importlib.import_module(module)
    # bind the module's instructions here: importing flashsim.warp.mma set this package's attribute ``mma`` to
    # the submodule, and the instruction of that name must win, as it did when this package imported it
    globals().update({n: getattr(mod, n) for n in _LAZY[module]})
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(_MODULE_OF))
