"""SVG of a register fragment: every tile element labelled with the lane and value that own it
(CuTe's ``T# V#`` pictures), coloured by lane as CuTe colours threads (lane % 8), and the inverse map
(lane x value -> element)."""

from __future__ import annotations

import math

from flashsim.viz.svg import THREAD_COLORS, Grid, Key, render, text_width, thread_color
from flashsim.warp.fragments import Fragment

__all__ = ["fragment_svg"]


def fragment_svg(frag: Fragment, *, title: str | None = None) -> str:
    """The picture of ``frag``: the tile (rows x cols) and, below it, lanes x values."""
    tile = Grid(frag.rows, frag.cols, title=title or f"{frag.name}: owner of each element (T = lane, V = value)",
                row_labels=[str(r) for r in range(frag.rows)], col_labels=[str(c) for c in range(frag.cols)])
    for r in range(frag.rows):
        for c in range(frag.cols):
            lane, v = int(frag.owner_lane[r, c]), int(frag.owner_value[r, c])
            tile.cell(r, c, f"T{lane}", fill=thread_color(lane), sub=f"V{v}")
    nv = frag.regs * frag.elems
    labels = [f"V{v} r{v // frag.elems}" + (f".{'lo' if v % 2 == 0 else 'hi'}" if frag.elems == 2 else "")
              for v in range(nv)]
    inv = Grid(32, nv, title="lane -> (row, col) of each value  (V = elems*reg + half; half 0 = bits 0-15)",
               row_labels=[f"T{t}" for t in range(32)], col_labels=labels, origin=(frag.rows + 3, 0),
               cell_w=max(56, math.ceil(max(text_width(lab, 10) for lab in labels)) + 6))
    for t in range(32):
        for v in range(nv):
            r, c = frag.coords(t, v // frag.elems, v % frag.elems)
            inv.cell(t, v, f"({r},{c})", fill=thread_color(t))
    key = Key("colour = lane % 8, CuTe's 8 colours (T0..T7, then again from T8)",
              swatches=tuple((c, str(t)) for t, c in enumerate(THREAD_COLORS)))
    return render(tile, inv, caption=frag.ptx, legend=[key])
