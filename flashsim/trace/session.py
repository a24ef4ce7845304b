"""Record, replay and force traces of the FlashAttention kernels (the work behind ``flashsim trace``).

A trace file (``flashsim.trace.container``) made here holds, besides the events: the problem's
parameters (``flashsim.kernels.problems``: shapes, dtype, masks, the seed and kind that regenerate the
inputs), the inputs themselves (16-bit patterns) with their sha256, the outputs (out, and lse for fa2),
the recorded CTAs and warps, and where it came from (GPU and driver, or the simulator; the CUDA source's
hash and the build options; flashsim's version).

- ``record``: run the CUDA kernel's traced build (``backend="gpu"``) or the twin (``"sim"``) and write.
- ``replay``: re-simulate a file's run from its inputs with the same filter and diff it with the file
  (events, out and lse, bit for bit).
- ``force``: re-simulate with the twin's registers replaced by the file's at every event up to a chosen
  sequence number (all events: None); the events that still differ are the steps that introduce a
  difference from a state that agreed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flashsim.errors import bad_argument
from flashsim.trace import spec
from flashsim.trace.diff import DiffResult, diff
from flashsim.trace.record import Recorder, check_filter

#: problem parameters a trace's meta keeps (flashsim.kernels.problems.make_case regenerates the inputs)
PARAM_KEYS = ("kernel", "seed", "kind", "batch", "heads", "heads_k", "seqlen_q", "seqlen_k", "headdim", "dtype",
              "causal", "window_size", "softcap", "softmax_scale")


def make_params(kernel: str, *, seed: int = 0, kind: str = "normal", batch: int = 1, heads: int = 1,
                heads_k: int | None = None, seqlen_q: int = 128, seqlen_k: int | None = None, headdim: int = 64,
                dtype: str = "float16", causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                softmax_scale: float | None = None) -> dict:
    """A problem for ``flashsim.kernels.problems.make_case``."""
    from flashsim.kernels.problems import KINDS

    if kernel not in spec.KERNELS:
        raise bad_argument("kernel", kernel, f"expected one of {spec.KERNELS}")
    if kind not in KINDS:
        raise bad_argument("kind", kind, f"expected one of {KINDS}")
    return dict(kernel=kernel, seed=int(seed), kind=kind, batch=int(batch), heads=int(heads),
                heads_k=int(heads if heads_k is None else heads_k), seqlen_q=int(seqlen_q),
                seqlen_k=int(seqlen_q if seqlen_k is None else seqlen_k), headdim=int(headdim), dtype=dtype,
                causal=bool(causal), window_size=tuple(int(x) for x in window_size), softcap=float(softcap),
                softmax_scale=None if softmax_scale is None else float(softmax_scale))


def _version() -> str:
    from flashsim import __version__

    return __version__


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


@dataclass
class Run:
    """A traced run in memory."""

    meta: dict
    events: list
    arrays: dict


def run_case(case, *, backend: str, ctas=(0,), warps=None, cap_words: int | None = None, progress=None) -> Run:
    """Run ``case`` (a flashsim.kernels.problems.Case) traced on ``backend`` ('gpu' or 'sim'); ``progress(done,
    total)`` follows the simulator's run (flashsim.kernels.PROGRESS_UNIT says what it counts)."""
    from flashsim.kernels import run_twin
    from flashsim.kernels.problems import inputs_digest

    kernel = case.params["kernel"]
    args = _args(case)
    headdim, steps, n_ctas = spec.instance(kernel, args)
    ctas, warps = check_filter(ctas, warps, n_ctas)
    meta = {"kind": "flashsim trace", "kernel": kernel, "params": {k: case.params[k] for k in PARAM_KEYS},
            "instance_headdim": headdim, "kv_steps": steps, "grid_ctas": n_ctas, "ctas": ctas, "warps": warps,
            "inputs_sha256": inputs_digest(case), "flashsim_version": _version(), "backend": backend}
    if backend == "gpu":
        from flashsim import device

        meta["device"] = device.device_info()
        meta["source"] = source_info(kernel)
        t = device.record_trace(kernel, case.q, case.k, case.v, ctas=ctas, warps=warps, cap_words=cap_words,
                                 **case.kwargs)
        out, lse, events = t.out, t.lse, t.events
        meta["cap_words"] = t.cap_words
    elif backend == "sim":
        rec = Recorder(kernel, ctas=ctas, warps=warps)
        out, lse = run_twin(kernel, case.q, case.k, case.v, rec=rec, progress=progress, **case.kwargs)
        events = rec.events
    else:
        raise bad_argument("backend", backend, "expected 'gpu' or 'sim'")
    arrays = {"q": case.q.view(np.uint16), "k": case.k.view(np.uint16), "v": case.v.view(np.uint16),
              "out": np.ascontiguousarray(out).view(np.uint16)}
    if lse is not None:
        arrays["lse"] = np.ascontiguousarray(lse).view(np.uint32)
    return Run(meta, events, arrays)


def write(run: Run, path, *, force: bool = False, progress=None) -> Path:
    """Write ``run`` to ``path`` (atomically; an existing file only with ``force``; on any exception, Ctrl-C
    included, nothing is left at ``path`` nor a temporary file). ``progress(done, total)`` counts events."""
    from flashsim.trace.container import TraceWriter

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


def record(case, path, *, backend: str = "gpu", ctas=(0,), warps=None, force: bool = False,
           cap_words: int | None = None, progress=None, write_progress=None) -> Run:
    """Record ``case`` on ``backend`` into ``path``; ``progress`` follows the simulator's run, ``write_progress``
    the writing of the events (both ``(done, total)`` callbacks)."""
    run = run_case(case, backend=backend, ctas=ctas, warps=warps, cap_words=cap_words, progress=progress)
    write(run, path, force=force, progress=write_progress)
    return run


def load(path) -> Run:
    """A trace file's meta, events and arrays (every chunk checked)."""
    from flashsim.trace.container import TraceReader

    with TraceReader(path) as r:
        return Run(dict(r.meta), list(r.events()), {n: r.array(n) for n in r.array_names()})


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


def diff_runs(a: Run, b: Run, a_name="A", b_name="B") -> DiffResult:
    return diff(a.events, b.events, kernel=a.meta["kernel"], headdim=a.meta["instance_headdim"],
                dtype=a.meta["params"]["dtype"], a_name=a_name, b_name=b_name)


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


def describe(meta: dict) -> str:
    p = meta["params"]
    where = meta.get("device", {}).get("name", "simulator") if meta.get("backend") == "gpu" else "simulator"
    return (f"{meta['kernel']} on {where}: {p['dtype']} b={p['batch']} h={p['heads']}/{p['heads_k']} "
            f"sq={p['seqlen_q']} sk={p['seqlen_k']} d={p['headdim']} {p['kind']} seed={p['seed']}; "
            f"CTAs {meta['ctas']} warps {meta['warps']}; " + json.dumps({k: p[k] for k in ("causal", "window_size",
                                                                                       "softcap", "softmax_scale")}))
