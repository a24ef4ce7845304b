"""Reading an sm_90 cubin (a CUDA ELF) with pyelftools: kernels, parameters, constant banks, shared and
local memory sizes, module globals and their relocations.

What is read, and from where (section and attribute names as nvdisasm prints them)::

    ELF header                      e_machine EM_CUDA; two layouts of e_flags, told apart by EI_ABIVERSION:
                                    7 (ptxas 12.x, EI_OSABI 0x33): the SM in bits 0..7, the virtual SM in
                                    bits 16..23, 0x800 the architecture-specific target (sm_90a);
                                    8 (ptxas 13.x, EI_OSABI 0x41): the SM in bits 8..15 (0x5a = sm_90)
    .text.<kernel>                  the code (disassembled by nvdisasm)
    .nv.info.<kernel>               EIATTR_KPARAM_INFO (ordinal, offset, size of each parameter),
                                    EIATTR_PARAM_CBANK (where the parameters sit in constant bank 0),
                                    EIATTR_CBANK_PARAM_SIZE, EIATTR_MAX_THREADS, EIATTR_REQNTID, ...
    .nv.info                        per-kernel EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE
    .nv.shared.<kernel>             static shared memory (NOBITS; its size)
    .nv.constant0.<kernel>          constant bank 0 as the kernel sees it (parameters from 0x210)
    .nv.constantN                   other constant banks (__constant__ data, compiler constants)
    .nv.global / .nv.global.init    module globals (__device__ variables), zero or initialised
    .rela.*                         relocations of global addresses into constant banks and code

Every .nv.info record is ``u8 format, u8 attribute`` then, by format: 0x01 nothing, 0x02 one byte,
0x03 a u16, 0x04 a u16 size and that many bytes (records are 4-byte aligned).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["Cubin", "CubinError", "KernelInfo", "Param", "elf_sm"]

EM_CUDA = 190
FATBIN_MAGIC = (b"\x50\xed\x55\xba", b"\xba\x55\xed\x50")  # a fatbin's first word, either byte order
ELFOSABI_CUDA = 0x41
SUPPORTED_SM = 90

# .nv.info attribute codes (the names nvdisasm prints beside them)
EIATTR = {
    0x04: "EIATTR_CTAIDZ_USED", 0x05: "EIATTR_MAX_THREADS", 0x0A: "EIATTR_PARAM_CBANK",
    0x10: "EIATTR_REQNTID", 0x11: "EIATTR_FRAME_SIZE", 0x12: "EIATTR_MIN_STACK_SIZE",
    0x17: "EIATTR_KPARAM_INFO", 0x19: "EIATTR_CBANK_PARAM_SIZE", 0x1B: "EIATTR_MAXREG_COUNT",
    0x1C: "EIATTR_EXIT_INSTR_OFFSETS", 0x1E: "EIATTR_CRS_STACK_SIZE", 0x23: "EIATTR_MAX_STACK_SIZE",
    0x28: "EIATTR_COOP_GROUP_INSTR_OFFSETS", 0x29: "EIATTR_COOP_GROUP_MASK_REGIDS",
    0x2F: "EIATTR_REGCOUNT", 0x37: "EIATTR_CUDA_API_VERSION", 0x4C: "EIATTR_NUM_BARRIERS",
    0x50: "EIATTR_SPARSE_MMA_MASK",
}
_CODE = {v: k for k, v in EIATTR.items()}


class CubinError(FlashsimError):
    """The bytes are not an sm_90 cubin flashsim can run (another architecture, PTX, a fatbin, corrupt)."""


def elf_sm(abi_version: int, e_flags: int) -> int:
    """The SM an sm_XY CUDA ELF was built for, from its header (see the module docstring's two layouts).

    ABI version 7 keeps the SM in the low byte; version 8 (CUDA 13's ptxas) moved it to bits 8..15, where
    version 7 keeps the texture-mode and 64-bit-address flags. Any other version is refused, not guessed."""
    if abi_version == 7:
        return e_flags & 0xFF
    if abi_version == 8:
        return (e_flags >> 8) & 0xFF
    raise CubinError(f"a CUDA ELF of ABI version {abi_version}: flashsim reads the header layouts of versions 7 "
                     "(ptxas 12.x) and 8 (ptxas 13.x)")


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its ordinal, byte offset from the start of the parameters, and size."""

    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class KernelInfo:
    """What the cubin says about one ``__global__`` function."""

    name: str
    code: bytes
    params: tuple[Param, ...]
    param_base: int  # offset of the first parameter in constant bank 0 (0x210 on sm_90)
    param_bytes: int
    static_shared: int
    regcount: int
    frame_size: int  # bytes of local memory per thread (stack frame)
    min_stack: int
    max_threads: tuple[int, int, int] | None
    reqntid: tuple[int, int, int] | None
    constant0: bytes  # the kernel's constant bank 0 image (driver-supplied words are filled at launch)
    num_barriers: int
    attributes: dict = field(default_factory=dict, compare=False)

    @property
    def warp_sync_offsets(self) -> frozenset:
        """Offsets in .text of the instructions ptxas turned a warp-level sync into (a ``__syncwarp()`` in
        converged code becomes a NOP there; EIATTR_COOP_GROUP_INSTR_OFFSETS lists where, and tools that
        check races read it)."""
        out = set()
        for payload in self.attributes.get("EIATTR_COOP_GROUP_INSTR_OFFSETS", []):
            out.update(_u32s(payload))
        return frozenset(out)


def _records(data: bytes):
    """Yield (format, attribute, payload bytes) of an .nv.info section."""
    i = 0
    n = len(data)
    while i + 2 <= n:
        fmt, attr = data[i], data[i + 1]
        if fmt == 0x01:
            payload, i = b"", i + 4
        elif fmt == 0x02:
            payload, i = data[i + 2:i + 3], i + 4
        elif fmt == 0x03:
            payload, i = data[i + 2:i + 4], i + 4
        elif fmt == 0x04:
            size = int.from_bytes(data[i + 2:i + 4], "little")
            payload, i = data[i + 4:i + 4 + size], i + 4 + size
            i = (i + 3) & ~3
        else:
            raise CubinError(f".nv.info record at byte {i} has an unknown format {fmt:#x}")
        yield fmt, attr, payload


def _u32s(payload: bytes) -> list[int]:
    return [int.from_bytes(payload[j:j + 4], "little") for j in range(0, len(payload) - 3, 4)]


class Cubin:
    """An sm_90 cubin: ``kernels`` by name, ``globals_`` (module variables) and ``banks`` (constant data)."""

    def __init__(self, data: bytes, *, name: str = "cubin"):
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            raise bad_argument("cubin", type(data).__name__, "expected the cubin's bytes")
        self.name = name
        self.data = data
        self._refuse_non_elf(data)
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        try:
            self.elf = ELFFile(io.BytesIO(data))
            header = self.elf.header
        except (ELFError, ValueError, KeyError) as exc:
            raise CubinError(f"{name}: not a readable ELF file ({exc})") from None
        if header.e_machine != "EM_CUDA":
            raise CubinError(f"{name}: an ELF file for {header.e_machine}, not a CUDA cubin")
        self.abi_version = int(header.e_ident["EI_ABIVERSION"])
        self.sm = elf_sm(self.abi_version, int(header.e_flags))
        if self.sm != SUPPORTED_SM:
            raise CubinError(
                f"{name}: a cubin for sm_{self.sm}; flashsim interprets sm_90 SASS only "
                f"(compile with -arch=sm_90)")
        self.sections = {s.name: s for s in self.elf.iter_sections()}
        self.symbols = self._symbols()
        self._global_info = self._parse_global_info()
        self.kernels: dict[str, KernelInfo] = {}
        for sym in self.symbols.values():
            if sym["kind"] == "entry":
                self.kernels[sym["name"]] = self._kernel(sym["name"])
        self.functions = {s["name"]: s for s in self.symbols.values() if s["kind"] in ("entry", "func")}

    @staticmethod
    def _refuse_non_elf(data: bytes) -> None:
        head = data[:64]
        if head[:4] == b"\x7fELF":
            return
        text = head.lstrip()
        if text.startswith((b"//", b".version", b".target")):
            raise CubinError("this is PTX text, not a cubin: load it with flashsim.cuda.RawModule, which JIT-compiles "
                             "it (flashsim.sass.binaries)")
        if head[:4] in FATBIN_MAGIC:
            raise CubinError("this is a fatbin: load it with flashsim.cuda.RawModule, which takes its sm_90 cubin "
                             "(flashsim.sass.binaries)")
        raise CubinError(f"not a cubin (first bytes {head[:8]!r}); expected an ELF file for sm_90")

    # ---------------------------------------------------------------------------------------- symbols
    def _symbols(self) -> dict[str, dict]:
        symtab = self.sections.get(".symtab")
        out: dict[str, dict] = {}
        if symtab is None:
            raise CubinError(f"{self.name}: the cubin has no symbol table")
        sec_list = list(self.elf.iter_sections())
        for idx, s in enumerate(symtab.iter_symbols()):
            st_other = s["st_other"]
            other = st_other["local"] if isinstance(st_other, dict) and "local" in st_other else None
            shndx = s["st_shndx"]
            sec = sec_list[shndx].name if isinstance(shndx, int) and shndx < len(sec_list) else None
            kind = "data"
            if s["st_info"]["type"] == "STT_FUNC":
                kind = "func"
                # a __global__ function owns its .text.<name> section and has a .nv.info.<name> section
                # (template instances are weak symbols, so the binding does not tell)
                if sec == f".text.{s.name}" and f".nv.info.{s.name}" in self.sections:
                    kind = "entry"
            out[s.name] = {"name": s.name, "index": idx, "value": s["st_value"], "size": s["st_size"],
                           "section": sec, "kind": kind, "other": other}
        return out

    # ---------------------------------------------------------------------------------------- .nv.info
    def _parse_global_info(self) -> dict[int, dict[str, int]]:
        """Per-symbol-index attributes of the module-wide .nv.info (REGCOUNT, FRAME_SIZE, ...)."""
        sec = self.sections.get(".nv.info")
        per: dict[int, dict[str, int]] = {}
        if sec is None:
            return per
        for fmt, attr, payload in _records(sec.data()):
            if fmt == 0x04 and len(payload) == 8:
                sym, value = _u32s(payload)
                per.setdefault(sym, {})[EIATTR.get(attr, f"0x{attr:02x}")] = value
        return per

    def _kernel(self, name: str) -> KernelInfo:
        text = self.sections.get(f".text.{name}")
        info = self.sections.get(f".nv.info.{name}")
        if text is None or info is None:
            raise CubinError(f"{self.name}: kernel {name!r} lacks .text.{name} or .nv.info.{name}")
        params: list[Param] = []
        attrs: dict = {}
        param_base, param_bytes = 0x210, 0
        max_threads = reqntid = None
        num_barriers = 0
        for fmt, attr, payload in _records(info.data()):
            label = EIATTR.get(attr, f"0x{attr:02x}")
            if attr == _CODE["EIATTR_KPARAM_INFO"]:
                ordinal = int.from_bytes(payload[4:6], "little")
                offset = int.from_bytes(payload[6:8], "little")
                flags = int.from_bytes(payload[8:12], "little")
                params.append(Param(ordinal, offset, (flags >> 18) & 0x3FFF))
            elif attr == _CODE["EIATTR_PARAM_CBANK"]:
                _, packed = _u32s(payload)
                param_base, param_bytes = packed & 0xFFFF, packed >> 16
            elif attr == _CODE["EIATTR_CBANK_PARAM_SIZE"]:
                param_bytes = int.from_bytes(payload, "little")
            elif attr == _CODE["EIATTR_MAX_THREADS"]:
                max_threads = tuple(_u32s(payload)[:3])
            elif attr == _CODE["EIATTR_REQNTID"]:
                reqntid = tuple(_u32s(payload)[:3])
            elif attr == _CODE["EIATTR_NUM_BARRIERS"]:
                num_barriers = payload[0] if payload else 0
            attrs.setdefault(label, []).append(payload)
        params.sort(key=lambda p: p.ordinal)
        sym = self.symbols[name]["index"]
        g = self._global_info.get(sym, {})
        shared = self.sections.get(f".nv.shared.{name}")
        c0 = self.sections.get(f".nv.constant0.{name}")
        c0_bytes = bytearray(c0.data() if c0 is not None and c0["sh_type"] != "SHT_NOBITS"
                             else b"\0" * (c0["sh_size"] if c0 is not None else param_base + param_bytes))
        return KernelInfo(
            name=name, code=text.data(), params=tuple(params), param_base=param_base, param_bytes=param_bytes,
            static_shared=int(shared["sh_size"]) if shared is not None else 0,
            regcount=g.get("EIATTR_REGCOUNT", 255), frame_size=g.get("EIATTR_FRAME_SIZE", 0),
            min_stack=g.get("EIATTR_MIN_STACK_SIZE", 0), max_threads=max_threads, reqntid=reqntid,
            constant0=bytes(c0_bytes), num_barriers=num_barriers, attributes=attrs)

    # ---------------------------------------------------------------------------------------- data
    def constant_banks(self) -> dict[int, bytes]:
        """Module-wide constant banks (.nv.constantN, N != 0) as bytes, before relocation."""
        out = {}
        for name, sec in self.sections.items():
            if name.startswith(".nv.constant") and "." not in name[len(".nv.constant"):]:
                bank = int(name[len(".nv.constant"):])
                out[bank] = sec.data() if sec["sh_type"] != "SHT_NOBITS" else b"\0" * sec["sh_size"]
        return out

    def data_sections(self) -> dict[str, bytes]:
        """Module globals: '.nv.global' (zero-filled) and '.nv.global.init' (initialised) bytes."""
        out = {}
        for name in (".nv.global", ".nv.global.init"):
            sec = self.sections.get(name)
            if sec is not None:
                out[name] = sec.data() if sec["sh_type"] != "SHT_NOBITS" else b"\0" * sec["sh_size"]
        return out

    def relocations(self, target: str) -> list[tuple[int, str, int, int]]:
        """Relocations applied to section ``target``: (offset, symbol name, type, addend)."""
        sec = self.sections.get(f".rela{target}") or self.sections.get(f".rel{target}")
        if sec is None:
            return []
        syms = list(self.sections[".symtab"].iter_symbols())
        out = []
        for r in sec.iter_relocations():
            addend = r.entry["r_addend"] if r.is_RELA() else 0
            out.append((r["r_offset"], syms[r["r_info_sym"]].name, r["r_info_type"], addend))
        return out
