"""Compile gpu/kernels/*.cu for the GPU (NVRTC through cupy; nvcc for a compile-only check), cache, and launch.

The sources themselves (their folder, hashes, includes) and the interpreter's build of them live in
:mod:`flashsim.kernels.sources`; this module adds what needs cupy and a device.

cupy is imported lazily, inside the functions that need it: importing this module is cheap and works on
a machine without cupy or a GPU. A missing cupy or unusable device raises :class:`GpuUnavailable`; a
kernel that does not compile raises :class:`CompileError` with the compiler's full log and the file name;
a failed launch raises :class:`LaunchError` naming the kernel.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import numbers
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

from flashsim.errors import CheckError, CompileError, FlashsimError, GpuUnavailable, LaunchError, bad_argument
from flashsim.kernels import sources
# the sources and the interpreter's builds of them (and its cache, _INTERP), re-exported for the harness
from flashsim.kernels.sources import (_INTERP, BASE_OPTIONS, KERNELS_DIR, check_options,  # noqa: F401
                                      get_interpreted_kernel, interpreted_module, kernel_path, kernel_source,
                                      local_includes, source_hash)

__all__ = [
    "BASE_OPTIONS",
    "KERNELS_DIR",
    "CheckError",
    "CompileError",
    "GpuUnavailable",
    "LaunchError",
    "encode_tensor_map",
    "check_compiles_nvcc",
    "current_arch",
    "device_info",
    "get_cubin_kernel",
    "get_interpreted_kernel",
    "get_kernel",
    "interpreted_module",
    "kernel_path",
    "kernel_source",
    "launch",
    "load_cubin",
    "load_module",
    "local_includes",
    "require_gpu",
    "source_hash",
]

_ARCH_RE = re.compile(r"^sm_\d{2,3}a?$")


# --------------------------------------------------------------------------------------------------
# cupy and the device
# --------------------------------------------------------------------------------------------------


def _import_cupy() -> Any:
    """Import cupy or raise GpuUnavailable saying why (the only place this module imports it)."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or cupy's own failure to load CUDA libraries
        raise GpuUnavailable(
            f"cupy is not importable ({type(exc).__name__}: {exc}); "
            "install it with: pip install 'flashsim[gpu]' (cupy-cuda13x)"
        ) from exc
    return cupy


def require_gpu() -> Any:
    """Return the cupy module after checking that a CUDA device is usable; else raise GpuUnavailable."""
    cupy = _import_cupy()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            raise GpuUnavailable("cupy found no CUDA device (cudaGetDeviceCount() returned 0)")
        cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    except GpuUnavailable:
        raise
    except Exception as exc:  # CUDARuntimeError: no driver, driver too old, device busy or lost
        raise GpuUnavailable(f"no usable CUDA device ({type(exc).__name__}: {exc})") from exc
    return cupy


def current_arch() -> str:
    """The current device's architecture as ``sm_XY`` (e.g. ``sm_90`` on an H100)."""
    cupy = require_gpu()
    return f"sm_{cupy.cuda.Device().compute_capability}"


def _cuda_version(v: int) -> str:
    """CUDA's integer version (1000*major + 10*minor) as 'major.minor': 13000 -> '13.0'."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _driver_release() -> str:
    """The NVIDIA kernel-module release (e.g. '580.65.06') from /proc on Linux, or 'unknown'."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text(errors="replace")
    except OSError:
        return "unknown"
    m = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return m.group(1) if m else "unknown"


def device_info(device: int | None = None) -> dict[str, str]:
    """GPU name, compute capability ('9.0'), driver, CUDA runtime, NVRTC and cupy versions, as strings.

    Used by the pytest report header under ``--gpu`` and in the provenance of golden data.
    """
    cupy = require_gpu()
    rt = cupy.cuda.runtime
    dev = rt.getDevice() if device is None else int(device)
    props = rt.getDeviceProperties(dev)
    name = props["name"]
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    major, minor = int(props["major"]), int(props["minor"])
    nvrtc_major, nvrtc_minor = cupy.cuda.nvrtc.getVersion()
    return {
        "device": str(dev),
        "name": str(name),
        "compute_capability": f"{major}.{minor}",
        "arch": f"sm_{major}{minor}",
        "driver_version": _cuda_version(rt.driverGetVersion()),  # CUDA version the driver supports
        "driver_release": _driver_release(),  # NVIDIA driver release, e.g. 580.65.06
        "cuda_runtime_version": _cuda_version(rt.runtimeGetVersion()),
        "nvrtc_version": f"{nvrtc_major}.{nvrtc_minor}",
        "cupy_version": str(cupy.__version__),
    }


# --------------------------------------------------------------------------------------------------
# Compiling
# --------------------------------------------------------------------------------------------------


_MODULES: dict[tuple[str, tuple[str, ...], str], Any] = {}
_MODULES_LOCK = threading.Lock()


def load_module(name: str, *, options: Sequence[str] = (), arch: str | None = None) -> Any:
    """Compile ``gpu/kernels/<name>`` with NVRTC (``cupy.RawModule``) and return the module.

    Compilation is eager, so an NVRTC error surfaces here as CompileError with the log and file name.
    Modules are cached in-process by (source hash, options, arch); cupy's own disk cache also sees the
    header contents because the source hash is passed as ``-DFLASHSIM_SOURCE_HASH=...``.
    ``arch`` defaults to the current device's ``sm_XY``; only that or its ``sm_XYa`` variant is
    accepted, since the cubin must load on this device (cupy appends its own ``-arch=sm_XY``).
    Note that cupy always adds ``-ftz=true``: C++ float code is flushed-to-zero, inline PTX is not.
    """
    path = kernel_path(name)
    opts = check_options(options)
    if arch is not None and (not isinstance(arch, str) or not _ARCH_RE.match(arch)):
        raise bad_argument("arch", arch, "expected 'sm_XY' or 'sm_XYa', e.g. 'sm_90'")
    cupy = require_gpu()
    device_arch = current_arch()
    if arch is None:
        arch = device_arch
    elif arch not in (device_arch, device_arch + "a"):
        raise bad_argument(
            "arch", arch, f"the module must load on the current device ({device_arch}): use {device_arch} or {device_arch}a"
        )
    digest = source_hash(name)
    key = (digest, opts, arch)
    with _MODULES_LOCK:
        module = _MODULES.get(key)
        if module is not None:
            return module
        # #line makes NVRTC's diagnostics name the real file (cupy compiles under a hashed name).
        code = f'#line 1 "{path}"\n' + path.read_text(encoding="utf-8")
        all_options = (
            *BASE_OPTIONS,
            f"--include-path={sources.KERNELS_DIR}",
            f"-arch={arch}",
            f"-DFLASHSIM_SOURCE_HASH=0x{digest[:16]}",
            *opts,
        )
        module = cupy.RawModule(code=code, options=all_options, backend="nvrtc")
        try:
            module.compile()
        except cupy.cuda.compiler.CompileException as exc:
            raise CompileError(path, exc.get_message(), compiler="nvrtc") from None
        _MODULES[key] = module
        return module


_CUBIN_GPU: dict[str, Any] = {}
_CUBIN_DIR: list[Path] = []


def _cubin_dir() -> Path:
    """A folder for the cubin files cupy loads (it reads a RawModule's file lazily, at the first
    get_function, so the file must outlive the call); removed when the process exits."""
    if not _CUBIN_DIR:
        import atexit

        d = Path(tempfile.mkdtemp(prefix="flashsim-cubin-"))
        atexit.register(shutil.rmtree, d, True)
        _CUBIN_DIR.append(d)
    return _CUBIN_DIR[0]


def load_cubin(cubin: bytes) -> Any:
    """A ``cupy.RawModule`` of exactly these cubin bytes (loaded from a file whose sha256 is checked), so
    the GPU runs the very code the interpreter runs."""
    cupy = require_gpu()
    digest = hashlib.sha256(cubin).hexdigest()
    mod = _CUBIN_GPU.get(digest)
    if mod is None:
        path = _cubin_dir() / f"{digest}.cubin"
        path.write_bytes(cubin)
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise LaunchError(path.name, "the cubin file does not hold the interpreter's bytes")
        mod = _CUBIN_GPU[digest] = cupy.RawModule(path=str(path))
    return mod


@functools.lru_cache(maxsize=1)
def _libcuda() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    f = lib.cuTensorMapEncodeTiled
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                  ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                  ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.cuGetErrorString.restype = ctypes.c_int
    lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return lib


def encode_tensor_map(args: tuple, address: int, name: str = "tensor map", what=None) -> bytes:
    """The 128 bytes the driver's cuTensorMapEncodeTiled writes for ``args`` = (data type enum, rank, dims,
    strides in bytes, box, element strides, interleave, swizzle, L2 promotion, OOB fill enums) at device
    ``address`` (needs a current context: call after cupy has touched the device); a refusal raises
    LaunchError with the CUresult and ``what`` (default: the arguments)."""
    lib = _libcuda()
    dtype, rank, dims, strides, box, estr, *enums = args
    buf = ctypes.create_string_buffer(128 + 64)
    aligned = (ctypes.addressof(buf) + 63) & ~63  # the map must be 64-byte aligned
    rc = lib.cuTensorMapEncodeTiled(ctypes.c_void_p(aligned), dtype, rank, ctypes.c_void_p(address),
                                    (ctypes.c_uint64 * rank)(*dims),
                                    (ctypes.c_uint64 * max(1, rank - 1))(*(strides or (0,))),
                                    (ctypes.c_uint32 * rank)(*box), (ctypes.c_uint32 * rank)(*estr), *enums)
    if rc != 0:
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(rc, ctypes.byref(msg))
        raise LaunchError("cuTensorMapEncodeTiled", f"{name}: CUresult {rc} "
                                                    f"({(msg.value or b'?').decode()}) for {what or args}")
    return ctypes.string_at(aligned, 128)


def get_cubin_kernel(name: str, function: str, *, options: Sequence[str] = (), arch: str = "sm_90") -> Any:
    """The kernel ``function`` of the interpreter's cubin of ``gpu/kernels/<name>`` (built for ``arch``), on
    the GPU; the returned kernel carries ``.cubin_sha256``."""
    cubin = interpreted_module(name, options=options, arch=arch).cubin
    kern = load_cubin(cubin).get_function(function)
    try:
        kern.cubin_sha256 = hashlib.sha256(cubin).hexdigest()
    except AttributeError:  # cupy's Function may not take attributes; the hash is still checked on load
        pass
    return kern


def get_kernel(name: str, function: str, *, options: Sequence[str] = (), arch: str | None = None) -> Any:
    """The ``extern "C"`` kernel ``function`` of ``gpu/kernels/<name>`` as a ``cupy.RawKernel``."""
    module = load_module(name, options=options, arch=arch)
    cupy = _import_cupy()
    try:
        return module.get_function(function)
    except cupy.cuda.driver.CUDADriverError as exc:
        raise bad_argument("function", function, f"no such kernel in {name} ({exc})") from None


def check_compiles_nvcc(path: str | Path, arch: str = "sm_90", options: Sequence[str] = ()) -> bytes:
    """Compile ``path`` to a cubin with the nvcc binary (no GPU needed) and return the cubin's bytes.

    Runs ``nvcc -arch=<arch> -cubin -std=c++17 -I<kernels> -o <tmp> <path>``; a failure raises
    CompileError(path, nvcc's output). Raises GpuUnavailable when nvcc is not on PATH. Note that nvcc
    includes the CUDA runtime headers implicitly where NVRTC does not.
    """
    path = Path(path)
    if not path.is_file():
        raise bad_argument("path", str(path), "no such file")
    if not isinstance(arch, str) or not _ARCH_RE.match(arch):
        raise bad_argument("arch", arch, "expected 'sm_XY' or 'sm_XYa', e.g. 'sm_90'")
    opts = check_options(options)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise GpuUnavailable("nvcc is not on PATH: install the CUDA toolkit to compile-check kernels")
    with tempfile.TemporaryDirectory(prefix="flashsim-nvcc-") as tmp:
        out = Path(tmp) / (path.stem + ".cubin")
        cmd = [nvcc, f"-arch={arch}", "-cubin", *BASE_OPTIONS, f"-I{sources.KERNELS_DIR}", *opts, "-o", str(out), str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            log = f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
            raise CompileError(path, log, compiler="nvcc")
        return out.read_bytes()


# --------------------------------------------------------------------------------------------------
# Launching
# --------------------------------------------------------------------------------------------------


def _dim3(argname: str, value: Any) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, numbers.Integral) else value
    ok = isinstance(dims, (tuple, list)) and 1 <= len(dims) <= 3 and all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1 for d in dims
    )
    if not ok:
        raise bad_argument(argname, value, "expected a positive int or a tuple of 1 to 3 positive ints")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


def launch(kernel: Any, grid: Any, block: Any, args: Sequence[Any], shared_mem: int = 0) -> None:
    """Launch a cupy RawKernel, synchronise, and turn a CUDA error into LaunchError naming the kernel."""
    g = _dim3("grid", grid)
    b = _dim3("block", block)
    if math.prod(b) > 1024:
        raise bad_argument("block", block, "at most 1024 threads per block")
    if not isinstance(shared_mem, int) or shared_mem < 0:
        raise bad_argument("shared_mem", shared_mem, "expected a non-negative int (bytes)")
    cupy = _import_cupy()
    name = getattr(kernel, "name", None) or repr(kernel)
    cuda_errors = (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError)
    try:
        kernel(g, b, tuple(args), shared_mem=shared_mem)
        cupy.cuda.get_current_stream().synchronize()
    except cuda_errors as exc:
        raise LaunchError(name, f"grid={g} block={b} shared_mem={shared_mem}: {exc}") from exc
