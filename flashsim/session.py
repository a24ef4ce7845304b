"""Record, replay and force traces of the FlashAttention kernels (the work behind ``flashsim trace``).

A trace file (``flashsim.trace.container``, read and written through :mod:`flashsim.trace.runs`) made here
holds, besides the events: the problem's parameters (``flashsim.kernels.problems``: shapes, dtype, masks,
the seed and kind that regenerate the inputs), the inputs themselves (16-bit patterns) with their sha256,
the outputs (out, and lse for a kernel that writes it), the recorded CTAs and warps, and where it came from
(GPU and driver, the simulator or the SASS interpreter; the CUDA source's hash and the build options;
flashsim's version).

- ``record``: run the CUDA kernel's traced build on the GPU (``backend="gpu"``), the twin (``"sim"``) or
  the traced build's cubin in the SASS interpreter (``"interp"``, with the trace buffers gpu/trace_gpu.py
  sets up on the GPU), and write.
- ``replay``: re-simulate a file's run from its inputs with the same filter and diff it with the file
  (events, out and lse, bit for bit).
- ``force``: re-simulate with the twin's registers replaced by the file's at every event up to a chosen
  sequence number (all events: None); the events that still differ are the steps that introduce a
  difference from a state that agreed.

This module runs the kernels, so it sits above them (and above the SASS interpreter and flashsim.cuda);
what the twins record through (``flashsim.trace.record``) and the file format sit below. ``Run``,
``write``, ``load``, ``diff_runs``, ``describe`` and ``PARAM_KEYS`` are those of :mod:`flashsim.trace.runs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashsim._version import __version__
from flashsim.errors import bad_argument
from flashsim.trace import spec
from flashsim.trace.diff import DiffResult
from flashsim.trace.record import Recorder, check_filter
from flashsim.trace.runs import PARAM_KEYS, Run, describe, diff_runs, load, write

__all__ = ["BACKENDS", "PARAM_KEYS", "ReplayResult", "Run", "case_of", "describe", "diff_runs", "force", "load",
           "make_params", "record", "replay", "run_case", "source_info", "write"]

#: where a traced run runs: the CUDA build on the GPU, the twin, the CUDA build's cubin in the SASS interpreter
BACKENDS = ("gpu", "sim", "interp")


def make_params(kernel: str, *, seed: int = 0, kind: str = "normal", batch: int = 1, heads: int = 1,
                heads_k: int | None = None, seqlen_q: int = 128, seqlen_k: int | None = None, headdim: int = 64,
                dtype: str = "float16", causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                softmax_scale: float | None = None, attention_chunk: int = 0) -> dict:
    """A problem for ``flashsim.kernels.problems.make_case`` (``attention_chunk`` only for a kernel with chunked
    attention; 0, off, leaves it out)."""
    from flashsim.kernels.problems import KINDS

    if kernel not in spec.KERNELS:
        raise bad_argument("kernel", kernel, f"expected one of {spec.KERNELS}")
    if kind not in KINDS:
        raise bad_argument("kind", kind, f"expected one of {KINDS}")
    return dict(kernel=kernel, seed=int(seed), kind=kind, batch=int(batch), heads=int(heads),
                heads_k=int(heads if heads_k is None else heads_k), seqlen_q=int(seqlen_q),
                seqlen_k=int(seqlen_q if seqlen_k is None else seqlen_k), headdim=int(headdim), dtype=dtype,
                causal=bool(causal), window_size=tuple(int(x) for x in window_size), softcap=float(softcap),
                softmax_scale=None if softmax_scale is None else float(softmax_scale),
                **({"attention_chunk": int(attention_chunk)} if attention_chunk else {}))


def _args(case):
    from flashsim.attention import check_args

    return check_args(case.q, case.k, case.v, **case.kwargs)


def source_info(kernel: str) -> dict:
    """The CUDA source file, its hash (with its includes) and the build options of the traced build."""
    from flashsim.kernels.sources import source_hash
    from flashsim.kernels.spec import get

    k = get(kernel)
    return {"file": f"gpu/kernels/{k.source}", "source_hash": source_hash(k.source),
            "options": list(k.build_options(trace=True))}


def _run_interp(case, kernel: str, headdim: int, steps: int, n_ctas: int, ctas: list[int] | None, warps: list[int],
                cap_words: int | None):
    """The traced build's cubin in the SASS interpreter with the trace buffers gpu/trace_gpu.py sets up on the
    GPU, decoded the same way (flashsim.trace.buffer): (out, lse, events, the cubin's sha256, words per warp)."""
    import flashsim.cuda as fc
    from flashsim.kernels.launch import prepare
    from flashsim.trace import buffer

    ctas = list(range(n_ctas)) if ctas is None else ctas
    need = spec.warp_words(kernel, headdim, steps)
    cap = buffer.capacity(cap_words, need)
    prep = prepare(kernel, case.q, case.k, case.v, trace=True, backend="interp", **case.kwargs)
    module = prep.func.module
    slot = np.full(n_ctas, -1, np.int32)
    slot[ctas] = np.arange(len(ctas), dtype=np.int32)
    d_slot = fc.asarray(slot)
    d_buf = fc.zeros(len(ctas) * len(warps) * cap, np.uint32)
    params = module.get_global("fs_trace_params").view(np.uint64)
    params.set(buffer.params_bytes(d_buf.data.ptr, d_slot.data.ptr, cap, sum(1 << w for w in warps), len(warps)))
    try:
        out, lse = prep.result()
    finally:
        params.set(np.zeros(4, np.uint64))
    buf = d_buf.get().reshape(len(ctas), len(warps), cap)
    events, _ = buffer.decode_all(buf, ctas, warps, kernel, headdim, need)
    return out, lse, events, module.sha256, cap


def run_case(case, *, backend: str, ctas=(0,), warps=None, cap_words: int | None = None, progress=None) -> Run:
    """Run ``case`` (a flashsim.kernels.problems.Case) traced on ``backend`` (one of :data:`BACKENDS`),
    recording the CTAs ``ctas`` (None: all) and warps ``warps`` (None: every warp of a CTA); ``progress(done, total)``
    follows the simulator's run (flashsim.kernels.PROGRESS_UNIT says what it counts)."""
    from flashsim.kernels import run_twin
    from flashsim.kernels.problems import inputs_digest

    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    kernel = case.params["kernel"]
    args = _args(case)
    headdim, steps, n_ctas, n_warps = spec.instance(kernel, args)
    ctas, warps = check_filter(ctas, warps, n_ctas, n_warps)
    meta = {"kind": "flashsim trace", "kernel": kernel, "params": {k: case.params[k] for k in PARAM_KEYS if k in case.params},
            "instance_headdim": headdim, "kv_steps": steps, "grid_ctas": n_ctas, "ctas": ctas, "warps": warps,
            "inputs_sha256": inputs_digest(case), "flashsim_version": __version__, "backend": backend}
    if backend == "gpu":
        from flashsim import device

        meta["device"] = device.device_info()
        meta["source"] = source_info(kernel)
        t = device.record_trace(kernel, case.q, case.k, case.v, ctas=ctas, warps=warps, cap_words=cap_words,
                                 **case.kwargs)
        out, lse, events = t.out, t.lse, t.events
        meta["cap_words"] = t.cap_words
    elif backend == "interp":
        meta["source"] = source_info(kernel)
        out, lse, events, meta["cubin_sha256"], meta["cap_words"] = _run_interp(
            case, kernel, headdim, steps, n_ctas, ctas, warps, cap_words)
    else:
        rec = Recorder(kernel, ctas=ctas, warps=warps)
        out, lse = run_twin(kernel, case.q, case.k, case.v, rec=rec, progress=progress, **case.kwargs)
        events = rec.events
    arrays = {"q": case.q.view(np.uint16), "k": case.k.view(np.uint16), "v": case.v.view(np.uint16),
              "out": np.ascontiguousarray(out).view(np.uint16)}
    if lse is not None:
        arrays["lse"] = np.ascontiguousarray(lse).view(np.uint32)
    return Run(meta, events, arrays)


def record(case, path, *, backend: str = "gpu", ctas=(0,), warps=None, force: bool = False,
           cap_words: int | None = None, progress=None, write_progress=None) -> Run:
    """Record ``case`` on ``backend`` into ``path``; ``progress`` follows the simulator's run, ``write_progress``
    the writing of the events (both ``(done, total)`` callbacks)."""
    run = run_case(case, backend=backend, ctas=ctas, warps=warps, cap_words=cap_words, progress=progress)
    write(run, path, force=force, progress=write_progress)
    return run


def case_of(run: Run):
    """The problem of a recorded run with its inputs from the file (checked against the recorded hash;
    inputs regenerated from the seed when the file holds none)."""
    from flashsim.kernels.problems import inputs_digest, make_case

    params = dict(run.meta["params"])
    params["window_size"] = tuple(params["window_size"])
    case = make_case(params)
    if "q" in run.arrays:
        for name in ("q", "k", "v"):
            setattr(case, name, run.arrays[name].view(getattr(case, name).dtype).reshape(getattr(case, name).shape))
    got = inputs_digest(case)
    if got != run.meta["inputs_sha256"]:
        raise ValueError(f"the inputs' sha256 {got[:16]}... is not the recorded {run.meta['inputs_sha256'][:16]}...")
    return case


@dataclass
class ReplayResult:
    diff: DiffResult
    out_mismatches: int
    lse_mismatches: int | None

    @property
    def clean(self) -> bool:
        return self.diff.clean and self.out_mismatches == 0 and not self.lse_mismatches


def replay(run: Run, name: str = "trace") -> ReplayResult:
    """Re-simulate ``run`` from its inputs with its CTA/warp filter and compare (events, out, lse)."""
    case = case_of(run)
    sim = run_case(case, backend="sim", ctas=run.meta["ctas"], warps=run.meta["warps"])
    d = diff_runs(run, sim, name, "simulator")
    out_bad = int(np.count_nonzero(run.arrays["out"] != sim.arrays["out"]))
    lse_bad = None
    if "lse" in run.arrays:
        lse_bad = int(np.count_nonzero(run.arrays["lse"] != sim.arrays.get("lse")))
    return ReplayResult(d, out_bad, lse_bad)


def force(run: Run, through: int | None = None, name: str = "trace") -> tuple[DiffResult, int]:
    """Re-simulate ``run`` with the twin's registers replaced by the recording's at every event with a
    sequence number up to ``through`` (None: every event). Returns the diff of the recording against
    the forced twin and the number of events forced."""
    from flashsim.kernels import run_twin

    case = case_of(run)
    ref = {(e.cta, e.warp, e.seq): (e.tag, e.regs) for e in run.events}
    rec = Recorder(run.meta["kernel"], ctas=run.meta["ctas"], warps=run.meta["warps"], reference=ref,
                   force_through=through)
    run_twin(run.meta["kernel"], case.q, case.k, case.v, rec=rec, **case.kwargs)
    sim = Run(run.meta, rec.events, {})
    return diff_runs(run, sim, name, "forced simulator"), rec.forced
