"""``RawModule`` and ``RawKernel`` shaped like cupy's, running the cubin's SASS in the interpreter.

    import flashsim.cuda as fc
    mod = fc.RawModule(code=src, options=("-std=c++17",))
    k = mod.get_function("my_kernel")
    k((blocks,), (threads,), (fc.asarray(x), np.int32(n)), shared_mem=0)

Sources are compiled for sm_90 by NVRTC 13.0 with cupy's own additions (``-ftz=true``, ``-arch=sm_90``)
plus ``-lineinfo`` (source lines for faults and reports; the SASS is the same). ``module.cubin`` holds the
bytes, so a GPU can load the very same code (``cupy.RawModule(path=...)``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import math
import numbers
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim.errors import FlashsimError, bad_argument
from flashsim.sass.binaries import load as load_binary
from flashsim.sass.cubin import Cubin
from flashsim.sass.isa import encoded_nan_immediates, parse_instruction
from flashsim.sass.launch import DEFAULT_DYNAMIC_LIMIT, MAX_SMEM_PER_CTA, Launch
from flashsim.sass.machine import ExecOptions
from flashsim.sass.program import Program
from flashsim.sass.toolchain import CudaBuild, compile_cuda, disassemble, nvrtc_name
from flashsim.cuda.memory import ndarray, device_memory

__all__ = ["Function", "LaunchError", "RawKernel", "RawModule"]

R_CUDA_32, R_CUDA_64 = 1, 2


class LaunchError(FlashsimError):
    """A launch the GPU would refuse (bad configuration or arguments); names the kernel."""


class RawModule:
    """A compiled module: from CUDA source (``code``), a cubin file (``path``) or cubin bytes (``cubin``).

    ``name``: the file name the source is compiled under (what line info, faults and reports show; a
    relative name is shown under the current folder, as NVRTC records it).

    ``path`` / ``cubin`` take what cupy's ``RawModule(path=)`` and the driver take: a cubin of any ptxas (also
    one short of its trailing NUL), a fatbin, a host object or shared library with device code (a torch
    extension's ``.so``), or PTX, JIT-compiled for sm_90 by ptxas 13.0 as the driver does
    (:mod:`flashsim.sass.binaries`; ``module.loaded`` says what was taken). ``member`` names the cubin or PTX
    to take from a binary that holds several with kernels."""

    def __init__(self, code: str | None = None, *, path: str | None = None, cubin: bytes | None = None,
                 options: Sequence[str] = (), name_expressions: Sequence[str] | None = None,
                 backend: str = "nvrtc", translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                 jitify: bool = False, lineinfo: bool = True, name: str = "kernel.cu", member: str | None = None):
        given = [n for n, v in (("code", code), ("path", path), ("cubin", cubin)) if v is not None]
        if len(given) != 1:
            raise bad_argument("code/path/cubin", given, "give exactly one of code=, path= or cubin=")
        if backend != "nvrtc":
            raise NotImplementedError(f"backend={backend!r}: flashsim compiles with NVRTC only")
        if enable_cooperative_groups or jitify or translate_cucomplex:
            raise NotImplementedError("cooperative groups (grid sync), jitify and cuComplex translation are not modelled")
        self.name_expressions = tuple(name_expressions or ())
        self._lowered: dict[str, str] = {}
        self.log = ""
        #: which member of a binary was taken and how (flashsim.sass.binaries.Loaded); None for code=
        self.loaded = None
        #: how the cubin was compiled (source, options), for builds of the same source such as flashsim.locate's
        #: instrumented one; None for a module given as cubin bytes
        self.build: CudaBuild | None = None
        if code is not None:
            if not isinstance(name, str) or not name:
                raise bad_argument("name", name, "expected the source's file name (what line info and reports show)")
            data, self.log, self._lowered = compile_cuda(code, name=name, options=tuple(options),
                                                        name_expressions=self.name_expressions, lineinfo=lineinfo)
            self.source_name = name
            self.build = CudaBuild(code, name, tuple(options), self.name_expressions, bool(lineinfo))
        elif path is not None:
            p = Path(path)
            if not p.is_file():
                raise bad_argument("path", str(path), "no such file")
            self.loaded = load_binary(p.read_bytes(), name=str(p), path=str(p), member=member)
            data = self.loaded.cubin
            self.source_name = str(p)
        else:
            if not isinstance(cubin, (bytes, bytearray, memoryview)):
                raise bad_argument("cubin", type(cubin).__name__, "expected the bytes of a cubin, fatbin or PTX")
            label = name if name != "kernel.cu" else "<cubin>"  # a name given with cubin= labels the bytes
            self.loaded = load_binary(bytes(cubin), name=label, member=member)
            data = self.loaded.cubin
            self.source_name = label
        self.cubin = bytes(data)
        self.sha256 = hashlib.sha256(self.cubin).hexdigest()
        self._elf = Cubin(self.cubin, name=self.source_name)
        self._functions: dict[str, Function] = {}
        self._mem = device_memory()
        self._globals: dict[str, int] = {}
        self._banks: dict[int, np.ndarray] = {}
        self._load_data()
        self._doc = None

    # ------------------------------------------------------------------------------------ loading
    def _load_data(self) -> None:
        """Place module globals and constant banks in device memory; apply relocations."""
        sections = self._elf.data_sections()
        base = {}
        for name, data in sections.items():
            addr = self._mem.alloc(len(data), name=f"{self.source_name}:{name}")
            self._mem.buffer(addr)[:] = np.frombuffer(data, np.uint8)
            base[name] = addr
        for sym in self._elf.symbols.values():
            if sym["section"] in base and sym["kind"] == "data" and sym["name"]:
                self._globals[sym["name"]] = base[sym["section"]] + sym["value"]
        for bank, data in self._elf.constant_banks().items():
            addr = self._mem.alloc(len(data), name=f"{self.source_name}:.nv.constant{bank}")
            buf = self._mem.buffer(addr)
            buf[:] = np.frombuffer(data, np.uint8)
            base[f".nv.constant{bank}"] = addr
            self._banks[bank] = buf
            for off, sym, rtype, addend in self._elf.relocations(f".nv.constant{bank}"):
                target = self._globals.get(sym)
                if target is None and sym in self._elf.sections:
                    target = base.get(sym)
                if target is None and sym in ("vprintf", "__assertfail"):
                    raise NotImplementedError(f"{self.source_name}: device-side {'printf' if sym == 'vprintf' else 'assert'} "
                                              f"({sym}; printf, tl.device_print, assert in a debug build) is not modelled")
                if target is None:
                    raise NotImplementedError(f"relocation of constant bank {bank} against {sym!r} (not a module global)")
                if rtype == R_CUDA_64:
                    buf[off:off + 8] = np.frombuffer(np.uint64(target + addend).tobytes(), np.uint8)
                elif rtype == R_CUDA_32:
                    buf[off:off + 4] = np.frombuffer(np.uint32((target + addend) & 0xFFFFFFFF).tobytes(), np.uint8)
                else:
                    raise NotImplementedError(f"relocation type {rtype} in .nv.constant{bank}")
        for sym in self._elf.symbols.values():
            sec = sym["section"] or ""
            if sec.startswith(".nv.constant") and sec in base and sym["kind"] == "data" and sym["name"]:
                self._globals[sym["name"]] = base[sec] + sym["value"]

    def _disassembly(self):
        if self._doc is None:
            self._doc = disassemble(self.cubin)
        return self._doc

    def _program(self, name: str) -> Program:
        doc = self._disassembly()
        files = []
        if len(doc) > 2 and isinstance(doc[2], dict) and "files" in doc[2]:
            dirs = doc[2].get("directories", [])
            own = self.build.name if self.build is not None else None
            for f in doc[2]["files"]:
                d = dirs[f["dir-idx"]] if 0 <= f.get("dir-idx", -1) < len(dirs) else ""
                if own is not None and f["file"] == os.path.basename(nvrtc_name(own)):
                    # code=: the source as it was named (NVRTC puts a relative name in the directory it ran in,
                    # and a cached cubin keeps the first compile's; an awkward name went in %-encoded)
                    files.append(own)
                    continue
                # NVRTC splits a name at a backslash too: the directory then ends in it
                files.append(f"{d}{'' if d.endswith(chr(92)) else '/'}{f['file']}" if d else f["file"])
        fn = next((f for f in doc[1] if f.get("function-name") == name), None)
        if fn is None:
            raise bad_argument("name", name, f"no such kernel in the module (kernels: {sorted(self._elf.kernels)})")
        instrs = [parse_instruction(fn.get("start", 0) + 16 * i, rec, files) for i, rec in enumerate(fn["sass-instructions"])]
        if any(op.kind == "fimm" and "NAN" in op.text for ins in instrs for op in ins.operands):
            code = self._elf.sections[f".text.{name}"].data()  # a NaN immediate's payload is in the encoding only
            instrs = [encoded_nan_immediates(ins, int.from_bytes(code[ins.pc:ins.pc + 16], "little"))
                      if any(op.kind == "fimm" and "NAN" in op.text for op in ins.operands) else ins
                      for ins in instrs]
        # nvdisasm gives a source line where the line table starts a new row; the instructions after it
        # belong to the same line until the next one
        last = None
        for i, ins in enumerate(instrs):
            if ins.line is None and last is not None:
                instrs[i] = dataclasses.replace(ins, line=last)
            last = instrs[i].line
        symbols = {s["name"]: s["value"] for s in self._elf.functions.values()
                   if s["section"] == f".text.{name}"}
        return Program(self._elf.kernels[name], instrs, symbols, cubin_sha256=self.sha256)

    # ------------------------------------------------------------------------------------ cupy's surface
    def get_function(self, name: str) -> "Function":
        """The kernel ``name``: an ``extern "C"`` name, a mangled name, or one of ``name_expressions``."""
        if not isinstance(name, str):
            raise bad_argument("name", name, "expected the kernel's name as a str")
        key = self._lowered.get(name, name)
        if key not in self._elf.kernels:
            hint = ""
            if self._lowered:
                hint = f"; name expressions: {sorted(self._lowered)}"
            raise bad_argument("name", name, f"no kernel of that name in the module (kernels: "
                                             f"{sorted(self._elf.kernels)}{hint})")
        fn = self._functions.get(key)
        if fn is None:
            fn = self._functions[key] = Function(self, key)
        return fn

    def get_global(self, name: str) -> ndarray:
        """The bytes of a module global (``__device__`` or ``__constant__`` variable) as a uint8 device array."""
        addr = self._globals.get(name)
        if addr is None:
            raise bad_argument("name", name, f"no global of that name (globals: {sorted(self._globals)})")
        return ndarray((int(self._elf.symbols[name]["size"]),), np.uint8, _addr=addr)

    def compile(self) -> None:
        """Disassemble every kernel now (cupy compiles lazily; errors then surface here)."""
        for name in self._elf.kernels:
            self.get_function(name)._prog()

    @property
    def kernels(self) -> list[str]:
        return sorted(self._elf.kernels)


class Function:
    """One ``__global__`` function of a module, callable as ``f(grid, block, args, shared_mem=0)``."""

    def __init__(self, module: RawModule, name: str):
        self.module = module
        self.name = name
        self.info = module._elf.kernels[name]
        self._max_dynamic = DEFAULT_DYNAMIC_LIMIT
        self._program: Program | None = None

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        """The launch limit on dynamic shared memory (cudaFuncAttributeMaxDynamicSharedMemorySize): 48 KiB
        until set; at most what the static shared memory leaves of the CTA's 227 KiB, as the driver checks."""
        return self._max_dynamic

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value) -> None:
        static = max(0, self.info.static_shared - 0x400)
        most = MAX_SMEM_PER_CTA - static
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= most:
            raise bad_argument("max_dynamic_shared_size_bytes", value,
                               f"expected an int from 0 to {most} (sm_90's {MAX_SMEM_PER_CTA} bytes a CTA, less "
                               f"kernel {self.name!r}'s {static} static bytes); the driver refuses more")
        self._max_dynamic = int(value)

    def _prog(self) -> Program:
        if self._program is None:
            self._program = self.module._program(self.name)
        return self._program

    @property
    def attributes(self) -> dict[str, int]:
        k = self.info
        return {"num_regs": k.regcount, "shared_size_bytes": max(0, k.static_shared - 0x400),
                "local_size_bytes": k.frame_size, "max_threads_per_block": 1024 if not k.max_threads else math.prod(k.max_threads),
                "max_dynamic_shared_size_bytes": self.max_dynamic_shared_size_bytes}

    @property
    def num_regs(self) -> int:
        return self.info.regcount

    def params_signature(self) -> str:
        return ", ".join(f"#{p.ordinal}: {p.size} bytes at {p.offset:#x}" for p in self.info.params)

    def _pack(self, args: Sequence[Any]) -> bytes:
        params = self.info.params
        if not isinstance(args, (tuple, list)):
            raise bad_argument("args", type(args).__name__, "expected a tuple of kernel arguments")
        if len(args) != len(params):
            raise LaunchError(f"kernel {self.name!r} takes {len(params)} arguments ({self.params_signature()}), "
                              f"got {len(args)}")
        out = bytearray(self.info.param_bytes)
        for i, (p, a) in enumerate(zip(params, args)):
            raw = _arg_bytes(a, p.size, i, self.name, self.params_signature())
            out[p.offset:p.offset + p.size] = raw
        return bytes(out)

    def __call__(self, grid, block, args, *, shared_mem: int = 0, stream=None,
                 exec_options: ExecOptions | None = None, races: bool = False) -> dict:
        g = _dim3("grid", grid, (2**31 - 1, 65535, 65535))
        b = _dim3("block", block, (1024, 1024, 64))
        if math.prod(b) > 1024:
            raise bad_argument("block", block, "at most 1024 threads per block")
        if self.info.max_threads and math.prod(b) > math.prod(self.info.max_threads):
            raise LaunchError(f"kernel {self.name!r} was built for at most {math.prod(self.info.max_threads)} "
                              f"threads per block (__launch_bounds__), launched with {math.prod(b)}")
        if self.info.reqntid and tuple(b) != tuple(self.info.reqntid):
            raise LaunchError(f"kernel {self.name!r} requires block {self.info.reqntid}, launched with {b}")
        if not isinstance(shared_mem, numbers.Integral) or isinstance(shared_mem, bool) or shared_mem < 0:
            raise bad_argument("shared_mem", shared_mem, "expected a non-negative int (bytes of dynamic shared memory)")
        static = max(0, self.info.static_shared - 0x400)
        if static + shared_mem > MAX_SMEM_PER_CTA:
            raise bad_argument("shared_mem", shared_mem,
                               f"{static} static + {shared_mem} dynamic bytes exceed the {MAX_SMEM_PER_CTA} bytes "
                               "(227 KiB) of shared memory an sm_90 CTA may use")
        if shared_mem > self.max_dynamic_shared_size_bytes:
            raise bad_argument("shared_mem", shared_mem,
                               f"above the kernel's max_dynamic_shared_size_bytes ({self.max_dynamic_shared_size_bytes}): "
                               "set kernel.max_dynamic_shared_size_bytes first, as on the GPU")
        params = self._pack(args)
        prog = self._prog()
        launch = Launch(prog, g, b, params, int(shared_mem), self.module._mem, self.module._banks,
                        exec_options or ExecOptions(), races=races, name=self.name)
        return launch.run()


def _dim3(name: str, value: Any, limits) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, numbers.Integral) else value
    ok = isinstance(dims, (tuple, list)) and 1 <= len(dims) <= 3 and all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1 for d in dims)
    if not ok:
        raise bad_argument(name, value, "expected a positive int or a tuple of 1 to 3 positive ints")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    for axis, (d, lim) in enumerate(zip(dims, limits)):
        if d > lim:
            raise bad_argument(name, value, f"dimension {'xyz'[axis]} = {d} exceeds the sm_90 limit {lim}")
    return dims  # type: ignore[return-value]


def _arg_bytes(a: Any, size: int, i: int, kernel: str, sig: str) -> bytes:
    where = f"argument {i} of kernel {kernel!r} ({sig})"
    if isinstance(a, ndarray):
        if size != 8:
            raise LaunchError(f"{where}: a device array is an 8-byte pointer, the parameter has {size} bytes")
        return np.uint64(a.data.ptr).tobytes()
    if isinstance(a, np.ndarray) and a.dtype.kind == "V" and a.size == 1:
        a = a.reshape(())[()]  # a struct passed by value: structured, or raw bytes (numpy.dtype((numpy.void, n)))
    if isinstance(a, np.void):
        raw = a.tobytes()
        if len(raw) != size:
            raise LaunchError(f"{where}: a struct of {len(raw)} bytes for a {size}-byte parameter")
        return raw
    if isinstance(a, np.generic):
        raw = a.tobytes()
        if len(raw) != size:
            raise LaunchError(f"{where}: {a.dtype} is {len(raw)} bytes, the parameter has {size} "
                              f"(use numpy.{'int32' if size == 4 else 'int64'} / numpy.{'float32' if size == 4 else 'float64'}"
                              " or the struct's dtype)")
        return raw
    if isinstance(a, bool):
        raw = np.bool_(a).tobytes()
    elif isinstance(a, numbers.Integral):
        # cupy passes a Python int as a 64-bit integer and a float as a double
        raw = np.int64(a).tobytes()
    elif isinstance(a, numbers.Real):
        raw = np.float64(a).tobytes()
    elif isinstance(a, np.ndarray):
        raise LaunchError(f"{where}: a numpy array is host memory; pass a device array (flashsim.cuda.asarray(x))")
    elif type(a).__module__.startswith("cupy"):
        raise LaunchError(f"{where}: a cupy array lives on a real GPU; pass a flashsim.cuda device array")
    else:
        raise LaunchError(f"{where}: cannot pass {type(a).__name__!r} (device arrays, numpy scalars and "
                          "numpy.void structs are accepted)")
    if len(raw) != size:
        raise LaunchError(f"{where}: a Python {type(a).__name__} is passed as {len(raw)} bytes (as cupy does), "
                          f"the parameter has {size}: use numpy.int32 / numpy.float32")
    return raw


class RawKernel(Function):
    """``RawKernel(code, name, options=())``: one kernel compiled from source."""

    def __init__(self, code: str, name: str, options: Sequence[str] = (), *, name_expressions=None, **kw):
        mod = RawModule(code=code, options=options, name_expressions=name_expressions or ((name,) if "<" in name else None), **kw)
        key = mod._lowered.get(name, name)
        if key not in mod._elf.kernels:
            raise bad_argument("name", name, f"no kernel of that name in the code (kernels: {mod.kernels})")
        super().__init__(mod, key)

    @property
    def cubin(self) -> bytes:
        return self.module.cubin
