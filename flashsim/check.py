"""``flashsim check``: run the FlashAttention twins on random inputs and say how they did.

Per kernel: the simulator's wall time, the error of out (and LSE) against the float64 reference with
flash-attn's acceptance rule, the shared-memory bank report of the launch per source line (from running the
kernel's own cubin in the SASS interpreter: ``flashsim.cuda.checking``), and with ``--gpu`` whether the
CUDA kernel's out (and LSE) are bit-identical to the twin's. Exit status 0 when every kernel passes, 1
otherwise.
"""

from __future__ import annotations

from flashsim.options import non_negative_int, positive_int

import sys
import time

import ml_dtypes
import numpy as np

from flashsim.kernels import TWINS, run_twin

_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="run the FlashAttention kernels' twins on random inputs: error vs float64, "
                                     "bank conflicts per source line, time; --gpu: bit-identity with the CUDA kernels",
                       description=__doc__)
    p.add_argument("--kernel", default="fa2,kernel1,v5,v6", help=f"comma-separated, from {','.join(TWINS)} "
                                                                 "(default: all)")
    add_problem_arguments(p)
    p.add_argument("--gpu", action="store_true", help="also run the CUDA kernels (cupy) and compare bit for bit")
    p.add_argument("--no-banks", action="store_true", help="skip the bank report (it runs each kernel's cubin in "
                                                          "the SASS interpreter)")
    p.add_argument("--bank-lines", type=positive_int, default=8, help="source lines shown per kernel in the bank "
                                                                      "report, worst first (default 8)")
    p.set_defaults(func=cmd_check)


def add_problem_arguments(p, seqlen: int = 256, headdim: int = 128, heads: int = 2) -> None:
    """The options that describe one attention problem (shared by ``check`` and ``trace record``)."""
    p.add_argument("--batch", type=positive_int, default=1)
    p.add_argument("--heads", type=positive_int, default=heads)
    p.add_argument("--heads-k", type=positive_int, default=None, help="kv heads (GQA/MQA; default: --heads)")
    p.add_argument("--seqlen", type=positive_int, default=seqlen, help="seqlen_q (and seqlen_k unless --seqlen-k)")
    p.add_argument("--seqlen-k", type=non_negative_int, default=None)
    p.add_argument("--headdim", type=positive_int, default=headdim)
    p.add_argument("--dtype", choices=sorted(_DTYPES), default="float16")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--window", type=int, nargs=2, metavar=("LEFT", "RIGHT"), default=(-1, -1))
    p.add_argument("--softcap", type=float, default=0.0)
    p.add_argument("--scale", type=float, default=None, help="softmax_scale (default headdim^-0.5)")
    p.add_argument("--seed", type=non_negative_int, default=0)


def _progress(label):
    state = {"t": time.perf_counter(), "last": 0.0}

    def show(done, total):
        now = time.perf_counter()
        if now - state["last"] > 1.0 or done == total:
            state["last"] = now
            sys.stderr.write(f"\r  {label}: {done}/{total} CTAs, {now - state['t']:.1f} s")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()
    return show


def bank_report(kernel: str, q, k, v, **kw):
    """The :class:`flashsim.sass.checking.Report` (banks) of one launch of ``kernel``'s cubin in the SASS
    interpreter on these inputs."""
    import flashsim.cuda as fc
    from gpu.fa_kernels import run_kernel

    with fc.checking(banks=True) as report:
        run_kernel(kernel, q, k, v, backend="interp", **kw)
    return report


def print_banks(report, lines: int) -> None:
    """The bank part of ``flashsim check``: per kernel totals, then the worst source lines."""
    for name, t in report.bank_totals().items():
        print(f"  shared-memory banks ({name}, executed in the SASS interpreter): {t['executions']:,} warp "
              f"instructions, {t['wavefronts']:,} wavefronts, {t['ideal']:,} ideal, {t['conflicts']:,} conflicts")
    rows = report.banks_by_line()
    if not rows:
        return
    print(f"    {'source line':<28} {'executions':>10} {'wavefronts':>11} {'ideal':>9} {'conflicts':>10}")
    for d in rows[:lines]:
        loc = f"{d['file'].rsplit('/', 1)[-1]}:{d['line']}" if d["line"] is not None else "(no line info)"
        print(f"    {loc:<28} {d['executions']:>10,} {d['wavefronts']:>11,} {d['ideal']:>9,} {d['conflicts']:>10,}")
    if len(rows) > lines:
        print(f"    ... {len(rows) - lines} more lines (--bank-lines)")


def cmd_check(args) -> int:
    from flashsim.attention import attention_lowp, attention_reference, check_args, passes_flash_attn_rule
    from flashsim.errors import ArgumentError, bad_argument

    kernels = [k for k in args.kernel.split(",") if k]
    if not kernels:
        raise bad_argument("--kernel", args.kernel, f"name at least one kernel from {TWINS}")
    for k in kernels:
        if k not in TWINS:
            raise bad_argument("--kernel", k, f"expected names from {TWINS}")
    if args.gpu:  # before any simulation: a missing GPU is known at once
        from gpu.runtime import require_gpu

        require_gpu()
    hk = args.heads if args.heads_k is None else args.heads_k
    sk = args.seqlen if args.seqlen_k is None else args.seqlen_k
    rng = np.random.default_rng(args.seed)
    dt = _DTYPES[args.dtype]
    q = rng.standard_normal((args.batch, args.seqlen, args.heads, args.headdim)).astype(np.float32).astype(dt)
    k = rng.standard_normal((args.batch, sk, hk, args.headdim)).astype(np.float32).astype(dt)
    v = rng.standard_normal((args.batch, sk, hk, args.headdim)).astype(np.float32).astype(dt)
    kw = dict(softmax_scale=args.scale, causal=args.causal, window_size=tuple(args.window), softcap=args.softcap)
    fa_args = check_args(q, k, v, **kw)
    print(f"flashsim check: batch {args.batch}, heads {args.heads}/{hk}, seqlen {args.seqlen}/{sk}, headdim "
          f"{args.headdim}, {args.dtype}" + (", causal" if args.causal else "")
          + (f", window {tuple(args.window)}" if tuple(args.window) != (-1, -1) else "")
          + (f", softcap {args.softcap}" if args.softcap else "") + f", seed {args.seed}")
    ref = None
    failed, skipped = [], []
    for kernel in kernels:
        print(f"\n== {kernel}")
        try:
            t0 = time.perf_counter()
            if kernel == "fa2":
                from flashsim.kernels import fa2

                out, lse = fa2.run(q, k, v, progress=_progress("simulating"), **kw)
            else:
                out, lse = run_twin(kernel, q, k, v, **kw)
            t_sim = time.perf_counter() - t0
        except (NotImplementedError, ArgumentError) as exc:
            print(f"  skipped: {exc}")
            skipped.append(kernel)
            continue
        if ref is None:
            ref, ref_lse = attention_reference(q, k, v, fa_args)
        lowp, _ = attention_lowp(q, k, v, fa_args, acc="f16" if kernel in ("v5", "v6") else "f32")
        rule = passes_flash_attn_rule(out, ref, lowp)
        print(f"  simulator: {t_sim:.2f} s wall")
        print(f"  vs float64: {rule}")
        ok = bool(rule)
        if lse is not None:
            fin = np.isfinite(ref_lse)
            err = float(np.max(np.abs(lse[fin] - ref_lse[fin]), initial=0.0))
            same_inf = bool(np.array_equal(~np.isfinite(lse), ~fin))
            print(f"  LSE vs float64: max |lse - ref| = {err:.3e}; empty rows (+inf) agree: {same_inf}")
            ok &= same_inf
        if not args.no_banks:
            print_banks(bank_report(kernel, q, k, v, **kw), args.bank_lines)
        if args.gpu:
            from gpu.fa_kernels import run_kernel

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
