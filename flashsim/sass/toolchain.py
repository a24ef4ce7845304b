"""NVIDIA's NVRTC and nvdisasm, from their PyPI wheels, on a machine with no GPU and no CUDA toolkit.

NVRTC (``nvidia-cuda-nvrtc``, pinned to 13.0 to match the NVRTC that cupy uses on the H100 machine, so both
sides compile the same SASS) is called through ctypes; nvdisasm (``nvidia-cuda-nvdisasm``) is run as a
program and asked for JSON. Sources are compiled the way ``cupy.RawModule`` compiles them (see
:data:`CUPY_OPTIONS`).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import Sequence

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["CUPY_OPTIONS", "CompileError", "ToolchainError", "compile_cuda", "disassemble", "nvdisasm_path",
           "nvrtc_version", "versions"]

#: Options cupy appends to the user's for every NVRTC compilation of a RawModule/RawKernel on an sm_90
#: device (cupy/cuda/compiler.py: ``_compile_with_cache_cuda`` appends ``-ftz=true``, then
#: ``compile_using_nvrtc`` the target as a real architecture, so NVRTC emits a cubin, not PTX). NVRTC
#: honours the last occurrence of an option, so user code cannot undo flush-to-zero. cupy adds no -std.
CUPY_OPTIONS = ("-ftz=true", "-arch=sm_90")
#: flashsim's one addition: line tables, so faults and reports name source lines. It adds sections to the
#: cubin and leaves every instruction as it is (tests/test_sass_toolchain.py compares the SASS).
LINEINFO = "-lineinfo"


class ToolchainError(FlashsimError):
    """NVRTC or nvdisasm is missing or failed in a way that is not a compile error of the user's code."""


class CompileError(FlashsimError):
    """NVRTC rejected the source; ``.log`` holds NVRTC's full log, ``.name`` the source's name."""

    def __init__(self, name: str, log: str):
        self.name, self.log = name, log
        super().__init__(f"nvrtc failed to compile {name}:\n{log.rstrip()}")


def _nvidia_dir() -> Path:
    try:
        import nvidia  # namespace package of NVIDIA's wheels
    except ImportError as exc:  # pragma: no cover - the dependency is declared
        raise ToolchainError("NVIDIA's wheels are not installed: pip install nvidia-cuda-nvrtc nvidia-cuda-nvdisasm") from exc
    for base in nvidia.__path__:
        cand = Path(base) / "cu13"
        if cand.is_dir():
            return cand
    raise ToolchainError(f"no nvidia/cu13 folder under {list(nvidia.__path__)}: install nvidia-cuda-nvrtc==13.0.*")


_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _nvrtc() -> ctypes.CDLL:
    lib_dir = _nvidia_dir() / "lib"
    builtins = sorted(lib_dir.glob("libnvrtc-builtins.so.*"))
    main = lib_dir / "libnvrtc.so.13"
    if not main.exists() or not builtins:
        raise ToolchainError(f"NVRTC's libraries are not in {lib_dir}: pip install nvidia-cuda-nvrtc==13.0.*")
    # NVRTC dlopens its builtins library by soname; loading it first, globally, lets that lookup succeed
    # without LD_LIBRARY_PATH.
    ctypes.CDLL(str([b for b in builtins if ".alt." not in b.name][0]), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(main))
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def nvrtc_version() -> str:
    """NVRTC's version as 'major.minor' (the library's own answer)."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    _nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    """The versions that decide the SASS (NVRTC) and its reading (nvdisasm): recorded with golden data."""
    return {
        "nvrtc": nvrtc_version(),
        "nvidia-cuda-nvrtc": _dist_version("nvidia-cuda-nvrtc"),
        "nvidia-cuda-nvdisasm": _dist_version("nvidia-cuda-nvdisasm"),
        "pyelftools": _dist_version("pyelftools"),
    }


def _check(lib, rc: int, what: str) -> None:
    if rc != 0:
        raise ToolchainError(f"{what} failed: {lib.nvrtcGetErrorString(rc).decode(errors='replace')}")


def _get(lib, prog, size_fn: str, get_fn: str) -> bytes:
    n = ctypes.c_size_t()
    _check(lib, getattr(lib, size_fn)(prog, ctypes.byref(n)), size_fn)
    buf = ctypes.create_string_buffer(n.value)
    _check(lib, getattr(lib, get_fn)(prog, buf), get_fn)
    return buf.raw[: n.value]


def compile_cuda(source: str, *, name: str = "kernel.cu", options: Sequence[str] = (),
                 name_expressions: Sequence[str] = (), lineinfo: bool = True) -> tuple[bytes, str, dict[str, str]]:
    """Compile CUDA C++ ``source`` for sm_90 with NVRTC as cupy does (plus ``-lineinfo`` if asked).

    Returns (cubin bytes, NVRTC log, {name expression: lowered (mangled) name}). Raises CompileError with
    the log when NVRTC rejects the source.
    """
    if not isinstance(source, str):
        raise bad_argument("code", type(source).__name__, "expected the CUDA source as a str")
    if isinstance(options, str):
        raise bad_argument("options", options, "expected a sequence of option strings, not one string")
    opts = [*options, *CUPY_OPTIONS]
    if lineinfo and LINEINFO not in opts and "--generate-line-info" not in opts:
        opts.append(LINEINFO)
    for o in opts:
        if not isinstance(o, str):
            raise bad_argument("options", tuple(options), f"every option must be a str, got {o!r}")
    lib = _nvrtc()
    prog = ctypes.c_void_p()
    with _LOCK:
        _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
               "nvrtcCreateProgram")
        try:
            for expr in name_expressions:
                _check(lib, lib.nvrtcAddNameExpression(prog, expr.encode()), f"nvrtcAddNameExpression({expr!r})")
            arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
            rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
            log = _get(lib, prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog").rstrip(b"\0").decode(errors="replace")
            if rc != 0:
                raise CompileError(name, log or lib.nvrtcGetErrorString(rc).decode())
            cubin = _get(lib, prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN")
            if not cubin:
                raise ToolchainError(f"NVRTC produced no cubin for {name} (options {opts}): is the target a real sm_XY?")
            lowered = {}
            for expr in name_expressions:
                out = ctypes.c_char_p()
                _check(lib, lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)), "nvrtcGetLoweredName")
                lowered[expr] = out.value.decode()
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin, log, lowered


def nvdisasm_path() -> str:
    """The nvdisasm binary of the ``nvidia-cuda-nvdisasm`` wheel (else one on PATH)."""
    try:
        cand = _nvidia_dir() / "bin" / "nvdisasm"
        if cand.is_file():
            return str(cand)
    except ToolchainError:
        pass
    found = shutil.which("nvdisasm")
    if found is None:
        raise ToolchainError("nvdisasm not found: pip install nvidia-cuda-nvdisasm")
    return found


@functools.lru_cache(maxsize=64)
def _disassemble_cached(digest: str, cubin: bytes) -> tuple:
    with tempfile.TemporaryDirectory(prefix="flashsim-nvdisasm-") as tmp:
        path = os.path.join(tmp, "module.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        proc = subprocess.run([nvdisasm_path(), "-json", "-g", path], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise ToolchainError(f"nvdisasm failed on the cubin (sha256 {digest[:16]}): {proc.stderr.strip()}")
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise ToolchainError(f"nvdisasm's JSON output is unreadable: {exc}") from None
    return tuple(doc)


def disassemble(cubin: bytes) -> list:
    """nvdisasm's JSON for ``cubin``: [header, [functions with 'sass-instructions'], {'files': ...}]."""
    return list(_disassemble_cached(hashlib.sha256(cubin).hexdigest(), bytes(cubin)))
