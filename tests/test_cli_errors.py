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
    from flashsim.gpu import runtime, trace_gpu

    assert issubclass(trace_gpu.TraceOverflow, FlashsimError)
    assert issubclass(runtime.CheckError, FlashsimError)
    import flashsim.gpu.check_banks
    import flashsim.gpu.check_races

    assert flashsim.gpu.check_banks.CheckError is flashsim.gpu.check_races.CheckError is runtime.CheckError


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
    import flashsim.gpu.runtime

    def no_gpu():
        raise flashsim.gpu.runtime.GpuUnavailable("no CUDA device (test)")

    monkeypatch.setattr(flashsim.gpu.runtime, "require_gpu", no_gpu)
    import flashsim.check as check

    monkeypatch.setattr(check, "np", None)  # any simulation would fail on this: the GPU check must come first
    assert main(["check", "--gpu", "--kernel", "v5"]) == 2
    assert "no CUDA device (test)" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------
# Runs beyond the machine are refused before they start, with the estimate and advice
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, options", [
    (["check", "--seqlen", "1000000"], "--seqlen=1000000"),
    (["check", "--batch", "100000", "--heads", "1000"], "--batch=100000 --heads=1000"),
    (["trace", "record", "--seqlen", "100000000", "--backend", "sim", "-o", "{out}"], "--seqlen=100000000"),
    (["trace", "record", "--seqlen", "100000000", "--backend", "gpu", "-o", "{out}"], "--seqlen=100000000"),
])
def test_runs_beyond_reason_are_refused_with_the_estimate(argv, options, tmp_path, capsys):
    import time

    out = tmp_path / "x.fstrace"
    t0 = time.perf_counter()
    assert main([a.format(out=out) for a in argv]) == 2
    assert time.perf_counter() - t0 < 5  # refused from the estimate, before any allocation
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert err.startswith(f"flashsim: error: {options}: too large to simulate here: about ") and "\n" not in err
    assert "of arrays (this machine has " in err and "use smaller --batch" in err
    if "gpu" not in argv:
        assert "tile-steps of simulation (CTAs x KV blocks; the limit is 1e8" in err
    assert not cap.out and not list(tmp_path.iterdir())


def test_memory_and_work_limits_each_refuse(monkeypatch, capsys):
    import flashsim.progress as progress

    monkeypatch.setattr(progress, "physical_memory", lambda: 1 << 20)
    assert main(["check", "--kernel", "fa2", "--no-banks"]) == 2
    err = capsys.readouterr().err
    assert "--batch=1 --heads=2 --seqlen=256 --headdim=128: too large" in err and "this machine has 1.0 MiB" in err
    assert "tile-steps" not in err and "--no-banks" not in err
    monkeypatch.undo()
    monkeypatch.setattr(progress, "MAX_TILE_STEPS", 10)
    assert main(["check", "--kernel", "fa2"]) == 2
    err = capsys.readouterr().err
    assert "about 64 tile-steps of simulation (CTAs x KV blocks; the limit is 10," in err and "--no-banks" in err


# ----------------------------------------------------------------------------------------------------
# Ctrl-C: pending work cancelled, interrupted, 130, no temporary files
# ----------------------------------------------------------------------------------------------------


def test_ctrl_c_cancels_a_long_run_within_a_second():
    """A fake long run: 8 batches of 100 KV steps of 20 ms on 2 threads; Ctrl-C arrives from the progress
    callback. The batches not started never start, those in flight stop at their next step."""
    import threading
    import time

    import numpy as np

    from flashsim.kernels.common import Cancelled, StepHook, run_batches

    hook = StepHook()
    started, finished, stopped = [], [], []

    def fn(idx):
        started.append(int(idx[0]))
        try:
            for step in range(100):
                hook(idx, step, 100)
                time.sleep(0.02)
        except Cancelled:
            stopped.append(int(idx[0]))
            raise
        finished.append(int(idx[0]))

    def progress(done, total):
        raise KeyboardInterrupt

    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_batches(fn, np.arange(8), 1, threads=2, progress=progress, hook=hook)
    assert time.perf_counter() - t0 < 1.0
    assert len(started) == 2 and sorted(stopped) == sorted(started) and not finished
    workers = [t for t in threading.enumerate() if t.name.startswith("flashsim-cta")]
    for t in workers:  # they leave as soon as their batch stopped
        t.join(timeout=1.0)
    assert not [t for t in workers if t.is_alive()]


def test_ctrl_c_stops_flashsim_check(monkeypatch, capsys):
    import time

    import flashsim.cli.check as check
    from flashsim.progress import Progress

    monkeypatch.setenv("FLASHSIM_THREADS", "2")
    monkeypatch.setattr(check, "PROGRESS_DELAY", 0.0)
    when = []

    def interrupt(self, done, total=None):
        when.append(time.perf_counter())
        raise KeyboardInterrupt

    monkeypatch.setattr(Progress, "__call__", interrupt)
    assert main(["check", "--kernel", "fa2", "--seqlen", "2048", "--heads", "2", "--no-banks"]) == 130
    assert time.perf_counter() - when[0] < 1.0 and len(when) == 1
    cap = capsys.readouterr()
    assert cap.err.strip().splitlines()[-1] == "interrupted" and "kernels passed" not in cap.out


@pytest.mark.parametrize("stage", ["fa2 twin", "writing"])
def test_ctrl_c_in_trace_record_leaves_no_file(stage, tmp_path, monkeypatch, capsys):
    import flashsim.cli.trace as tcli
    from flashsim.progress import Progress

    monkeypatch.setattr(tcli, "PROGRESS_DELAY", 0.0)
    real = Progress.__call__

    def interrupt(self, done, total=None):
        if self.label.startswith(stage):
            raise KeyboardInterrupt
        return real(self, done, total)

    monkeypatch.setattr(Progress, "__call__", interrupt)
    out = tmp_path / "run.fstrace"
    assert main(["trace", "record", "--kernel", "fa2", "--seqlen", "300", "--backend", "sim", "-o", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"
    assert not list(tmp_path.iterdir())  # neither the trace nor a temporary file
