"""synccheck in the interpreter (CPU only): every planted kernel of gpu/kernels/synccheck_planted.cu run inside
``flashsim.cuda.checking(synccheck=True)`` gives the findings (kind, rule, warp, lanes, source line) the table
below says, the controls are clean, synccheck changes nothing a kernel computes, the decision points switch
what they say they switch, the report's text / JSON / HTML carry the findings, ``flashsim run`` prints them
with their line, the CTA batches of a cluster's workers give the one-process findings; plus
gpu/synccheck_cases.py: compute-sanitizer's output parsed, and the runner end to end with a stand-in tool."""

from __future__ import annotations

import json
import stat
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.cli import main
from flashsim.errors import ArgumentError, SimulatedFault
from flashsim.gpu import synccheck_cases as S
from flashsim.sass import synccheck as sc
from flashsim.sass.machine import BarrierDeadlock

B, W, A = sc.K_BLOCK, sc.K_WARP, sc.K_ARGS

# case -> (how the launch ends, [(kind, rule, warp, lanes, markers the finding's lines include)]), with the
# decision points as flashsim.sass.synccheck sets them
EXPECT = {
    "ctrl": ("completes", []),
    "div_block_exit": ("completes", []),
    "two_sites": ("completes", [(B, sc.R_SITES, 1, "0-31", {"two_sites_first", "two_sites_second"})]),
    "div_warp_32": ("completes", [(W, sc.R_ELSEWHERE, 0, "16-31", {"div_warp"})]),
    "div_warp_64": ("completes", [(W, sc.R_ELSEWHERE, 0, "16-31", {"div_warp"})]),
    "early_return_warp": ("completes", []),
    "early_return_half": ("completes", []),
    "bar64_ctrl": ("completes", []),
    "bar64_excess": ("deadlock", []),
    "bar64_short": ("deadlock", [(A, sc.R_COUNT_CTA, 0, "0-31", {"bar_sync_64"})]),
    "bar_n48": ("faults", []),
    "syncwarp_exited": ("completes", []),
    "syncwarp_exited_nop": ("completes", []),
    "syncwarp_not_in_mask": ("faults", [(A, sc.R_NOT_IN_MASK, 0, "16-31", {"syncwarp_not_in_mask"})]),
    "syncwarp_sample": ("faults", [(A, sc.R_NOT_IN_MASK, 0, "16", {"syncwarp_sample"})]),
    "syncwarp_split_ctrl": ("completes", []),
    "syncwarp_mixed_masks": ("completes", []),
    "cg_sync": ("completes", []),
    "sync_count": ("completes", []),
    "sync_and": ("completes", []),
    "sync_or": ("completes", []),
}
RECORDED = Path(__file__).resolve().parent.parent / "traces" / "synccheck" / "synccheck_cases.json"


@pytest.fixture(scope="module")
def module():
    return S.compile_module()


@pytest.fixture(scope="module")
def marks():
    return S.markers()


def launch(module, case, **checking):
    """``case`` in the interpreter inside checking (synccheck on unless told): (report, status, out)."""
    out = fc.zeros((S.out_words(case),), np.int32)
    args = (out,) + tuple(np.int32(v) for v in case.args)
    opts = dict(banks=False, synccheck=True)
    opts.update(checking)
    status = "completes"
    with fc.checking(**opts) as rep:
        try:
            module.get_function(case.kernel)((1,), (case.block,), args)
        except BarrierDeadlock:
            status = "deadlock"
        except SimulatedFault as exc:
            assert exc.kind == "illegal instruction", exc
            status = "faults"
    return rep, status, out.get()


def summary(rep) -> list[tuple]:
    return sorted((f.kind, f.reason, f.access.warp, sc.ranges(f.lanes)) for f in rep.sync_findings)


def kernel_lines(f) -> set[int]:
    return {ln for fn, ln in f.lines if fn.replace("\\", "/").endswith(S.REL_PATH)}


# ------------------------------------------------------------------------------------------------ the table


def test_every_case_has_a_kernel_a_marker_and_an_expectation(module, marks):
    assert set(EXPECT) == set(S.CASE_BY_NAME)
    for c in S.CASES:
        assert c.kernel in module.kernels, c.name
        assert c.marker in marks, c.name
        assert c.plain in ("completes", "hangs", "faults") and c.sanitizer, c.name
        assert all(k in (B, W, A, S.CLEAN, S.HANG, S.FAULT) for k in c.sanitizer), c.name
    assert set(module.kernels) == {c.kernel for c in S.CASES}  # every planted kernel is a case


@pytest.mark.parametrize("case", S.CASES, ids=lambda c: c.name)
def test_each_planted_case_gives_its_findings(module, marks, case):
    status, want = EXPECT[case.name]
    rep, got_status, _ = launch(module, case)
    assert got_status == status
    assert summary(rep) == sorted((k, r, w, lanes) for k, r, w, lanes, _ in want), [str(f) for f in rep.sync_findings]
    assert rep.sync_count == len(want) and rep.clean == (not want)
    by = {(f.kind, f.reason, f.access.warp): f for f in rep.sync_findings}
    for kind, reason, warp, lanes, on in want:
        f = by[(kind, reason, warp)]
        assert {marks[m] for m in on} <= kernel_lines(f), (f, on)
        assert f.access.cta == 0 and f.access.pc in module.get_function(case.kernel)._prog().instructions
        assert f.access.lane == f.lanes[0] and f.threads == tuple(32 * warp + x for x in f.lanes)
        opcode = f.access.sass.split()[1] if f.access.sass.startswith("@") else f.access.sass.split()[0]
        assert opcode.startswith("BAR" if f.barrier >= 0 else "WARPSYNC"), f.access.sass


def test_the_findings_name_what_the_gpu_tool_names(module, marks):
    """The message says where the others were; a finding's sites carry their own lines."""
    rep, _, _ = launch(module, S.CASE_BY_NAME["two_sites"])
    f = next(f for f in rep.sync_findings if f.reason == sc.R_SITES)
    assert f.access.line == marks["two_sites_second"] and [s.line for s in f.sites] == [marks["two_sites_first"]]
    assert "warp=0 at pc=0x" in f.message and "two barrier instructions" in f.message
    rep, _, _ = launch(module, S.CASE_BY_NAME["div_warp_32"])
    (f,) = rep.sync_findings
    assert f.arrived == tuple(range(16)) and f.lanes == tuple(range(16, 32))
    assert "the same instruction with their guard false" in f.message and f.access.sass.startswith("@")
    rep, _, _ = launch(module, S.CASE_BY_NAME["syncwarp_not_in_mask"])
    assert "executed by lanes=0-31: lanes=16-31 not in it" in rep.sync_findings[0].message


def test_the_h200_verdicts_recorded_agree_with_flashsim_now(module):
    """traces/synccheck: compute-sanitizer's verdict and the plain H200 run of every case, against the
    interpreter as it is: the same kinds, and completes / hangs / faults as the GPU did, with the same ``out``."""
    doc = json.loads(RECORDED.read_text())
    rows = {r["case"]: r for r in doc["cases"]}
    assert set(rows) == set(S.CASE_BY_NAME)
    for name, case in S.CASE_BY_NAME.items():
        r = rows[name]
        sim = S.interpret(module, case)
        kinds = S.sanitizer_kinds(r["sanitizer"])
        plain = r["plain"]["outcome"]
        if kinds is not None:
            assert sorted(kinds) == sim["kinds"], (name, kinds, sim["kinds"])
            assert sorted(kinds) == sorted(k for k in case.sanitizer if k not in (S.CLEAN,)), name
        want = {"completes": "completes", "hangs": "deadlock"}.get(plain, "faults")
        if want == "faults":
            assert "cudaErrorIllegalInstruction" in plain and case.plain == "faults", (name, plain)
        assert sim["status"] == want, (name, plain, sim["status"], sim["error"])
        if want == "completes":
            assert sim["out"] == r["plain"]["out"], name


def test_synccheck_changes_nothing_a_kernel_computes(module):
    for case in S.CASES:
        runs = [launch(module, case, synccheck=on) for on in (True, False)]
        assert runs[0][1] == runs[1][1], case.name
        np.testing.assert_array_equal(runs[0][2], runs[1][2], err_msg=case.name)
        assert not runs[1][0].sync_findings and runs[1][0].to_dict()["synccheck"] is None
    with pytest.raises(BarrierDeadlock, match="barrier can never complete"):  # outside checking too
        module.get_function("bar_sync_64")((1,), (32,), (fc.zeros((128,), np.int32),))


def test_a_deadlocked_cta_barrier_names_the_warps_that_never_came():
    mod = fc.RawModule(code=r"""
extern "C" __global__ void stuck(int* out, int n) {
    if (threadIdx.x < n) { __syncthreads(); out[threadIdx.x] = 1; }
    else asm volatile("bar.sync 1, 64;");   // warp 1 waits at another barrier
}""", name="stuck.cu")
    with fc.checking(banks=False, synccheck=True) as rep:
        with pytest.raises(BarrierDeadlock):
            mod.get_function("stuck")((1,), (64,), (fc.zeros((64,), np.int32), np.int32(32)))
    f = next(f for f in rep.sync_findings if f.reason == sc.R_NEVER)
    assert (f.kind, f.access.warp, f.lanes) == (B, 1, tuple(range(32)))
    assert "(waiting at a barrier)" in f.message and "BAR.SYNC" in f.access.sass


# ------------------------------------------------------------------------------------------------ decision points


def test_exited_threads_decision_point(module, monkeypatch):
    case = S.CASE_BY_NAME
    monkeypatch.setattr(sc, "EXITED_THREADS", "always")
    assert summary(launch(module, case["early_return_warp"])[0]) == [(B, sc.R_EXITED, 1, "0-31")]
    assert summary(launch(module, case["early_return_half"])[0]) == [(W, sc.R_EXITED, 1, "16-31")]
    assert summary(launch(module, case["div_block_exit"])[0]) == [(B, sc.R_EXITED, 1, "0-31")]
    monkeypatch.setattr(sc, "EXITED_THREADS", "during")
    assert not launch(module, case["early_return_warp"])[0].sync_findings
    assert summary(launch(module, case["div_block_exit"])[0]) == [(B, sc.R_EXITED, 1, "0-31")]
    assert summary(launch(module, case["div_warp_64"])[0]) == [(B, sc.R_EXITED, 1, "0-31"),
                                                              (W, sc.R_ELSEWHERE, 0, "16-31")]
    monkeypatch.setattr(sc, "EXITED_THREADS", "sometimes")
    with pytest.raises(ValueError, match="EXITED_THREADS='sometimes': expected one of"):
        launch(module, case["ctrl"])


def test_warpsync_exited_lanes_decision_point(module, marks, monkeypatch):
    monkeypatch.setattr(sc, "WARPSYNC_EXITED_LANES", True)
    rep, status, _ = launch(module, S.CASE_BY_NAME["syncwarp_exited"])
    assert status == "completes" and summary(rep) == [(A, sc.R_MASK_EXITED, 0, "16-31")]
    assert kernel_lines(rep.sync_findings[0]) == {marks["syncwarp_exited"]}
    assert "WARPSYNC" in rep.sync_findings[0].access.sass
    # ptxas made the converged __syncwarp a NOP: nothing there to check
    assert not launch(module, S.CASE_BY_NAME["syncwarp_exited_nop"])[0].sync_findings


# ------------------------------------------------------------------------------------------------ the report


def test_report_text_json_html(module, marks):
    rep, _, _ = launch(module, S.CASE_BY_NAME["two_sites"])
    text = rep.text()
    assert "synccheck: 1 finding at 1 instruction:" in text
    assert "divergent block (different barrier instructions) at pc=0x" in text
    assert f"synccheck_planted.cu:{marks['two_sites_second']}" in text
    d = json.loads(rep.to_json())
    assert d["sync_count"] == 1 and {x["kind"] for x in d["synccheck"]} == {B}
    assert all(x["access"]["line"] == marks["two_sites_second"] for x in d["synccheck"])
    page = rep.html()
    assert "Barrier misuse (synccheck): 1" in page and "different barrier instructions" in page
    assert [len(g) for g in rep.sync_groups()] == [1]
    with pytest.raises(ArgumentError, match=r"synccheck='yes': expected a bool"):
        with fc.checking(synccheck="yes"):
            pass


def test_findings_are_counted_past_max_records(module):
    case = S.CASE_BY_NAME["two_sites"]
    out = fc.zeros((S.out_words(case) * 6,), np.int32)
    with fc.checking(banks=False, synccheck=True, max_records=2) as rep:
        module.get_function(case.kernel)((6,), (case.block,), (out, np.int32(32)))
    assert rep.sync_count == 6 and len(rep.sync_findings) == 2  # one per CTA, two listed
    assert [f.access.cta for f in rep.sync_findings] == [0, 1]


# ------------------------------------------------------------------------------------------------ flashsim run


def test_flashsim_run_reports_a_divergent_syncthreads_with_its_line(capsys, marks, tmp_path):
    argv = ["run", S.source_path(), "--kernel", "sync_div_block_two_sites", "--grid", "1", "--block", "64",
            "--arg", "out=i32[256]:zeros", "--arg", "n=i32:32", "--no-banks"]
    rc = main([*map(str, argv), "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert rc == 1, err
    section = out.split("barriers (synccheck): ")[1]
    assert section.startswith("1 finding, at 1 instruction:")
    line = marks["two_sites_second"]
    assert f"divergent block (different barrier instructions), 1x: synccheck_planted.cu:{line}  pc=0x" in section
    assert "__syncthreads();  // SYNC:two_sites_second" in section and "ctas 0, warps 1, lanes 0-31" in section
    assert out.rstrip().splitlines()[-2] == "found: 1 barrier misuse finding(s)"
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["sync_count"] == 1 and doc["synccheck"][0]["access"]["line"] == line
    assert doc["run"]["exit_status"] == 1
    rc = main([*map(str, argv), "--no-synccheck"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "barriers (synccheck): not checked (--no-synccheck)" in out
    rc = main([*map(str, argv[:3]), "sync_ctrl", *map(str, argv[4:10]), "--no-banks"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "barriers (synccheck): no misuse" in out


# ------------------------------------------------------------------------------------------------ a cluster


def test_batches_on_a_cluster_give_the_one_process_findings(module):
    pytest.importorskip("distributed")
    from flashsim.cluster import Cluster

    f = module.get_function("sync_div_block_two_sites")
    res = []
    with Cluster(workers=2) as cl:
        for where in (None, cl):
            with fc.checking(banks=False, synccheck=True) as rep:
                f((8,), (64,), (fc.zeros((256 * 8,), np.int32), np.int32(32)),
                  exec_options=fc.ExecOptions(ctas_per_batch=2, cluster=where))
            res.append(rep.to_dict()["synccheck"])
    assert res[0] == res[1] and [x["access"]["cta"] for x in res[1]] == list(range(8))


# ------------------------------------------------------------------------------------------------ the GPU script


SANITIZER_TEXT = """========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in block
=========     at sync_div_block_exit+0xd0 in /home/u/flashsim/gpu/kernels/synccheck_planted.cu:32
=========     by thread (0,0,0) in block (0,0,0)
=========
========= Barrier error detected. Invalid arguments
=========     at syncwarp_sample+0x140 in synccheck_planted.cu:139
=========     by thread (16,0,0) in block (3,0,0)
=========
========= Barrier error detected. Missing wait.
=========     at k+0x10
=========
========= ERROR SUMMARY: 5 errors
========= ERROR SUMMARY: 2 errors were not printed. Use --print-limit option to adjust the number of printed errors
"""


def test_sanitizer_output_is_parsed():
    p = S.parse_synccheck(SANITIZER_TEXT)
    assert p["errors"] == 5 and len(p["records"]) == 3
    r0, r1, r2 = p["records"]
    assert (r0["kind"], r0["pc"], r0["file"], r0["line"], r0["thread"], r0["block"]) == (
        B, 0xD0, "synccheck_planted.cu", 32, [0, 0, 0], [0, 0, 0])
    assert (r1["kind"], r1["line"], r1["thread"], r1["block"]) == (A, 139, [16, 0, 0], [3, 0, 0])
    assert r2["kind"] == "other: Missing wait." and r2["pc"] == 0x10
    assert S.kind_of("Divergent thread(s) in warp") == W
    assert S.parse_synccheck("========= ERROR SUMMARY: 0 errors\n") == {"errors": 0, "records": [], "kinds": []}
    run = {"hung": False, "launched": True, "parsed": S.parse_synccheck("ERROR SUMMARY: 0 errors")}
    assert S.sanitizer_verdict(run) == "clean" and S.sanitizer_kinds(run) == []
    assert S.sanitizer_verdict({"hung": True, "launched": True, "parsed": S.parse_synccheck("")}) == "hang"
    run = {"hung": True, "launched": True, "parsed": S.parse_synccheck(SANITIZER_TEXT)}
    assert S.sanitizer_verdict(run).endswith("(hung)")


def test_dry_run_writes_the_table(tmp_path, capsys):
    rc = S.main(["--out", str(tmp_path), "--dry-run"])
    assert rc == 0
    doc = json.loads((tmp_path / "synccheck_cases.json").read_text())
    rows = {r["case"]: r for r in doc["cases"]}
    assert set(rows) == set(S.CASE_BY_NAME)
    for name, (status, want) in EXPECT.items():
        assert rows[name]["flashsim"]["status"] == status, name
        assert rows[name]["flashsim"]["kinds"] == sorted({k for k, *_ in want}), name
    assert rows["two_sites"]["flashsim_verdict"] == B and rows["bar64_short"]["flashsim_verdict"].endswith(
        "(deadlock)")
    md = (tmp_path / "synccheck_cases.md").read_text()
    assert "| div_block_exit | " in md and "EXITED_THREADS" in md and "WARPSYNC_EXITED_LANES" in md
    assert (tmp_path / "synccheck_planted.cubin").read_bytes()[:4] == b"\x7fELF"


def _fake_tool(tmp_path, body: str, name: str = "fake-sanitizer"):
    """A stand-in for compute-sanitizer: prints ``body``'s text per case, and the child's line saying it ran."""
    path = tmp_path / name
    mark = f'echo "{S.RESULT_MARK} {{\\"status\\": \\"done\\", \\"out\\": []}}"\n'
    path.write_text("#!/bin/sh\n" + mark + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in tool is a shell script")
def test_runner_with_a_stand_in_tool(tmp_path, module, marks, monkeypatch):
    line = marks["div_block_exit"]
    body = f"""\
        case "$*" in
        *"--launch div_block_exit "*)
            echo "========= Barrier error detected. Divergent thread(s) in block"
            echo "=========     at sync_div_block_exit+0xd0 in synccheck_planted.cu:{line}"
            echo "=========     by thread (32,0,0) in block (0,0,0)"
            echo "========= ERROR SUMMARY: 1 error" ;;
        *"--launch early_return_warp "*)
            echo "========= Barrier error detected. Divergent thread(s) in block"
            echo "=========     at sync_early_return+0x90 in synccheck_planted.cu:{marks['early_return']}"
            echo "========= ERROR SUMMARY: 1 error" ;;
        *"--launch bar64_short "*)
            sleep 30 ;;
        *)
            echo "========= ERROR SUMMARY: 0 errors" ;;
        esac
        """
    tool = _fake_tool(tmp_path, body)
    # the plain runs: a stand-in child (no GPU here) that completes with the interpreter's out, or hangs
    sims = {c: launch(module, S.CASE_BY_NAME[c])[2].tolist() for c in ("ctrl", "div_block_exit")}

    def child(case, cubin):  # the tool matches the case by its --launch argument, which python -c ignores
        tail = ["--launch", case.name, "--cubin", str(cubin)]
        if case.name == "bar64_short":
            return [sys.executable, "-c", "import time; time.sleep(30)", *tail]
        line = S.RESULT_MARK + " " + json.dumps({"status": "done", "out": sims.get(case.name, [])})
        return [sys.executable, "-c", f"print({line!r})", *tail]

    monkeypatch.setattr(S, "child_command", child)
    t0 = time.monotonic()
    rc = S.main(["--out", str(tmp_path / "o"), "--sanitizer", str(tool), "--timeout", "2", "--jobs", "4",
                 "--cases", "ctrl,div_block_exit,early_return_warp,early_return_half,bar64_short"])
    assert time.monotonic() - t0 < 30
    doc = json.loads((tmp_path / "o" / "synccheck_cases.json").read_text())
    rows = {r["case"]: r for r in doc["cases"]}
    assert rc == 1  # early_return_warp: the stand-in reports what flashsim does not
    assert rows["ctrl"]["status"] == "agree" and rows["ctrl"]["comparison"]["out_same"]
    # the stand-in reports the exiting warp, which the H200's compute-sanitizer does not (and flashsim neither)
    assert rows["div_block_exit"]["status"] == "DIFFER (kinds)"
    assert rows["div_block_exit"]["sanitizer"]["parsed"]["records"][0]["thread"] == [32, 0, 0]
    assert rows["div_block_exit"]["plain"]["outcome"] == "completes"
    assert rows["div_block_exit"]["comparison"]["out_same"]
    assert rows["early_return_warp"]["status"] == "DIFFER (kinds)"
    assert rows["bar64_short"]["status"] == "tool hung" and rows["bar64_short"]["sanitizer"]["hung"]
    assert rows["bar64_short"]["plain"]["outcome"] == "hangs" and rows["bar64_short"]["comparison"]["hang_agree"]
    assert (tmp_path / "o" / "raw" / "div_block_exit.synccheck.txt").read_text().startswith("$ ")
    md = (tmp_path / "o" / "synccheck_cases.md").read_text()
    # the stand-in reported an early return: the reading of EXITED_THREADS that explains it
    assert "the measured verdicts read 'always'" in md
    # a missing tool: every case still gets a row, exit 2
    rc = S.main(["--out", str(tmp_path / "m"), "--sanitizer", str(tmp_path / "no-such-tool"), "--timeout", "2",
                 "--cases", "ctrl"])
    assert rc == 2
    (row,) = json.loads((tmp_path / "m" / "synccheck_cases.json").read_text())["cases"]
    assert row["status"] == "no tool verdict" and "cannot run" in row["sanitizer"]["message"]
