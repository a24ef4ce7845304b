"""Diff two traces: align events by (CTA, warp, tag, occurrence), report the first divergence and a summary.

The first divergence is the earliest (by sequence number, then CTA and warp) event whose registers differ
or that one side lacks: its tag and occurrence, the lanes and registers that differ with both values in
hex and as numbers, the distance in units in the last place, and the warp's events just before it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from flashsim.trace import spec


def _key_events(events) -> dict:
    """{(cta, warp, tag, occurrence): event}, occurrence counted in sequence order within a warp."""
    out, occ = {}, defaultdict(int)
    for e in sorted(events, key=lambda e: (e.cta, e.warp, e.seq)):
        k = (e.cta, e.warp, e.tag)
        out[(e.cta, e.warp, e.tag, occ[k])] = e
        occ[k] += 1
    return out



def _halves(x: int) -> tuple[int, int]:
    return x & 0xFFFF, x >> 16


def _ordered(bits: int, width: int) -> int:
    """Map a float's bits to an integer that orders like the value (+0 and -0 both 0)."""
    sign = bits >> (width - 1)
    mag = bits & ((1 << (width - 1)) - 1)
    return -mag if sign else mag


def ulp_distance(a: int, b: int, fmt: str) -> int:
    """Units in the last place between two registers read as ``fmt`` (for a pair, the larger of the two
    halves' distances); NaN against anything else counts as -1 (no distance)."""
    def nan(x, w):
        e = (1 << (w - 1)) - 1
        return (x & e) > {32: 0x7F800000, 16: 0x7C00 if fmt.startswith("f16") else 0x7F80}[w]
    if fmt == "f32":
        if nan(a, 32) or nan(b, 32):
            return -1
        return abs(_ordered(a, 32) - _ordered(b, 32))
    if fmt == "f16":
        a, b = a & 0xFFFF, b & 0xFFFF
        if nan(a, 16) or nan(b, 16):
            return -1
        return abs(_ordered(a, 16) - _ordered(b, 16))
    worst = 0
    for x, y in zip(_halves(a), _halves(b)):
        if nan(x, 16) or nan(y, 16):
            return -1
        worst = max(worst, abs(_ordered(x, 16) - _ordered(y, 16)))
    return worst


def as_number(x: int, fmt: str) -> str:
    """A register's value as text: f32, a 16-bit value, or a packed pair 'lo, hi'."""
    def h(v, kind):
        if kind == "bf16":
            return repr(float(np.uint32(v << 16).view(np.float32)))
        return repr(float(np.uint16(v).view(np.float16)))
    if fmt == "f32":
        return repr(float(np.uint32(x).view(np.float32)))
    if fmt == "f16":
        return h(x & 0xFFFF, "f16")
    kind = fmt[:-2]
    lo, hi = _halves(x)
    return f"{h(lo, kind)}, {h(hi, kind)}"


@dataclass
class Divergence:
    cta: int
    warp: int
    tag: str
    occurrence: int
    seq: int
    kind: str                    # 'registers', 'missing in A', 'missing in B', 'register count'
    cells: list = field(default_factory=list)   # (lane, register name, a bits, b bits, ulp)
    before: list = field(default_factory=list)  # the warp's preceding events (seq, tag) in A


@dataclass
class DiffResult:
    a_name: str
    b_name: str
    compared: int
    divergences: list            # every differing event, in order
    per_tag: dict                # tag -> {'events': n, 'cells': n, 'max_ulp': n}

    @property
    def first(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None

    @property
    def clean(self) -> bool:
        return not self.divergences

    def format(self, kernel: str, headdim: int, dtype: str = "float16", max_cells: int = 8) -> str:
        lines = [f"compared {self.compared} events of {self.a_name} (A) and {self.b_name} (B)"]
        if self.clean:
            lines.append("no divergence: every register of every event is bit-identical")
            return "\n".join(lines)
        d = self.first
        lines.append(f"first divergence: CTA {d.cta} warp {d.warp} {d.tag} #{d.occurrence} (seq {d.seq}): {d.kind}")
        if d.before:
            lines.append("  events before it in this warp: " + ", ".join(f"{s}:{t}" for s, t in d.before))
        names = spec.registers(kernel, d.tag, headdim) if d.kind == "registers" else []
        for lane, r, a, b, ulp in d.cells[:max_cells]:
            name = names[r] if r < len(names) else f"r{r}"
            fmt = spec.register_format(kernel, d.tag, name, dtype)
            lines.append(f"  lane {lane:2d} {name:<16} A 0x{a:08x} ({as_number(a, fmt)})  B 0x{b:08x} "
                         f"({as_number(b, fmt)})  {'ulp ' + str(ulp) if ulp >= 0 else 'NaN'}")
        if len(d.cells) > max_cells:
            lines.append(f"  ... {len(d.cells) - max_cells} more lane/register cells differ in this event")
        lines.append("divergences per tag:")
        for tag, s in sorted(self.per_tag.items(), key=lambda kv: spec.TAG_ID.get(kv[0], 99)):
            lines.append(f"  {tag:<10} {s['events']:6d} events  {s['cells']:8d} lane-registers  max ulp "
                         f"{s['max_ulp']}")
        return "\n".join(lines)


def diff(a_events, b_events, *, kernel: str, headdim: int, dtype: str = "float16", a_name: str = "A",
         b_name: str = "B", context: int = 3) -> DiffResult:
    """Align ``a_events`` and ``b_events`` (objects with cta, warp, seq, tag, regs) and compare them."""
    ka, kb = _key_events(a_events), _key_events(b_events)
    by_warp = defaultdict(list)
    for e in sorted(a_events, key=lambda e: (e.cta, e.warp, e.seq)):
        by_warp[(e.cta, e.warp)].append((e.seq, e.tag))
    divs, per_tag = [], {}
    for key in sorted(set(ka) | set(kb), key=lambda k: ((ka.get(k) or kb.get(k)).seq, k[0], k[1])):
        cta, warp, tag, occ = key
        ea, eb = ka.get(key), kb.get(key)
        ref = ea or eb
        div = None
        if ea is None or eb is None:
            div = Divergence(cta, warp, tag, occ, ref.seq, "missing in A" if ea is None else "missing in B")
        elif ea.regs.shape != eb.regs.shape:
            div = Divergence(cta, warp, tag, occ, ea.seq, "register count")
        else:
            ne = np.nonzero(ea.regs != eb.regs)
            if ne[0].size:
                names = spec.registers(kernel, tag, headdim)
                cells = []
                for lane, r in zip(*ne):
                    a, b = int(ea.regs[lane, r]), int(eb.regs[lane, r])
                    fmt = spec.register_format(kernel, tag, names[r] if r < len(names) else "", dtype)
                    cells.append((int(lane), int(r), a, b, ulp_distance(a, b, fmt)))
                div = Divergence(cta, warp, tag, occ, ea.seq, "registers", cells)
        if div is None:
            continue
        prior = [x for x in by_warp.get((cta, warp), []) if x[0] < div.seq]
        div.before = prior[-context:]
        divs.append(div)
        s = per_tag.setdefault(tag, {"events": 0, "cells": 0, "max_ulp": 0})
        s["events"] += 1
        s["cells"] += len(div.cells)
        s["max_ulp"] = max([s["max_ulp"]] + [c[4] for c in div.cells])
    compared = len(set(ka) & set(kb))
    return DiffResult(a_name, b_name, compared, divs, per_tag)
