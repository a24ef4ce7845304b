"""``flashsim layout "EXPR"``: evaluate a CuTe layout expression, print it as CuTe does, draw it, count banks.

``add_parser(subparsers)`` registers the subcommand on the top-level ``flashsim`` parser.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from flashsim.errors import bad_argument
from flashsim.layout import layout as L
from flashsim.layout.atoms import dtype as _dtype
from flashsim.layout.evaluate import evaluate
from flashsim.layout.expr import cute_str, evaluate_expression
from flashsim.outputs import write_text
from flashsim.smem import wavefronts
from flashsim.viz.layout import picture

MAX_TABLE = 1 << 16
PICTURES = ("auto", "grid", "tv", "swizzle", "copy", "mma")
DTYPE_CHOICES = ("f16", "bf16", "f32", "f64", "half_t", "bfloat16_t", "float", "double")

EPILOG = """examples:
  flashsim layout "composition(Swizzle(3,3,3), Layout((_8,_64),(_64,_1)))"
  flashsim layout "tile_to_shape(composition(Swizzle(3,3,3), Layout((_8,_64),(_64,_1))), (_128,_128))" --svg sQ.svg
  flashsim layout "tile_to_shape(composition(Swizzle<3,3,3>{}, Layout<Shape<_8,_64>,Stride<_64,_1>>{}), Shape<_128,_128>{})"
  flashsim layout "make_tiled_mma(SM80_16x8x16_F32F16F16F32_TN{}, Layout<Shape<_4,_1,_1>>{})" --svg mma.svg
  flashsim layout "composition(Swizzle(3,3,3), Layout((_8,_64),(_64,_1)))" --banks --dtype f16

Integers written _8, S(8) or Int<8> are static (printed _8); plain 8 is dynamic."""


def add_parser(subparsers):
    """Register ``layout`` on an argparse subparsers object; the handler is ``args.func``."""
    p = subparsers.add_parser(
        "layout", help="evaluate a CuTe layout expression; print it exactly as CuTe does; draw it as SVG",
        description=__doc__.split("\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("expr", metavar="EXPR", help="a CuTe-style expression (C++ template syntax also accepted)")
    p.add_argument("--svg", type=Path, metavar="FILE", help="write a picture of the result to FILE (default: none)")
    p.add_argument("--picture", choices=PICTURES, default="auto",
                   help="which picture --svg draws (default: chosen by the type of the result)")
    p.add_argument("--tile", metavar="MxN", help="tile a (thread, value) layout maps into, for --picture tv, e.g. 4x8 "
                                                "(default: a 1-D tile of the layout's cosize)")
    p.add_argument("--print-layout", action="store_true", help="also print CuTe's print_layout table (rank-2 layouts)")
    p.add_argument("--banks", action="store_true",
                   help="bank conflicts of reading the (rank-2, row = first mode) layout with ldmatrix, "
                        "8 rows at a time")
    p.add_argument("--dtype", default="f16", choices=DTYPE_CHOICES,
                   help="element type for --banks and the swizzle picture (default: %(default)s)")
    p.set_defaults(func=cmd_layout)
    return p


def cmd_layout(args) -> int:
    obj = evaluate_expression(args.expr)
    print(cute_str(obj))
    bits = _dtype(args.dtype).bits
    if args.print_layout:
        lay = _as_layout(obj)
        if int(L.size(lay)) > MAX_TABLE:
            raise bad_argument("EXPR", str(lay), f"too large for --print-layout (more than {MAX_TABLE} elements)")
        print(L.print_layout(lay), end="")
    if args.svg:
        svg = picture(obj, args.picture, bits, tile=_parse_tile(args.tile))
        write_text(args.svg, svg, option="--svg")
        print(f"wrote {args.svg}")
    if args.banks:
        rows = ldmatrix_bank_report(_as_layout(obj), bits)
        total_wf = sum(r[3] for r in rows)
        ideal = len(rows)
        print(f"ldmatrix (.m8n8 x1) reads of {args.dtype} rows, 8 rows x 16 bytes per matrix:")
        print(f"{'rows':<10} {'cols':<10} {'wavefronts':>10} {'conflicts':>9}")
        for r0, c0, c1, wf in rows:
            print(f"{f'{r0}..{r0 + 7}':<10} {f'{c0}..{c1}':<10} {wf:>10} {wf - 1:>9}")
        print(f"total: {len(rows)} matrices, {total_wf} wavefronts, {total_wf - ideal} conflicts (ideal {ideal})")
    return 0


def _parse_tile(text):
    if text is None:
        return None
    parts = text.lower().replace(",", "x").split("x")
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise bad_argument("--tile", text, "expected positive sizes like 4x8")
    return tuple(int(p) for p in parts)


def _as_layout(obj):
    if callable(getattr(obj, "layout", None)) and not L.is_layout(obj):
        obj = obj.layout()
    if not L.is_layout(obj):
        raise bad_argument("EXPR", cute_str(obj).split("\n")[0], "is not a layout")
    return obj


def ldmatrix_bank_report(layout, bits: int = 16):
    """Wavefronts of ldmatrix reads of a rank-2 (row, col) shared-memory layout of ``bits``-wide elements:
    rows 8 at a time, 16 bytes per row, one 8x8 matrix per phase. Returns [(row0, col0, col1, wavefronts)].

    The counting is the bank accountant's (:func:`flashsim.smem.wavefronts` with ``op="ldsm"``, one .x1
    instruction per matrix); this only forms the 8 row addresses of each matrix from the layout.
    """
    if int(L.rank(layout)) != 2:
        raise bad_argument("layout", str(layout), "--banks needs a rank-2 (row, column) layout")
    M, N = int(L.size(layout, 0)), int(L.size(layout, 1))
    per_row = 128 // bits  # elements in the 16 bytes one ldmatrix row reads
    if M % 8 or N % per_row:
        raise bad_argument("layout", str(layout), f"needs rows in multiples of 8 and columns in multiples of {per_row}")
    offs = evaluate(layout).reshape(N, M).T  # [m, n] element offsets
    blocks, rows = [], []
    for r0 in range(0, M, 8):
        for c0 in range(0, N, per_row):
            block = offs[r0:r0 + 8, c0:c0 + per_row]
            if not np.all(block - block[:, :1] == np.arange(per_row)):
                raise bad_argument("layout", str(layout),
                                   f"rows {r0}..{r0 + 7}, columns {c0}..{c0 + per_row - 1} are not 16 contiguous bytes "
                                   "per row, so ldmatrix cannot read them")
            addrs = block[:, 0] * (bits // 8)
            if np.any(addrs % 16):
                raise bad_argument("layout", str(layout), f"rows {r0}..{r0 + 7} at column {c0}: ldmatrix row "
                                   "addresses must be 16-byte aligned")
            blocks.append((r0, c0, c0 + per_row - 1))
            rows.append(addrs)
    addr = np.zeros((len(rows), 32), np.int64)  # one .x1 instruction per matrix: lanes 0..7 give its rows
    addr[:, :8] = np.stack(rows)
    wf, _ideal = wavefronts(addr, op="ldsm", num=1)
    return [(r0, c0, c1, int(w)) for (r0, c0, c1), w in zip(blocks, wf)]
