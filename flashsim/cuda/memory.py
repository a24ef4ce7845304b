"""Device arrays in the simulated address space, shaped like cupy's: ``asarray``, ``zeros``, ``ones``, ``full``,
``arange``, ``empty``, their ``*_like`` forms,
``asnumpy``, ``a.get()``, ``a.data.ptr``, ``shape``/``dtype``/``nbytes``/``size``.

The process has one simulated device whose global memory (:class:`flashsim.sass.gmem.GlobalMemory`)
holds every array and every module's globals, so pointers taken from arrays can be stored anywhere
(in structs, in other arrays) and the interpreter resolves them, as on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.errors import bad_argument
from flashsim.sass.gmem import GlobalMemory

__all__ = ["MemoryPointer", "ndarray", "arange", "asarray", "asnumpy", "device_memory", "empty", "empty_like", "full",
           "full_like", "ones", "ones_like", "zeros", "zeros_like"]

_MEMORY = GlobalMemory()


def device_memory() -> GlobalMemory:
    """The simulated device's global memory (shared by every array and module of the process)."""
    return _MEMORY


@dataclass(frozen=True)
class MemoryPointer:
    """``a.data``: the device address (``ptr``) and the size of what it points at."""

    ptr: int
    size: int


class ndarray:
    """A C-contiguous array in simulated device memory."""

    def __init__(self, shape, dtype=np.float32, *, _addr: int | None = None, _initialized: bool = True):
        dt = np.dtype(dtype)
        shp = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shp):
            raise bad_argument("shape", shape, "dimensions must be non-negative")
        if dt.hasobject:
            raise bad_argument("dtype", dt, "object arrays cannot live in device memory")
        # raw bytes (a void dtype with no fields) have none; ml_dtypes' narrow floats are void dtypes too
        raw = dt.kind == "V" and dt.names is None and not dt.type.__module__.startswith("ml_dtypes")
        if dt.kind in "MmUS" or raw or \
                (dt.kind in "fc" and dt.itemsize > (8 if dt.kind == "f" else 16)):
            raise bad_argument("dtype", dt, "a dtype with no CUDA counterpart (bool, integers, float16/32/64, "
                                            "ml_dtypes' bfloat16/float8/..., complex64/128 and structs of them)")
        nbytes = int(np.prod(shp, dtype=np.int64)) * dt.itemsize
        if _addr is None:  # a new allocation; else an array over existing device memory (a module global)
            _addr = _MEMORY.alloc(nbytes, name=f"{dt.name}{list(shp)}", initialized=_initialized)
        self._addr, self._nbytes = _addr, nbytes
        self.shape, self.dtype = shp, dt
        self._bytes = _MEMORY.view(_addr, nbytes)

    # --------------------------------------------------------------------------------- cupy's surface
    @property
    def data(self) -> MemoryPointer:
        return MemoryPointer(self._addr, self._nbytes)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def data_ptr(self) -> int:
        """The device address, as torch's ``Tensor.data_ptr()`` gives it (what Triton's launcher reads)."""
        return self._addr

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        st, acc = [], self.dtype.itemsize
        for s in reversed(self.shape):
            st.append(acc)
            acc *= s
        return tuple(reversed(st))

    def _view(self) -> np.ndarray:
        return self._bytes.view(self.dtype).reshape(self.shape)

    def get(self) -> np.ndarray:
        """A numpy copy of the contents (cupy's ``a.get()``)."""
        return self._view().copy()

    def set(self, arr: Any) -> None:
        """Copy a host array of the same shape and dtype into this array (cupy's ``a.set(x)``)."""
        a = np.asarray(arr)
        if a.shape != self.shape or a.dtype != self.dtype:
            raise bad_argument("arr", f"{a.dtype}{list(a.shape)}", f"expected {self.dtype}{list(self.shape)}")
        self._view()[...] = a
        _MEMORY.mark_written(self._addr, self._nbytes)

    def fill(self, value) -> None:
        self._view()[...] = value
        _MEMORY.mark_written(self._addr, self._nbytes)

    def reshape(self, *shape) -> "ndarray":
        shp = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return ndarray(self._view().reshape(shp).shape, self.dtype, _addr=self._addr)

    def view(self, dtype) -> "ndarray":
        return ndarray(self._view().view(dtype).shape, dtype, _addr=self._addr)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"flashsim.cuda.ndarray(shape={self.shape}, dtype={self.dtype}, ptr={self._addr:#x})"

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a flashsim.cuda.ndarray lives in simulated device memory: use .get() or "
                        "flashsim.cuda.asnumpy() for a numpy copy (as with cupy)")


def asarray(x: Any, dtype=None) -> ndarray:
    """A device copy of ``x`` (a device array is returned as is when no conversion is asked)."""
    if isinstance(x, ndarray):
        if dtype is None or np.dtype(dtype) == x.dtype:
            return x
        x = x.get()
    a = np.ascontiguousarray(np.asarray(x, dtype=dtype))
    out = ndarray(a.shape, a.dtype, _initialized=False)
    out.set(a)
    return out


def zeros(shape, dtype=np.float32) -> ndarray:
    return ndarray(shape, dtype)


def ones(shape, dtype=np.float32) -> ndarray:
    return full(shape, 1, dtype)


def full(shape, fill_value, dtype=None) -> ndarray:
    """An array of ``fill_value`` (its dtype numpy's for the value when ``dtype`` is None, as cupy.full)."""
    a = np.full(shape if isinstance(shape, (int, np.integer)) else tuple(shape), fill_value, dtype=dtype)
    return asarray(a)


def arange(start, stop=None, step=1, dtype=None) -> ndarray:
    """``numpy.arange`` in device memory (cupy.arange)."""
    return asarray(np.arange(start, stop, step, dtype=dtype) if stop is not None else np.arange(start, dtype=dtype))


def _like(a, dtype, shape):
    if not isinstance(a, (ndarray, np.ndarray)):
        raise bad_argument("a", type(a).__name__, "expected a flashsim.cuda.ndarray or a numpy array")
    return (a.shape if shape is None else shape), (a.dtype if dtype is None else dtype)


def zeros_like(a, dtype=None, shape=None) -> ndarray:
    return zeros(*_like(a, dtype, shape))


def ones_like(a, dtype=None, shape=None) -> ndarray:
    return ones(*_like(a, dtype, shape))


def empty_like(a, dtype=None, shape=None) -> ndarray:
    return empty(*_like(a, dtype, shape))


def full_like(a, fill_value, dtype=None, shape=None) -> ndarray:
    shp, dt = _like(a, dtype, shape)
    return full(shp, fill_value, dt)


def empty(shape, dtype=np.float32) -> ndarray:
    """An uninitialised device array: its bytes are zeros here (deterministically), but reads of them
    before anything writes them are reported under ``flashsim.cuda.checking(initcheck=True)``, as
    compute-sanitizer's initcheck reports reads of cudaMalloc'd memory."""
    return ndarray(shape, dtype, _initialized=False)


def asnumpy(a: Any) -> np.ndarray:
    """A numpy copy of a device array (numpy arrays pass through)."""
    if isinstance(a, ndarray):
        return a.get()
    return np.asarray(a)
