"""ldmatrix / stmatrix / movmatrix against their PTX definitions, over whole domains; ldmatrix then warp mma
equals a float64 matmul for plain, transposed and swizzled layouts; faults and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashsim.errors import ArgumentError, SimulatedFault
from flashsim.smem import SharedMemory
from flashsim.swizzle import cute_swizzle, seed_swizzle
from flashsim.warp import fragment, ldmatrix, mma, movmatrix, pack, stmatrix, unpack

LANE = np.arange(32)


def reference_ldmatrix(data: np.ndarray, addr, num: int, trans: bool) -> np.ndarray:
    """PTX ISA ldmatrix, lane by lane: lane T gets (row T/4, cols 2(T%4), +1) of matrix j (.trans: transposed)."""
    d16 = data.view(np.uint16)
    out = np.zeros((32, num), np.uint32)
    for j in range(num):
        m = np.array([d16[addr[8 * j + r] // 2: addr[8 * j + r] // 2 + 8] for r in range(8)])
        if trans:
            m = m.T
        for t in range(32):
            out[t, j] = int(m[t // 4, 2 * (t % 4)]) | int(m[t // 4, 2 * (t % 4) + 1]) << 16
    return out


row_addrs = st.lists(st.integers(0, 8192 // 16 - 1), min_size=32, max_size=32).map(lambda v: np.array(v) * 16)


@settings(max_examples=60, deadline=None)
@given(row_addrs, st.sampled_from([1, 2, 4]), st.booleans(), st.integers(0, 2**32 - 1))
def test_ldmatrix_is_the_ptx_definition(addr, num, trans, seed):
    sm = SharedMemory(1, 8192, races=False)
    sm.data[0] = np.random.default_rng(seed).integers(0, 256, 8192, dtype=np.uint8)
    regs, ev = ldmatrix(sm, addr, num=num, trans=trans)
    assert regs.shape == (32, num) and regs.dtype == np.uint32
    np.testing.assert_array_equal(regs, reference_ldmatrix(sm.data[0], addr, num, trans))
    assert ev.op == f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(64)), st.sampled_from([1, 2, 4]), st.booleans(), st.integers(0, 2**32 - 1))
def test_stmatrix_after_ldmatrix_is_the_identity(perm, num, trans, seed):
    addr = np.array(perm[:32]) * 16  # distinct rows: stmatrix writes every byte it reads
    rng = np.random.default_rng(seed)
    src = SharedMemory(1, 1024, races=False)
    src.data[0] = rng.integers(0, 256, 1024, dtype=np.uint8)
    regs, _ = ldmatrix(src, addr, num=num, trans=trans)
    dst = SharedMemory(1, 1024, races=False)
    before = rng.integers(0, 256, 1024, dtype=np.uint8)
    dst.data[0] = before
    stmatrix(dst, addr, regs, num=num, trans=trans)
    rows = (addr[: 8 * num, None] + np.arange(16)).reshape(-1)
    np.testing.assert_array_equal(dst.data[0, rows], src.data[0, rows])
    untouched = np.setdiff1d(np.arange(1024), rows)
    np.testing.assert_array_equal(dst.data[0, untouched], before[untouched])
    # and ldmatrix after stmatrix gives the registers back
    np.testing.assert_array_equal(ldmatrix(dst, addr, num=num, trans=trans)[0], regs)


def test_movmatrix_equals_the_transpose_over_all_values():
    frag = fragment("ldmatrix.m8n8")
    rng = np.random.default_rng(3)
    tiles = rng.integers(0, 1 << 16, (50, 8, 8), dtype=np.uint64).astype(np.uint16)
    regs = pack(frag, tiles)[:, :, 0].reshape(5, 10, 32)  # (ctas, warps, 32)
    out, ev = movmatrix(regs)
    assert out.shape == regs.shape and ev.op == "movmatrix.sync.aligned.m8n8.trans.b16"
    np.testing.assert_array_equal(unpack(frag, out.reshape(50, 32, 1)), np.swapaxes(tiles, 1, 2))
    np.testing.assert_array_equal(movmatrix(out)[0], regs)  # an involution
    one, _ = movmatrix(regs[0, 0])
    np.testing.assert_array_equal(one, out[0, 0])


def _place(sm: SharedMemory, m: np.ndarray, ld: int, swz=lambda x: x, base: int = 0) -> None:
    """Put matrix m (f16 bits) row-major with row stride ld (elements), through swizzle swz, at byte base."""
    r, c = np.indices(m.shape)
    sm.data[0].view(np.uint16)[base // 2 + swz(r * ld + c)] = m


SWIZZLES = {
    "plain": (lambda x: x, 128),
    "seed_swizzle<3,3,4>": (lambda x: seed_swizzle(x, 3, 3, 4), 128),
    "Sw<3,3,3>": (lambda x: cute_swizzle(x, 3, 3, 3), 64),
}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(SWIZZLES)), st.booleans(), st.integers(0, 2**32 - 1))
def test_ldmatrix_then_mma_equals_a_float64_matmul(layout, b_trans, seed):
    swz, ld = SWIZZLES[layout]
    rng = np.random.default_rng(seed)
    a = rng.integers(-8, 9, (16, 16)).astype(np.float16)  # small integers: every sum is exact
    b = rng.integers(-8, 9, (16, 8)).astype(np.float16)  # K x N
    sm = SharedMemory(1, 16 * 1024, races=False)
    _place(sm, a.view(np.uint16), ld, swz)  # A row-major 16 x ld
    a_rows = swz((LANE % 16) * ld + (LANE // 16) * 8) * 2
    ra, _ = ldmatrix(sm, a_rows, num=4)
    base = 8192
    if b_trans:  # B stored K x N row-major (like V): ldmatrix.x2.trans, lanes 0-15 give rows k
        _place(sm, b.view(np.uint16), ld, swz, base)
        rows = base + swz(np.where(LANE < 16, LANE, 0) * ld) * 2
        rb, _ = ldmatrix(sm, rows, num=2, trans=True)
    else:  # B stored N x K row-major (like K): ldmatrix.x2, lane l < 16 gives row n = l%8, k-half l//8
        _place(sm, np.ascontiguousarray(b.T).view(np.uint16), ld, swz, base)
        rows = base + swz(((LANE % 8) * ld + ((LANE // 8) % 2) * 8)) * 2
        rb, _ = ldmatrix(sm, rows, num=2)
    rc = np.zeros((32, 4), np.uint32)
    rd, ev = mma(ra, rb, rc, shape="m16n8k16", atype="f16", ctype="f32")
    d = unpack(fragment("mma.m16n8k16", "D", "f32"), rd).view(np.float32)
    np.testing.assert_array_equal(d.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64))
    assert ev.op == "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"


def test_transposed_a_through_ldmatrix_trans():
    rng = np.random.default_rng(5)
    a = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 5, (16, 8)).astype(np.float16)
    sm = SharedMemory(1, 4096, races=False)
    _place(sm, np.ascontiguousarray(a.T).view(np.uint16), 16)  # A^T (K x M) row-major
    # matrix j of A (rows 8(j%2).., cols 8(j//2)..) is the transpose of A^T's block (rows 8(j//2).., cols 8(j%2)..)
    j, r = LANE // 8, LANE % 8
    rows = ((8 * (j // 2) + r) * 16 + 8 * (j % 2)) * 2
    ra, _ = ldmatrix(sm, rows, num=4, trans=True)
    rb = pack(fragment("mma.m16n8k16", "B"), b.view(np.uint16))
    rd, _ = mma(ra, rb, np.zeros((32, 4), np.uint32))
    d = unpack(fragment("mma.m16n8k16", "D", "f32"), rd).view(np.float32)
    np.testing.assert_array_equal(d, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32))


def test_batched_warps_and_inactive_warps():
    sm = SharedMemory(2, 1024, warps=3, races=False)
    sm.data[:] = np.random.default_rng(1).integers(0, 256, sm.data.shape, dtype=np.uint8)
    addr = np.broadcast_to(LANE * 16, (2, 3, 32))
    active = np.array([[True, False, True], [False, True, True]])
    regs, ev = ldmatrix(sm, addr, active=active)
    assert regs.shape == (2, 3, 32, 4)
    for c in range(2):
        for w in range(3):
            want = reference_ldmatrix(sm.data[c], LANE * 16, 4, False) if active[c, w] else 0
            np.testing.assert_array_equal(regs[c, w], want)
    np.testing.assert_array_equal(ev.wavefronts, np.where(active, 4, 0))


def test_misaligned_row_address_is_a_fault():
    sm = SharedMemory(1, 1024, races=False)
    addr = LANE * 16
    addr[5] += 8
    with pytest.raises(SimulatedFault, match=r"misaligned shared address: cta=0 warp=0 lane=5 addr=0x58 .*16-byte"):
        ldmatrix(sm, addr)
    with pytest.raises(SimulatedFault, match=r"misaligned shared address: cta=0 warp=0 lane=5"):
        stmatrix(sm, addr, np.zeros((32, 4), np.uint32))
    # .x1 ignores lanes 8..31: the same address is fine there
    ldmatrix(sm, np.where(LANE < 8, LANE * 16, 3), num=1)


def test_out_of_bounds_row_is_a_fault_and_nothing_is_written():
    sm = SharedMemory(2, 1024, warps=2, races=False)
    addr = np.broadcast_to(LANE * 16, (2, 2, 32)).copy()
    addr[1, 1, 31] = 1024
    with pytest.raises(SimulatedFault, match=r"out-of-bounds shared address: cta=1 warp=1 lane=31 addr=0x400"):
        ldmatrix(sm, addr)
    with pytest.raises(SimulatedFault, match=r"out-of-bounds shared address: cta=1 warp=1 lane=31"):
        stmatrix(sm, addr, np.ones((2, 2, 32, 4), np.uint32))
    assert not sm.data.any()


def test_bad_input_messages():
    sm = SharedMemory(1, 1024, races=False)
    with pytest.raises(ArgumentError, match="lane axis has 16 entries: a warp has 32 lanes"):
        ldmatrix(sm, np.arange(16) * 16)
    with pytest.raises(ArgumentError, match=r"addr=.*expected integers"):
        ldmatrix(sm, (LANE * 16).astype(np.float32))
    with pytest.raises(ArgumentError, match=r"num=3"):
        ldmatrix(sm, LANE * 16, num=3)
    with pytest.raises(ArgumentError, match=r"registers must be uint32 bit patterns, got dtype int64"):
        stmatrix(sm, LANE * 16, np.zeros((32, 4), np.int64))
    with pytest.raises(ArgumentError, match=r"expected shape \(32, 2\)"):
        stmatrix(sm, LANE * 16, np.zeros((32, 4), np.uint32), num=2)
    with pytest.raises(ArgumentError, match="lane axis has 31 entries"):
        movmatrix(np.zeros(31, np.uint32))
    with pytest.raises(ArgumentError, match="holds 1 CTAs of 1 warps"):
        ldmatrix(sm, np.zeros((2, 1, 32), np.int64))
    with pytest.raises(ArgumentError, match="smem='ndarray'"):
        ldmatrix(np.zeros(16), LANE * 16)
