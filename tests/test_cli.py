"""The command line: `flashsim info` lists every modelled instruction with its verification status."""

import subprocess
import sys

from flashsim.cli import main
from flashsim.validation import modelled, records, status_table


def test_info_lists_every_modelled_instruction(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for m in modelled():
        assert m.ptx in out
    assert "sm_80" in out and "NOT VERIFIED" in out


def test_every_sm90_instruction_has_a_clean_hardware_record():
    rows = [r for r in status_table() if r[1] == "sm_90"]
    unverified = [r for r in rows if not r[3].startswith("bit-exact")]
    assert not unverified, unverified
    for r in records():
        assert r["mismatches"] == 0 and r["cases"] > 0 and r["gpu"]


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "flashsim.cli", "info", "--arch", "sm_80"],
                         capture_output=True, text=True, check=True).stdout
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in out and "sm_90" not in out.split("\n", 3)[3]


def test_verify_reports_a_missing_folder(tmp_path, capsys):
    assert main(["verify", "--golden", str(tmp_path / "nope")]) == 2
    assert "no golden numerics files" in capsys.readouterr().err


def test_check_runs_every_kernel_and_reports_rule_and_banks(capsys):
    from flashsim.cli import main

    rc = main(["check", "--seqlen", "64", "--headdim", "128", "--heads", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    for kernel in ("fa2", "kernel1", "v5", "v6"):
        assert f"== {kernel}" in out
    assert out.count("vs float64: passes") == 4
    assert out.count("executed in the SASS interpreter") == 4 and "kernel1.cu:" in out
    assert "4 of 4 kernels passed" in out


def test_check_skips_kernels_outside_their_domain(capsys):
    from flashsim.cli import main

    rc = main(["check", "--seqlen", "40", "--headdim", "64", "--causal", "--dtype", "bfloat16"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "1 of 1 kernels passed" in out and "skipped (outside their domain): ['kernel1', 'v5', 'v6']" in out


def test_check_names_a_bad_kernel(capsys):
    from flashsim.cli import main

    assert main(["check", "--kernel", "fa3"]) == 2
    assert "--kernel='fa3'" in capsys.readouterr().err
