"""The planted protocol bugs of fa4h.cu (gpu/fa4h_mutants.py): each found by the interpreter with its kind and
place, the correct build clean on the same problems."""

import re

import pytest

from flashsim.gpu import fa4h_mutants as FM


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
