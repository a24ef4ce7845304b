"""``flashsim check``: run the FlashAttention kernels' twins on random inputs and say how they did.

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

import argparse
import sys
import time

import numpy as np

from flashsim import check
from flashsim.cli.arguments import add_cluster_arguments, add_problem_arguments, cluster_from_args, size_options
from flashsim.kernels import run_twin
from flashsim.kernels.spec import SPECS, get
from flashsim.options import positive_int
from flashsim.progress import Progress, format_bytes, physical_memory, refuse_if_too_large

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
    p = sub.add_parser("check", help="run the FlashAttention kernels' twins on random inputs: error vs float64, "
                                     "bank conflicts per source line, time; --gpu: bit-identity with the CUDA kernels",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernel", default=",".join(check.DEFAULT_KERNELS),
                   help=f"kernels to run (default: %(default)s), comma-separated, from {','.join(SPECS)}")
    add_problem_arguments(p)
    p.add_argument("--gpu", action="store_true", help="also run the CUDA kernels (cupy) and compare bit for bit")
    p.add_argument("--no-banks", action="store_true", help="skip the bank report (it runs each kernel's cubin in "
                                                          "the SASS interpreter, the slowest part)")
    p.add_argument("--bank-lines", type=positive_int, default=8, metavar="N",
                   help="source lines shown per kernel in the bank report, worst first (default: %(default)s)")
    add_cluster_arguments(p)
    p.set_defaults(func=cmd_check)


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
            f"= 2 * max|out_lowp - ref| ({rule.max_err_lowp:.3e}) + atol ({check.ATOL:g})")


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
    LSE vs float64: the log-sum-exp of each score row (natural log, what the backward pass needs); only the
      kernels that write it have this line (fa2, its other tile configurations, fa4h)
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
    fq, fk, fv = check.fake_inputs(args.batch, args.heads, hk, args.seqlen, sk, args.headdim, args.dtype)
    fa_args = check_args(fq, fk, fv, **kw)  # bad arguments are refused before anything is allocated
    where = cluster_from_args(args, notify=lambda m: print(f"  note: {m}", flush=True))
    est = check.estimate(kernels, fq, fk, fv, kw, banks=not args.no_banks, processes=args.workers or 0)
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
    dt = check.INPUT_DTYPES[args.dtype]
    q = rng.standard_normal((args.batch, args.seqlen, args.heads, args.headdim)).astype(np.float32).astype(dt)
    k = rng.standard_normal((args.batch, sk, hk, args.headdim)).astype(np.float32).astype(dt)
    v = rng.standard_normal((args.batch, sk, hk, args.headdim)).astype(np.float32).astype(dt)

    print("  warming up: numba and NVRTC compile each kernel once (cached on disk: a first run takes minutes, "
          "later ones seconds)", flush=True)
    with Progress("warm-up", len(kernels), unit="kernel") as pr:
        t_jit = check.warm_up(kernels, q, k, v, kw, banks=not args.no_banks, gpu=args.gpu, progress=pr)
    with where as cl:
        if cl is not None:
            print(f"  cluster: the CTA batches run on {cl.describe()} ({cl.worker_threads()} worker threads)")
        if cl is not None:  # the workers compile too, once
            t0 = time.perf_counter()
            cl.client.run(check.warm_up, kernels, q[:1, :1, :1], k[:1, :1, :1], v[:1, :1, :1], kw, banks=False)
            t_jit += time.perf_counter() - t0
        print(f"  JIT warm-up (numba and NVRTC compilation, cached on disk after the first run; not in the times "
              f"below): {t_jit:.2f} s")
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
            rule = passes_flash_attn_rule(out, ref, lowp, atol=check.ATOL)
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
                    report = check.bank_report(kernel, q, k, v, progress=pr, **kw)
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
