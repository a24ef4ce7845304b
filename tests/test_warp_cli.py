"""`flashsim fragment | ldmatrix | banks` (registered by flashsim.cli.warp.add_parsers) and the safe EXPR."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from flashsim.cli import main, warp as cli
from flashsim.errors import ArgumentError
from flashsim.warp.expr import evaluate, parse_defines


def run(argv):
    return main(argv)


def test_add_parsers_registers_three_subcommands():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command")
    cli.add_parsers(sub)
    assert {"fragment", "ldmatrix", "banks"} <= set(sub.choices)
    args = p.parse_args(["ldmatrix", "--x2", "--trans", "--addr", "lane*8"])
    assert (args.num, args.trans, args.func) == (2, True, cli.cmd_ldmatrix)


def test_fragment_table_svg_and_inverse(tmp_path, capsys):
    svg = tmp_path / "a.svg"
    assert run(["fragment", "mma.m16n8k16", "--operand", "A", "--dtype", "f16", "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "mma.m16n8k16 A (16x16, row): 4 registers x 2 elements per lane" in out
    assert "Matrix Fragments for mma.m16n8k16" in out
    row9 = next(line for line in out.splitlines() if line.startswith(" r9 ") or line.startswith("r9 "))
    assert "T4V2" in row9  # (9, 0): lane 4 (g=1, t=0), reg 1, half 0 -> V2
    assert "T5" in out and "(1,11)" in out  # inverse table: lane 5 value 5 is (1, 11)
    text = svg.read_text()
    assert text.startswith("<svg") and "T31" in text and "V7" in text
    assert run(["fragment", "mma.m16n8k8", "--operand", "C", "--dtype", "f16"]) == 0


def test_ldmatrix_seed_tile_conflicts_and_swizzle(tmp_path, capsys):
    svg = tmp_path / "banks.svg"
    assert run(["ldmatrix", "--x4", "--addr", "(lane % 16) * d + (lane // 16) * 8", "-D", "d=128",
                "--row-stride", "128", "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in out
    assert "total: 32 wavefronts, ideal 4, 28 bank conflicts" in out
    assert "(8-way bank conflict)" in out
    assert "T5   (1,2) (1,3)  (9,2) (9,3)  (1,10) (1,11)  (9,10) (9,11)" in " ".join(out.split("  ")) or "(9,10)" in out
    assert 'stroke="#d00000"' in svg.read_text()  # conflicts outlined
    assert run(["ldmatrix", "--x4", "--addr", "(lane % 16) * d + (lane // 16) * 8", "-D", "d=128",
                "--swizzle", "swizzle<3,3,4>", "--row-stride", "128"]) == 0
    out = capsys.readouterr().out
    assert "through swizzle<3,3,4> (seed helper)" in out and "total: 4 wavefronts, ideal 4, 0 bank conflicts" in out
    assert run(["ldmatrix", "--x4", "--trans", "--addr", "lane * 8"]) == 0
    assert "total: 4 wavefronts" in capsys.readouterr().out


def test_banks_command(tmp_path, capsys):
    assert run(["banks", "--width", "128", "--addr", "lane * 128", "--elem-bytes", "1", "--svg", str(tmp_path / "b.svg")]) == 0
    out = capsys.readouterr().out
    assert "total: 32 wavefronts, ideal 4, 28 bank conflicts" in out
    assert run(["banks", "--width", "32", "--addr", "lane * 4", "--op", "st"]) == 0
    assert "total: 1 wavefront" in capsys.readouterr().out
    assert run(["banks", "--width", "128", "--addr", "(lane // 2) * 16", "--model", "pair-broadcast"]) == 0
    assert "pair-broadcast rule packs this load: plain phases 4 -> 2" in capsys.readouterr().out
    assert run(["banks", "--width", "128", "--addr", "(lane // 2) * 16"]) == 0  # the sm_90 default packs too
    assert "total: 2 wavefronts" in capsys.readouterr().out
    assert run(["banks", "--width", "32", "--addr", "lane * 128", "--active", "lane < 8"]) == 0
    assert "total: 8 wavefronts, ideal 1" in capsys.readouterr().out
    assert run(["banks", "--width", "128", "--op", "cp.async", "--addr", "lane * 16"]) == 0
    assert "counted as op 'ldgsts'" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["banks", "--addr", "lane / 2"], "'/' gives fractions: use '//'"),
    (["banks", "--addr", "7"], "must give 32 integers (one per lane), got one integer"),
    (["banks", "--addr", "lane * d"], "unknown name 'd'"),
    (["banks", "--addr", "__import__('os').system('true')"], "only the calls"),
    (["banks", "--addr", "lane +"], "not a Python expression"),
    (["banks", "--addr", "lane * 2.5"], "only integer literals"),
    (["banks", "--addr", "lane * 2", "--width", "64"], "misaligned shared address: cta=0 warp=0 lane=1 addr=0x2"),
    (["ldmatrix", "--addr", "lane * 4"], "misaligned shared address: cta=0 warp=0 lane=1 addr=0x8"),
    (["ldmatrix", "--addr", "lane * 8", "--swizzle", "Sw<3,3>"], "swizzle='Sw<3,3>'"),
    (["banks", "--addr", "lane", "-D", "lane=3"], "NAME=INTEGER"),
    (["banks", "--addr", "lane * 4 - 64"], "out-of-bounds shared address: cta=0 warp=0 lane=0"),
])
def test_bad_input_is_a_clear_error(argv, message, capsys):
    assert run(argv) == 2
    assert message in capsys.readouterr().err


def test_expr_evaluator():
    np.testing.assert_array_equal(evaluate("(lane % 16) * d + (lane // 16) * 8", {"d": 128})[:3], [0, 128, 256])
    np.testing.assert_array_equal(evaluate("cute_swizzle(lane * 8, 3, 3, 3)")[:9], [0, 8, 16, 24, 32, 40, 48, 56, 64 + 8])
    np.testing.assert_array_equal(evaluate("lane if lane < 16 else 0 * lane")[15:17], [15, 0])
    assert parse_defines(["d=0x80", "k = 3"]) == {"d": 128, "k": 3}
    with pytest.raises(ArgumentError, match="exceeds 2\\^48"):
        evaluate("lane << 48")
    with pytest.raises(ArgumentError, match="Attribute is not allowed"):
        evaluate("lane.__class__")
    with pytest.raises(ArgumentError, match="got an array of shape \\(32, 32\\)|List is not allowed"):
        evaluate("[lane]")
