"""The encoding of chunks, run in the writer's compression threads: events of one (cta, warp) or a part of an
array, split into byte planes and deflated section by section where that pays."""

from __future__ import annotations

import zlib

import numpy as np

from flashsim.trace.container.fileformat import (
    _CHUNK_HEAD, _SECTION, CHUNK_MAGIC, CODEC_RAW, CODEC_ZLIB, FLAG_PLANES, KIND_ARRAY, KIND_EVENTS, SMEM_DTYPE,
)

_PLANE_BITS = 7.4               # deflate a byte plane only below this entropy (bits/byte): a gain of >= ~8%


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
