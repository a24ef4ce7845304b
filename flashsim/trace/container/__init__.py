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

The modules:

- :mod:`~flashsim.trace.container.fileformat`: the layout of a file, byte by byte, and the :class:`Event`;
- :mod:`~flashsim.trace.container.encode`: chunks encoded (byte planes, deflate);
- :mod:`~flashsim.trace.container.writer`: :class:`TraceWriter`;
- :mod:`~flashsim.trace.container.reader`: :class:`TraceReader` and its checks, :func:`open_trace`.
"""

from __future__ import annotations

from flashsim.errors import TraceError
from flashsim.trace.container.fileformat import (
    CHUNK_MAGIC, CODEC_RAW, CODEC_ZLIB, END_MAGIC, FLAG_PLANES, FORMAT_VERSION, INDEX_DTYPE, KIND_ARRAY, KIND_EVENTS,
    MAGIC, SMEM_DTYPE, Event, TraceArgumentError,
)
from flashsim.trace.container.reader import TraceReader, open_trace
from flashsim.trace.container.writer import TraceWriter

__all__ = [
    "FORMAT_VERSION", "SMEM_DTYPE", "Event", "TraceArgumentError", "TraceError", "TraceReader", "TraceWriter",
    "open_trace",
    # the constants of the format (flashsim.trace.container.fileformat)
    "CHUNK_MAGIC", "CODEC_RAW", "CODEC_ZLIB", "END_MAGIC", "FLAG_PLANES", "INDEX_DTYPE", "KIND_ARRAY", "KIND_EVENTS",
    "MAGIC",
]
