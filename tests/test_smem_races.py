"""The race detector: RAW/WAR/WAW across warps and lanes with no barrier, cp.async read before its wait,
both accesses reported; no report on correctly synchronised code (the twins of gpu/kernels/probe_smem.cu)."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.smem import RaceError, SharedMemory
from flashsim.warp import cp_async, cp_async_commit_group, cp_async_wait_group, ld_shared, ldmatrix, st_shared, stmatrix, syncthreads, syncwarp
from flashsim.gpu import check_races

LANE = np.arange(32)


def _warp(w, warps=2):
    a = np.zeros((1, warps, 32), bool)
    a[0, w] = True
    return a


def _both(x, warps=2):
    return np.broadcast_to(np.asarray(x, np.int64), (1, warps, 32))


def _vals(x, warps=2):
    return np.broadcast_to(np.asarray(x, np.uint32)[..., None], (1, warps, 32, 1))


@pytest.mark.parametrize("case", check_races.CASES, ids=lambda c: c.kernel)
def test_twins_of_the_race_probes(case):
    hazard, messages = check_races.simulate(case)
    assert hazard == case.expected, messages


def test_raw_report_names_both_accesses():
    sm = SharedMemory(1, 256, warps=2)
    st_shared(sm, _both(LANE * 4), _vals(LANE), active=_warp(0), tag="producer")
    _, ev = ld_shared(sm, _both(LANE * 4), active=_warp(1), tag="consumer")
    assert len(ev.races) == 32 and sm.race_count == 32
    r = ev.races[5]
    assert (r.kind, r.addr) == ("RAW", 20)
    assert (r.first.op, r.first.tag, r.first.cta, r.first.warp, r.first.lane) == ("write", "producer", 0, 0, 5)
    assert (r.second.op, r.second.tag, r.second.warp, r.second.lane) == ("read", "consumer", 1, 5)
    assert "RAW hazard at shared addr=0x14 (cta=0): write by 'producer' at cta=0 warp=0 lane=5" in str(r)


def test_war_and_waw_and_their_fixes():
    sm = SharedMemory(1, 256, warps=2)
    ld_shared(sm, _both(LANE * 4), active=_warp(1), tag="reader")
    ev = st_shared(sm, _both(LANE * 4), _vals(1), active=_warp(0), tag="writer")
    assert {r.kind for r in ev.races} == {"WAR"} and ev.races[0].first.tag == "reader"
    ev = st_shared(sm, _both(LANE * 4), _vals(2), active=_warp(1), tag="writer2")
    assert "WAW" in {r.kind for r in ev.races}
    syncthreads(sm)
    ev = st_shared(sm, _both(LANE * 4), _vals(3), active=_warp(0), tag="after barrier")
    assert ev.races == ()


def test_one_instruction_of_two_warps_on_one_word_is_a_waw():
    sm = SharedMemory(1, 256, warps=2)
    ev = st_shared(sm, _both(LANE * 4), _vals(LANE), tag="both")
    assert len(ev.races) == 32 and {(r.first.warp, r.second.warp) for r in ev.races} == {(0, 1)}
    # lanes of ONE warp storing the same word in one instruction: one wins, no race
    ev = st_shared(SharedMemory(1, 256), np.zeros(32, np.int64), np.zeros((32, 1), np.uint32))
    assert ev.races == ()


def test_intra_warp_needs_syncwarp_and_own_lane_is_ordered():
    sm = SharedMemory(1, 256)
    st_shared(sm, LANE * 4, LANE[:, None].astype(np.uint32))
    _, ev = ld_shared(sm, LANE * 4)  # each lane reads its own word: program order
    assert ev.races == ()
    _, ev = ld_shared(sm, (LANE ^ 1) * 4)  # a neighbour's word, no __syncwarp
    assert ev.races and ev.races[0].kind == "RAW" and ev.races[0].first.warp == ev.races[0].second.warp == 0
    syncwarp(sm)
    _, ev = ld_shared(sm, (LANE ^ 1) * 4)
    assert ev.races == ()


def test_sub_word_accesses_to_different_bytes_do_not_race():
    sm = SharedMemory(1, 256, warps=2)
    st_shared(sm, _both(LANE * 4), _vals(1), bits=8, active=_warp(0))
    ev = st_shared(sm, _both(LANE * 4 + 1), _vals(2), bits=8, active=_warp(1))
    assert ev.races == ()
    _, ev = ld_shared(sm, _both(LANE * 4), bits=16, active=_warp(0))
    assert ev.races and ev.races[0].first.warp == 1  # overlaps warp 1's byte
    # (the shadow keeps the last writer of a word: warp 0's earlier byte is no longer tracked)


def test_read_before_cp_async_wait_is_reported_even_after_a_barrier():
    gmem = np.arange(1024, dtype=np.uint8)
    sm = SharedMemory(1, 1024, warps=2)
    sm.data[0, :] = 0x55
    cp_async(sm, gmem, _both(LANE * 16), _both(LANE * 16), cp_size=16, cache="cg", active=_warp(0), tag="copy")
    syncthreads(sm)
    r, ev = ld_shared(sm, _both(LANE * 16), active=_warp(1), tag="early read")
    assert ev.races and ev.races[0].kind == "RAW cp.async" and ev.races[0].first.op == "cp.async"
    assert "before a cp.async.wait_group" in str(ev.races[0])
    assert (r[0, 1, :, 0] == 0x55555555).all()  # the copy is not visible yet
    # the copying thread itself must wait too
    _, ev = ld_shared(sm, _both(LANE * 16), active=_warp(0), tag="own early read")
    assert ev.races and ev.races[0].kind == "RAW cp.async"
    cp_async_wait_group(sm, 0, active=_warp(0))  # the copy's group is still open: wait_group covers committed ones
    _, ev = ld_shared(sm, _both(LANE * 16), active=_warp(0), tag="own read, group not committed")
    assert ev.races and ev.races[0].kind == "RAW cp.async"
    cp_async_commit_group(sm, active=_warp(0))
    cp_async_wait_group(sm, 0, active=_warp(0))
    syncthreads(sm)
    r, ev = ld_shared(sm, _both(LANE * 16), active=_warp(1), tag="late read")
    assert ev.races == () and (r[0, 1, :, 0] == gmem.view(np.uint32)[::4][:32]).all()


def test_ldmatrix_and_stmatrix_take_part():
    sm = SharedMemory(1, 1024, warps=2)
    stmatrix(sm, _both(LANE * 16), np.zeros((1, 2, 32, 4), np.uint32), active=np.array([[True, False]]), tag="stsm w0")
    _, ev = ldmatrix(sm, _both(LANE * 16), active=np.array([[False, True]]), tag="ldsm w1")
    assert ev.races and ev.races[0].first.tag == "stsm w0"


def test_on_race_raise_and_limits():
    sm = SharedMemory(1, 256, warps=2, on_race="raise")
    st_shared(sm, _both(LANE * 4), _vals(1), active=_warp(0), tag="w")
    with pytest.raises(RaceError, match=r"RAW hazard .* \(\+27 more\)"):
        ld_shared(sm, _both(LANE * 4), active=_warp(1), tag="r")
    sm = SharedMemory(1, 256, warps=2, max_races=3)
    st_shared(sm, _both(LANE * 4), _vals(1), active=_warp(0))
    ld_shared(sm, _both(LANE * 4), active=_warp(1))
    assert len(sm.races) == 3 and sm.race_count == 32
    sm = SharedMemory(1, 256, warps=2, races=False)
    st_shared(sm, _both(LANE * 4), _vals(1), active=_warp(0))
    _, ev = ld_shared(sm, _both(LANE * 4), active=_warp(1))
    assert ev.races == () and sm.race_count == 0


def test_partial_barriers_are_not_approximated():
    sm = SharedMemory(1, 256, warps=4)
    with pytest.raises(NotImplementedError, match="part of the CTA"):
        from flashsim.warp import bar_sync

        bar_sync(sm, 1, 64)
    with pytest.raises(NotImplementedError, match="partial-warp"):
        syncwarp(sm, 0xFFFF)


def test_check_races_dry_run_writes_its_table(tmp_path, capsys):
    assert check_races.main(["--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("check_races: 10 cases (8 required)")
    assert "simulator as expected on 10/10" in out
    md = (tmp_path / "races.md").read_text()
    assert "race_cp_async_no_wait (info)" in md and (tmp_path / "races.json").is_file()


def test_racecheck_output_parsing():
    assert check_races.parse_racecheck("========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)") == 3
    assert check_races.parse_racecheck("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)") == 0
    assert check_races.parse_racecheck("ERROR: Potential RAW hazard detected at __shared__ 0x0 in block (0,0,0)") == 1
    assert check_races.parse_racecheck("========= ERROR SUMMARY: 0 errors") == 0
    assert check_races.parse_racecheck("nothing useful") is None
