"""A FlashAttention kernel's FS_TRACE build run in the interpreter, recorded as a GPU run of it is.

:func:`run_fs_trace` / :func:`record_fs_trace` run a FlashAttention kernel's FS_TRACE build (the cubin
NVRTC makes of gpu/kernels/*.cu with -DFS_TRACE_BUILD, backend "interp" of flashsim.kernels.launch) in the
interpreter with the trace buffers that gpu/trace_gpu.py sets up on the GPU, and decode them the same way
(flashsim.trace.buffer),
so ``flashsim trace diff GPU.fstrace INTERP.fstrace`` compares a GPU run with an interpreted one::

    python -m flashsim.sass.fstrace fstrace --like traces/warp/fa2_hdim64_f16_empty_rows.fstrace -o interp.fstrace
    python -m flashsim.sass.fstrace fstrace --kernel fa2 --seqlen 64 --headdim 64 --cta 0 -o interp.fstrace
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

__all__ = ["main", "record_fs_trace", "run_fs_trace"]


def run_fs_trace(case, *, ctas=(0,), warps=None, cap_words: int | None = None):
    """Run ``case`` (a flashsim.kernels.problems.Case) with its kernel's FS_TRACE build in the interpreter,
    recording the CTAs ``ctas`` and warps ``warps`` (None: all 4) as gpu/trace_gpu.py does on the GPU.
    Returns a :class:`flashsim.trace.session.Run` (backend 'interp') that ``session.write`` stores."""
    import flashsim.cuda as fc
    from flashsim.attention import check_args
    from flashsim.kernels.launch import prepare
    from flashsim.kernels.problems import inputs_digest
    from flashsim.trace import buffer, session, spec
    from flashsim.trace.record import check_filter

    kernel = case.params["kernel"]
    args = check_args(case.q, case.k, case.v, **case.kwargs)
    headdim, steps, n_ctas = spec.instance(kernel, args)
    ctas, warps = check_filter(ctas, warps, n_ctas)
    if ctas is None:
        ctas = list(range(n_ctas))
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
    meta = {"kind": "flashsim trace", "kernel": kernel, "params": {k: case.params[k] for k in session.PARAM_KEYS},
            "instance_headdim": headdim, "kv_steps": steps, "grid_ctas": n_ctas, "ctas": ctas, "warps": warps,
            "inputs_sha256": inputs_digest(case), "flashsim_version": session._version(), "backend": "interp",
            "source": session.source_info(kernel), "cubin_sha256": module.sha256, "cap_words": cap}
    arrays = {"q": case.q.view(np.uint16), "k": case.k.view(np.uint16), "v": case.v.view(np.uint16),
              "out": np.ascontiguousarray(out).view(np.uint16)}
    if lse is not None:
        arrays["lse"] = np.ascontiguousarray(lse).view(np.uint32)
    return session.Run(meta, events, arrays)


def record_fs_trace(case, path, *, ctas=(0,), warps=None, force: bool = False, cap_words: int | None = None):
    """:func:`run_fs_trace` written to ``path`` (as ``flashsim trace record`` writes a GPU run)."""
    from flashsim.trace import session

    run = run_fs_trace(case, ctas=ctas, warps=warps, cap_words=cap_words)
    session.write(run, path, force=force)
    return run


def main(argv=None) -> int:
    """``python -m flashsim.sass.fstrace fstrace ...``: an interpreted FS_TRACE run into a trace file."""
    import argparse

    from flashsim.check import add_problem_arguments
    from flashsim.errors import FlashsimError
    from flashsim.kernels.problems import KINDS
    from flashsim.trace import spec
    from flashsim.trace.cli import _ints

    p = argparse.ArgumentParser(prog="python -m flashsim.sass.fstrace", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("fstrace", help="run a kernel's FS_TRACE build in the interpreter and write its trace")
    r.add_argument("--like", type=Path, default=None,
                   help="a trace file (e.g. a GPU recording): the same problem, inputs, CTAs and warps")
    r.add_argument("--kernel", choices=spec.KERNELS, default="fa2")
    add_problem_arguments(r, seqlen=128, headdim=64, heads=1)
    r.add_argument("--kind", choices=KINDS, default="normal")
    r.add_argument("--cta", default="0", help="CTAs to record: '0,3,5-7'")
    r.add_argument("--warp", default="0-3", help="warps to record in each of those CTAs")
    r.add_argument("-o", "--output", type=Path, required=True)
    r.add_argument("--force", action="store_true")
    a = p.parse_args(argv)
    try:
        from flashsim.kernels.problems import make_case
        from flashsim.trace import session

        if a.like is not None:
            like = session.load(a.like)
            case = session.case_of(like)
            ctas, warps = like.meta["ctas"], like.meta["warps"]
        else:
            params = session.make_params(
                a.kernel, seed=a.seed, kind=a.kind, batch=a.batch, heads=a.heads, heads_k=a.heads_k,
                seqlen_q=a.seqlen, seqlen_k=a.seqlen_k, headdim=a.headdim, dtype=a.dtype, causal=a.causal,
                window_size=tuple(a.window), softcap=a.softcap, softmax_scale=a.scale)
            case = make_case(params)
            ctas, warps = _ints("--cta", a.cta), _ints("--warp", a.warp)
        run = record_fs_trace(case, a.output, ctas=ctas, warps=warps, force=a.force)
    except NotImplementedError as e:
        print(f"flashsim: error: not modelled: {e}", file=sys.stderr)
        return 2
    except (FlashsimError, OSError, ValueError) as e:
        print(f"flashsim: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {a.output}: {len(run.events)} events of the interpreted FS_TRACE build; {session.describe(run.meta)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
