"""Per-warp execution traces: the on-disk container (``flashsim.trace.container``) and what kernels record.

``container`` is the file format (writer, reader, events, checks); ``spec`` says which registers each
kernel records at each tag; ``record`` is what the twins record through; ``runs`` reads and writes a
recorded run (meta, events, arrays), ``diff`` compares two, ``html`` draws one. Running the kernels to
record, replay or force a trace is :mod:`flashsim.session`, above the kernels. Only the container's names
are imported here, so ``import flashsim.trace`` stays light (numpy and the standard library).
"""

from __future__ import annotations

from flashsim.trace.container import (
    FORMAT_VERSION,
    SMEM_DTYPE,
    Event,
    TraceArgumentError,
    TraceError,
    TraceReader,
    TraceWriter,
    open_trace,
)

__all__ = [
    "FORMAT_VERSION", "SMEM_DTYPE", "Event", "TraceArgumentError", "TraceError", "TraceReader", "TraceWriter",
    "open_trace",
]
