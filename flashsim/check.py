"""flashsim check: run the FlashAttention kernels' twins on random inputs and say how they did.

Per kernel: the simulator's wall time, the error of out (and, for fa2, LSE) against a float64 reference with
flash-attn's acceptance rule, the shared-memory bank report of the launch per source line (from running the
kernel's own cubin in the SASS interpreter), and with --gpu whether the CUDA kernel's out (and LSE) are
bit-identical to the twin's. The one-off compilation (numba, NVRTC) is timed apart, before the kernels.
Before it starts, the run's work (tile-steps: CTAs x KV blocks) and memory are estimated, and a run beyond
this machine is refused. With ``--workers N`` (a local Dask cluster of N processes) or ``--scheduler ADDR`` (a
running one) the CTA batches of the twins and of the interpreted launches run on the cluster's workers, with the
same bits and counts (flashsim.cluster). Exit status 0 when every kernel passes, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import sys
import time

import ml_dtypes
import numpy as np

from flashsim import cluster
from flashsim.kernels import run_twin
from flashsim.kernels.spec import SPECS, get
from flashsim.options import PROBLEM_DEFAULTS, non_negative_int, positive_int
from flashsim.progress import Estimate, Progress, format_bytes, physical_memory, refuse_if_too_large

_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}

#: the option of each problem size, in the order the error messages name them
SIZE_OPTIONS = (("batch", "--batch"), ("heads", "--heads"), ("heads_k", "--heads-k"), ("seqlen", "--seqlen"),
                ("seqlen_k", "--seqlen-k"), ("headdim", "--headdim"))
#: the kernels ``flashsim check`` runs unless told: one configuration of each kernel
DEFAULT_KERNELS = tuple(name for name, spec in SPECS.items() if spec.config_of is None)
#: atol of flash-attn's acceptance rule as flashsim check applies it
ATOL = 1e-5
#: seconds a run lasts before its progress is shown (a short run stays quiet)
PROGRESS_DELAY = 1.0

EPILOG = """reading the output:
  out vs float64   flash-attn's acceptance rule: max|out - ref| <= 2 * max|out_lowp - ref| + atol, with
                   ref the float64 reference attention, out_lowp the same attention computed plainly at
                   the kernel's precisions, atol 1e-05
  LSE vs float64   the log-sum-exp of each score row; only fa2 writes it (and fa2_sm8x, fa2 with other
                   tiles; the others write out alone)
  banks            executions: shared-memory warp instructions executed; wavefronts: passes through the
                   32 banks they took; ideal: the fewest passes their bytes need; conflicts: wavefronts
                   minus ideal (extra passes from bank conflicts)

A run of more than 1e8 tile-steps (CTAs x KV blocks) or of more memory than the machine has is refused
before it starts. Progress goes to stderr: a bar on a terminal, a line per 10% otherwise."""


def add_parser(sub) -> None:
    import argparse

    p = sub.add_parser("check", help="run the FlashAttention kernels' twins on random inputs: error vs float64, "
                                     "bank conflicts per source line, time; --gpu: bit-identity with the CUDA kernels",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernel", default=",".join(DEFAULT_KERNELS),
                   help=f"kernels to run (default: %(default)s), comma-separated, from {','.join(SPECS)}")
    add_problem_arguments(p)
    p.add_argument("--gpu", action="store_true", help="also run the CUDA kernels (cupy) and compare bit for bit")
    p.add_argument("--no-banks", action="store_true", help="skip the bank report (it runs each kernel's cubin in "
                                                          "the SASS interpreter, the slowest part)")
    p.add_argument("--bank-lines", type=positive_int, default=8, metavar="N",
                   help="source lines shown per kernel in the bank report, worst first (default: %(default)s)")
    cluster.add_arguments(p)
    p.set_defaults(func=cmd_check)


def add_problem_arguments(p, seqlen: int | None = None, headdim: int | None = None, heads: int | None = None) -> None:
    """The options that describe one attention problem (shared by ``check`` and ``trace record``), with the
    defaults of PROBLEM_DEFAULTS."""
    d = PROBLEM_DEFAULTS
    p.add_argument("--batch", type=positive_int, default=d["batch"], metavar="N",
                   help="batch size (default: %(default)s)")
    p.add_argument("--heads", type=positive_int, default=d["heads"] if heads is None else heads, metavar="N",
                   help="query heads (default: %(default)s)")
    p.add_argument("--heads-k", type=positive_int, default=None, metavar="N",
                   help="key/value heads; fewer than --heads, dividing it, for GQA/MQA (default: --heads)")
    p.add_argument("--seqlen", type=positive_int, default=d["seqlen"] if seqlen is None else seqlen, metavar="N",
                   help="query sequence length seqlen_q, and seqlen_k unless --seqlen-k (default: %(default)s)")
    p.add_argument("--seqlen-k", type=non_negative_int, default=None, metavar="N",
                   help="key/value sequence length seqlen_k (default: --seqlen)")
    p.add_argument("--headdim", type=positive_int, default=d["headdim"] if headdim is None else headdim, metavar="N",
                   help="head dimension (default: %(default)s)")
    p.add_argument("--dtype", choices=sorted(_DTYPES), default=d["dtype"],
                   help="element type of q, k and v (default: %(default)s)")
    p.add_argument("--causal", action="store_true", help="causal mask, aligned to the bottom right as flash-attn does")
    p.add_argument("--window", type=int, nargs=2, metavar=("LEFT", "RIGHT"), default=(-1, -1),
                   help="local attention: keys at most LEFT before and RIGHT after the query's position, -1 for "
                        "no limit (default: -1 -1, no window)")
    p.add_argument("--softcap", type=float, default=0.0, metavar="CAP",
                   help="scores become CAP * tanh(scores / CAP); 0 turns it off (default: %(default)s)")
    p.add_argument("--scale", type=float, default=None, metavar="S",
                   help="softmax scale multiplying q.k (default: headdim^-0.5)")
    p.add_argument("--seed", type=non_negative_int, default=d["seed"],
                   help="seed of the random inputs, numpy.random.default_rng(SEED) (default: %(default)s)")


# ----------------------------------------------------------------------------------------------------
# The problem, before any array exists: shapes, work and memory
# ----------------------------------------------------------------------------------------------------


def fake_inputs(batch: int, heads: int, heads_k: int, seqlen_q: int, seqlen_k: int, headdim: int, dtype: str):
    """q, k, v of these shapes as zero-strided views of one element: the argument checks and the estimates
    read shapes and dtypes only, so nothing of the problem's size is allocated."""
    z = np.zeros((), _DTYPES[dtype])
    kv = np.broadcast_to(z, (batch, seqlen_k, heads_k, headdim))
    return np.broadcast_to(z, (batch, seqlen_q, heads, headdim)), kv, kv


def in_domain(kernel: str, q, k, v, kw: dict) -> bool:
    """Whether ``kernel`` models this call (shapes, dtype, masks): the twin's own check."""
    from flashsim.errors import ArgumentError

    try:
        get(kernel).check(q, k, v, **kw)
    except (NotImplementedError, ArgumentError):
        return False
    return True


def tile_steps(kernel: str, a) -> int:
    """CTAs x KV blocks of one launch of ``kernel`` on the call ``a`` (AttentionArgs): the unit of the work."""
    spec = get(kernel)
    return spec.twin_module.tile_steps(spec.instance_for(a), a)


def grid_ctas(kernel: str, a) -> int:
    """CTAs of one launch of ``kernel`` on the call ``a``."""
    return get(kernel).instance_for(a).ctas(a)


def kernel_memory(kernel: str, a, *, workers: int = 1, interp: bool = False) -> int:
    """Bytes the twin of ``kernel`` (or, ``interp``, its cubin in the SASS interpreter) allocates on the call
    ``a`` beyond the inputs: copies of the inputs, outputs and the working arrays of the CTAs in flight on
    ``workers`` threads (or worker processes)."""
    if interp:  # device copies of inputs and outputs, and the state of a batch of CTAs (shared memory, registers)
        nq = a.batch * a.seqlen_q * a.heads * a.headdim
        nk = a.batch * a.seqlen_k * a.heads_k * a.headdim
        return 2 * (nq + 2 * nk) + 8 * nq + 256 * 256 * 1024
    spec = get(kernel)
    return spec.twin_module.memory(spec.instance_for(a), a, workers)


def _chunk(a) -> int:
    """Score elements of one chunk of query rows of the reference attention (flashsim.attention.reference)."""
    per_row = a.batch * a.heads * max(a.seqlen_k, 1)
    rows = min(a.seqlen_q, max(1, (1 << 22) // per_row))
    return rows * per_row


def estimate(kernels, q, k, v, kw: dict, *, banks: bool = True, threads: int | None = None,
             processes: int = 0) -> Estimate:
    """Work and memory of ``flashsim check`` on this call: tile-steps of every twin (and, with ``banks``, of
    every cubin in the SASS interpreter) in its domain; the inputs, the float64 reference and the
    low-precision one, and the largest kernel's arrays (on ``threads`` threads, or, with ``processes``, on a
    local cluster of that many worker processes, each with its own copy of the inputs)."""
    from flashsim.attention import check_args
    from flashsim.kernels.common import default_threads

    a = check_args(q, k, v, **kw)
    threads = processes or (default_threads() if threads is None else threads)
    nq = a.batch * a.seqlen_q * a.heads * a.headdim
    nk = a.batch * a.seqlen_k * a.heads_k * a.headdim
    est = Estimate()
    run = [kn for kn in kernels if in_domain(kn, q, k, v, kw)]
    for kn in run:
        est.work[f"{kn} twin"] = tile_steps(kn, a)
        if banks:
            est.work[f"{kn} cubin"] = tile_steps(kn, a)
    est.memory["inputs"] = 2 * (nq + 2 * nk) + 12 * max(nq, nk)  # float64 draws, narrowed one array at a time
    chunk = _chunk(a)
    est.memory["float64 reference"] = 8 * (nq + 2 * nk) + 16 * nq + 8 * a.batch * a.heads * a.seqlen_q + 32 * chunk
    low = 4 * (nq + 2 * nk) + 10 * nq + 16 * chunk
    per_kernel = [kernel_memory(kn, a, workers=threads)
                  + (kernel_memory(kn, a, interp=True) if banks else 0) for kn in run]
    est.memory["kernels (largest)"] = low + max(per_kernel, default=0)
    if processes:
        est.memory[f"inputs in {processes} worker processes"] = processes * (2 * (nq + 2 * nk) + 8 * nq)
    return est


def size_options(args) -> str:
    """The problem-size options as given, e.g. '--batch=100000 --heads=1000': those that differ from the
    defaults (all of them when none does)."""
    given = [(flag, getattr(args, dest)) for dest, flag in SIZE_OPTIONS]
    changed = [(f, v) for (dest, f), (_, v) in zip(SIZE_OPTIONS, given)
               if v is not None and v != PROBLEM_DEFAULTS.get(dest)]
    return " ".join(f"{f}={v}" for f, v in (changed or [(f, v) for f, v in given if v is not None]))


# ----------------------------------------------------------------------------------------------------
# Warm-up, bank report, output
# ----------------------------------------------------------------------------------------------------


def _tiny(kernel: str, q, k, v):
    """A one-CTA problem in ``kernel``'s domain with this call's dtype and head dim: one block of query rows
    and one KV block (None when no instance runs this head dim)."""
    from flashsim.errors import ArgumentError

    try:
        inst = get(kernel).instance_for_headdim(q.shape[-1])
    except ArgumentError:
        return None
    return fake_inputs(1, 1, 1, inst.block_m, inst.block_n, q.shape[-1], _dtype_name(q))


def _dtype_name(x) -> str:
    return "bfloat16" if x.dtype == ml_dtypes.bfloat16 else "float16"


def warm_up(kernels, q, k, v, kw: dict, *, banks: bool, gpu: bool = False) -> float:
    """Run each kernel once on the smallest problem of its domain (its twin, with ``banks`` its cubin in the
    SASS interpreter, with ``gpu`` its CUDA build on the GPU), so that numba's compilation and NVRTC's happen
    here, once, and not inside the first kernel's time. Returns the seconds it took."""
    from flashsim.errors import ArgumentError

    t0 = time.perf_counter()
    for kernel in kernels:
        tiny = _tiny(kernel, q, k, v)
        if tiny is None:
            continue
        tq, tk, tv = (np.ascontiguousarray(x) for x in tiny)
        if not in_domain(kernel, tq, tk, tv, kw):
            continue
        try:
            run_twin(kernel, tq, tk, tv, **kw)
            if banks:
                bank_report(kernel, tq, tk, tv, **kw)
            if gpu:
                from flashsim.kernels.launch import run_kernel

                run_kernel(kernel, tq, tk, tv, **kw)
        except (NotImplementedError, ArgumentError):  # outside the kernel's domain: the run says so
            continue
    return time.perf_counter() - t0


def bank_report(kernel: str, q, k, v, progress=None, **kw):
    """The :class:`flashsim.sass.checking.Report` (banks) of one launch of ``kernel``'s cubin in the SASS
    interpreter on these inputs; ``progress(done, total)`` counts CTAs. Inside ``with flashsim.cluster.Cluster``
    the launch's CTA batches run on its workers (about 4 batches per worker)."""
    import flashsim.cuda as fc
    from flashsim.kernels.launch import prepare

    with fc.checking(banks=True) as report:
        if k.shape[1] == 0:  # flash_attn_func launches nothing
            return report
        prep = prepare(kernel, q, k, v, backend="interp", **kw)
        if prep.reset is not None:
            prep.reset()
        ctas = int(np.prod(prep.grid))
        cl = cluster.current()
        # about 10 progress steps, or 4 batches per worker of a cluster; the counts do not depend on it
        per = max(32, min(256, -(-ctas // 10))) if cl is None else max(8, cl.batch_size(ctas, 256))
        prep.func(prep.grid, (prep.threads,), prep.params, shared_mem=prep.smem,
                  exec_options=fc.ExecOptions(progress=progress, ctas_per_batch=per))
    return report


def print_banks(report, lines: int, seconds: float | None = None) -> None:
    """The bank part of ``flashsim check``: per kernel totals, then the worst source lines."""
    took = f", {seconds:.2f} s" if seconds is not None else ""
    for name, t in report.bank_totals().items():
        print(f"  shared-memory banks ({name}, executed in the SASS interpreter{took}): {t['executions']:,} "
              f"executions (warp instructions), {t['wavefronts']:,} wavefronts, {t['ideal']:,} ideal, "
              f"{t['conflicts']:,} conflicts")
    rows = report.banks_by_line()
    if not rows:
        return
    print(f"    {'source line':<28} {'executions':>10} {'wavefronts':>11} {'ideal':>9} {'conflicts':>10}")
    for d in rows[:lines]:
        loc = f"{d['file'].rsplit('/', 1)[-1]}:{d['line']}" if d["line"] is not None else "(no line info)"
        print(f"    {loc:<28} {d['executions']:>10,} {d['wavefronts']:>11,} {d['ideal']:>9,} {d['conflicts']:>10,}")
    if len(rows) > lines:
        print(f"    ... {len(rows) - lines} more lines (--bank-lines)")


def _rule_line(rule) -> str:
    verdict = "passes" if rule else "FAILS"
    cmp = "<=" if rule else ">"
    return (f"  out vs float64: {verdict}: max|out - ref| = {rule.max_err:.3e} {cmp} bound {rule.bound:.3e} "
            f"= 2 * max|out_lowp - ref| ({rule.max_err_lowp:.3e}) + atol ({ATOL:g})")


def _header(args, a, hk: int, sk: int) -> list[str]:
    mask = ", ".join(m for m in ("causal" if args.causal else "",
                                 f"window {tuple(args.window)}" if tuple(args.window) != (-1, -1) else "") if m)
    scale = f"{a.softmax_scale:.6g} ({'headdim^-0.5' if args.scale is None else '--scale'})"
    return [
        "flashsim check: the FlashAttention kernels' twins on one random problem, on the CPU",
        f"  problem: batch {args.batch}; heads {args.heads} query, {hk} key/value; seqlen {args.seqlen} query "
        f"(seqlen_q), {sk} key/value (seqlen_k); headdim {args.headdim}; {args.dtype}; "
        f"{mask or 'no mask'}" + (f"; softcap {args.softcap:g}" if args.softcap else "")
        + f"; softmax scale {scale}; inputs N(0, 1), seed {args.seed}",
    ]


LEGEND = """  reading the results:
    out vs float64: flash-attn's acceptance rule, max|out - ref| <= 2 * max|out_lowp - ref| + atol, with ref the
      float64 reference attention, out_lowp the same attention computed plainly at the kernel's precisions
      (float32 scores and row sums, P rounded to the input type; float16 accumulators for v5 and v6), atol 1e-05
    LSE vs float64: the log-sum-exp of each score row (natural log, what the backward pass needs); of the seed
      kernels only fa2 writes it (fa2_sm8x too: fa2 with other tiles), so only fa2 has this line
    banks: the kernel's own cubin run in the SASS interpreter; executions = shared-memory warp instructions
      executed, wavefronts = passes through the 32 banks they took, ideal = the fewest passes their bytes need,
      conflicts = wavefronts - ideal (the extra passes that bank conflicts cost)"""


def cmd_check(args) -> int:
    from flashsim.attention import attention_lowp, attention_reference, check_args, passes_flash_attn_rule
    from flashsim.errors import ArgumentError, bad_argument

    kernels = [k for k in args.kernel.split(",") if k]
    if not kernels:
        raise bad_argument("--kernel", args.kernel, f"name at least one kernel from {tuple(SPECS)}")
    for k in kernels:
        if k not in SPECS:
            raise bad_argument("--kernel", k, f"expected names from {tuple(SPECS)}")
    if args.gpu:  # before any simulation: a missing GPU is known at once
        from flashsim.device import require_gpu

        require_gpu()
    hk = args.heads if args.heads_k is None else args.heads_k
    sk = args.seqlen if args.seqlen_k is None else args.seqlen_k
    kw = dict(softmax_scale=args.scale, causal=args.causal, window_size=tuple(args.window), softcap=args.softcap)
    fq, fk, fv = fake_inputs(args.batch, args.heads, hk, args.seqlen, sk, args.headdim, args.dtype)
    fa_args = check_args(fq, fk, fv, **kw)  # bad arguments are refused before anything is allocated
    where = cluster.from_args(args, notify=lambda m: print(f"  note: {m}", flush=True))
    est = estimate(kernels, fq, fk, fv, kw, banks=not args.no_banks, processes=args.workers or 0)
    refuse_if_too_large(est, size_options(args),
                        "use smaller --batch, --heads, --seqlen or --seqlen-k, fewer kernels (--kernel fa2)"
                        + ("" if args.no_banks else ", or --no-banks (the SASS interpreter is the slowest part)"))
    for line in _header(args, fa_args, hk, sk):
        print(line)
    mem = physical_memory()
    print(f"  size: {est.describe()}" + (f" (this machine has {format_bytes(mem)})" if mem else ""))
    print(LEGEND)
    sys.stdout.flush()

    rng = np.random.default_rng(args.seed)
    dt = _DTYPES[args.dtype]
    q = rng.standard_normal((args.batch, args.seqlen, args.heads, args.headdim)).astype(np.float32).astype(dt)
    k = rng.standard_normal((args.batch, sk, hk, args.headdim)).astype(np.float32).astype(dt)
    v = rng.standard_normal((args.batch, sk, hk, args.headdim)).astype(np.float32).astype(dt)

    t_jit = warm_up(kernels, q, k, v, kw, banks=not args.no_banks, gpu=args.gpu)
    with where as cl:
        if cl is not None:
            print(f"  cluster: the CTA batches run on {cl.describe()} ({cl.worker_threads()} worker threads)")
        if cl is not None:  # the workers compile too, once
            t0 = time.perf_counter()
            cl.client.run(warm_up, kernels, q[:1, :1, :1], k[:1, :1, :1], v[:1, :1, :1], kw, banks=False)
            t_jit += time.perf_counter() - t0
        print(f"  JIT warm-up (numba and NVRTC compilation, once per process; not in the times below): {t_jit:.2f} s")
        ref = None
        failed, skipped = [], []
        for kernel in kernels:
            print(f"\n== {kernel}")
            sys.stdout.flush()  # what was printed comes before the progress on stderr
            try:
                t0 = time.perf_counter()
                with Progress(f"{kernel} twin", 1, unit=get(kernel).progress_unit, delay=PROGRESS_DELAY) as pr:
                    out, lse = run_twin(kernel, q, k, v, progress=pr, **kw)
                t_sim = time.perf_counter() - t0
            except (NotImplementedError, ArgumentError) as exc:
                print(f"  skipped: {exc}")
                skipped.append(kernel)
                continue
            if ref is None:
                ref, ref_lse = attention_reference(q, k, v, fa_args)
            lowp, _ = attention_lowp(q, k, v, fa_args, acc=get(kernel).acc)
            rule = passes_flash_attn_rule(out, ref, lowp, atol=ATOL)
            print(f"  simulator: {t_sim:.2f} s wall (the twin, after the warm-up)")
            print(_rule_line(rule))
            ok = bool(rule)
            if lse is not None:
                fin = np.isfinite(ref_lse)
                err = float(np.max(np.abs(lse[fin] - ref_lse[fin]), initial=0.0))
                same_inf = bool(np.array_equal(~np.isfinite(lse), ~fin))
                print(f"  LSE vs float64: max |lse - ref| = {err:.3e}; empty rows (+inf) agree: {same_inf}")
                ok &= same_inf
            if not args.no_banks:
                t0 = time.perf_counter()
                with Progress(f"{kernel} cubin in the SASS interpreter", 1, delay=PROGRESS_DELAY) as pr:
                    report = bank_report(kernel, q, k, v, progress=pr, **kw)
                print_banks(report, args.bank_lines, time.perf_counter() - t0)
            if args.gpu:
                from flashsim.kernels.launch import run_kernel

                t0 = time.perf_counter()
                g_out, g_lse = run_kernel(kernel, q, k, v, **kw)
                t_gpu = time.perf_counter() - t0
                diff = int(np.count_nonzero(g_out.view(np.uint16) != out.view(np.uint16)))
                line = f"  GPU: out {'bit-identical' if diff == 0 else f'{diff} of {out.size} elements differ'}"
                if g_lse is not None:
                    ldiff = int(np.count_nonzero(g_lse.view(np.uint32) != lse.view(np.uint32)))
                    line += f"; LSE {'bit-identical' if ldiff == 0 else f'{ldiff} of {lse.size} differ'}"
                    ok &= ldiff == 0
                print(line + f" ({t_gpu:.2f} s with transfers)")
                ok &= diff == 0
            if not ok:
                failed.append(kernel)
    ran = len(kernels) - len(skipped)
    print(f"\n{ran - len(failed)} of {ran} kernels passed" + (f"; failed: {failed}" if failed else "")
          + (f"; skipped (outside their domain): {skipped}" if skipped else ""))
    if ran == 0:
        print("flashsim check: no kernel ran: the problem lies outside every chosen kernel's domain", file=sys.stderr)
        return 1
    return 1 if failed else 0
