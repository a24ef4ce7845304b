"""SVG bank map of one warp instruction: 32 bank columns, one row per wavefront of each phase; a cell
names the lanes served from that bank in that wavefront and the word; colour = bank; cells of the
second and later wavefronts of a phase (bank conflicts) are outlined in red."""

from __future__ import annotations

from flashsim.viz.svg import Grid, palette, render

__all__ = ["bank_map_svg"]


def _lanes_text(lanes: list[int]) -> str:
    if len(lanes) <= 2:
        return ",".join(f"T{t}" for t in lanes)
    return f"T{lanes[0]}+{len(lanes) - 1}"


def bank_map_svg(table: list[dict], *, title: str, caption: str = "") -> str:
    """``table`` is :func:`flashsim.smem.bank_table`'s result for one instruction."""
    rows = sum(p["wavefronts"] for p in table) or 1
    labels: list[str] = []
    for p in table:
        labels += [f"ph{p['phase']} wf{k}" for k in range(p["wavefronts"])]
    g = Grid(rows, 32, title=title, row_labels=labels or ["-"], col_labels=[f"b{b}" for b in range(32)], cell_w=40)
    r0 = 0
    for p in table:
        for k, bank, word, lanes in p["cells"]:
            g.cell(r0 + k, bank, _lanes_text(lanes), fill=palette(bank, 32), sub=f"{word * 4:#x}", mark=k >= 1)
        r0 += p["wavefronts"]
    return render(g, caption=caption)
