"""ld.shared / st.shared of 8..128 bits and cp.async with its groups: data, zero fill, visibility, faults."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashsim.errors import ArgumentError, SimulatedFault
from flashsim.smem import SharedMemory
from flashsim.warp import (cp_async, cp_async_commit_group, cp_async_wait_all, cp_async_wait_group, ld_shared,
                           st_shared)

LANE = np.arange(32)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from([8, 16, 32, 64, 128]), st.permutations(range(64)), st.integers(0, 2**32 - 1))
def test_store_then_load_round_trips_every_width(bits, perm, seed):
    width = bits // 8
    addr = np.array(perm[:32]) * width  # distinct, aligned
    rng = np.random.default_rng(seed)
    nregs = max(1, bits // 32)
    regs = rng.integers(0, 2**32, (32, nregs), dtype=np.uint64).astype(np.uint32)
    sm = SharedMemory(1, 64 * 16, races=False)
    st_shared(sm, addr, regs, bits=bits)
    got, ev = ld_shared(sm, addr, bits=bits)
    want = regs if bits >= 32 else regs & ((1 << bits) - 1)
    np.testing.assert_array_equal(got, want)
    # bytes are little-endian, the first register at the lowest address
    raw = sm.data[0, addr[0]: addr[0] + width]
    assert int.from_bytes(raw.tobytes(), "little") == sum(int(want[0, i]) << (32 * i) for i in range(want.shape[1]))
    assert ev.op == (f"ld.shared.u{bits}" if bits <= 32 else f"ld.shared.v{bits // 32}.u32")


def test_signed_loads_sign_extend():
    sm = SharedMemory(1, 64, races=False)
    sm.data[0, :4] = [0x80, 0xFF, 0x7F, 0x00]
    r8, _ = ld_shared(sm, np.zeros(32, np.int64), bits=8, signed=True)
    assert r8[0, 0] == 0xFFFFFF80
    r16, _ = ld_shared(sm, np.zeros(32, np.int64), bits=16, signed=True)
    assert r16[0, 0] == 0xFFFFFF80  # 0xff80
    r16u, _ = ld_shared(sm, np.zeros(32, np.int64), bits=16)
    assert r16u[0, 0] == 0xFF80


def test_inactive_lanes_neither_load_nor_store():
    sm = SharedMemory(1, 256, races=False)
    act = LANE % 2 == 0
    st_shared(sm, LANE * 4, np.full((32, 1), 7, np.uint32), active=act)
    words = sm.data[0, :128].view(np.uint32)
    np.testing.assert_array_equal(words, np.where(act, 7, 0))
    r, ev = ld_shared(sm, LANE * 4, active=act)
    np.testing.assert_array_equal(r[:, 0], np.where(act, 7, 0))


def test_faults_and_bad_input():
    sm = SharedMemory(1, 256, races=False)
    with pytest.raises(SimulatedFault, match=r"misaligned shared address: cta=0 warp=0 lane=1 addr=0x4 .*8-byte"):
        ld_shared(sm, LANE * 4, bits=64)
    with pytest.raises(SimulatedFault, match=r"out-of-bounds shared address: cta=0 warp=0 lane=31 addr=0x100"):
        st_shared(sm, LANE * 4 + 132, np.zeros((32, 1), np.uint32))
    with pytest.raises(SimulatedFault, match="out-of-bounds shared address: cta=0 warp=0 lane=0"):
        ld_shared(sm, LANE * 4 - 4)
    with pytest.raises(ArgumentError, match="bits=24"):
        ld_shared(sm, LANE * 4, bits=24)
    with pytest.raises(ArgumentError, match=r"expected shape \(32, 4\)"):
        st_shared(sm, LANE * 16, np.zeros((32, 1), np.uint32), bits=128)
    with pytest.raises(ArgumentError, match="registers must be uint32"):
        st_shared(sm, LANE * 4, np.zeros((32, 1), np.float32))
    with pytest.raises(ArgumentError, match="lane axis has 33 entries"):
        ld_shared(sm, np.arange(33) * 4)
    with pytest.raises(ArgumentError, match="size=100"):
        SharedMemory(1, 100)


GMEM = np.arange(4096, dtype=np.uint32).view(np.uint8)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from([("ca", 4), ("ca", 8), ("ca", 16), ("cg", 16)]),
       st.lists(st.integers(0, 16), min_size=32, max_size=32), st.permutations(range(64)))
def test_cp_async_copies_src_size_bytes_and_zero_fills(kind, sizes, perm):
    cache, cp = kind
    src_size = np.minimum(np.array(sizes), cp)
    dst = np.array(perm[:32]) * cp
    src = LANE * 32
    sm = SharedMemory(1, 64 * 16, races=False)
    sm.data[0] = 0xEE
    cp_async(sm, GMEM, dst, src, cp_size=cp, src_size=src_size, cache=cache)
    assert sm.pending_copies == 32
    assert (sm.data[0] == 0xEE).all()  # not visible before the wait
    cp_async_wait_all(sm)
    assert sm.pending_copies == 0
    for lane in range(32):
        got = sm.data[0, dst[lane]: dst[lane] + cp]
        want = np.concatenate([GMEM[src[lane]: src[lane] + src_size[lane]], np.zeros(cp - src_size[lane], np.uint8)])
        np.testing.assert_array_equal(got, want)


def test_wait_group_n_completes_all_but_the_n_most_recent_groups():
    sm = SharedMemory(1, 1024, races=False)
    for g in range(3):  # three groups, each copying 16 bytes per lane into its own region
        cp_async(sm, GMEM, LANE * 16 if g == 0 else (LANE * 16 + 512 if g == 1 else LANE * 16), LANE * 16 + 16 * g,
                 cp_size=16, cache="cg", active=LANE < (16 if g != 1 else 32))
        cp_async_commit_group(sm)
    cp_async_wait_group(sm, 2)  # only group 0 completes
    np.testing.assert_array_equal(sm.data[0, :256], GMEM[:256])
    assert not sm.data[0, 512:].any()
    cp_async_wait_group(sm, 1)  # group 1
    np.testing.assert_array_equal(sm.data[0, 512:1024], GMEM[16:528])
    np.testing.assert_array_equal(sm.data[0, :256], GMEM[:256])
    cp_async_wait_group(sm, 0)  # group 2 overwrites lanes 0-15 of group 0
    np.testing.assert_array_equal(sm.data[0, :256], GMEM[32:288])


def test_wait_is_per_thread():
    sm = SharedMemory(1, 1024, warps=2, races=False)
    dst = np.stack([LANE * 16, LANE * 16 + 512])[None]
    cp_async(sm, GMEM, dst, dst, cp_size=16, cache="cg")
    cp_async_commit_group(sm)
    only_warp1 = np.array([[False, True]])
    cp_async_wait_group(sm, 0, active=only_warp1)
    assert not sm.data[0, :512].any()
    np.testing.assert_array_equal(sm.data[0, 512:], GMEM[512:1024])


def test_cp_async_bad_input_and_faults():
    sm = SharedMemory(1, 1024, races=False)
    with pytest.raises(ArgumentError, match="cp_size=8: cp.async.cg supports only cp-size 16"):
        cp_async(sm, GMEM, LANE * 8, LANE * 8, cp_size=8, cache="cg")
    with pytest.raises(ArgumentError, match="cp_size=12"):
        cp_async(sm, GMEM, LANE * 16, LANE * 16, cp_size=12)
    with pytest.raises(ArgumentError, match="src_size=17"):
        cp_async(sm, GMEM, LANE * 16, LANE * 16, src_size=17)
    with pytest.raises(SimulatedFault, match=r"misaligned shared address: cta=0 warp=0 lane=0 addr=0x8"):
        cp_async(sm, GMEM, LANE * 16 + 8, LANE * 16)
    with pytest.raises(SimulatedFault, match=r"misaligned global address: cta=0 warp=0 lane=1 addr=0x14"):
        cp_async(sm, GMEM, LANE * 16, LANE * 20)
    with pytest.raises(SimulatedFault, match=r"out-of-bounds global address: cta=0 warp=0 lane=31"):
        cp_async(sm, GMEM, LANE * 16, LANE * 16 + 16384 - 496)
    cp_async(sm, GMEM, LANE * 16, np.full(32, 1 << 20), src_size=0)  # src-size 0 reads nothing: zero fill
    cp_async_wait_all(sm)
    assert not sm.data[0, :512].any()
    with pytest.raises(ArgumentError, match="gmem="):
        cp_async(sm, GMEM.view(np.uint32), LANE * 16, LANE * 16)
    with pytest.raises(ArgumentError, match="n=-1"):
        cp_async_wait_group(sm, -1)


def test_the_sm90_bound_is_227_kib_everywhere():
    import numpy as np
    import pytest

    from flashsim.errors import SimulatedFault
    from flashsim.smem import SharedMemory
    from flashsim.warp import ldmatrix

    SharedMemory(1, 232448)  # 227 KiB: the most a CTA may have
    with pytest.raises(ValueError, match=r"size=233472: an sm_90 CTA has at most 227 KiB \(232448 bytes\)"):
        SharedMemory(1, 233472)
    SharedMemory(1, 233472, reserved=1024)  # the interpreter's window: 227 KiB behind the reserved 1 KiB
    sm = SharedMemory(1, 232448)
    with pytest.raises(SimulatedFault, match=r"out-of-bounds shared address: cta=0 warp=0 lane=0 addr=0x38c00"):
        ldmatrix(sm, np.full((1, 1, 32), 232448, np.int64), num=1)
