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
