"""Host arrays (numpy arrays, torch CPU tensors) staged into the simulated device memory for one launch, and
copied back after it, as a kernel on the GPU reads and writes the tensors it is given.

A tensor is staged with the whole allocation it views (its numpy base buffer, its torch storage), so views
of one buffer passed as several arguments alias each other as on the GPU, and an access past the view but
inside the buffer reads what the GPU would read, and one past the buffer faults. The copy sits at the same
address modulo 512 as the host data (flashsim.sass.gmem aligns allocations to 512 bytes, torch's CUDA allocator
to 512), so Triton's 16-byte divisibility specialisation sees the alignment it sees on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flashsim.cuda.memory import device_memory
from flashsim.errors import bad_argument

__all__ = ["Staged", "Stage", "is_torch_tensor"]

_ALIGN = 512


def is_torch_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "untyped_storage")


@dataclass
class _Buffer:
    """One host allocation and its copy in device memory."""

    host: Any  # a uint8 numpy view of the whole host buffer (writable unless read_only)
    addr: int  # device address of host byte 0, the start of its allocation
    read_only: bool
    name: str


class Staged:
    """What a kernel argument becomes: ``data_ptr()`` is the device address of the host data, ``dtype`` the
    host dtype (a numpy dtype or a torch dtype: Triton specialises on either), ``shape`` and ``stride()`` as
    the host array has them (in elements)."""

    def __init__(self, addr: int, dtype, shape, strides, source):
        self._addr, self.dtype, self.shape, self._strides, self.source = addr, dtype, tuple(shape), tuple(strides), source

    def data_ptr(self) -> int:
        return self._addr

    def stride(self, dim: int | None = None):
        return self._strides if dim is None else self._strides[dim]

    def element_size(self) -> int:
        return int(getattr(self.dtype, "itemsize", None) or np.dtype(self.dtype).itemsize)

    def __repr__(self) -> str:
        return f"Staged({type(self.source).__name__}, dtype={self.dtype}, shape={self.shape}, ptr={self._addr:#x})"


@dataclass
class Stage:
    """The host buffers of one launch: :meth:`put` before it, :meth:`finish` after it."""

    buffers: dict = field(default_factory=dict)  # host buffer identity -> _Buffer

    def put(self, x: Any, what: str) -> Staged:
        """Stage a numpy array or a torch CPU tensor; ``what`` names the argument in errors."""
        if isinstance(x, np.ndarray):
            return self._numpy(x, what)
        if is_torch_tensor(x):
            return self._torch(x, what)
        raise bad_argument(what, type(x).__name__, "expected a numpy array, a torch CPU tensor or a flashsim.cuda array")

    def _buffer(self, key, host: np.ndarray, read_only: bool, offset_mod: int, name: str) -> _Buffer:
        buf = self.buffers.get(key)
        if buf is None:
            mem = device_memory()
            addr = mem.alloc(host.nbytes, name=name, misalign=offset_mod % _ALIGN)
            mem.view(addr, host.nbytes)[...] = host
            buf = self.buffers[key] = _Buffer(host, addr, read_only, name)
        return buf

    def _numpy(self, a: np.ndarray, what: str) -> Staged:
        if a.dtype.hasobject:
            raise bad_argument(what, a.dtype, "object arrays cannot be passed to a kernel")
        owner = a
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        if not owner.flags.c_contiguous:
            raise bad_argument(what, f"{a.dtype}{list(a.shape)}", "a view of non-contiguous memory that numpy does not "
                                                                 "own cannot be staged: pass np.ascontiguousarray(x)")
        raw = owner.reshape(-1).view(np.uint8)
        lo = owner.__array_interface__["data"][0]
        buf = self._buffer(("np", lo, raw.nbytes), raw, not a.flags.writeable, lo,
                           f"{what}: numpy {a.dtype}{list(a.shape)}")
        offset = a.__array_interface__["data"][0] - lo
        if any(s % a.itemsize for s in a.strides):
            raise bad_argument(what, a.strides, "byte strides that are not a multiple of the element size")
        return Staged(buf.addr + offset, a.dtype, a.shape, tuple(s // a.itemsize for s in a.strides), a)

    def _torch(self, t, what: str) -> Staged:
        if t.device.type != "cpu":
            raise bad_argument(what, f"torch tensor on {t.device}", "flashsim runs kernels on the CPU: pass CPU tensors "
                                                                   "(or numpy arrays, or flashsim.cuda arrays)")
        storage = t.untyped_storage()
        import torch

        host = torch.empty(0, dtype=torch.uint8)
        if storage.nbytes():
            host = host.set_(storage, 0, (storage.nbytes(),), (1,))  # the storage's bytes, shared
        raw = host.numpy()
        sptr = storage.data_ptr()
        buf = self._buffer(("torch", sptr, storage.nbytes()), raw, False, sptr, f"{what}: torch {t.dtype}{list(t.shape)}")
        return Staged(buf.addr + (t.data_ptr() - sptr), t.dtype, tuple(t.shape), tuple(t.stride()), t)

    def finish(self, copy_back: bool = True) -> None:
        """Copy every staged buffer back to the host (a read-only one only if the kernel left it as it was:
        else an error), and free the device copies."""
        mem = device_memory()
        try:
            if copy_back:
                for buf in self.buffers.values():
                    now = mem.view(buf.addr, buf.host.nbytes)
                    if buf.read_only:
                        if not np.array_equal(now, buf.host):
                            raise bad_argument(buf.name, "read-only", "the kernel wrote to a read-only numpy array")
                        continue
                    buf.host[...] = now
        finally:
            for buf in self.buffers.values():
                mem.free(buf.addr)
            self.buffers.clear()

