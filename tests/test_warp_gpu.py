"""flashsim.warp against the GPU, bit for bit (marked gpu: run with pytest --gpu), plus the CPU-side checks of
the probe wrappers and kernels (argument errors, every probe kernel present in the sm_90 cubin)."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashsim.errors import ArgumentError
from flashsim.smem import SharedMemory
from flashsim.swizzle import seed_swizzle
from flashsim.warp import (cp_async, cp_async_wait_all, ldmatrix, movmatrix, shfl_sync, stmatrix)
from flashsim.gpu import check_banks, check_races, runtime, warp_probes as wp

gpu = pytest.mark.gpu
LANE = np.arange(32)
N = 64  # cases (warps) per launch
SMEM = wp.PROBE_SMEM


def _rows(kind: str, rng) -> np.ndarray:
    """(N, 32) row addresses of one kind: random 16-byte rows, seed 001's tile, swizzled, duplicates."""
    if kind == "random":
        return rng.integers(0, SMEM // 16, (N, 32)) * 16
    q = (LANE % 16) * 128 + (LANE // 16) * 8
    if kind == "seed_Q":
        base = q * 2
    elif kind == "seed_Q_swizzled":
        base = seed_swizzle(q, 3, 3, 4) * 2
    else:  # duplicated rows
        base = (LANE % 4) * 16
    off = rng.integers(0, (SMEM - 4096) // 16, (N, 1)) * 16
    return base[None, :] + off


def _sim_ldmatrix(image, addr, num, trans):
    sm = SharedMemory.from_image(image, races=False)
    regs, _ = ldmatrix(sm, addr[:, None, :], num=num, trans=trans)
    return regs[:, 0]


@gpu
@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.booleans(), st.sampled_from(["random", "seed_Q", "seed_Q_swizzled", "dup"]),
       st.integers(0, 2**32 - 1))
def test_ldmatrix_bit_exact(num, trans, kind, seed):
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (N, SMEM), dtype=np.uint8)
    addr = _rows(kind, rng)
    np.testing.assert_array_equal(wp.run_ldmatrix(image, addr, num=num, trans=trans),
                                  _sim_ldmatrix(image, addr, num, trans))


@gpu
@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.booleans(), st.integers(0, 2**32 - 1))
def test_stmatrix_bit_exact(num, trans, seed):
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (N, SMEM), dtype=np.uint8)
    addr = np.stack([rng.permutation(SMEM // 16)[:32] * 16 for _ in range(N)])  # distinct rows: defined result
    regs = rng.integers(0, 2**32, (N, 32, num), dtype=np.uint64).astype(np.uint32)
    got = wp.run_stmatrix(image, addr, regs, num=num, trans=trans)
    sm = SharedMemory.from_image(image, races=False)
    stmatrix(sm, addr[:, None, :], regs[:, None], num=num, trans=trans)
    np.testing.assert_array_equal(got, sm.data)


@gpu
@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_movmatrix_bit_exact(seed):
    regs = np.random.default_rng(seed).integers(0, 2**32, (N, 32), dtype=np.uint64).astype(np.uint32)
    np.testing.assert_array_equal(wp.run_movmatrix(regs), movmatrix(regs[:, None, :])[0][:, 0])


@gpu
@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["up", "down", "bfly", "idx"]), st.sampled_from([1, 2, 4, 8, 16, 32]),
       st.sampled_from(["full", "per_lane_b", "half_warp"]), st.integers(0, 2**32 - 1))
def test_shfl_bit_exact(mode, width, masking, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**32, (N, 32), dtype=np.uint64).astype(np.uint32)
    b = (rng.integers(0, 32, (N, 1)) * np.ones((1, 32), np.int64)) if masking != "per_lane_b" else rng.integers(0, 2**32, (N, 32))
    c = np.full(N, ((32 - width) << 8) | (0 if mode == "up" else 0x1F), np.int64)
    mask = np.full(N, 0xFFFFFFFF if masking != "half_warp" else 0x0000FFFF, np.int64)
    active = np.broadcast_to((((mask[:, None] >> LANE) & 1) == 1), (N, 32))
    try:
        d, p, _ = shfl_sync(mode, a[:, None], b[:, None].astype(np.int64), c[:, None, None] * np.ones((1, 1, 32), np.int64),
                            mask[:, None], active=active[:, None])
    except Exception as exc:  # undefined by the ISA for this draw (a source outside the mask): nothing to compare
        from flashsim.warp import UndefinedResult

        assert isinstance(exc, UndefinedResult)
        return
    gd, gp = wp.run_shfl(mode, a, b.astype(np.uint32), c.astype(np.uint32), mask.astype(np.uint32))
    np.testing.assert_array_equal(np.where(active, gd, 0), d[:, 0])
    np.testing.assert_array_equal(np.where(active, gp, 0).astype(bool), p[:, 0])
    assert (gp[~active] == 2).all()


@gpu
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(wp.CP_ASYNC_KERNELS)), st.integers(0, 2**32 - 1))
def test_cp_async_bit_exact(kind, seed):
    cache, cp = kind
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (N, SMEM), dtype=np.uint8)
    gmem = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    dst = np.stack([rng.permutation(SMEM // cp)[:32] * cp for _ in range(N)])  # distinct destinations
    src = rng.integers(0, (1 << 16) // cp, (N, 32)) * cp
    src_size = rng.integers(0, cp + 1, (N, 32))
    active = rng.integers(0, 2**32, N, dtype=np.uint64)
    got = wp.run_cp_async(image, gmem, dst, src, src_size, active, cp_size=cp, cache=cache)
    sm = SharedMemory.from_image(image, races=False)
    act = ((active[:, None] >> LANE.astype(np.uint64)) & 1).astype(bool)
    cp_async(sm, gmem, dst[:, None], src[:, None], cp_size=cp, src_size=src_size[:, None], cache=cache, active=act[:, None])
    cp_async_wait_all(sm)
    np.testing.assert_array_equal(got, sm.data)


# ------------------------------------------------------------------------------- CPU-side checks


def test_wrappers_check_arguments_before_the_gpu():
    img = np.zeros((1, SMEM), np.uint8)
    with pytest.raises(ArgumentError, match="image=.*8192 bytes"):
        wp.run_ldmatrix(np.zeros((1, 100), np.uint8), np.zeros((1, 32), np.int64))
    with pytest.raises(ArgumentError, match=r"addr=.*\(1, 32\)"):
        wp.run_ldmatrix(img, np.zeros((1, 16), np.int64))
    with pytest.raises(ArgumentError, match="offsets must lie in 0..8191"):
        wp.run_ldmatrix(img, np.full((1, 32), SMEM, np.int64))
    with pytest.raises(ArgumentError, match="num=3"):
        wp.run_ldmatrix(img, np.zeros((1, 32), np.int64), num=3)
    with pytest.raises(ArgumentError, match="regs=.*uint32"):
        wp.run_stmatrix(img, np.zeros((1, 32), np.int64), np.zeros((1, 32, 4), np.int32))
    with pytest.raises(ArgumentError, match="mode='xor'"):
        wp.run_shfl("xor", np.zeros((1, 32), np.uint32), np.zeros((1, 32), np.uint32), [0], [0])
    with pytest.raises(ArgumentError, match="cache/cp_size"):
        wp.run_cp_async(img, np.zeros(64, np.uint8), np.zeros((1, 32)), np.zeros((1, 32)), np.zeros((1, 32)), [0],
                        cp_size=8, cache="cg")


def _symbols(path) -> set[str]:
    cubin = runtime.check_compiles_nvcc(path, arch="sm_90")
    return {m.decode() for m in re.findall(rb"[A-Za-z_][A-Za-z0-9_]{2,}", cubin)}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH (CUDA toolkit)")
def test_every_probe_kernel_is_in_the_sm90_cubin():
    warp = _symbols(runtime.KERNELS_DIR / "probe_warp.cu")
    want = {wp.ldmatrix_kernel_name(n, t) for n in (1, 2, 4) for t in (False, True)}
    want |= {wp.stmatrix_kernel_name(n, t) for n in (1, 2, 4) for t in (False, True)}
    want |= {"movmatrix_trans", "shfl_up", "shfl_down", "shfl_bfly", "shfl_idx", *wp.CP_ASYNC_KERNELS.values()}
    assert want <= warp, want - warp
    smem = _symbols(runtime.KERNELS_DIR / "probe_smem.cu")
    want = set(check_banks.KERNELS) | {c.kernel for c in check_races.CASES}
    assert want <= smem, want - smem
