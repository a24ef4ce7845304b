"""The simulated device address space: allocations of global memory, each a numpy byte buffer at a
64-bit device address, and vectorised bounds-checked loads, stores and atomics over them.

Allocations start at 0x7f0000000000 (as device pointers look on Linux) on 512-byte boundaries, with
at least 4 KiB of unmapped space between any two, so an access that runs off the end of one
allocation faults instead of landing silently in the next.

Initialisation (what compute-sanitizer's initcheck tracks): an allocation made with
``initialized=False`` (``flashsim.cuda.empty``, like cudaMalloc) keeps a per-byte record of what has been
written since, by the host (``mark_written``) or by kernels (stores, atomics, cp.async sources are reads);
:meth:`unwritten` says which accesses touch bytes nothing wrote. Fully written allocations drop the record.
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import bad_argument

__all__ = ["GlobalMemory", "BASE", "ALIGN"]

BASE = 0x7F0000000000
ALIGN = 512
GAP = 4096


class GlobalMemory:
    """Device allocations: ``alloc(nbytes)`` returns an address; ``buffer(addr)`` the bytes behind it."""

    def __init__(self):
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._bufs: list[np.ndarray] = []
        self._names: list[str] = []
        self._next = BASE
        self._arrays_cache = None
        self._unwritten: dict[int, np.ndarray] = {}  # allocation -> per byte: written yet?

    def alloc(self, nbytes: int, *, name: str = "", initialized: bool = True) -> int:
        if not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise bad_argument("nbytes", nbytes, "expected a non-negative int")
        addr = self._next
        size = max(int(nbytes), 1)
        buf = np.zeros((size + 15) // 16 * 16, np.uint8)  # padded so word views always exist
        self._starts.append(addr)
        self._ends.append(addr + int(nbytes))
        self._bufs.append(buf)
        self._names.append(name)
        if not initialized and nbytes:
            self._unwritten[len(self._bufs) - 1] = np.zeros(int(nbytes), bool)
        self._next = (addr + size + GAP + ALIGN - 1) // ALIGN * ALIGN
        self._arrays_cache = None
        return addr

    def buffer(self, addr: int) -> np.ndarray:
        """The whole byte buffer of the allocation that starts at ``addr``."""
        i = self._find(addr)
        if i is None or self._starts[i] != addr:
            raise bad_argument("addr", hex(addr), "not the start of a device allocation")
        return self._bufs[i][: self._ends[i] - self._starts[i]]

    def view(self, addr: int, nbytes: int) -> np.ndarray:
        """The ``nbytes`` bytes at ``addr`` (inside one allocation) as a writable uint8 view."""
        i = self._find(addr)
        if i is None or addr + nbytes > self._ends[i]:
            raise bad_argument("addr", hex(addr), f"{nbytes} bytes there are not inside one device allocation")
        off = addr - self._starts[i]
        return self._bufs[i][off:off + nbytes]

    # ------------------------------------------------------------------------------- initialisation
    def mark_written(self, addr: int, nbytes: int) -> None:
        """The host wrote ``nbytes`` at ``addr`` (a copy or fill into an allocation)."""
        i = self._find(addr)
        if i is not None and i in self._unwritten:
            off = addr - self._starts[i]
            self._note(i, np.arange(off, off + nbytes))

    def _note(self, i: int, offsets: np.ndarray) -> None:
        rec = self._unwritten[i]
        rec[offsets[offsets < rec.size]] = True
        if rec.all():
            del self._unwritten[i]

    def mark_accesses(self, addr: np.ndarray, idx: np.ndarray, width: int) -> None:
        """Kernel writes of ``width`` bytes at located ``addr``: those bytes are initialised now."""
        if not self._unwritten:
            return
        for i in np.unique(idx):
            if int(i) in self._unwritten:
                off = (addr[idx == i] - np.uint64(self._starts[int(i)])).astype(np.int64)
                self._note(int(i), (off[:, None] + np.arange(width)).reshape(-1))

    def unwritten(self, addr: np.ndarray, idx: np.ndarray, width: int) -> np.ndarray:
        """Per located access: True where one of its ``width`` bytes was never written."""
        out = np.zeros(addr.shape, bool)
        if not self._unwritten:
            return out
        for i in np.unique(idx):
            rec = self._unwritten.get(int(i))
            if rec is None:
                continue
            sel = idx == i
            off = (addr[sel] - np.uint64(self._starts[int(i)])).astype(np.int64)
            cols = np.minimum(off[:, None] + np.arange(width), rec.size - 1)
            out[sel] = ~rec[cols].all(axis=1)
        return out

    @property
    def tracks_writes(self) -> bool:
        return bool(self._unwritten)

    def _find(self, addr: int):
        import bisect

        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0 or addr >= max(self._ends[i], self._starts[i] + 1):
            return None
        return i

    def describe(self, addr: int) -> str:
        """Where ``addr`` lies relative to the allocations (for fault messages)."""
        import bisect

        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self._ends[i]:
            return f"inside allocation {i} ({self._names[i] or 'unnamed'}, {self._ends[i] - self._starts[i]} bytes at {self._starts[i]:#x})"
        if i >= 0:
            return (f"{addr - self._ends[i]} bytes past the end of allocation {i} "
                    f"({self._names[i] or 'unnamed'}, {self._ends[i] - self._starts[i]} bytes at {self._starts[i]:#x})")
        return "below every allocation"

    def _arrays(self):
        if self._arrays_cache is None:
            self._arrays_cache = (np.array(self._starts, np.uint64), np.array(self._ends, np.uint64))
        return self._arrays_cache

    def locate(self, addr: np.ndarray, width: int):
        """Allocation index per address (-1 where the ``width`` bytes are not all inside one allocation)."""
        starts, ends = self._arrays()
        if len(starts) == 0:
            return np.full(addr.shape, -1, np.int64)
        a = addr.astype(np.uint64)
        idx = np.searchsorted(starts, a, side="right").astype(np.int64) - 1
        ok = idx >= 0
        safe = np.where(ok, idx, 0)
        ok &= (a + np.uint64(width)) <= ends[safe]
        return np.where(ok, idx, -1)

    def gather(self, addr: np.ndarray, idx: np.ndarray, width: int) -> np.ndarray:
        """Bytes at ``addr`` (already located to ``idx``, aligned to ``width``) as (N, max(1, width/4))
        uint32 words (narrower loads zero-extended into one word)."""
        n = addr.shape[0]
        words = max(1, width // 4)
        out = np.zeros((n, words), np.uint32)
        for i in np.unique(idx):
            sel = idx == i
            off = (addr[sel] - np.uint64(self._starts[int(i)])).astype(np.int64)
            buf = self._bufs[int(i)]
            if width >= 4:
                out[sel] = buf.view(np.uint32)[(off >> 2)[:, None] + np.arange(words)]
            elif width == 2:
                out[sel, 0] = buf.view(np.uint16)[off >> 1]
            else:
                out[sel, 0] = buf[off]
        return out

    def scatter(self, addr: np.ndarray, idx: np.ndarray, data: np.ndarray, width: int) -> None:
        """Store (N, words) uint32 ``data`` at ``addr``; later rows win where addresses repeat."""
        words = max(1, width // 4)
        self.mark_accesses(addr, idx, width)
        for i in np.unique(idx):
            sel = idx == i
            off = (addr[sel] - np.uint64(self._starts[int(i)])).astype(np.int64)
            buf = self._bufs[int(i)]
            d = data[sel]
            if width >= 4:
                buf.view(np.uint32)[(off >> 2)[:, None] + np.arange(words)] = d[:, :words]
            elif width == 2:
                buf.view(np.uint16)[off >> 1] = (d[:, 0] & 0xFFFF).astype(np.uint16)
            else:
                buf[off] = (d[:, 0] & 0xFF).astype(np.uint8)

    def word_view(self, i: int, dtype) -> np.ndarray:
        return self._bufs[int(i)].view(dtype)

    def start(self, i: int) -> int:
        return self._starts[int(i)]
