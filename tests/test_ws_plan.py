"""The load plan of seed 004's warp-specialised pipeline (flashsim.attention.ws_plan): the seed's table for
qk 192 / v 128, the uneven stage bytes, and the overwrite check that the stage-1 move needs."""

from __future__ import annotations

import pytest

from flashsim.attention.ws_plan import (KVLayout, check_plan, cta_plan, format_plan, load_diffs, load_plan, occupancy,
                                        overwrites)
from flashsim.errors import ArgumentError

#: seed 004's table for qk 192 / v 128 (tiles named by load order): per load the tile, its buffer and stage,
#: and the occupancy of [Q stage 0, Q stage 1, KV stage 0, KV stage 1, KV stage 2] after it
SEED_TABLE = [
    ("Q0", "q0", "Q0 - - - -"), ("K0", "kv0", "Q0 - K0 - -"), ("Q1", "q1", "Q0 Q1 K0 - -"),
    ("V0", "kv1", "Q0 Q1 K0 V0 -"), ("K1", "kv2", "Q0 Q1 K0 V0 K1"), ("V1", "kv0", "Q0 Q1 V1 V0 K1"),
    ("K2", "kv1", "Q0 Q1 V1 K2 K1"), ("V2", "kv2", "Q0 Q1 V1 K2 V2"),
]


def test_the_seed_table_for_qk192_v128():
    table = format_plan(load_plan(3, KVLayout(192, 128)), names="order").splitlines()[1:]
    assert len(table) == len(SEED_TABLE)
    for row, (tile, stage, occ) in zip(table, SEED_TABLE):
        cols = row.split()
        assert cols[1:3] == [tile, stage], row
        assert row.endswith("[" + ", ".join(occ.split()) + "]"), row
    plan = load_plan(3, KVLayout(192, 128))
    # the producer's phase: 1 in the first round of the three stages, 0 in the next (the seed's kv_phase flips)
    assert [ld.phase for ld in plan if ld.buffer == "kv"] == [1, 1, 1, 0, 0, 0]
    assert [ld.expect_tx for ld in plan] == [49152, 49152, 49152, 32768, 49152, 32768, 49152, 32768]


def test_uneven_stages_alternate_large_small_large_and_small_large_small():
    lay = KVLayout(192, 128)
    assert (lay.k_bytes, lay.v_bytes, lay.stage_bytes, lay.shift, lay.total_bytes) == (
        49152, 32768, 40960, 8192, 131072)
    even = [lay.region(s, 0, is_k) for s, is_k in ((0, True), (1, False), (2, True))]
    odd = [lay.region(s, 1, is_k) for s, is_k in ((0, False), (1, True), (2, False))]
    assert even == [(0, 49152), (49152, 81920), (81920, 131072)]  # large, small, large: packed
    assert odd == [(0, 32768), (32768, 81920), (81920, 114688)]  # small, large, small: packed
    plan = load_plan(3, lay)
    # K into stage 0 reaches into stage 1's bytes of the round before: its load waits for stage 1 too
    assert plan[1].waits == (("kv_empty[0]", 1), ("kv_empty[1]", 1))
    assert {k: [o.tile for o in v] for k, v in overwrites(plan).items()} == {
        2: [], 4: [], 5: [], 6: ["K2"], 7: ["K2", "V2"], 8: ["K1"]}
    assert check_plan(plan) == []


def test_a_second_work_tile_carries_the_stages_on():
    lay = KVLayout(192, 128)
    first = load_plan(2, lay)
    second = load_plan(2, lay, rounds_before=4)
    kv = [ld for ld in second if ld.buffer == "kv"]
    assert [(ld.stage, ld.phase) for ld in kv] == [(1, 0), (2, 0), (0, 1), (1, 1)]
    assert kv[2].waits == (("kv_empty[0]", 1), ("kv_empty[1]", 1))  # K into stage 0 again, round 2
    assert check_plan(first) == check_plan(second) == []


def test_even_head_dims_do_not_move():
    lay = KVLayout(128, 128)
    assert not lay.uneven and lay.stage_bytes == 32768 and lay.shift == 0
    plan = load_plan(4, lay)
    assert all(len(ld.waits) == 1 for ld in plan)
    assert [ld.region for ld in plan if ld.buffer == "kv"][:3] == [(0, 32768), (32768, 65536), (65536, 98304)]
    assert check_plan(plan) == []


def test_a_wrong_stage1_sign_overwrites_live_tiles():
    msgs = check_plan(load_plan(3, KVLayout(192, 128), stage1_sign=-1))
    assert msgs and msgs[0].startswith("step 4 (V2 into kv stage 1, bytes 32768..65536) overwrites K2 (kv stage 0, "
                                       "step 2) without waiting for kv_empty[0]")


def test_a_plan_without_the_extra_wait_is_caught():
    plan = load_plan(6, KVLayout(192, 128))
    stripped = [ld.__class__(**{**ld.__dict__, "waits": ld.waits[:1]}) for ld in plan]
    msgs = check_plan(stripped)
    assert msgs and all("without waiting for kv_empty[1]" in m for m in msgs), msgs


def test_bad_arguments_name_themselves():
    with pytest.raises(ArgumentError, match=r"^hdim_v=256"):
        KVLayout(128, 256)
    with pytest.raises(ArgumentError, match=r"^hdim_v=127"):
        KVLayout(192, 127)
    with pytest.raises(ArgumentError, match=r"^n_blocks=-1: expected an int >= 0"):
        load_plan(-1, KVLayout(128, 128))
    with pytest.raises(ArgumentError, match=r"^tiles_before=True"):
        load_plan(1, KVLayout(128, 128), tiles_before=True)
    with pytest.raises(ArgumentError, match=r"^names='x'"):
        format_plan([], names="x")
    with pytest.raises(ArgumentError, match=r"^stage=3"):
        KVLayout(128, 128).region(3, 0, True)


def test_a_tile_without_kv_blocks_loads_q_only_and_q_phases_flip_per_tile():
    lay = KVLayout(128, 128)
    zero = load_plan(0, lay, tiles_before=3)
    assert [(ld.tile, ld.phase, ld.fill) for ld in zero] == [("Q0", 0, 3), ("Q1", 0, 3)]
    assert zero[0].waits == (("q_empty[0]", 0),)
    second = load_plan(1, lay, rounds_before=2, tiles_before=1)
    assert [(ld.tile, ld.fill) for ld in second] == [("Q0", 1), ("K0", 0), ("Q1", 1), ("V0", 1)]


def test_a_ctas_plan_carries_rounds_and_q_phases_over_its_tiles():
    layout = KVLayout(192, 128)
    plan = cta_plan([2, 0, 1], layout)
    assert [i for i, _ in plan] == [0] * 6 + [1] * 2 + [2] * 4
    assert plan[6][1].tile == "Q0" and plan[6][1].phase == 0  # the second tile's Q: one flip
    assert [ld for _, ld in plan[8:]] == load_plan(1, layout, rounds_before=4, tiles_before=2)


def test_load_diffs_name_each_field_that_differs_and_ignore_the_order_of_waits():
    want = load_plan(1, KVLayout(128, 128))[1]  # K0 into kv stage 0
    assert load_diffs(want, stage=0, waits=tuple(reversed(want.waits))) == []
    assert load_diffs(want, stage=1, expect_tx=want.expect_tx) == ["stage 1 (plan: 0)"]


def test_occupancy_after_each_load():
    assert occupancy([("q", 0, "Q0"), ("kv", 2, "K1"), ("kv", 2, "V1")]) == [
        ["Q0", "-", "-", "-", "-"], ["Q0", "-", "-", "-", "K1"], ["Q0", "-", "-", "-", "V1"]]
