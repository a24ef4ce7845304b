"""``flashsim pipeline``: the schedule of fa4h (seed 004's warp-specialised pipeline on sm_90) from a simulated
run of its cubin: the producer's loads with stage, phase, bytes, the empty-barrier waits before each and the
occupancy of the two Q stages and three K/V stages after each, checked against flashsim.attention.ws_plan;
then the consumer warpgroups' waits, releases and s0/s1 turns. Head dim 192 takes v of 128: the seed's uneven
K/V stages."""

from __future__ import annotations

import argparse

import numpy as np

from flashsim.options import positive_int

EPILOG = """examples:
  flashsim pipeline --headdim 192 --seqlen-q 256 --seqlen-k 384        the seed's table over two work tiles
  flashsim pipeline --headdim 128 --seqlen-k 1000 --causal --consumers

The interpreter runs the kernel on --ctas CTAs (default 1: one CTA walks every work tile, so phases and the
K/V stages' rounds carry over from tile to tile) and the tables are CTA --cta's. Exit status 1 when a load
differs from the plan."""


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
    p.add_argument("--ctas", type=positive_int, default=1, metavar="N", help="CTAs of the launch (default: %(default)s)")
    p.add_argument("--cta", type=int, default=0, metavar="I", help="the CTA whose schedule is shown (default: %(default)s)")
    p.add_argument("--consumers", action="store_true", help="also print the consumer warpgroups' steps")
    p.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args) -> int:
    import ml_dtypes

    from flashsim.kernels import ws_schedule as W
    from flashsim.errors import bad_argument, location

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
