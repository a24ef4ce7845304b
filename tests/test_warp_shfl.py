"""shfl.sync equals the PTX ISA pseudo-code for every mode, width, offset and lane; membermask rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashsim.errors import ArgumentError
from flashsim.warp import UndefinedResult, shfl_down, shfl_idx, shfl_sync, shfl_up, shfl_xor

LANE = np.arange(32)
VALUES = (np.arange(32, dtype=np.uint32) * 0x01010101) ^ 0xA5A5A5A5


def ptx_shfl(mode, a, b, c):
    """The PTX ISA 'Semantics' block of shfl.sync, lane by lane, in plain Python ints."""
    d, p = [0] * 32, [False] * 32
    for lane in range(32):
        bval, cval, segmask = b[lane] & 0x1F, c[lane] & 0x1F, (c[lane] >> 8) & 0x1F
        max_lane = (lane & segmask) | (cval & ~segmask)
        min_lane = lane & segmask
        if mode == "up":
            j = lane - bval
            pval = j >= max_lane
        elif mode == "down":
            j = lane + bval
            pval = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            pval = j <= max_lane
        else:
            j = min_lane | (bval & ~segmask)
            pval = j <= max_lane
        if not pval:
            j = lane
        d[lane], p[lane] = int(a[j]), pval
    return np.array(d, np.uint32), np.array(p)


@pytest.mark.parametrize("mode", ["up", "down", "bfly", "idx"])
@pytest.mark.parametrize("width", [1, 2, 4, 8, 16, 32])
def test_every_width_and_offset_matches_the_ptx_semantics(mode, width):
    c = ((32 - width) << 8) | (0 if mode == "up" else 0x1F)  # what CUDA's intrinsics pass
    for b in range(32):
        d, p, ev = shfl_sync(mode, VALUES, b, c)
        wd, wp = ptx_shfl(mode, VALUES, [b] * 32, [c] * 32)
        np.testing.assert_array_equal(d, wd)
        np.testing.assert_array_equal(p, wp)
    assert ev.op == f"shfl.sync.{mode}.b32"


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["up", "down", "bfly", "idx"]),
       st.lists(st.integers(0, 2**32 - 1), min_size=32, max_size=32),
       st.lists(st.integers(0, 2**32 - 1), min_size=32, max_size=32),
       st.integers(0, 2**32 - 1))
def test_any_per_lane_b_and_c(mode, a, b, c):
    # b and c are registers: any bits, per lane; only b[4:0], c[4:0] and c[12:8] matter
    a = np.array(a, np.uint32)
    d, p, _ = shfl_sync(mode, a, np.array(b, np.int64), np.full(32, c, np.int64))
    wd, wp = ptx_shfl(mode, a, b, [c] * 32)
    np.testing.assert_array_equal(d, wd)
    np.testing.assert_array_equal(p, wp)


def test_cuda_intrinsics_segments():
    # __shfl_xor_sync over 16-lane groups (seed 001's threadGroupAllReduce<16>) never crosses a group
    v = np.arange(32, dtype=np.uint32)
    for mask in (8, 4, 2, 1):
        d, _ = shfl_xor(v, mask, width=16)
        np.testing.assert_array_equal(d, v ^ mask)
    # a quad reduction: max over each group of 4
    x = np.random.default_rng(0).integers(0, 1000, 32).astype(np.uint32)
    m = x.copy()
    for mask in (2, 1):
        m = np.maximum(m, shfl_xor(m, mask, width=4)[0])
    np.testing.assert_array_equal(m, np.repeat(x.reshape(8, 4).max(1), 4))
    # up/down clamp at the segment edge: the lane keeps its own value
    d, _ = shfl_up(v, 3, width=8)
    np.testing.assert_array_equal(d, np.where(LANE % 8 >= 3, v - 3, v))
    d, _ = shfl_down(v, 3, width=8)
    np.testing.assert_array_equal(d, np.where(LANE % 8 < 5, v + 3, v))
    d, _ = shfl_idx(v, 5, width=8)
    np.testing.assert_array_equal(d, (LANE // 8) * 8 + 5)
    d, _ = shfl_idx(v, LANE[::-1].copy())  # per-lane source
    np.testing.assert_array_equal(d, v[::-1])


def test_batched_warps_and_per_warp_masks():
    a = np.arange(2 * 3 * 32, dtype=np.uint32).reshape(2, 3, 32)
    d, p, _ = shfl_sync("bfly", a, 1, 0x1F)
    np.testing.assert_array_equal(d, a[..., LANE ^ 1])
    assert p.all() and d.shape == (2, 3, 32)
    # a half-warp subset: lanes 0-15 execute with membermask 0xffff and read only each other
    act = np.broadcast_to(LANE < 16, (2, 3, 32))
    d, p, _ = shfl_sync("bfly", a, 1, 0x1F, np.full((2, 3), 0xFFFF), active=act)
    np.testing.assert_array_equal(d[..., :16], a[..., (LANE ^ 1)[:16]])
    assert not d[..., 16:].any() and not p[..., 16:].any()


def test_undefined_results_are_refused():
    with pytest.raises(UndefinedResult,
                       match=r"shfl.sync.idx: cta=0 warp=0 lane=16 executes it but is not in membermask 0x0000ffff"):
        shfl_sync("idx", VALUES, 0, 0x1F, 0xFFFF)
    act = LANE < 16
    with pytest.raises(UndefinedResult, match=r"shfl.sync.down: cta=0 warp=0 lane=15 reads source lane=16, "
                                              r"which is inactive or not in membermask"):
        shfl_sync("down", VALUES, 1, 0x1F, 0xFFFF, active=act)
    # clamped lanes read themselves: defined
    d, p, _ = shfl_sync("down", VALUES, 1, 0x0F, 0xFFFF, active=act)
    assert not p[15] and d[15] == VALUES[15]


def test_bad_input():
    with pytest.raises(ArgumentError, match="mode='xor'"):
        shfl_sync("xor", VALUES, 1, 0x1F)
    with pytest.raises(ArgumentError, match="width=3"):
        shfl_xor(VALUES, 1, width=3)
    with pytest.raises(ArgumentError, match="lane axis has 30 entries"):
        shfl_xor(np.zeros(30, np.uint32), 1)
    with pytest.raises(ArgumentError, match="a=.*uint32 register values.*float32"):
        shfl_xor(np.zeros(32, np.float32), 1)
    with pytest.raises(ArgumentError, match="membermask"):
        shfl_sync("idx", VALUES, 0, 0x1F, 1 << 33)
