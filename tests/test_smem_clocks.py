"""Happens-before across warps and the async proxy (flashsim.smem.clocks through the race detector): the
orders a warp-specialised pipeline relies on, each with the missing step that makes it a race."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.smem import SharedMemory
from flashsim.warp import ld_shared, st_shared

LANE = np.arange(32)
TILE = np.arange(256, 512)  # the bytes of one 256-byte stage


def _warp(w, warps=2):
    a = np.zeros((1, warps, 32), bool)
    a[0, w] = True
    return a


def _addr(x, warps=2):
    return np.broadcast_to(np.asarray(x, np.int64), (1, warps, 32))


def _read_stage(sm, w, tag="consumer read"):
    _, ev = ld_shared(sm, _addr(256 + LANE * 8), bits=64, active=_warp(w))
    return ev.races


def _copy_into_stage(sm, w, tag="tma load"):
    """Warp w issues a copy of the stage; returns its clock vector and the races its issue found."""
    col, vec = sm.clocks.issue(0, w, "load")
    return vec, sm.on_async_write(0, col, vec, TILE, tag)


def test_a_copy_read_before_its_phase_is_a_race_and_after_it_is_not():
    sm = SharedMemory(1, 1024, warps=2)
    vec, races = _copy_into_stage(sm, 0)
    assert races == ()
    early = _read_stage(sm, 1)
    assert early and early[0].kind == "RAW"
    assert (early[0].first.op, early[0].first.warp, early[0].second.warp) == ("bulk copy write", 0, 1)
    # the copy's complete_tx releases into the full barrier; the phase completes; the consumer waits on it
    sm.clocks.mbar_release(0, 0x10, vec)
    sm.clocks.mbar_phase_completed(0, 0x10, 0)
    sm.clocks.mbar_acquire(0, 1, 0x10, 0)
    assert _read_stage(sm, 1) == ()


def test_the_issuing_warp_itself_is_not_ordered_after_its_copy():
    sm = SharedMemory(1, 1024, warps=2)
    _copy_into_stage(sm, 0)
    races = _read_stage(sm, 0)
    assert races and races[0].first.op == "bulk copy write" and races[0].second.warp == 0


def test_refilling_a_stage_needs_the_consumers_release():
    sm = SharedMemory(1, 1024, warps=2)
    vec, _ = _copy_into_stage(sm, 0)
    sm.clocks.mbar_release(0, 0x10, vec)
    sm.clocks.mbar_phase_completed(0, 0x10, 0)
    sm.clocks.mbar_acquire(0, 1, 0x10, 0)
    assert _read_stage(sm, 1) == ()
    # no arrival on the empty barrier: the refill overwrites what the consumer read
    _, races = _copy_into_stage(sm, 0)
    assert races and {r.kind for r in races} == {"WAR"} and races[0].first.op == "read"
    # a fresh pipeline where the consumer arrives on empty and the producer waits on it first
    sm = SharedMemory(1, 1024, warps=2)
    vec, _ = _copy_into_stage(sm, 0)
    sm.clocks.mbar_release(0, 0x10, vec)
    sm.clocks.mbar_phase_completed(0, 0x10, 0)
    sm.clocks.mbar_acquire(0, 1, 0x10, 0)
    _read_stage(sm, 1)
    sm.clocks.mbar_release(0, 0x18, sm.clocks.release(0, 1))
    sm.clocks.mbar_phase_completed(0, 0x18, 0)
    sm.clocks.mbar_acquire(0, 0, 0x18, 0)
    assert _copy_into_stage(sm, 0)[1] == ()


@pytest.mark.parametrize("fence", [True, False])
def test_a_tma_store_of_thread_writes_needs_fence_proxy_async(fence):
    sm = SharedMemory(1, 1024, warps=2)
    st_shared(sm, _addr(256 + LANE * 8), np.zeros((1, 2, 32, 2), np.uint32), bits=64, active=_warp(1))
    if fence:
        sm.clocks.fence(0, 1)
    sm.named_arrive(0, 1, 1)
    sm.named_arrive(0, 0, 1)
    sm.named_complete(0, 1, [0, 1])
    col, vec = sm.clocks.issue(0, 0, "store")
    races = sm.on_async_read(0, col, vec, TILE, "tma store")
    if fence:
        assert races == ()
    else:
        assert races and {r.kind for r in races} == {"RAW (no fence.proxy.async)"}
        assert (races[0].first.op, races[0].first.warp, races[0].second.op) == ("write", 1, "bulk store read")
        assert "fence.proxy.async" in str(races[0])


def test_a_fence_after_the_release_does_not_count():
    sm = SharedMemory(1, 1024, warps=2)
    st_shared(sm, _addr(256 + LANE * 8), np.zeros((1, 2, 32, 2), np.uint32), bits=64, active=_warp(1))
    sm.named_arrive(0, 1, 1)
    sm.named_arrive(0, 0, 1)
    sm.named_complete(0, 1, [0, 1])
    sm.clocks.fence(0, 1)  # too late: warp 0 has not seen it
    col, vec = sm.clocks.issue(0, 0, "store")
    assert {r.kind for r in sm.on_async_read(0, col, vec, TILE, "tma store")} == {"RAW (no fence.proxy.async)"}


def test_a_tma_store_of_unsynchronised_writes_is_a_plain_race():
    sm = SharedMemory(1, 1024, warps=2)
    st_shared(sm, _addr(256 + LANE * 8), np.zeros((1, 2, 32, 2), np.uint32), bits=64, active=_warp(1))
    sm.clocks.fence(0, 1)
    col, vec = sm.clocks.issue(0, 0, "store")
    assert {r.kind for r in sm.on_async_read(0, col, vec, TILE, "tma store")} == {"RAW"}


def test_overwriting_an_operand_before_wgmma_wait_group():
    sm = SharedMemory(1, 1024, warps=2)
    col, vec = sm.clocks.issue(0, 1, "wgmma")
    sm.on_async_read(0, col, vec, TILE, "wgmma B")
    ev = st_shared(sm, _addr(256 + LANE * 8), np.zeros((1, 2, 32, 2), np.uint32), bits=64, active=_warp(1))
    assert ev.races and ev.races[0].kind == "WAR" and ev.races[0].first.op == "wgmma read"
    sm2 = SharedMemory(1, 1024, warps=2)
    col, vec = sm2.clocks.issue(0, 1, "wgmma")
    sm2.on_async_read(0, col, vec, TILE, "wgmma B")
    sm2.clocks.agent_acquire(0, 1, "wgmma")  # wgmma.wait_group 0
    ev = st_shared(sm2, _addr(256 + LANE * 8), np.zeros((1, 2, 32, 2), np.uint32), bits=64, active=_warp(1))
    assert ev.races == ()


def test_a_partial_named_barrier_orders_only_its_members():
    sm = SharedMemory(1, 1024, warps=3)
    st_shared(sm, _addr(LANE * 4, 3), np.zeros((1, 3, 32, 1), np.uint32), active=_warp(0, 3))
    sm.named_arrive(0, 0, 2)
    sm.named_arrive(0, 1, 2)
    sm.named_complete(0, 2, [1])
    _, ev = ld_shared(sm, _addr(LANE * 4, 3), active=_warp(1, 3))
    assert ev.races == ()
    _, ev = ld_shared(sm, _addr(LANE * 4, 3), active=_warp(2, 3))
    assert ev.races and ev.races[0].kind == "RAW" and ev.races[0].second.warp == 2
