"""The schedule of fa4h.cu (seed 004's pipeline on sm_90) read from a simulated run: the producer's TMA loads and
the consumers' waits and releases, from the interpreter's timeline events, checked against
:mod:`flashsim.attention.ws_plan`.

:func:`simulate` runs the kernel's cubin in the interpreter on a problem with the timeline on; :func:`loads`
groups the producer's copies of one CTA into loads (one full-barrier phase each: its barrier, stage, phase,
bytes and shared-memory range, and the empty-barrier waits it passed before); :func:`check_loads` compares them
with the plan of the CTA's work tiles; :func:`format_loads` prints the seed's occupancy table from the run and
:func:`consumer_events` / :func:`format_consumers` the consumer side. The barrier names are fa4h.cu's layout
(``fa4h.BARRIERS``: eight bytes each from the first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from flashsim.attention.ws_plan import KVLayout, cta_plan, load_diffs, occupancy
from flashsim.errors import bad_argument

__all__ = ["RunLoad", "check_loads", "consumer_events", "format_consumers", "format_loads", "loads", "simulate"]

_RANGE = re.compile(r"into shared (0x[0-9a-f]+)\.\.(0x[0-9a-f]+)")
_PARITY = re.compile(r"parity (\d)")


@dataclass
class RunLoad:
    """One load of the run: the full barrier whose phase its copies complete, the stage, that phase (the
    barrier's completed phases when the load was issued), bytes, [start, end) relative to its buffer (Q or
    K/V region), the empty-barrier waits the producer passed since the previous load ((name, parity), ...)
    and the step of its first copy."""

    barrier: str
    buffer: str
    stage: int
    phase: int
    nbytes: int
    region: tuple[int, int]
    waits: tuple[tuple[str, int], ...]
    step: int
    tile: str = ""
    plan_ok: bool | None = None
    why: list[str] = field(default_factory=list)


def simulate(q, k, v, *, ctas: int = 1, **kw):
    """fa4h's cubin on ``q, k, v`` in the interpreter on ``ctas`` CTAs with the timeline: (events, the call's
    AttentionArgs, the instance, out, lse)."""
    import flashsim.cuda as fc
    from flashsim.kernels.launch import prepare
    from flashsim.kernels.spec import get

    if not isinstance(ctas, int) or ctas < 1:
        raise bad_argument("ctas", ctas, "expected a positive number of CTAs")
    spec = get("fa4h")
    prep = prepare("fa4h", q, k, v, backend="interp", **kw)
    args = spec.check(q, k, v, **kw)
    inst = spec.instance_for(args)
    prep.grid = (min(ctas, inst.work_tiles(args)), 1, 1)
    with fc.checking(banks=False, races=False, timeline=True) as rep:
        prep.func(prep.grid, (prep.threads,), prep.params, shared_mem=prep.smem)
    out, lse = prep.fetch()
    return rep.events, args, inst, out, lse


def _names(events, cta: int) -> dict[int, str]:
    from flashsim.kernels.fa4h import BARRIERS

    inits = sorted({e.barrier for e in events if e.cta == cta and e.kind == "init"})
    if len(inits) != len(BARRIERS):
        from flashsim.errors import location

        raise ValueError(f"{location(cta=cta)}: {len(inits)} mbarriers initialised, fa4h.cu has {len(BARRIERS)}")
    first = inits[0]
    return {a: BARRIERS[(a - first) // 8] for a in inits}


def loads(events, cta: int = 0) -> list[RunLoad]:
    """The producer's loads in CTA ``cta``, in issue order."""
    names = _names(events, cta)
    groups: dict[tuple[int, int], dict] = {}
    order = []
    waits: list[tuple[str, int]] = []
    for e in events:
        if e.cta != cta:
            continue
        if e.kind in ("pass", "resume") and e.warp == 0 and "empty" in names.get(e.barrier, ""):
            waits.append((names[e.barrier], int(_PARITY.search(e.detail).group(1))))
        if e.kind != "copy":
            continue
        m = _RANGE.search(e.detail)
        lo, hi = int(m.group(1), 16), int(m.group(2), 16)
        key = (e.barrier, e.phase)
        if key not in groups:
            groups[key] = {"lo": lo, "hi": hi, "bytes": 0, "step": e.step, "waits": tuple(waits)}
            order.append(key)
            waits = []
        g = groups[key]
        g["lo"], g["hi"] = min(g["lo"], lo), max(g["hi"], hi)
        g["bytes"] += int(e.detail.split()[0])
    out = []
    for bar, phase in order:
        g, name = groups[(bar, phase)], names[bar]
        buf = "q" if name.startswith("q_") else "kv"
        out.append(RunLoad(name, buf, int(name[-2]), phase, g["bytes"], (g["lo"], g["hi"]), g["waits"], g["step"]))
    for buf in ("q", "kv"):
        mine = [ld for ld in out if ld.buffer == buf]
        if mine:
            base = min(ld.region[0] for ld in mine)
            for ld in mine:
                ld.region = (ld.region[0] - base, ld.region[1] - base)
    return out


def check_loads(run: list[RunLoad], args, inst, cta: int = 0, ctas: int = 1) -> list[str]:
    """Compare the run's loads with ws_plan's loads of the CTA's work tiles (tiles cta, cta + ctas, ...; stages
    and phases carrying over from tile to tile); names each run load after its plan load (K/V by KV block).
    Returns the differences."""
    from flashsim.kernels import fa2

    pb = fa2.problem(inst, args)
    layout = KVLayout(inst.headdim, inst.headdim_v, inst.block_n)
    first, counts = [], []  # per work tile of the CTA: its first KV block, its number of KV blocks
    for t in range(cta, inst.work_tiles(args), ctas):
        lo, hi = (int(x[0]) for x in pb.n_block_range(np.array([pb.m_blocks - 1 - t % pb.m_blocks])))
        first.append(lo)
        counts.append(max(hi - lo, 0))
    plan = [(ld.tile if ld.buffer == "q" else f"{ld.tile[0]}{int(ld.tile[1:]) + first[i]}", ld)
            for i, ld in cta_plan(counts, layout, q_rows=64)]
    msgs = []
    if len(plan) != len(run):
        msgs.append(f"the run issued {len(run)} loads, the plan has {len(plan)}")
    for i, (ld, (tile, want)) in enumerate(zip(run, plan)):
        why = load_diffs(want, buffer=ld.buffer, stage=ld.stage, expect_tx=ld.nbytes, region=ld.region,
                         fill=ld.phase, waits=ld.waits)
        ld.tile, ld.plan_ok, ld.why = tile, not why, why
        if why:
            msgs.append(f"load {i + 1} ({tile}): " + "; ".join(why))
    return msgs


def format_loads(run: list[RunLoad]) -> str:
    """The run's loads as the seed's table: per load its barrier and phase, bytes, waits and the occupancy of
    [Q stage 0, Q stage 1, KV stage 0, KV stage 1, KV stage 2] after it (names from the plan check)."""
    rows = [f"{'step':>4}  {'load':<5} {'barrier':<11} {'phase':>5}  {'bytes':<15} {'waits passed':<30} "
            f"{'plan':<4} occupancy"]
    occ = occupancy((ld.buffer, ld.stage, ld.tile or "?") for ld in run)
    for i, (ld, o) in enumerate(zip(run, occ), 1):
        waits = ", ".join(f"{n}@{p}" for n, p in ld.waits)
        ok = {None: "", True: "ok", False: "DIFF"}[ld.plan_ok]
        rows.append(f"{i:>4}  {ld.tile or '?':<5} {ld.barrier:<11} {ld.phase:>5}  "
                    f"{f'{ld.region[0]}..{ld.region[1]}':<15} {waits:<30} {ok:<4} [{', '.join(o)}]")
    return "\n".join(rows)


def consumer_events(events, cta: int = 0) -> list[tuple]:
    """The consumer warpgroups' protocol steps in CTA ``cta`` (their first warps, 4 and 8): (step, consumer,
    what, barrier, parity or phase) for every full-barrier wait passed, every empty-barrier arrival and every
    completed generation of the s0/s1 ordering barriers (named barriers 1 and 2)."""
    names = _names(events, cta)
    out = []
    for e in events:
        if e.cta != cta or e.warp not in (4, 8):
            continue
        c = (e.warp - 4) // 4
        name = names.get(e.barrier)
        if e.kind in ("pass", "resume") and name and "full" in name:
            out.append((e.step, c, "waited", name, int(_PARITY.search(e.detail).group(1))))
        elif e.kind == "arrive" and name and "empty" in name:
            out.append((e.step, c, "released", name, e.phase))
        elif e.kind == "bar_done" and e.barrier in (1, 2):
            out.append((e.step, c, "turn", f"order bar {e.barrier}", e.phase))
    return out


def format_consumers(rows: list[tuple]) -> str:
    lines = [f"{'step':>6}  {'consumer':<8} {'what':<9} {'barrier':<12} parity/phase"]
    for step, c, what, name, p in rows:
        lines.append(f"{step:>6}  {c:<8} {what:<9} {name:<12} {p if p >= 0 else '-'}")
    return "\n".join(lines)
