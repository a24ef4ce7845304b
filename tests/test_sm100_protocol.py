"""The protocol model of seed 004's sm100 kernel (flashsim.kernels.sm100_protocol; NOT verified on hardware: no
sm100 GPU here): clean under the default, adversarial and seeded schedules with one outcome, the seed's load
table and byte map, the TMEM plan, every planted bug found as its catalogue says, the deadlock report, the
errors, ``flashsim pipeline --sm100-model`` and the module's main."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flashsim.errors import ArgumentError
from flashsim.kernels import sm100_protocol as P
from flashsim.sass.machine import BarrierDeadlock, ExecOptions, SchedulePolicy, StepBudgetExceeded
from flashsim.sass.schedules import LAST, explore, same_bits, schedule_options

SOURCE = Path(P.__file__).read_text(encoding="utf-8").splitlines()

#: the seed's table of load steps: occupancy of [Q0, Q1, KV0, KV1, KV2] after each load of a tile (K0: the first K
#: loaded, the rightmost KV block)
SEED_TABLE = [["Q0", "-", "-", "-", "-"], ["Q0", "-", "K0", "-", "-"], ["Q0", "Q1", "K0", "-", "-"],
              ["Q0", "Q1", "K0", "V0", "-"], ["Q0", "Q1", "K0", "V0", "K1"], ["Q0", "Q1", "V1", "V0", "K1"],
              ["Q0", "Q1", "V1", "K2", "K1"], ["Q0", "Q1", "V1", "K2", "V2"]]


def _run(problem: P.Problem, **kw) -> P.ModelRun:
    return P.run_model(problem.config, problem.ctas(), **kw)


# ------------------------------------------------------------------------------------------------ the correct model

@pytest.mark.parametrize("name", sorted(P.PROBLEMS))
def test_the_seeds_protocol_is_clean_under_every_explored_schedule(name):
    prob = P.PROBLEMS[name]
    r = P.explore_model(prob, schedules=100, seed=0)
    assert r["runs"] == 1 + len(P.ROLES) * 3 + 2 + 100  # default; each role first, delayed twice; copies; seeds
    assert r["clean"] == r["runs"] and r["findings_total"] == 0, r["findings"]
    assert r["same_outcome"]


def test_the_explored_problems_cover_the_cases():
    n = {name: [t.n for t in p.tiles] for name, p in P.PROBLEMS.items()}
    assert n["uneven_causal"] == [4, 2] and len(P.PROBLEMS["uneven_causal"].ctas()) == 2  # qk 192: a CTA per tile
    assert n["uneven_one_block"] == [1]
    assert n["even_persistent"] == [3, 3, 3] and len(P.PROBLEMS["even_persistent"].ctas()) == 1
    # causal, walked longest first per head: different block counts, one block, none
    assert n["even_causal_persistent"] == [3, 1, 0, 3, 1, 0]
    assert len(P.PROBLEMS["even_causal_persistent"].ctas()) == 1
    assert P.PROBLEMS["even_s0_s1"].config.s0_s1_barrier


def test_explore_drives_the_model_with_the_interpreters_schedules():
    prob = P.PROBLEMS["uneven_causal"]
    runs = explore(P.launch(prob), schedules=3, seed=7, roles=P.ROLES)
    labels = [label for label, _ in runs]
    assert labels[0] is None and labels[-3:] == [7, 8, 9]
    assert {p.name for p in labels if isinstance(p, SchedulePolicy)} >= {"load first", "mma delayed by 1024 steps",
                                                                       "copies land last"}
    assert same_bits([(label, r.outcome) for label, r in runs])
    order = [[(e[2], e[3], e[7]) for e in r.trace] for _, r in runs]
    assert order[-1] != order[-2] != order[0]  # the seeds interleave the roles differently
    again = P.launch(prob)(schedule_options(8))
    assert [(e[2], e[3], e[7]) for e in again.trace] == order[-2]  # a seed is one schedule


def _landings_while_roles_run(run) -> int:
    """Completions (TMA boxes, MMAs) at a scheduling step of their own, not in a stall (where nothing can run and
    everything in flight completes without a step)."""
    t = run.trace
    return sum(1 for i, e in enumerate(t) if e[3] in ("tma_box_landed", "mma_done") and t[i - 1][0] != e[0])


def test_policies_and_budget_act_as_in_the_interpreter():
    go = P.launch(P.PROBLEMS["even_persistent"])
    first = go(schedule_options(SchedulePolicy("load first", first=(13,))))
    assert [e[2] for e in first.trace[:5]] == ["load"] * 5
    held = go(schedule_options(SchedulePolicy("load delayed", delay=(13,), delay_steps=1024)))
    assert held.trace[0][2] != "load" and held.clean
    at_once = go(schedule_options(SchedulePolicy("copies land at once", copy_delay=0)))
    last = go(schedule_options(SchedulePolicy("copies land last", copy_delay=LAST)))
    assert _landings_while_roles_run(at_once) > 10 and _landings_while_roles_run(last) == 0
    issue = next(e[0] for e in at_once.trace if e[3] == "tma_load")
    assert next(e[0] for e in at_once.trace if e[3] == "tma_box_landed") == issue + 1
    assert at_once.clean and last.clean
    with pytest.raises(StepBudgetExceeded, match="more than 20 scheduling steps"):
        go(ExecOptions(max_steps=20))


# ------------------------------------------------------------------------------------------------ tables

def test_the_load_table_is_the_seeds_with_its_byte_map():
    prob = P.Problem("seed", 192, 256, 384)  # one work tile of 3 KV blocks: the seed's 8 loads
    run = _run(prob)
    assert P.load_occupancy(run) == SEED_TABLE
    assert P.check_loads(run) == []
    table = P.format_loads(run)
    assert "[Q0, Q1, V1, K2, V2]" in table and "DIFF" not in table
    assert P.BANNER not in table  # the banner is the command's, printed once
    kv = [ld for ld in run.loads if ld["buffer"] == "kv"]
    sk = prob.config.smem["sK"][0]
    assert [(ld["region"].lo - sk, ld["region"].hi - sk) for ld in kv] == [
        (0, 49152), (49152, 81920), (81920, 131072), (0, 32768), (32768, 81920), (81920, 114688)]
    assert [ld["expect_tx"] for ld in kv] == [49152, 32768] * 3
    assert ("kv_empty[1]", 1) in kv[0]["waits"]  # the extra wait before K into stage 0


def test_stage_one_alternates_as_the_byte_map_says_over_four_rounds():
    run = _run(P.Problem("long", 192, 256, 768))  # 6 KV blocks: 12 K/V loads, rounds 0..3
    sk = run.config.smem["sK"][0]
    kv = [ld for ld in run.loads if ld["buffer"] == "kv"]
    assert len(kv) == 12 and P.check_loads(run) == []
    want = {0: {0: ("K", 0, 49152), 1: ("V", 49152, 81920), 2: ("K", 81920, 131072)},
            1: {0: ("V", 0, 32768), 1: ("K", 32768, 81920), 2: ("V", 81920, 114688)}}
    for j, ld in enumerate(kv):
        got = (ld["name"], ld["region"].lo - sk, ld["region"].hi - sk)
        assert got == want[(j // 3) % 2][j % 3], (j, got)
        waits = [(f"kv_empty[{ld['stage']}]", ld["phase"])]
        if ld["name"] == "K" and ld["stage"] == 0:  # the extra wait for the bytes stage 1 held the round before
            waits.append(("kv_empty[1]", ld["phase"]))
        assert list(ld["waits"]) == waits, (j, ld["waits"])


def test_even_stages_and_phases_carry_over_between_tiles():
    run = _run(P.PROBLEMS["even_causal_persistent"])  # tiles of 3, 1, 0, 3, 1, 0 blocks in one CTA
    assert P.check_loads(run) == []
    kv = [ld for ld in run.loads if ld["buffer"] == "kv"]
    assert len(kv) == 16 and {(ld["region"].lo - run.config.smem["sK"][0]) % 32768 for ld in kv} == {0}
    q = [(ld["bar"], ld["phase"], ld["fill"]) for ld in run.loads if ld["buffer"] == "q"]
    assert q == [("q_full[0]", 1, 0), ("q_full[1]", 1, 0), ("q_full[0]", 0, 1), ("q_full[1]", 0, 1),
                 ("q_full[0]", 1, 2), ("q_full[1]", 1, 2), ("q_full[0]", 0, 3), ("q_full[1]", 0, 3)]


def test_the_tmem_plan_and_the_steps_on_it():
    cfg = P.Sm100Config(192, 128)
    assert (cfg.tmem_s, cfg.tmem_p, cfg.tmem_o, cfg.p_columns, cfg.tmem_total) == ((0, 128), (64, 192), (256, 384),
                                                                                   64, 512)
    plan = P.format_tmem_plan(cfg)
    for cols in ("0..63", "64..127", "128..191", "192..255", "256..383", "384..511"):
        assert re.search(rf"^  {re.escape(cols)} ", plan, re.M), cols
    run = _run(P.Problem("seed", 192, 256, 256))
    cols = {}
    for e in run.trace:
        if e[3] in ("mma_done", "tmem_ld", "tmem_st_done") and e[6] is not None:
            cols.setdefault(e[7].split(",")[0].split("[")[0], set()).add((e[6].lo, e[6].hi))
    assert cols["S0 = Q0 K"] == {(0, 128)} and cols["S1 = Q1 K"] == {(128, 256)}
    assert cols["O0 = P0 V"] == {(256, 384)} and cols["O1 += P1 V"] == {(384, 512)}
    # P0 in S0's upper half, four chunks of 16 columns; the P V k-steps before P_full_2 read 48 of its 64 columns
    assert cols["tcgen05.st P0"] == {(64, 80), (80, 96), (96, 112), (112, 128)}
    progs = P._Programs(cfg, [P.WorkTile(0, 0, 0, 0, 0, 2)], "")
    pv = [op for op in progs.mma() if op.kind == "mma" and op.label.startswith("O0")]
    assert [(r.name, r.lo, r.hi) for op in pv[:2] for r, _ in op.reads if r.name.startswith("P0")] == [
        ("P0 cols 0..47", 64, 112), ("P0 cols 48..63", 112, 128)]
    steps = P.format_tmem_steps(run)
    assert "S0 t0 n=1" in steps and "P1 t0 n=0" in steps and "O1 t0 n>=0" in steps and "wait::st" in steps


def test_the_shared_memory_layouts():
    assert P.Sm100Config(192, 128).smem == {"mbar": (0, 280), "tmem_holding_buf": (280, 4), "sScale": (284, 2048),
                                            "sO": (3072, 0), "sQ": (3072, 98304), "sK": (101376, 131072)}
    even = P.Sm100Config(128, 128)
    assert even.smem["sO"] == (3072, 65536) and even.smem["sQ"] == (68608, 65536)
    assert P.Sm100Config(192, 128).smem_bytes == even.smem_bytes == 232448  # 227 KiB, the per-block limit
    assert P.Sm100Config(192, 128).uneven and not even.uneven and not even.overlap_sO_sQ


# ------------------------------------------------------------------------------------------------ planted bugs

@pytest.mark.parametrize("m", P.MUTANTS, ids=[f"{m.n}-{m.key}" for m in P.MUTANTS])
def test_every_planted_bug_is_found_as_catalogued(m):
    v = P.judge(m, schedules=4)
    assert v["found"], (m, v["kinds"])
    assert v["kind"] == m.kind


def test_the_catalogue_covers_the_seeds_bug_list():
    assert len(P.MUTANTS) >= 10 and [m.n for m in P.MUTANTS] == list(range(1, len(P.MUTANTS) + 1))
    assert {m.kind for m in P.MUTANTS} == {"deadlock", "hazard", "stale"}
    assert len({m.key for m in P.MUTANTS}) == len(P.MUTANTS)
    assert {"offset_no_xor", "offset_sign", "no_extra_wait", "expect_k_for_v", "early_v_release", "early_k_release",
            "arrive_not_commit", "no_wait_st", "half_split", "no_p_full_2", "no_o_full_commit", "no_initial_pfor",
            "no_proxy_fence", "no_wait_group", "s0s1_skip_arrive"} <= {m.key for m in P.MUTANTS}
    for m in P.MUTANTS:  # each key switches something in the programs
        assert "\n".join(SOURCE).count(f'"{m.key}"') >= 2, m.key


def test_a_hazard_names_both_sides_and_the_happens_before_catches_what_the_data_does_not():
    m = P.MUTANTS[2]  # no extra wait on kv_empty[1]: the outcome is the same, the ordering is missing
    go = P.launch(P.MUTANT_PROBLEMS[m.problem], mutant=m.n)
    runs = [(label, go(schedule_options(label))) for label in (None, 0, 1, 2)]
    assert same_bits([(label, r.outcome) for label, r in runs])
    f = [x for x in runs[0][1].findings if x.kind == "hazard"][0]
    assert f.sub == "WAR" and "sK stage" in f.place
    assert re.search(r"tensor core reads .* \(cta=0, tile 0, block 1, step \d+\), then TMA load issued by load "
                     r"writes .* \(cta=0, tile 0, block 0, step \d+\)", f.text)
    racy = P.launch(P.MUTANT_PROBLEMS["uneven"], mutant=13)  # P signalled before tcgen05.wait::st
    assert not same_bits([(label, racy(schedule_options(label)).outcome) for label in (None, 0, 1, 2, 3)])


def test_the_deadlock_report_names_every_blocked_role_and_its_barrier():
    prob = P.MUTANT_PROBLEMS["uneven"]
    with pytest.raises(BarrierDeadlock) as ei:
        P.run_model(prob.config, prob.ctas(), mutant=5)  # K's expect_tx for V
    text = str(ei.value)
    assert text.startswith("sm100 protocol model (not verified on hardware): deadlock at step")
    assert re.search(r"mma \(warp=12\) at 'wait kv_full\[1\] for V\[n=3\]' \(cta=0, tile 0, block 3; "
                     r"flashsim/kernels/sm100_protocol\.py:\d+\): waits on kv_full\[1\] for the phase of parity 0 to "
                     r"complete; kv_full\[1\]: phase 0, 1 of 1 arrivals \(pending 0\), tx-count 16384 bytes", text)
    blocked = {g["role"] for g in ei.value.graph}
    assert blocked == {"softmax0", "softmax1", "correction", "mma", "load", "epilogue"}
    for g in ei.value.graph:  # the line named is the program's wait
        assert "wait" in SOURCE[g["line"] - 1] or "full(" in SOURCE[g["line"] - 1], SOURCE[g["line"] - 1]
        assert g["role"] in text and g["barrier"] in text
    assert ei.value.run.findings[-1].kind == "deadlock"
    with pytest.raises(BarrierDeadlock, match=r"^under the default schedule: sm100 protocol model"):
        explore(P.launch(prob, mutant=5), schedules=1, roles=P.ROLES)


# ------------------------------------------------------------------------------------------------ errors

@pytest.mark.parametrize("call,message", [
    (lambda: P.Sm100Config(64, 64), r"^hdim_qk=\(64, 64\): the sm100 protocol model takes head dims"),
    (lambda: P.Sm100Config(192, 128, persistent="yes"), r"^persistent='yes': expected None"),
    (lambda: P.work_tiles(0, 128), r"^seqlen_q=0: expected a positive int"),
    (lambda: P.run_model(P.Sm100Config(), [[P.WorkTile(0, 0, 0, 0, 0, 1)]], mutant=99),
     r"^mutant=99: expected 0 \(the seed's protocol\) or a planted bug 1\.\.25"),
    (lambda: P.run_model(P.Sm100Config(), [P.WorkTile(0, 0, 0, 0, 0, 1)]), r"^ctas=\[WorkTile"),
    (lambda: P.run_model("192", [[]]), r"^config='192': expected an Sm100Config"),
    (lambda: P.judge(0), r"^mutant=0: expected a planted bug 1\.\.25"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ArgumentError, match=message):
        call()


# ------------------------------------------------------------------------------------------------ the command

def test_the_command_prints_the_model_and_says_it_is_unverified(capsys):
    from flashsim.cli import main

    assert main(["pipeline", "--sm100-model", "--headdim", "192", "--seqlen-k", "384", "--schedules", "3",
                 "--consumers"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(P.BANNER) and "NOT verified on hardware" in out and "gpu/kernels/fa4h.cu" in out
    assert "[Q0, Q1, V1, K2, V2]" in out and "8 loads; every one as planned" in out
    assert "384..511   O1" in out and "tcgen05.st" in out
    assert "no deadlock, no hazard, no stale read" in out
    assert "explored: 24 schedules (the default, 20 adversarial, 3 seeded from seed 0): 24 clean, 0 findings; the " \
           "same outcome under every schedule: yes" in out
    # causal: the seed's LPT scheduler, one work tile per CTA, longest first
    assert main(["pipeline", "--sm100-model", "--headdim", "128", "--seqlen-q", "768", "--causal", "--cta", "1"]) == 0
    out = capsys.readouterr().out
    assert "the TMA loads of cta=1: tile 1 (m_block 1, head 0, batch 0, 1 KV block)" in out and "3 CTA(s)" in out


def test_the_command_runs_a_planted_bug(capsys):
    from flashsim.cli import main

    assert main(["pipeline", "--sm100-model", "--mutant", "3"]) == 0
    out = capsys.readouterr().out
    assert "planted bug 3: no extra wait on kv_empty[1] before K into stage 0" in out
    assert "found as a hazard under the default schedule" in out and "WAR hazard on smem" in out


@pytest.mark.parametrize("argv,message", [
    (["--sm100-model", "--headdim", "64"], "--headdim=64: the sm100 protocol model takes 128 or 192"),
    (["--sm100-model", "--ctas", "2"], "--ctas=2: not with --sm100-model"),
    (["--sm100-model", "--mutant", "26"], "--mutant=26: expected a planted bug 1..25"),
    (["--sm100-model", "--cta", "1"], r"--cta=1: expected 0\.\.0"),
    (["--schedules", "5"], "--schedules=5: only with --sm100-model"),
    (["--mutant", "1"], "--mutant=1: only with --sm100-model"),
    (["--sweep"], "--sweep=True: only with --sm100-model"),
])
def test_the_commands_errors_name_the_option(argv, message, capsys):
    from flashsim.cli import main

    assert main(["pipeline", *argv]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_the_sweep_explores_every_configuration_and_judges_every_bug(capsys, monkeypatch):
    from flashsim.cli import main

    monkeypatch.setattr(P, "MUTANTS", P.MUTANTS[:3])
    assert main(["pipeline", "--sm100-model", "--sweep", "--schedules", "2", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(P.BANNER)
    for name in P.PROBLEMS:
        assert re.search(rf"^{name}: .*\n    23 schedules \(the default, 20 adversarial, 2 seeded from seed 5\): 23 "
                         rf"clean, 0 findings; the same outcome under every schedule: yes \(\d+ scheduling steps",
                         out, re.M), name
    assert len(re.findall(r"^planted bug +\d+ \(.*\): found as a ", out, re.M)) == 3
    assert main(["pipeline", "--sm100-model", "--sweep", "--mutant", "2"]) == 2
    assert "--mutant=2: not with --sweep" in capsys.readouterr().err


def test_every_printed_header_says_unverified():
    doc = P.__doc__
    assert "NOT VERIFIED ON HARDWARE" in doc and "gpu/kernels/fa4h.cu" in doc and "protocol model" in doc
    assert "not verified on hardware" in P.BANNER.lower() and "gpu/kernels/fa4h.cu" in P.BANNER
