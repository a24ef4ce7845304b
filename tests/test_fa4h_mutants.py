"""The planted protocol bugs of fa4h.cu (gpu/fa4h_mutants.py): each found by the interpreter with its kind and
place, the correct build clean on the same problems."""

import json
import re

import pytest

from flashsim.gpu import fa4h_mutants as FM
from flashsim.gpu import validate_fa4h_mutants as VM

GPU_RECORD = FM.SOURCE.parent.parent.parent / "traces" / "fa4h" / "fa4h_mutants_gpu.json"


def test_every_mutant_is_marked_once_in_the_source_and_every_marker_it_cites_exists():
    text = FM.SOURCE.read_text()
    for m in FM.MUTANTS:
        assert len(re.findall(rf"// MUTANT {m.n}\b", text)) == 1, m.n
        assert re.search(rf"^//\s+{m.n}\s+\S", text, re.M), m.n  # the header describes it
        for name in re.findall(r"@(\w+)", " ".join(m.evidence)):
            FM.marker_line(name)
    assert {m.n for m in FM.MUTANTS} == set(range(1, 13))


@pytest.mark.parametrize("problem", sorted(FM.PROBLEMS))
def test_the_correct_kernel_reports_nothing(problem):
    assert FM.run(0, problem) == ("none", "")


@pytest.mark.parametrize("m", FM.MUTANTS, ids=lambda m: f"FH_MUTANT={m.n}")
def test_each_mutant_is_found_with_its_kind_and_place(m):
    r = FM.judge(m, schedules=0)
    assert r["kind"] == m.kind and r["found"], (r["kind"], r["missing"], r["report"][:2000])


# ---------------------------------------------------------------------------------- on the H100, under the tools
@pytest.fixture(scope="module")
def gpu_record():
    return json.loads(GPU_RECORD.read_text())


def test_the_h100_ran_the_recorded_cubin_and_a_build_of_every_mutant(gpu_record):
    """The correct build the H100 ran under the tools is the cubin validate_fa4h recorded (and the interpreter
    replays); every mutant has its own build. (A build's bytes also hold the checkout's include folder in the line
    table, so builds are compared by the records, not rebuilt here.)"""
    from flashsim.gpu import validate_fa4h as V

    assert gpu_record["device"]["name"].startswith("NVIDIA H100")
    assert set(gpu_record["mutants"]) == {str(m.n) for m in FM.MUTANTS}
    assert gpu_record["builds"]["fh0"]["sha256"] == json.loads(V.RECORD.read_text())["cubin_sha256"]
    shas = [gpu_record["builds"][f"fh{n}"]["sha256"] for n in range(len(FM.MUTANTS) + 1)]
    assert len(set(shas)) == len(shas)


def test_the_correct_build_on_the_h100_equals_the_twin_and_the_tools_are_silent(gpu_record):
    assert gpu_record["ok"]
    for problem in FM.PROBLEMS:
        e = gpu_record["correct"][problem]
        assert e["gpu"]["status"] == "done" and e["twin"] == {"out_equal": True, "lse_equal": True}
        assert all(e[t]["tool"]["verdict"] == "clean" for t in gpu_record["tools"]), problem


def test_every_mutant_has_a_gpu_outcome_and_a_verdict_or_a_hang_per_tool(gpu_record):
    for n, e in gpu_record["mutants"].items():
        assert e["gpu_outcome"].startswith(("hang", "finishes")), (n, e["gpu_outcome"])
        for t in gpu_record["tools"]:
            assert e[t]["tool"]["verdict"] in ("clean", "report") or e[t]["status"].startswith("hang"), (n, t)


def test_the_table_is_the_records(gpu_record, tmp_path):
    VM.write_table(tmp_path, gpu_record)
    assert (tmp_path / "fa4h_sanitizer_table.md").read_text() == (GPU_RECORD.parent / "fa4h_sanitizer_table.md").read_text()


def test_the_gpu_validator_rejects_bad_arguments(capsys):
    for argv, words in ((["--jobs", "2"], "--out is required"), (["--out", "x", "--jobs", "0"], "--jobs 0"),
                        (["--out", "x", "--mutants", "13"], "no mutant [13]"),
                        (["--out", "x", "--tools", "initcheck2"], "unknown tool 'initcheck2'"),
                        (["--out", "x", "--tool-timeout", "0"], "--tool-timeout 0: expected seconds > 0"),
                        (["--run-one", "1"], "--run-one needs --cubin and --problem")):
        with pytest.raises(SystemExit) as e:
            VM.main(argv)
        assert e.value.code == 2 and words in capsys.readouterr().err, argv
