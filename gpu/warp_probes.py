"""Host wrappers for gpu/kernels/probe_warp.cu: numpy in, numpy out, one warp (one block) per case.

Each wrapper checks its arguments before touching cupy, so argument errors are testable without a GPU.
Shared memory of a case is a PROBE_SMEM-byte image (uint8), addresses are byte offsets into it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashsim.errors import bad_argument
from flashsim.warp.shfl import MODES
from flashsim.gpu import runtime

__all__ = ["CP_ASYNC_KERNELS", "PROBE_SMEM", "ldmatrix_kernel_name", "run_cp_async", "run_ldmatrix", "run_movmatrix",
           "run_shfl", "run_stmatrix", "stmatrix_kernel_name"]

FILE = "probe_warp.cu"
#: bytes of shared memory each case has (probe_warp.cu's PROBE_SMEM)
PROBE_SMEM = 8192
#: (cache, cp_size) -> kernel
CP_ASYNC_KERNELS = {("ca", 4): "cp_async_ca_4", ("ca", 8): "cp_async_ca_8", ("ca", 16): "cp_async_ca_16",
                    ("cg", 16): "cp_async_cg_16"}


class _Summary:
    def __init__(self, arr: np.ndarray):
        self.text = f"array(shape={arr.shape}, dtype={arr.dtype})"

    def __repr__(self) -> str:
        return self.text


def _arr(name: str, x: Any, dtype, shape_tail: tuple, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != dtype:
        raise bad_argument(name, _Summary(a), f"expected {np.dtype(dtype).name} ({what}), got {a.dtype}")
    if a.ndim != 1 + len(shape_tail) or a.shape[1:] != shape_tail:
        raise bad_argument(name, _Summary(a), f"expected shape (n, {', '.join(map(str, shape_tail))}) ({what})")
    return np.ascontiguousarray(a)


def _image(x: Any) -> np.ndarray:
    return _arr("image", x, np.uint8, (PROBE_SMEM,), f"{PROBE_SMEM} bytes of shared memory per case")


def _addr(x: Any, n: int, name: str = "addr") -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise bad_argument(name, _Summary(a), "expected integer byte offsets")
    if a.shape != (n, 32):
        raise bad_argument(name, _Summary(a), f"expected shape ({n}, 32): one offset per lane per case")
    if a.size and (a.min() < 0 or a.max() >= PROBE_SMEM):
        raise bad_argument(name, int(a.min() if a.min() < 0 else a.max()), f"offsets must lie in 0..{PROBE_SMEM - 1}")
    return np.ascontiguousarray(a.astype(np.uint32))


def ldmatrix_kernel_name(num: int, trans: bool) -> str:
    if num not in (1, 2, 4):
        raise bad_argument("num", num, "expected 1, 2 or 4")
    return f"ldmatrix_x{num}" + ("_trans" if trans else "")


def stmatrix_kernel_name(num: int, trans: bool) -> str:
    if num not in (1, 2, 4):
        raise bad_argument("num", num, "expected 1, 2 or 4")
    return f"stmatrix_x{num}" + ("_trans" if trans else "")


def _launch(kernel_name: str, n: int, args: tuple) -> None:
    kernel = runtime.get_kernel(FILE, kernel_name)
    runtime.launch(kernel, n, 32, args)


def run_ldmatrix(image: Any, addr: Any, *, num: int = 4, trans: bool = False) -> np.ndarray:
    """ldmatrix.x{num}[.trans] on the GPU: image (n, 8192) uint8, addr (n, 32) -> registers (n, 32, num) uint32."""
    name = ldmatrix_kernel_name(num, trans)
    img = _image(image)
    a = _addr(addr, img.shape[0])
    cupy = runtime.require_gpu()
    n = img.shape[0]
    out = cupy.zeros((n, 32, num), dtype=cupy.uint32)
    _launch(name, n, (cupy.asarray(img.view(np.uint32)), cupy.asarray(a), out))
    return cupy.asnumpy(out)


def run_stmatrix(image: Any, addr: Any, regs: Any, *, num: int = 4, trans: bool = False) -> np.ndarray:
    """stmatrix.x{num}[.trans] on the GPU: returns the shared-memory image (n, 8192) uint8 afterwards."""
    name = stmatrix_kernel_name(num, trans)
    img = _image(image)
    n = img.shape[0]
    a = _addr(addr, n)
    r = _arr("regs", regs, np.uint32, (32, num), "registers")
    if r.shape[0] != n:
        raise bad_argument("regs", _Summary(r), f"expected {n} cases like image")
    cupy = runtime.require_gpu()
    out = cupy.zeros((n, PROBE_SMEM // 4), dtype=cupy.uint32)
    _launch(name, n, (cupy.asarray(img.view(np.uint32)), cupy.asarray(a), cupy.asarray(r), out))
    return cupy.asnumpy(out).view(np.uint8).reshape(n, PROBE_SMEM)


def run_movmatrix(regs: Any) -> np.ndarray:
    """movmatrix.m8n8.trans.b16 on the GPU: (n, 32) uint32 -> (n, 32) uint32."""
    r = _arr("regs", regs, np.uint32, (32,), "one register per lane")
    cupy = runtime.require_gpu()
    out = cupy.zeros(r.shape, dtype=cupy.uint32)
    _launch("movmatrix_trans", r.shape[0], (cupy.asarray(r), out))
    return cupy.asnumpy(out)


def run_shfl(mode: str, a: Any, b: Any, c: Any, membermask: Any) -> tuple[np.ndarray, np.ndarray]:
    """shfl.sync.<mode>.b32 d|p, a, b, c, membermask on the GPU; a, b (n, 32) uint32, c and membermask
    (n,) uint32. Lanes outside membermask do not execute: their d is 0 and p is 2."""
    if mode not in MODES:
        raise bad_argument("mode", mode, f"expected one of {MODES}")
    av = _arr("a", a, np.uint32, (32,), "one value per lane")
    n = av.shape[0]
    bv = _arr("b", b, np.uint32, (32,), "one b per lane")
    cv = np.ascontiguousarray(np.asarray(c, dtype=np.uint32).reshape(n))
    mv = np.ascontiguousarray(np.asarray(membermask, dtype=np.uint32).reshape(n))
    if bv.shape[0] != n:
        raise bad_argument("b", _Summary(bv), f"expected {n} warps like a")
    cupy = runtime.require_gpu()
    d = cupy.zeros((n, 32), dtype=cupy.uint32)
    p = cupy.zeros((n, 32), dtype=cupy.uint32)
    _launch(f"shfl_{mode}", n, (cupy.asarray(av), cupy.asarray(bv), cupy.asarray(cv), cupy.asarray(mv), d, p))
    return cupy.asnumpy(d), cupy.asnumpy(p)


def run_cp_async(image: Any, gmem: Any, dst: Any, src: Any, src_size: Any, active: Any, *, cp_size: int = 16,
                 cache: str = "cg") -> np.ndarray:
    """cp.async.<cache> of cp_size bytes per active lane, then commit_group + wait_group 0; returns the
    shared-memory image (n, 8192) uint8 afterwards. gmem: 1-D uint8 (one buffer for all cases);
    dst (n, 32) shared offsets; src (n, 32) offsets into gmem; src_size (n, 32); active (n,) lane masks."""
    key = (cache, cp_size)
    if key not in CP_ASYNC_KERNELS:
        raise bad_argument("cache/cp_size", key, f"probes offer {sorted(CP_ASYNC_KERNELS)}")
    img = _image(image)
    n = img.shape[0]
    d = _addr(dst, n, "dst")
    g = np.asarray(gmem)
    if g.dtype != np.uint8 or g.ndim != 1 or g.size == 0:
        raise bad_argument("gmem", getattr(g, "shape", g), "expected a non-empty 1-D uint8 array")
    s = np.asarray(src)
    if s.dtype.kind not in "iu" or s.shape != (n, 32) or (s.size and (s.min() < 0 or s.max() + cp_size > g.size)):
        raise bad_argument("src", _Summary(s), f"expected ({n}, 32) offsets with offset + {cp_size} <= len(gmem)")
    ss = np.asarray(src_size)
    if ss.dtype.kind not in "iu" or ss.shape != (n, 32) or (ss.size and (ss.min() < 0 or ss.max() > cp_size)):
        raise bad_argument("src_size", _Summary(ss), f"expected ({n}, 32) sizes in 0..{cp_size}")
    act = np.ascontiguousarray(np.asarray(active, dtype=np.uint32).reshape(n))
    cupy = runtime.require_gpu()
    out = cupy.zeros((n, PROBE_SMEM // 4), dtype=cupy.uint32)
    _launch(CP_ASYNC_KERNELS[key], n, (cupy.asarray(img.view(np.uint32)), cupy.asarray(g), cupy.asarray(d),
                                       cupy.asarray(s.astype(np.uint32)), cupy.asarray(ss.astype(np.uint32)),
                                       cupy.asarray(act), out))
    return cupy.asnumpy(out).view(np.uint8).reshape(n, PROBE_SMEM)
