"""The planted protocol bugs of gpu/kernels/fa4h.cu (FH_MUTANT 1..12, described in its header) as data, and their
runs in the interpreter: what each is, the problem that shows it, and what the interpreter must report.

    python -m flashsim.gpu.fa4h_mutants [--mutants 1,2,...] [--schedules 2]

Each mutant runs on its problem on one CTA (every work tile in turn, so phases carry over from tile to tile)
under the default schedule and seeded ones, with the race detector; the first report of the expected kind is
judged against the entry: ``deadlock`` (the BarrierDeadlock message must name the parked warps' waits: the
source lines of the marked waits, or the barrier), ``race`` (the race detector's hazard between the expected
pair of instructions: TMA load UTMALDG, TMA store UTMASTG, wgmma HGMMA, shared store STS). Nothing here needs a
GPU.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

KERNEL = "fa4h"
SOURCE = Path(__file__).resolve().parent / "kernels" / "fa4h.cu"

#: the problems (batch 1, bf16, inputs N(0, 1) from seed 0): the uneven qk 192 / v 128 layout over two rounds of
#: the three K/V stages, two heads of two m_blocks; and causal with more queries than keys, whose first m_block
#: has no key (a zero-work tile) before the next head's tiles
PROBLEMS = {
    "uneven": dict(seqlen_q=256, seqlen_k=384, heads=2, hdim_qk=192, hdim_v=128, causal=False),
    "zero_work": dict(seqlen_q=300, seqlen_k=64, heads=2, hdim_qk=128, hdim_v=128, causal=True),
}


@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``kind`` deadlock or race; ``evidence``: regular expressions every one of which the
    report must match (for a deadlock, ``@name`` stands for ``fa4h.cu:<line of the marker>``)."""

    n: int
    what: str
    kind: str
    problem: str
    evidence: tuple[str, ...]


#: FH_MUTANT 5 (kv_empty count 1) has two outcomes: each consumer warpgroup's release completes a phase, a round
#: completes two, and the producer's parity falls out of step (the deadlock the interpreter's schedules reach, and
#: the H100 under racecheck and memcheck), unless a wait runs between the two releases and refills a stage the other
#: consumer still reads (the race the header of fa4h.cu names; the plain H100 run's wrong bits). The header is left
#: as it is: every build of fa4h.cu carries the source's MD5 in its line table, so the recorded cubins would change.
MUTANTS = (
    Mutant(1, "the producer's q_empty wait with the parity not flipped", "deadlock", "uneven",
           (r"warp=0\b[^:\n]*: waits at .*mbarrier\.cuh", r"mbarrier at shared 0x[0-9a-f]+ \(stage 2 of the 7",
            r"warp=4\b[^:\n]*: waits at .*@fh_wait_q_full")),
    Mutant(2, "stage 1's offset with the wrong sign", "race", "uneven", (r"UTMALDG", r"HGMMA")),
    Mutant(3, "the extra wait on kv_empty[1] before K into stage 0 left out", "race", "uneven",
           (r"WAR hazard .*HGMMA.*then bulk copy write .*UTMALDG",)),
    Mutant(4, "expect_tx of K announced for V", "deadlock", "uneven",
           (r"warp=4\b[^:\n]*: waits at .*@fh_wait_v_full", r"tx-count 16384 bytes pending",
            r"warp=0\b[^:\n]*: waits at .*@fh_wait_kv_empty")),
    Mutant(5, "kv_empty initialised with count 1", "deadlock", "uneven",
           (r"warp=0\b[^:\n]*: waits at .*@fh_wait_kv_empty",)),
    Mutant(6, "a zero-work tile skips the Q release", "deadlock", "zero_work",
           (r"warp=0\b[^:\n]*: waits at .*mbarrier\.cuh", r"mbarrier at shared 0x[0-9a-f]+ \(stage 2 of the 7",
            r"warp=4\b[^:\n]*: waits at .*@fh_wait_q_full")),
    Mutant(7, "the s0/s1 ordering barrier: consumer 0 never gets the first turn", "deadlock", "uneven",
           (r"warp=4\b[^:\n]*: waits at .*BAR\.SYNC", r"named barrier 1: 128 of 256 threads arrived")),
    Mutant(8, "a consumer's K-full wait with parity ^ 1", "deadlock", "uneven",
           (r"warp=0\b[^:\n]*: waits at .*@fh_wait_kv_empty", r"arrivals 1 of 2")),
    Mutant(9, "K released before wgmma.wait_group retired the S wgmmas", "race", "uneven",
           (r"WAR hazard .*HGMMA.*then bulk copy write .*UTMALDG",)),
    Mutant(10, "V of a tile's last KV block never released", "deadlock", "uneven",
           (r"warp=0\b[^:\n]*: waits at .*@fh_wait_kv_empty", r"arrivals 0 of 2")),
    Mutant(11, "__threadfence_block instead of fence.proxy.async before the TMA store of O", "race", "uneven",
           (r"RAW \(no fence\.proxy\.async\) hazard .*STS .*@fh_write_o.*then bulk store read .*UTMASTG",)),
    Mutant(12, "q_empty arrived before the TMA store has read sO", "race", "uneven",
           (r"WAR hazard .*bulk store read .*UTMASTG.*then bulk copy write .*UTMALDG",)),
)


def marker_line(name: str) -> int:
    """The line of ``// @name`` in fa4h.cu (exactly one)."""
    lines = [i for i, t in enumerate(SOURCE.read_text().splitlines(), 1) if re.search(rf"//\s*@{name}\b", t)]
    if len(lines) != 1:
        raise ValueError(f"@{name} marks {len(lines)} lines of {SOURCE.name}")
    return lines[0]


def evidence_patterns(m: Mutant) -> list[str]:
    """The mutant's evidence with each ``@name`` replaced by ``fa4h\\.cu:<its line>``."""
    return [re.sub(r"@(\w+)", lambda x: rf"fa4h\.cu:{marker_line(x.group(1))}\b", e) for e in m.evidence]


def inputs(problem: str):
    import ml_dtypes

    p = PROBLEMS[problem]
    rng = np.random.default_rng(0)
    shape = (1, p["seqlen_q"], p["heads"], p["hdim_qk"]), (1, p["seqlen_k"], p["heads"], p["hdim_qk"])
    q = rng.standard_normal(shape[0]).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal(shape[1]).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal(shape[1][:3] + (p["hdim_v"],)).astype(ml_dtypes.bfloat16)
    return q, k, v, {"causal": p["causal"]}


def module(n: int):
    """The interpreter's module of fa4h.cu built with FH_MUTANT=n (0: the correct kernel)."""
    from flashsim.kernels.sources import interpreted_module
    from flashsim.kernels.spec import get

    spec = get(KERNEL)
    return interpreted_module(spec.source, options=(*spec.build_options(), f"-DFH_MUTANT={int(n)}"), arch=spec.arch)


def run(n: int, problem: str, schedule=None) -> tuple[str, str]:
    """Mutant ``n`` (0: the correct kernel) on ``problem`` on one CTA under ``schedule`` with the race
    detector: (kind found: 'deadlock', 'race' or 'none'; the report's text)."""
    import flashsim.cuda as fc
    from flashsim.errors import SimulatedFault
    from flashsim.kernels.launch import prepare
    from flashsim.sass.machine import BarrierDeadlock
    from flashsim.sass.schedules import schedule_options

    q, k, v, kw = inputs(problem)
    prep = prepare(KERNEL, q, k, v, backend="interp", **kw)
    fn = module(n).get_function(prep.func.name)
    fn.max_dynamic_shared_size_bytes = prep.smem
    with fc.checking(banks=False, races=True) as rep:
        try:
            fn((1, 1, 1), (prep.threads,), prep.params, shared_mem=prep.smem, exec_options=schedule_options(schedule))
        except BarrierDeadlock as exc:
            return "deadlock", str(exc)
        except SimulatedFault as exc:
            return "fault", str(exc)
    if rep.race_count:
        return "race", "\n".join(str(s) for s in rep.race_sites[:8])
    if rep.protocol:
        return "protocol", "\n".join(str(s) for s in rep.protocol[:8])
    return "none", ""


def judge(m: Mutant, schedules: int = 2) -> dict:
    """The first schedule (default, then seeds 0..) whose report is of the mutant's kind, and whether it shows
    every piece of the evidence."""
    kinds = []
    for sched in [None, *range(schedules)]:
        kind, text = run(m.n, m.problem, sched)
        kinds.append(kind)
        if kind == m.kind:
            missing = [e for e in evidence_patterns(m) if not re.search(e, text, re.S)]
            return {"mutant": m.n, "kind": kind, "schedule": sched, "found": not missing, "missing": missing,
                    "report": text}
    return {"mutant": m.n, "kind": kinds, "schedule": None, "found": False, "missing": list(m.evidence), "report": ""}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutants", help="comma-separated numbers (default: all)")
    ap.add_argument("--schedules", type=int, default=2, help="seeded schedules tried after the default")
    a = ap.parse_args(argv)
    chosen = MUTANTS
    if a.mutants:
        try:
            want = {int(x) for x in a.mutants.split(",")}
        except ValueError:
            ap.error(f"--mutants {a.mutants!r}: expected comma-separated numbers")
        if want - {m.n for m in MUTANTS}:
            ap.error(f"--mutants: no mutant {sorted(want - {m.n for m in MUTANTS})} (1..{len(MUTANTS)})")
        chosen = [m for m in MUTANTS if m.n in want]
    if a.schedules < 0:
        ap.error(f"--schedules {a.schedules}: expected >= 0")
    bad = 0
    for m in chosen:
        t0 = time.time()
        r = judge(m, a.schedules)
        bad += not r["found"]
        where = "default schedule" if r["schedule"] is None else f"schedule {r['schedule']}"
        print(f"FH_MUTANT={m.n:<2} {m.what}: {'found' if r['found'] else 'NOT FOUND'} as {r['kind']} ({where}, "
              f"{time.time() - t0:.0f} s){'; missing ' + str(r['missing']) if r['missing'] else ''}", flush=True)
        first = r["report"].splitlines()[:3]
        for line in first:
            print("    " + line[:300])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
