"""The CUDA sources of flashsim's kernels (gpu/kernels/*.cu, *.cuh) and their sm_90 build for the interpreter.

The sources ship as package data of ``flashsim.gpu`` (pyproject: package-dir ``flashsim.gpu = gpu``), but
this module finds their folder without importing ``flashsim.gpu`` (``importlib.util.find_spec`` only reads
where the package lies): the interpreter builds them on a machine without cupy or a GPU. A source's
identity is the SHA-256 of its bytes and of every local header it includes; builds are cached by that hash
and their options. ``interpreted_module`` compiles a source with NVRTC from its wheel (the NVRTC cupy uses
on the GPU machine, with cupy's options) into the cubin that :mod:`flashsim.cuda` runs and that a GPU can
load as is (:func:`flashsim.device.get_cubin_kernel`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import threading
from pathlib import Path
from typing import Any, Iterable, Sequence

from flashsim.errors import bad_argument

__all__ = ["BASE_OPTIONS", "KERNELS_DIR", "check_options", "get_interpreted_kernel", "interpreted_module",
           "kernel_path", "kernel_source", "local_includes", "source_hash"]


def _kernels_dir() -> Path:
    """gpu/kernels of the repository (editable install) or flashsim/gpu/kernels of a wheel."""
    spec = importlib.util.find_spec("flashsim.gpu")  # does not run flashsim/gpu/__init__.py
    if spec is None or not spec.submodule_search_locations:
        return Path(__file__).resolve().parents[2] / "gpu" / "kernels"
    return Path(list(spec.submodule_search_locations)[0]).resolve() / "kernels"


#: The .cu/.cuh sources, shipped as package data (pyproject: "flashsim.gpu" = ["kernels/*.cu", "kernels/*.cuh"]).
KERNELS_DIR = _kernels_dir()

#: Options every compilation gets (NVRTC and nvcc alike).
BASE_OPTIONS = ("-std=c++17",)

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.(?:cu|cuh)$")
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)
# Options the builds set themselves (the standard, the target); passing them again would fight those.
_RESERVED_OPTION_RE = re.compile(r"^(-std|--std|-arch|--gpu-architecture|-gencode|--generate-code)")


def kernel_path(name: str) -> Path:
    """Path of ``gpu/kernels/<name>``; ``name`` is a bare file name such as ``'probe_mma.cu'``."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise bad_argument("name", name, "expected a bare .cu/.cuh file name in gpu/kernels, e.g. 'probe_mma.cu'")
    path = KERNELS_DIR / name
    if not path.is_file():
        have = sorted(p.name for p in KERNELS_DIR.glob("*.cu"))
        raise bad_argument("name", name, f"no such file in {KERNELS_DIR} (kernels there: {', '.join(have)})")
    return path


def kernel_source(name: str) -> str:
    """The text of ``gpu/kernels/<name>``, as is (includes are not expanded)."""
    return kernel_path(name).read_text(encoding="utf-8")


def local_includes(path: str | Path) -> list[Path]:
    """Every ``#include "..."`` header that ``path`` uses, recursively, in first-use order.

    A header is looked up beside the including file, then in KERNELS_DIR (the include path that the
    compilers get). A header that is in neither place is skipped here; the compiler will report it.
    """
    seen: dict[Path, None] = {}

    def visit(p: Path) -> None:
        for inc in _INCLUDE_RE.findall(p.read_text(encoding="utf-8")):
            for base in (p.parent, KERNELS_DIR):
                cand = (base / inc).resolve()
                if cand.is_file():
                    if cand not in seen:
                        seen[cand] = None
                        visit(cand)
                    break

    visit(Path(path).resolve())
    return list(seen)


def source_hash(name: str) -> str:
    """SHA-256 (hex) of ``gpu/kernels/<name>`` plus every local header it includes (names and bytes)."""
    path = kernel_path(name)
    h = hashlib.sha256()
    for p in [path.resolve(), *local_includes(path)]:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def check_options(options: Iterable[str]) -> tuple[str, ...]:
    """``options`` as a tuple of strings, none of which sets what the builds set themselves."""
    if isinstance(options, str):
        raise bad_argument("options", options, "expected a sequence of option strings, not one string")
    opts = tuple(options)
    for o in opts:
        if not isinstance(o, str):
            raise bad_argument("options", opts, f"every option must be a str, got {o!r}")
        if _RESERVED_OPTION_RE.match(o):
            raise bad_argument("options", opts, f"{o!r} is set by gpu.runtime and flashsim.kernels.sources "
                                                "themselves (-std, -arch): use arch=")
    return opts


_INTERP: dict[tuple[str, tuple[str, ...]], Any] = {}
_INTERP_LOCK = threading.Lock()


def interpreted_module(name: str, *, options: Sequence[str] = (), cubin: bytes | None = None,
                       arch: str = "sm_90") -> Any:
    """``gpu/kernels/<name>`` compiled for sm_90 (``arch="sm_90a"``: the architecture-specific target, for
    wgmma and setmaxnreg) by NVRTC (the wheel, no GPU needed) as a ``flashsim.cuda.RawModule``: the cubin the
    SASS interpreter runs, and that a GPU can load as is. ``cubin``: use these bytes (a recorded build)
    instead of compiling, from now on for this source."""
    import flashsim.cuda as fc

    if arch not in ("sm_90", "sm_90a"):
        raise bad_argument("arch", arch, "expected 'sm_90' or 'sm_90a'")
    path = kernel_path(name)
    opts = check_options(options)
    digest = source_hash(name)
    key = (digest, opts, arch)
    with _INTERP_LOCK:
        if cubin is not None:
            mod = _INTERP[key] = fc.RawModule(cubin=cubin)
            return mod
        mod = _INTERP.get(key)
        if mod is None:
            from flashsim.sass.toolchain import compile_cuda

            # the #line name and the cache key use repository-relative paths: the same cubin (and cache
            # entry) on every machine up to the include path NVRTC records in the line tables
            rel = f"gpu/kernels/{path.name}"
            code = f'#line 1 "{rel}"\n' + path.read_text(encoding="utf-8")
            common = (*BASE_OPTIONS, f"-DFLASHSIM_SOURCE_HASH=0x{digest[:16]}", *opts)
            cubin, _, _ = compile_cuda(code, name=path.name, options=(*common, f"--include-path={KERNELS_DIR}"),
                                       key_options=(*common, "--include-path=gpu/kernels"), arch=arch)
            mod = _INTERP[key] = fc.RawModule(cubin=cubin)
        return mod


def get_interpreted_kernel(name: str, function: str, *, options: Sequence[str] = (), arch: str = "sm_90") -> Any:
    """The kernel ``function`` of ``gpu/kernels/<name>`` in flashsim's SASS interpreter."""
    return interpreted_module(name, options=options, arch=arch).get_function(function)
