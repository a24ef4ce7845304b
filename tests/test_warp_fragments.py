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


# gpu/kernels/fragments.cuh restates these tables in C++ (its index functions feed probe_mma.cu): compiled by
# NVRTC and run in the SASS interpreter (no GPU, no nvcc), every function must give fragments.py's (row, col).
FRAGMENTS_CUH_DUMP = r"""
#include "fragments.cuh"
extern "C" __global__ void fragment_tables(int* out) {
    const int lane = threadIdx.x & 31;
    int* o = out + lane * 52;
    for (int r = 0; r < 4; ++r) for (int h = 0; h < 2; ++h) {
        *o++ = frag::a_m16k16_row(lane, r); *o++ = frag::a_m16k16_col(lane, r, h); }
    for (int r = 0; r < 2; ++r) for (int h = 0; h < 2; ++h) {
        *o++ = frag::a_m16k8_row(lane, r); *o++ = frag::a_m16k8_col(lane, r, h); }
    for (int r = 0; r < 2; ++r) for (int h = 0; h < 2; ++h) {
        *o++ = frag::b_k16n8_k(lane, r, h); *o++ = frag::b_k16n8_n(lane); }
    for (int h = 0; h < 2; ++h) { *o++ = frag::b_k8n8_k(lane, h); *o++ = frag::b_k8n8_n(lane); }
    for (int i = 0; i < 4; ++i) { *o++ = frag::c_f32_row(lane, i); *o++ = frag::c_f32_col(lane, i); }
    for (int r = 0; r < 2; ++r) for (int h = 0; h < 2; ++h) {
        *o++ = frag::c_f16_row(lane, r); *o++ = frag::c_f16_col(lane, r, h); }
}
"""
#: the dump's blocks in order: (instruction, operand, dtype) of fragments.py, (row, col) per (reg, half)
CUH_BLOCKS = [("mma.m16n8k16", "A", "f16"), ("mma.m16n8k8", "A", "f16"), ("mma.m16n8k16", "B", "f16"),
              ("mma.m16n8k8", "B", "f16"), ("mma.m16n8k16", "C", "f32"), ("mma.m16n8k16", "C", "f16")]


def test_fragments_cuh_is_the_fragments_py_tables_in_the_interpreter():
    import flashsim.cuda as fc
    from flashsim.kernels.sources import KERNELS_DIR

    m = fc.RawModule(code=FRAGMENTS_CUH_DUMP, options=(f"-I{KERNELS_DIR}",), name="fragment_tables.cu")
    out = fc.zeros(32 * 52, np.int32)
    m.get_function("fragment_tables")((1,), (32,), (out,))
    got = out.get().reshape(32, 52)
    want = np.concatenate([np.stack([f.row, f.col], axis=-1).reshape(32, -1)
                           for f in (fragment(*b) for b in CUH_BLOCKS)], axis=1)
    np.testing.assert_array_equal(got, want)


def test_quad_columns_are_the_c_table_rows():
    """Lane t of a quad holds, n-tile by n-tile, the columns the C table gives its row-g registers."""
    from flashsim.warp.fragments import quad_columns

    c = fragment("mma.m16n8k16", "C", "f32")
    order = quad_columns(32)
    assert sorted(order.ravel().tolist()) == list(range(32))
    for lane in range(32):
        t = lane % 4
        mine = [8 * n + c.coords(lane, e)[1] for n in range(4) for e in range(4) if c.coords(lane, e)[0] == lane // 4]
        assert order[t].tolist() == mine
    with pytest.raises(ArgumentError, match="ncols=12"):
        quad_columns(12)


@pytest.mark.parametrize("instruction,operand,dtype,per", [("mma.m16n8k16", "C", "f32", 1),
                                                          ("mma.m16n8k16", "A", "f16", 2),
                                                          ("mma.m16n8k16", "C", "f16", 2)])
def test_trace_register_maps_read_what_pack_gives(instruction, operand, dtype, per):
    """flashsim.trace.record reads a warp's registers out of a (rows, cols) array exactly as ``pack`` lays the
    tiles into registers: warp w's tile (m, n) at rows 16 w + 64 m, columns cols n."""
    from flashsim.trace.record import WARPS, tiled_index

    frag = fragment(instruction, operand, dtype)
    m_tiles, n_tiles = 2, 3
    rows, cols = 64 * m_tiles, frag.cols * n_tiles
    tile = np.random.default_rng(0).integers(0, 1 << 16, (rows, cols), dtype=np.uint64).astype(frag.elem_dtype)
    flat = np.ascontiguousarray(tile).view(np.uint32).reshape(-1) if per == 2 else tile.reshape(-1)
    idx = tiled_index(frag, 64, m_tiles, n_tiles, cols // per, per=per)
    for w in range(WARPS):
        for m in range(m_tiles):
            for n in range(n_tiles):
                t = tile[16 * w + 64 * m:16 * w + 64 * m + frag.rows, frag.cols * n:frag.cols * (n + 1)]
                r0 = (m * n_tiles + n) * frag.regs
                np.testing.assert_array_equal(flat[idx[w][:, r0:r0 + frag.regs]], pack(frag, np.ascontiguousarray(t)))


def test_the_tables_are_a_light_import_and_the_instructions_load_on_use():
    """flashsim.layout's atoms and the trace maps read the tables: importing them must not load shared memory or
    numba (flashsim.gpu.runtime's promise); ``from flashsim.warp import mma`` is still the instruction."""
    import subprocess
    import sys

    code = ("import sys, flashsim.layout, flashsim.warp.fragments; assert 'numba' not in sys.modules, 'numba'; "
            "from flashsim.warp import mma, ldmatrix; assert callable(mma) and mma.__name__ == 'mma'")
    subprocess.run([sys.executable, "-c", code], check=True)
