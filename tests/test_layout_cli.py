"""``flashsim layout "EXPR"`` (flashsim/cli/layout.py) and the SVG pictures of flashsim.viz.layout."""

import argparse
import re
import sys

import pytest

from flashsim.cli.layout import add_parser, ldmatrix_bank_report
from flashsim.errors import ArgumentError, FlashsimError
from flashsim.layout import (
    COPY_OPS, MMA_OPS, Copy_Atom, Layout, S, Swizzle, TiledMMA, composition, make_tiled_copy,
)
from flashsim.viz import layout as V

SEED_SQ = "tile_to_shape(composition(Swizzle<3,3,3>{}, Layout<Shape<_8,_64>,Stride<_64,_1>>{}), Shape<_128,_128>{})"


def run(argv):
    """What ``flashsim`` does with the subcommand: parse, run, report FlashsimError as exit status 2."""
    p = argparse.ArgumentParser(prog="flashsim")
    add_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["layout", *argv])
    try:
        return args.func(args)
    except FlashsimError as e:
        print(f"flashsim: error: {e}", file=sys.stderr)
        return 2


def test_prints_the_seed_layout_exactly(capsys):
    assert run([SEED_SQ]) == 0
    assert capsys.readouterr().out == "Sw<3,3,3> o _0 o ((_8,_16),(_64,_2)):((_64,_512),(_1,_8192))\n"


def test_issue_example_and_static_spellings(capsys):
    assert run(["composition(Swizzle(3,3,3), Layout((8,64),(64,1)))"]) == 0
    assert run(["composition(Swizzle(3,3,3), Layout((S(8),_64),(Int<64>{},_1)))"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["Sw<3,3,3> o _0 o (8,64):(64,1)", "Sw<3,3,3> o _0 o (_8,_64):(_64,_1)"]


def test_print_layout_table(capsys):
    assert run(["make_layout(make_shape(2,make_shape(2,2)), make_stride(4,make_stride(2,1)))", "--print-layout"]) == 0
    out = capsys.readouterr().out
    assert " 1  | 4 | 6 | 5 | 7 |\n" in out


def test_malformed_expression_is_an_error_naming_it(capsys):
    assert run(["Layout((_8,_64),(_64,_1)"]) == 2
    err = capsys.readouterr().err
    assert "EXPR='Layout((_8,_64),(_64,_1)'" in err and "malformed expression" in err


def test_undefined_algebra_is_an_error_naming_the_operands(capsys):
    assert run(["complement(Layout<Shape<_2,_2>,Stride<_1,_1>>{}, _8{})"]) == 2
    assert "complement((_2,_2):(_1,_1), _8) is not defined" in capsys.readouterr().err


@pytest.mark.parametrize("expr,picture,needles", [
    ("Layout((_4,_8),(_8,_1))", "auto", [">31<", "(_4,_8):(_8,_1)"]),
    ("composition(Swizzle(3,3,3), Layout((_8,_64),(_64,_1)))", "auto", ["after: Sw&lt;3,3,3&gt;", ">b0<", ">72<"]),
    ("make_tiled_mma(SM80_16x8x16_F32F16F16F32_TN{}, Layout<Shape<_2,_2,_1>>{})", "auto", ["A (32x16)", "B (16x16)", "C (32x16)", ">T127<"]),
    ("make_tiled_copy(Copy_Atom<SM75_U32x4_LDSM_N, half_t>{}, Layout<Shape<_16,_2>,Stride<_2,_1>>{}, Layout<Shape<_1,_8>>{})",
     "auto", ["source (SM75_U32x4_LDSM_N)", "destination", ">T31<", ">V7<"]),
    ("SM80_16x8x16_F32F16F16F32_TN{}", "auto", ["A (16x16)", "C (16x8)"]),
    ("Layout<Shape<Shape<_2,_4>,Shape<_2,_2>>,Stride<Stride<_8,_1>,Stride<_4,_16>>>{}", "tv", [">T7<", ">V3<"]),
])
def test_svg_pictures(tmp_path, capsys, expr, picture, needles):
    f = tmp_path / "p.svg"
    assert run([expr, "--svg", str(f), "--picture", picture] + (["--tile", "4x8"] if picture == "tv" else [])) == 0
    svg = f.read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    for n in needles:
        assert n in svg, n
    assert f"wrote {f}" in capsys.readouterr().out


def test_tv_picture_on_a_tile():
    tv = Layout(((S(2), S(4)), (S(2), S(2))), ((S(8), S(1)), (S(4), S(16))))  # 03_tensor.md: (T8,V4) -> (M4,N8)
    svg = V.tv_svg(tv, (4, 8))
    cells = re.findall(r">T(\d)</text>", svg)
    assert len(cells) == 32 and sorted(set(cells)) == [str(t) for t in range(8)]


def test_swizzle_picture_shows_the_bank_of_every_cell():
    svg = V.swizzle_svg(composition(Swizzle(3, 3, 3), Layout((S(8), S(64)), (S(64), S(1)))), bits=16)
    banks = [int(b) for b in re.findall(r">b(\d+)<", svg)]
    assert len(banks) == 2 * 8 * 64
    after = banks[512:]
    # row r, 16-byte chunk c holds halves 8c'..8c'+7 with c' = c ^ r: its first bank is 4*(c ^ r) % 32
    assert after[1 * 64 + 0] == (4 * (0 ^ 1)) % 32 and after[7 * 64 + 8] == (4 * (1 ^ 7)) % 32


def test_picture_refuses_too_many_cells():
    with pytest.raises(ArgumentError, match=r"cells=.*too many cells to draw"):
        V.layout_svg(Layout((S(512), S(512))))


def test_mma_and_copy_pictures_directly():
    mma = TiledMMA(MMA_OPS["SM75_16x8x8_F32F16F16F32_TN"])
    assert "A (16x8)" in V.mma_svg(mma) and "B (8x8)" in V.mma_svg(mma)
    tc = make_tiled_copy(Copy_Atom(COPY_OPS["UniversalCopy"]("uint128_t"), "float"), Layout((S(32), S(8))), Layout((S(4), S(1))))
    assert ">T255<" in V.copy_svg(tc)


def test_banks_counts_ldmatrix_conflicts(capsys):
    plain = ldmatrix_bank_report(Layout((S(8), S(64)), (S(64), S(1))), 16)
    swz = ldmatrix_bank_report(composition(Swizzle(3, 3, 3), Layout((S(8), S(64)), (S(64), S(1)))), 16)
    assert all(wf == 1 for *_r, wf in swz)           # Sw<3,3,3> puts the 8 rows in 8 different bank groups
    assert all(wf == 8 for *_r, wf in plain)         # row stride 128 bytes: all 8 rows in the same banks
    assert run(["composition(Swizzle(3,3,3), Layout((_8,_64),(_64,_1)))", "--banks"]) == 0
    assert "0 conflicts" in capsys.readouterr().out


def test_banks_needs_16_byte_rows():
    with pytest.raises(ArgumentError, match="not 16 contiguous bytes"):
        ldmatrix_bank_report(Layout((S(8), S(64))), 16)  # column-major: a row is strided
