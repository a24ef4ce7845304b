"""Reading a trace file: :class:`TraceReader` and :func:`open_trace`; the index answers lookups, chunks are
read only when their events or arrays are asked for.

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
import struct
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from flashsim.errors import TraceError
from flashsim.trace.container.fileformat import (
    _CHUNK_HEAD, _EVENT_FIXED, _FOOT, _FOOT_BODY, _HEAD, _SECTION, _U32LE, CHUNK_MAGIC, CODEC_RAW, CODEC_ZLIB,
    END_MAGIC, FLAG_PLANES, FORMAT_VERSION, INDEX_DTYPE, KIND_ARRAY, KIND_EVENTS, MAGIC, SMEM_DTYPE, Event,
    TraceArgumentError, _descr_dtype,
)


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
