"""Bad command lines end as one line ``flashsim: error: ...`` (or argparse's usage error), exit 2, and
Ctrl-C as ``interrupted``, exit 130: never a Python traceback."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from flashsim.cli import main

TRACE = Path(__file__).resolve().parents[1] / "traces" / "warp" / "v5_d32.fstrace"


@pytest.mark.parametrize("argv, message", [
    (["check", "--seqlen", "-5"], "argument --seqlen: expected a positive integer, got -5"),
    (["check", "--seqlen-k", "-1"], "argument --seqlen-k: expected a non-negative integer, got -1"),
    (["check", "--seed", "-1"], "argument --seed: expected a non-negative integer, got -1"),
    (["check", "--batch", "0"], "argument --batch: expected a positive integer, got 0"),
    (["trace", "show", str(TRACE), "--max-regs", "0"], "argument --max-regs: expected a positive integer, got 0"),
    (["ldmatrix", "--x4", "--addr", "lane*16", "--row-stride", "0"], "argument --row-stride: expected a positive integer"),
    (["ldmatrix", "--x4", "--addr", "lane*16", "--row-stride", "-5"], "argument --row-stride: expected a positive integer"),
    (["ldmatrix", "--x4", "--addr", "lane*16", "--elem-bytes", "x"], "argument --elem-bytes: expected a positive integer, got 'x'"),
])
def test_integers_are_validated_by_the_parser(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_output_folders_are_one_line_errors(tmp_path, capsys):
    missing = tmp_path / "missing" / "x.svg"
    assert main(["layout", "Layout((_8,_16),(_16,_1))", "--svg", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flashsim: error: --svg=") and f"the folder {missing.parent} does not exist" in err
    html = tmp_path / "missing" / "a.html"
    assert main(["trace", "html", str(TRACE), "-o", str(html)]) == 2
    err = capsys.readouterr().err
    assert f"the folder {html.parent} does not exist" in err and ".tmp" not in err


def test_outputs_get_the_usual_file_mode(tmp_path, capsys):
    old = os.umask(0o022)
    try:
        out = tmp_path / "a.html"
        assert main(["trace", "html", str(TRACE), "-o", str(out)]) == 0
        svg = tmp_path / "f.svg"
        assert main(["fragment", "mma.m16n8k16", "--operand", "A", "--dtype", "f16", "--svg", str(svg)]) == 0
    finally:
        os.umask(old)
    for p in (out, svg):
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p


def test_a_huge_address_expression_is_refused_not_a_traceback(capsys):
    expr = "+".join(["lane"] * 20_000)
    assert main(["banks", "--width", "32", "--addr", expr]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flashsim: error:") and "Traceback" not in err


def test_ctrl_c_prints_interrupted_and_exits_130(monkeypatch, capsys):
    import flashsim.cli as cli

    parser = cli.build_parser()
    ns = parser.parse_args(["info"])

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(ns, "func", interrupted)
    monkeypatch.setattr(cli, "build_parser", lambda: type("P", (), {"parse_args": lambda self, argv: ns})())
    assert cli.main(["info"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_every_error_class_is_a_flashsim_error():
    from flashsim.errors import FlashsimError
    from gpu import runtime, trace_gpu

    assert issubclass(trace_gpu.TraceOverflow, FlashsimError)
    assert issubclass(runtime.CheckError, FlashsimError)
    import gpu.check_banks
    import gpu.check_races

    assert gpu.check_banks.CheckError is gpu.check_races.CheckError is runtime.CheckError


def test_verify_finds_the_golden_data_from_any_directory(tmp_path, monkeypatch):
    from flashsim import golden

    monkeypatch.chdir(tmp_path)
    assert golden.default_dir() == golden.REPOSITORY_DIR and (golden.REPOSITORY_DIR / "f32.npz").exists()
    (tmp_path / "traces" / "numerics").mkdir(parents=True)
    assert golden.default_dir() == golden.DEFAULT_DIR  # a local copy wins


def test_check_refuses_no_kernel_and_fails_when_none_ran(capsys):
    assert main(["check", "--kernel", ""]) == 2
    assert "--kernel=''" in capsys.readouterr().err
    # kernel1 needs headdim 128 and seqlens that are multiples of 64: nothing runs
    assert main(["check", "--kernel", "kernel1", "--seqlen", "7", "--headdim", "8"]) == 1
    assert "no kernel ran" in capsys.readouterr().err


def test_check_gpu_fails_before_simulating_without_a_gpu(monkeypatch, capsys):
    import gpu.runtime

    def no_gpu():
        raise gpu.runtime.GpuUnavailable("no CUDA device (test)")

    monkeypatch.setattr(gpu.runtime, "require_gpu", no_gpu)
    import flashsim.check as check

    monkeypatch.setattr(check, "np", None)  # any simulation would fail on this: the GPU check must come first
    assert main(["check", "--gpu", "--kernel", "v5"]) == 2
    assert "no CUDA device (test)" in capsys.readouterr().err
