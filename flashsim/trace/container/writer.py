"""Writing a trace file: :class:`TraceWriter`, a stream of events and arrays buffered per (cta, warp),
encoded in a small thread pool, and published atomically with its index and footer."""

from __future__ import annotations

import json
import operator
import os
import platform
import struct
import time
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from flashsim._version import __version__
from flashsim.errors import TraceError
from flashsim.trace.container.encode import _encode_array_part, _encode_events, _KeyBuf
from flashsim.trace.container.fileformat import (
    _EVENT_FIXED, _FOOT, _FOOT_BODY, _HEAD, _I32_MAX, _I64_MAX, _I64_MIN, _U32, _U32LE, END_MAGIC, FORMAT_VERSION,
    INDEX_DTYPE, KIND_EVENTS, MAGIC, SMEM_DTYPE, TraceArgumentError, _descr_dtype, _descr_json,
)


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
    """Writes a trace file as a stream; the format: flashsim.trace.container, its fileformat.

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
            raise TraceError(f"{self.path}: cannot write in {self.path.parent} ({e.strerror or e})") from e
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
