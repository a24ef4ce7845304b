"""What a CUDA binary holds, and the sm_90 cubin flashsim runs from it: a cubin (whatever ptxas wrote it, also
short of its trailing NUL byte, as cupy hands NVRTC's output to the driver), a fatbin, a host object or shared
library with embedded fatbins (a torch extension's ``.so``, an executable), or PTX text.

As the driver chooses when it loads a module for an sm_90 device: the sm_90 (or sm_90a) cubin if there is
one; else PTX whose target an sm_90 device runs (sm_XY up to sm_90), JIT-compiled by ptxas 13.0, the CUDA
release of the H100 machine's driver (:func:`flashsim.sass.toolchain.assemble_ptx`; the record of which
compiler built it is :attr:`Loaded.compiled_by`). Fatbins and host binaries are read with NVIDIA's
cuobjdump (the ``nvidia-cuda-cuobjdump`` wheel), which also undoes fatbin compression. A binary that holds
no sm_90 code is refused with what it does hold.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from pathlib import Path

from flashsim.errors import bad_argument
from flashsim.sass.cubin import EM_CUDA, FATBIN_MAGIC, CubinError, elf_sm

__all__ = ["Loaded", "Member", "contents", "load", "elf_extent"]



@dataclasses.dataclass(frozen=True)
class Member:
    """One code object inside a binary: an ELF (SASS) for sm_XY, or PTX for compute_XY."""

    name: str
    kind: str  # 'elf' or 'ptx'
    arch: int  # the XY of sm_XY
    data: bytes = dataclasses.field(repr=False, default=b"")


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The cubin chosen from a binary, what it came from and how it was made."""

    cubin: bytes = dataclasses.field(repr=False)
    source: str  # 'cubin', 'fatbin', 'host binary', 'ptx'
    member: str  # the member's name inside the binary ('' for a bare cubin or PTX)
    compiled_by: str  # '' for SASS taken as is; the ptxas that JIT-compiled PTX
    note: str = ""


def elf_extent(data: bytes) -> int:
    """The bytes an ELF64 image spans: the end of its section header table or of its furthest section or
    segment, whichever is further."""
    import struct

    if len(data) < 64:
        return len(data)
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 32)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", data, 54)
    end = max(64, e_shoff + e_shentsize * e_shnum, e_phoff + e_phentsize * e_phnum)
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        if off + 64 > len(data):
            break
        sh_type = struct.unpack_from("<I", data, off + 4)[0]
        sh_offset, sh_size = struct.unpack_from("<QQ", data, off + 24)
        if sh_type != 8:  # SHT_NOBITS occupies no bytes of the file
            end = max(end, sh_offset + sh_size)
    return end


def _is_cuda_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF" and len(data) >= 20 and int.from_bytes(data[18:20], "little") == EM_CUDA


def _ptx_target(text: bytes) -> tuple[int, bool] | None:
    m = re.search(rb"^\s*\.target\s+sm_(\d+)(a|f)?", text, re.M)
    return (int(m.group(1)), bool(m.group(2))) if m else None


def _is_ptx(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head.startswith((b"//", b".version", b".target")) and b".version" in data[:65536]


def _cuobjdump(path: str, *args: str, cwd: str | None = None) -> str:
    from flashsim.sass.toolchain import ToolchainError, cuobjdump_path

    proc = subprocess.run([cuobjdump_path(), *args, path], capture_output=True, text=True, timeout=600, cwd=cwd)
    if proc.returncode != 0 and "No ELF file found" not in proc.stderr and "No PTX file found" not in proc.stderr:
        if "does not contain device code" in proc.stderr or "not a valid" in proc.stderr.lower():
            return ""
        raise ToolchainError(f"cuobjdump {' '.join(args)} failed on {path}: {proc.stderr.strip() or proc.stdout}")
    return proc.stdout


_LIST_RE = re.compile(r"^(ELF|PTX) file\s+\d+:\s+(\S+)\s*$", re.M)
_ARCH_RE = re.compile(r"\.sm_(\d+)a?\.(?:cubin|ptx)$")


def contents(path: str | os.PathLike) -> list[Member]:
    """Every ELF and PTX member of a fatbin or host binary (cuobjdump -lelf -lptx), with their bytes."""
    p = str(path)
    listing = _cuobjdump(p, "-lelf", "-lptx")
    members = [(k, n) for k, n in _LIST_RE.findall(listing)]
    if not members:
        return []
    out = []
    with tempfile.TemporaryDirectory(prefix="flashsim-cuobjdump-") as tmp:
        if any(k == "ELF" for k, _ in members):
            _cuobjdump(os.path.abspath(p), "-xelf", "all", cwd=tmp)
        if any(k == "PTX" for k, _ in members):
            _cuobjdump(os.path.abspath(p), "-xptx", "all", cwd=tmp)
        for kind, name in members:
            f = Path(tmp) / name
            data = f.read_bytes() if f.is_file() else b""
            m = _ARCH_RE.search(name)
            arch = int(m.group(1)) if m else -1
            if kind == "ELF" and _is_cuda_elf(data):
                try:
                    arch = elf_sm(int(data[8]), int.from_bytes(data[48:52], "little"))
                except CubinError:
                    pass
            out.append(Member(name, kind.lower(), arch, data))
    return out


def _describe(members: list[Member]) -> str:
    if not members:
        return "no device code"
    return ", ".join(f"{m.kind.upper()} for {'sm' if m.kind == 'elf' else 'compute'}_{m.arch} ({m.name})" for m in members)


def _kernel_names(data: bytes) -> list[str]:
    """The kernels of an sm_90 cubin ([] for one flashsim cannot read: another SM, no kernels)."""
    from flashsim.sass.cubin import Cubin

    try:
        return sorted(Cubin(data).kernels)
    except CubinError:
        return []


def _from_ptx(text: bytes, name: str) -> Loaded:
    from flashsim.sass.toolchain import assemble_ptx, ptxas_path, ptxas_version

    tgt = _ptx_target(text)
    if tgt is None:
        raise CubinError(f"{name}: PTX without a .target directive")
    arch, suffix = tgt
    if arch > 90 or (suffix and arch != 90):
        raise CubinError(f"{name}: PTX for sm_{arch}{'a' if suffix else ''}, which an sm_90 device cannot run "
                         "(flashsim interprets sm_90 SASS)")
    target = "sm_90a" if suffix else "sm_90"
    cubin = assemble_ptx(text, name=name, arch=target, lineinfo=b".loc" in text)
    return Loaded(cubin, "ptx", "", f"ptxas {ptxas_version()} ({Path(ptxas_path()).name}, -arch={target})")


def load(data: bytes, *, name: str = "module", path: str | None = None, member: str | None = None) -> Loaded:
    """The sm_90 cubin of a binary given as bytes (``path``: its file, for cuobjdump), as the driver would pick
    it; ``member`` picks one member by name where several hold kernels."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise bad_argument("data", type(data).__name__, "expected the binary's bytes")
    data = bytes(data)
    if _is_cuda_elf(data):
        note = ""
        ext = elf_extent(data)
        if len(data) < ext:
            if ext - len(data) > 16:
                raise CubinError(f"{name}: a truncated cubin ({len(data)} of its {ext} bytes)")
            note = f"padded with {ext - len(data)} zero byte(s) to its ELF extent (NVRTC's trailing NUL)"
            data = data + b"\0" * (ext - len(data))
        return Loaded(data, "cubin", "", "", note)
    if _is_ptx(data):
        if member is not None:
            raise bad_argument("member", member, "a PTX file has no members")
        return _from_ptx(data.rstrip(b"\0"), name)
    is_fat = data[:4] in FATBIN_MAGIC
    is_host = data[:4] == b"\x7fELF"
    if not (is_fat or is_host):
        raise CubinError(f"{name}: not a CUDA binary (first bytes {data[:8]!r}); expected a cubin, a fatbin, a host "
                         "object or library with device code, or PTX")
    kind = "fatbin" if is_fat else "host binary"
    members = _members(data, name, kind, path)
    if member is not None:
        chosen = [m for m in members if m.name == member]
        if not chosen:
            raise bad_argument("member", member, f"not in {name} (it holds {_describe(members)})")
        m = chosen[0]
        if m.kind == "elf" and m.arch != 90:
            raise CubinError(f"{name}: member {m.name} is SASS for sm_{m.arch}, not sm_90")
        return _take(m, name, kind)
    with_kernels = [m for m in members if m.kind == "elf" and m.arch == 90 and _kernel_names(m.data)]
    if len(with_kernels) > 1:
        listing = "; ".join(f"{m.name}: {', '.join(_kernel_names(m.data))}" for m in with_kernels)
        raise bad_argument("member", None, f"{name} holds {len(with_kernels)} sm_90 cubins with kernels ({listing}): "
                                           "pick one with member=")
    if with_kernels:
        return _take(with_kernels[0], name, kind)
    # no sm_90 SASS: the PTX of the newest target an sm_90 device runs, as the driver picks it
    ptx = [m for m in members if m.kind == "ptx" and m.arch <= 90]
    top = [m for m in ptx if m.arch == max(p.arch for p in ptx)] if ptx else []
    if len(top) > 1:
        raise bad_argument("member", None, f"{name} holds {len(top)} PTX members for compute_{top[0].arch} "
                                           f"({', '.join(m.name for m in top)}): pick one with member=")
    if top:
        return _take(top[0], name, kind)
    raise CubinError(f"{name}: no code an sm_90 device runs: it holds {_describe(members)}")


def _members(data: bytes, name: str, kind: str, path: str | None) -> list[Member]:
    """The members of a fatbin or host binary (written to a file for cuobjdump when it has none)."""
    from flashsim.sass.toolchain import ToolchainError

    with tempfile.TemporaryDirectory(prefix="flashsim-binary-") as tmp:
        f = path
        if f is None:
            f = os.path.join(tmp, "module.bin")
            with open(f, "wb") as fh:
                fh.write(data)
        try:
            return contents(f)
        except ToolchainError as exc:
            raise CubinError(f"{name}: not a readable {kind}: {str(exc).replace(f, name)}") from None


def _take(m: Member, name: str, kind: str) -> Loaded:
    if m.kind == "ptx":
        return dataclasses.replace(_from_ptx(m.data, f"{name}:{m.name}"), source=kind, member=m.name)
    return Loaded(m.data, kind, m.name, "")
