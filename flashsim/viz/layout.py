"""SVG pictures of CuTe layouts, thread-value maps, MMA atoms, tiled copies and swizzles (viz.svg grids).

- ``layout_svg(L)``: a rank-2 layout as a grid, the index L(m,n) in every cell (CuTe's print_latex).
- ``tv_svg(layout_tv, tile)``: a (thread, value) -> coordinate map as ``T# V#`` cells coloured by thread.
- ``mma_svg(mma)``: an MMA atom or TiledMMA: C at the origin, A to its left, B above it.
- ``copy_svg(tiled_copy)``: a TiledCopy: source partition and destination partition side by side.
- ``swizzle_svg(L, bits)``: a swizzled layout before and after the swizzle, with the bank of every cell.

Threads are coloured as CuTe colours them (8 colours, thread % 8). A grid of more than ``FULL_CELLS`` cells
is drawn as a window (by default its top-left ``WINDOW`` x ``WINDOW`` cells) with a note saying which part
is shown; ``window=(row, col)`` or ``window=(row, col, rows, cols)`` picks another part.
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import bad_argument
from flashsim.layout import layout as L
from flashsim.layout.atoms import MMAAtom
from flashsim.layout.evaluate import evaluate
from flashsim.layout.tensor import Tensor
from flashsim.layout.tiled import ThrCopy, ThrMMA, TiledCopy, TiledMMA
from flashsim.viz.svg import Grid, Key, THREAD_COLORS, palette, render, thread_color

MAX_CELLS = 1 << 16
#: a grid of more cells than this is drawn as a window ...
FULL_CELLS = 1 << 12
#: ... of (at most) WINDOW x WINDOW cells, unless a window is given
WINDOW = 32

WINDOW_HINT = "other parts: picture(obj, window=(row, col, rows, cols)) in flashsim.viz.layout"
TABLE_HINT = "every value as text: flashsim layout EXPR --print-layout"
COLOR_KEY = "colour = thread % 8, CuTe's 8 colours (T0..T7, then again from T8)"
REPLICA_KEY = ("V# +n: n more (thread, value) pairs hold this same element (a replicated operand: several "
               "threads own a copy); the cell names the first")


def _dims(x):
    """(rows, cols) of the 2-D view of x: rank 1 is one column, rank > 2 folds modes 1.. into columns."""
    r = int(L.rank(x))
    M = int(L.size(x, 0)) if r >= 1 and isinstance(L.shape(x), tuple) else int(L.size(x))
    total = int(L.size(x))
    N = total // M if M else 0
    return M, N


def _check_cells(n, what):
    if n > MAX_CELLS:
        raise bad_argument(what, n, f"too many cells to draw (more than {MAX_CELLS}); slice or tile the layout first")


def _window(M: int, N: int, window=None) -> tuple[int, int, int, int]:
    """(row0, col0, rows, cols) of the part of an M x N grid to draw: all of it when it has at most
    ``FULL_CELLS`` cells, else the top-left ``WINDOW`` x ``WINDOW``; ``window`` = (row0, col0) or
    (row0, col0, rows, cols) picks a part (clipped to the grid)."""
    if window is None:
        if M * N <= FULL_CELLS:
            return 0, 0, M, N
        return 0, 0, min(M, WINDOW), min(N, WINDOW)
    try:
        w = tuple(window)
    except TypeError:
        w = ()
    if len(w) == 2:
        w = (*w, WINDOW, WINDOW)
    if len(w) != 4 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in w):
        raise bad_argument("window", window, "expected (row, col) or (row, col, rows, cols) integers")
    r0, c0, R, C = (int(v) for v in w)
    if not (0 <= r0 < M and 0 <= c0 < N):
        raise bad_argument("window", window, f"starts outside the {M}x{N} grid")
    if R <= 0 or C <= 0:
        raise bad_argument("window", window, "rows and cols must be positive")
    return r0, c0, min(R, M - r0), min(C, N - c0)


def _window_note(M: int, N: int, win, hints=(WINDOW_HINT,)) -> list[str]:
    """The footer lines saying which part of an M x N grid a window shows (none when it shows all)."""
    r0, c0, R, C = win
    if (r0, c0, R, C) == (0, 0, M, N):
        return []
    return [f"shown: rows {r0}..{r0 + R - 1}, columns {c0}..{c0 + C - 1} of {M}x{N} ({R * C} of {M * N} cells; "
            "the whole is too large to read)", "; ".join(hints)]


def _window_title(title: str, M: int, N: int, win) -> str:
    r0, c0, R, C = win
    if (r0, c0, R, C) == (0, 0, M, N):
        return title
    return f"{title}  [rows {r0}..{r0 + R - 1}, cols {c0}..{c0 + C - 1} of {M}x{N}]"


def layout_svg(x, title: str | None = None, *, window=None) -> str:
    """The grid of a layout (or composed layout): cell (m, n) shows L(m, n). A large layout is drawn as
    a window (see the module's docstring) with a note saying which part is shown."""
    M, N = _dims(x)
    _check_cells(M * N, "cells")
    win = r0, c0, R, C = _window(M, N, window)
    vals = evaluate(x).reshape(N, M).T
    g = Grid(R, C, title=_window_title(title if title is not None else str(x), M, N, win),
             row_labels=[str(r0 + i) for i in range(R)], col_labels=[str(c0 + j) for j in range(C)])
    for i in range(R):
        for j in range(C):
            v = int(vals[r0 + i, c0 + j])
            g.cell(i, j, str(v), fill=palette(v % 8, 8))
    return render(g, caption=f"{x}", legend=_window_note(M, N, win, (WINDOW_HINT, TABLE_HINT)))


def _tv_cells(layout_tv, M, N):
    """For each (m, n) of an M x N tile: the (thread, value) pairs that map to it."""
    nt, nv = int(L.size(layout_tv, 0)), int(L.size(layout_tv, 1))
    idx = evaluate(layout_tv).reshape(nv, nt).T  # [t, v] -> m + M*n
    cells = {}
    for t in range(nt):
        for v in range(nv):
            k = int(idx[t, v])
            if not 0 <= k < M * N:
                raise bad_argument("layout_tv", str(layout_tv), f"maps (T{t},V{v}) outside the {M}x{N} tile")
            cells.setdefault((k % M, k // M), []).append((t, v))
    return cells, nt


def _tv_grid(layout_tv, M, N, title, origin=(0, 0), transpose=False, win=None):
    """The M x N tile (drawn N x M when ``transpose``) with the thread and value of every element; only the
    window ``win`` = (row0, col0, rows, cols) of the drawn grid. ``g.replicated``: some cell has owners
    beyond the first (shown as ``V# +n``)."""
    _check_cells(M * N, "cells")
    cells, nt = _tv_cells(layout_tv, M, N)
    R, Cc = (N, M) if transpose else (M, N)
    r0, c0, WR, WC = win if win is not None else (0, 0, R, Cc)
    g = Grid(WR, WC, title=title, origin=origin, row_labels=[str(r0 + i) for i in range(WR)],
             col_labels=[str(c0 + j) for j in range(WC)])
    g.replicated = False
    for (m, n), owners in cells.items():
        t, v = owners[0]
        r, c = (n, m) if transpose else (m, n)
        if not (r0 <= r < r0 + WR and c0 <= c < c0 + WC):
            continue
        extra = f" +{len(owners) - 1}" if len(owners) > 1 else ""
        g.replicated |= len(owners) > 1
        g.cell(r - r0, c - c0, f"T{t}", sub=f"V{v}{extra}", fill=thread_color(t))
    return g


def _tv_legend(*grids, always_replicas=False, note=()):
    """Footer lines of a thread-value picture: the colour key, the ``+n`` key, and the window note."""
    out = [Key(COLOR_KEY, swatches=tuple((c, str(t)) for t, c in enumerate(THREAD_COLORS)))]
    if always_replicas or any(getattr(g, "replicated", False) for g in grids):
        out.append(REPLICA_KEY)
    return out + list(note)


def tv_svg(layout_tv, tile_shape, title: str | None = None, *, window=None) -> str:
    """A (thread, value) -> (m, n) map drawn on the M x N tile: ``T#`` and ``V#`` per cell, coloured by thread."""
    dims = tile_shape if isinstance(tile_shape, tuple) else (tile_shape,)
    shp = tuple(int(L.size(s)) if L.is_layout(s) else int(s) for s in dims)
    M = shp[0]
    N = int(np.prod(shp[1:])) if len(shp) > 1 else 1
    win = _window(M, N, window)
    g = _tv_grid(layout_tv, M, N, _window_title(title if title is not None else f"TV layout {layout_tv}", M, N, win),
                 win=win)
    return render(g, caption=f"(thread,value) -> coordinate: {layout_tv}",
                  legend=_tv_legend(g, note=_window_note(M, N, win)))


def mma_svg(mma, *, window=None) -> str:
    """An MMA atom or TiledMMA: C (M x N) at the origin, A (M x K) to its left, B (K x N) above it.

    A large tile is drawn as a window of C (``window`` = (m0, n0) or (m0, n0, rows, cols)), with the same
    rows of A and columns of B, and K cut to its first ``WINDOW`` when longer."""
    if isinstance(mma, MMAAtom):
        mma = TiledMMA(mma)
    if not isinstance(mma, TiledMMA):
        raise bad_argument("mma", mma, "expected an MMA atom or a TiledMMA")
    M, N, K = (int(mma.tile_size_mnk(i)) for i in range(3))
    _check_cells(M * N + M * K + N * K, "cells")
    if window is None and max(M * N, M * K, N * K) <= FULL_CELLS:
        m0, n0, WM, WN, WK = 0, 0, M, N, K
    else:
        m0, n0, WM, WN = _window(M, N, window) if window is not None else (0, 0, min(M, WINDOW), min(N, WINDOW))
        WK = min(K, WINDOW)
    off = WK + 2  # A's K columns (and B's K rows) plus a gap and room for labels
    cut = (m0, n0, WM, WN) != (0, 0, M, N) or WK != K

    def part(name, r0, rows, c0, cols):
        return f"{name}  [rows {r0}..{r0 + rows - 1}, cols {c0}..{c0 + cols - 1}]" if cut else name

    cg = _tv_grid(mma.get_layoutC_TV(), M, N, part(f"C ({M}x{N})", m0, WM, n0, WN), origin=(off, off),
                  win=(m0, n0, WM, WN))
    ag = _tv_grid(mma.get_layoutA_TV(), M, K, part(f"A ({M}x{K})", m0, WM, 0, WK), origin=(off, 0),
                  win=(m0, 0, WM, WK))
    bg = _tv_grid(mma.get_layoutB_TV(), N, K, part(f"B ({K}x{N})", 0, WK, n0, WN), origin=(0, off),
                  transpose=True, win=(0, n0, WK, WN))
    note = []
    if cut:
        note = [f"shown: C rows {m0}..{m0 + WM - 1}, columns {n0}..{n0 + WN - 1} and K 0..{WK - 1} of the "
                f"{M}x{N}x{K} tile (the whole is too large to read)",
                "other parts: mma_svg(mma, window=(m0, n0, rows, cols)) in flashsim.viz.layout"]
    return render(ag, bg, cg, caption=f"{mma.atom.name}: ThrLayoutVMNK {mma.thr_layout_vmnk}",
                  legend=_tv_legend(ag, bg, cg, always_replicas=True, note=note))


def copy_svg(tiled, *, window=None) -> str:
    """A TiledCopy: which thread and value every element of the tile is, on the source and the destination
    (the same window of both when the tile is large)."""
    if not isinstance(tiled, TiledCopy):
        raise bad_argument("tiled_copy", tiled, "expected a TiledCopy")
    shp = tuple(int(L.size(s)) if L.is_layout(s) else int(s) for s in tiled.tiler_mn)
    M = shp[0]
    N = int(np.prod(shp[1:])) if len(shp) > 1 else 1
    win = _window(M, N, window)
    src = _tv_grid(tiled.get_layoutS_TV(), M, N, _window_title(f"source ({tiled.atom.op.name})", M, N, win), win=win)
    dst = _tv_grid(tiled.get_layoutD_TV(), M, N, "destination", origin=(0, win[3] + 2), win=win)
    return render(src, dst, caption=f"TiledCopy {tiled.layout_tv} over {M}x{N}",
                  legend=_tv_legend(src, dst, note=_window_note(M, N, win)))


def bank_of(byte_addr):
    """Shared-memory bank of a byte address: 32 banks of 4 bytes (bank = (addr / 4) % 32)."""
    return (np.asarray(byte_addr) // 4) % 32


def swizzle_svg(x, bits: int = 16, *, window=None) -> str:
    """A swizzled rank-2 layout before (``offset o B``) and after (``Sw o offset o B``) the swizzle, each cell
    showing its element offset and, below, its shared-memory bank for elements of ``bits`` width."""
    if not getattr(x, "_composed", False):
        raise bad_argument("layout", str(x), "swizzle_svg needs a composed layout such as Sw<3,3,3> o _0 o L")
    if bits % 8 or bits <= 0:
        raise bad_argument("bits", bits, "element width must be a positive multiple of 8")
    M, N = _dims(x)
    _check_cells(2 * M * N, "cells")
    win = r0, c0, R, C = _window(M, N, window)
    off = x.offset.value if hasattr(x.offset, "value") and not isinstance(x.offset, int) else int(x.offset)
    before = (evaluate(x.layout_b) + off).reshape(N, M).T
    after = evaluate(x).reshape(N, M).T
    grids = []
    stack = C > 16  # wide tiles: after below before, else side by side
    for k, (vals, name) in enumerate(((before, f"before: {x.offset} o {x.layout_b}"), (after, f"after: {x.layout_a}"))):
        origin = (k * (R + 3), 0) if stack else (0, k * (C + 2))
        g = Grid(R, C, title=_window_title(name, M, N, win), origin=origin, row_labels=[str(r0 + i) for i in range(R)],
                 col_labels=[str(c0 + j) for j in range(C)])
        banks = bank_of(vals * (bits // 8))
        for i in range(R):
            for j in range(C):
                b = int(banks[r0 + i, c0 + j])
                g.cell(i, j, str(int(vals[r0 + i, c0 + j])), sub=f"b{b}", fill=palette(b, 32))
        grids.append(g)
    return render(*grids, caption=f"{x}: element offset, and bank b# of {bits}-bit elements (4-byte banks)",
                  legend=_window_note(M, N, win, (WINDOW_HINT, TABLE_HINT)))


def picture(obj, kind: str = "auto", bits: int = 16, tile=None, window=None) -> str:
    """Choose the picture for obj: a TiledCopy, an MMA, a swizzled layout, or a plain layout grid
    (``kind="tv"``: obj is a (thread, value) layout into ``tile``, by default a 1-D tile of its cosize).
    ``window`` = (row, col) or (row, col, rows, cols): the part of a large picture to draw."""
    if isinstance(obj, (ThrCopy, ThrMMA)):
        obj = obj.tiled
    if isinstance(obj, Tensor):
        obj = obj.layout()
    if kind == "auto":
        if isinstance(obj, TiledCopy):
            kind = "copy"
        elif isinstance(obj, (TiledMMA, MMAAtom)):
            kind = "mma"
        elif getattr(obj, "_composed", False) and hasattr(obj.layout_a, "yyy_msk"):
            kind = "swizzle"
        else:
            kind = "grid"
    if kind == "copy":
        return copy_svg(obj, window=window)
    if kind == "mma":
        return mma_svg(obj, window=window)
    if kind == "swizzle":
        return swizzle_svg(obj, bits, window=window)
    if kind == "tv":
        if not isinstance(obj, L.Layout) or int(L.rank(obj)) != 2:
            raise bad_argument("layout", str(obj), "a TV picture needs a rank-2 (thread, value) layout")
        return tv_svg(obj, tuple(tile) if tile else (int(L.cosize(obj)),), window=window)
    if kind == "grid":
        if not L.is_layout(obj):
            raise bad_argument("object", str(obj).split("\n")[0],
                               "has no picture (expected a layout, TiledCopy or TiledMMA)")
        return layout_svg(obj, window=window)
    raise bad_argument("kind", kind, "expected auto, grid, tv, swizzle, copy or mma")
