"""A minimal SVG writer for cell grids: the one drawing primitive every flashsim picture is built from.

A picture is a set of labelled rectangular cells on a grid (row, column), optionally with a fill
colour, a second text line, a red outline (e.g. a bank conflict) and titles/axis labels. Output is a
standalone SVG document that a browser opens directly.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass, field
from html import escape

from flashsim.errors import bad_argument


def palette(i: int, n: int = 32, *, light: float = 0.82) -> str:
    """A distinct pastel colour for index i of n (e.g. thread i, bank i), as '#rrggbb'."""
    if n <= 0:
        raise bad_argument("n", n, "must be positive")
    h = (i % n) / n
    r, g, b = colorsys.hls_to_rgb(h, light, 0.55)
    return "#{:02x}{:02x}{:02x}".format(int(r * 255), int(g * 255), int(b * 255))


@dataclass
class Grid:
    """Cells on a grid with a title and optional row/column labels; ``render()`` returns the SVG text."""

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

    def _body(self, x0: int, y0: int) -> list[str]:
        out = []
        if self.title:
            out.append(f'<text x="{x0}" y="{y0 - 28}" font-size="14" font-weight="bold">{escape(self.title)}</text>')
        for j, lab in enumerate(self.col_labels or []):
            out.append(f'<text x="{x0 + j * self.cell_w + self.cell_w / 2}" y="{y0 - 6}" font-size="10" '
                       f'text-anchor="middle" fill="#555">{escape(str(lab))}</text>')
        for i, lab in enumerate(self.row_labels or []):
            out.append(f'<text x="{x0 - 4}" y="{y0 + i * self.cell_h + self.cell_h / 2 + 4}" font-size="10" '
                       f'text-anchor="end" fill="#555">{escape(str(lab))}</text>')
        for (r, c), (text, fill, sub, mark) in sorted(self.cells.items()):
            x, y = x0 + c * self.cell_w, y0 + r * self.cell_h
            stroke = 'stroke="#d00000" stroke-width="2.5"' if mark else 'stroke="#888" stroke-width="0.5"'
            out.append(f'<rect x="{x}" y="{y}" width="{self.cell_w}" height="{self.cell_h}" fill="{fill}" {stroke}/>')
            ty = y + (self.cell_h / 2 + 4 if not sub else self.cell_h / 2 - 1)
            out.append(f'<text x="{x + self.cell_w / 2}" y="{ty}" font-size="10" text-anchor="middle">{escape(text)}</text>')
            if sub:
                out.append(f'<text x="{x + self.cell_w / 2}" y="{y + self.cell_h - 3}" font-size="8" '
                           f'text-anchor="middle" fill="#444">{escape(sub)}</text>')
        return out

    def extent(self) -> tuple[int, int]:
        return ((self.origin[1] + self.cols) * self.cell_w, (self.origin[0] + self.rows) * self.cell_h)


MARGIN = 60


def render(*grids: Grid, caption: str = "") -> str:
    """One SVG document holding the given grids (each at its ``origin``), with an optional caption."""
    if not grids:
        raise bad_argument("grids", grids, "need at least one grid")
    w = max(g.extent()[0] for g in grids) + 2 * MARGIN
    h = max(g.extent()[1] for g in grids) + 2 * MARGIN + (20 if caption else 0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'font-family="monospace" viewBox="0 0 {w} {h}">', f'<rect width="{w}" height="{h}" fill="white"/>']
    for g in grids:
        parts += g._body(MARGIN + g.origin[1] * g.cell_w, MARGIN + g.origin[0] * g.cell_h)
    if caption:
        parts.append(f'<text x="{MARGIN}" y="{h - 12}" font-size="11" fill="#333">{escape(caption)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
