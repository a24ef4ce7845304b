"""The synchronisation events of an interpreted launch as a timeline: mbarrier init, arrivals, expected and
completed transaction bytes, phase completions, waits (parked, resumed, timed out), bulk and tensor copies
issued and landed, named-barrier arrivals and completions, wgmma issued and retired.

Collected inside ``flashsim.cuda.checking(timeline=True)`` (``report.events``, a list of
:class:`SyncEvent`) and drawn by :func:`html` as one standalone page: a row per warp, time as the
interpreter's scheduling step, a mark per event (its colour the kind, its shape the barrier), every mark
titled with the PC, the SASS, the source line and the barrier's phase. The steps are the interleaving the
interpreter chose (the default schedule, or a seeded one): the order of events on one barrier is what the
protocol allowed on that run, not the GPU's timing.
"""

from __future__ import annotations

import html as _html
from dataclasses import asdict, dataclass

from flashsim.errors import location

__all__ = ["KINDS", "SyncEvent", "html"]

#: event kind -> (colour, meaning)
KINDS = {
    "init": ("#555555", "mbarrier.init"),
    "arrive": ("#1f77b4", "mbarrier arrival (with its count)"),
    "expect_tx": ("#9467bd", "transaction bytes announced"),
    "complete_tx": ("#17becf", "transaction bytes completed (a copy landed, or complete_tx)"),
    "phase": ("#2ca02c", "a phase completed"),
    "wait": ("#ff7f0e", "a wait found its phase incomplete: the lanes park"),
    "pass": ("#bcbd22", "a wait found its phase complete"),
    "resume": ("#d62728", "parked lanes resume: their phase completed"),
    "timeout": ("#8c564b", "parked lanes resume with false (try_wait's time limit)"),
    "copy": ("#e377c2", "a bulk or tensor copy issued"),
    "land": ("#7f7f7f", "a copy's bytes landed in shared memory"),
    "bar_arrive": ("#aec7e8", "named-barrier arrival"),
    "bar_done": ("#98df8a", "named barrier completed"),
    "wgmma": ("#ffbb78", "wgmma issued"),
    "retire": ("#c5b0d5", "wgmma group retired (wgmma.wait_group)"),
}


@dataclass(frozen=True)
class SyncEvent:
    """One synchronisation event: scheduling ``step``, linear ``cta`` index, ``warp``, ``pc`` (-1 for events
    of no instruction, as a copy landing), ``kind`` (:data:`KINDS`), ``barrier`` (an mbarrier's shared
    address, or a named barrier's id, or -1), ``phase`` (the barrier's completed phases at the event) and a
    ``detail`` text; ``sass`` and ``line`` locate the instruction."""

    step: int
    cta: int
    warp: int
    pc: int
    kind: str
    barrier: int = -1
    phase: int = -1
    detail: str = ""
    sass: str = ""
    line: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        bar = f" bar={self.barrier:#x}" if self.barrier >= 0 else ""
        ph = f" phase={self.phase}" if self.phase >= 0 else ""
        at = f" pc={self.pc:#06x} `{self.sass}` {self.line}" if self.pc >= 0 else ""
        return f"step {self.step} cta={self.cta} warp={self.warp} {self.kind}{bar}{ph} {self.detail}{at}".rstrip()


_SHAPES = ("circle", "square", "diamond", "triangle")


def _mark(shape: str, x: float, y: float, r: float, colour: str, title: str) -> str:
    """One SVG mark (circle, square, diamond or triangle) with a hover title."""
    if shape == "circle":
        head, tag = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}"', "circle"
    elif shape == "square":
        head, tag = f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r}" height="{2 * r}"', "rect"
    else:
        bottom = (f"{x:.1f},{y + r + 1:.1f} {x - r - 1:.1f},{y:.1f}" if shape == "diamond"
                  else f"{x - r - 1:.1f},{y + r:.1f}")
        right = f"{x + r + 1:.1f},{y:.1f}" if shape == "diamond" else f"{x + r + 1:.1f},{y + r:.1f}"
        head, tag = f'<polygon points="{x:.1f},{y - r - 1:.1f} {right} {bottom}"', "polygon"
    return f'{head} fill="{colour}"><title>{title}</title></{tag}>'


def html(events: list[SyncEvent], *, title: str = "flashsim synchronisation timeline", ctas=(0,),
         width: int = 1400) -> str:
    """A standalone HTML page drawing ``events`` of the CTAs ``ctas`` (linear indices; None: all)."""
    esc = _html.escape
    ev = [e for e in events if ctas is None or e.cta in ctas]
    rows = sorted({(e.cta, e.warp) for e in ev})
    bars = sorted({e.barrier for e in ev if e.barrier >= 0})
    shape_of = {b: _SHAPES[i % len(_SHAPES)] for i, b in enumerate(bars)}
    lo = min((e.step for e in ev), default=0)
    hi = max((e.step for e in ev), default=1)
    span = max(1, hi - lo)
    left, row_h, top = 150, 26, 30
    plot = width - left - 20
    height = top + row_h * max(1, len(rows)) + 40
    y_of = {r: top + row_h * i + row_h / 2 for i, r in enumerate(rows)}
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>",
           "<style>body{font-family:sans-serif;font-size:13px} td{padding:2px 8px}</style></head><body>",
           f"<h1>{esc(title)}</h1>",
           f"<p>{len(ev)} events, scheduling steps {lo}..{hi}, {len(rows)} warps, {len(bars)} barriers. "
           "Hover a mark for its instruction.</p>",
           f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    for (c, w), y in y_of.items():
        out.append(f'<text x="4" y="{y + 4:.1f}">{location(cta=c, warp=w)}</text>'
                   f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot}" y2="{y:.1f}" stroke="#ddd"/>')
    for e in ev:
        x = left + plot * (e.step - lo) / span
        colour = KINDS.get(e.kind, ("#000", ""))[0]
        shape = shape_of.get(e.barrier, "circle")
        out.append(_mark(shape, x, y_of[(e.cta, e.warp)], 4, colour, esc(str(e))))
    out.append(f'<text x="{left}" y="{height - 10}">step {lo}</text>'
               f'<text x="{left + plot - 80}" y="{height - 10}">step {hi}</text></svg>')
    out.append("<h2>Legend</h2><table>")
    for k, (colour, meaning) in KINDS.items():
        out.append(f"<tr><td><svg width='12' height='12'><circle cx='6' cy='6' r='5' fill='{colour}'/></svg></td>"
                   f"<td>{esc(k)}</td><td>{esc(meaning)}</td></tr>")
    for b in bars:
        out.append(f"<tr><td>{shape_of[b]}</td><td>barrier {b:#x}</td><td></td></tr>")
    out.append("</table><h2>Events</h2><pre>")
    out.extend(esc(str(e)) for e in ev[:5000])
    if len(ev) > 5000:
        out.append(f"... {len(ev) - 5000} more")
    out.append("</pre></body></html>")
    return "\n".join(out)
