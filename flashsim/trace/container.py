"""The on-disk container of per-warp execution traces: one self-describing, checksummed, append-only file.

Why a container of our own rather than HDF5 (h5py) or zarr
----------------------------------------------------------
The traces are written offline on the GPU machine (no internet, only numpy installed) and read back on the
development machines, so the format must need nothing beyond numpy and the standard library on either side:
h5py brings libhdf5 and zarr brings numcodecs/fsspec (and a directory of small files, awkward to copy and
impossible to replace atomically). On the merits, too, a trace is a poor fit for both: it is a stream of
variable-sized records (each event has its own register count and optional shared-memory accesses), not a
dense n-d array, and we want

- append-only streaming: events are buffered per (cta, warp) and written as soon as a buffer is full, so a
  long run never has to fit in memory, and nothing already written is ever rewritten (HDF5 updates b-trees
  and chunk tables in place; a crash mid-write can corrupt the whole file);
- an index at the end for random access: one warp's events of a multi-gigabyte trace are found by reading
  the index and the few chunks that hold them;
- explicit per-chunk CRC32 and clear errors: a truncated, cut or bit-flipped file raises ``TraceError``
  naming the file, the chunk and its (cta, warp), never wrong data (HDF5 checksums are opt-in per dataset,
  and its errors are a C error stack);
- atomic publication: the file is written under a temporary name in the same directory, fsynced and
  renamed, so a path holds either a complete trace or nothing;
- speed on two cores: chunks are compressed by zlib (which releases the GIL) in a small thread pool, with
  the 32-bit registers split into byte planes first (the sign/exponent bytes of float bit patterns compress
  well, the low mantissa bytes do not and are stored raw rather than wasting deflate time on them).

Layout (all integers little-endian; FORMAT_VERSION = 1)
-------------------------------------------------------
::

    header   MAGIC (8 bytes: 89 'FSTRC' 0d 0a) | u32 format version | u32 json length | u32 crc32 of json
             json: {"format": "flashsim-trace", "format_version", "meta", "tags", "writer", "layout"}
    chunks   back to back; each: CHUNK_HEAD (magic 'FSCK', kind, flags, section count, cta, warp, array,
             event count) | a table of sections (codec 0 raw / 1 zlib, raw length, stored length) | sections
    index    u32 json length | json {"chunks", "tag_entries", "row_dtype", "arrays", "events", "bytes_in"}
             | one INDEX_DTYPE row per chunk, in file order (kind, cta, warp, seq min/max, event count,
             offset, stored and raw length, crc32 of the stored chunk, where its tag list starts)
             | u32 tag ids and u32 event counts per tag of every chunk (the rows point into them)
    footer   44 bytes: u64 index offset | u64 index length | u64 file length | u32 index crc32
             | u32 format version | u32 crc32 of the preceding 32 bytes | END_MAGIC 'FSTRCEND'

An event chunk holds events of one (cta, warp), sorted by seq, as sections: the columns seq (i8), tag id
(u4), register count (u2) and shared-memory record count (i4, -1 for none) one after the other; the
registers (the events' (32, nregs) arrays concatenated in C order) as four byte planes (flag 1, when
compressing) or one raw u32 section; the shared-memory records column by column (lane, addr, nbytes, store,
wavefront). An array chunk holds a byte range of one array's C-order data (the row's [seq_min, seq_max)),
split into byte planes when its item size is 2, 4 or 8. Each section is deflated or stored raw, whichever
the writer judged worth it; the reader needs no setting to read either.

Every check a reader makes raises ``TraceError`` whose message starts with the file's path: opening checks
the magic, the version (before anything else, so a newer file says so instead of looking damaged), the
header, footer and index checksums, the file length the footer recorded and that the chunks tile the file;
reading a chunk checks its CRC, its header against the index, and its contents (lengths, seq order, tag
ids, per-tag counts) against the index. ``TraceReader.verify`` does the chunk checks for every chunk.
"""

from __future__ import annotations

import heapq
import json
import operator
import os
import platform
import struct
import time
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from flashsim.errors import ArgumentError, TraceError

__all__ = [
    "FORMAT_VERSION", "SMEM_DTYPE", "Event", "TraceArgumentError", "TraceError", "TraceReader", "TraceWriter",
    "open_trace",
]

FORMAT_VERSION = 1
MAGIC = b"\x89FSTRC\r\n"   # the high byte and CR LF catch 7-bit and text-mode mangling, as PNG's does
END_MAGIC = b"FSTRCEND"
CHUNK_MAGIC = b"FSCK"

#: one shared-memory access of one lane (packed, 9 bytes)
SMEM_DTYPE = np.dtype([("lane", "u1"), ("addr", "<u4"), ("nbytes", "u1"), ("store", "u1"), ("wavefront", "<u2")])

#: one row of the index per chunk; for an array chunk, cta = warp = -1 and [seq_min, seq_max) is its byte range
INDEX_DTYPE = np.dtype([
    ("kind", "u1"), ("flags", "u1"), ("nsections", "<u2"), ("cta", "<i4"), ("warp", "<i4"), ("array", "<i4"),
    ("nevents", "<u4"), ("crc", "<u4"), ("seq_min", "<i8"), ("seq_max", "<i8"), ("offset", "<u8"),
    ("stored", "<u8"), ("raw", "<u8"), ("tag_start", "<u8"), ("tag_n", "<u4"), ("reserved", "<u4"),
])

_HEAD = struct.Struct("<8sIII")           # magic, version, json length, json crc
_FOOT_BODY = struct.Struct("<QQQII")      # index offset, index length, file length, index crc, version
_FOOT = struct.Struct("<QQQIII8s")        # ... + crc of the body + END_MAGIC
_CHUNK_HEAD = struct.Struct("<4sBBHiiiI")  # magic, kind, flags, nsections, cta, warp, array, nevents
_SECTION = struct.Struct("<B3xQQ")        # codec, raw length, stored length
_U32LE = struct.Struct("<I")

KIND_EVENTS, KIND_ARRAY = 0, 1
FLAG_PLANES = 1                  # the data section is split into byte planes
CODEC_RAW, CODEC_ZLIB = 0, 1
_EVENT_FIXED = 8 + 4 + 2 + 4     # bytes per event in the seq/tag/nregs/nsmem columns
_I32_MAX, _I64_MIN, _I64_MAX = 2**31 - 1, -2**63, 2**63 - 1
_U32 = np.dtype(np.uint32)
_PLANE_BITS = 7.4               # deflate a byte plane only below this entropy (bits/byte): a gain of >= ~8%


class TraceArgumentError(TraceError, ArgumentError):
    """A bad argument to a trace writer or reader: both a TraceError (it names the file) and a ValueError."""


@dataclass(frozen=True, eq=False)
class Event:
    """One traced step of one warp: the 32 lanes' registers as bits, and optionally its shared-memory accesses.

    ``regs`` is uint32 of shape (32, nregs) (lane, register); ``smem`` a SMEM_DTYPE array or None. Events
    compare equal when every field is equal, arrays element by element (so tests can compare round trips).
    """

    cta: int
    warp: int
    seq: int
    tag: str
    regs: np.ndarray
    smem: np.ndarray | None = None

    def __eq__(self, other):
        if not isinstance(other, Event):
            return NotImplemented
        if (self.cta, self.warp, self.seq, self.tag) != (other.cta, other.warp, other.seq, other.tag):
            return False
        if self.regs.dtype != other.regs.dtype or not np.array_equal(self.regs, other.regs):
            return False
        if (self.smem is None) != (other.smem is None):
            return False
        return self.smem is None or (self.smem.dtype == other.smem.dtype and np.array_equal(self.smem, other.smem))

    __hash__ = None  # holds arrays

    def __repr__(self) -> str:
        smem = "None" if self.smem is None else f"<{len(self.smem)} accesses>"
        return (f"Event(cta={self.cta}, warp={self.warp}, seq={self.seq}, tag={self.tag!r}, "
                f"regs=<{self.regs.dtype}{self.regs.shape}>, smem={smem})")


# ---------------------------------------------------------------------------------------------- encoding


def _deflate(data, level: int, strategy: int) -> bytes:
    if strategy == zlib.Z_DEFAULT_STRATEGY:
        return zlib.compress(data, level)   # a compressobj costs ~30 us more per call
    c = zlib.compressobj(level, zlib.DEFLATED, 15, 8, strategy)
    return c.compress(data) + c.flush()


_XLOGX = np.zeros(1025)
_XLOGX[1:] = np.arange(1, 1025) * np.log2(np.arange(1, 1025))   # c log2 c for the counts of a 1 KiB window


def _entropy_bits(plane: np.ndarray) -> float:
    """Bits per byte a Huffman coder adapting block by block would need for a uint8 array, estimated from up
    to 16 windows of 1 KiB spread over it (mean of their entropies, Miller-Madow corrected): a chunk mixes
    events of different kinds, and deflate starts a new Huffman table every few thousand bytes."""
    w = min(1024, len(plane))
    m = len(plane) // w
    k = min(m, 16)
    win = plane[:m * w].reshape(m, w)[:: max(1, m // k)][:k]
    idx = win.astype(np.uint16)
    idx += (np.arange(k, dtype=np.uint16) * 256)[:, None]
    counts = np.bincount(idx.ravel(), minlength=256 * k)
    # per window: H = log2 w - sum(c log2 c) / w, plus (bins used - 1) / (2 w ln 2); the mean over windows
    h = np.log2(w) - _XLOGX[counts].sum() / (w * k)
    return float(h + (np.count_nonzero(counts) - k) / (2 * w * k * np.log(2)))


def _section(data, compress: bool, level: int, plane: bool = False) -> tuple[int, int, bytes]:
    """(codec, raw length, stored bytes) of one section: deflated when that pays, else stored raw.

    Byte planes at level 1 use zlib's run-length strategy (a Huffman coder with distance-1 matches), which
    on float bit-pattern planes compresses better than level-1 LZ77 and 2-3x faster. A plane whose bytes
    carry more than _PLANE_BITS bits of entropy (a low mantissa byte, nearly random) is stored without
    spending deflate time on it: deflating it would cost as much as a useful plane to save ~1% of the file.
    Levels 2..9 deflate every plane with LZ77 (which also finds repeated registers, e.g. an event that
    records the same values as the one before it).
    """
    raw = memoryview(data).cast("B")
    n = len(raw)
    if not compress or n < 64:
        return CODEC_RAW, n, bytes(raw)
    strategy = zlib.Z_RLE if plane and level == 1 else zlib.Z_DEFAULT_STRATEGY
    if plane and level == 1 and _entropy_bits(np.frombuffer(raw, np.uint8)) > _PLANE_BITS:
        return CODEC_RAW, n, bytes(raw)
    out = _deflate(raw, level, strategy)
    if len(out) >= n:
        return CODEC_RAW, n, bytes(raw)
    return CODEC_ZLIB, n, out


def _planes(words: np.ndarray) -> list[np.ndarray]:
    """The byte planes of a 1-D array of itemsize k: k contiguous uint8 arrays, plane p = byte p of each item."""
    b = words.view(np.uint8).reshape(-1, words.dtype.itemsize)
    return [np.ascontiguousarray(b[:, p]) for p in range(b.shape[1])]


def _assemble(kind, flags, cta, warp, array, nevents, sections) -> tuple[bytes, int, int]:
    """Chunk bytes, raw payload length and crc32 from its sections [(codec, raw length, stored bytes)]."""
    head = _CHUNK_HEAD.pack(CHUNK_MAGIC, kind, flags, len(sections), cta, warp, array, nevents)
    table = b"".join(_SECTION.pack(c, r, len(s)) for c, r, s in sections)
    payload = b"".join([head, table] + [s for _, _, s in sections])
    return payload, sum(r for _, r, _ in sections), zlib.crc32(payload)


class _KeyBuf:
    """The events of one (cta, warp) not yet written: columns as lists, registers and smem as raw bytes."""

    __slots__ = ("seqs", "tags", "nregs", "nsmem", "regs", "smem", "nbytes")

    def __init__(self):
        self.seqs, self.tags, self.nregs, self.nsmem = [], [], [], []
        self.regs, self.smem = bytearray(), bytearray()
        self.nbytes = 0


def _encode_events(key, buf: _KeyBuf, compress: bool, level: int):
    """One event chunk (run in a worker thread): sort by seq, split the registers into byte planes, deflate."""
    cta, warp = key
    seq = np.array(buf.seqs, dtype="<i8")
    tag = np.array(buf.tags, dtype="<u4")
    nregs = np.array(buf.nregs, dtype="<u2")
    nsmem = np.array(buf.nsmem, dtype="<i4")
    regs = np.frombuffer(buf.regs, dtype="<u4")
    smem = np.frombuffer(buf.smem, dtype=SMEM_DTYPE)
    n = len(seq)
    if n > 1 and not np.all(seq[1:] >= seq[:-1]):      # out of order within the buffer: stable sort by seq
        order = np.argsort(seq, kind="stable")
        rstart = np.concatenate([[0], np.cumsum(nregs.astype(np.int64) * 32)])
        counts = np.maximum(nsmem, 0).astype(np.int64)
        sstart = np.concatenate([[0], np.cumsum(counts)])
        regs = np.concatenate([regs[rstart[i]:rstart[i + 1]] for i in order]) if len(regs) else regs
        smem = np.concatenate([smem[sstart[i]:sstart[i + 1]] for i in order]) if len(smem) else smem
        seq, tag, nregs, nsmem = seq[order], tag[order], nregs[order], nsmem[order]
    sections = [_section(b"".join(a.tobytes() for a in (seq, tag, nregs, nsmem)), compress, level)]
    flags = 0
    if compress:
        flags |= FLAG_PLANES
        sections += [_section(p, compress, level, plane=True) for p in _planes(regs)]
    else:
        sections.append(_section(regs, compress, level))
    smem_cols = b"".join(np.ascontiguousarray(smem[f]).tobytes() for f in SMEM_DTYPE.names)
    sections.append(_section(smem_cols, compress, level))
    payload, raw, crc = _assemble(KIND_EVENTS, flags, cta, warp, -1, n, sections)
    ids, counts = np.unique(tag, return_counts=True)
    row = (KIND_EVENTS, flags, len(sections), cta, warp, -1, n, crc, int(seq[0]), int(seq[-1]), 0, len(payload),
           raw, 0, len(ids), 0)
    return payload, row, ids.astype("<u4"), counts.astype("<u4")


def _encode_array_part(index: int, data: np.ndarray, start: int, compress: bool, level: int):
    """One array chunk: bytes [start, start + nbytes) of array #index (1-D, C order)."""
    flags = 0
    if compress and data.dtype.itemsize in (2, 4, 8) and data.dtype.names is None:
        flags |= FLAG_PLANES
        sections = [_section(p, compress, level, plane=True) for p in _planes(data)]
    else:
        sections = [_section(np.ascontiguousarray(data).view(np.uint8), compress, level)]
    payload, raw, crc = _assemble(KIND_ARRAY, flags, -1, -1, index, 0, sections)
    row = (KIND_ARRAY, flags, len(sections), -1, -1, index, 0, crc, start, start + raw, 0, len(payload), raw, 0, 0, 0)
    return payload, row, np.zeros(0, "<u4"), np.zeros(0, "<u4")


def _descr_json(dtype: np.dtype):
    return np.lib.format.dtype_to_descr(dtype)


def _descr_dtype(descr) -> np.dtype:
    def tup(x):
        return tuple(tup(y) for y in x) if isinstance(x, list) else x
    if isinstance(descr, list):
        descr = [tup(d) for d in descr]
    return np.lib.format.descr_to_dtype(descr)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray) and o.size <= 4096:
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


# ----------------------------------------------------------------------------------------------- writing


class TraceWriter:
    """Writes a trace file as a stream; see the module docstring for the layout and the reasons for it.

    ``chunk_bytes``: raw bytes of one (cta, warp)'s buffered events that trigger writing them as a chunk (and
    the size of the parts of a large array). ``max_buffer_bytes`` (default max(64 MiB, 4 chunk_bytes)) bounds
    the events buffered over all (cta, warp) together: past it the largest buffers are written early, so a
    trace of many warps does not need chunk_bytes per warp of memory. ``compress``: "zlib" or "none";
    ``level``: 1 (default, the fast run-length mode on register byte planes) to 9 (full LZ77 search at that
    zlib level: smaller on repetitive traces, several times slower). ``threads``: compression threads (None:
    up to 4, one per core; 0: compress in the calling thread).

    Use as a context manager: on a clean exit the file is closed and published at ``path``; on an exception
    nothing is left at ``path`` and the temporary file is removed.
    """

    def __init__(self, path, meta: dict, tags: list[str], *, force: bool = False, chunk_bytes: int = 4 << 20,
                 compress: str = "zlib", level: int = 1, threads: int | None = None,
                 max_buffer_bytes: int | None = None):
        self.path = Path(path)
        self._state = "new"
        if not isinstance(meta, dict):
            raise self._arg("meta", meta, "expected a dict of JSON-able provenance")
        tags = list(tags) if not isinstance(tags, str) else tags
        if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
            raise self._arg("tags", tags, "expected a list of non-empty tag names")
        if len(set(tags)) != len(tags):
            dup = sorted({t for t in tags if tags.count(t) > 1})
            raise self._arg("tags", tags, f"tag names must be unique ({dup} repeat)")
        if compress not in ("zlib", "none", None):
            raise self._arg("compress", compress, 'expected "zlib" or "none"')
        if not isinstance(level, int) or not 1 <= level <= 9:
            raise self._arg("level", level, "expected a zlib level 1..9")
        if not isinstance(chunk_bytes, int) or chunk_bytes < 1:
            raise self._arg("chunk_bytes", chunk_bytes, "expected a positive number of bytes")
        if threads is None:
            threads = min(4, os.cpu_count() or 1)
        if not isinstance(threads, int) or threads < 0:
            raise self._arg("threads", threads, "expected None or a number of threads >= 0")
        if max_buffer_bytes is None:
            max_buffer_bytes = max(64 << 20, 4 * chunk_bytes)
        if not isinstance(max_buffer_bytes, int) or max_buffer_bytes < 1:
            raise self._arg("max_buffer_bytes", max_buffer_bytes, "expected a positive number of bytes")
        self.meta, self.tags = meta, tags
        self._tag_id = {t: i for i, t in enumerate(tags)}
        self._compress = compress == "zlib"
        self._level, self._chunk_bytes, self._max_buffer = level, chunk_bytes, max_buffer_bytes
        self._force = force
        self.bytes_in = 0
        self.n_events = 0
        self._buffered = 0
        self._bufs: dict[tuple[int, int], _KeyBuf] = {}
        self._rows: list[tuple] = []
        self._tag_ids: list[np.ndarray] = []
        self._tag_counts: list[np.ndarray] = []
        self._ntag_entries = 0
        self._arrays: list[dict] = []
        self._pending: deque = deque()
        self._max_pending = 2 * threads + 1
        from flashsim import __version__

        header = {
            "format": "flashsim-trace",
            "format_version": FORMAT_VERSION,
            "meta": meta,
            "tags": tags,
            "writer": {
                "flashsim": __version__, "python": platform.python_version(), "numpy": np.__version__,
                "zlib": zlib.ZLIB_RUNTIME_VERSION, "platform": platform.platform(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "compress": "zlib" if self._compress else "none", "level": level, "chunk_bytes": chunk_bytes,
            },
            "layout": {
                "doc": "flashsim/trace/container.py",
                "index_dtype": _descr_json(INDEX_DTYPE),
                "smem_dtype": _descr_json(SMEM_DTYPE),
                "event_sections": ["columns: seq <i8, tag <u4, nregs <u2, nsmem <i4 (-1: none), n each",
                                   "regs <u4 (32, nregs) per event, C order; 4 byte planes when flags & 1",
                                   "smem columns lane, addr, nbytes, store, wavefront"],
            },
        }
        try:
            text = json.dumps(header, allow_nan=False, default=_json_default, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            raise self._arg("meta", meta, f"not JSON-able ({e})") from None
        if not force and self.path.exists():
            raise self._exists()
        if not self.path.parent.is_dir():
            raise TraceError(f"{self.path}: directory {self.path.parent} does not exist")
        tmp = self.path.parent / f".{self.path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            self._f = open(tmp, "xb")
        except OSError as e:
            raise TraceError(f"{self.path}: cannot create the temporary file {tmp}: {e.strerror or e}") from e
        self._tmp = tmp
        self._state = "open"
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="fstrace") if threads else None
        try:
            self._f.write(_HEAD.pack(MAGIC, FORMAT_VERSION, len(text), zlib.crc32(text)) + text)
        except BaseException:
            self.abort()
            raise
        self._pos = _HEAD.size + len(text)

    # -- errors

    def _arg(self, name, value, why) -> TraceArgumentError:
        text = f"<{value.dtype} array of shape {value.shape}>" if isinstance(value, np.ndarray) else repr(value)
        if len(text) > 200:
            text = text[:200] + "..."
        return TraceArgumentError(f"{self.path}: {name}={text}: {why}")

    def _exists(self) -> TraceError:
        return TraceError(f"{self.path}: already exists; pass force=True (--force on the command line) to "
                          "overwrite it")

    def _check_open(self):
        if self._state != "open":
            raise TraceError(f"{self.path}: the writer is {self._state} (no more events or arrays)")

    # -- events

    def _int(self, name, v, lo, hi) -> int:
        try:
            i = operator.index(v)
        except TypeError:
            raise self._arg(name, v, "expected an integer") from None
        if not lo <= i <= hi:
            raise self._arg(name, v, f"expected an integer in [{lo}, {hi}]")
        return i

    def _tag(self, tag, name="tag") -> int:
        if isinstance(tag, str):
            tid = self._tag_id.get(tag)
            if tid is None:
                raise self._arg(name, tag, f"unknown tag name; the tag table is {self.tags}")
            return tid
        try:
            tid = operator.index(tag)
        except TypeError:
            raise self._arg(name, tag, "expected a tag name or a tag id") from None
        if not 0 <= tid < len(self.tags):
            raise self._arg(name, tag, f"unknown tag id; the tag table has {len(self.tags)} tags")
        return tid

    def _regs(self, regs, name="regs") -> np.ndarray:
        if not isinstance(regs, np.ndarray) or regs.dtype != np.uint32:
            what = f"a numpy {regs.dtype} array" if isinstance(regs, np.ndarray) else type(regs).__name__
            raise self._arg(name, regs, f"expected a numpy uint32 array of shape (32, nregs), got {what} "
                                        "(pass float registers as .view(np.uint32))")
        if regs.ndim != 2 or regs.shape[0] != 32:
            raise self._arg(name, regs, f"expected shape (32, nregs) (lane, register), got {regs.shape}")
        if regs.shape[1] > 0xFFFF:
            raise self._arg(name, regs, f"at most 65535 registers per event, got {regs.shape[1]}")
        if not regs.flags.c_contiguous:
            regs = np.ascontiguousarray(regs)
        return regs

    def _smem(self, smem, name="smem") -> np.ndarray:
        if not isinstance(smem, np.ndarray) or smem.ndim != 1 or smem.dtype.names != SMEM_DTYPE.names:
            raise self._arg(name, smem, f"expected None or a 1-D array of dtype {SMEM_DTYPE.descr}")
        if smem.dtype != SMEM_DTYPE:
            if any(smem.dtype.fields[f][0] != SMEM_DTYPE.fields[f][0] for f in SMEM_DTYPE.names):
                raise self._arg(name, smem, f"expected field types {SMEM_DTYPE.descr}, got {smem.dtype.descr}")
            smem = smem.astype(SMEM_DTYPE)       # same fields, other padding
        return np.ascontiguousarray(smem)

    def _append(self, key, seq: int, tid: int, regs: np.ndarray, smem) -> None:
        buf = self._bufs.get(key)
        if buf is None:
            buf = self._bufs[key] = _KeyBuf()
        buf.seqs.append(seq)
        buf.tags.append(tid)
        buf.nregs.append(regs.shape[1])
        buf.regs += regs.data
        n = regs.nbytes
        if smem is None:
            buf.nsmem.append(-1)
        else:
            buf.nsmem.append(len(smem))
            buf.smem += smem.data
            n += smem.nbytes
        self.bytes_in += n
        self.n_events += 1
        n += _EVENT_FIXED
        buf.nbytes += n
        self._buffered += n
        if buf.nbytes >= self._chunk_bytes:
            self._flush_key(key)
        elif self._buffered > self._max_buffer:
            self._flush_largest()

    def add_event(self, cta, warp, seq, tag, regs, smem=None) -> None:
        """Add one event of warp ``warp`` of CTA ``cta``; ``tag`` is a name of the tag table or its index."""
        if self._state != "open":
            self._check_open()
        # the common case checked inline (a trace can have millions of events), anything else the long way
        if type(cta) is int and type(warp) is int and 0 <= cta <= _I32_MAX and 0 <= warp <= _I32_MAX:
            key = (cta, warp)
        else:
            key = (self._int("cta", cta, 0, _I32_MAX), self._int("warp", warp, 0, _I32_MAX))
        if not (type(seq) is int and _I64_MIN <= seq <= _I64_MAX):
            seq = self._int("seq", seq, _I64_MIN, _I64_MAX)
        tid = self._tag_id.get(tag) if type(tag) is str else None
        if tid is None:
            tid = self._tag(tag)
        if not (type(regs) is np.ndarray and regs.dtype is _U32 and regs.ndim == 2 and regs.shape[0] == 32
                and regs.shape[1] <= 0xFFFF and regs.flags.c_contiguous):
            regs = self._regs(regs)
        if smem is not None:
            smem = self._smem(smem)
        self._append(key, seq, tid, regs, smem)

    def add_events(self, cta, warp, seqs, tags, regs_list, smem_list=None) -> None:
        """Add many events of one (cta, warp): ``tags`` is one tag for all or one per event; ``regs_list`` a
        sequence of (32, nregs) uint32 arrays or one (n, 32, nregs) array; ``smem_list`` None or one entry
        (array or None) per event. Everything is checked before anything is added."""
        self._check_open()
        key = (self._int("cta", cta, 0, _I32_MAX), self._int("warp", warp, 0, _I32_MAX))
        seqs = [self._int(f"seqs[{i}]", s, _I64_MIN, _I64_MAX) for i, s in enumerate(seqs)]
        n = len(seqs)
        if isinstance(tags, (str, int, np.integer)):
            tids = [self._tag(tags, "tags")] * n
        else:
            tids = [self._tag(t, f"tags[{i}]") for i, t in enumerate(tags)]
        if isinstance(regs_list, np.ndarray) and regs_list.ndim == 3 and smem_list is None:
            block = regs_list
            if block.dtype != np.uint32:
                raise self._arg("regs_list", block, "expected uint32 registers (pass floats as .view(np.uint32))")
            if block.shape[1] != 32 or block.shape[2] > 0xFFFF:
                raise self._arg("regs_list", block, "expected shape (n, 32, nregs), nregs <= 65535")
            for name, m in (("regs_list", len(block)), ("tags", len(tids))):
                if m != n:
                    raise self._arg(name, f"<{m} entries>", f"expected one per seq ({n})")
            self._append_block(key, seqs, tids, np.ascontiguousarray(block))
            return
        if isinstance(regs_list, np.ndarray) and regs_list.ndim == 3:
            regs_list = list(regs_list)
        regs_list = [self._regs(r, f"regs_list[{i}]") for i, r in enumerate(regs_list)]
        smem_list = [None] * n if smem_list is None else [
            None if s is None else self._smem(s, f"smem_list[{i}]") for i, s in enumerate(smem_list)]
        for name, lst in (("tags", tids), ("regs_list", regs_list), ("smem_list", smem_list)):
            if len(lst) != n:
                raise self._arg(name, f"<{len(lst)} entries>", f"expected one per seq ({n})")
        for s, t, r, m in zip(seqs, tids, regs_list, smem_list):
            self._append(key, s, t, r, m)

    def _append_block(self, key, seqs: list[int], tids: list[int], block: np.ndarray) -> None:
        """Events of one (cta, warp) with registers of one shape (n, 32, nregs) and no smem, added a chunk's
        worth at a time (the same chunks as event by event, without the per-event bookkeeping)."""
        n, k = len(seqs), block.shape[2]
        per = 32 * 4 * k
        i = 0
        while i < n:
            buf = self._bufs.get(key)
            if buf is None:
                buf = self._bufs[key] = _KeyBuf()
            room = self._chunk_bytes - buf.nbytes
            m = min(n - i, max(1, -(-room // (per + _EVENT_FIXED))))
            buf.seqs += seqs[i:i + m]
            buf.tags += tids[i:i + m]
            buf.nregs += [k] * m
            buf.nsmem += [-1] * m
            buf.regs += block[i:i + m].data
            self.bytes_in += per * m
            self.n_events += m
            buf.nbytes += (per + _EVENT_FIXED) * m
            self._buffered += (per + _EVENT_FIXED) * m
            i += m
            if buf.nbytes >= self._chunk_bytes:
                self._flush_key(key)
            elif self._buffered > self._max_buffer:
                self._flush_largest()

    # -- arrays

    def add_array(self, name: str, array) -> None:
        """Store a named array (any shape, any plain or structured numpy dtype) in chunks of chunk_bytes."""
        self._check_open()
        if not isinstance(name, str) or not name:
            raise self._arg("name", name, "expected a non-empty array name")
        if any(a["name"] == name for a in self._arrays):
            raise self._arg("name", name, "an array of this name was already added")
        a = np.asarray(array)
        if a.dtype.hasobject:
            raise self._arg("array", array, "object arrays cannot be stored; convert to a numeric dtype")
        descr = _descr_json(a.dtype)
        try:
            ok = _descr_dtype(json.loads(json.dumps(descr))) == a.dtype
        except Exception:
            ok = False
        if not ok:
            raise self._arg("array", f"<{a.dtype} array>", f"dtype {a.dtype} has no portable description; store a "
                            "view as a plain numpy dtype (e.g. bfloat16 as .view(np.uint16))")
        index = len(self._arrays)
        self._arrays.append({"name": name, "descr": descr, "shape": list(a.shape), "nbytes": int(a.nbytes)})
        flat = np.ascontiguousarray(a).reshape(-1)
        item = max(a.dtype.itemsize, 1)
        step = max(1, self._chunk_bytes // item)
        for s in range(0, flat.size, step):
            part = flat[s:s + step].copy() if self._pool else flat[s:s + step]   # the caller may reuse ``array``
            self._submit(_encode_array_part, index, part, s * item, self._compress, self._level)

    # -- chunks

    def _flush_key(self, key) -> None:
        buf = self._bufs.pop(key)
        self._buffered -= buf.nbytes
        self._submit(_encode_events, key, buf, self._compress, self._level)

    def _flush_largest(self) -> None:
        """Write the largest buffers until half of max_buffer_bytes is left: the warps with most data go first."""
        for key in sorted(self._bufs, key=lambda k: self._bufs[k].nbytes, reverse=True):
            if self._buffered <= self._max_buffer // 2:
                break
            self._flush_key(key)

    def _submit(self, fn, *args) -> None:
        if self._pool is None:
            self._write(fn(*args))
            return
        self._pending.append(self._pool.submit(fn, *args))
        while self._pending and (self._pending[0].done() or len(self._pending) > self._max_pending):
            self._write(self._pending.popleft().result())

    def _write(self, result) -> None:
        payload, row, ids, counts = result
        row = row[:10] + (self._pos,) + row[11:13] + (self._ntag_entries,) + row[14:]
        self._f.write(payload)
        self._pos += len(payload)
        self._rows.append(row)
        self._tag_ids.append(ids)
        self._tag_counts.append(counts)
        self._ntag_entries += len(ids)

    @property
    def buffered_bytes(self) -> int:
        """Raw bytes of events buffered now, not yet handed to compression (bounded by max_buffer_bytes)."""
        return self._buffered

    # -- finishing

    def close(self) -> None:
        """Write the buffered events, the index and the footer, fsync, and publish the file at ``path``."""
        if self._state == "closed":
            return
        self._check_open()
        try:
            for key in sorted(self._bufs):
                self._flush_key(key)
            while self._pending:
                self._write(self._pending.popleft().result())
            rows = np.array(self._rows, dtype=INDEX_DTYPE)
            ids = np.concatenate(self._tag_ids) if self._tag_ids else np.zeros(0, "<u4")
            counts = np.concatenate(self._tag_counts) if self._tag_counts else np.zeros(0, "<u4")
            info = {"chunks": len(rows), "tag_entries": len(ids), "row_dtype": _descr_json(INDEX_DTYPE),
                    "arrays": self._arrays, "events": self.n_events, "bytes_in": self.bytes_in,
                    "keys": len({(r[3], r[4]) for r in self._rows if r[0] == KIND_EVENTS})}
            text = json.dumps(info, separators=(",", ":")).encode()
            index = b"".join([_U32LE.pack(len(text)), text, rows.tobytes(), ids.astype("<u4").tobytes(),
                              counts.astype("<u4").tobytes()])
            index_offset = self._pos
            file_len = index_offset + len(index) + _FOOT.size
            body = _FOOT_BODY.pack(index_offset, len(index), file_len, zlib.crc32(index), FORMAT_VERSION)
            self._f.write(index + body + struct.pack("<I", zlib.crc32(body)) + END_MAGIC)
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            self._publish()
        except BaseException:
            self.abort()
            raise
        self._state = "closed"
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def _publish(self) -> None:
        """Move the finished temporary file onto ``path``: never over an existing file unless ``force``."""
        if self._force:
            os.replace(self._tmp, self.path)
        else:
            try:
                os.link(self._tmp, self.path)         # atomic "create if absent"
            except FileExistsError:
                raise self._exists() from None
            except OSError:                           # no hard links here: check, then rename
                if self.path.exists():
                    raise self._exists() from None
                os.replace(self._tmp, self.path)
            else:
                os.unlink(self._tmp)
        try:
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            pass  # directories cannot be fsynced everywhere; the rename itself is atomic

    def abort(self) -> None:
        """Give up: stop compression, close and remove the temporary file; nothing is written at ``path``."""
        if self._state in ("closed", "aborted", "new"):
            return
        self._state = "aborted"
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()
        self._bufs.clear()
        try:
            self._f.close()
        finally:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self):
        try:
            if getattr(self, "_state", None) == "open":
                self.abort()  # never closed: a forgotten writer leaves no stray temporary file
        except Exception:
            pass


# ----------------------------------------------------------------------------------------------- reading


class TraceReader:
    """Reads a trace file: opening checks the header, footer and index; chunks are read (and their CRC and
    contents checked) only when events or arrays in them are asked for; ``verify()`` checks them all."""

    def __init__(self, path):
        self.path = Path(path)
        self.chunks_read = 0   # chunks read so far (how many an index lookup needed)
        self._f = None
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            raise TraceError(f"{self.path}: no such file") from None
        except OSError as e:
            raise TraceError(f"{self.path}: cannot open: {e.strerror or e}") from e
        try:
            self._load(f)
        except BaseException:
            f.close()
            raise
        self._f = f

    def _err(self, msg: str) -> TraceError:
        return TraceError(f"{self.path}: {msg}")

    def _load(self, f) -> None:
        size = os.fstat(f.fileno()).st_size
        self.file_size = size
        if size == 0:
            raise self._err("empty file (not a flashsim trace, or a write that never happened)")
        head = f.read(_HEAD.size)
        if head[:8] != MAGIC[:len(head[:8])]:
            raise self._err(f"not a flashsim trace file (it starts with {head[:8]!r}, a trace with {MAGIC!r})")
        if len(head) < _HEAD.size:
            raise self._err(f"truncated: {size} bytes, shorter than the {_HEAD.size}-byte header")
        _, version, jlen, jcrc = _HEAD.unpack(head)
        if version > FORMAT_VERSION or version < 1:
            raise self._err(f"format version {version}, this flashsim reads up to {FORMAT_VERSION}"
                            + (" (upgrade flashsim)" if version > FORMAT_VERSION else ""))
        if _HEAD.size + jlen + _FOOT.size > size:
            raise self._err(f"truncated: {size} bytes, too short for its {jlen}-byte header and the footer")
        text = f.read(jlen)
        if zlib.crc32(text) != jcrc:
            raise self._err("header checksum mismatch: the JSON header is damaged")
        try:
            header = json.loads(text)
            self.meta, self.tags, self.writer = header["meta"], header["tags"], header.get("writer", {})
        except (ValueError, KeyError, TypeError) as e:
            raise self._err(f"bad JSON header ({e})") from None
        if not isinstance(self.meta, dict) or not (isinstance(self.tags, list)
                                                  and all(isinstance(t, str) for t in self.tags)):
            raise self._err("bad JSON header (meta must be an object, tags a list of names)")
        self.header = header
        self._data_start = _HEAD.size + jlen

        f.seek(size - _FOOT.size)
        foot = f.read(_FOOT.size)
        index_offset, index_len, file_len, icrc, fversion, fcrc, end = _FOOT.unpack(foot)
        if end != END_MAGIC:
            extra = self._bytes_after_end(f, size)
            if extra:
                raise self._err(f"{extra} bytes after the end of the trace (appended to a finished trace?)")
            raise self._err(f"truncated or unfinished: no end marker in its last {_FOOT.size} bytes (file is "
                            f"{size} bytes; it was cut short, or its writer did not close it)")
        if zlib.crc32(foot[:_FOOT_BODY.size]) != fcrc:
            raise self._err("footer checksum mismatch: the footer is damaged")
        if fversion != version:
            raise self._err(f"header says format version {version}, footer {fversion}: the file is damaged")
        if file_len != size:
            what = "missing (cut out, e.g. a chunk)" if size < file_len else "added"
            raise self._err(f"file is {size} bytes but was written as {file_len}: {abs(file_len - size)} bytes "
                            f"are {what}")
        if index_offset < self._data_start or index_offset + index_len + _FOOT.size != size:
            raise self._err(f"footer points the index at bytes {index_offset}..{index_offset + index_len}, "
                            f"outside the file's {size} bytes: the file is damaged")
        f.seek(index_offset)
        index = f.read(index_len)
        if len(index) != index_len:
            raise self._err("truncated inside the index")
        if zlib.crc32(index) != icrc:
            raise self._err("index checksum mismatch: the index is damaged")
        self._parse_index(index, index_offset)

    @staticmethod
    def _bytes_after_end(f, size: int) -> int:
        """How many bytes follow a valid footer in the last MiB of the file (0 if there is none)."""
        start = max(0, size - (1 << 20))
        f.seek(start)
        tail = f.read()
        at = tail.rfind(END_MAGIC)
        while at >= _FOOT.size - len(END_MAGIC):
            foot = tail[at + len(END_MAGIC) - _FOOT.size:at + len(END_MAGIC)]
            if zlib.crc32(foot[:_FOOT_BODY.size]) == _FOOT.unpack(foot)[5]:
                return len(tail) - at - len(END_MAGIC)
            at = tail.rfind(END_MAGIC, 0, at)
        return 0

    def _parse_index(self, index: bytes, index_offset: int) -> None:
        try:
            (jlen,) = _U32LE.unpack_from(index)
            info = json.loads(index[4:4 + jlen])
            n, m = int(info["chunks"]), int(info["tag_entries"])
            row_dtype = _descr_dtype(info["row_dtype"])
            arrays = info["arrays"]
        except (ValueError, KeyError, TypeError, struct.error) as e:
            raise self._err(f"bad index ({e})") from None
        if row_dtype != INDEX_DTYPE:
            raise self._err(f"index rows of an unknown layout {row_dtype} (format version {FORMAT_VERSION})")
        pos = 4 + jlen
        if len(index) != pos + n * INDEX_DTYPE.itemsize + 8 * m:
            raise self._err(f"bad index: {len(index)} bytes for {n} chunks and {m} tag entries")
        rows = np.frombuffer(index, INDEX_DTYPE, n, pos)
        pos += n * INDEX_DTYPE.itemsize
        self._tag_ids = np.frombuffer(index, "<u4", m, pos).astype(np.int64)
        self._tag_counts = np.frombuffer(index, "<u4", m, pos + 4 * m).astype(np.int64)
        self._rows, self._info = rows, info
        self.n_events = int(info.get("events", int(rows["nevents"].sum())))
        self.bytes_in = int(info.get("bytes_in", 0))
        self.n_chunks = n
        try:
            self._arrays = {a["name"]: (i, _descr_dtype(a["descr"]), tuple(a["shape"]), int(a["nbytes"]))
                            for i, a in enumerate(arrays)}
        except (ValueError, KeyError, TypeError) as e:
            raise self._err(f"bad array table in the index ({e})") from None

        # chunks lie back to back from the end of the header to the index, in index order
        ends = rows["offset"].astype(np.int64) + rows["stored"].astype(np.int64)
        starts = np.concatenate([[self._data_start], ends[:-1]]) if n else np.zeros(0, np.int64)
        bad = np.flatnonzero(rows["offset"].astype(np.int64) != starts)
        if len(bad):
            i = int(bad[0])
            raise self._err(f"{self._chunk_name(i)} should start at byte {starts[i]} but the index says "
                            f"{rows['offset'][i]}: chunk data is missing or the index is damaged")
        end = int(ends[-1]) if n else self._data_start
        if end != index_offset:
            what = f"{end - index_offset} bytes of chunk data are missing" if end > index_offset else \
                f"{index_offset - end} bytes between the chunks and the index are unaccounted for"
            raise self._err(f"the index says the chunks end at byte {end} but it starts at byte {index_offset}: "
                            f"{what}")
        kinds = rows["kind"]
        if len(np.flatnonzero((kinds != KIND_EVENTS) & (kinds != KIND_ARRAY))):
            i = int(np.flatnonzero((kinds != KIND_EVENTS) & (kinds != KIND_ARRAY))[0])
            raise self._err(f"chunk #{i}: unknown chunk kind {kinds[i]} in the index")
        ts, tn = rows["tag_start"].astype(np.int64), rows["tag_n"].astype(np.int64)
        if n and (np.any(ts != np.concatenate([[0], np.cumsum(tn)[:-1]])) or tn.sum() != m):
            raise self._err("bad index: the per-chunk tag lists do not tile the tag table of the index")
        self._entry_chunk = np.repeat(np.arange(n), tn)
        bad = np.flatnonzero(self._tag_ids >= len(self.tags))
        if len(bad):
            e = int(bad[0])
            raise self._err(f"unknown tag id {self._tag_ids[e]} in the index entry of "
                            f"{self._chunk_name(int(self._entry_chunk[e]))}; the tag table has {len(self.tags)} tags")
        sums = np.bincount(self._entry_chunk, weights=self._tag_counts, minlength=n).astype(np.int64)
        bad = np.flatnonzero(sums != rows["nevents"].astype(np.int64))
        if len(bad):
            raise self._err(f"bad index: the tag counts of {self._chunk_name(int(bad[0]))} do not add up to its "
                            "event count")
        ev = kinds == KIND_EVENTS
        if np.any(ev & ((rows["cta"] < 0) | (rows["warp"] < 0) | (rows["nevents"] == 0))):
            raise self._err("bad index: an event chunk without a (cta, warp) or without events")
        ar = np.flatnonzero(~ev)
        if len(ar) and np.any((rows["array"][ar] < 0) | (rows["array"][ar] >= len(self._arrays))):
            raise self._err("bad index: an array chunk of an unknown array")
        self._events_mask = ev

    # -- helpers

    def _chunk_name(self, i: int) -> str:
        r = self._rows[i]
        if r["kind"] == KIND_EVENTS:
            return f"chunk #{i} (cta={r['cta']} warp={r['warp']})"
        names = list(self._arrays) if hasattr(self, "_arrays") else []
        a = int(r["array"])
        name = repr(names[a]) if 0 <= a < len(names) else f"#{a}"
        return f"chunk #{i} (array {name}, bytes {r['seq_min']}..{r['seq_max']})"

    def _check_open(self):
        if self._f is None:
            raise TraceError(f"{self.path}: the reader is closed")

    def _sections(self, i: int) -> list[bytes]:
        """Read chunk ``i``, check its CRC and header against the index, and return its decoded sections."""
        self._check_open()
        r = self._rows[i]
        off, stored = int(r["offset"]), int(r["stored"])
        self._f.seek(off)
        payload = self._f.read(stored)
        self.chunks_read += 1
        name = self._chunk_name(i)
        if len(payload) != stored:
            raise self._err(f"{name}: truncated ({len(payload)} of {stored} bytes at byte {off})")
        crc = zlib.crc32(payload)
        if crc != int(r["crc"]):
            raise self._err(f"{name} at byte {off}: checksum mismatch (crc32 {crc:#010x}, the index says "
                            f"{int(r['crc']):#010x}): the chunk is damaged")
        head = _CHUNK_HEAD.unpack_from(payload) if stored >= _CHUNK_HEAD.size else None
        expect = (CHUNK_MAGIC, int(r["kind"]), int(r["flags"]), int(r["nsections"]), int(r["cta"]), int(r["warp"]),
                  int(r["array"]), int(r["nevents"]))
        if head != expect:
            raise self._err(f"{name}: chunk header {head} does not match the index {expect}")
        nsec = expect[3]
        pos = _CHUNK_HEAD.size + nsec * _SECTION.size
        table = [_SECTION.unpack_from(payload, _CHUNK_HEAD.size + k * _SECTION.size) for k in range(nsec)]
        if pos + sum(t[2] for t in table) != stored or sum(t[1] for t in table) != int(r["raw"]):
            raise self._err(f"{name}: its section table does not match its length")
        out = []
        for k, (codec, raw, slen) in enumerate(table):
            data = payload[pos:pos + slen]
            pos += slen
            if codec == CODEC_ZLIB:
                try:
                    data = zlib.decompress(data, 15, max(raw, 1))
                except zlib.error as e:
                    raise self._err(f"{name}: section {k} does not inflate ({e})") from None
            elif codec != CODEC_RAW:
                raise self._err(f"{name}: section {k} has unknown codec {codec}")
            if len(data) != raw:
                raise self._err(f"{name}: section {k} is {len(data)} bytes, the table says {raw}")
            out.append(data)
        return out

    @staticmethod
    def _unplane(planes: list[bytes]) -> np.ndarray:
        """Interleave k byte planes back into items of k bytes: an (items, k) uint8 array."""
        out = np.empty((len(planes[0]), len(planes)), np.uint8)
        for p, b in enumerate(planes):
            out[:, p] = np.frombuffer(b, np.uint8)
        return out

    def _decode_events(self, i: int):
        """Columns of event chunk ``i``: seq, tag ids, per-event register and smem offsets, regs, smem."""
        r = self._rows[i]
        n, name = int(r["nevents"]), self._chunk_name(i)
        sec = self._sections(i)
        planes = bool(r["flags"] & FLAG_PLANES)
        if len(sec) != (6 if planes else 3):
            raise self._err(f"{name}: {len(sec)} sections, an event chunk has {6 if planes else 3}")
        if len(sec[0]) != _EVENT_FIXED * n:
            raise self._err(f"{name}: event columns of the wrong length for {n} events")
        seq = np.frombuffer(sec[0], "<i8", n, 0)
        tag = np.frombuffer(sec[0], "<u4", n, 8 * n)
        nregs = np.frombuffer(sec[0], "<u2", n, 12 * n).astype(np.int64)
        nsmem = np.frombuffer(sec[0], "<i4", n, 14 * n).astype(np.int64)
        if planes:
            if len({len(p) for p in sec[1:5]}) != 1:
                raise self._err(f"{name}: register byte planes of different lengths")
            regs = self._unplane(sec[1:5]).view("<u4").reshape(-1)
        else:
            if len(sec[1]) % 4:
                raise self._err(f"{name}: register section not a whole number of words")
            regs = np.frombuffer(sec[1], "<u4")
        roff = np.concatenate([[0], np.cumsum(nregs * 32)])
        soff = np.concatenate([[0], np.cumsum(np.maximum(nsmem, 0))])
        if roff[-1] != len(regs):
            raise self._err(f"{name}: {len(regs)} register words, the events need {roff[-1]}")
        ns = int(soff[-1])
        if len(sec[-1]) != ns * SMEM_DTYPE.itemsize:
            raise self._err(f"{name}: {len(sec[-1])} bytes of shared-memory records, the events need {ns}")
        smem = np.empty(ns, SMEM_DTYPE)
        pos = 0
        for f in SMEM_DTYPE.names:
            dt = SMEM_DTYPE.fields[f][0]
            smem[f] = np.frombuffer(sec[-1], dt, ns, pos)
            pos += ns * dt.itemsize
        if n and (seq[0] != r["seq_min"] or seq[-1] != r["seq_max"] or np.any(seq[1:] < seq[:-1])):
            raise self._err(f"{name}: its seq range or order does not match the index")
        if n and int(tag.max()) >= len(self.tags):
            bad = int(tag[tag >= len(self.tags)][0])
            raise self._err(f"{name}: unknown tag id {bad}; the tag table has {len(self.tags)} tags")
        ids, counts = np.unique(tag, return_counts=True)
        s, t = int(r["tag_start"]), int(r["tag_n"])
        if not (np.array_equal(ids, self._tag_ids[s:s + t]) and np.array_equal(counts, self._tag_counts[s:s + t])):
            raise self._err(f"{name}: its tags {dict(zip(ids.tolist(), counts.tolist()))} do not match the index")
        return seq, tag, roff, nregs, soff, nsmem, regs, smem

    def _chunk_events(self, i: int, tagset, lo, hi) -> Iterator[Event]:
        seq, tag, roff, nregs, soff, nsmem, regs, smem = self._decode_events(i)
        keep = np.ones(len(seq), bool)
        if tagset is not None:
            keep &= np.isin(tag, tagset)
        if lo is not None:
            keep &= seq >= lo
        if hi is not None:
            keep &= seq < hi
        cta, warp, tags = int(self._rows[i]["cta"]), int(self._rows[i]["warp"]), self.tags
        for j in np.flatnonzero(keep).tolist():
            k = int(nregs[j])
            ns = int(nsmem[j])
            ev_smem = None if ns < 0 else smem[soff[j]:soff[j] + ns]
            yield Event(cta, warp, int(seq[j]), tags[tag[j]], regs[roff[j]:roff[j + 1]].reshape(32, k), ev_smem)

    def _tag_filter(self, tags):
        if tags is None:
            return None
        if isinstance(tags, (str, int, np.integer)):
            tags = [tags]
        out = []
        for t in tags:
            if isinstance(t, str):
                if t not in self.tags:
                    raise TraceArgumentError(f"{self.path}: tags={t!r}: unknown tag name; the tag table is {self.tags}")
                out.append(self.tags.index(t))
            else:
                try:
                    tid = operator.index(t)
                except TypeError:
                    raise TraceArgumentError(f"{self.path}: tags={t!r}: expected tag names or ids") from None
                if not 0 <= tid < len(self.tags):
                    raise TraceArgumentError(f"{self.path}: tags={t!r}: unknown tag id; the tag table has "
                                             f"{len(self.tags)} tags")
                out.append(tid)
        return np.array(sorted(set(out)), np.int64)

    def _select(self, cta, warp, tagset) -> np.ndarray:
        """Indices of the event chunks that can hold matching events, from the index alone."""
        rows = self._rows
        m = self._events_mask.copy()
        if cta is not None:
            m &= rows["cta"] == operator.index(cta)
        if warp is not None:
            m &= rows["warp"] == operator.index(warp)
        if tagset is not None:
            has = np.zeros(len(rows), bool)
            has[self._entry_chunk[np.isin(self._tag_ids, tagset)]] = True
            m &= has
        return m

    # -- the API

    def keys(self) -> list[tuple[int, int]]:
        """The (cta, warp) pairs that have events, sorted."""
        r = self._rows[self._events_mask]
        return sorted(set(zip(r["cta"].tolist(), r["warp"].tolist())))

    def events(self, cta=None, warp=None, tags=None, seq_range=None) -> Iterator[Event]:
        """Events in (cta, warp, seq) order (events of equal seq in the order they were added), filtered by
        cta, warp, tags (a name, an id, or an iterable of them) and seq_range = (lo, hi): lo <= seq < hi
        (either end may be None). Only the chunks that the index says can match are read."""
        tagset = self._tag_filter(tags)
        lo = hi = None
        if seq_range is not None:
            try:
                lo, hi = seq_range
            except (TypeError, ValueError):
                raise TraceArgumentError(f"{self.path}: seq_range={seq_range!r}: expected (lo, hi)") from None
        m = self._select(cta, warp, tagset)
        rows = self._rows
        if lo is not None:
            m &= rows["seq_max"] >= lo
        if hi is not None:
            m &= rows["seq_min"] < hi
        idx = np.flatnonzero(m)
        idx = idx[np.lexsort((rows["offset"][idx], rows["warp"][idx], rows["cta"][idx]))]
        return self._iter(idx, tagset, lo, hi)

    def _iter(self, idx, tagset, lo, hi) -> Iterator[Event]:
        rows = self._rows
        start = 0
        while start < len(idx):
            key = (rows["cta"][idx[start]], rows["warp"][idx[start]])
            end = start
            while end < len(idx) and (rows["cta"][idx[end]], rows["warp"][idx[end]]) == key:
                end += 1
            group = idx[start:end].tolist()
            start = end
            ordered = all(rows["seq_min"][b] >= rows["seq_max"][a] for a, b in zip(group, group[1:]))
            if ordered:
                for i in group:
                    yield from self._chunk_events(i, tagset, lo, hi)
            else:   # seq ranges of this warp's chunks overlap (events added out of order): merge them
                yield from heapq.merge(*(self._chunk_events(i, tagset, lo, hi) for i in group), key=lambda e: e.seq)

    def count(self, cta=None, warp=None, tags=None) -> int:
        """How many events match, from the index alone (no chunk is read)."""
        tagset = self._tag_filter(tags)
        m = self._select(cta, warp, tagset)
        if tagset is None:
            return int(self._rows["nevents"][m].sum())
        e = m[self._entry_chunk] & np.isin(self._tag_ids, tagset)
        return int(self._tag_counts[e].sum())

    def array_names(self) -> list[str]:
        return list(self._arrays)

    def array(self, name: str) -> np.ndarray:
        """The stored array ``name`` (a fresh, writeable array of the stored dtype and shape)."""
        if name not in self._arrays:
            raise TraceArgumentError(f"{self.path}: name={name!r}: no such array; the trace has "
                                     f"{list(self._arrays)}")
        index, dtype, shape, nbytes = self._arrays[name]
        rows = self._rows
        parts = np.flatnonzero((rows["kind"] == KIND_ARRAY) & (rows["array"] == index))
        parts = parts[np.argsort(rows["seq_min"][parts], kind="stable")]
        out = bytearray(nbytes)
        pos = 0
        for i in parts.tolist():
            s, e = int(rows["seq_min"][i]), int(rows["seq_max"][i])
            if s != pos or e > nbytes:
                break
            sec = self._sections(i)
            if rows["flags"][i] & FLAG_PLANES:
                if len({len(p) for p in sec}) != 1 or len(sec) != dtype.itemsize:
                    raise self._err(f"{self._chunk_name(i)}: bad byte planes")
                data = self._unplane(sec).reshape(-1)
            else:
                data = np.frombuffer(b"".join(sec), np.uint8)
            if len(data) != e - s:
                raise self._err(f"{self._chunk_name(i)}: {len(data)} bytes, the index says {e - s}")
            out[s:e] = data.data
            pos = e
        if pos != nbytes:
            raise self._err(f"array {name!r}: bytes {pos}..{nbytes} of {nbytes} are missing (a chunk is lost)")
        if nbytes == 0:
            return np.zeros(shape, dtype)
        return np.frombuffer(out, dtype=dtype).reshape(shape)

    def verify(self) -> None:
        """Read every chunk, check every checksum and decode everything; raise TraceError on the first problem."""
        for i in range(len(self._rows)):
            if self._rows["kind"][i] == KIND_EVENTS:
                self._decode_events(i)
        for name in self._arrays:
            self.array(name)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        # a reader dropped without close() (an exception between open and use) releases its file too
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass

    def __repr__(self) -> str:
        return (f"TraceReader({str(self.path)!r}: {self.n_events} events of {len(self.keys())} warps, "
                f"{len(self._arrays)} arrays, {self.n_chunks} chunks)")


def open_trace(path) -> TraceReader:
    """Open a trace file for reading (a TraceError names the file and what is wrong with it)."""
    return TraceReader(path)
