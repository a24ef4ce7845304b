"""A Triton driver whose device is flashsim's simulated H100: Triton's own JIT specialises, compiles (for
sm_90, with its bundled ptxas) and caches the kernel exactly as it does on the GPU, and the launch runs the
cubin in flashsim's SASS interpreter with Triton's launch ABI.

What Triton's CUDA launcher does and this one repeats (triton/backends/nvidia/driver.py, 3.6.0):

- the parameters are the kernel's arguments minus the constexprs (an int argument equal to 1, and None, are
  constexprs by specialisation), each as its signature type: pointers 8 bytes (``data_ptr()``, an int, or
  None for 0); i1/i8/u8 1, i16/u16 2, i32/u32 4, i64/u64 8 bytes; fp16 the nearest half of the Python float,
  bf16 its float32's upper 16 bits, fp32 the float32 cast, fp64 the double;
- a host ``TensorDescriptor`` the compiler lowered to TMA becomes its 128-byte CUtensorMap by value (made by
  ``fill_tma_descriptor``: L2 promotion 128B, element strides 1, no interleave), then its shape as i32 and its
  strides as i64; one it did not lower becomes its base pointer, shape and strides as i64, the padding flag
  as i1, then shape i32 and strides i64 again;
- then the ``global_scratch`` and ``profile_scratch`` pointers: allocations of ``grid * num_ctas * size``
  bytes when the kernel's metadata asks for them (``triton.set_allocator`` must be set for the first, as on
  the GPU), else 0;
- block = 32 * num_warps threads; dynamic shared memory = the metadata's ``shared``, the function's limit
  raised to it (``load_binary`` raises it past 48 KiB).
"""

from __future__ import annotations

import operator
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["H100_PROPERTIES", "SimLauncher", "TensorMapArg", "TritonLaunchError", "make_driver"]

#: What ``driver.utils.get_device_properties`` reports for the simulated device: an H100 SXM (132 SMs, the
#: 227 KiB a CTA may opt into, 64 Ki registers per SM), what kernels size persistent grids by.
H100_PROPERTIES = {"max_shared_mem": 232448, "max_num_regs": 65536, "multiprocessor_count": 132, "warpSize": 32,
                   "sm_clock_rate": 1980000, "mem_clock_rate": 2619000, "mem_bus_width": 5120}

#: The device id the simulated device has in Triton's per-device kernel caches (never a real device's).
SIM_DEVICE = -90


class TritonLaunchError(FlashsimError):
    """A Triton launch flashsim cannot make as the GPU would (an argument of the wrong kind, a parameter the
    cubin does not have)."""


@dataclass
class TensorMapArg:
    """A CUtensorMap by value (what ``fill_tma_descriptor`` returns): its 128 bytes."""

    data: bytes

    def __post_init__(self):
        if len(self.data) != 128:
            raise bad_argument("data", len(self.data), "a CUtensorMap has 128 bytes")


class _Function:
    """What ``load_binary`` returns as the function handle: the flashsim.cuda function of the cubin."""

    def __init__(self, module, fn, name: str):
        self.module, self.fn, self.name = module, fn, name


class _Utils:
    """``driver.active.utils`` for the simulated device."""

    def load_binary(self, name, kernel, shared, device):
        import flashsim.cuda as fc

        mod = fc.RawModule(cubin=bytes(kernel), name=f"{name}.cubin")
        fn = mod.get_function(name)
        if shared > fn.max_dynamic_shared_size_bytes:
            fn.max_dynamic_shared_size_bytes = int(shared)  # load_binary raises the limit past 48 KiB
        info = fn.info
        max_threads = 1024 if not info.max_threads else int(np.prod(info.max_threads))
        return mod, _Function(mod, fn, name), info.regcount, info.frame_size // 4, max_threads

    def get_device_properties(self, device):
        return dict(H100_PROPERTIES)

    def fill_tma_descriptor(self, global_address, swizzle, elem_size, elem_type, block_size, shape, strides, padding):
        from flashsim.sass import cutensormap

        rank = len(block_size)
        if len(shape) != rank or len(strides) != rank:
            raise RuntimeError("Rank mismatch")
        dims = [int(s) for s in reversed(shape)]
        box = [int(b) for b in reversed(block_size)]
        strides_b = [elem_size * int(s) for s in reversed(strides[:-1])]
        fields = cutensormap.TiledFields(
            data_type=int(elem_type), rank=rank, global_address=int(global_address), global_dim=tuple(dims),
            global_strides=tuple(strides_b), box_dim=tuple(box), element_strides=(1,) * rank, interleave=0,
            swizzle=int(swizzle), l2_promotion=2, oob_fill=1 if padding == 1 else 0)
        ok, why = cutensormap.driver_accepts(fields)
        if not ok:
            raise RuntimeError(f"Triton Error [CUDA]: Failed to create tensor map descriptor: {why}\n"
                               f"elemType={elem_type} rank={rank} global_address={global_address:#x} "
                               f"elemSize={elem_size} swizzle={swizzle} padding={padding}")
        return TensorMapArg(cutensormap.encode(fields))

    def set_printf_fifo_size(self, size):
        pass

    def cuOccupancyMaxActiveClusters(self, *args):
        raise NotImplementedError("clusters of more than one CTA are not modelled")


def _pack_scalar(ty: str, v: Any, what: str) -> bytes:
    """A scalar parameter's bytes, as Triton's launcher packs it (PyArg_ParseTuple's conversions)."""
    if ty in ("fp16", "bf16", "fp32", "f32", "fp64"):
        if not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
            raise TritonLaunchError(f"{what}: expected a float for a {ty} parameter, got {type(v).__name__}")
        f = float(v)
        if ty == "fp16":
            return struct.pack("<e", f)  # PyFloat_Pack2: nearest even; OverflowError past the largest half
        with np.errstate(over="ignore"):
            f32 = np.float32(f)  # the C cast (float)f: nearest even, infinity past the largest float
        if ty == "bf16":
            return (f32.view(np.uint32) >> np.uint32(16)).astype(np.uint16).tobytes()  # truncates, as pack_bf16
        if ty in ("fp32", "f32"):
            return f32.tobytes()
        return struct.pack("<d", f)
    # the launcher's PyArg_ParseTuple codes (triton/backends/nvidia/driver.py, format_of): int8_t 'b' (an
    # *unsigned* char, 0..255), int16_t 'h', int32_t 'i', int64_t 'L' (range-checked, signed); uint8_t 'B',
    # uint16_t 'H', uint32_t 'I', uint64_t 'K' (no range check: the value wraps)
    code = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "L",
            "u1": "B", "u8": "B", "u16": "H", "u32": "I", "u64": "K"}.get(ty)
    if code is None:
        raise NotImplementedError(f"{what}: a parameter of Triton type {ty!r} is not modelled")
    try:
        iv = operator.index(v)
    except TypeError:
        raise TypeError(f"{what}: an integer is required for a {ty} parameter (got {type(v).__name__})") from None
    size = {"b": 1, "B": 1, "h": 2, "H": 2, "i": 4, "I": 4, "L": 8, "K": 8}[code]
    if code == "b":
        if iv < 0:
            raise OverflowError(f"{what}: unsigned byte integer is less than minimum")
        if iv > 255:
            raise OverflowError(f"{what}: unsigned byte integer is greater than maximum")
    elif code in "hiL":
        lo, hi = -(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1
        name = {"h": "signed short integer", "i": "signed integer", "L": "Python int too large to convert to C long"}[code]
        if not lo <= iv <= hi:
            raise OverflowError(f"{what}: {name} is {'less than minimum' if iv < lo else 'greater than maximum'}"
                                if code != "L" else f"{what}: {name}")
    return (iv & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def _pointer(v: Any, what: str) -> int:
    if v is None:
        return 0
    if isinstance(v, int) and not isinstance(v, bool):
        return v & ((1 << 64) - 1)
    ptr = getattr(v, "data_ptr", None)
    if ptr is None:
        raise TritonLaunchError(f"{what}: Pointer argument must be either uint64 or have data_ptr method "
                                f"(got {type(v).__name__})")
    p = ptr()
    if not isinstance(p, int):
        raise TritonLaunchError(f"{what}: data_ptr method of Pointer object must return 64-bit int")
    return p


def expand_signature(signature: dict, tensordesc_meta) -> list:
    """The launcher's flat parameter list of (type, path into the argument) for the kernel's signature, as
    make_launcher expands it (tensor descriptors into their parts)."""
    out = []
    idx = 0
    for pos, sig in enumerate(signature.values()):
        if isinstance(sig, str) and sig.startswith("tensordesc"):
            meta = tensordesc_meta[idx] if tensordesc_meta else None
            idx += 1
            inner = sig[sig.index("<") + 1:]
            ndim = inner[inner.index("[") + 1:inner.index("]")].count(",") + 1
            if meta is None:
                out.append(("*", (pos, "base")))
                out += [("i64", (pos, "shape", i)) for i in range(ndim)]
                out += [("i64", (pos, "strides", i)) for i in range(ndim)]
                out.append(("i1", (pos, "padding")))
            else:
                out.append(("nvTmaDesc", (pos, "map")))
            out += [("i32", (pos, "shape", i)) for i in range(ndim)]
            out += [("i64", (pos, "strides", i)) for i in range(ndim)]
        elif isinstance(sig, tuple):
            raise NotImplementedError("tuple arguments of a Triton kernel are not modelled")
        else:
            out.append((sig, (pos,)))
    return out


class SimLauncher:
    """``driver.active.launcher_cls``: packs Triton's arguments and runs the cubin in the interpreter."""

    def __init__(self, src, metadata):
        self.signature = dict(src.signature)
        self.arg_names = list(src.fn.arg_names) if hasattr(src, "fn") else list(self.signature)
        self.tensordesc_meta = getattr(metadata, "tensordesc_meta", None) or None
        self.params = expand_signature(self.signature, self.tensordesc_meta)
        self.metadata = metadata
        self.num_ctas = getattr(metadata, "num_ctas", 1)
        if self.num_ctas != 1:
            raise NotImplementedError(f"num_ctas={self.num_ctas}: clusters of more than one CTA are not modelled")
        if getattr(metadata, "launch_cooperative_grid", False):
            raise NotImplementedError("launch_cooperative_grid: cooperative grid launches are not modelled")
        self.last = None  # the last launch: (grid, the interpreter's counters)

    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata,
                 enter_hook, exit_hook, *args):
        from triton.runtime import _allocation

        num_warps, num_ctas, shared = kernel_metadata
        if enter_hook is not None:
            enter_hook(launch_metadata)
        grid = (int(gridX), int(gridY), int(gridZ))
        if any(g < 0 for g in grid):
            raise TritonLaunchError(f"grid={grid}: negative grid dimension")
        mem_allocs = []
        from flashsim.triton import _stage_args
        from flashsim.triton.staging import Stage

        stage = Stage()
        ok = False
        try:
            args, _ = _stage_args(stage, args, {})
            values = []
            for ty, path in self.params:
                values.append((ty, path, self._value(args, path)))
            total = int(np.prod(grid))
            scratch = []
            for size, align, alloc, label in (
                    (self.metadata.global_scratch_size, self.metadata.global_scratch_align, _allocation._allocator,
                     "global_scratch"),
                    (self.metadata.profile_scratch_size, self.metadata.profile_scratch_align,
                     _allocation._profile_allocator, "profile_scratch")):
                if size > 0 and total > 0:
                    user = alloc.get()
                    if isinstance(user, _allocation.NullAllocator):
                        user(size, align, stream)  # raises Triton's own "no allocator was set" error
                    from flashsim.cuda.memory import device_memory
                    from flashsim.sass.gmem import ALIGN

                    if ALIGN % max(1, align):
                        raise NotImplementedError(f"{label} aligned to {align} bytes (allocations are {ALIGN}-aligned)")
                    addr = device_memory().alloc(total * num_ctas * size, name=f"triton {label}", initialized=False)
                    mem_allocs.append(addr)
                    scratch.append(addr)
                else:
                    scratch.append(0)
            if total > 0:
                self._launch(function, grid, num_warps, shared, values, scratch)
            ok = True
        finally:
            from flashsim.cuda.memory import device_memory

            stage.finish(copy_back=ok)
            for a in mem_allocs:
                device_memory().free(a)
        if exit_hook is not None:
            exit_hook(launch_metadata)

    def _value(self, args, path):
        pos = path[0]
        if pos >= len(args):
            raise TritonLaunchError(f"the launch has {len(args)} arguments, the signature {len(self.signature)}")
        a = args[pos]
        if len(path) == 1:
            return a
        if path[1] == "base":
            return a.base
        if path[1] == "padding":
            return a.padding == "nan"
        if path[1] == "map":
            meta = self.tensordesc_meta[[i for i, s in enumerate(self.signature.values())
                                         if isinstance(s, str) and s.startswith("tensordesc")].index(pos)]
            return _tensordesc_map(a, meta)
        seq = list(a.shape if path[1] == "shape" else a.strides)
        if self._fp4_padded(pos) and path[1] == "shape":
            seq[-1] *= 2
        return seq[path[2]]

    def _fp4_padded(self, pos) -> bool:
        if not self.tensordesc_meta:
            return False
        idx = [i for i, s in enumerate(self.signature.values()) if isinstance(s, str) and s.startswith("tensordesc")]
        if pos not in idx:
            return False
        return bool(self.tensordesc_meta[idx.index(pos)].get("fp4_padded"))

    def _launch(self, function, grid, num_warps, shared, values, scratch):
        fn = function.fn
        params = fn.info.params
        raw = []
        for ty, path, v in values:
            what = f"argument {self.arg_names[path[0]] if path[0] < len(self.arg_names) else path[0]!r}"
            if ty == "constexpr":
                continue
            if ty.startswith("*"):
                raw.append(np.uint64(_pointer(v, what)).tobytes())
            elif ty == "nvTmaDesc":
                raw.append(v.data)
            else:
                raw.append(_pack_scalar(ty, v, what))
        raw += [np.uint64(s).tobytes() for s in scratch]
        if len(raw) != len(params):
            raise TritonLaunchError(
                f"kernel {function.name!r}: Triton's launch ABI gives {len(raw)} parameters, the cubin has "
                f"{len(params)} ({fn.params_signature()})")
        args = []
        for i, (p, b) in enumerate(zip(params, raw)):
            if len(b) != p.size:
                raise TritonLaunchError(f"kernel {function.name!r}: parameter {i} has {p.size} bytes in the cubin, "
                                        f"Triton's ABI packs {len(b)}")
            args.append(np.frombuffer(b, np.dtype((np.void, len(b))))[0])
        from flashsim.triton import _current_options

        counters = fn(grid, (32 * int(num_warps), 1, 1), tuple(args), shared_mem=int(shared),
                      exec_options=_current_options())
        self.last = (grid, counters)


def _tensordesc_map(arg, meta) -> TensorMapArg:
    """make_tensordesc_arg's CUtensorMap for a host TensorDescriptor the compiler lowered to TMA."""
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

    shape = list(arg.shape)
    strides = list(arg.strides)
    if strides[-1] != 1:
        raise TritonLaunchError(f"tensor descriptor strides {strides}: the last dimension must be contiguous")
    if meta.get("fp4_padded"):
        shape[-1] *= 2
    base = arg.base.data_ptr()
    return _Utils().fill_tma_descriptor(base, meta["swizzle"], meta["elem_size"],
                                        TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]], meta["block_size"], shape,
                                        strides, 1 if arg.padding == "nan" else 0)


def make_driver():
    """A driver instance for ``triton.runtime.driver.set_active`` (the class is built on first use, so that
    importing flashsim.triton does not import Triton)."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase
    from triton.backends.nvidia.driver import ty_to_cpp

    class SimDriver(DriverBase):
        """The simulated H100 as a Triton driver."""

        def __init__(self):
            super().__init__()
            self.utils = _Utils()
            self.launcher_cls = SimLauncher

        @classmethod
        def is_active(cls):
            return False  # chosen only through flashsim.triton

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_current_device(self):
            return SIM_DEVICE

        def set_current_device(self, device):
            if device != SIM_DEVICE:
                raise NotImplementedError("flashsim simulates one device")

        def get_current_stream(self, device=None):
            return 0

        def get_device_capability(self, device=None):
            return (9, 0)

        def get_active_torch_device(self):
            import torch

            return torch.device("cpu")

        def get_device_interface(self):
            raise NotImplementedError("the simulated device has no torch device interface (timing and streams are "
                                      "not modelled)")

        def map_python_to_cpp_type(self, ty: str) -> str:
            return ty_to_cpp(ty)

        def get_benchmarker(self):
            raise NotImplementedError("timing is not modelled: benchmark (and autotune) on the GPU")

        def get_empty_cache_for_benchmark(self):
            raise NotImplementedError("timing is not modelled")

        def clear_cache(self, cache):
            raise NotImplementedError("timing is not modelled")

    return SimDriver()
