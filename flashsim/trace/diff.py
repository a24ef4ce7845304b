"""Diff two traces: align events by (CTA, warp, tag, occurrence), report the first divergence and a summary.

The first divergence is the earliest (by sequence number, then CTA and warp) event whose registers differ
or that one side lacks: its tag and occurrence, the lanes and registers that differ with both values in
hex and as numbers, the distance in units in the last place, and the warp's events just before it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from flashsim.errors import location
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


#: (width, largest non-NaN magnitude) of the fields a register format holds
_FIELD = {"f32": (32, 0x7F800000), "f16": (16, 0x7C00), "bf16": (16, 0x7F80)}


def _field_ulp(a: np.ndarray, b: np.ndarray, width: int, inf: int) -> np.ndarray:
    """Distance of two float fields in units in the last place (-1 if either is NaN): the sign-magnitude
    bits mapped to integers that order like the values (+0 and -0 both 0)."""
    mag = (1 << (width - 1)) - 1
    am, bm = a & mag, b & mag
    oa = np.where(a >> (width - 1), -am, am)
    ob = np.where(b >> (width - 1), -bm, bm)
    return np.where((am > inf) | (bm > inf), -1, np.abs(oa - ob))


def ulp_distance(a, b, fmt: str):
    """Units in the last place between registers (ints or arrays of 32-bit patterns) read as ``fmt``: for
    a pair, the larger of the two halves' distances; NaN against anything counts as -1 (no distance)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    if fmt == "f32":
        return _field_ulp(a, b, *_FIELD["f32"])
    field = _FIELD["bf16" if fmt.startswith("bf16") else "f16"]
    lo = _field_ulp(a & 0xFFFF, b & 0xFFFF, *field)
    if fmt in ("f16", "bf16"):
        return lo
    hi = _field_ulp(a >> 16, b >> 16, *field)
    return np.where((lo < 0) | (hi < 0), -1, np.maximum(lo, hi))


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


_NO_CELLS = np.zeros((5, 0), np.int64)


@dataclass
class Divergence:
    cta: int
    warp: int
    tag: str
    occurrence: int
    seq: int
    kind: str                    # 'registers', 'missing in A', 'missing in B', 'register count'
    table: np.ndarray = field(default_factory=lambda: _NO_CELLS)  # rows lane, register, a bits, b bits, ulp
    before: list = field(default_factory=list)  # the warp's preceding events (seq, tag) in A

    @property
    def n_cells(self) -> int:
        return self.table.shape[1]

    @property
    def cells(self) -> list[tuple[int, int, int, int, int]]:
        """(lane, register, a bits, b bits, ulp) of every differing cell, lane-major."""
        return [tuple(int(x) for x in col) for col in self.table.T]


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
        lines.append(f"first divergence: {location(cta=d.cta, warp=d.warp)} {d.tag} #{d.occurrence} (seq {d.seq}): "
                     f"{d.kind}")
        if d.before:
            lines.append("  events before it in this warp: " + ", ".join(f"{s}:{t}" for s, t in d.before))
        names = spec.registers(kernel, d.tag, headdim) if d.kind == "registers" else []
        for lane, r, a, b, ulp in (tuple(int(x) for x in col) for col in d.table[:, :max_cells].T):
            name = names[r] if r < len(names) else f"r{r}"
            fmt = spec.register_format(kernel, d.tag, name, dtype)
            lines.append(f"  {location(lane=lane):<7} {name:<16} A 0x{a:08x} ({as_number(a, fmt)})  B 0x{b:08x} "
                         f"({as_number(b, fmt)})  {'ulp ' + str(ulp) if ulp >= 0 else 'NaN'}")
        if d.n_cells > max_cells:
            lines.append(f"  ... {d.n_cells - max_cells} more lane/register cells differ in this event")
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
    for (cta, warp, _, _), e in ka.items():  # in (cta, warp, seq) order
        by_warp[(cta, warp)].append((e.seq, e.tag))
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
            lanes, regs = np.nonzero(ea.regs != eb.regs)
            if lanes.size:
                names = spec.registers(kernel, tag, headdim)
                fmts = np.array([spec.register_format(kernel, tag, n, dtype) for n in names] or ["f32"])
                a, b = ea.regs[lanes, regs].astype(np.int64), eb.regs[lanes, regs].astype(np.int64)
                ulp = np.empty(lanes.size, np.int64)
                cell_fmt = fmts[np.minimum(regs, fmts.size - 1)]
                for fmt in np.unique(cell_fmt):
                    m = cell_fmt == fmt
                    ulp[m] = ulp_distance(a[m], b[m], str(fmt))
                div = Divergence(cta, warp, tag, occ, ea.seq, "registers", np.stack([lanes, regs, a, b, ulp]))
        if div is None:
            continue
        prior = [x for x in by_warp.get((cta, warp), []) if x[0] < div.seq]
        div.before = prior[-context:]
        divs.append(div)
        s = per_tag.setdefault(tag, {"events": 0, "cells": 0, "max_ulp": 0})
        s["events"] += 1
        s["cells"] += div.n_cells
        s["max_ulp"] = max(s["max_ulp"], int(div.table[4].max(initial=0)))
    compared = len(set(ka) & set(kb))
    return DiffResult(a_name, b_name, compared, divs, per_tag)
