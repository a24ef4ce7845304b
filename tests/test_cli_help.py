"""The command line explains itself: every option of every subcommand has help stating its default (or is a
flag), every command has a description, no reStructuredText markup reaches the help, the trace examples
stay one per line, check and trace record share one problem with one set of defaults, flashsim info lists
every instruction family and kernel with the GPU it was shown on, and the README's examples do what it
says."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from pathlib import Path

import pytest

from flashsim.cli import build_parser, main, parsers

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

_FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction,
          argparse._AppendConstAction, argparse._CountAction)
_SKIP = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


def _all_parsers():
    return {p.prog: p for p in parsers(build_parser())}


def _problems(parser) -> list[str]:
    """What is missing from the help of the parser's own arguments."""
    out = []
    for a in parser._actions:
        if isinstance(a, _SKIP):
            continue
        name = "/".join(a.option_strings) or a.dest
        if not a.help or a.help == argparse.SUPPRESS:
            out.append(f"{name}: no help")
        elif a.option_strings and not isinstance(a, _FLAGS) and not a.required:
            if "%(default)" not in a.help and "default" not in a.help.lower():
                out.append(f"{name}: help does not state the default")
    return out


PROGS = sorted(_all_parsers())
@pytest.mark.parametrize("prog", PROGS)
def test_every_option_has_help_stating_its_default(prog):
    assert not _problems(_all_parsers()[prog])


def test_the_parser_tree_is_walked_whole():
    assert {"flashsim", "flashsim info", "flashsim verify", "flashsim check", "flashsim run", "flashsim trace",
            "flashsim trace record", "flashsim trace diff", "flashsim trace replay", "flashsim trace show",
            "flashsim trace html", "flashsim fragment", "flashsim ldmatrix", "flashsim banks",
            "flashsim layout"} <= set(PROGS)


def test_defaults_are_shown_as_values():
    text = _all_parsers()["flashsim check"].format_help()
    assert "(default: 256)" in text and "(default: float16)" in text and "(default: fa2,kernel1,v5,v6,fa4h)" in text
    text = _all_parsers()["flashsim trace record"].format_help()
    assert "(default: auto)" in text and "(default: 0-3)" in text and "(default: 256)" in text
    for text in (p.format_help() for p in _all_parsers().values()):
        assert "default: None" not in text and "%(default)" not in text


@pytest.mark.parametrize("prog", PROGS)
def test_every_command_has_a_description_and_no_markup(prog):
    p = _all_parsers()[prog]
    assert p.description, prog
    text = p.format_help()
    assert "`" not in text and ":class:" not in text and ":func:" not in text and ".. " not in text, text


def test_info_and_verify_describe_themselves():
    ps = _all_parsers()
    assert "GPU and date" in ps["flashsim info"].description
    assert "golden data" in ps["flashsim verify"].description and "Exit status" in ps["flashsim verify"].description


def test_trace_help_shows_its_examples_one_per_line():
    text = _all_parsers()["flashsim trace"].format_help()
    lines = text.splitlines()
    for cmd in ("record", "diff", "replay", "show", "html"):
        assert sum(1 for ln in lines if ln.strip().startswith(f"flashsim trace {cmd} ")) == 1, text
    assert "    flashsim trace replay run.fstrace [--resume-at SEQ | --bisect]" in lines


# ----------------------------------------------------------------------------------------------------
# Defaults that agree
# ----------------------------------------------------------------------------------------------------

PROBLEM = ("batch", "heads", "heads_k", "seqlen", "seqlen_k", "headdim", "dtype", "causal", "window", "softcap",
           "scale", "seed")


def test_check_and_trace_record_share_the_problem_defaults():
    from flashsim.options import PROBLEM_DEFAULTS

    p = build_parser()
    check = p.parse_args(["check"])
    record = p.parse_args(["trace", "record", "-o", "x.fstrace"])
    assert {k: getattr(check, k) for k in PROBLEM} == {k: getattr(record, k) for k in PROBLEM}
    for k, v in PROBLEM_DEFAULTS.items():
        assert getattr(check, k) == v


def test_trace_record_takes_the_simulator_without_a_gpu_and_says_why(tmp_path, monkeypatch, capsys):
    import flashsim.gpu.runtime

    def no_gpu():
        raise flashsim.gpu.runtime.GpuUnavailable("no CUDA device (test)")

    monkeypatch.setattr(flashsim.gpu.runtime, "require_gpu", no_gpu)
    out = tmp_path / "v5.fstrace"
    assert main(["trace", "record", "--kernel", "v5", "--seqlen", "64", "--seqlen-k", "16", "--headdim", "16",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "backend: simulator (--backend auto, no GPU here: no CUDA device (test))" in text
    from flashsim import session

    assert session.load(out).meta["backend"] == "sim"


def test_trace_record_takes_the_gpu_when_there_is_one(monkeypatch):
    import flashsim.gpu.runtime
    from flashsim.cli.trace import resolve_backend

    monkeypatch.setattr(flashsim.gpu.runtime, "require_gpu", lambda: object())
    assert resolve_backend("auto")[0] == "gpu"
    assert resolve_backend("sim") == ("sim", "--backend sim")


# ----------------------------------------------------------------------------------------------------
# flashsim info
# ----------------------------------------------------------------------------------------------------

FAMILIES = ("mma.sync", "FFMA", "cvt", "MUFU", "CUDA math", "ldmatrix", "stmatrix", "movmatrix", "shfl.sync",
            "cp.async", "bank wavefronts", "races", "kernel fa2", "kernel kernel1", "kernel v5", "kernel v6",
            "SASS opcodes")


def table_rows(block: str) -> list[str]:
    """The rows of one of flashsim info's tables (header, dashes, rows), each row's wrapped lines put back
    together column by column (a row's further lines are indented in the first column)."""
    lines = [ln for ln in block.splitlines() if ln.strip()]
    k = next(i for i, ln in enumerate(lines) if set(ln.replace(" ", "")) == {"-"})
    spans, pos = [], 0
    for dash in lines[k].split("  "):
        if dash:
            spans.append((pos, pos + len(dash)))
        pos += len(dash) + 2
    rows: list[list[list[str]]] = []
    for ln in lines[k + 1:]:
        cells = [ln[a:b + 2].strip() for a, b in spans]
        if not ln[:2].isspace() or not rows:
            rows.append([[c] for c in cells])
        else:
            for col, c in zip(rows[-1], cells):
                col.append(c)
    return ["  ".join(" ".join(x for x in col if x) for col in r) for r in rows]


def _family_rows(out: str) -> list[str]:
    return table_rows(out.split("Instruction families and kernels", 1)[1].split("Numeric instructions", 1)[0])


def test_flashsim_info_stays_within_120_columns(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert max(len(ln) for ln in out.splitlines()) <= 120


def test_info_lists_every_family_with_the_gpu_it_was_shown_on(capsys):
    assert main(["info"]) == 0
    rows = _family_rows(capsys.readouterr().out)
    for fam in FAMILIES:
        row = [r for r in rows if fam in r]
        assert row, fam
        assert re.search(r"NVIDIA H[12]00", row[0]) and re.search(r"20\d\d-\d\d-\d\d", row[0]), row[0]
    fa2 = next(r for r in rows if "kernel fa2" in r)
    assert "200/200" in fa2 and "LSE" in fa2
    assert "LSE" not in next(r for r in rows if "kernel v5" in r)


def test_info_works_without_the_repository_traces(monkeypatch, capsys, tmp_path):
    from flashsim.cli import info

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(info, "_traces_dir", lambda: None)
    assert main(["info"]) == 0
    rows = _family_rows(capsys.readouterr().out)
    for k in ("fa2", "kernel1", "v5", "v6"):  # from the package's record of the interpreter's comparisons
        row = next(r for r in rows if f"kernel {k}" in r)
        assert "NVIDIA H100" in row and "problems" in row
    assert any("ldmatrix" in r and "LDSM" in r for r in rows)


def test_readme_info_sentence_names_the_same_families():
    para = README.split("## What is modelled so far", 1)[1].split("| module |", 1)[0]
    for word in ("mma.sync", "cvt", "MUFU", "CUDA math", "ldmatrix/stmatrix/movmatrix", "shfl.sync", "cp.async",
                 "bank", "race", "fa2, kernel1, v5, v6", "SASS opcodes", "GPU and date"):
        assert word in para, word


# ----------------------------------------------------------------------------------------------------
# README examples
# ----------------------------------------------------------------------------------------------------


def _commands(marker: str) -> list[list[str]]:
    """The shell commands of the README's code block that holds ``marker`` (comments dropped)."""
    blocks, current = [], None
    for line in README.splitlines():
        if line.startswith("```"):
            current = [] if current is None else blocks.append(current)
        elif current is not None:
            current.append(line)
    block = next(b for b in blocks if any(marker in ln for ln in b))
    return [shlex.split(ln.split("  #", 1)[0]) for ln in block if ln.startswith("flashsim ")]


def test_readme_ldmatrix_example_shows_what_the_text_says(capsys):
    cmds = [c for c in _commands("flashsim ldmatrix") if c[1] == "ldmatrix"]
    assert len(cmds) == 2
    assert main(cmds[0][1:]) == 0
    out = capsys.readouterr().out
    assert "units of 2 bytes" in out and "total: 32 wavefronts, ideal 4, 28 bank conflicts" in out
    assert "`total: 32 wavefronts, ideal 4, 28 bank conflicts`" in README and "--elem-bytes" in README
    assert main(cmds[1][1:]) == 0
    assert "total: 4 wavefronts, ideal 4, 0 bank conflicts" in capsys.readouterr().out
    assert "4 wavefronts, 0 conflicts" in README


def test_readme_trace_example_runs_on_the_cpu(tmp_path, monkeypatch, capsys):
    cmds = _commands("flashsim trace diff traces/warp/v5_d32.fstrace")
    assert [c[1:3] for c in cmds] == [["trace", "record"], ["trace", "diff"]]
    assert "--backend" in cmds[0] and cmds[0][cmds[0].index("--backend") + 1] == "sim"
    monkeypatch.chdir(tmp_path)
    os.symlink(ROOT / "traces", tmp_path / "traces")
    assert main(cmds[0][1:]) == 0
    capsys.readouterr()
    assert main(cmds[1][1:]) == 0
    assert "no divergence" in capsys.readouterr().out


def test_readme_debugging_commands_run_on_the_cpu(tmp_path, monkeypatch, capsys):
    """Every command of the README's 'Debugging without a GPU' block runs as written (exit 0, output)."""
    cmds = _commands("flashsim fragment mma.m16n8k16")
    assert [c[1] for c in cmds] == ["fragment", "ldmatrix", "ldmatrix", "banks", "layout", "pipeline", "pipeline"]
    monkeypatch.chdir(tmp_path)
    for c in cmds:
        assert main(c[1:]) == 0, c
        assert capsys.readouterr().out.strip(), c
    assert (tmp_path / "a.svg").stat().st_size > 0


def test_readme_trace_commands_on_your_own_runs(tmp_path, monkeypatch, capsys):
    """The README's trace commands 'on your own runs': every one that needs no GPU recording runs as written
    (record in the simulator, replay of a committed H100 trace, show, html); the two that read gpu.fstrace
    (a GPU recording) run here on the simulator's own file in its place."""
    cmds = _commands("flashsim trace record --kernel fa2")
    assert [c[2] for c in cmds] == ["record", "diff", "replay", "replay", "show", "html"]
    monkeypatch.chdir(tmp_path)
    os.symlink(ROOT / "traces", tmp_path / "traces")
    for c in cmds:
        argv = [("sim.fstrace" if a == "gpu.fstrace" else a) for a in c[1:]]
        rc = main(argv)
        out = capsys.readouterr().out
        assert rc == 0, (c, out[-2000:])
    assert (tmp_path / "run.html").stat().st_size > 0


def test_the_top_level_summary_matches_the_commands_and_imports_none_of_them():
    from flashsim.cli import COMMANDS, summary_parser

    full = {c.dest: c.help for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
            for c in a._choices_actions}
    light = {c.dest: c.help for a in summary_parser()._actions if isinstance(a, argparse._SubParsersAction)
             for c in a._choices_actions}
    assert light == full and [n for n, _ in COMMANDS] == list(full)
    assert summary_parser().format_help() == build_parser().format_help()
    import subprocess
    import sys

    code = ("import sys\nfrom flashsim.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('numpy', 'numba', 'flashsim.sass.opcodes', 'flashsim.check') if m in sys.modules)\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("flashsim ")
    assert "HEAVY []" in out, out
