"""Run ``@triton.jit`` kernels on the CPU as ``kernel[grid](...)`` runs them on an H100.

    import flashsim.triton as ft
    ft.kernel(add_kernel)[(n // 1024,)](x, y, out, n, BLOCK=1024)    # x, y, out: numpy arrays

Triton's own JIT does the work it does on the GPU: it specialises the call (the signature from the arguments'
types, constexprs, ints equal to 1 folded, 16-byte divisibility of pointers and ints), compiles for sm_90
with its bundled ptxas, and caches the result; flashsim is the device it launches on (a Triton driver,
:mod:`flashsim.triton.driver`), so the cubin is the one Triton builds on the GPU for the same call and the
SASS interpreter runs it with Triton's launch ABI. Arguments: numpy arrays and torch CPU tensors (copied in
before the launch and back after it, views of one buffer aliasing as on the GPU), flashsim.cuda arrays, host
``TensorDescriptor``\\ s over any of them, Python ints, floats and bools. Every diagnostic of flashsim.cuda
applies (``with flashsim.cuda.checking(...)``), with lines of the Triton source.

``with ft.device(): add_kernel[grid](...)`` makes the simulated device Triton's active driver for a block
(flashsim.cuda arrays and torch CPU tensors as arguments). Triton is an optional dependency, pinned to the
version on the H100 machine (:data:`TRITON_PIN`): ``pip install "flashsim[triton]"``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
from typing import Any, Iterator

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["TRITON_PIN", "TritonUnavailable", "Launched", "device", "kernel", "launch", "require"]

#: The Triton whose cubins flashsim runs: the version on the H100 machine (its bundled ptxas is 12.8).
TRITON_PIN = "3.6.0"

_OPTIONS: contextvars.ContextVar = contextvars.ContextVar("flashsim_triton_options", default=None)


class TritonUnavailable(FlashsimError, ImportError):
    """Triton is not installed, or not the pinned version."""


def require():
    """The triton module, checked to be the pinned version."""
    try:
        import triton
    except ImportError as exc:
        raise TritonUnavailable(f"flashsim.triton needs Triton {TRITON_PIN} ({exc}): pip install 'flashsim[triton]'") \
            from None
    if triton.__version__ != TRITON_PIN:
        raise TritonUnavailable(
            f"Triton {triton.__version__} is installed; flashsim.triton runs the cubins of Triton {TRITON_PIN}, "
            f"the Triton of the H100 machine (another version compiles other SASS): pip install 'triton=={TRITON_PIN}'")
    return triton


def bundled_ptxas() -> str:
    """The ptxas Triton ships (12.8 with Triton 3.6.0): flashsim's second compiler of CUDA C (NVRTC's PTX)."""
    from pathlib import Path

    triton = require()
    path = Path(triton.__file__).resolve().parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not path.is_file():
        raise TritonUnavailable(f"Triton {triton.__version__} ships no ptxas at {path}")
    return str(path)


def ptx_for_bundled_ptxas(ptx: str) -> str:
    """NVRTC 13.0's PTX (ISA 9.0) as the bundled ptxas 12.8 reads it (ISA 8.7), for code that uses nothing
    newer."""
    import re

    return re.sub(r"^\.version 9\.0$", ".version 8.7", ptx, count=1, flags=re.M)


def _current_options():
    from flashsim.sass.machine import ExecOptions

    return _OPTIONS.get() or ExecOptions()


@contextlib.contextmanager
def device(exec_options=None) -> Iterator[None]:
    """Inside the block the simulated H100 is Triton's active device: ``kernel[grid](...)`` compiles for sm_90
    and runs in the interpreter (``exec_options``: a flashsim.cuda.ExecOptions for the launches)."""
    triton = require()
    from flashsim.sass.machine import ExecOptions

    if exec_options is not None and not isinstance(exec_options, ExecOptions):
        raise bad_argument("exec_options", exec_options, "expected None or a flashsim.cuda.ExecOptions")
    cfg = triton.runtime.driver
    previous = cfg._active
    cfg.set_active(_driver())
    token = _OPTIONS.set(exec_options)
    try:
        yield
    finally:
        _OPTIONS.reset(token)
        cfg._active = previous


@functools.lru_cache(maxsize=1)
def _driver():
    """The one simulated-H100 driver of the process (Triton keys its kernel caches by the driver's device)."""
    from flashsim.triton.driver import make_driver

    return make_driver()


@dataclasses.dataclass
class Launched:
    """What :func:`launch` ran: Triton's ``CompiledKernel`` (``.asm['cubin']``, ``.metadata``), the cubin's
    sha256, the flashsim.cuda module it ran in, the grid and the interpreter's counters."""

    compiled: Any
    cubin_sha256: str
    module: Any
    grid: tuple
    counters: dict

    @property
    def cubin(self) -> bytes:
        return self.compiled.asm["cubin"]


def _stage_args(stage, args, kwargs):
    from flashsim.triton.staging import is_torch_tensor
    import numpy as np

    def conv(x, what):
        if isinstance(x, np.ndarray) or is_torch_tensor(x):
            return stage.put(x, what)
        if type(x).__name__ == "TensorDescriptor" and hasattr(x, "base"):
            base = conv(x.base, f"{what}.base")
            return dataclasses.replace(x, base=base) if base is not x.base else x
        return x

    return ([conv(a, f"argument {i}") for i, a in enumerate(args)],
            {k: conv(v, f"argument {k!r}") for k, v in kwargs.items()})


def launch(fn, grid, *args, exec_options=None, **kwargs) -> Launched:
    """``fn[grid](*args, **kwargs)`` on the simulated H100; returns what ran (:class:`Launched`)."""
    triton = require()
    import triton.compiler.errors  # noqa: F401
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    from flashsim.triton.staging import Stage

    inner = fn
    while isinstance(inner, Heuristics):  # @triton.heuristics computes constexprs from the arguments, then runs
        inner = inner.fn
    if isinstance(inner, Autotuner):
        raise NotImplementedError("@triton.autotune times its configurations on a GPU: timing is not modelled; "
                                  "launch the jit function (kernel.fn) with the configuration to simulate")
    if not isinstance(inner, JITFunction):
        raise bad_argument("fn", fn, "expected a @triton.jit function (or a @triton.heuristics wrapper of one)")
    stage = Stage()
    ok = False
    try:
        sargs, skw = _stage_args(stage, args, kwargs)
        with device(exec_options):
            try:
                compiled = fn.run(*sargs, grid=grid, warmup=False, **skw)
            except triton.compiler.errors.CompilationError as exc:
                if hasattr(exc, "add_note"):
                    exc.add_note("flashsim.triton compiles for the simulated H100 (sm_90, Triton's target "
                                 "GPUTarget('cuda', 90, 32)): a kernel that needs another target does not build here")
                raise
        ok = True
    finally:
        stage.finish(copy_back=ok)
    launcher = compiled.run  # flashsim.triton.driver.SimLauncher: what it last ran
    grid3, counters = launcher.last if launcher.last is not None else ((0, 0, 0), {})
    return Launched(compiled, hashlib.sha256(compiled.asm["cubin"]).hexdigest(), compiled.module, grid3, counters)


class _Kernel:
    """``kernel(fn)[grid](*args, **kwargs)``: :func:`launch` in Triton's calling form."""

    def __init__(self, fn, exec_options=None):
        self.fn, self.exec_options = fn, exec_options

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            return launch(self.fn, grid, *args, exec_options=self.exec_options, **kwargs)
        return run


def kernel(fn, *, exec_options=None) -> _Kernel:
    """Wrap a ``@triton.jit`` function so that ``kernel(fn)[grid](...)`` runs it on the simulated H100."""
    return _Kernel(fn, exec_options)
