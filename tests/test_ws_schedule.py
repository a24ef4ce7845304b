"""fa4h's schedule read from its simulated run (flashsim.kernels.ws_schedule, ``flashsim pipeline``): the
producer's loads are ws_plan's, stage, phase, bytes and waits, over several work tiles of one CTA."""

import ml_dtypes
import numpy as np
import pytest

from flashsim.kernels import ws_schedule as W
from flashsim.errors import ArgumentError


def _qkv(sq, sk, d, dv, heads=1):
    rng = np.random.default_rng(0)
    bf = ml_dtypes.bfloat16
    return (rng.standard_normal((1, sq, heads, d)).astype(bf), rng.standard_normal((1, sk, heads, d)).astype(bf),
            rng.standard_normal((1, sk, heads, dv)).astype(bf))


def test_the_uneven_stages_of_the_seed_over_two_work_tiles():
    ev, args, inst, _, _ = W.simulate(*_qkv(256, 384, 192, 128), ctas=1)
    run = W.loads(ev, 0)
    assert W.check_loads(run, args, inst, 0, 1) == []
    assert [ld.tile for ld in run[:8]] == ["Q0", "K2", "Q1", "V2", "K1", "V1", "K0", "V0"]
    # [K, V, K] in the even round, [V, K, V] in the odd one: stage 1 moves by 8 KiB either way
    assert [ld.region for ld in run if ld.buffer == "kv"][:6] == [(0, 49152), (49152, 81920), (81920, 131072),
                                                                 (0, 32768), (32768, 81920), (81920, 114688)]
    assert ("kv_empty[1]", 1) in run[1].waits  # the extra wait before K into stage 0
    # the second tile: K/V phases carry on (rounds 2 and 3), Q's flip once
    assert [(ld.barrier, ld.phase) for ld in run[8:11]] == [("q_full[0]", 1), ("kv_full[0]", 2), ("q_full[1]", 1)]
    table = W.format_loads(run)
    assert "[Q0, Q1, V1, K0, V0]" in table and "DIFF" not in table
    steps = W.consumer_events(ev, 0)
    assert {(c, what) for _, c, what, _, _ in steps} >= {(0, "waited"), (1, "released"), (1, "turn")}


def test_a_causal_launch_on_two_ctas_with_a_plan_per_cta():
    ev, args, inst, _, _ = W.simulate(*_qkv(300, 300, 64, 64, heads=2), ctas=2, causal=True)
    for cta in (0, 1):
        run = W.loads(ev, cta)
        assert run and W.check_loads(run, args, inst, cta, 2) == []


def test_a_run_that_loads_otherwise_is_reported():
    ev, args, inst, _, _ = W.simulate(*_qkv(128, 384, 128, 128), ctas=1)
    run = W.loads(ev, 0)
    run[4].region = (run[4].region[0] + 8192, run[4].region[1] + 8192)
    msgs = W.check_loads(run, args, inst, 0, 1)
    assert len(msgs) == 1 and msgs[0].startswith("load 5 (K1): region (73728, 106496) (plan: (65536, 98304))")
    assert "DIFF" in W.format_loads(run)


def test_the_command_prints_the_table_and_checks_its_arguments(capsys):
    from flashsim.cli import main

    assert main(["pipeline", "--headdim", "192", "--seqlen-q", "128", "--seqlen-k", "384", "--consumers"]) == 0
    out = capsys.readouterr().out
    assert "[Q0, Q1, K2, V2, K1]" in out and "8 loads; every one as planned" in out and "order bar 1" in out
    with pytest.raises(ArgumentError, match=r"^--cta=3: expected 0\.\.1"):
        from flashsim.cli.pipeline import cmd_pipeline
        import argparse

        cmd_pipeline(argparse.Namespace(cta=3, ctas=2, headdim=64, seqlen_q=64, seqlen_k=64, heads=1, batch=1,
                                        causal=False, dtype="bfloat16", consumers=False))
