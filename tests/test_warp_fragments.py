"""Fragments as data: every element owned exactly once, pack/unpack identity, the PTX tables, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from flashsim.errors import ArgumentError
from flashsim.warp.fragments import FRAGMENTS, Fragment, fragment, pack, unpack

ALL = sorted(FRAGMENTS.items())


@pytest.mark.parametrize(("key", "frag"), ALL, ids=[f"{k[0]}-{k[1]}" for k, _ in ALL])
def test_every_element_is_owned_exactly_once(key, frag):
    seen = np.zeros((frag.rows, frag.cols), int)
    for lane in range(32):
        for reg in range(frag.regs):
            for half in range(frag.elems):
                r, c = frag.coords(lane, reg, half)
                seen[r, c] += 1
                assert frag.owner(r, c) == (lane, reg, half)
    assert (seen == 1).all()


@pytest.mark.parametrize(("key", "frag"), ALL, ids=[f"{k[0]}-{k[1]}" for k, _ in ALL])
def test_pack_then_unpack_is_the_identity_and_back(key, frag):
    rng = np.random.default_rng(0)
    hi = 1 << (16 if frag.elems == 2 else 32)
    tiles = rng.integers(0, hi, (3, 2, frag.rows, frag.cols), dtype=np.uint64).astype(frag.elem_dtype)
    regs = pack(frag, tiles)
    assert regs.shape == (3, 2, 32, frag.regs) and regs.dtype == np.uint32
    np.testing.assert_array_equal(unpack(frag, regs), tiles)
    np.testing.assert_array_equal(pack(frag, unpack(frag, regs)), regs)


@given(hnp.arrays(np.uint16, (16, 16)))
def test_pack_a_matches_the_ptx_table(tile):
    # PTX ISA: a0,a1 (g, 2t..2t+1); a2,a3 (g+8, 2t..); a4,a5 (g, 2t+8..); a6,a7 (g+8, 2t+8..)
    regs = pack(fragment("mma.m16n8k16", "A", "f16"), tile)
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        want = [(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]
        for reg, (r, c) in enumerate(want):
            assert regs[lane, reg] == int(tile[r, c]) | int(tile[r, c + 1]) << 16


def test_b_c_and_m8n8_tables():
    b = fragment("mma.m16n8k16", "B", "bf16")
    assert b.coords(5, 1, 1) == (2 * 1 + 1 + 8, 1)  # lane 5: g=1, t=1; reg1 half1 -> k = 2t+9, n = g
    c32 = fragment("mma.m16n8k16", "C", "f32")
    assert [c32.coords(6, i) for i in range(4)] == [(1, 4), (1, 5), (9, 4), (9, 5)]
    c16 = fragment("mma.m16n8k8", "D", "f16")
    assert c16.coords(6, 1, 1) == (9, 5)
    m = fragment("ldmatrix.m8n8")
    assert m.coords(13, 0, 1) == (3, 3)
    assert fragment("mma.m16n8k8", "B").rows == 8 and fragment("mma.m16n8k8", "A").regs == 2


def test_bad_fragment_arguments():
    with pytest.raises(ArgumentError, match=r"instruction='mma.m16n8k32'"):
        fragment("mma.m16n8k32", "A")
    with pytest.raises(ArgumentError, match=r"operand='Q'"):
        fragment("mma.m16n8k16", "Q")
    with pytest.raises(ArgumentError, match=r"dtype='f32'.*holds f16, bf16"):
        fragment("mma.m16n8k16", "A", "f32")
    with pytest.raises(ArgumentError, match=r"C/D is f32 or f16"):
        fragment("mma.m16n8k16", "C", "bf16")


def test_fragment_validates_itself():
    with pytest.raises(ArgumentError, match="exactly once"):
        Fragment("bad", 8, 8, 1, 2, ("b16",), "-", lambda lane, reg, half: (lane >> 2, 0 * lane + half))
    with pytest.raises(ArgumentError, match="32 lanes x 2"):
        Fragment("bad", 8, 8, 2, 2, ("b16",), "-", lambda lane, reg, half: (lane >> 2, half))


def test_pack_and_unpack_reject_bad_input():
    f = fragment("mma.m16n8k16", "A")
    with pytest.raises(ArgumentError, match=r"tile=array\(shape=\(16, 16\), dtype=float16\).*uint16"):
        pack(f, np.zeros((16, 16), np.float16))
    with pytest.raises(ArgumentError, match=r"shape \(\.\.\., 16, 16\)"):
        pack(f, np.zeros((16, 8), np.uint16))
    with pytest.raises(ArgumentError, match="lane axis has 16 entries: a warp has 32 lanes"):
        unpack(f, np.zeros((16, 4), np.uint32))
    with pytest.raises(ArgumentError, match="registers must be uint32"):
        unpack(f, np.zeros((32, 4), np.int32))
    with pytest.raises(ArgumentError, match=r"shape \(\.\.\., 32, 4\)"):
        unpack(f, np.zeros((32, 2), np.uint32))
