"""gpu/kernels/fa4h.cu on the GPU against its twin and float64, recorded for the interpreter's replay.

    python -m flashsim.gpu.validate_fa4h --out DIR [--problems 120] [--seed 2026] [--record]
    python -m flashsim.gpu.validate_fa4h --replay traces/fa4h/fa4h_problems.json [--first N] [--schedules S]
    python -m flashsim.gpu.validate_fa4h --explore N [--first-seed S] [--jobs J] [--explore-out FILE]

1. The cubin: the build the interpreter runs (flashsim.kernels.sources.interpreted_module, NVRTC 13.0 from its
   wheel, sm_90a, the spec's options), loaded on the GPU as is (backend "gpu-cubin").
2. ``--problems`` random problems of the kernel's domain (flashsim.kernels.problems.draw_params with a numpy
   generator seeded by ``--seed``; inputs regenerate from each problem's own seed): every head dim (64, 128,
   192 with v 128), fp16 and bf16, causal / local / no mask, softcap, GQA/MQA, seqlens off the tiles, the input
   kinds of flashsim.kernels.problems (normal, large, identical rows, subnormal, NaN/Inf), each on a grid of 1,
   2 or 3 CTAs (every CTA walks several work tiles: barrier phases and stage rounds carry over from tile to
   tile) or on the kernel's own grid (one CTA per tile up to 132), a quarter each. Per problem: the
   GPU's out and lse against the twin's bit for bit (flashsim.kernels.fa2 at 128 x 128), and against float64 by
   flash-attn's rule (normal and large inputs).
3. With ``--record``: DIR/fa4h_problems.json (provenance; per problem its parameters, the sha256 of the GPU's
   out and lse bytes, the checks) and DIR/fa4h_cubin.npz (the cubin the GPU ran): both belong in traces/fa4h/.

``--replay`` runs the recorded cubin on the recorded problems in the interpreter (no GPU): the sha256 of its
out and lse must equal the GPU's; ``--schedules S`` also runs each problem under S seeded schedules of the
warp scheduler (flashsim.sass.schedules.schedule_options) with the race detector, each giving the same bytes
and no race or protocol finding. ``--explore N`` runs the two EXPLORE problems on one CTA under N seeded
schedules each with the race detector (the correct kernel must stay clean and give the same bytes), in
``--jobs`` worker processes, recording the sweep in ``--explore-out`` (traces/fa4h/fa4h_explore*.json). Exit
status 1 on any difference.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

KERNEL = "fa4h"
REPO = Path(__file__).resolve().parent.parent
RECORD = REPO / "traces" / "fa4h" / "fa4h_problems.json"
CUBIN = RECORD.parent / "fa4h_cubin.npz"


def draw(n: int, seed: int) -> list[dict]:
    """``n`` problems of fa4h's domain (parameters only; inputs come from each problem's seed)."""
    from flashsim.kernels.problems import draw_params, rng_pick

    pick = rng_pick(np.random.default_rng(seed))
    return [draw_params(pick, KERNEL) for _ in range(n)]


def draw_ctas(problems: list[dict], seed: int) -> list[int]:
    """The persistent grid of each problem: 1, 2 or 3 CTAs (each walks several work tiles, so barrier phases
    carry over from tile to tile) or the kernel's own grid (one CTA per tile up to 132), a quarter each."""
    from flashsim.kernels.problems import make_case
    from flashsim.kernels.spec import get

    rng = np.random.default_rng(seed + 1)
    out = []
    for p in problems:
        c = int(rng.integers(4))
        if c == 3:
            case = make_case(_params(p))
            args = get(KERNEL).check(case.q, case.k, case.v, **case.kwargs)
            c = get(KERNEL).instance_for(args).grid(args)[0]
        else:
            c += 1
        out.append(c)
    return out


def prepared(p: dict, ctas: int | None, backend: str):
    """The launch of problem ``p`` on ``backend`` with a grid of ``ctas`` CTAs (None: the kernel's own)."""
    from flashsim.kernels.launch import prepare
    from flashsim.kernels.problems import make_case

    case = make_case(_params(p))
    prep = prepare(KERNEL, case.q, case.k, case.v, backend=backend, **case.kwargs)
    if ctas is not None:
        prep.grid = (int(ctas), 1, 1)
    return prep


def _sha(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _jsonable(p: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()}


def _params(p: dict) -> dict:
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in p.items()}


def check_problem(p: dict, run_kernel) -> dict[str, Any]:
    """One problem on ``run_kernel(q, k, v, **kw) -> (out, lse)``: digests, twin equality, flash-attn's rule."""
    from flashsim.attention import check_args
    from flashsim.attention.reference import attention_lowp, attention_reference, passes_flash_attn_rule
    from flashsim.kernels.problems import make_case
    from flashsim.kernels.spec import get

    case = make_case(_params(p))
    out, lse = run_kernel(case.q, case.k, case.v, **case.kwargs)
    o_t, l_t = get(KERNEL).twin_module.run(case.q, case.k, case.v, **case.kwargs)
    res: dict[str, Any] = {"describe": case.describe(), "out_sha256": _sha(out.view(np.uint16)),
                           "lse_sha256": _sha(lse.view(np.uint32)),
                           "twin_out_equal": bool(np.array_equal(out.view(np.uint16), o_t.view(np.uint16))),
                           "twin_lse_equal": bool(np.array_equal(lse.view(np.uint32), l_t.view(np.uint32)))}
    if p["kind"] in ("normal", "large"):
        args = check_args(case.q, case.k, case.v, **case.kwargs)
        ref, _ = attention_reference(case.q, case.k, case.v, args)
        low, _ = attention_lowp(case.q, case.k, case.v, args)
        r = passes_flash_attn_rule(out, ref, low)
        res["rule"] = {"passed": r.passed, "max_err": r.max_err, "bound": r.bound}
    return res


def record(out_dir: Path, n: int, seed: int, write: bool) -> int:
    from flashsim.gpu import runtime
    from flashsim.kernels.sources import interpreted_module
    from flashsim.kernels.spec import get

    spec = get(KERNEL)
    cubin = interpreted_module(spec.source, options=spec.build_options(), arch=spec.arch).cubin
    problems = draw(n, seed)
    grids = draw_ctas(problems, seed)
    rows, bad = [], 0
    t0 = time.time()
    for i, (p, ctas) in enumerate(zip(problems, grids)):
        def run_gpu(q, k, v, **kw):
            return prepared(p, ctas, "gpu-cubin").result()

        r = check_problem(p, run_gpu)
        ok = r["twin_out_equal"] and r["twin_lse_equal"] and r.get("rule", {"passed": True})["passed"]
        bad += not ok
        rows.append({"params": _jsonable(p), "ctas": ctas, **r})
        print(f"{i:4d} {'ok ' if ok else 'BAD'} {r['describe']} ({ctas} CTAs)", flush=True)
    info = runtime.device_info()
    rep = {"kernel": KERNEL, "source": "gpu/kernels/fa4h.cu", "what": "validate_fa4h --record",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
           "device": info, "seed": seed, "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
           "command": f"python -m flashsim.gpu.validate_fa4h --out DIR --problems {n} --seed {seed} --record",
           "seconds": round(time.time() - t0, 1), "problems": rows,
           "summary": {"problems": len(rows), "failed": bad,
                       "twin_equal": sum(r["twin_out_equal"] and r["twin_lse_equal"] for r in rows),
                       "rule_checked": sum("rule" in r for r in rows),
                       "rule_passed": sum(r.get("rule", {}).get("passed", False) for r in rows)}}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "fa4h_problems.json").write_text(json.dumps(rep, indent=1) + "\n")
    if write:
        np.savez_compressed(out_dir / "fa4h_cubin.npz", cubin=np.frombuffer(cubin, np.uint8))
    print(json.dumps(rep["summary"]))
    return 1 if bad else 0


def recorded_cubin(path: Path = CUBIN) -> bytes:
    with np.load(path) as z:
        return bytes(z["cubin"])


def replay(record_path: Path, first: int | None, schedules: int, cubin_path: Path | None = None) -> int:
    """The recorded problems in the interpreter on the recorded cubin: digests must equal the GPU's."""
    import flashsim.cuda as fc

    rec = json.loads(Path(record_path).read_text())
    cubin = recorded_cubin(cubin_path or Path(record_path).with_name("fa4h_cubin.npz"))
    if hashlib.sha256(cubin).hexdigest() != rec["cubin_sha256"]:
        print("the cubin file does not hold the recorded cubin", file=sys.stderr)
        return 1
    module = fc.RawModule(cubin=cubin)
    rows = rec["problems"][:first]
    bad = 0
    for i, row in enumerate(rows):
        p = _params(row["params"])
        runs = [None] + list(range(schedules))
        for sched in runs:
            got = replay_one(p, sched, row.get("ctas"), module)
            same = got["out_sha256"] == row["out_sha256"] and got["lse_sha256"] == row["lse_sha256"]
            clean = not got.get("findings")
            bad += not (same and clean)
            what = "default schedule" if sched is None else f"schedule {sched}"
            print(f"{i:4d} {'ok ' if same and clean else 'BAD'} {row['describe']} ({what}, {got['seconds']:.1f} s"
                  f"{', ' + got['findings'] if got.get('findings') else ''})", flush=True)
    print(f"{len(rows)} problems x {1 + schedules} schedules: {bad} differ from the GPU")
    return 1 if bad else 0


def replay_one(p: dict, schedule: int | None, ctas: int | None = None, module=None) -> dict[str, Any]:
    """One recorded problem in the interpreter on ``ctas`` CTAs (None: the kernel's grid), under the default
    schedule or a seeded one with the race detector, running ``module`` (a flashsim.cuda.RawModule of the
    recorded cubin; None: the source's own build); digests, findings, seconds."""
    import flashsim.cuda as fc
    from flashsim.sass.schedules import schedule_options

    prep = prepared(p, ctas, "interp")
    if module is not None:
        prep.func = module.get_function(prep.func.name)
        prep.func.max_dynamic_shared_size_bytes = prep.smem
    t0 = time.time()
    findings = ""
    if schedule is None:
        out, lse = prep.result()
    else:
        opts = schedule_options(schedule)
        with fc.checking(banks=False, races=True) as rep:
            prep.func(prep.grid, (prep.threads,), prep.params, shared_mem=prep.smem, exec_options=opts)
        out, lse = prep.fetch()
        if rep.race_count or rep.protocol:
            findings = f"{rep.race_count} races, {len(rep.protocol)} protocol findings"
    return {"out_sha256": _sha(out.view(np.uint16)), "lse_sha256": _sha(lse.view(np.uint32)), "findings": findings,
            "seconds": time.time() - t0}


#: the problems ``--explore`` sweeps: the uneven qk 192 / v 128 layout over two rounds of the three stages, the
#: even 64 / 64 one with causal masks, and 128 / 128 with GQA, a local window and softcap over three work tiles of
#: different lengths, each on one CTA that walks every work tile
EXPLORE = (
    {"kernel": KERNEL, "seed": 1, "kind": "normal", "batch": 1, "heads_k": 1, "heads": 2, "seqlen_q": 129,
     "seqlen_k": 300, "headdim": 192, "dtype": "bfloat16", "causal": False, "window_size": (-1, -1), "softcap": 0.0,
     "softmax_scale": None},
    {"kernel": KERNEL, "seed": 2, "kind": "normal", "batch": 1, "heads_k": 1, "heads": 2, "seqlen_q": 300,
     "seqlen_k": 257, "headdim": 64, "dtype": "float16", "causal": True, "window_size": (-1, -1), "softcap": 0.0,
     "softmax_scale": None},
    {"kernel": KERNEL, "seed": 3, "kind": "normal", "batch": 1, "heads_k": 1, "heads": 2, "seqlen_q": 200,
     "seqlen_k": 333, "headdim": 128, "dtype": "bfloat16", "causal": False, "window_size": (150, 40), "softcap": 30.0,
     "softmax_scale": None},
)


def _cubin_sha256() -> str:
    """The sha256 of the cubin the interpreter runs (the source's own build, as the GPU check loads it)."""
    from flashsim.kernels.sources import interpreted_module
    from flashsim.kernels.spec import get

    spec = get(KERNEL)
    return hashlib.sha256(interpreted_module(spec.source, options=spec.build_options(), arch=spec.arch).cubin).hexdigest()


def _explore_one(job: tuple[int, int]) -> tuple[int, int, dict[str, Any]]:
    """(problem index, seed, replay_one's result) of one explored schedule (a worker process's unit)."""
    from flashsim.errors import SimulatedFault
    from flashsim.sass.machine import BarrierDeadlock

    i, seed = job
    try:
        return i, seed, replay_one(EXPLORE[i], seed, 1)
    except (BarrierDeadlock, SimulatedFault) as exc:  # a bad run of the sweep, not the end of it
        what = "deadlock" if isinstance(exc, BarrierDeadlock) else "fault"
        return i, seed, {"out_sha256": "", "lse_sha256": "", "seconds": 0.0,
                         "findings": f"{what}: {str(exc).splitlines()[0][:300]}"}


def explore(n: int, first_seed: int = 0, jobs: int = 1, out: Path | None = None, gpu: bool = False,
            deadline: float | None = None) -> int:
    """Each EXPLORE problem on one CTA under the default schedule and ``n`` seeded ones (``first_seed`` ..) with
    the race detector, ``jobs`` worker processes at a time: every run must give the default run's bytes and
    report nothing. ``out``: a JSON record of the sweep (per problem: the default run's digests, the seeds run,
    the runs that differed or reported, seconds), rewritten as runs finish, so a sweep stopped early keeps what
    it ran. ``gpu``: after the sweep, each problem on one CTA on the GPU (the same cubin): its digests must
    equal the interpreter's. ``deadline``: seconds after which no further run starts (the record says how many
    ran). Exit status 1 on any bad run."""
    import concurrent.futures
    import multiprocessing
    import os
    import platform

    t_all = time.time()
    bases = [replay_one(p, None, 1) for p in EXPLORE]
    rows = [{"problem": _jsonable(p), "out_sha256": b["out_sha256"], "lse_sha256": b["lse_sha256"],
             "default_findings": b["findings"], "seeds": [], "runs": 0, "bad": [], "seconds": 0.0}
            for p, b in zip(EXPLORE, bases)]
    rec = {"kernel": KERNEL, "source": "gpu/kernels/fa4h.cu", "what": "validate_fa4h --explore",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
           "command": f"python -m flashsim.gpu.validate_fa4h --explore {n} --first-seed {first_seed} --jobs {jobs}"
                      f"{' --explore-out ' + out.name if out else ''}{' --gpu' if gpu else ''}",
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
           "checks": "per seed: out and lse sha256 equal to the default schedule's; no race, no protocol finding "
                     "(flashsim.cuda.checking(races=True)); no deadlock or fault (each counts as a bad run)",
           "cubin_sha256": _cubin_sha256(), "problems": rows}

    def bad_runs() -> int:
        return sum(len(r["bad"]) + bool(r["default_findings"]) + (r.get("gpu_equal") is False) for r in rows)

    def write() -> None:
        if out is None:
            return
        rec["seconds"] = round(time.time() - t_all, 1)
        rec["summary"] = {"runs": sum(r["runs"] for r in rows), "bad": bad_runs()}
        for r in rows:
            r["seeds"].sort()
            r["seconds"] = round(r["seconds"], 1)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rec, indent=1) + "\n")

    if gpu:  # first, so a sweep stopped early still has it (the workers are spawned, not forked)
        from flashsim.device import device_info

        rec["machine"]["device"] = device_info()
        for p, r in zip(EXPLORE, rows):
            out_g, lse_g = prepared(p, 1, "gpu-cubin").result()
            r["gpu_out_sha256"], r["gpu_lse_sha256"] = _sha(out_g.view(np.uint16)), _sha(lse_g.view(np.uint32))
            r["gpu_equal"] = (r["gpu_out_sha256"], r["gpu_lse_sha256"]) == (r["out_sha256"], r["lse_sha256"])
            verdict = "equal" if r["gpu_equal"] else "DIFFER FROM"
            print(f"d {p['headdim']}: the GPU's out and lse (a grid of one) {verdict} the interpreter's", flush=True)
    write()
    work = [(i, s) for s in range(first_seed, first_seed + n) for i in range(len(EXPLORE))]
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    futures = [pool.submit(_explore_one, w) for w in work]
    taken: set = set()

    def take(fut) -> None:
        taken.add(fut)
        i, seed, got = fut.result()
        row = rows[i]
        row["runs"] += 1
        row["seeds"].append(seed)
        row["seconds"] += got["seconds"]
        same = (got["out_sha256"], got["lse_sha256"]) == (row["out_sha256"], row["lse_sha256"])
        if not same or got["findings"]:
            row["bad"].append({"seed": seed, "bytes_differ": not same, "findings": got["findings"]})
        print(f"{len(taken):5d} d {EXPLORE[i]['headdim']} schedule {seed}: "
              f"{'ok' if same and not got['findings'] else 'BAD'}{' bytes differ' if not same else ''} "
              f"{got['findings']} ({got['seconds']:.1f} s)", flush=True)
        if len(taken) % 10 == 0:
            write()

    try:
        for fut in concurrent.futures.as_completed(futures):
            take(fut)
            if deadline is not None and time.time() - t_all > deadline:
                print(f"the deadline of {deadline:g} s has passed: no further schedule starts", flush=True)
                break
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for fut in futures:  # the runs under way at the deadline
        if fut not in taken and fut.done() and not fut.cancelled():
            take(fut)
    write()
    for r in rows:
        p = r["problem"]
        print(f"d {p['headdim']} causal={p['causal']}: {r['runs']} schedules, {len(r['bad'])} bad, "
              f"{r['seconds'] / max(r['runs'], 1):.1f} s per run (out {r['out_sha256'][:16]})", flush=True)
    print(f"{sum(r['runs'] for r in rows)} explored runs in {time.time() - t_all:.0f} s with {jobs} workers: "
          f"{bad_runs()} bad", flush=True)
    return 1 if bad_runs() else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="where the record goes (with a GPU)")
    ap.add_argument("--problems", type=int, default=120)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--record", action="store_true", help="also write the cubin the GPU ran")
    ap.add_argument("--replay", type=Path, help="a record to replay in the interpreter (no GPU)")
    ap.add_argument("--first", type=int, help="replay only the first N problems")
    ap.add_argument("--schedules", type=int, default=0, help="seeded schedules per replayed problem")
    ap.add_argument("--explore", type=int, help="run the EXPLORE problems under this many seeded schedules")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes of --explore (default 1)")
    ap.add_argument("--explore-out", type=Path, help="a JSON record of the --explore sweep")
    ap.add_argument("--gpu", action="store_true", help="--explore: also each problem's default run on the GPU")
    ap.add_argument("--deadline", type=float, help="--explore: seconds after which no further schedule starts")
    a = ap.parse_args(argv)
    if a.explore is not None:
        if a.explore < 1:
            ap.error(f"--explore {a.explore}: expected at least 1")
        if a.jobs < 1:
            ap.error(f"--jobs {a.jobs}: expected at least 1")
        if a.first_seed < 0:
            ap.error(f"--first-seed {a.first_seed}: expected a seed >= 0")
        if a.deadline is not None and not a.deadline > 0:
            ap.error(f"--deadline {a.deadline:g}: expected seconds > 0")
        return explore(a.explore, a.first_seed, a.jobs, a.explore_out, a.gpu, a.deadline)
    if (a.out is None) == (a.replay is None):
        ap.error("give --out DIR (record on the GPU) or --replay RECORD (interpreter)")
    if a.problems < 1:
        ap.error(f"--problems {a.problems}: expected at least 1")
    if a.first is not None and a.first < 1:
        ap.error(f"--first {a.first}: expected at least 1")
    if a.schedules < 0:
        ap.error(f"--schedules {a.schedules}: expected >= 0")
    if a.replay is not None:
        if not a.replay.is_file() or not a.replay.with_name("fa4h_cubin.npz").is_file():
            ap.error(f"--replay {a.replay}: expected a record with fa4h_cubin.npz beside it (traces/fa4h/)")
        return replay(a.replay, a.first, a.schedules)
    return record(a.out, a.problems, a.seed, a.record)


if __name__ == "__main__":
    sys.exit(main())
