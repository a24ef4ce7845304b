"""flashsim.cuda.checking on the planted bugs of gpu/kernels/planted.cu (CPU only): every planted race is
reported with both sides on its marked source lines, every control is clean, verdicts and race pairs do not
depend on the schedule, memory bugs fault with PC, SASS and line, initcheck reports what nothing wrote;
plus the parser of compute-sanitizer's output and gpu/check_diagnostics.py end to end (dry run, and a stand-in
tool)."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.errors import SimulatedFault
from flashsim.gpu import check_diagnostics as cd

RACES = [c for c in cd.CASES if c.tool == "racecheck" and c.expected]
CONTROLS = [c for c in cd.CASES if c.tool == "racecheck" and not c.expected]
FAULTS = [c for c in cd.CASES if c.tool == "memcheck" and c.expected]
INITS = [c for c in cd.CASES if c.tool == "initcheck"]
SEEDS = (None, 1, 2, 3)

# cases whose answer once was wrong, kept here for a mark when a new one is found
KNOWN: dict = {}


def _params(cases):
    return [pytest.param(c, id=c.name, marks=KNOWN[c.name]) if c.name in KNOWN else pytest.param(c, id=c.name)
            for c in cases]


@pytest.fixture(scope="module")
def module():
    return cd.compile_module()


@pytest.fixture(scope="module")
def marks():
    return cd.markers()


def launch(module, case, seed=None, **checking):
    """Run ``case`` under checking (races and initcheck on); returns (report, args)."""
    args = cd.RECIPES[case.args](cd.FlashsimArrays())
    opts = dict(banks=False, races=True, initcheck=True, max_records=20000)
    opts.update(checking)
    with fc.checking(**opts) as rep:
        module.get_function(case.kernel)((case.grid,), (case.block,), args, shared_mem=case.shared,
                                         exec_options=fc.ExecOptions(schedule_seed=seed))
    return rep, args


def opcode(sass: str) -> str:
    """The opcode of a SASS line, without its guard predicate (``@!P0 STS ...`` -> ``STS``)."""
    words = sass.split()
    return words[1] if words and words[0].startswith("@") else (words[0] if words else "")


def on_planted_file(access) -> bool:
    return access.file.replace("\\", "/").rsplit("/", 1)[-1] == cd.FILE


# ------------------------------------------------------------------------------------------------ markers


def test_every_case_names_existing_markers_and_kernels(module, marks):
    kernels = set(module.kernels)
    for c in cd.CASES:
        assert c.kernel in kernels, c.name
        if c.side:
            assert c.side in marks, f"{c.name}: no SIDE:{c.side} marker in {cd.FILE}"
    for c in RACES:
        roles = set(marks[c.side])
        assert roles == {"both"} or roles == {"first", "second"}, (c.name, roles)
    assert len(RACES) >= 12 and len(CONTROLS) >= 6
    assert len({c.side for c in RACES}) == len(RACES)  # distinct planted races


def test_markers_parse_roles():
    text = "a;  // SIDE:x:first\nb;\nc; // SIDE:x:second\nd; // SIDE:y:both\n"
    assert cd.markers(text) == {"x": {"first": [1], "second": [3]}, "y": {"both": [4]}}
    assert cd.marked_lines("x", cd.markers(text)) == {1, 3}


# ------------------------------------------------------------------------------------------------ races


@pytest.mark.parametrize("case", _params(RACES))
def test_planted_race_is_reported_with_both_sides_on_the_marked_lines(module, marks, case):
    rep, _ = launch(module, case)
    assert rep.race_count > 0 and rep.race_sites, f"{case.name}: no race reported"
    m = marks[case.side]
    allowed = {ln for v in m.values() for ln in v}
    for r in rep.race_sites:
        for side in (r.first, r.second):
            assert on_planted_file(side), side.file
            assert side.line in allowed, f"{case.name}: {r} has a side off the marked lines {sorted(allowed)}"
            assert side.pc >= 0 and side.sass and side.kernel == case.kernel
        # two different threads of the one CTA
        assert (r.first.warp, r.first.lane) != (r.second.warp, r.second.lane), str(r)
        assert r.first.cta == r.second.cta == 0
        assert r.kind.split()[0] in ("RAW", "WAR", "WAW")
    sides = {(r.first.line, r.second.line) for r in rep.race_sites}
    if "both" in m:
        assert any(a in m["both"] and b in m["both"] for a, b in sides)
    else:
        first, second = set(m["first"]), set(m["second"])
        assert any((a in first and b in second) or (a in second and b in first) for a, b in sides), sides
    assert rep.race_pairs() and all(k == case.kernel for k, _ in rep.race_pairs())


def test_race_sides_name_the_instructions_that_touch_shared_memory(module):
    """The WAW of two warps: both sides are stores of the two warps, the second at the same word."""
    case = cd.CASE_BY_NAME["race_waw"]
    rep, _ = launch(module, case)
    r = rep.race_sites[0]
    assert r.kind == "WAW" and r.first.op == r.second.op == "write"
    assert opcode(r.first.sass) == opcode(r.second.sass) == "STS"
    assert {r.first.warp, r.second.warp} == {0, 1} and r.first.lane == r.second.lane
    assert r.addr >= 0x400  # shared window: after the 1 KiB the driver reserves
    # the cp.async case names the LDGSTS as the writing side
    rep, _ = launch(module, cd.CASE_BY_NAME["race_cp_async_no_barrier"])
    assert any("LDGSTS" in (opcode(s.first.sass)[:6], opcode(s.second.sass)[:6]) for s in rep.race_sites)
    rep, _ = launch(module, cd.CASE_BY_NAME["race_ldmatrix"])
    assert any("LDSM" in (opcode(s.first.sass)[:4], opcode(s.second.sass)[:4]) for s in rep.race_sites)


@pytest.mark.parametrize("case", _params(CONTROLS))
def test_control_is_clean(module, case):
    rep, _ = launch(module, case)
    assert rep.race_count == 0 and not rep.race_sites, "\n".join(str(r) for r in rep.race_sites[:3])
    assert rep.uninit_count == 0, [str(u) for u in rep.uninitialized[:3]]


@pytest.mark.parametrize("case", _params(RACES + [c for c in CONTROLS if c.name != "ctrl_intra_warp_loop_rev"]))
def test_race_verdict_and_pairs_do_not_depend_on_the_schedule(module, case):
    answers = []
    for seed in SEEDS:
        rep, _ = launch(module, case, seed)
        answers.append((rep.race_count > 0, frozenset(rep.race_pairs())))
    assert all(a == answers[0] for a in answers), [(v, len(p)) for v, p in answers]
    assert answers[0][0] == case.expected


def _coop_group_offsets(module, kernel: str) -> list[int]:
    """EIATTR_COOP_GROUP_INSTR_OFFSETS (.nv.info attribute 0x28) of a kernel: where ptxas put warp syncs."""
    return sorted(module.get_function(kernel).info.warp_sync_offsets)


def test_elided_syncwarp_is_listed_in_the_cubin(module, marks):
    """The fact the interpreter uses for ctrl_intra_warp: the __syncwarp() became a NOP, and the cubin names
    that NOP's offset as a warp-sync site (compute-sanitizer reads it); race_intra_warp has none."""
    prog = module.get_function("ctrl_intra_warp")._prog()
    (off,) = _coop_group_offsets(module, "ctrl_intra_warp")
    ins = prog.instructions[off]
    assert ins.text == "NOP"
    before, after = prog.instructions[off - 16], prog.instructions[off + 16]
    assert opcode(before.text) == "STS" and opcode(after.text) == "LDS"
    assert _coop_group_offsets(module, "race_intra_warp") == []
    # in the divergent loop the sync stays a WARPSYNC, listed the same way
    (off,) = _coop_group_offsets(module, "ctrl_intra_warp_loop")
    assert opcode(module.get_function("ctrl_intra_warp_loop")._prog().instructions[off].text) == "WARPSYNC"


# ------------------------------------------------------------------------------------------------ memcheck


@pytest.mark.parametrize("case", _params(FAULTS))
def test_memory_bug_raises_a_located_fault(module, marks, case):
    args = cd.RECIPES[case.args](cd.FlashsimArrays())
    with pytest.raises(SimulatedFault) as info:
        module.get_function(case.kernel)((case.grid,), (case.block,), args, shared_mem=case.shared)
    exc = info.value
    assert exc.kind == case.fault
    assert isinstance(exc.pc, int) and exc.pc >= 0 and exc.sass
    assert exc.line is not None and exc.line[1] in cd.marked_lines(case.side, marks)
    assert exc.line[0].replace("\\", "/").endswith(cd.FILE)
    assert f"pc={exc.pc:#06x}" in str(exc) and f"cta={exc.cta} warp={exc.warp} lane={exc.lane}" in str(exc)
    op = opcode(exc.sass)
    if "global" in case.fault:
        assert op.startswith(("LDG", "STG"))
    else:
        assert op.startswith(("LDS", "STS"))
    t = exc.warp * 32 + exc.lane
    assert 0 <= t < case.block
    if case.name == "mem_oob_read":  # thread t reads in[t + 4]: past the 64 floats for t >= 60
        assert exc.addr == args[0].data.ptr + 4 * (t + 4) and t >= 60
    elif case.name == "mem_oob_write":  # out[t + 3]
        assert exc.addr == args[0].data.ptr + 4 * (t + 3) and t >= 61
    elif case.name == "mem_misaligned_global":
        assert exc.addr % 8 == 4 and exc.addr == args[0].data.ptr + 4 + 8 * t
    elif case.name == "mem_shared_oob":
        assert exc.addr >= 1024 + case.shared
    elif case.name == "mem_shared_misaligned":
        assert exc.addr % 4 == 2


@pytest.mark.parametrize("case", _params(FAULTS))
def test_fault_kind_and_pc_do_not_depend_on_the_schedule(module, case):
    seen = set()
    for seed in SEEDS:
        args = cd.RECIPES[case.args](cd.FlashsimArrays())
        with pytest.raises(SimulatedFault) as info:
            module.get_function(case.kernel)((case.grid,), (case.block,), args, shared_mem=case.shared,
                                             exec_options=fc.ExecOptions(schedule_seed=seed))
        seen.add((info.value.kind, info.value.pc))
    assert len(seen) == 1, seen


def test_memcheck_control_runs_clean(module):
    case = cd.CASE_BY_NAME["ctrl_mem_inbounds"]
    rep, args = launch(module, case)
    assert rep.clean
    np.testing.assert_array_equal(args[1].get()[:60], 2 * cd.FLOATS[4:])


# ------------------------------------------------------------------------------------------------ initcheck


@pytest.mark.parametrize("case", _params(INITS))
def test_initcheck_reports_reads_nothing_wrote(module, marks, case):
    rep, args = launch(module, case)
    if not case.expected:
        assert rep.uninit_count == 0 and not rep.uninitialized, [str(u) for u in rep.uninitialized[:3]]
        return
    assert rep.uninit_count > 0
    assert {u.space for u in rep.uninitialized} == {case.space}
    lines = cd.marked_lines(case.side, marks)
    for u in rep.uninitialized:
        assert u.access.line in lines and on_planted_file(u.access) and u.access.op == "read"
    if case.space == "global":
        base = args[0].data.ptr
        offs = sorted(u.addr - base for u in rep.uninitialized)
        first = 0 if case.name == "init_empty" else 128  # the host wrote the first 32 floats
        assert offs == list(range(first, 256, 4)), offs[:4]
        assert rep.uninit_count == (256 - first) // 4
    else:  # warp 1 reads the words warp 0 did not write
        assert {u.access.warp for u in rep.uninitialized} == {1}
        assert rep.uninit_count == 32
    assert rep.race_count == 0


def test_initcheck_is_off_unless_asked(module):
    rep, _ = launch(module, cd.CASE_BY_NAME["init_empty"], initcheck=False)
    assert rep.uninit_count == 0 and rep.clean


# ------------------------------------------------------------------------------------------------ the script


def test_dry_run_writes_the_report(tmp_path, capsys):
    out = tmp_path / "diag"
    assert cd.main(["--out", str(out), "--dry-run", "--seeds", "1"]) == 0
    md = (out / "diagnostics.md").read_text()
    rows = json.loads((out / "diagnostics.json").read_text())
    assert len(rows) == len(cd.CASES)
    assert (out / "planted.cubin").read_bytes()[:4] == b"\x7fELF"
    for c in cd.CASES:
        assert f"| {c.name}" in md
    by = {r["case"]: r for r in rows}
    for c in cd.CASES:
        r = by[c.name]
        assert r["status"].startswith(("flashsim only", "flashsim error"))
        assert r["sanitizer"] is None
        if c.informational:
            continue
        assert r["flashsim"]["verdict"] == c.expected and r["flashsim"]["stable"], c.name
        if c.tool == "racecheck" and c.expected:
            assert r["flashsim"]["on_marked_lines"] and "both sides" not in r["first"]
            assert " / " in r["first"]  # both sides named
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(cd.CASES) + 1
    assert printed[-1].startswith(f"check_diagnostics: {len(cd.CASES)} cases")


def test_dry_run_exit_status_follows_the_interpreter(tmp_path, monkeypatch):
    """A required case whose expected verdict the interpreter does not give makes the dry run fail."""
    wrong = cd.Case("ctrl_waw_claimed", "race_waw", "racecheck", False, "a race labelled as a control")
    monkeypatch.setattr(cd, "CASES", (wrong,))
    monkeypatch.setitem(cd.CASE_BY_NAME, wrong.name, wrong)
    assert cd.main(["--out", str(tmp_path), "--dry-run", "--seeds", "0"]) == 1
    row = json.loads((tmp_path / "diagnostics.json").read_text())[0]
    assert "differs from the expected answer" in row["status"]


LAUNCHED = """\
case_name=""; prev=""
for a in "$@"; do [ "$prev" = "--launch" ] && case_name="$a"; prev="$a"; done
echo "check_diagnostics: launched $case_name"
"""


def _fake_tool(tmp_path, body: str, *, launched: bool = True, name: str = "fake-sanitizer"):
    """A stand-in for compute-sanitizer: a shell script that prints ``body``'s text per case (and, like the
    child it would start, says that it launched the case)."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + (LAUNCHED if launched else "") + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in tool is a shell script")
def test_tool_results_are_compared_with_the_interpreter(tmp_path, module):
    race, ctrl, mem, init = (cd.CASE_BY_NAME[n] for n in ("race_waw", "ctrl_broadcast", "mem_oob_read", "init_empty"))
    rep, _ = launch(module, race)
    r = rep.race_sites[0]
    a, b = sorted((r.first, r.second), key=lambda s: s.pc)
    try:
        launch(module, mem)
    except SimulatedFault as exc:
        fpc, fline = exc.pc, exc.line[1]
    rep, _ = launch(module, init)
    ipc, iline = rep.uninitialized[0].access.pc, rep.uninitialized[0].access.line
    body = f"""\
        case "$*" in
        *"--launch race_waw "*)
            echo "========= Error: Race reported between Write access at race_waw(const unsigned int *, unsigned int *)+{a.pc:#x} in planted.cu:{a.line}"
            echo "=========     and Write access at race_waw(const unsigned int *, unsigned int *)+{b.pc:#x} in planted.cu:{b.line} [32 hazards]"
            echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)" ;;
        *"--launch ctrl_broadcast "*)
            echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" ;;
        *"--launch mem_oob_read "*)
            echo "========= Invalid __global__ read of size 4 bytes"
            echo "=========     at mem_oob_read(const float *, float *, int)+{fpc:#x} in planted.cu:{fline}"
            echo "=========     by thread (60,0,0) in block (0,0,0)"
            echo "=========     Access at 0x7f0000000100 is out of bounds"
            echo "=========     and is 1 bytes after the nearest allocation at 0x7f0000000000 of size 256 bytes"
            echo "========= ERROR SUMMARY: 5 errors" ;;
        *"--launch init_empty "*)
            echo "========= Uninitialized __global__ memory read of size 4 bytes"
            echo "=========     at init_copy(const float *, float *, int)+{ipc:#x} in planted.cu:{iline}"
            echo "=========     by thread (0,0,0) in block (0,0,0)"
            echo "=========     Address 0x7f0000000000"
            echo "========= ERROR SUMMARY: 64 errors" ;;
        esac
        """
    tool = _fake_tool(tmp_path, body)
    out = tmp_path / "agree"
    rc = cd.main(["--out", str(out), "--sanitizer", str(tool), "--seeds", "0", "--timeout", "60",
                  "--cases", "race_waw,ctrl_broadcast,mem_oob_read,init_empty"])
    rows = {r["case"]: r for r in json.loads((out / "diagnostics.json").read_text())}
    assert rows["race_waw"]["status"] == "agree" and rows["race_waw"]["comparison"]["pcs_covered"]
    assert rows["ctrl_broadcast"]["status"] == "agree"
    assert rows["mem_oob_read"]["status"] == "agree" and rows["mem_oob_read"]["comparison"]["kind_agree"]
    assert rows["mem_oob_read"]["sanitizer"]["reports"][0]["sides"][0]["thread"] == [60, 0, 0]
    assert rows["init_empty"]["status"] == "agree" and rows["init_empty"]["comparison"]["lines_covered"]
    assert rc == 0
    assert (out / "racecheck_race_waw.txt").read_text().startswith("$ ")
    md = (out / "diagnostics.md").read_text()
    assert "| race_waw | " in md and "agree" in md

    # a tool that names a PC none of the interpreter's sides has, and one that misses the race
    body2 = body.replace(f"+{b.pc:#x} in", "+0x7ff0 in").replace(
        "RACECHECK SUMMARY: 0 hazards", "RACECHECK SUMMARY: 2 hazards")
    out2 = tmp_path / "differ"
    rc = cd.main(["--out", str(out2), "--sanitizer", str(_fake_tool(tmp_path, body2)), "--seeds", "0",
                  "--cases", "race_waw,ctrl_broadcast"])
    rows = {r["case"]: r for r in json.loads((out2 / "diagnostics.json").read_text())}
    assert rc == 1
    assert rows["race_waw"]["status"] == "DIFFER (pcs/lines)" and rows["race_waw"]["comparison"]["missing_pcs"] == [0x7ff0]
    assert rows["ctrl_broadcast"]["status"] == "DIFFER (verdict)"


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in tool is a shell script")
def test_missing_tool_or_no_verdict_exits_2(tmp_path, capsys):
    rc = cd.main(["--out", str(tmp_path / "a"), "--sanitizer", str(tmp_path / "no-such-sanitizer"), "--seeds", "0",
                  "--cases", "race_waw"])
    assert rc == 2
    assert "not found" in capsys.readouterr().err
    silent = _fake_tool(tmp_path, 'echo "something went wrong" >&2\nexit 7\n')
    rc = cd.main(["--out", str(tmp_path / "b"), "--sanitizer", str(silent), "--seeds", "0", "--cases", "race_waw"])
    assert rc == 2
    row = json.loads((tmp_path / "b" / "diagnostics.json").read_text())[0]
    assert row["status"] == "no tool verdict" and "something went wrong" in row["sanitizer"]["message"]
    # a summary from a run whose child never launched the kernel is no verdict either
    crashed = _fake_tool(tmp_path, 'echo "Traceback (most recent call last):"\n'
                                   'echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"\n',
                         launched=False, name="crashed")
    rc = cd.main(["--out", str(tmp_path / "c"), "--sanitizer", str(crashed), "--seeds", "0", "--cases", "ctrl_broadcast"])
    assert rc == 2
    row = json.loads((tmp_path / "c" / "diagnostics.json").read_text())[0]
    assert row["sanitizer"]["verdict"] is None and "not launched" in row["sanitizer"]["message"]


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in tool is a shell script")
def test_tool_timeout_and_rejected_option(tmp_path):
    slow = _fake_tool(tmp_path, "sleep 30\n", launched=False, name="slow")
    t0 = time.monotonic()
    rc = cd.main(["--out", str(tmp_path / "a"), "--sanitizer", str(slow), "--seeds", "0", "--timeout", "1",
                  "--cases", "ctrl_broadcast"])
    assert rc == 2 and time.monotonic() - t0 < 20
    row = json.loads((tmp_path / "a" / "diagnostics.json").read_text())[0]
    assert "timed out" in row["sanitizer"]["message"]
    # a tool that does not know --initcheck-address-space: the case runs again without it
    picky = _fake_tool(tmp_path, """\
        case "$*" in
        *--initcheck-address-space*) echo "========= Error: unrecognized option '--initcheck-address-space'"; exit 1 ;;
        esac
        echo "check_diagnostics: launched ctrl_init_shared"
        echo "========= ERROR SUMMARY: 0 errors"
        """, launched=False, name="picky")
    rc = cd.main(["--out", str(tmp_path / "b"), "--sanitizer", str(picky), "--seeds", "0", "--cases", "ctrl_init_shared"])
    assert rc == 0
    text = (tmp_path / "b" / "initcheck_ctrl_init_shared.txt").read_text()
    assert text.count("$ ") == 2 and "unrecognized option" in text


def test_unknown_case_and_bad_options_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="unknown case"):
        cd.main(["--out", str(tmp_path), "--dry-run", "--cases", "nope"])
    with pytest.raises(SystemExit):
        cd.main(["--out", str(tmp_path), "--dry-run", "--seeds", "-1"])
    with pytest.raises(SystemExit):
        cd.main(["--dry-run"])  # no --out
    with pytest.raises(ValueError, match="tool"):
        cd.Case("x", "race_waw", "synccheck", True, "not a compared tool")


# ------------------------------------------------------------------------------------------------ parser


ANALYSIS_NEW = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at ka_race(int *)+0x90 in probe.cu:13
=========     and Read access at ka_race(int *)+0xa0 in probe.cu:14 [2048 hazards]
=========     and Write access at ka_race(int *)+0xb0 in probe.cu:15 [16 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

ANALYSIS_OLD = """\
========= Error: Race reported between Write access at 0x278 in /home/u/hw12/task1.cu:113:MatMulKernel(Matrix, Matrix, Matrix)
=========     and Read access at 0x298 in /home/u/hw12/task1.cu:121:MatMulKernel(Matrix, Matrix, Matrix) [6144 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

HAZARD = """\
========= ERROR: Potential WAW hazard detected at __shared__ 0x0 in block (0,0,0) :
=========     Write Thread (0,0,0) at WAW()+0x2f0 in raceWAW.cu:20
=========     Write Thread (33,0,0) at WAW()+0x300 in raceWAW.cu:21
=========     Current Value : 1, Incoming Value : 2
=========
========= WARNING: Race reported between Write access at WAW()+0x2f0 in raceWAW.cu:20
=========     and Write access at WAW()+0x300 in raceWAW.cu:21 [4 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
"""

MEMCHECK_NEW = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at unaligned_kernel():0x160 in memcheck_demo.cu:6
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f6510c00001 is misaligned
=========
========= Invalid __shared__ read of size 4 bytes
=========     at k(int *)+0x1b0 in demo.cu:9
=========     by thread (31,0,0) in block (2,0,0)
=========     Address 0x4400 is out of bounds
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.
========= ERROR SUMMARY: 3 errors
"""

MEMCHECK_OLD = """\
========= Invalid __global__ read of size 4 bytes
=========     at 0x1b8 in kernel(float *, float *)
=========     by thread (31,0,0) in block (0,0,0)
=========     Address 0x7f7a4e000000 is out of bounds
========= ERROR SUMMARY: 1 error
"""

INITCHECK = """\
========= Uninitialized __global__ memory read of size 4 bytes
=========     at init_copy(const float *, float *, int)+0x90 in gpu/kernels/planted.cu:441
=========     by thread (32,0,0) in block (0,0,0)
=========     Address 0x7f0000000080
=========
========= Uninitialized __shared__ memory read of size 4 bytes
=========     at KernelSharedError()+0x1a0 in uninitialized_shared.cu:7
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x0
=========
========= ERROR SUMMARY: 2 errors
"""


def test_parse_racecheck_analysis_reports():
    res = cd.parse_sanitizer("racecheck", ANALYSIS_NEW)
    assert res.verdict is True and res.errors == 1
    (rep,) = res.reports
    assert rep.kind == "race" and rep.severity == "ERROR"
    assert [(s.access, s.pc, s.file, s.line, s.hazards) for s in rep.sides] == [
        ("write", 0x90, "probe.cu", 13, None), ("read", 0xA0, "probe.cu", 14, 2048), ("write", 0xB0, "probe.cu", 15, 16)]
    assert res.pcs == {0x90, 0xA0, 0xB0} and res.lines == {("probe.cu", 13), ("probe.cu", 14), ("probe.cu", 15)}
    old = cd.parse_sanitizer("racecheck", ANALYSIS_OLD)
    assert old.verdict is True and old.pcs == {0x278, 0x298}
    assert old.lines == {("task1.cu", 113), ("task1.cu", 121)}


def test_parse_racecheck_hazard_reports():
    res = cd.parse_sanitizer("racecheck", HAZARD)
    hz = [r for r in res.reports if r.kind == "hazard"]
    assert len(hz) == 1 and hz[0].problem == "WAW" and hz[0].address == 0 and hz[0].space == "shared"
    assert [(s.access, s.thread, s.pc, s.line) for s in hz[0].sides] == [
        ("write", (0, 0, 0), 0x2F0, 20), ("write", (33, 0, 0), 0x300, 21)]
    assert res.verdict is True and res.errors == 1 and res.threads == {0, 33}
    assert [r.severity for r in res.reports] == ["ERROR", "WARNING"]


def test_parse_racecheck_clean_and_missing_summary():
    clean = cd.parse_sanitizer("racecheck", "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
    assert clean.verdict is False and clean.errors == 0 and not clean.reports
    none = cd.parse_sanitizer("racecheck", "========= Error: Target application terminated before first instrumented "
                                           "API call\n")
    assert none.verdict is None and none.message
    assert cd.parse_sanitizer("racecheck", "========= ERROR SUMMARY: 0 errors\n").verdict is False


def test_parse_memcheck_reports():
    res = cd.parse_sanitizer("memcheck", MEMCHECK_NEW)
    acc = [r for r in res.reports if r.kind == "access"]
    assert res.verdict is True and res.errors == 3 and len(acc) == 2
    g, s = acc
    assert (g.space, g.size, g.problem, g.address) == ("global", 4, "misaligned", 0x7F6510C00001)
    assert (g.sides[0].access, g.sides[0].pc, g.sides[0].file, g.sides[0].line) == ("write", 0x160, "memcheck_demo.cu", 6)
    assert (s.space, s.problem, s.address, s.sides[0].thread, s.sides[0].block) == (
        "shared", "out of bounds", 0x4400, (31, 0, 0), (2, 0, 0))
    old = cd.parse_sanitizer("memcheck", MEMCHECK_OLD)
    assert old.verdict is True and old.pcs == {0x1B8} and old.lines == set()
    assert old.reports[0].problem == "out of bounds"
    clean = cd.parse_sanitizer("memcheck", "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    assert clean.verdict is False and clean.errors == 0
    api_only = cd.parse_sanitizer("memcheck", "========= Program hit cudaErrorInvalidValue on CUDA API call to x.\n"
                                              "========= ERROR SUMMARY: 1 error\n")
    assert api_only.verdict is None


def test_parse_initcheck_reports():
    res = cd.parse_sanitizer("initcheck", INITCHECK)
    assert res.verdict is True and res.errors == 2 and len(res.reports) == 2
    g, s = res.reports
    assert (g.space, g.size, g.address, g.sides[0].pc, g.sides[0].file, g.sides[0].line, g.sides[0].thread) == (
        "global", 4, 0x7F0000000080, 0x90, "planted.cu", 441, (32, 0, 0))
    assert (s.space, s.sides[0].pc, s.sides[0].line) == ("shared", 0x1A0, 7)
    assert cd.parse_sanitizer("initcheck", "========= ERROR SUMMARY: 0 errors\n").verdict is False


@pytest.mark.parametrize("text, want", [
    ("race_waw(const unsigned int *, unsigned int *)+0x120 in planted.cu:234", (0x120, "planted.cu", 234)),
    ("unaligned_kernel():0x160 in memcheck_demo.cu:6", (0x160, "memcheck_demo.cu", 6)),
    ("0x1b8 in kernel(float *, float *)", (0x1B8, "", None)),
    ("0x00000148 in /a/b/track.cu:167:IMGVF_kernel(float**, int)", (0x148, "track.cu", 167)),
    ("k()+0x280 in raceGroupBasic:46 [4 hazards]", (0x280, "raceGroupBasic", 46)),
    ("k()", (None, "", None)),
])
def test_parse_location(text, want):
    assert cd.parse_location(text) == want


def test_launch_child_refuses_unknown_case(capsys):
    assert cd.launch_case("no_such_case", os.devnull) == 2
    assert "no case" in capsys.readouterr().err


class _HostArrays:
    """The recipes' arrays on the host, for flashsim.testing (which copies them to both devices)."""

    def array(self, host):
        return np.ascontiguousarray(host)

    def zeros(self, n, dtype):
        return np.zeros(n, dtype)

    def empty(self, n, dtype):
        return np.zeros(n, dtype)

    def partial(self, n, dtype, host_prefix):
        out = np.zeros(n, dtype)
        out[:len(host_prefix)] = host_prefix
        return out


@pytest.mark.parametrize("case", _params(CONTROLS), ids=lambda c: c.name)
def test_race_free_control_computes_what_the_gpu_computes(module, case):
    """The race-free kernels (barriers, __syncwarp as a NOP and as WARPSYNC R in divergent loops, cp.async
    groups, ldmatrix) give the GPU's outputs bit for bit (under --gpu against the H100, else against its
    stored results in traces/golden/)."""
    from flashsim import testing

    args = cd.RECIPES[case.args](_HostArrays())
    testing.assert_matches_gpu(module, case.kernel, (case.grid,), (case.block,), args, shared_mem=case.shared)
