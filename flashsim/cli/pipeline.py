"""``flashsim pipeline``: the schedule of fa4h (seed 004's warp-specialised pipeline on sm_90) from a simulated
run of its cubin: the producer's loads with stage, phase, bytes, the empty-barrier waits before each and the
occupancy of the two Q stages and three K/V stages after each, checked against flashsim.attention.ws_plan;
then the consumer warpgroups' waits, releases and s0/s1 turns. Head dim 192 takes v of 128: the seed's uneven
K/V stages.

With --sm100-model: the protocol model of seed 004's own sm100 (Blackwell) kernel instead
(flashsim.kernels.sm100_protocol), NOT verified on hardware (no sm100 GPU is available; fa4h is the kernel
verified on hardware): its load table, its TMEM columns, its exploration under schedules, its planted bugs."""

from __future__ import annotations

import argparse

import numpy as np

from flashsim.options import non_negative_int, positive_int

EPILOG = """examples:
  flashsim pipeline --headdim 192 --seqlen-q 256 --seqlen-k 384        the seed's table over two work tiles
  flashsim pipeline --headdim 128 --seqlen-k 1000 --causal --consumers

The interpreter runs the kernel on --ctas CTAs (default 1: one CTA walks every work tile, so phases and the
K/V stages' rounds carry over from tile to tile) and the tables are CTA --cta's. Exit status 1 when a load
differs from the plan.

The sm100 protocol model (not verified on hardware; head dims 192 (v 128) or 128):
  flashsim pipeline --sm100-model --headdim 192 --seqlen-k 512                the seed's load table and TMEM plan
  flashsim pipeline --sm100-model --headdim 128 --seqlen-q 768 --schedules 100   explored under 121 schedules
  flashsim pipeline --sm100-model --mutant 3                                   a planted bug and what finds it
  flashsim pipeline --sm100-model --sweep --schedules 1000      every configuration, 1,021 schedules each; all bugs

Its CTAs follow the seed's scheduler: one persistent CTA walks every work tile for head dim 128 without
causal, otherwise each work tile is a CTA of its own (--cta picks the one shown). Exit status 1 when the model
finds a deadlock, a hazard or a stale read, or a load differs from the plan; with --mutant, when the planted
bug is not found."""


def add_parser(sub) -> None:
    p = sub.add_parser("pipeline", help="fa4h's load and consumer schedule from a simulated run, against the plan",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--headdim", type=int, default=192, choices=(64, 128, 192),
                   help="Q and K head dim; 192 takes V of 128 (default: %(default)s)")
    p.add_argument("--seqlen-q", type=positive_int, default=256, metavar="N", help="(default: %(default)s)")
    p.add_argument("--seqlen-k", type=positive_int, default=384, metavar="N", help="(default: %(default)s)")
    p.add_argument("--heads", type=positive_int, default=1, metavar="N", help="(default: %(default)s)")
    p.add_argument("--batch", type=positive_int, default=1, metavar="N", help="(default: %(default)s)")
    p.add_argument("--causal", action="store_true", help="causal mask (default: none)")
    p.add_argument("--dtype", default="bfloat16", choices=("float16", "bfloat16"), help="(default: %(default)s)")
    p.add_argument("--ctas", type=positive_int, default=None, metavar="N",
                   help="CTAs of fa4h's launch (default: 1; not with --sm100-model, whose CTAs are the seed's)")
    p.add_argument("--cta", type=int, default=0, metavar="I", help="the CTA whose schedule is shown (default: %(default)s)")
    p.add_argument("--consumers", action="store_true",
                   help="also print the consumer warpgroups' steps (--sm100-model: the MMA, softmax and correction "
                        "steps with the TMEM columns after each)")
    p.add_argument("--sm100-model", action="store_true",
                   help="the protocol model of seed 004's sm100 kernel instead of fa4h: NOT verified on hardware")
    p.add_argument("--schedules", type=non_negative_int, default=None, metavar="N",
                   help="with --sm100-model: also explore the model under the adversarial and N seeded schedules "
                        "(default: the default schedule only)")
    p.add_argument("--seed", type=non_negative_int, default=None, metavar="S",
                   help="with --sm100-model: the first schedule seed of --schedules and --mutant (default: 0)")
    p.add_argument("--sweep", action="store_true", default=None,
                   help="with --sm100-model: every configuration the model is checked on, under the adversarial and "
                        "--schedules seeded schedules (default 1000), then every planted bug")
    p.add_argument("--mutant", type=positive_int, default=None, metavar="K",
                   help="with --sm100-model: run planted protocol bug K on its own problem, under the default "
                        "schedule, then seeded ones, until its finding shows (default: none)")
    p.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args) -> int:
    import ml_dtypes

    from flashsim.kernels import ws_schedule as W
    from flashsim.errors import bad_argument, location

    if getattr(args, "sm100_model", False):
        return cmd_sm100_model(args)
    for opt in ("schedules", "seed", "mutant", "sweep"):
        if getattr(args, opt, None) is not None:
            raise bad_argument(f"--{opt}", getattr(args, opt), "only with --sm100-model")
    args.ctas = 1 if args.ctas is None else args.ctas
    if not 0 <= args.cta < args.ctas:
        raise bad_argument("--cta", args.cta, f"expected 0..{args.ctas - 1} (--ctas {args.ctas})")
    dv = 128 if args.headdim == 192 else args.headdim
    dt = np.float16 if args.dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    q = rng.standard_normal((args.batch, args.seqlen_q, args.heads, args.headdim)).astype(dt)
    k = rng.standard_normal((args.batch, args.seqlen_k, args.heads, args.headdim)).astype(dt)
    v = rng.standard_normal((args.batch, args.seqlen_k, args.heads, dv)).astype(dt)
    events, a, inst, _, _ = W.simulate(q, k, v, ctas=args.ctas, causal=args.causal)
    ctas = min(args.ctas, inst.work_tiles(a))
    if args.cta >= ctas:
        raise bad_argument("--cta", args.cta, f"the launch has {ctas} CTAs (one per work tile at most)")
    run = W.loads(events, args.cta)
    diffs = W.check_loads(run, a, inst, args.cta, ctas)
    print(f"fa4h, head dims qk {args.headdim} / v {dv}, {args.dtype}, seqlen_q {args.seqlen_q}, seqlen_k "
          f"{args.seqlen_k}, {args.heads} head(s), batch {args.batch}{', causal' if args.causal else ''}: "
          f"{ctas} CTA(s); the loads of {location(cta=args.cta)} in the interpreter's run")
    print("bytes: relative to the buffer (Q stages, or the K/V region); waits passed: the producer's empty-barrier "
          "waits since the load before (barrier@parity); plan: flashsim.attention.ws_plan\n")
    print(W.format_loads(run))
    print()
    print(f"{len(run)} loads; " + ("every one as planned" if not diffs else f"{len(diffs)} differ from the plan:"))
    for d in diffs:
        print("  " + d)
    if args.consumers:
        print()
        print(W.format_consumers(W.consumer_events(events, args.cta)))
    return 1 if diffs else 0


def cmd_sm100_model(args) -> int:
    """``--sm100-model``: the protocol model's load table, TMEM plan and findings on the problem; with
    ``--schedules`` its exploration; with ``--mutant`` a planted bug."""
    from flashsim.errors import bad_argument, location
    from flashsim.kernels import sm100_protocol as P
    from flashsim.sass.machine import BarrierDeadlock

    if args.ctas is not None:
        raise bad_argument("--ctas", args.ctas, "not with --sm100-model: its CTAs are the seed's scheduler's "
                                                "(one persistent CTA, or one per work tile)")
    if args.headdim not in (128, 192):
        raise bad_argument("--headdim", args.headdim, "the sm100 protocol model takes 128 or 192 (qk 192 / v 128)")
    seed = args.seed or 0
    print(P.BANNER)
    if args.sweep:
        if args.mutant is not None:
            raise bad_argument("--mutant", args.mutant, "not with --sweep (which runs every planted bug)")
        return sm100_sweep(1000 if args.schedules is None else args.schedules, seed)
    if args.mutant is not None:
        if args.mutant > len(P.MUTANTS):
            raise bad_argument("--mutant", args.mutant, f"expected a planted bug 1..{len(P.MUTANTS)}")
        m = P.MUTANTS[args.mutant - 1]
        prob = P.MUTANT_PROBLEMS[m.problem]
        print(f"planted bug {m.n}: {m.what}; expected: a {m.kind}")
        print(f"on its problem: {prob.describe()}\n")
        v = P.judge(m, schedules=8 if args.schedules is None else args.schedules, seed=seed)
        if not v["found"]:
            print(f"NOT FOUND under {v['tried']} schedule(s) (findings seen: {', '.join(v['kinds']) or 'none'})")
            return 1
        print(f"found as a {v['kind']} under {v['schedule']} ({v['tried']} schedule(s) tried):\n  {v['finding']}")
        return 0
    prob = P.Problem("command line", args.headdim, args.seqlen_q, args.seqlen_k, args.heads, args.batch, args.causal)
    ctas = prob.ctas()
    if not 0 <= args.cta < len(ctas):
        raise bad_argument("--cta", args.cta, f"expected 0..{len(ctas) - 1} (the model's CTAs on this problem)")
    run = P.run_model(prob.config, ctas, raise_deadlock=False)
    diffs = P.check_loads(run, args.cta)
    print(f"{prob.config.describe()}; {prob.describe()}")
    print(f"the TMA loads of {location(cta=args.cta)}: {', '.join(str(t) for t in ctas[args.cta])}")
    print("bytes: relative to the buffer (sQ, or the K/V region); smem: absolute; fill: the full barrier's phase "
          "the load completes; waits passed: the load warp's empty-barrier waits since the load before "
          "(barrier@parity); plan: flashsim.attention.ws_plan\n")
    print(P.format_loads(run, args.cta))
    loads = sum(ld["cta"] == args.cta for ld in run.loads)
    print(f"{loads} loads; " + ("every one as planned" if not diffs else f"{len(diffs)} differ from the plan:"))
    for d in diffs:
        print("  " + d)
    print()
    print(P.format_tmem_plan(prob.config))
    if args.consumers:
        print()
        print(P.format_tmem_steps(run, args.cta))
    print(f"\nthe default schedule ({run.steps} scheduling steps): {P.format_findings(run)}")
    bad = bool(run.findings or diffs)
    if args.schedules:
        try:
            r = P.explore_model(prob, schedules=args.schedules, seed=seed)
        except BarrierDeadlock as exc:
            print(f"explored: {exc}")
            return 1
        print("explored: " + P.format_exploration(r, args.schedules, seed))
        bad = bad or r["clean"] != r["runs"] or not r["same_outcome"]
    return 1 if bad else 0


def sm100_sweep(schedules: int, seed: int) -> int:
    """``--sm100-model --sweep``: every configuration of the model's PROBLEMS explored, then every planted bug
    judged; exit status 1 when a correct run has a finding or the outcome differs between schedules, or a bug is
    not found."""
    from flashsim.kernels import sm100_protocol as P
    from flashsim.sass.machine import BarrierDeadlock

    bad = 0
    for prob in P.PROBLEMS.values():
        print(f"{prob.name}: {prob.describe()}")
        try:
            r = P.explore_model(prob, schedules=schedules, seed=seed)
        except BarrierDeadlock as exc:
            print(f"    {exc}")
            bad += 1
            continue
        bad += r["clean"] != r["runs"] or not r["same_outcome"]
        print("    " + P.format_exploration(r, schedules, seed).replace("\n", "\n    "), flush=True)
    for m in P.MUTANTS:
        v = P.judge(m, seed=seed)
        bad += not v["found"]
        print(f"planted bug {m.n:>2} ({m.what}): "
              + (f"found as a {v['kind']} under {v['schedule']}" if v["found"] else
                 f"NOT FOUND (findings seen: {', '.join(v['kinds']) or 'none'})") + f", {v['seconds']:.2f} s", flush=True)
    return 1 if bad else 0
