"""``flashsim run``: run your own kernel once on generated inputs, on the CPU, and print what execution shows.

    flashsim run k.cu --kernel row_sums --grid 4 --block 64 \\
        --arg 'in=f32[4,32,32]:normal' --arg 'out=f32[128]:zeros' --arg scale=f32:0.5

KERNEL is CUDA source (compiled for sm_90 by NVRTC with ``-lineinfo``, as ``flashsim.cuda.RawModule`` does;
the kernel's folder is on the include path) or a ``.cubin``. One ``--arg`` per kernel parameter, in order:

- arrays (passed as pointers): ``NAME=DTYPE[SHAPE]:INIT`` with INIT one of ``zeros``, ``ones``, ``empty``
  (never written: initcheck reports reads of it), ``arange``, ``bits`` (uniform random bit patterns),
  ``normal`` / ``normal(MEAN,STD)``, ``uniform`` / ``uniform(LO,HI)`` (integer dtypes: LO <= x < HI),
  ``file(PATH.npy)`` / ``file(PATH.npz:KEY)``, ``values(V0,V1,...)``;
- scalars: ``NAME=DTYPE:VALUE``, e.g. ``n=i32:4096``, ``scale=f32:0.125``, ``p=u64:0``.

DTYPE: f16 bf16 f32 f64 i8 u8 i16 u16 i32 u32 i64 u64. Random inputs are drawn, in ``--arg`` order, from
``numpy.random.default_rng(SEED)``. The launch runs once inside ``flashsim.cuda.checking`` and the command
prints: shared-memory banks per source line (worst first, with the line's text) and per kernel, races
(both sides), a fault (with its PC, SASS and line; the report then covers the CTAs run until it), reads of
uninitialised memory, barrier misuse as compute-sanitizer's synccheck reports it (a divergent
``__syncthreads``, ``bar.sync`` counts the arrivals do not match, bad ``__syncwarp`` masks: kind, line, warp,
lanes), and executed instructions per source line. Exit status 0 when clean, 1 when a race, a fault, an
uninitialised read, a barrier misuse (or, with ``--gpu``, a differing bit) was found, 2 on bad input.

``--workers N`` (a local Dask cluster of N processes) or ``--scheduler ADDR`` (a running one) runs the batches
of CTAs on the cluster's workers; the outputs and the report are those of the one-process run with the same
``--ctas-per-batch`` (flashsim.sass.spread says which kernels stay in this process, and why).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flashsim import run
from flashsim.cli.arguments import add_cluster_arguments, cluster_from_args
from flashsim.cli.launchargs import ArgSpec, make_value, match_params, parse_args_list, parse_dim3
from flashsim.cli.run_report import (_Sources, _bank_svg, _count, _html_page, _print_banks, _print_executed,
                                     _print_fault, _print_races, _print_summary, _print_synccheck, _print_uninit,
                                     _run_gpu)
from flashsim.errors import SimulatedFault, bad_argument
from flashsim.options import non_negative_int, positive_int
from flashsim.progress import Progress

__all__ = ["add_parser", "cmd_run"]


# ----------------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------------


#: warps (CTAs x warps per CTA) past which ``flashsim run`` refuses a launch unless --max-warps says otherwise
MAX_RUN_WARPS = 10_000_000


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run", help="run your own kernel (.cu or .cubin) once on generated inputs on the CPU: banks per source "
                    "line, races, faults, uninitialised reads, executed instructions",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernel_file", type=Path, metavar="KERNEL", help="CUDA source (.cu) or an sm_90 .cubin")
    p.add_argument("--kernel", metavar="NAME", help="the kernel to launch (default: the module's only kernel)")
    p.add_argument("--grid", type=parse_dim3["grid"], required=True, metavar="X[,Y[,Z]]",
                   help="CTAs of the launch (required; missing dimensions are 1)")
    p.add_argument("--block", type=parse_dim3["block"], required=True, metavar="X[,Y[,Z]]",
                   help="threads per CTA (required; missing dimensions are 1)")
    p.add_argument("--shared-mem", type=non_negative_int, default=0, metavar="BYTES",
                   help="dynamic shared memory per CTA (default 0)")
    p.add_argument("--arg", action="append", default=[], metavar="SPEC",
                   help="one per kernel parameter, in order: NAME=DTYPE[SHAPE]:INIT or NAME=DTYPE:VALUE "
                        "(default: none, for a kernel without parameters)")
    p.add_argument("-O", "--nvrtc-option", action="append", default=[], metavar="OPT",
                   help="an NVRTC option (repeatable); write options that start with '-' as -O=-std=c++17 "
                        "(default: none; cupy's -ftz=true and -arch=sm_90 are always added)")
    p.add_argument("--no-banks", action="store_true", help="do not count shared-memory bank wavefronts")
    p.add_argument("--no-races", action="store_true", help="do not look for shared-memory races")
    p.add_argument("--no-initcheck", action="store_true", help="do not report reads of uninitialised memory")
    p.add_argument("--no-synccheck", action="store_true",
                   help="do not report barrier misuse (divergent __syncthreads, bar.sync counts, __syncwarp masks)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--schedule-seed", type=non_negative_int, default=None, metavar="N",
                   help="run another legal interleaving of the warps (default: in each warp its smallest path "
                        "first, then the lowest PC)")
    p.add_argument("--ctas-per-batch", type=positive_int, default=None, metavar="N",
                   help="CTAs simulated together (default 256, and with --workers/--scheduler at most a quarter of "
                        "the CTAs per worker; memory grows with it; the same N gives the same bits anywhere)")
    add_cluster_arguments(p)
    p.add_argument("--max-steps", type=positive_int, default=None, metavar="N",
                   help="scheduling steps allowed per batch of CTAs before the launch counts as a hang "
                        "(default 50,000,000)")
    p.add_argument("--max-warps", type=positive_int, default=MAX_RUN_WARPS, metavar="N",
                   help=f"refuse a launch of more warps (CTAs x warps per CTA) than this before it runs "
                        f"(default {MAX_RUN_WARPS:,}: hours of interpretation at the least)")
    p.add_argument("--top", type=positive_int, default=10, metavar="N", help="rows per table (default 10)")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a page: the report and the annotated source (default: none)")
    p.add_argument("--svg", type=Path, metavar="FILE", help="write a per-line bank map (ideal vs conflict wavefronts; default: none)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the report and the launch as JSON (default: none)")
    p.add_argument("--save-outputs", type=Path, metavar="DIR",
                   help="write every array argument after the run to DIR/sim.npz (and DIR/gpu.npz with --gpu; "
                        "bf16 as uint16 bit patterns; default: not saved)")
    p.add_argument("--trace", type=Path, metavar="FILE",
                   help="record registers at --at instructions into a trace file (compare runs with flashsim trace "
                        "diff; default: no trace)")
    p.add_argument("--at", action="append", default=[], metavar="LOC",
                   help="with --trace: a source line FILE.cu:LINE or a PC (0x1a0); repeatable (default: none)")
    p.add_argument("--regs", default="all", metavar="REGS",
                   help="with --trace: registers, e.g. 'R0-R7,UR4,P0' (default: all the kernel uses)")
    p.add_argument("--trace-ctas", default=None, metavar="IDS", help="with --trace: CTAs (grid-linear), e.g. '0,3-5' (default: all)")
    p.add_argument("--trace-warps", default=None, metavar="IDS", help="with --trace: warps of each CTA, e.g. '0-1' (default: all)")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.add_argument("--gpu", action="store_true",
                   help="also run the same cubin on the GPU (cupy) with the same inputs and compare every array "
                        "argument bit for bit")
    p.set_defaults(func=cmd_run)


@dataclass
class _Arg:
    spec: ArgSpec
    host: object  # the initial value (numpy array or scalar)
    device: object = None  # flashsim.cuda.ndarray for arrays

    @property
    def name(self) -> str:
        return self.spec.name


def _ids(flag: str, text):
    if text is None:
        return None
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise bad_argument(flag, text, "expected ids such as '0,3-5'") from None
    return out


def _trace_spec(args):
    """The TraceSpec of --trace/--at/--regs (None without --trace)."""
    if args.trace is None:
        return None
    from flashsim.sass.tracing import TraceSpec

    at = [int(a, 16) if a.lower().startswith("0x") else a for a in args.at]
    regs = args.regs if args.regs == "all" else [r.strip() for r in args.regs.split(",") if r.strip()]
    return TraceSpec(args.trace, at=at, regs=regs, ctas=_ids("--trace-ctas", args.trace_ctas),
                     warps=_ids("--trace-warps", args.trace_warps), force=args.force)


def _check_outputs(args) -> None:
    """Refuse, before any work, an output that exists (without --force) or whose folder is missing."""
    if args.at and args.trace is None:
        raise bad_argument("--at", args.at, "needs --trace FILE (where the registers go)")
    if args.trace is not None and not args.at:
        raise bad_argument("--trace", str(args.trace), "say where with --at FILE.cu:LINE or --at 0xPC")
    seen: dict[Path, str] = {}
    for flag, path in (("--html", args.html), ("--svg", args.svg), ("--json", args.json), ("--trace", args.trace)):
        if path is None:
            continue
        if path.is_dir():
            raise bad_argument(flag, str(path), "is a directory: give a file name")
        if not path.parent.is_dir():
            raise bad_argument(flag, str(path), f"the folder {path.parent} does not exist")
        if path.exists() and not args.force:
            raise bad_argument(flag, str(path), "exists (pass --force to overwrite)")
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise bad_argument(flag, str(path), f"the folder {path.parent} is not writable")
        key = path.resolve()
        if key in seen:
            raise bad_argument(flag, str(path), f"is also {seen[key]}'s file: give each output its own")
        seen[key] = flag
    d = args.save_outputs
    if d is not None:
        if d.exists() and not d.is_dir():
            raise bad_argument("--save-outputs", str(d), "is a file: give a folder")
        if not d.exists() and not d.parent.is_dir():
            raise bad_argument("--save-outputs", str(d), f"the folder {d.parent} does not exist")
        for f in ("sim.npz",) + (("gpu.npz",) if args.gpu else ()):
            if (d / f).exists() and not args.force:
                raise bad_argument("--save-outputs", str(d), f"{f} exists there (pass --force to overwrite)")


def cmd_run(args) -> int:
    import flashsim.cuda as fc
    from flashsim.sass.machine import BarrierDeadlock, StepBudgetExceeded

    specs = parse_args_list(args.arg)
    _check_outputs(args)
    where = cluster_from_args(args, notify=lambda m: print(f"  note: {m}", flush=True))
    cupy = None
    if args.gpu:  # before any simulation: a missing GPU is known at once
        from flashsim.device import require_gpu

        cupy = require_gpu()
    mod, log = run.load_module(args.kernel_file, args.nvrtc_option)
    if log.strip():
        print(f"nvrtc: {log.strip()}", file=sys.stderr)
    name = run.pick_kernel(mod, args.kernel, args.kernel_file)
    fn = mod.get_function(name)
    match_params(specs, fn, name)
    if args.shared_mem > fn.max_dynamic_shared_size_bytes:  # what a host program does before such a launch
        fn.max_dynamic_shared_size_bytes = args.shared_mem
    rng = np.random.default_rng(args.seed)
    values = [_Arg(s, make_value(s, rng)) for s in specs]
    for a in values:
        if a.spec.is_array:
            a.device = fc.empty(a.spec.shape, a.spec.np_dtype) if a.spec.init == "empty" else fc.asarray(a.host)
    arrays = [a for a in values if a.spec.is_array]
    kernel_args = tuple(a.device if a.spec.is_array else a.host for a in values)

    grid, block = tuple(args.grid), tuple(args.block)
    warps = math.prod(grid) * math.ceil(math.prod(block) / 32)
    if warps > args.max_warps:
        raise bad_argument("--grid", ",".join(map(str, grid)),
                           f"{_count(math.prod(grid), 'CTA')} of {_count(math.ceil(math.prod(block) / 32), 'warp')} "
                           f"are {warps:,} warps, more than --max-warps {args.max_warps:,}: the interpreter runs "
                           "about 1-2 million warp-instructions a second, so that is hours at the least; pass "
                           "--max-warps N to run it anyway, or a smaller grid")
    with where as cl:
        total = math.prod(grid)
        per = args.ctas_per_batch or fc.ExecOptions().ctas_per_batch
        if cl is not None and args.ctas_per_batch is None:  # about 4 batches per worker
            per = cl.batch_size(total, per)
        progress = Progress(name, total, unit="CTA", enabled=total > per)  # one batch: nothing to show
        opts = {"ctas_per_batch": per, "schedule_seed": args.schedule_seed,
                "progress": progress if progress.enabled else None}
        if args.max_steps is not None:
            opts["max_steps"] = args.max_steps
        exec_options = fc.ExecOptions(**opts)

        print(f"flashsim run {args.kernel_file}: kernel {name}, grid {grid}, block {block}, "
              f"shared_mem {args.shared_mem} bytes ({_count(total, 'CTA')} of "
              f"{_count(math.ceil(math.prod(block) / 32), 'warp')})")
        for p, a in zip(sorted(fn.info.params, key=lambda p: p.ordinal), values):
            print(f"  #{p.ordinal} {a.spec.describe()}" + (f"  ({a.spec.nbytes} bytes at {a.device.data.ptr:#x})"
                                                           if a.spec.is_array else ""))
        order = "smallest path, then lowest PC, first" if args.schedule_seed is None else f"seed {args.schedule_seed}"
        print(f"  inputs: numpy.random.default_rng({args.seed}); schedule: {order}")
        if cl is not None:
            print(f"  cluster: batches of {per} CTAs (--ctas-per-batch) on {cl.describe()}")
        sys.stdout.flush()  # what was printed comes before the progress lines on stderr
        stopped = None
        t0 = time.perf_counter()
        with fc.checking(banks=not args.no_banks, races=not args.no_races, initcheck=not args.no_initcheck,
                         synccheck=not args.no_synccheck, trace=_trace_spec(args)) as report:
            try:
                fn(grid, block, kernel_args, shared_mem=args.shared_mem, exec_options=exec_options)
            except (SimulatedFault, BarrierDeadlock, StepBudgetExceeded) as exc:
                stopped = exc
            finally:
                progress.close()
        elapsed = time.perf_counter() - t0
    warp_instr = sum(r.warp_instructions for r in report.launches)
    print(f"  {'stopped' if stopped else 'ran'}: {warp_instr} warp instructions in {elapsed:.2f} s")

    src = _Sources()
    _print_fault(stopped, src, arrays)
    _print_banks(report, src, args.top)
    _print_races(report, src)
    _print_uninit(report, src, arrays)
    _print_synccheck(report, src)
    _print_executed(report, src, args.top)

    gpu_result = None
    if cupy is not None:
        gpu_result = _run_gpu(cupy, mod, name, grid, block, args.shared_mem, values, stopped)
    findings = _print_summary(report, stopped, gpu_result)

    sim_out = {a.name: a.device.get() for a in arrays}
    if args.save_outputs is not None:
        args.save_outputs.mkdir(exist_ok=True)
        run.save_npz(args.save_outputs / "sim.npz", sim_out)
        print(f"wrote {args.save_outputs / 'sim.npz'}")
        if gpu_result and gpu_result.get("arrays") is not None:
            run.save_npz(args.save_outputs / "gpu.npz", gpu_result["arrays"])
            print(f"wrote {args.save_outputs / 'gpu.npz'}")
    status = 1 if findings else 0
    launch = {"kernel_file": str(args.kernel_file), "kernel": name, "grid": list(grid), "block": list(block),
              "shared_mem": args.shared_mem, "cubin_sha256": mod.sha256, "seed": args.seed,
              "schedule_seed": args.schedule_seed, "seconds": round(elapsed, 3),
              "args": [{"ordinal": p.ordinal, "size": p.size, "spec": a.spec.text, "name": a.name,
                        "dtype": a.spec.dtype, "shape": list(a.spec.shape) if a.spec.is_array else None,
                        "init": a.spec.init or None, "value": None if a.spec.is_array else a.spec.value,
                        "addr": a.device.data.ptr if a.spec.is_array else None}
                       for p, a in zip(sorted(fn.info.params, key=lambda p: p.ordinal), values)],
              "fault": run.fault_dict(stopped),
              "gpu": None if gpu_result is None else {k: v for k, v in gpu_result.items() if k != "arrays"},
              "exit_status": status}
    from flashsim.outputs import write_text

    if args.json is not None:
        doc = {**report.to_dict(), "run": launch}
        text = json.dumps(doc, indent=1, default=_json_default) + "\n"
        print(f"wrote {write_text(args.json, text, option='--json')}")
    if args.html is not None:
        page = _html_page(report, src, args, name, launch, stopped)
        print(f"wrote {write_text(args.html, page, option='--html')}")
    if args.svg is not None:
        print(f"wrote {write_text(args.svg, _bank_svg(report, src, name), option='--svg')}")
    return status


def _json_default(x):
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")
