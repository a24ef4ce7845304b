"""SVG bank map of one warp instruction: 32 bank columns, one row per wavefront of each phase; a cell
names the lanes served from that bank in that wavefront and the word; colour = bank; cells of the
second and later wavefronts of a phase (bank conflicts) are outlined in red. A legend below the map says
what the cells and the outline mean, and gives the instruction's wavefront, ideal and conflict totals."""

from __future__ import annotations

from flashsim.viz.svg import Grid, Key, palette, render

__all__ = ["bank_map_svg", "bank_totals"]


def _lanes_text(lanes: list[int]) -> str:
    if len(lanes) <= 2:
        return ",".join(f"T{t}" for t in lanes)
    return f"T{lanes[0]}+{len(lanes) - 1}"


def bank_totals(table: list[dict]) -> tuple[int, int]:
    """(wavefronts, ideal) of the phases in ``table``: the sum of their wavefronts, and one per phase."""
    return sum(int(p["wavefronts"]) for p in table), len(table)


def bank_map_svg(table: list[dict], *, title: str, caption: str = "", wavefronts: int | None = None,
                 ideal: int | None = None) -> str:
    """``table`` is :func:`flashsim.smem.bank_table`'s result for one instruction. The totals line gives
    ``wavefronts`` and ``ideal`` when passed (the counting rule's numbers, e.g. from
    :func:`flashsim.smem.wavefronts`), else the map's own (:func:`bank_totals`)."""
    rows = sum(p["wavefronts"] for p in table) or 1
    labels: list[str] = []
    for p in table:
        labels += [f"ph{p['phase']} wf{k}" for k in range(p["wavefronts"])]
    g = Grid(rows, 32, title=title, row_labels=labels or ["-"], col_labels=[f"b{b}" for b in range(32)], cell_w=40)
    r0 = 0
    broadcast = False
    for p in table:
        for k, bank, word, lanes in p["cells"]:
            broadcast |= len(lanes) > 2
            g.cell(r0 + k, bank, _lanes_text(lanes), fill=palette(bank, 32), sub=f"{word * 4:#x}", mark=k >= 1)
        r0 += p["wavefronts"]
    drawn_wf, drawn_ideal = bank_totals(table)
    wf = drawn_wf if wavefronts is None else int(wavefronts)
    idl = drawn_ideal if ideal is None else int(ideal)
    conflicts = wf - idl
    total = (f"total: {wf} wavefront{'s' if wf != 1 else ''}, ideal {idl}, {conflicts} bank "
             f"conflict{'s' if conflicts != 1 else ''} (conflicts = wavefronts - ideal)")
    if (wf, idl) != (drawn_wf, drawn_ideal):
        total += f"; the map draws plain phases: {drawn_wf} wavefronts, ideal {drawn_ideal}"
    legend = [
        Key("red outline = bank conflict: its bank already serves another word of this phase in an earlier "
            "wavefront, so this word is served in a later one (wf1, wf2, ...)", fill="#ffffff", mark=True),
        "row = one wavefront (ph# = phase, a group of lanes served together; wf# = its wavefronts), column = bank "
        "(4-byte banks, colour = bank)",
        "cell: the lanes reading/writing that word (T4,T5 = two lanes; T4+3 = lane 4 and 3 more on the same word: "
        "one access, broadcast) and the word's byte address" if broadcast else
        "cell: the lanes reading/writing that word (T4,T5 = two lanes on the same word: one access) and its "
        "byte address",
        total,
    ]
    return render(g, caption=caption, legend=legend)
