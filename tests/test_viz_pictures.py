"""What the SVG pictures (flashsim.viz) and the trace page (flashsim.trace.html) show a reader: thread colours,
text inside the picture, the bank map's legend and totals, the ``+n`` key of MMA pictures, windows of large
layouts, and the page's folded metadata, labelled events and diff summary."""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from flashsim.cli import main
from flashsim.errors import ArgumentError, FlashsimError
from flashsim.layout import MMA_OPS, Layout, S, Swizzle, TiledMMA, composition
from flashsim.layout.evaluate import evaluate
from flashsim.viz import svg as SVG
from flashsim.viz import layout as V
from flashsim.viz.banks import bank_map_svg
from flashsim.viz.fragments import fragment_svg
from flashsim.warp.fragments import fragment

TRACE = Path(__file__).resolve().parents[1] / "traces" / "warp" / "v5_d32.fstrace"
README_LAYOUT = "tile_to_shape(composition(Swizzle(3,3,3), Layout((_8,_64),(_64,_1))), (_128,_128))"
# CuTe's SVGColor_TV / TikzColor_TV (cute/util/print_svg.hpp, print_latex.hpp), thread t -> entry t % 8
CUTE_TV = [(175, 175, 255), (175, 255, 175), (255, 255, 175), (255, 175, 175),
           (210, 210, 255), (210, 255, 210), (255, 255, 210), (255, 210, 210)]
# a renderer's advance per character of the monospace font: 0.6 em, up to ~0.64 em where it rounds to pixels
EM = 0.64


def rgb(hexcolor: str) -> tuple[int, int, int]:
    return tuple(int(hexcolor[i:i + 2], 16) for i in (1, 3, 5))


def run_layout(argv):
    from flashsim.cli.layout import add_parser

    p = argparse.ArgumentParser(prog="flashsim")
    add_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["layout", *argv])
    try:
        return args.func(args)
    except FlashsimError as e:
        print(f"flashsim: error: {e}", file=sys.stderr)
        return 2


def viewbox(doc: str) -> tuple[float, float, float, float]:
    m = re.search(r'<svg [^>]*width="(\d+)" height="(\d+)"[^>]*viewBox="(-?\d+) (-?\d+) (\d+) (\d+)"', doc)
    assert m, doc[:300]
    w, h, vx, vy, vw, vh = (int(x) for x in m.groups())
    assert (w, h) == (vw, vh)
    return vx, vy, vw, vh


def texts(doc: str):
    """(x, y, font size, anchor, text) of every <text> element."""
    out = []
    for attrs, body in re.findall(r"<text ([^>]*)>([^<]*)</text>", doc):
        a = dict(re.findall(r'([\w-]+)="([^"]*)"', attrs))
        out.append((float(a["x"]), float(a["y"]), float(a["font-size"]), a.get("text-anchor", "start"),
                    html.unescape(body)))
    return out


def assert_text_inside(doc: str) -> None:
    vx, vy, vw, vh = viewbox(doc)
    for x, y, size, anchor, text in texts(doc):
        w = len(text) * size * EM
        left = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        assert vx <= left and left + w <= vx + vw, (text, left, left + w, vx, vx + vw)
        assert vy <= y - size and y + 0.3 * size <= vy + vh, (text, y, vy, vh)


def cell_fills(doc: str) -> dict[str, set[str]]:
    """Main text of each cell -> the fills of the rects it is drawn on (cell text follows its rect)."""
    out: dict[str, set[str]] = {}
    for fill, text in re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"[^>]*/>\n<text [^>]*>([^<]*)</text>', doc):
        out.setdefault(text, set()).add(fill)
    return out


# ---------------------------------------------------------------------------------------------- colours


def test_thread_colours_are_cutes_eight_repeating_with_period_8():
    cols = [SVG.thread_color(t) for t in range(64)]
    assert len(set(cols[:8])) == 8
    assert all(cols[t] == cols[t % 8] for t in range(64))
    assert [rgb(c) for c in cols[:8]] == CUTE_TV
    # neighbouring lanes are far apart (the old 32-hue palette put them a few units apart)
    for t in range(8):
        a, b = np.array(rgb(cols[t])), np.array(rgb(cols[t + 1]))
        assert np.abs(a - b).max() >= 35, (t, cols[t], cols[t + 1])


@pytest.mark.parametrize("instruction, operand", [("mma.m16n8k16", "A"), ("mma.m16n8k16", "C"), ("ldmatrix.m8n8", "A")])
def test_fragment_cells_use_the_lane_colour(instruction, operand):
    doc = fragment_svg(fragment(instruction, operand))
    fills = cell_fills(doc)
    lanes = {t: fills[f"T{t}"] for t in range(32)}
    assert all(len(f) == 1 for f in lanes.values())
    lane_fill = {t: next(iter(f)) for t, f in lanes.items()}
    assert len({lane_fill[t] for t in range(8)}) == 8
    assert all(lane_fill[t] == lane_fill[t % 8] for t in range(32))
    assert "colour = lane % 8" in doc


def test_tv_and_mma_cells_use_the_thread_colour():
    tv = Layout(((S(2), S(4)), (S(2), S(2))), ((S(8), S(1)), (S(4), S(16))))
    fills = cell_fills(V.tv_svg(tv, (4, 8)))
    assert [next(iter(fills[f"T{t}"])) for t in range(8)] == list(SVG.THREAD_COLORS)
    fills = cell_fills(V.mma_svg(TiledMMA(MMA_OPS["SM80_16x8x16_F32F16F16F32_TN"])))
    assert all(fills[f"T{t}"] == {SVG.THREAD_COLORS[t % 8]} for t in range(32))


# ---------------------------------------------------------------------------------------------- text fits


EIGHT_COLUMNS = [(i, o) for i, o in (("mma.m16n8k16", "B"), ("mma.m16n8k16", "C"), ("mma.m16n8k8", "A"),
                                     ("mma.m16n8k8", "B"), ("mma.m16n8k8", "C"), ("ldmatrix.m8n8", "A"))]


@pytest.mark.parametrize("instruction, operand", EIGHT_COLUMNS)
def test_eight_column_fragments_keep_every_text_inside_the_picture(instruction, operand):
    frag = fragment(instruction, operand)
    assert frag.cols == 8
    doc = fragment_svg(frag)
    assert_text_inside(doc)
    # the titles are wider than the grids: the width comes from the text
    vx, _, vw, _ = viewbox(doc)
    title = max((t for t in texts(doc) if t[2] == 14), key=lambda t: len(t[4]))
    assert title[0] + len(title[4]) * 14 * 0.6 > SVG.MARGIN + 8 * 44 + SVG.MARGIN
    assert vx + vw >= title[0] + len(title[4]) * 14 * EM


def test_a_long_caption_widens_the_picture():
    g = SVG.Grid(1, 2, title="t")
    caption = "x" * 300
    doc = SVG.render(g, caption=caption, legend=["y" * 200, SVG.Key("z" * 100, swatches=(("#ffffff", "0"),))])
    assert_text_inside(doc)
    assert viewbox(doc)[2] >= SVG.MARGIN + 300 * 11 * EM


@pytest.mark.parametrize("make", [
    lambda: V.mma_svg(TiledMMA(MMA_OPS["SM80_16x8x16_F32F16F16F32_TN"])),
    lambda: V.swizzle_svg(composition(Swizzle(3, 3, 3), Layout((S(8), S(8)), (S(8), S(1))))),
    lambda: V.layout_svg(Layout((S(2), S(3)))),
    lambda: V.picture(composition(Swizzle(3, 3, 3), Layout((S(128), S(128)), (S(128), S(1))))),
], ids=["mma", "swizzle8x8", "tiny-layout", "window"])
def test_other_pictures_keep_text_inside(make):
    assert_text_inside(make())


# ---------------------------------------------------------------------------------------------- bank map


def test_bank_map_has_a_legend_and_the_totals(tmp_path, capsys):
    svg = tmp_path / "ld.svg"
    addr = "(lane % 16) * 256 + (lane // 16) * 16"
    assert main(["ldmatrix", "--x4", "--addr", addr, "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "total: 32 wavefronts, ideal 4, 28 bank conflicts" in out
    doc = svg.read_text()
    assert "total: 32 wavefronts, ideal 4, 28 bank conflicts" in doc
    assert "red outline = bank conflict" in doc and "later one (wf1, wf2, ...)" in doc
    assert_text_inside(doc)
    # the legend's swatch: a red-outlined rect below the last row of the map
    rows = 32
    grid_bottom = SVG.MARGIN + rows * 28
    swatch = r'<rect x="[\d.]+" y="([\d.]+)" width="22" height="14" [^>]*stroke="#d00000"'
    swatches = [float(y) for y in re.findall(swatch, doc)]
    assert swatches and min(swatches) > grid_bottom
    # no conflict: the totals say so, and no cell is outlined
    assert main(["banks", "--addr", "lane * 4", "--svg", str(svg)]) == 0
    doc = svg.read_text()
    assert "total: 1 wavefront, ideal 1, 0 bank conflicts" in doc
    assert doc.count('stroke="#d00000"') == 1  # the legend's swatch only


def test_bank_map_totals_from_the_counting_rule_when_given():
    from flashsim.smem import bank_table

    table = bank_table(np.arange(32) // 2 * 16, width=16, op="ld")
    doc = bank_map_svg(table, title="t")
    assert "total: 4 wavefronts, ideal 4, 0 bank conflicts" in doc
    doc = bank_map_svg(table, title="t", wavefronts=2, ideal=2)
    assert "total: 2 wavefronts, ideal 2, 0 bank conflicts" in doc
    assert "the map draws plain phases: 4 wavefronts, ideal 4" in doc
    broadcast = bank_map_svg(bank_table(np.zeros(32, np.int64)), title="t")
    assert ">T0+31<" in broadcast and "T4+3 = lane 4 and 3 more on the same word" in broadcast


# ---------------------------------------------------------------------------------------------- MMA key


def test_mma_pictures_explain_the_plus_n_suffix():
    doc = V.mma_svg(TiledMMA(MMA_OPS["SM80_16x8x16_F32F16F16F32_TN"], Layout((S(2), S(2), S(1)))))
    subs = re.findall(r'font-size="8"[^>]*>(V\d+ \+\d+)</text>', doc)
    assert subs and all(s.endswith("+1") for s in subs)  # A and B are each held by two warps
    assert "V# +n: n more (thread, value) pairs hold this same element" in doc
    # the key is there even when no cell is replicated
    assert "V# +n:" in V.mma_svg(TiledMMA(MMA_OPS["SM80_16x8x16_F32F16F16F32_TN"]))


# ---------------------------------------------------------------------------------------------- large layouts


def test_readme_layout_is_drawn_as_a_window_with_a_note(tmp_path, capsys):
    f = tmp_path / "sQ.svg"
    assert run_layout([README_LAYOUT, "--svg", str(f)]) == 0
    doc = f.read_text()
    assert len(doc) < 1_000_000  # it was 8.4 MB
    assert "shown: rows 0..31, columns 0..31 of 128x128 (1024 of 16384 cells" in doc
    assert "window=(row, col, rows, cols)" in doc and "--print-layout" in doc
    banks = re.findall(r">b(\d+)<", doc)
    assert len(banks) == 2 * 32 * 32
    assert_text_inside(doc)


def test_a_window_shows_the_values_of_that_part():
    x = composition(Swizzle(3, 3, 3), Layout((S(128), S(128)), (S(128), S(1))))
    doc = V.swizzle_svg(x, window=(32, 64, 8, 16))
    vals = evaluate(x).reshape(128, 128).T
    cells = re.findall(r'font-size="10" text-anchor="middle">(\d+)</text>\n<text [^>]*font-size="8"', doc)
    after = [int(v) for v in cells[8 * 16:]]
    assert after == [int(vals[m, n]) for m in range(32, 40) for n in range(64, 80)]
    assert "shown: rows 32..39, columns 64..79 of 128x128" in doc
    full = V.layout_svg(Layout((S(8), S(8))))
    assert "shown:" not in full  # small layouts are drawn whole
    with pytest.raises(ArgumentError, match="window"):
        V.layout_svg(Layout((S(8), S(8))), window=(8, 0))
    with pytest.raises(ArgumentError, match="window"):
        V.layout_svg(Layout((S(8), S(8))), window=(0, 0, 0, 4))


def test_large_tv_copy_and_mma_pictures_are_windowed_too():
    doc = V.tv_svg(Layout((S(128), S(128))), (128, 128))
    assert len(re.findall(r">T\d+</text>", doc)) == 32 * 32 and "shown: rows 0..31" in doc
    mma = TiledMMA(MMA_OPS["SM80_16x8x16_F32F16F16F32_TN"], Layout((S(8), S(8), S(1))))
    doc = V.mma_svg(mma)
    assert "shown: C rows 0..31, columns 0..31" in doc and "of the 128x64x16 tile" in doc
    assert len(re.findall(r">T\d+</text>", doc)) == 32 * 32 + 32 * 16 + 16 * 32
    doc = V.mma_svg(mma, window=(32, 32, 16, 16))
    assert "C (128x64)  [rows 32..47, cols 32..47]" in doc


def test_svg_size_has_a_hard_cap(monkeypatch):
    monkeypatch.setattr(SVG, "MAX_SVG_BYTES", 200_000)
    with pytest.raises(ArgumentError, match="cap on a picture"):
        V.layout_svg(Layout((S(64), S(64))))
    with pytest.raises(ArgumentError, match="cap on a picture"):
        V.layout_svg(Layout((S(128), S(128))), window=(0, 0, 64, 64))
    assert len(V.layout_svg(Layout((S(128), S(128))))) < 200_000  # the default window fits


# ---------------------------------------------------------------------------------------------- trace page


def _page(tmp_path, against=None) -> str:
    from flashsim.trace.html import write_html

    out = tmp_path / "t.html"
    write_html(TRACE, out, against=against)
    return out.read_text()


def test_trace_page_folds_the_metadata_and_labels_every_event(tmp_path):
    from flashsim import session

    page = _page(tmp_path)
    run = session.load(TRACE)
    m = re.search(r'<details class="meta"><summary>([^<]*)</summary><pre>(.*?)</pre></details>', page, re.S)
    assert m and "kernel v5" in m.group(1) and "headdim 32" in m.group(1)
    assert "inputs_sha256" in m.group(2)
    boxes = re.findall(r'<span class="ev[^"]*" id="e\d+_\d+" data-w="\d+" data-i="\d+" style="[^"]*" '
                       r'title="seq (\d+): (\w+) #(\d+)[^"]*">([^<]+)</span>', page)
    assert len(boxes) == len(run.events)
    events = sorted(run.events, key=lambda e: (e.cta, e.warp, e.seq))
    assert [(int(s), t) for s, t, _, _ in boxes] == [(e.seq, e.tag) for e in events]
    assert {t: lab for _, t, _, lab in boxes}["mma_qk"] == "QK"
    assert "<b>QK</b> mma_qk" in page  # the legend spells the labels out
    assert "single trace" in page


def test_trace_page_against_another_trace_opens_with_a_readable_summary(tmp_path):
    from flashsim import session
    from flashsim.trace.container import Event

    same = _page(tmp_path, against=TRACE)
    assert 'class="summary"' in same and "no divergence: 140 events compared" in same
    run = session.load(TRACE)
    events = sorted(run.events, key=lambda e: (e.cta, e.warp, e.seq))
    i = next(k for k, e in enumerate(events) if e.tag == "mma_qk" and e.regs.size)
    e = events[i]
    regs = e.regs.copy()
    regs[5, 0] ^= 1
    events[i] = Event(e.cta, e.warp, e.seq, e.tag, regs)
    other = tmp_path / "other.fstrace"
    session.write(session.Run(run.meta, events, run.arrays), other)
    page = _page(tmp_path, against=other)
    top = page[:page.index('<div id="rows">')]
    assert '<div class="summary bad" id="summary">' in top
    assert "1 of the 140 events in both traces differ" in top
    assert f"first divergence: cta={e.cta} warp={e.warp} mma_qk #0 (seq {e.seq}): registers (1 lane-registers)" in top
    assert "<tr><th>mma_qk</th><td>1</td><td>1</td><td>1</td></tr>" in top
    assert "<details><summary>full diff report</summary>" in top
    assert top.index('id="summary"') < top.index('<details class="meta">')
    assert page.count('class="ev div first"') == 1 and '"f":1' in page
