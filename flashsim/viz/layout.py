"""SVG pictures of CuTe layouts, thread-value maps, MMA atoms, tiled copies and swizzles (viz.svg grids).

- ``layout_svg(L)``: a rank-2 layout as a grid, the index L(m,n) in every cell (CuTe's print_latex).
- ``tv_svg(layout_tv, tile)``: a (thread, value) -> coordinate map as ``T# V#`` cells coloured by thread.
- ``mma_svg(mma)``: an MMA atom or TiledMMA: C at the origin, A to its left, B above it.
- ``copy_svg(tiled_copy)``: a TiledCopy: source partition and destination partition side by side.
- ``swizzle_svg(L, bits)``: a swizzled layout before and after the swizzle, with the bank of every cell.
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import bad_argument
from flashsim.layout import layout as L
from flashsim.layout.evaluate import evaluate
from flashsim.viz.svg import Grid, palette, render

MAX_CELLS = 1 << 16


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


def layout_svg(x, title: str | None = None) -> str:
    """The grid of a layout (or composed layout): cell (m, n) shows L(m, n)."""
    M, N = _dims(x)
    _check_cells(M * N, "cells")
    vals = evaluate(x).reshape(N, M).T
    g = Grid(M, N, title=title if title is not None else str(x), row_labels=[str(i) for i in range(M)],
             col_labels=[str(j) for j in range(N)])
    for m in range(M):
        for n in range(N):
            v = int(vals[m, n])
            g.cell(m, n, str(v), fill=palette(v % 8, 8))
    return render(g, caption=f"{x}")


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


def _tv_grid(layout_tv, M, N, title, origin=(0, 0), transpose=False, row_labels=None, col_labels=None):
    _check_cells(M * N, "cells")
    cells, nt = _tv_cells(layout_tv, M, N)
    R, Cc = (N, M) if transpose else (M, N)
    g = Grid(R, Cc, title=title, origin=origin,
             row_labels=row_labels if row_labels is not None else [str(i) for i in range(R)],
             col_labels=col_labels if col_labels is not None else [str(j) for j in range(Cc)])
    for (m, n), owners in cells.items():
        t, v = owners[0]
        r, c = (n, m) if transpose else (m, n)
        extra = f" +{len(owners) - 1}" if len(owners) > 1 else ""
        g.cell(r, c, f"T{t}", sub=f"V{v}{extra}", fill=palette(t % 8, 8))  # CuTe's print_latex: colour = thread % 8
    return g


def tv_svg(layout_tv, tile_shape, title: str | None = None) -> str:
    """A (thread, value) -> (m, n) map drawn on the M x N tile: ``T#`` and ``V#`` per cell, coloured by thread."""
    dims = tile_shape if isinstance(tile_shape, tuple) else (tile_shape,)
    shp = tuple(int(L.size(s)) if L.is_layout(s) else int(s) for s in dims)
    M = shp[0]
    N = int(np.prod(shp[1:])) if len(shp) > 1 else 1
    g = _tv_grid(layout_tv, M, N, title if title is not None else f"TV layout {layout_tv}")
    return render(g, caption=f"(thread,value) -> coordinate: {layout_tv}")


def mma_svg(mma) -> str:
    """An MMA atom or TiledMMA: C (M x N) at the origin, A (M x K) to its left, B (K x N) above it."""
    from flashsim.layout.atoms import MMAAtom
    from flashsim.layout.tiled import TiledMMA

    if isinstance(mma, MMAAtom):
        mma = TiledMMA(mma)
    if not isinstance(mma, TiledMMA):
        raise bad_argument("mma", mma, "expected an MMA atom or a TiledMMA")
    M, N, K = (int(mma.tile_size_mnk(i)) for i in range(3))
    _check_cells(M * N + M * K + N * K, "cells")
    off = K + 2  # A's K columns (and B's K rows) plus a gap and room for labels
    cg = _tv_grid(mma.get_layoutC_TV(), M, N, f"C ({M}x{N})", origin=(off, off))
    ag = _tv_grid(mma.get_layoutA_TV(), M, K, f"A ({M}x{K})", origin=(off, 0))
    bg = _tv_grid(mma.get_layoutB_TV(), N, K, f"B ({K}x{N})", origin=(0, off), transpose=True)
    return render(ag, bg, cg, caption=f"{mma.atom.name}: ThrLayoutVMNK {mma.thr_layout_vmnk}")


def copy_svg(tiled) -> str:
    """A TiledCopy: which thread and value every element of the tile is, on the source and the destination."""
    from flashsim.layout.tiled import TiledCopy

    if not isinstance(tiled, TiledCopy):
        raise bad_argument("tiled_copy", tiled, "expected a TiledCopy")
    shp = tuple(int(L.size(s)) if L.is_layout(s) else int(s) for s in tiled.tiler_mn)
    M = shp[0]
    N = int(np.prod(shp[1:])) if len(shp) > 1 else 1
    src = _tv_grid(tiled.get_layoutS_TV(), M, N, f"source ({tiled.atom.op.name})")
    dst = _tv_grid(tiled.get_layoutD_TV(), M, N, "destination", origin=(0, N + 2))
    return render(src, dst, caption=f"TiledCopy {tiled.layout_tv} over {M}x{N}")


def bank_of(byte_addr):
    """Shared-memory bank of a byte address: 32 banks of 4 bytes (bank = (addr / 4) % 32)."""
    return (np.asarray(byte_addr) // 4) % 32


def swizzle_svg(x, bits: int = 16) -> str:
    """A swizzled rank-2 layout before (``offset o B``) and after (``Sw o offset o B``) the swizzle, each cell
    showing its element offset and, below, its shared-memory bank for elements of ``bits`` width."""
    if not getattr(x, "_composed", False):
        raise bad_argument("layout", str(x), "swizzle_svg needs a composed layout such as Sw<3,3,3> o _0 o L")
    if bits % 8 or bits <= 0:
        raise bad_argument("bits", bits, "element width must be a positive multiple of 8")
    M, N = _dims(x)
    _check_cells(2 * M * N, "cells")
    off = x.offset.value if hasattr(x.offset, "value") and not isinstance(x.offset, int) else int(x.offset)
    before = (evaluate(x.layout_b) + off).reshape(N, M).T
    after = evaluate(x).reshape(N, M).T
    grids = []
    stack = N > 16  # wide tiles: after below before, else side by side
    for k, (vals, name) in enumerate(((before, f"before: {x.offset} o {x.layout_b}"), (after, f"after: {x.layout_a}"))):
        origin = (k * (M + 3), 0) if stack else (0, k * (N + 2))
        g = Grid(M, N, title=name, origin=origin, row_labels=[str(i) for i in range(M)],
                 col_labels=[str(j) for j in range(N)])
        banks = bank_of(vals * (bits // 8))
        for m in range(M):
            for n in range(N):
                b = int(banks[m, n])
                g.cell(m, n, str(int(vals[m, n])), sub=f"b{b}", fill=palette(b, 32))
        grids.append(g)
    return render(*grids, caption=f"{x}: element offset, and bank b# of {bits}-bit elements (4-byte banks)")


def picture(obj, kind: str = "auto", bits: int = 16, tile=None) -> str:
    """Choose the picture for obj: a TiledCopy, an MMA, a swizzled layout, or a plain layout grid
    (``kind="tv"``: obj is a (thread, value) layout into ``tile``, by default a 1-D tile of its cosize)."""
    from flashsim.layout.atoms import MMAAtom
    from flashsim.layout.tensor import Tensor
    from flashsim.layout.tiled import ThrCopy, ThrMMA, TiledCopy, TiledMMA

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
        return copy_svg(obj)
    if kind == "mma":
        return mma_svg(obj)
    if kind == "swizzle":
        return swizzle_svg(obj, bits)
    if kind == "tv":
        if not isinstance(obj, L.Layout) or int(L.rank(obj)) != 2:
            raise bad_argument("layout", str(obj), "a TV picture needs a rank-2 (thread, value) layout")
        return tv_svg(obj, tuple(tile) if tile else (int(L.cosize(obj)),))
    if kind == "grid":
        if not L.is_layout(obj):
            raise bad_argument("object", str(obj).split("\n")[0],
                               "has no picture (expected a layout, TiledCopy or TiledMMA)")
        return layout_svg(obj)
    raise bad_argument("kind", kind, "expected auto, grid, tv, swizzle, copy or mma")
