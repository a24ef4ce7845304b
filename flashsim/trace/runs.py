"""A traced run of a FlashAttention kernel in memory (:class:`Run`) and in a trace file (:func:`write`,
:func:`load`): its meta, its per-warp events and its arrays.

This is the file side of the traces that :mod:`flashsim.session` records, replays and forces: it runs no
kernel, so it sits with the container below the kernels (``flashsim trace diff``, ``show`` and ``html`` read
files through it). The meta of a run keeps the problem's parameters (``PARAM_KEYS``, which
``flashsim.kernels.problems.make_case`` turns back into the inputs), the inputs' sha256, the instance, the
recorded CTAs and warps, the backend and where the run came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from flashsim.trace import spec
from flashsim.trace.container import TraceReader, TraceWriter
from flashsim.trace.diff import DiffResult, diff

__all__ = ["PARAM_KEYS", "Run", "describe", "diff_runs", "load", "write"]

#: problem parameters a trace's meta keeps (flashsim.kernels.problems.make_case regenerates the inputs); those a
#: problem does not have (attention_chunk of a kernel without chunked attention) are left out
PARAM_KEYS = ("kernel", "seed", "kind", "batch", "heads", "heads_k", "seqlen_q", "seqlen_k", "headdim", "dtype",
              "causal", "window_size", "softcap", "softmax_scale", "attention_chunk")


@dataclass
class Run:
    """A traced run in memory."""

    meta: dict
    events: list
    arrays: dict


def write(run: Run, path, *, force: bool = False, progress=None) -> Path:
    """Write ``run`` to ``path`` (atomically; an existing file only with ``force``; on any exception, Ctrl-C
    included, nothing is left at ``path`` nor a temporary file). ``progress(done, total)`` counts events."""
    path = Path(path)
    n = len(run.events)
    with TraceWriter(path, run.meta, list(spec.TAGS), force=force) as w:
        for i, e in enumerate(run.events):
            w.add_event(e.cta, e.warp, e.seq, e.tag, e.regs)
            if progress is not None and (i % 1024 == 1023 or i == n - 1):
                progress(i + 1, n)
        for name, arr in run.arrays.items():
            w.add_array(name, arr)
    return path


def load(path) -> Run:
    """A trace file's meta, events and arrays (every chunk checked)."""
    with TraceReader(path) as r:
        return Run(dict(r.meta), list(r.events()), {n: r.array(n) for n in r.array_names()})


def diff_runs(a: Run, b: Run, a_name="A", b_name="B") -> DiffResult:
    return diff(a.events, b.events, kernel=a.meta["kernel"], headdim=a.meta["instance_headdim"],
                dtype=a.meta["params"]["dtype"], a_name=a_name, b_name=b_name)


def describe(meta: dict) -> str:
    p = meta["params"]
    backend = meta.get("backend")
    where = (meta.get("device", {}).get("name", "simulator") if backend == "gpu"
             else "the SASS interpreter" if backend == "interp" else "simulator")
    return (f"{meta['kernel']} on {where}: {p['dtype']} b={p['batch']} h={p['heads']}/{p['heads_k']} "
            f"sq={p['seqlen_q']} sk={p['seqlen_k']} d={p['headdim']} {p['kind']} seed={p['seed']}; "
            f"CTAs {meta['ctas']} warps {meta['warps']}; " + json.dumps({k: p[k] for k in ("causal", "window_size",
                                                                                       "softcap", "softmax_scale")}))
