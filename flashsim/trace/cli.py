"""``flashsim trace``: record, diff, replay, show and browse per-warp traces.

    flashsim trace record --kernel fa2 --seqlen 200 --backend sim -o run.fstrace
    flashsim trace diff A.fstrace B.fstrace        (FS_TRACE traces, or traces of interpreted instructions)
    flashsim trace replay run.fstrace [--resume-at SEQ | --bisect]
    flashsim trace show run.fstrace --cta 0 --warp 1 --tag softmax
    flashsim trace html run.fstrace [--against other.fstrace] -o run.html

Exit status: 0 clean, 1 a divergence (diff/replay), 2 a bad argument or file.
"""

from __future__ import annotations

from flashsim.options import non_negative_int, positive_int

import sys
from pathlib import Path


def _ints(option: str, text: str) -> list[int]:
    """'0,3,5-7' -> [0, 3, 5, 6, 7]; anything else is an error naming ``option``."""
    from flashsim.errors import bad_argument

    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise bad_argument(option, text, "expected ids and ranges such as '0,3,5-7'") from None
    if not out:
        raise bad_argument(option, text, "expected at least one id, e.g. '0' or '0-3'")
    return out


def add_parser(sub) -> None:
    from flashsim.check import add_problem_arguments
    from flashsim.kernels.problems import KINDS
    from flashsim.trace import spec

    t = sub.add_parser("trace", help="per-warp traces: record (GPU or simulator), diff, replay, show, html",
                       description=__doc__)
    ts = t.add_subparsers(dest="trace_command", required=True)
    r = ts.add_parser("record", help="run a kernel traced (its CUDA build on the GPU, or its twin) and write a trace")
    r.add_argument("--kernel", choices=spec.KERNELS, default="fa2")
    add_problem_arguments(r, seqlen=128, headdim=64, heads=1)
    r.add_argument("--kind", choices=KINDS, default="normal", help="input values (flashsim.kernels.problems)")
    r.add_argument("--backend", choices=("gpu", "sim"), default="gpu")
    r.add_argument("--cta", default="0", help="CTAs to record, linear ids x + X (y + Y z): '0,3,5-7'")
    r.add_argument("--warp", default="0-3", help="warps to record in each of those CTAs")
    r.add_argument("--cap-words", type=positive_int, default=None, help="GPU buffer words per warp (default: sized from "
                                                               "the kernel's program)")
    r.add_argument("-o", "--output", type=Path, required=True)
    r.add_argument("--force", action="store_true", help="overwrite an existing file")
    r.set_defaults(func=cmd_record)

    d = ts.add_parser("diff", help="align two traces by (CTA, warp, tag, occurrence); first divergence + summary "
                                   "(also traces of interpreted instructions: flashsim.sass.tracing)")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    d.add_argument("--context", type=non_negative_int, default=3, help="events shown before the first divergence")
    d.add_argument("--cells", type=positive_int, default=8, help="lane/register cells shown")
    d.set_defaults(func=cmd_diff)

    p = ts.add_parser("replay", help="re-simulate a trace from its inputs and compare; or resume from its state")
    p.add_argument("file", type=Path)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume-at", type=non_negative_int, metavar="SEQ",
                   help="take the recorded registers at every event up to sequence number SEQ, then simulate on")
    g.add_argument("--bisect", action="store_true",
                   help="take the recorded state before every event: list the steps that introduce a difference")
    p.set_defaults(func=cmd_replay)

    s = ts.add_parser("show", help="lane x register tables of recorded events (no filter: a summary)")
    s.add_argument("file", type=Path)
    s.add_argument("--cta", type=non_negative_int)
    s.add_argument("--warp", type=non_negative_int)
    s.add_argument("--tag", choices=spec.TAGS)
    s.add_argument("--occurrence", type=non_negative_int, default=None, help="only this occurrence of the tag in the warp")
    s.add_argument("--hex", action="store_true", help="bits instead of numbers")
    s.add_argument("--max-regs", type=positive_int, default=16, help="registers per table (columns)")
    s.set_defaults(func=cmd_show)

    h = ts.add_parser("html", help="a static page: per-warp timeline of tags, divergences, registers on demand")
    h.add_argument("file", type=Path)
    h.add_argument("--against", type=Path, default=None, help="a second trace to diff against (highlighted)")
    h.add_argument("-o", "--output", type=Path, default=None, help="default: FILE with .html")
    h.add_argument("--force", action="store_true")
    h.set_defaults(func=cmd_html)


def cmd_record(args) -> int:
    from flashsim.kernels.problems import make_case
    from flashsim.trace import session

    params = session.make_params(
        args.kernel, seed=args.seed, kind=args.kind, batch=args.batch, heads=args.heads, heads_k=args.heads_k,
        seqlen_q=args.seqlen, seqlen_k=args.seqlen_k, headdim=args.headdim, dtype=args.dtype, causal=args.causal,
        window_size=tuple(args.window), softcap=args.softcap, softmax_scale=args.scale)
    case = make_case(params)
    run = session.record(case, args.output, backend=args.backend, ctas=_ints("--cta", args.cta), warps=_ints("--warp", args.warp),
                         force=args.force, cap_words=args.cap_words)
    size = args.output.stat().st_size
    print(f"wrote {args.output}: {len(run.events)} events, {size:,} bytes; {session.describe(run.meta)}")
    return 0


def _load(path):
    from flashsim.trace import session

    _not_sass(path, "this command")
    return session.load(path)


def _not_sass(path, what: str) -> None:
    """Traces of interpreted instructions (flashsim.sass.tracing) are read by ``flashsim trace diff`` only."""
    from flashsim.sass.tracing import is_sass_trace

    if is_sass_trace(path):
        raise NotImplementedError(f"{path} traces interpreted instructions (flashsim.sass.tracing): {what} reads "
                                  "traces of FS_TRACE tags; compare such traces with flashsim trace diff")


def cmd_diff(args) -> int:
    from flashsim.sass import tracediff, tracing

    sass = [tracing.is_sass_trace(p) for p in (args.a, args.b)]
    if any(sass):
        if not all(sass):
            which = args.a if sass[0] else args.b
            print(f"flashsim: error: {which} traces interpreted instructions, the other file traces FS_TRACE tags: "
                  "only traces of one kind can be compared", file=sys.stderr)
            return 2
        return tracediff.cmd_diff(args.a, args.b, context=args.context, cells=args.cells)
    a, b = _load(args.a), _load(args.b)
    for key in ("kernel", "instance_headdim"):
        if a.meta[key] != b.meta[key]:
            print(f"flashsim: error: {args.a} and {args.b} differ in {key} ({a.meta[key]} vs {b.meta[key]})",
                  file=sys.stderr)
            return 2
    ha, hb = a.meta.get("inputs_sha256"), b.meta.get("inputs_sha256")
    if ha and hb and ha != hb:
        # different inputs make every difference below expected: say so before anything else
        print(f"the two runs had different inputs (sha256 {ha[:16]} in {args.a}, {hb[:16]} in {args.b}): "
              "the differences below are not a divergence of one computation")
    from flashsim.trace.diff import diff

    d = diff(a.events, b.events, kernel=a.meta["kernel"], headdim=a.meta["instance_headdim"],
             dtype=a.meta["params"]["dtype"], a_name=str(args.a), b_name=str(args.b), context=args.context)
    print(d.format(a.meta["kernel"], a.meta["instance_headdim"], a.meta["params"]["dtype"], args.cells))
    out_bad = int((a.arrays["out"] != b.arrays["out"]).sum()) if a.arrays["out"].shape == b.arrays["out"].shape else -1
    print(f"outputs: {'bit-identical' if out_bad == 0 else f'{out_bad} elements differ' if out_bad > 0 else 'shapes differ'}")
    return 0 if d.clean and out_bad == 0 else 1


def cmd_replay(args) -> int:
    from flashsim.trace import session

    run = _load(args.file)
    k, hd, dt = run.meta["kernel"], run.meta["instance_headdim"], run.meta["params"]["dtype"]
    print(f"{args.file}: {session.describe(run.meta)}")
    if args.bisect or args.resume_at is not None:
        d, n = session.force(run, None if args.bisect else args.resume_at, name=str(args.file))
        what = "every event" if args.bisect else f"the events up to seq {args.resume_at}"
        print(f"twin forced to the recorded registers at {what} ({n} events forced)")
        if args.bisect:
            if d.clean:
                print("no step introduces a difference: every event equals the twin's step from the recorded state")
            else:
                print(f"{len(d.divergences)} events differ from the twin's step taken from the recorded state "
                      "(the steps that introduce a difference):")
                for x in d.divergences[:50]:
                    print(f"  seq {x.seq:5d} CTA {x.cta} warp {x.warp} {x.tag} #{x.occurrence}: {x.n_cells} cells")
        print(d.format(k, hd, dt))
        return 0 if d.clean else 1
    r = session.replay(run, name=str(args.file))
    print(r.diff.format(k, hd, dt))
    print(f"out: {'bit-identical' if r.out_mismatches == 0 else f'{r.out_mismatches} elements differ'}"
          + ("" if r.lse_mismatches is None else
             f"; lse: {'bit-identical' if r.lse_mismatches == 0 else f'{r.lse_mismatches} differ'}"))
    return 0 if r.clean else 1


def cmd_show(args) -> int:
    from collections import Counter

    from flashsim.trace import session, spec
    from flashsim.trace.container import TraceReader
    from flashsim.trace.diff import as_number

    _not_sass(args.file, "flashsim trace show")
    with TraceReader(args.file) as r:
        meta = r.meta
        if args.cta is None and args.warp is None and args.tag is None:
            print(f"{args.file}: {session.describe(meta)}")
            for cta, warp in r.keys():
                c = Counter(e.tag for e in r.events(cta=cta, warp=warp))
                print(f"  CTA {cta} warp {warp}: " + ", ".join(f"{t} x{n}" for t, n in
                                                             sorted(c.items(), key=lambda x: spec.TAG_ID[x[0]])))
            return 0
        events = list(r.events(cta=args.cta, warp=args.warp, tags=[args.tag] if args.tag else None))
    k, hd, dt = meta["kernel"], meta["instance_headdim"], meta["params"]["dtype"]
    occ = Counter()
    shown = 0
    for e in events:
        n = occ[(e.cta, e.warp, e.tag)]
        occ[(e.cta, e.warp, e.tag)] += 1
        if args.occurrence is not None and n != args.occurrence:
            continue
        shown += 1
        names = spec.registers(k, e.tag, hd)
        print(f"CTA {e.cta} warp {e.warp} seq {e.seq} {e.tag} #{n}: {len(names)} registers")
        for c0 in range(0, len(names), args.max_regs):
            cols = names[c0:c0 + args.max_regs]
            width = 10 if args.hex else 14
            print("  lane " + " ".join(f"{c[-width:]:>{width}}" for c in cols))
            for lane in range(32):
                cells = []
                for j, name in enumerate(cols):
                    x = int(e.regs[lane, c0 + j])
                    txt = f"0x{x:08x}" if args.hex else as_number(x, spec.register_format(k, e.tag, name, dt))
                    cells.append(f"{txt[:width]:>{width}}")
                print(f"  {lane:4d} " + " ".join(cells))
    if not shown:
        print("no events match")
        return 1
    return 0


def cmd_html(args) -> int:
    from flashsim.trace.html import write_html

    _not_sass(args.file, "flashsim trace html")
    out = args.output or args.file.with_suffix(".html")
    if out.exists() and not args.force:
        print(f"flashsim: error: {out} exists (pass --force to overwrite)", file=sys.stderr)
        return 2
    write_html(args.file, out, against=args.against)
    print(f"wrote {out}")
    return 0
