"""The warp-specialised Hopper kernels (gpu/kernels/tma_pipeline.cu, wgmma_gemm.cu) in the interpreter: the
same cubins, inputs and tensor maps as gpu/validate_hopper_kernels.py gives the GPU, run on the CPU; the
correct builds compared bit for bit with the H100's outputs (the digests in traces/hopper/hopper_kernels.json),
under explored schedules; every planted bug of gpu/hopper_mutants.py run under the race detector and judged
against its catalogue entry (kind and source lines).

    python -m flashsim.gpu.hopper_interp sweep --schedules 1000 [--builds tma_pipeline_s3_m0,...] [--json F]
    python -m flashsim.gpu.hopper_interp mutants [--schedules 8] [--json F]

``sweep`` runs each correct build on its sweep problem under the default schedule, the adversarial schedules
of its roles (flashsim.sass.schedules.adversarial) and N seeded schedules, with the race detector on: every
run must end, report no race and no protocol finding, and give outputs whose sha256 equal the H100's.
``mutants`` prints, per mutant, what the interpreter reports (the first schedule that reports anything of the
expected kind, trying the default, the adversarial and then seeded schedules) and whether it matches.
Nothing here needs a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim.errors import SimulatedFault
from flashsim.gpu import hopper_mutants as HM
from flashsim.gpu import validate_hopper_kernels as V
from flashsim.sass.machine import BarrierDeadlock, ExecOptions
from flashsim.sass.schedules import adversarial, describe, schedule_options

__all__ = ["CUBINS", "RECORD", "SWEEP_RUNS", "Outcome", "Verdict", "encode_maps", "gpu_digests", "judge", "main",
           "recorded_build", "roles", "run", "sweep_build"]

REPO = Path(__file__).resolve().parent.parent
#: the H100 record of gpu/validate_hopper_kernels.py --record (digests of every correct run's outputs)
RECORD = REPO / "traces" / "hopper" / "hopper_kernels.json"

#: the cubins the H100 ran (gpu/validate_hopper_kernels.py's builds of the record): NVRTC writes the sources'
#: file times and paths into the line table, so a fresh build elsewhere differs there (.debug_line and its
#: relocations, nothing else) and the record keeps the bytes themselves
CUBINS = RECORD.parent / "hopper_cubins.npz"


def recorded_build(kernel: str, mutant: int = 0, **config: int) -> V.Build:
    """The build the H100 ran: :func:`flashsim.gpu.validate_hopper_kernels.build` with the cubin bytes of
    hopper_cubins.npz (a fresh build where the record lacks it)."""
    fresh = V.build(kernel, mutant, **config)
    if CUBINS.is_file():
        with np.load(CUBINS) as z:
            if fresh.key in z.files:
                return dataclasses.replace(fresh, cubin=bytes(z[fresh.key]))
    return fresh


#: the correct builds and the problem each is swept on (small: the sweep runs each many times)
SWEEP_RUNS = (
    ("tma_pipeline", (("TP_STAGES", 2),), "tp_tiny"),
    ("tma_pipeline", (("TP_STAGES", 3),), "tp_tiny"),
    ("tma_pipeline", (("TP_STAGES", 4),), "tp_small"),
    ("wgmma_gemm", (("GG_CONSUMERS", 1), ("GG_STAGES", 4)), "gg_tiny"),
    ("wgmma_gemm", (("GG_CONSUMERS", 2), ("GG_STAGES", 4)), "gg_tiny"),
    ("wgmma_gemm", (("GG_CONSUMERS", 2), ("GG_STAGES", 3)), "gg_tiny"),
)


def roles(kernel: str, config: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The warps of each role in a CTA (the kernels' headers): the adversarial schedules favour and delay them."""
    return HM.kernel_of(kernel).roles(config)


def encode_maps(kernel: str, config: dict[str, int], problem: HM.Problem,
                addresses: dict[str, int]) -> dict[str, bytes]:
    """The tensor maps' 128 bytes for arrays at ``addresses`` ({array name: address}), as the H100's driver
    encodes them (flashsim.sass.tensormap.TensorMap.encode_tiled, the driver's rules and layout)."""
    from flashsim.sass.tensormap import TensorMap

    host = V.host_of(kernel)
    targets = dict(host.map_targets)
    return {sp.name: TensorMap.encode_tiled(*sp.encode_args(addresses[targets[sp.name]])).to_bytes()
            for sp in host.tensor_maps(config, problem)}


@dataclass
class Outcome:
    """One interpreted launch: outputs (uint32 arrays; the sentinel where nothing was written), their sha256,
    the checking report, the error it ended with (BarrierDeadlock, SimulatedFault) or None, seconds."""

    outputs: dict[str, np.ndarray]
    digests: dict[str, str]
    report: Any
    error: BaseException | None
    seconds: float
    warp_instructions: int = 0


def run(b: V.Build, problem: str, *, options: ExecOptions | None = None, races: bool = True,
        timeline: bool = False) -> Outcome:
    """Run build ``b`` on ``problem`` in the interpreter, inside flashsim.cuda.checking when ``races`` or
    ``timeline`` (else ``report`` is None)."""
    import flashsim.cuda as fc

    p = HM.PROBLEMS[problem]
    if p.kernel != b.kernel:
        raise ValueError(f"problem {problem!r} is a {p.kernel} problem, the build is {b.kernel}")
    host = V.host_of(b.kernel)
    cfg = b.config
    fn = V.interpreter_module(b).get_function(HM.kernel_of(b.kernel).function)
    ins = host.inputs(p)
    geo = host.geometry(cfg, p)
    outs = {o: fc.asarray(np.full(shape, V.SENTINEL, np.uint32)) for o, shape in host.outputs(p).items()}
    d = {**{i: fc.asarray(a) for i, a in ins.items()}, **outs}
    maps = encode_maps(b.kernel, cfg, p, {k: int(v.data.ptr) for k, v in d.items()})
    args = host.args({t: V.tensor_map_arg(raw) for t, raw in maps.items()}, d, p)
    if geo["shared_mem"]:
        fn.max_dynamic_shared_size_bytes = geo["shared_mem"]
    err, info = None, None
    t0 = time.perf_counter()
    ctx = fc.checking(banks=False, races=races, timeline=timeline) if races or timeline else contextlib.nullcontext()
    with ctx as rep:
        try:
            info = fn(geo["grid"], geo["block"], args, shared_mem=geo["shared_mem"], exec_options=options)
        except (BarrierDeadlock, SimulatedFault) as exc:
            err = exc
    secs = time.perf_counter() - t0
    got = {k: v.get() for k, v in outs.items()}
    n = info["warp_instructions"] if info else sum(r.warp_instructions for r in rep.launches) if rep else 0
    return Outcome(got, {k: V._sha(v) for k, v in got.items()}, rep, err, secs, int(n))


# ================================================================================================ the H100 record
def gpu_digests(build_key: str, problem: str, record: Path = RECORD) -> dict[str, str] | None:
    """The sha256 of the H100's outputs of a correct run, or None when the record lacks it."""
    if not record.is_file():
        return None
    rec = json.loads(record.read_text())
    e = rec.get("correct", {}).get(build_key, {}).get(problem)
    if not e or "record" not in e:
        return None
    return {k: v["sha256"] for k, v in e["record"].items()}


def sweep_build(kernel: str, config: dict[str, int], problem: str, *, schedules: int, seed: int = 0,
                log=None) -> dict:
    """One correct build under the default, adversarial and ``schedules`` seeded schedules: how many runs
    ended, were race- and finding-free, and gave the H100's bits."""
    b = recorded_build(kernel, 0, **config)
    want = gpu_digests(b.key, problem)
    labels: list = [None, *adversarial(roles(kernel, b.config)), *range(seed, seed + schedules)]
    res = {"build": b.key, "problem": problem, "cubin_sha256": b.sha256, "runs": 0, "ended": 0, "clean": 0,
           "h100_bits": 0, "h100_record": want is not None, "failures": [], "seconds": 0.0,
           "warp_instructions": 0}
    t0 = time.perf_counter()
    for label in labels:
        o = run(b, problem, options=schedule_options(label))
        res["runs"] += 1
        res["warp_instructions"] += o.warp_instructions
        ended = o.error is None
        clean = ended and o.report.race_count == 0 and not o.report.protocol
        same = want is not None and o.digests == want
        res["ended"] += ended
        res["clean"] += clean
        res["h100_bits"] += same
        if not (ended and clean and same) and len(res["failures"]) < 10:
            res["failures"].append({"schedule": describe(label), "error": str(o.error)[:500] if o.error else None,
                                    "races": o.report.race_count, "protocol": [str(p) for p in o.report.protocol[:3]],
                                    "digests": o.digests})
        if log and res["runs"] % 100 == 0:
            log(f"  {b.key} {problem}: {res['runs']}/{len(labels)} runs, {res['h100_bits']} with the H100's bits")
    res["seconds"] = round(time.perf_counter() - t0, 1)
    return res


# ================================================================================================ mutants
_LINE_RE = re.compile(r"([\w./-]+\.cu[h]?):(\d+)")


def _kernel_lines(text: str, source: str) -> set[int]:
    """The lines of ``source`` (a file name) that ``text`` names as file:line."""
    return {int(n) for f, n in _LINE_RE.findall(text) if f.rsplit("/", 1)[-1] == source}


@dataclass
class Verdict:
    """What the interpreter reported for one mutant: the kinds seen (deadlock, race, fault, protocol), under
    which schedule, the source lines named, and whether kind, lines and phrases match the catalogue."""

    mutant: str
    kinds: list[str]
    schedule: str
    lines: list[int]
    expected_lines: dict[str, int]
    matches: bool
    why: str
    text: str
    schedules_tried: int
    details: dict = field(default_factory=dict)


def _findings(o: Outcome, source: str) -> tuple[list[str], dict[str, set[int]], str]:
    """(kinds, {kind: lines}, text) of one outcome."""
    kinds, lines, text = [], {}, []
    if isinstance(o.error, BarrierDeadlock):
        kinds.append("deadlock")
        lines["deadlock"] = _kernel_lines(str(o.error), source)
        text.append(str(o.error))
    elif isinstance(o.error, SimulatedFault):
        kinds.append("fault")
        lines["fault"] = _kernel_lines(str(o.error), source)
        text.append(str(o.error))
    if o.report.race_count:
        kinds.append("race")
        lines["race"] = set()
        for r in o.report.race_sites:
            lines["race"] |= {n for f, n in (*r.first.lines, *r.second.lines) if f.rsplit("/", 1)[-1] == source}
        text.append(o.report.text(top=6).split("races:", 1)[-1][:3000])
    if o.report.protocol:
        kinds.append("protocol")
        lines["protocol"] = set().union(*(_kernel_lines(p.message, source) for p in o.report.protocol))
        text.extend(str(p) for p in o.report.protocol[:4])
    return kinds, lines, "\n".join(text)


#: accesses placed by what they are rather than by their line: ptxas's line table gives the HGMMA instructions
#: of one inlined wgmma call the lines of neighbouring statements (in wgmma_gemm.cu the calls at @gg_mma_first
#: and @gg_mma own HGMMAs listed at the wait, release and loop lines around them), so a wgmma read counts as
#: at the kernel's wgmma calls
OP_ANCHORS = {"wgmma read": ("@gg_mma", "@gg_mma_first")}


def _access_lines(acc, source: str, anchors: dict[str, list[int]]) -> set[int]:
    out = {n for f, n in acc.lines if f.rsplit("/", 1)[-1] == source}
    for name in OP_ANCHORS.get(acc.op, ()):
        out |= set(anchors.get(name, ()))
    return out


def _race_pairs_hit(o: Outcome, want: set[int], source: str, kernel: str) -> bool:
    """Some race's two accesses each lie (through their inline chains) on an expected line, not the same one."""
    anchors = HM.anchor_lines(kernel)
    for r in o.report.race_sites:
        a = _access_lines(r.first, source, anchors) & want
        b = _access_lines(r.second, source, anchors) & want
        if a and b and len(a | b) > 1:
            return True
    return False


def judge(m: HM.Mutant, *, schedules: int = 8, seed: int = 0) -> Verdict:
    """Run mutant ``m`` on its problem under the default schedule, then the adversarial schedules of its
    roles, then seeded schedules, until one reports the catalogue's kind; judge kind, lines and phrases."""
    k = HM.kernel_of(m.kernel)
    b = recorded_build(m.kernel, m.value, **m.build_config)
    want = HM.report_lines(m)
    want_lines = set(want.values())
    labels: list = [None, *adversarial(roles(m.kernel, b.config)), *range(seed, seed + schedules)]
    first = None
    tried = 0
    for label in labels:
        o = run(b, m.problem, options=schedule_options(label))
        tried += 1
        kinds, lines, text = _findings(o, k.source)
        if first is None:
            first = (label, o, kinds, lines, text)
        if m.kind == "none":
            if kinds:
                return Verdict(m.id, kinds, describe(label), sorted(set().union(*lines.values())), want, False,
                               "a report where the SASS holds no bug", text, tried)
            continue
        if m.kind not in kinds:
            continue
        got = lines[m.kind]
        if m.kind == "race":
            ok = _race_pairs_hit(o, want_lines, k.source, m.kernel)
            why = ("a race between two expected lines" if ok
                   else f"races, but not between the lines {sorted(want_lines)}")
        else:
            missing = sorted(want_lines - got)
            ok = not missing
            why = "every expected line named" if ok else f"lines {missing} not named"
        missing_says = [s for s in m.says if s not in text]
        if ok and missing_says:
            ok, why = False, f"the report does not say {missing_says}"
        return Verdict(m.id, kinds, describe(label), sorted(got), want, ok, why, text, tried,
                       {"races": o.report.race_count, "protocol": len(o.report.protocol)})
    label, o, kinds, lines, text = first
    if m.kind == "none":
        return Verdict(m.id, kinds, "every schedule", [], want, True, "no report under any schedule", text, tried)
    return Verdict(m.id, kinds, describe(label), sorted(set().union(*lines.values())) if lines else [], want, False,
                   f"no {m.kind} under {tried} schedules", text, tried)


# ================================================================================================ main
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.hopper_interp", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep", help="the correct builds under many schedules")
    s.add_argument("--schedules", type=int, default=1000, help="seeded schedules per build (default 1000)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--builds", help="comma-separated build keys (default: all of SWEEP_RUNS)")
    s.add_argument("--json", help="write the results here")
    mu = sub.add_parser("mutants", help="the planted bugs' reports")
    mu.add_argument("--schedules", type=int, default=8, help="seeded schedules to try after the adversarial ones")
    mu.add_argument("--only", help="comma-separated mutant ids")
    mu.add_argument("--json", help="write the verdicts here")
    a = ap.parse_args(argv)
    from flashsim.sass.toolchain import versions

    out: dict[str, Any] = {"command": "python -m flashsim.gpu.hopper_interp " + " ".join(sys.argv[1:] if argv is None
                                                                                         else argv),
                           "toolchain": versions(), "date": time.strftime("%Y-%m-%d")}
    ok = True
    if a.cmd == "sweep":
        known = [V.build_key(k, 0, **dict(c)) for k, c, _ in SWEEP_RUNS]
        keys = set(a.builds.split(",")) if a.builds else None
        if keys is not None and keys - set(known):
            ap.error(f"--builds: unknown {sorted(keys - set(known))} (builds: {', '.join(known)})")
        out["sweeps"] = []
        for kernel, config, problem in SWEEP_RUNS:
            key = V.build_key(kernel, 0, **dict(config))
            if keys is not None and key not in keys:
                continue
            r = sweep_build(kernel, dict(config), problem, schedules=a.schedules, seed=a.seed, log=print)
            out["sweeps"].append(r)
            good = r["runs"] == r["ended"] == r["clean"] == r["h100_bits"]
            ok = ok and good
            print(f"{key} {problem}: {r['runs']} schedules, {r['ended']} ended, {r['clean']} clean, {r['h100_bits']} "
                  f"with the H100's bits, {r['seconds']}s{'' if good else '  FAILED'}", flush=True)
    else:
        only = set(a.only.split(",")) if a.only else None
        if only is not None and only - {m.id for m in HM.MUTANTS}:
            ap.error(f"--only: unknown mutants {sorted(only - {m.id for m in HM.MUTANTS})} "
                     f"(mutants: {', '.join(m.id for m in HM.MUTANTS)})")
        out["mutants"] = []
        for m in HM.MUTANTS:
            if only is not None and m.id not in only:
                continue
            v = judge(m, schedules=a.schedules)
            out["mutants"].append(dataclasses.asdict(v))
            ok = ok and v.matches
            print(f"{m.id}: expected {m.kind} at {v.expected_lines}; reported {'+'.join(v.kinds) or 'nothing'} under "
                  f"{v.schedule} ({v.schedules_tried} tried), lines {v.lines}: {'ok' if v.matches else 'NO'} ({v.why})",
                  flush=True)
    if a.json:  # file names relative to the repository
        Path(a.json).write_text(json.dumps(out, indent=1, default=str).replace(str(REPO) + "/", ""))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
