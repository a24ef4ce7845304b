"""``flashsim trace``: record, diff, replay, show and browse per-warp traces.

    flashsim trace record --kernel fa2 --seqlen 200 --backend sim -o run.fstrace
    flashsim trace diff A.fstrace B.fstrace        (FS_TRACE traces, or traces of interpreted instructions)
    flashsim trace replay run.fstrace [--resume-at SEQ | --bisect]
    flashsim trace show run.fstrace --cta 0 --warp 1 --tag softmax
    flashsim trace html run.fstrace [--against other.fstrace] -o run.html

Exit status: 0 clean, 1 a divergence (diff/replay), 2 a bad argument or file.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from flashsim import device, session
from flashsim.attention import check_args
from flashsim.check import fake_inputs, kernel_memory, tile_steps
from flashsim.cli.arguments import add_problem_arguments, size_options
from flashsim.cli.traceshow import show as show_sass_trace
from flashsim.errors import FlashsimError, bad_argument
from flashsim.kernels import PROGRESS_UNIT
from flashsim.kernels.problems import KINDS, call_kwargs, make_case
from flashsim.options import id_list, non_negative_int, positive_int
from flashsim.progress import Estimate, Progress, refuse_if_too_large
from flashsim.sass.tracediff import diff_traces
from flashsim.sass.tracing import is_sass_trace
from flashsim.trace import spec
from flashsim.trace.container import TraceReader
from flashsim.trace.diff import as_number, diff
from flashsim.trace.html import write_html

#: seconds a run lasts before its progress is shown
PROGRESS_DELAY = 1.0


def add_parser(sub) -> None:
    t = sub.add_parser("trace", help="per-warp traces: record (GPU, simulator or SASS interpreter), diff, replay, "
                                     "show, html",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ts = t.add_subparsers(dest="trace_command", required=True, metavar="COMMAND")
    r = ts.add_parser("record", help="run a kernel traced (its CUDA build on the GPU, its twin, or the build's cubin "
                                     "in the SASS interpreter) and write a trace",
                      description="Run a kernel traced (its CUDA build on the GPU, its twin in the simulator, or the "
                                  "CUDA build's cubin in the SASS interpreter) and write the trace. The problem "
                                  "options and their defaults are flashsim check's; --like takes the problem, the "
                                  "inputs, the CTAs and the warps of a recorded trace instead. The run's work and "
                                  "memory are estimated first; a run beyond this machine is refused.")
    r.add_argument("--kernel", choices=spec.KERNELS, default="fa2", help="the kernel to trace (default: %(default)s)")
    add_problem_arguments(r)
    r.add_argument("--kind", choices=KINDS, default="normal",
                   help="input values: normal N(0, 1), large logits, identical rows, subnormal, or one NaN/Inf each "
                        "(flashsim.kernels.problems) (default: %(default)s)")
    r.add_argument("--like", type=Path, default=None, metavar="FILE",
                   help="run the problem of a trace file (e.g. a GPU recording) on its inputs, recording its CTAs "
                        "and warps; --kernel, the problem options, --kind, --cta and --warp are then not used "
                        "(default: none)")
    r.add_argument("--backend", choices=("auto",) + session.BACKENDS, default="auto",
                   help="gpu: the kernel's traced CUDA build (needs cupy and a GPU); sim: its twin on the CPU; "
                        "interp: the traced build's cubin in the SASS interpreter, on the CPU; auto: gpu when a "
                        "GPU is usable, else sim, saying why (default: %(default)s)")
    r.add_argument("--cta", default="0", metavar="IDS",
                   help="CTAs to record, linear ids x + X (y + Y z), e.g. '0,3,5-7' (default: %(default)s)")
    r.add_argument("--warp", default="0-3", metavar="IDS",
                   help="warps to record in each of those CTAs (default: %(default)s)")
    r.add_argument("--cap-words", type=positive_int, default=None, metavar="N",
                   help="GPU buffer words per warp (default: sized from the kernel's program)")
    r.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                   help="the trace file to write (required)")
    r.add_argument("--force", action="store_true", help="overwrite an existing file")
    r.set_defaults(func=cmd_record)

    d = ts.add_parser("diff", help="align two traces by (CTA, warp, tag, occurrence); first divergence + summary "
                                   "(also traces of interpreted instructions: flashsim.sass.tracing)",
                      description="Align two traces by (CTA, warp, tag, occurrence) and print the first divergent "
                                  "event (lane, register, both values, bits and ulp) and a summary. Exit status 0 "
                                  "when they agree, 1 when they differ, 2 on a bad file.")
    d.add_argument("a", type=Path, metavar="A", help="the first trace file")
    d.add_argument("b", type=Path, metavar="B", help="the second trace file")
    d.add_argument("--context", type=non_negative_int, default=3, metavar="N",
                   help="events shown before the first divergence (default: %(default)s)")
    d.add_argument("--cells", type=positive_int, default=8, metavar="N",
                   help="lane/register cells shown (default: %(default)s)")
    d.set_defaults(func=cmd_diff)

    p = ts.add_parser("replay", help="re-simulate a trace from its inputs and compare; or resume from its state",
                      description="Re-simulate a recorded run from the inputs the file holds, with its CTA and warp "
                                  "filter, and compare every event, out and LSE bit for bit; or take the recorded "
                                  "registers and simulate on from them. Exit status 0 when equal, 1 otherwise.")
    p.add_argument("file", type=Path, metavar="FILE", help="the trace file to replay")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume-at", type=non_negative_int, metavar="SEQ",
                   help="take the recorded registers at every event up to sequence number SEQ, then simulate on "
                        "(default: simulate from the inputs alone)")
    g.add_argument("--bisect", action="store_true",
                   help="take the recorded state before every event: list the steps that introduce a difference")
    p.set_defaults(func=cmd_replay)

    s = ts.add_parser("show", help="lane x register tables of recorded events (no filter: a summary)",
                      description="Print the recorded events as lane x register tables; with no filter, a summary "
                                  "of the tags each warp recorded.")
    s.add_argument("file", type=Path, metavar="FILE", help="the trace file to show")
    s.add_argument("--cta", type=non_negative_int, metavar="ID", help="only this CTA (default: all)")
    s.add_argument("--warp", type=non_negative_int, metavar="ID", help="only this warp (default: all)")
    s.add_argument("--tag", metavar="TAG",
                   help=f"only this tag: of an FS_TRACE trace one of {', '.join(spec.TAGS)}; of a trace of "
                        "interpreted instructions a PC (0x950), a source location (k.cu:16) or text of the "
                        "instruction (default: all)")
    s.add_argument("--occurrence", type=non_negative_int, default=None, metavar="N",
                   help="only this occurrence of the tag in the warp (default: all)")
    s.add_argument("--hex", action="store_true",
                   help="bits instead of numbers (traces of interpreted instructions always show bits)")
    s.add_argument("--f32", action="store_true",
                   help="traces of interpreted instructions: each register's bits read as an f32 instead of hex "
                        "(default: hex)")
    s.add_argument("--max-regs", type=positive_int, default=16, metavar="N",
                   help="registers per table (columns) (default: %(default)s)")
    s.set_defaults(func=cmd_show)

    h = ts.add_parser("html", help="a static page: per-warp timeline of tags, divergences, registers on demand",
                      description="Write a static HTML page: a per-warp timeline of the tags, the divergences from "
                                  "a second trace, and the registers of any event on demand.")
    h.add_argument("file", type=Path, metavar="FILE", help="the trace file to show")
    h.add_argument("--against", type=Path, default=None, metavar="FILE",
                   help="a second trace to diff against, highlighted (default: none)")
    h.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                   help="the page to write (default: FILE with .html)")
    h.add_argument("--force", action="store_true", help="overwrite an existing page")
    h.set_defaults(func=cmd_html)


def resolve_backend(choice: str) -> tuple[str, str]:
    """('gpu' or 'sim', why) for --backend: 'auto' is the GPU when cupy finds a usable one, else the simulator."""
    if choice != "auto":
        return choice, f"--backend {choice}"
    try:
        device.require_gpu()
    except FlashsimError as e:
        return "sim", f"--backend auto, no GPU here: {e}"
    return "gpu", "--backend auto found a GPU"


def estimate_record(params: dict, backend: str, ctas: list[int] | None, n_warps: int):
    """Work (the twin and the interpreter run the whole grid) and memory (inputs, the twin's or the interpreter's
    arrays, the recorded events) of ``flashsim trace record`` of the problem ``params`` (session.make_params),
    recording the CTAs ``ctas`` (None: all) and ``n_warps`` warps of each, from the parameters alone."""
    kernel = params["kernel"]
    q, k, v = fake_inputs(params["batch"], params["heads"], params["heads_k"], params["seqlen_q"],
                          params["seqlen_k"], params["headdim"], params["dtype"])
    a = check_args(q, k, v, **call_kwargs(params))
    nq = a.batch * a.seqlen_q * a.heads * a.headdim
    nk = a.batch * a.seqlen_k * a.heads_k * a.headdim
    est = Estimate()
    est.memory["inputs"] = 8 * (nq + 2 * nk) + 6 * max(nq, nk) + 2 * (nq + 2 * nk)  # drawn as float64, all three
    try:
        hd, steps, grid, _ = spec.instance(kernel, a)
    except (ValueError, NotImplementedError):  # outside the kernel's domain: the run says why
        return est
    n_ctas = grid if ctas is None else len(set(ctas))
    words = [spec.warp_words(kernel, hd, n) for n in (0, 1)]
    events = [len(spec.program(kernel, hd, n)) for n in (0, 1)]
    per_warp = 4 * (words[0] + steps * (words[1] - words[0])) + 300 * (events[0] + steps * (events[1] - events[0]))
    est.memory["recorded events"] = per_warp * n_ctas * n_warps + (64 << 20)  # and the writer's buffers
    if backend == "sim":
        est.work[f"{kernel} twin"] = tile_steps(kernel, a)
        est.memory[f"{kernel} twin"] = kernel_memory(kernel, a, workers=1) + 2 * nq
    elif backend == "interp":
        est.work[f"{kernel} cubin"] = tile_steps(kernel, a)
        est.memory[f"{kernel} cubin"] = kernel_memory(kernel, a, interp=True) + 2 * nq
    return est


def _problem(args):
    """(problem parameters, the recorded run it is like or None, CTAs, warps, the options that size it)."""
    if args.like is not None:
        like = _load(args.like)
        return dict(like.meta["params"]), like, like.meta["ctas"], like.meta["warps"], f"--like {args.like}"
    params = session.make_params(
        args.kernel, seed=args.seed, kind=args.kind, batch=args.batch, heads=args.heads, heads_k=args.heads_k,
        seqlen_q=args.seqlen, seqlen_k=args.seqlen_k, headdim=args.headdim, dtype=args.dtype, causal=args.causal,
        window_size=tuple(args.window), softcap=args.softcap, softmax_scale=args.scale)
    return params, None, id_list("--cta", args.cta), id_list("--warp", args.warp), size_options(args)


def cmd_record(args) -> int:
    params, like, ctas, warps, options = _problem(args)
    kernel = params["kernel"]
    backend, why = resolve_backend(args.backend)
    est = estimate_record(params, backend, ctas, len(set(warps)))
    refuse_if_too_large(est, options,
                        "use smaller --batch, --heads, --seqlen or --seqlen-k (the simulator runs the whole grid, "
                        "however few CTAs --cta records), or fewer CTAs and warps (--cta, --warp)",
                        max_tile_steps=float("inf") if backend == "gpu" else None)
    if backend == "gpu":  # before anything is allocated: a missing GPU is known at once
        device.require_gpu()
    where = {"gpu": "GPU", "sim": "simulator", "interp": "SASS interpreter"}[backend]
    print(f"backend: {where} ({why}); size: {est.describe()}")
    sys.stdout.flush()
    case = make_case(params) if like is None else session.case_of(like)
    with Progress(f"{kernel} twin", 1, unit=PROGRESS_UNIT[kernel], delay=PROGRESS_DELAY) as pr:
        run = session.run_case(case, backend=backend, ctas=ctas, warps=warps, cap_words=args.cap_words, progress=pr)
    with Progress(f"writing {args.output.name}", 1, unit="event", delay=PROGRESS_DELAY) as pr:
        session.write(run, args.output, force=args.force, progress=pr)  # Ctrl-C: no file, no temporary file
    size = args.output.stat().st_size
    print(f"wrote {args.output}: {len(run.events)} events, {size:,} bytes; {session.describe(run.meta)}")
    return 0


def _load(path):
    _not_sass(path, "this command")
    return session.load(path)


def _not_sass(path, what: str) -> None:
    """Traces of interpreted instructions (flashsim.sass.tracing) are read by ``flashsim trace diff`` and
    ``flashsim trace show`` only."""
    if is_sass_trace(path):
        raise NotImplementedError(f"{path} traces interpreted instructions (flashsim.sass.tracing): {what} reads "
                                  "traces of FS_TRACE tags; look at such traces with flashsim trace show and compare them with "
                                  "flashsim trace diff")


def cmd_diff(args) -> int:
    sass = [is_sass_trace(p) for p in (args.a, args.b)]
    if any(sass):
        if not all(sass):
            which = args.a if sass[0] else args.b
            print(f"flashsim: error: {which} traces interpreted instructions, the other file traces FS_TRACE tags: "
                  "only traces of one kind can be compared", file=sys.stderr)
            return 2
        d = diff_traces(args.a, args.b, context=args.context)
        print(d.format(args.cells))
        return 0 if d.clean else 1
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
    d = diff(a.events, b.events, kernel=a.meta["kernel"], headdim=a.meta["instance_headdim"],
             dtype=a.meta["params"]["dtype"], a_name=str(args.a), b_name=str(args.b), context=args.context)
    print(d.format(a.meta["kernel"], a.meta["instance_headdim"], a.meta["params"]["dtype"], args.cells))
    out_bad = int((a.arrays["out"] != b.arrays["out"]).sum()) if a.arrays["out"].shape == b.arrays["out"].shape else -1
    print(f"outputs: {'bit-identical' if out_bad == 0 else f'{out_bad} elements differ' if out_bad > 0 else 'shapes differ'}")
    return 0 if d.clean and out_bad == 0 else 1


def cmd_replay(args) -> int:
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
                    print(f"  seq {x.seq:5d} cta={x.cta} warp={x.warp} {x.tag} #{x.occurrence}: {x.n_cells} cells")
        print(d.format(k, hd, dt))
        return 0 if d.clean else 1
    r = session.replay(run, name=str(args.file))
    print(r.diff.format(k, hd, dt))
    print(f"out: {'bit-identical' if r.out_mismatches == 0 else f'{r.out_mismatches} elements differ'}"
          + ("" if r.lse_mismatches is None else
             f"; lse: {'bit-identical' if r.lse_mismatches == 0 else f'{r.lse_mismatches} differ'}"))
    return 0 if r.clean else 1


def cmd_show(args) -> int:
    if is_sass_trace(args.file):
        return show_sass_trace(args.file, cta=args.cta, warp=args.warp, tag=args.tag, occurrence=args.occurrence,
                    f32=args.f32, max_regs=args.max_regs)
    if args.tag is not None and args.tag not in spec.TAG_ID:
        raise bad_argument("--tag", args.tag, f"is not a tag of FS_TRACE traces ({', '.join(spec.TAGS)})")
    with TraceReader(args.file) as r:
        meta = r.meta
        if args.cta is None and args.warp is None and args.tag is None:
            print(f"{args.file}: {session.describe(meta)}")
            for cta, warp in r.keys():
                c = Counter(e.tag for e in r.events(cta=cta, warp=warp))
                print(f"  cta={cta} warp={warp}: " + ", ".join(f"{t} x{n}" for t, n in
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
        print(f"cta={e.cta} warp={e.warp} seq {e.seq} {e.tag} #{n}: {len(names)} registers")
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
    _not_sass(args.file, "flashsim trace html")
    out = args.output or args.file.with_suffix(".html")
    if out.exists() and not args.force:
        print(f"flashsim: error: {out} exists (pass --force to overwrite)", file=sys.stderr)
        return 2
    write_html(args.file, out, against=args.against)
    print(f"wrote {out}")
    return 0
