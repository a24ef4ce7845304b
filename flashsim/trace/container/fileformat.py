"""The trace file format: its constants, the structures of its header, chunks, index and footer, and the
:class:`Event` records it holds.

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
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from flashsim.errors import ArgumentError, TraceError

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


def _descr_json(dtype: np.dtype):
    return np.lib.format.dtype_to_descr(dtype)


def _descr_dtype(descr) -> np.dtype:
    def tup(x):
        return tuple(tup(y) for y in x) if isinstance(x, list) else x
    if isinstance(descr, list):
        descr = [tup(d) for d in descr]
    return np.lib.format.descr_to_dtype(descr)
