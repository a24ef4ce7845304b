"""What ``flashsim run`` is built on (the command itself: :mod:`flashsim.cli.run`): a kernel file, CUDA source
or an sm_90 ``.cubin``, loaded as a :class:`flashsim.cuda.RawModule` (:func:`load_module`), the kernel to
launch picked from it (:func:`pick_kernel`), a launch that stopped described as data (:func:`fault_dict`),
and arrays saved as ``.npz`` (:func:`save_npz`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

from flashsim.errors import bad_argument

__all__ = ["fault_dict", "load_module", "pick_kernel", "save_npz"]


def load_module(path: Path, nvrtc_options=()):
    """(module, NVRTC's log) of the kernel file ``path``: a ``.cubin`` as it is; CUDA source compiled for sm_90
    by NVRTC with ``-lineinfo`` and ``nvrtc_options``, the file's folder on the include path."""
    import flashsim.cuda as fc
    from flashsim.sass.toolchain import compile_cuda

    path = Path(path)
    if not path.is_file():
        raise bad_argument("KERNEL", str(path), "no such file")
    if path.suffix == ".cubin":
        if nvrtc_options:
            raise bad_argument("--nvrtc-option", list(nvrtc_options), "a .cubin is not compiled: drop -O")
        return fc.RawModule(path=str(path)), ""
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise bad_argument("KERNEL", str(path), "is not UTF-8 text (CUDA source) nor a .cubin") from None
    full = path.resolve()
    options = (*nvrtc_options, f"--include-path={full.parent}")
    cubin, log, _ = compile_cuda(source, name=str(full), options=options, lineinfo=True)
    return fc.RawModule(cubin=cubin), log


def pick_kernel(mod, kernel: str | None, path) -> str:
    """The kernel of ``mod`` (loaded from ``path``) named ``kernel``; None: its only kernel."""
    kernels = mod.kernels
    if kernel is None:
        if len(kernels) == 1:
            return kernels[0]
        raise bad_argument("--kernel", None, f"{path} has {len(kernels)} kernels ({', '.join(kernels)}): name one")
    if kernel not in kernels:
        raise bad_argument("--kernel", kernel, f"no such kernel in {path} (kernels: {', '.join(kernels) or 'none'}; "
                                               "a C++ kernel has a mangled name unless it is declared extern \"C\")")
    return kernel


def fault_dict(exc) -> dict | None:
    """What stopped a launch (a simulated fault, a deadlock, a step budget), as JSON-ready data."""
    if exc is None:
        return None
    line = getattr(exc, "line", None)
    d = {"type": type(exc).__name__, "message": str(exc), "pc": getattr(exc, "pc", None),
         "sass": getattr(exc, "sass", None), "file": line[0] if line else None, "line": line[1] if line else None}
    for k in ("kind", "cta", "warp", "lane", "addr"):
        if hasattr(exc, k):
            d[k] = getattr(exc, k)
    return d


def save_npz(path: Path, arrays: dict) -> None:
    """``arrays`` (name -> numpy array) in ``path`` as .npz, written atomically; bf16 as uint16 bit patterns."""
    out = {k: (v.view(np.uint16) if v.dtype == ml_dtypes.bfloat16 else v) for k, v in arrays.items()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **out)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
