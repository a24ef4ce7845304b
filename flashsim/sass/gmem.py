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

__all__ = ["GlobalMemory", "TaskMemory", "BASE", "ALIGN", "range_index"]

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

    def alloc(self, nbytes: int, *, name: str = "", initialized: bool = True, misalign: int = 0) -> int:
        """A new allocation of ``nbytes`` at an address ``misalign`` bytes past a 512-byte boundary (a copy of host
        data keeps the host address's alignment), bounded exactly: an access outside it faults."""
        if not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise bad_argument("nbytes", nbytes, "expected a non-negative int")
        if not isinstance(misalign, (int, np.integer)) or not 0 <= misalign < ALIGN:
            raise bad_argument("misalign", misalign, f"expected an int in 0..{ALIGN - 1}")
        addr = self._next + int(misalign)
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

    def free(self, addr: int) -> None:
        """Release the allocation that starts at ``addr`` (cudaFree): its bytes go, and any later access to
        its addresses faults as an access outside every allocation. Addresses are never reused."""
        i = self._find(addr)
        if i is None or self._starts[i] != addr or self._names[i].startswith("freed: "):
            raise bad_argument("addr", hex(addr), "not the start of a live device allocation")
        self._ends[i] = self._starts[i]
        self._bufs[i] = np.zeros(16, np.uint8)
        self._names[i] = f"freed: {self._names[i] or 'unnamed'}"
        self._unwritten.pop(i, None)
        self._arrays_cache = None

    def digest(self, h) -> None:
        """Feed every allocation's bytes to the hash ``h`` (the spin detector's view of global memory)."""
        for b in self._bufs:
            h.update(np.ascontiguousarray(b).data)

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

    def locate(self, addr: np.ndarray, width):
        """Allocation index per address (-1 where the ``width`` bytes are not all inside one allocation);
        ``width`` one byte count or one per address."""
        starts, ends = self._arrays()
        if len(starts) == 0:
            return np.full(addr.shape, -1, np.int64)
        a = addr.astype(np.uint64)
        idx = np.searchsorted(starts, a, side="right").astype(np.int64) - 1
        ok = idx >= 0
        safe = np.where(ok, idx, 0)
        ok &= (a + np.asarray(width).astype(np.uint64)) <= ends[safe]
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

    def apply_writes(self, log) -> None:
        """Store what a batch of CTAs wrote elsewhere (``TaskMemory.write_log()``): the bytes, and for
        initcheck that they are written now."""
        for i, starts, ends, data in log:
            off = range_index(starts, ends)
            self._bufs[int(i)][off] = data
            if int(i) in self._unwritten:
                self._note(int(i), off)

    def start(self, i: int) -> int:
        return self._starts[int(i)]


class TaskMemory(GlobalMemory):
    """Global memory as one batch of CTAs sees it in a worker process (flashsim.sass.spread): the snapshot
    the launch started from, read-only and shared by the worker's tasks, with the batch's own writes
    copied on write, and a record of the bytes the batch read (before writing them itself) and wrote.

    ``write_log()`` and ``read_log()`` give them as byte ranges per allocation; the launching process applies
    the writes in batch order (:meth:`GlobalMemory.apply_writes`) after checking that no batch read what an
    earlier one wrote."""

    def __init__(self, snapshot: GlobalMemory):
        super().__init__()
        self._starts, self._ends, self._names = snapshot._starts, snapshot._ends, snapshot._names
        self._next = snapshot._next
        self._bufs = list(snapshot._bufs)  # replaced by a private copy at the first write of each
        self._unwritten = {i: rec.copy() for i, rec in snapshot._unwritten.items()}
        self._own: set[int] = set()
        self._wrote: dict[int, np.ndarray] = {}  # allocation -> per byte: written by this batch
        self._read: dict[int, np.ndarray] = {}  # allocation -> per byte: read before this batch wrote it

    def alloc(self, nbytes: int, *, name: str = "", initialized: bool = True) -> int:
        raise NotImplementedError("allocating device memory inside a launch is not modelled")

    def _bytes(self, i: int, off: np.ndarray, width: int) -> np.ndarray:
        return (off[:, None] + np.arange(width)).reshape(-1)

    def gather(self, addr: np.ndarray, idx: np.ndarray, width: int) -> np.ndarray:
        for i in np.unique(idx):
            i = int(i)
            off = (addr[idx == i] - np.uint64(self._starts[i])).astype(np.int64)
            b = self._bytes(i, off, width)
            wrote = self._wrote.get(i)
            if wrote is not None:
                b = b[~wrote[b]]
            rec = self._read.get(i)
            if rec is None:
                rec = self._read[i] = np.zeros(self._bufs[i].size, bool)
            rec[b] = True
        return super().gather(addr, idx, width)

    def scatter(self, addr: np.ndarray, idx: np.ndarray, data: np.ndarray, width: int) -> None:
        for i in np.unique(idx):
            i = int(i)
            self._private(i)
            off = (addr[idx == i] - np.uint64(self._starts[i])).astype(np.int64)
            self._wrote[i][self._bytes(i, off, width)] = True
        super().scatter(addr, idx, data, width)

    def word_view(self, i: int, dtype) -> np.ndarray:
        # global atomics keep a launch in one process (flashsim.sass.spread.local_reason)
        raise NotImplementedError("a global atomic in a batch of CTAs run in a worker process")

    def _private(self, i: int) -> None:
        if i not in self._own:
            self._bufs[i] = self._bufs[i].copy()
            self._own.add(i)
            self._wrote[i] = np.zeros(self._bufs[i].size, bool)

    def write_log(self) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """(allocation, range starts, range ends, the bytes written there in order) per allocation written."""
        out = []
        for i, mask in self._wrote.items():
            starts, ends = _ranges(mask)
            if starts.size:
                out.append((i, starts, ends, self._bufs[i][mask]))
        return out

    def read_log(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(allocation, range starts, range ends) of the bytes read before this batch wrote them."""
        out = []
        for i, mask in self._read.items():
            starts, ends = _ranges(mask)
            if starts.size:
                out.append((i, starts, ends))
        return out


def _ranges(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[start, end) of every run of True in a bool array."""
    edges = np.flatnonzero(np.diff(np.concatenate(([False], mask, [False])).astype(np.int8)))
    return edges[0::2].astype(np.int64), edges[1::2].astype(np.int64)


def range_index(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Every offset of the ranges [starts[k], ends[k]), in order."""
    lengths = ends - starts
    if lengths.size == 0:
        return np.zeros(0, np.int64)
    base = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(int(lengths.sum()), dtype=np.int64) + base
