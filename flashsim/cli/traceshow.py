"""``flashsim trace show`` for traces of interpreted instructions (:mod:`flashsim.sass.tracing`).

With no filter: what the file holds (the launches, every traced instruction with its PC, source line,
SASS and registers, and how many events each warp recorded at it). With a filter (``--cta``, ``--warp``,
``--tag`` naming a PC such as ``0x950``, a source location such as ``k.cu:16``, or text of the SASS,
``--occurrence``): each event as a lane x register table. A register's 32 bits are shown in hex or, with
``--f32``, as the float they encode; the ``lanes`` column says whether the lane was at the instruction
(``-`` when not) and whether its guard predicate held (``on`` / ``off``). Shared-memory accesses recorded
with the event follow the table, one line per lane record.
"""

from __future__ import annotations

import os
import re
from collections import Counter

import numpy as np

from flashsim.errors import bad_argument
from flashsim.sass.tracediff import record_text, load_trace
from flashsim.sass.tracing import LANES_COLUMN

__all__ = ["matching_tags", "show"]


def matching_tags(info: dict, selector: str | None) -> list[str]:
    """The tags a ``--tag`` selector names: a PC (``0x950``, ``pc=0x0950``), a source location (``k.cu:16``,
    ``path/k.cu:16``), or else text the tag contains. An empty selection is an error listing the tags."""
    tags = list(info)
    if selector is None:
        return tags
    sel = selector.strip()
    m = re.fullmatch(r"(?:pc=)?(0x[0-9a-fA-F]+)", sel)
    if m:
        pc = int(m.group(1), 16)
        found = [t for t in tags if info[t]["pc"] == pc]
    else:
        m = re.fullmatch(r"(.+):(\d+)", sel)
        if m and not any(sel in t for t in tags):
            f, line = m.group(1), int(m.group(2))
            found = [t for t in tags if info[t]["line"] == line and info[t]["file"] is not None
                     and (info[t]["file"] == f or os.path.basename(info[t]["file"]) == os.path.basename(f))]
        else:
            found = [t for t in tags if sel in t]
    if not found:
        listed = "; ".join(tags[:8]) + (f"; ... ({len(tags)} in all)" if len(tags) > 8 else "")
        raise bad_argument("--tag", selector, f"names no traced instruction of this file (its tags: {listed})")
    return found


def _lanes_cell(x: int) -> str:
    return "-" if not x & 1 else ("on" if x & 2 else "off")


def _cell(x: int, f32: bool) -> str:
    if not f32:
        return f"0x{x:08x}"
    return f"{np.array(x, np.uint32).view(np.float32)[()]:.7g}"


def show(path, *, cta: int | None = None, warp: int | None = None, tag: str | None = None,
         occurrence: int | None = None, f32: bool = False, max_regs: int = 16) -> int:
    """Print the file's summary (no filter) or the matching events; 0, or 1 when no event matches."""
    side = load_trace(path)
    info = side.info
    if cta is None and warp is None and tag is None and occurrence is None:
        _summary(side)
        return 0
    wanted = set(matching_tags(info, tag))
    occ: Counter = Counter()
    shown = 0
    for e in side.events:
        key = (e.cta, e.warp, e.tag)
        n = occ[key]
        occ[key] += 1
        if (cta is not None and e.cta != cta) or (warp is not None and e.warp != warp) or e.tag not in wanted:
            continue
        if occurrence is not None and n != occurrence:
            continue
        shown += 1
        _event(e, info[e.tag], n, f32, max_regs)
    if not shown:
        print("no events match")
        return 1
    return 0


def _summary(side) -> None:
    meta, info = side.meta, side.info
    launches = meta.get("launches", [])
    print(f"{side.name}: a trace of interpreted instructions: {len(side.events)} events, "
          f"kernel{'s' if len(meta['kernels']) > 1 else ''} {', '.join(meta['kernels'])}, "
          f"{len(launches)} launch{'es' if len(launches) != 1 else ''}")
    spec = meta.get("spec", {})
    if spec:
        print("  recorded: " + ", ".join(f"{k} {v}" for k, v in spec.items() if k != "path" and v not in (None, [])))
    per_tag: dict[str, Counter] = {}
    for e in side.events:
        per_tag.setdefault(e.tag, Counter())[(e.cta, e.warp)] += 1
    for t, i in info.items():
        regs = [r for r in i["registers"] if r != LANES_COLUMN]
        what = f"registers {', '.join(regs)}" if regs else "shared-memory accesses only"
        c = per_tag.get(t, Counter())
        warps = ", ".join(f"cta={a} warp={b} x{n}" for (a, b), n in sorted(c.items())[:6])
        more = f", ... ({len(c)} warps)" if len(c) > 6 else ""
        print(f"  {t}\n      {what}; {sum(c.values())} events: {warps or 'none'}{more}")


def _event(e, i: dict, n: int, f32: bool, max_regs: int) -> None:
    cols = list(i["registers"])
    loc = f" {os.path.basename(i['file'])}:{i['line']}" if i["file"] else ""
    print(f"cta={e.cta} warp={e.warp} seq {e.seq} pc={i['pc']:#06x}{loc} `{i['sass']}` #{n}")
    regs = [c for c in cols if c != LANES_COLUMN]
    lanes = e.regs[:, cols.index(LANES_COLUMN)]
    width = 14 if f32 else 10
    for c0 in range(0, max(len(regs), 1), max_regs):
        part = regs[c0:c0 + max_regs]
        print("  lane  lanes " + " ".join(f"{c:>{width}}" for c in part))
        for lane in range(32):
            x = int(lanes[lane])
            cells = [f"{(_cell(int(e.regs[lane, cols.index(c)]), f32) if x & 1 else '-'):>{width}}" for c in part]
            print(f"  {lane:4d} {_lanes_cell(x):>5} " + " ".join(cells))
    if e.smem is not None and len(e.smem):
        print(f"  shared memory: {len(e.smem)} lane records")
        for r in e.smem:
            print(f"    {record_text(r)}")
