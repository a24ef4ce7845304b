"""NVIDIA's NVRTC and nvdisasm, from their PyPI wheels, on a machine with no GPU and no CUDA toolkit.

NVRTC (``nvidia-cuda-nvrtc``, pinned to 13.0 to match the NVRTC that cupy uses on the H100 machine, so both
sides compile the same SASS) is called through ctypes; nvdisasm (``nvidia-cuda-nvdisasm``) is run as a
program and asked for JSON. Sources are compiled the way ``cupy.RawModule`` compiles them (see
:data:`CUPY_OPTIONS`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import Sequence

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["CUPY_OPTIONS", "CompileError", "CudaBuild", "PtxLinkError", "ToolchainError",
           "assemble_ptx", "compile_cuda", "compile_cuda_ptx", "cuobjdump_path", "disassemble", "link_ptx",
           "nvdisasm_path", "nvjitlink_version", "nvrtc_version", "ptxas_path", "ptxas_version", "versions"]

#: Options cupy appends to the user's for every NVRTC compilation of a RawModule/RawKernel on an sm_90
#: device (cupy/cuda/compiler.py: ``_compile_with_cache_cuda`` appends ``-ftz=true``, then
#: ``compile_using_nvrtc`` the target as a real architecture, so NVRTC emits a cubin, not PTX). NVRTC
#: honours the last occurrence of an option, so user code cannot undo flush-to-zero. cupy adds no -std.
CUPY_OPTIONS = ("-ftz=true", "-arch=sm_90")
#: flashsim's one addition: line tables, so faults and reports name source lines. It adds sections to the
#: cubin and leaves every instruction as it is (tests/test_cuda_interp.py compares the SASS).
LINEINFO = "-lineinfo"


class ToolchainError(FlashsimError):
    """NVRTC or nvdisasm is missing or failed in a way that is not a compile error of the user's code."""


class CompileError(FlashsimError):
    """NVRTC rejected the source; ``.log`` holds NVRTC's full log, ``.name`` the source's name."""

    def __init__(self, name: str, log: str):
        self.name, self.log = name, log
        super().__init__(f"nvrtc failed to compile {name}:\n{log.rstrip()}")


def _nvidia_file(rel: str) -> Path | None:
    """``nvidia/cu13/<rel>`` from NVIDIA's wheels (the namespace package may span several folders; the
    environment variables FLASHSIM_NVRTC, FLASHSIM_NVDISASM and FLASHSIM_NVJITLINK name the libraries and the
    program directly)."""
    env = {"lib/libnvrtc.so.13": "FLASHSIM_NVRTC", "bin/nvdisasm": "FLASHSIM_NVDISASM",
           "lib/libnvJitLink.so.13": "FLASHSIM_NVJITLINK", "bin/ptxas": "FLASHSIM_PTXAS",
           "bin/cuobjdump": "FLASHSIM_CUOBJDUMP"}.get(rel)
    if env and os.environ.get(env):
        p = Path(os.environ[env])
        if not p.is_file():
            raise ToolchainError(f"{env}={os.environ[env]!r} is not a file")
        return p
    try:
        import nvidia  # namespace package of NVIDIA's wheels
    except ImportError:
        return None
    for base in nvidia.__path__:
        matches = sorted((Path(base) / "cu13").glob(rel))
        if matches:
            return matches[0]
    return None


_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _nvrtc() -> ctypes.CDLL:
    main = _nvidia_file("lib/libnvrtc.so.13")
    if main is None:
        raise ToolchainError("NVRTC 13 is not installed: pip install nvidia-cuda-nvrtc==13.0.88")
    lib_dir = main.parent
    builtins = sorted(lib_dir.glob("libnvrtc-builtins.so.*"))
    if not builtins:
        raise ToolchainError(f"libnvrtc-builtins is missing beside {main}: reinstall nvidia-cuda-nvrtc")
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
        "nvidia-cuda-runtime": _dist_version("nvidia-cuda-runtime"),
        "nvidia-cuda-nvcc": _dist_version("nvidia-cuda-nvcc"),
        "nvidia-cuda-cuobjdump": _dist_version("nvidia-cuda-cuobjdump"),
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


#: The NVRTC build and the CUDA headers the project pins (pyproject); part of the cache key, so cubins
#: from another NVRTC or other headers are never taken for these.
NVRTC_PIN = "nvidia-cuda-nvrtc==13.0.88"
#: the header wheels (their contents stand in the cache key for their machine-specific folder): the runtime's
#: (cuda_fp16.h, cooperative_groups.h, ...), the CRT's (mma.h) and CCCL's (cuda/std, cuda/barrier, cuda/pipeline,
#: cub, thrust, nv/target), in the folders cupy's own CCCL and the toolkit give it
HEADERS_PIN = "nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85"


def cuda_include() -> Path | None:
    """The CUDA headers (cuda_fp16.h, cuda_bf16.h, ...) of the ``nvidia-cuda-runtime`` wheel, which cupy
    would find in the toolkit (``FLASHSIM_CUDA_INCLUDE`` names another folder)."""
    env = os.environ.get("FLASHSIM_CUDA_INCLUDE")
    if env:
        return Path(env)
    found = _nvidia_file("include/cuda_fp16.h")
    return found.parent if found is not None else None


def include_paths() -> list[Path]:
    """The header folders NVRTC is given: :func:`cuda_include`, then every other ``nvidia/cu13/include`` of the
    namespace package (the runtime, CRT and CCCL wheels may sit in different site folders, as when some come
    from ``PYTHONPATH``), each followed by its ``cccl`` folder."""
    first = cuda_include()
    found = [] if first is None else [first]
    if not os.environ.get("FLASHSIM_CUDA_INCLUDE"):
        try:
            import nvidia  # namespace package of NVIDIA's wheels
            found += [Path(b) / "cu13" / "include" for b in nvidia.__path__]
        except ImportError:
            pass
    out: list[Path] = []
    for inc in found:
        for p in (inc, inc / "cccl"):
            if p.is_dir() and p not in out:
                out.append(p)
    return out


def cache_dir() -> Path | None:
    """Where compiled cubins are kept (``FLASHSIM_CACHE_DIR``, default ~/.cache/flashsim/cubin; the value
    ``off`` disables the cache), as cupy keeps its kernel cache."""
    env = os.environ.get("FLASHSIM_CACHE_DIR")
    if env is not None and env.strip().lower() in ("off", "0", "none", ""):
        return None
    return Path(env) if env else Path.home() / ".cache" / "flashsim" / "cubin"


def _cache_key(source: str, name: str, opts: Sequence[str], exprs: Sequence[str]) -> str:
    h = hashlib.sha256()
    safe = nvrtc_name(name)  # a name compiled %-encoded keys apart from its cubins of before the encoding
    for part in (NVRTC_PIN, HEADERS_PIN, name, "\0".join(opts), "\0".join(exprs), source) + \
            ((f"nvrtc-name:{safe}",) if safe != name else ()):
        h.update(part.encode("utf-8", errors="surrogateescape") + b"\x00\x01")
    return h.hexdigest()


def _cache_read(key: str):
    d = cache_dir()
    if d is None:
        return None
    try:
        meta = json.loads((d / f"{key}.json").read_text())
        cubin = (d / f"{key}.cubin").read_bytes()
    except (OSError, ValueError):
        return None
    if hashlib.sha256(cubin).hexdigest() != meta.get("sha256"):
        return None
    return cubin, meta.get("log", ""), dict(meta.get("lowered", {}))


def _cache_write(key: str, cubin: bytes, log: str, lowered: dict) -> None:
    d = cache_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(cubin)
        os.replace(tmp, d / f"{key}.cubin")
        meta = {"sha256": hashlib.sha256(cubin).hexdigest(), "log": log, "lowered": lowered, "nvrtc": NVRTC_PIN}
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(meta, fh)
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        pass  # a read-only or full disk only costs a recompile


def _cupy_options(arch: str) -> tuple[str, ...]:
    """cupy's options with the target ``arch`` ("sm_90", or "sm_90a" for wgmma / setmaxnreg kernels)."""
    if arch not in ("sm_90", "sm_90a"):
        raise bad_argument("arch", arch, "flashsim interprets sm_90 SASS: expected 'sm_90' or 'sm_90a'")
    return tuple(f"-arch={arch}" if o.startswith("-arch=") else o for o in CUPY_OPTIONS)


def _nvrtc_options(source, options, lineinfo: bool, arch: str = "sm_90") -> tuple[list[str], list[str]]:
    """(every NVRTC option, the line-table options) of a compilation of ``source`` with ``options``, checked:
    the user's options, the CUDA headers' folder (cupy puts the toolkit's there), cupy's own, line tables."""
    if not isinstance(source, str):
        raise bad_argument("code", type(source).__name__, "expected the CUDA source as a str")
    if isinstance(options, str):
        raise bad_argument("options", options, "expected a sequence of option strings, not one string")
    for o in options:
        if not isinstance(o, str):
            raise bad_argument("options", tuple(options), f"every option must be a str, got {o!r}")
    lines = [LINEINFO] if lineinfo and LINEINFO not in options and "--generate-line-info" not in options else []
    paths = include_paths()
    return [*options, *(f"--include-path={p}" for p in paths), *_cupy_options(arch), *lines], lines


def nvrtc_name(name: str) -> str:
    """The program name NVRTC is given for the source file ``name``: the name itself where ptxas and the line
    table carry it intact, else with each byte past printable ASCII, each backslash and each quote written
    %XX (ptxas rejects a quote in a file name; nvdisasm garbles the others). The line info then names the
    encoded file, which the loaders map back to ``name``."""
    if all(32 <= ord(ch) < 127 and ch not in '\\"' for ch in name):
        return name
    return "".join(ch if 32 <= ord(ch) < 127 and ch not in '\\"%' else
                   "".join(f"%{b:02X}" for b in ch.encode("utf-8", errors="surrogateescape")) for ch in name)


def _nvrtc_run(source: str, name: str, opts: Sequence[str], name_expressions: Sequence[str],
               output: str) -> tuple[bytes, str, dict[str, str]]:
    """One NVRTC compilation: (its output, "CUBIN" or "PTX", as bytes; the log; {name expression: lowered
    name}). Raises CompileError with the log when NVRTC rejects the source."""
    given, name = name, nvrtc_name(name)
    if name != given and os.path.dirname(given):
        opts = [*opts, f"-I{os.path.dirname(given)}"]  # its own folder's headers, which NVRTC finds by the name
    lib = _nvrtc()
    if nvrtc_version() != "13.0":
        raise ToolchainError(f"NVRTC {nvrtc_version()} found; flashsim compiles with 13.0 ({NVRTC_PIN}), the "
                             "NVRTC of the H100 machine, so that the interpreter runs the GPU's SASS")
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
            if given != name:
                log = log.replace(name, given)
            if rc != 0:
                raise CompileError(given, log or lib.nvrtcGetErrorString(rc).decode())
            out = _get(lib, prog, f"nvrtcGet{output}Size", f"nvrtcGet{output}")
            lowered = {}
            for expr in name_expressions:
                low = ctypes.c_char_p()
                _check(lib, lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(low)), "nvrtcGetLoweredName")
                lowered[expr] = low.value.decode()
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return out, log, lowered


def compile_cuda(source: str, *, name: str = "kernel.cu", options: Sequence[str] = (),
                 name_expressions: Sequence[str] = (), lineinfo: bool = True,
                 key_options: Sequence[str] | None = None, arch: str = "sm_90") -> tuple[bytes, str, dict[str, str]]:
    """Compile CUDA C++ ``source`` for sm_90 with NVRTC as cupy does (plus ``-lineinfo`` if asked).

    Returns (cubin bytes, NVRTC log, {name expression: lowered (mangled) name}). Raises CompileError with
    the log when NVRTC rejects the source. Results are cached on disk (:func:`cache_dir`), keyed by the
    pinned NVRTC, the options, the name expressions and the source; ``key_options`` replaces the options
    in the key (a caller whose include path is a machine-specific absolute path keys by a relative one,
    so a cache filled on one machine serves another). ``arch="sm_90a"`` builds for the architecture-specific
    target (wgmma, setmaxnreg); the cubin is still sm_90 SASS, which the interpreter runs.
    """
    opts, lines = _nvrtc_options(source, options, lineinfo, arch)
    # the key leaves out the headers' folder (machine-specific; HEADERS_PIN stands for its contents)
    key = _cache_key(source, name, [*(options if key_options is None else key_options), *_cupy_options(arch),
                                    *lines], tuple(name_expressions))
    hit = _cache_read(key)
    if hit is not None:
        return hit
    cubin, log, lowered = _nvrtc_run(source, name, opts, name_expressions, "CUBIN")
    if not cubin:
        raise ToolchainError(f"NVRTC produced no cubin for {name} (options {opts}): is the target a real sm_XY?")
    _cache_write(key, cubin, log, lowered)
    return cubin, log, lowered


def _program(name: str) -> str:
    """NVIDIA's ``name`` from its wheel (``nvidia-cuda-<name>``), else the one on PATH."""
    cand = _nvidia_file(f"bin/{name}")
    if cand is not None:
        return str(cand)
    found = shutil.which(name)
    if found is None:
        raise ToolchainError(f"{name} not found: pip install nvidia-cuda-{name}")
    return found


def nvdisasm_path() -> str:
    """The nvdisasm binary of the ``nvidia-cuda-nvdisasm`` wheel (else one on PATH)."""
    return _program("nvdisasm")


#: what keys the disk cache of disassemblies: the nvdisasm build (its output format) and the output mode
_NVDISASM_KEY = "nvdisasm -json -g"


def _disasm_cache_path(digest: str) -> Path | None:
    d = cache_dir()
    if d is None:
        return None
    tag = hashlib.sha256(f"{_NVDISASM_KEY}\0{_dist_version('nvidia-cuda-nvdisasm')}\0{nvdisasm_path()}".encode())
    return d / f"{digest}.{tag.hexdigest()[:16]}.nvdisasm.json"


@functools.lru_cache(maxsize=64)
def _disassemble_cached(digest: str, cubin: bytes) -> tuple:
    """nvdisasm's JSON of a cubin, kept on disk beside the cubin cache (a Triton kernel's cubin comes from
    Triton's own cache on the next run; its disassembly then does not cost nvdisasm's second again)."""
    path = _disasm_cache_path(digest)
    if path is not None:
        try:
            return tuple(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    doc = _run_nvdisasm(digest, cubin)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump(list(doc), fh)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only or full disk only costs the disassembly again
    return doc


def _run_nvdisasm(digest: str, cubin: bytes) -> tuple:
    with tempfile.TemporaryDirectory(prefix="flashsim-nvdisasm-") as tmp:
        path = os.path.join(tmp, "module.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        proc = subprocess.run([nvdisasm_path(), "-json", "-g", path], capture_output=True, timeout=600)
    if proc.returncode != 0:
        raise ToolchainError(f"nvdisasm failed on the cubin (sha256 {digest[:16]}): "
                             f"{proc.stderr.decode(errors='replace').strip()}")
    doc = nvdisasm_json(proc.stdout)
    return tuple(doc)


_ESCAPE = re.compile(rb"\\([0-7]{3})|\\")


def nvdisasm_json(raw: bytes):
    """nvdisasm's ``-json`` output as Python objects. Its strings are not always JSON: a source file name's
    bytes past ASCII come as C octal escapes (``\\303\\257`` for 'ï') and a backslash in a name comes bare,
    so where the text does not parse, octal escapes become their bytes and a bare backslash a literal one,
    and the bytes are read as UTF-8 (undecodable ones kept as the file system's surrogates)."""
    try:
        return json.loads(raw.decode("utf-8", errors="surrogateescape"))
    except json.JSONDecodeError:
        pass
    fixed = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]) if m.group(1) else b"\\\\", raw)
    try:
        return json.loads(fixed.decode("utf-8", errors="surrogateescape"))
    except json.JSONDecodeError as exc:
        raise ToolchainError(f"nvdisasm's JSON output is unreadable: {exc}") from None


def disassemble(cubin: bytes) -> list:
    """nvdisasm's JSON for ``cubin``: [header, [functions with 'sass-instructions'], {'files': ...}]."""
    digest = hashlib.sha256(cubin).hexdigest()
    _DISASSEMBLED.setdefault(digest, bytes(cubin))
    return list(_disassemble_cached(digest, bytes(cubin)))


#: cubins disassembled in this process, by sha256 (what :func:`inline_sites` reads again on demand)
_DISASSEMBLED: dict[str, bytes] = {}
_INLINE_RE = re.compile(r'//## File "([^"]+)", line (\d+)((?: inlined at "[^"]+", line \d+)*)')
_AT_RE = re.compile(r'inlined at "([^"]+)", line (\d+)')


@functools.lru_cache(maxsize=16)
def inline_sites(cubin_sha256: str) -> dict[str, dict[int, tuple[tuple[str, int], ...]]]:
    """Where inlined code was called from: {kernel: {pc: ((file, line) of the call site, outermost last),
    ...}} for the instructions of inlined functions, from ``nvdisasm -gi`` (its JSON has no inlining
    records). Empty for a cubin this process has not disassembled, or without line tables."""
    cubin = _DISASSEMBLED.get(cubin_sha256)
    if cubin is None:
        return {}
    with tempfile.TemporaryDirectory(prefix="flashsim-nvdisasm-") as tmp:
        path = os.path.join(tmp, "module.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        proc = subprocess.run([nvdisasm_path(), "-gi", "-c", path], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {}
    out: dict[str, dict[int, tuple]] = {}
    fn = None
    chain: tuple = ()
    for line in proc.stdout.splitlines():
        t = line.strip()
        if t.startswith(".text.") and t.endswith(":"):
            fn = t[len(".text."):-1]
            out[fn] = {}
            chain = ()
            continue
        m = _INLINE_RE.search(t)
        if m:
            if m.group(3):
                chain = tuple((f, int(n)) for f, n in _AT_RE.findall(m.group(3)))
            elif not chain or chain[-1] != (m.group(1), int(m.group(2))):
                chain = ()
            continue
        if fn is not None and t.startswith("/*") and "*/" in t and chain:
            try:
                out[fn][int(t[2:t.index("*/")], 16)] = chain
            except ValueError:
                pass
    return out


# --------------------------------------------------------------------------------------------------
# The same compilation as PTX, and PTX linked to a cubin (nvJitLink): the instrumented builds of
# flashsim.sass.ptxlog. compile_cuda above is untouched by these.
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CudaBuild:
    """How :func:`compile_cuda` built a cubin: enough to compile the same source again (as PTX)."""

    source: str
    name: str
    options: tuple[str, ...]
    name_expressions: tuple[str, ...]
    lineinfo: bool



def compile_cuda_ptx(source: str, *, name: str = "kernel.cu", options: Sequence[str] = (),
                     name_expressions: Sequence[str] = (), lineinfo: bool = True) -> tuple[str, str, dict[str, str]]:
    """The PTX of exactly the compilation :func:`compile_cuda` makes of ``source`` (same options, so the
    same front end and optimiser run; ``-lineinfo`` adds ``.loc`` directives and the ``.file`` table).

    Returns (PTX text, NVRTC log, {name expression: lowered name}), cached as cubins are (:func:`cache_dir`)."""
    opts, lines = _nvrtc_options(source, options, lineinfo)
    # the key leaves out the headers' folder (machine-specific), as compile_cuda's does
    key = _cache_key(source, name, ["PTX", *options, *_cupy_options("sm_90"), *lines], tuple(name_expressions))
    hit = _cache_read(key)
    if hit is not None:
        return hit[0].decode(), hit[1], hit[2]
    ptx, log, lowered = _nvrtc_run(source, name, opts, name_expressions, "PTX")
    ptx = ptx.rstrip(b"\0")
    _cache_write(key, ptx, log, lowered)
    return ptx.decode(), log, lowered


#: nvJitLink from the same CUDA release as the NVRTC pin (its ptxas is the one inside that NVRTC).
NVJITLINK_PIN = "nvidia-nvjitlink==13.0.88"
_NVJITLINK_INPUT_PTX = 2  # nvJitLinkInputType: NVJITLINK_INPUT_PTX
_NVJITLINK_ERRORS = ("success", "unrecognized option", "missing -arch", "invalid input", "PTX compile error",
                     "NVVM compile error", "internal error", "thread pool error", "unrecognized input",
                     "finalizer error", "null input", "incompatible options", "incorrect input type",
                     "arch mismatch", "outdated library", "missing fatbin", "unrecognized -arch",
                     "unsupported -arch", "requires -lto")


class PtxLinkError(CompileError):
    """nvJitLink (its ptxas) rejected PTX; ``.log`` holds its log, ``.name`` the PTX's name."""

    def __init__(self, name: str, log: str):
        self.name, self.log = name, log
        FlashsimError.__init__(self, f"nvJitLink failed to assemble {name}:\n{log.rstrip()}")


class _JitLink:
    """libnvJitLink's entry points (the versioned ``__nvJitLinkX_13_0`` symbols its header maps to)."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        for fn in ("Create", "Destroy", "AddData", "Complete", "GetLinkedCubinSize", "GetLinkedCubin",
                   "GetErrorLogSize", "GetErrorLog", "GetInfoLogSize", "GetInfoLog"):
            f = getattr(lib, f"__nvJitLink{fn}_13_0", None) or getattr(lib, f"nvJitLink{fn}")
            setattr(self, fn, f)


@functools.lru_cache(maxsize=1)
def _nvjitlink() -> _JitLink:
    path = _nvidia_file("lib/libnvJitLink.so.13")
    if path is None:
        raise ToolchainError(f"nvJitLink 13 is not installed: pip install {NVJITLINK_PIN} (or set "
                             "FLASHSIM_NVJITLINK to a libnvJitLink.so)")
    try:
        return _JitLink(ctypes.CDLL(str(path)))
    except (OSError, AttributeError) as exc:
        raise ToolchainError(f"cannot use {path} as nvJitLink 13: {exc}") from None


def nvjitlink_version() -> str:
    """nvJitLink's version as 'major.minor'."""
    major, minor = ctypes.c_uint(), ctypes.c_uint()
    _nvjitlink().lib.nvJitLinkVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def link_ptx(ptx: str, *, name: str = "module.ptx", arch: str = "sm_90", lineinfo: bool = True,
             options: Sequence[str] = ()) -> bytes:
    """Assemble and link ``ptx`` into a cubin for ``arch`` with nvJitLink (ptxas inside; no GPU needed).
    A PTX error raises PtxLinkError (a CompileError) with nvJitLink's log.

    nvJitLink runs ptxas in its separate-compilation mode and then links, so the SASS is not the SASS
    NVRTC makes of the same PTX in one step (scheduling and shared-variable placement differ): a linked
    build is a build of its own, to be compared with itself on GPU and interpreter."""
    if not isinstance(ptx, str):
        raise bad_argument("ptx", type(ptx).__name__, "expected the PTX text as a str")
    jl = _nvjitlink()
    opts = [f"-arch={arch}", *(["-lineinfo"] if lineinfo else []), *options]
    handle = ctypes.c_void_p()
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])

    def log_of(size_fn, get_fn) -> str:
        n = ctypes.c_size_t()
        if size_fn(handle, ctypes.byref(n)) != 0 or n.value == 0:
            return ""
        buf = ctypes.create_string_buffer(n.value)
        get_fn(handle, buf)
        return buf.raw[: n.value].rstrip(b"\0").decode(errors="replace")

    def check(rc: int, what: str) -> None:
        if rc != 0:
            why = _NVJITLINK_ERRORS[rc] if 0 <= rc < len(_NVJITLINK_ERRORS) else f"error {rc}"
            log = log_of(jl.GetErrorLogSize, jl.GetErrorLog)
            if rc in (3, 4):  # invalid input / PTX compile error: the PTX's fault
                raise PtxLinkError(name, log or why)
            raise ToolchainError(f"nvJitLink {what} failed ({why}){': ' + log if log else ''}")

    with _LOCK:
        check(jl.Create(ctypes.byref(handle), len(opts), arr), "create")
        try:
            data = ptx.encode() + b"\0"
            check(jl.AddData(handle, _NVJITLINK_INPUT_PTX, data, ctypes.c_size_t(len(data)), name.encode()),
                  "adding the PTX")
            check(jl.Complete(handle), "linking")
            n = ctypes.c_size_t()
            check(jl.GetLinkedCubinSize(handle, ctypes.byref(n)), "GetLinkedCubinSize")
            buf = ctypes.create_string_buffer(n.value)
            check(jl.GetLinkedCubin(handle, buf), "GetLinkedCubin")
            return buf.raw[: n.value]
        finally:
            jl.Destroy(ctypes.byref(handle))


# --------------------------------------------------------------------------------------------------
# PTX assembled the way the driver JIT-compiles it (cuModuleLoadData of PTX): whole-program ptxas of the CUDA
# release the driver belongs to (13.0 on the H100 machine), from the nvidia-cuda-nvcc wheel.
# --------------------------------------------------------------------------------------------------

#: The ptxas the project assembles PTX with: CUDA 13.0's, the release of the H100 machine's driver (580.159).
PTXAS_PIN = "nvidia-cuda-nvcc==13.0.88"


def ptxas_path() -> str:
    """The ptxas of the ``nvidia-cuda-nvcc`` wheel (``FLASHSIM_PTXAS`` names another)."""
    cand = _nvidia_file("bin/ptxas")
    if cand is None:
        raise ToolchainError(f"ptxas is not installed: pip install {PTXAS_PIN} (or set FLASHSIM_PTXAS)")
    return str(cand)


def cuobjdump_path() -> str:
    """The cuobjdump of the ``nvidia-cuda-cuobjdump`` wheel (``FLASHSIM_CUOBJDUMP`` names another), else PATH's."""
    return _program("cuobjdump")


@functools.lru_cache(maxsize=8)
def ptxas_version(path: str | None = None) -> str:
    """'release X.Y, VX.Y.Z' of a ptxas (default :func:`ptxas_path`)."""
    proc = subprocess.run([path or ptxas_path(), "--version"], capture_output=True, text=True, timeout=60)
    m = re.search(r"release [\d.]+, V[\d.]+", proc.stdout)
    return m.group(0) if m else proc.stdout.strip().splitlines()[-1]


def assemble_ptx(ptx: str | bytes, *, name: str = "module.ptx", arch: str = "sm_90", lineinfo: bool = True,
                 options: Sequence[str] = (), ptxas: str | None = None) -> bytes:
    """``ptx`` assembled for ``arch`` by whole-program ptxas (default :func:`ptxas_path`, CUDA 13.0: what the
    driver's JIT does with the PTX of a module it loads). A PTX error raises CompileError with ptxas's log."""
    if isinstance(ptx, str):
        ptx = ptx.encode()
    if not isinstance(ptx, (bytes, bytearray)):
        raise bad_argument("ptx", type(ptx).__name__, "expected the PTX text")
    if arch not in ("sm_90", "sm_90a"):
        raise bad_argument("arch", arch, "flashsim interprets sm_90 SASS: expected 'sm_90' or 'sm_90a'")
    exe = ptxas or ptxas_path()
    with tempfile.TemporaryDirectory(prefix="flashsim-ptxas-") as tmp:
        src, out = os.path.join(tmp, "module.ptx"), os.path.join(tmp, "module.cubin")
        with open(src, "wb") as fh:
            fh.write(bytes(ptx).rstrip(b"\0"))
        cmd = [exe, f"-arch={arch}", *(["-lineinfo"] if lineinfo else []), *options, src, "-o", out]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise CompileError(name, (proc.stderr or proc.stdout).replace(src, name))
        with open(out, "rb") as fh:
            return fh.read()
