"""A minimal SVG writer for cell grids: the one drawing primitive every flashsim picture is built from.

A picture is a set of labelled rectangular cells on a grid (row, column), optionally with a fill
colour, a second text line, a red outline (e.g. a bank conflict) and titles/axis labels, followed by
footer lines (a caption and legend entries, each optionally with a colour swatch). Output is a
standalone SVG document that a browser opens directly.

The document's size is computed from everything drawn, text included: every text element's extent is
estimated from its length and font size (monospace, ``CHAR_EM`` em per character: common monospace fonts
advance 0.6 em, and up to about 0.64 em where a renderer rounds advances to whole pixels at small sizes), so
titles and footers wider than their grid are never clipped.
"""

from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass, field
from html import escape

from flashsim.errors import bad_argument

#: CuTe's thread colours (cute/util/print_svg.hpp ``SVGColor_TV``, print_latex.hpp ``TikzColor_TV``):
#: thread t is drawn in entry t % 8, so the 8 neighbouring lanes of a group all differ.
THREAD_COLORS: tuple[str, ...] = ("#afafff", "#afffaf", "#ffffaf", "#ffafaf",
                                  "#d2d2ff", "#d2ffd2", "#ffffd2", "#ffd2d2")

#: estimated advance of one character, in em, for the monospace font the pictures use
CHAR_EM = 0.66
#: space around the drawing
MARGIN = 60
PAD = 12
#: a picture larger than this is refused (ArgumentError) rather than written
MAX_SVG_BYTES = 4 << 20

CONFLICT_STROKE = "#d00000"
_CONFLICT = f'stroke="{CONFLICT_STROKE}" stroke-width="2.5"'
_PLAIN = 'stroke="#888" stroke-width="0.5"'


def palette(i: int, n: int = 32, *, light: float = 0.82) -> str:
    """A distinct pastel colour for index i of n (e.g. bank i), as '#rrggbb'."""
    if n <= 0:
        raise bad_argument("n", n, "must be positive")
    h = (i % n) / n
    r, g, b = colorsys.hls_to_rgb(h, light, 0.55)
    return "#{:02x}{:02x}{:02x}".format(int(r * 255), int(g * 255), int(b * 255))


def thread_color(t: int) -> str:
    """The colour of thread (lane) ``t``: CuTe's 8-colour cycle, ``THREAD_COLORS[t % 8]``."""
    return THREAD_COLORS[int(t) % len(THREAD_COLORS)]


def text_width(text: str, size: float) -> float:
    """Estimated width in pixels of ``text`` at font ``size`` in the pictures' monospace font."""
    return len(text) * size * CHAR_EM


class _Canvas:
    """SVG elements plus the bounding box of everything drawn (text extents estimated)."""

    def __init__(self):
        self.parts: list[str] = []
        self.box = [float("inf"), float("inf"), float("-inf"), float("-inf")]  # x0, y0, x1, y1

    def _grow(self, x0, y0, x1, y1):
        b = self.box
        b[0], b[1], b[2], b[3] = min(b[0], x0), min(b[1], y0), max(b[2], x1), max(b[3], y1)

    def rect(self, x, y, w, h, fill, stroke):
        self.parts.append(f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" fill="{fill}" {stroke}/>')
        self._grow(x, y, x + w, y + h)

    def text(self, x, y, text, size, *, anchor="start", extra=""):
        text = str(text)
        w = text_width(text, size)
        left = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        a = "" if anchor == "start" else f' text-anchor="{anchor}"'
        self.parts.append(f'<text x="{x:g}" y="{y:g}" font-size="{size:g}"{a}{extra}>{escape(text)}</text>')
        self._grow(left, y - 0.8 * size, left + w, y + 0.25 * size)


@dataclass
class Key:
    """A footer line: ``text``, after a small swatch when ``fill`` or ``mark`` (red outline) is given, and
    after labelled swatches ``swatches`` = ((fill, label), ...) (e.g. the thread colours)."""

    text: str
    fill: str | None = None
    mark: bool = False
    swatches: tuple = ()


@dataclass
class Grid:
    """Cells on a grid with a title and optional row/column labels, drawn by ``render()``."""

    rows: int
    cols: int
    cell_w: int = 44
    cell_h: int = 28
    title: str = ""
    row_labels: list[str] | None = None
    col_labels: list[str] | None = None
    origin: tuple[int, int] = (0, 0)  # extra offset in cells, to place several grids in one picture
    cells: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise bad_argument(name, v, "must be a positive int")

    def cell(self, r: int, c: int, text: str = "", *, fill: str = "#ffffff", sub: str = "", mark: bool = False):
        """Set cell (r, c): main text, fill colour, a smaller second line, and an optional red outline."""
        if not (0 <= r < self.rows and 0 <= c < self.cols):
            raise bad_argument("(r, c)", (r, c), f"outside the {self.rows}x{self.cols} grid")
        self.cells[(r, c)] = (str(text), fill, str(sub), bool(mark))

    def _draw(self, cv: _Canvas, x0: float, y0: float) -> None:
        if self.title:
            cv.text(x0, y0 - 28, self.title, 14, extra=' font-weight="bold"')
        for j, lab in enumerate(self.col_labels or []):
            cv.text(x0 + j * self.cell_w + self.cell_w / 2, y0 - 6, lab, 10, anchor="middle", extra=' fill="#555"')
        for i, lab in enumerate(self.row_labels or []):
            cv.text(x0 - 4, y0 + i * self.cell_h + self.cell_h / 2 + 4, lab, 10, anchor="end", extra=' fill="#555"')
        for (r, c), (text, fill, sub, mark) in sorted(self.cells.items()):
            x, y = x0 + c * self.cell_w, y0 + r * self.cell_h
            stroke = _CONFLICT if mark else _PLAIN
            cv.rect(x, y, self.cell_w, self.cell_h, fill, stroke)
            ty = y + (self.cell_h / 2 + 4 if not sub else self.cell_h / 2 - 1)
            cv.text(x + self.cell_w / 2, ty, text, 10, anchor="middle")
            if sub:
                cv.text(x + self.cell_w / 2, y + self.cell_h - 3, sub, 8, anchor="middle", extra=' fill="#444"')

    def extent(self) -> tuple[int, int]:
        """(width, height) in pixels of the cells, from the picture's origin (labels and title not included)."""
        return ((self.origin[1] + self.cols) * self.cell_w, (self.origin[0] + self.rows) * self.cell_h)


def render(*grids: Grid, caption: str = "", legend=()) -> str:
    """One SVG document holding the given grids (each at its ``origin``), then the caption and the legend
    lines (``str`` or :class:`Key`) below them. The document is as large as what it draws."""
    if not grids:
        raise bad_argument("grids", grids, "need at least one grid")
    cv = _Canvas()
    for g in grids:
        g._draw(cv, MARGIN + g.origin[1] * g.cell_w, MARGIN + g.origin[0] * g.cell_h)
    y = MARGIN + max(g.extent()[1] for g in grids) + 24
    lines = ([Key(line) for line in caption.split("\n")] if caption else []) + \
            [k if isinstance(k, Key) else Key(str(k)) for k in legend]
    for k in lines:
        x = MARGIN
        if k.fill is not None or k.mark:
            stroke = _CONFLICT if k.mark else _PLAIN
            cv.rect(x, y - 11, 22, 14, k.fill or "#ffffff", stroke)
            x += 30
        for fill, label in k.swatches:
            sw = max(22, text_width(label, 9) + 6)
            cv.rect(x, y - 11, sw, 14, fill, _PLAIN)
            cv.text(x + sw / 2, y - 1, label, 9, anchor="middle")
            x += sw + 2
        if k.swatches:
            x += 6
        cv.text(x, y, k.text, 11, extra=' fill="#333"')
        y += 18
    bx0, by0, bx1, by1 = cv.box
    vx, vy = min(0, math.floor(bx0) - PAD), min(0, math.floor(by0) - PAD)
    right = max(math.ceil(bx1) + PAD, max(g.extent()[0] for g in grids) + 2 * MARGIN)
    w, h = right - vx, math.ceil(by1) + PAD - vy
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            f'font-family="monospace" viewBox="{vx} {vy} {w} {h}">',
            f'<rect x="{vx}" y="{vy}" width="{w}" height="{h}" fill="white"/>']
    doc = "\n".join(head + cv.parts + ["</svg>"]) + "\n"
    if len(doc) > MAX_SVG_BYTES:
        raise bad_argument("picture", f"{len(doc)} bytes",
                           f"larger than the {MAX_SVG_BYTES >> 20} MiB cap on a picture; draw a smaller window "
                           "(window=(row, col, rows, cols)) or slice the layout first")
    return doc
