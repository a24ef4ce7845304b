"""Thread-value layouts: MMA and ldmatrix atoms against the PTX fragment tables, and TiledCopy/TiledMMA
partitions checked over every thread and element (each element owned once; ldmatrix feeds each register
exactly the element the mma reads from it)."""

import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.layout import (
    COPY_OPS, MMA_OPS, Copy_Atom, Layout, S, Swizzle, TiledMMA, composition, evaluate, make_identity_tensor,
    make_tensor, make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B, partition_fragment_C, rank, size,
    tile_to_shape,
)

from flashsim.warp.fragments import fragment

LANES = np.arange(32)


def _tv(layout):
    """[thread, value] -> index, from a (thread, value) layout."""
    nt, nv = int(size(layout, 0)), int(size(layout, 1))
    return evaluate(layout).reshape(nv, nt).T


def _table(instruction, operand, dtype="f16"):
    """[lane, CuTe's V# = elems * reg + half] -> (row, col) from flashsim.warp.fragments, the PTX ISA's tables."""
    f = fragment(instruction, operand, dtype)
    return f.row.reshape(32, -1), f.col.reshape(32, -1)


def _mma_tables(instruction, c_dtype="f32"):
    """The atom's index tables: A m + 16 k, B n + 8 k (B's fragment rows are k), C m + 16 n."""
    (am, ak), (bk, bn), (cm, cn) = (_table(instruction, "A"), _table(instruction, "B"),
                                    _table(instruction, "C", c_dtype))
    return am + 16 * ak, bn + 8 * bk, cm + 16 * cn


# cute/atom/mma_traits_sm80.hpp: ALayout, BLayout, CLayout of the m16n8 atoms as CuTe prints them
CUTE_TV = {
    "mma.m16n8k16": ("((_4,_8),(_2,_2,_2)):((_32,_1),(_16,_8,_128))", "((_4,_8),(_2,_2)):((_16,_1),(_8,_64))"),
    "mma.m16n8k8": ("((_4,_8),(_2,_2)):((_32,_1),(_16,_8))", "((_4,_8),_2):((_16,_1),_8)"),
}
CUTE_C = "((_4,_8),(_2,_2)):((_32,_1),(_16,_8))"


@pytest.mark.parametrize("name", ["SM80_16x8x16_F32F16F16F32_TN", "SM80_16x8x16_F32BF16BF16F32_TN",
                                  "SM80_16x8x16_F16F16F16F16_TN", "SM75_16x8x8_F32F16F16F32_TN",
                                  "SM80_16x8x8_F32F16F16F32_TN", "SM75_16x8x8_F16F16F16F16_TN"])
def test_mma_atoms_are_the_fragment_tables(name):
    atom = MMA_OPS[name]
    instruction = "mma.m16n8k16" if "16x8x16" in name else "mma.m16n8k8"
    a, b, c = _mma_tables(instruction, "f16" if "F16F16F16F16" in name else "f32")
    assert np.array_equal(_tv(atom.layout_a), a)
    assert np.array_equal(_tv(atom.layout_b), b)
    assert np.array_equal(_tv(atom.layout_c), c)
    assert (str(atom.layout_a), str(atom.layout_b), str(atom.layout_c)) == (*CUTE_TV[instruction], CUTE_C)


@pytest.mark.parametrize("x", [1, 2, 4])
def test_ldmatrix_atoms_are_the_fragment_tables(x):
    """ldmatrix .x{1,2,4}: lanes 8j..8j+7 give the rows of matrix j; register j of every lane holds its
    m8n8 fragment of matrix j (element offsets within the x matrices of 8x8 b16)."""
    atom = Copy_Atom(COPY_OPS[f"SM75_U32x{x}_LDSM_N"], "half_t")
    src = _tv(atom.val_src)
    for lane in range(32):
        j, r = lane // 8, lane % 8
        if j < x:  # lanes beyond the x matrices pass addresses that are not used
            assert list(src[lane]) == [64 * j + 8 * r + c for c in range(8)]
    row, col = _table("ldmatrix.m8n8", "M", None)
    exp = np.concatenate([64 * j + 8 * row + col for j in range(x)], axis=1)
    assert np.array_equal(_tv(atom.val_dst), exp)


@pytest.mark.parametrize("x", [2, 4, 8])
def test_ldmatrix_trans_atoms_deliver_the_transpose(x):
    atom = Copy_Atom(COPY_OPS[f"SM75_U16x{x}_LDSM_T"], "half_t")
    row, col = _table("ldmatrix.m8n8", "M", None)
    exp = np.concatenate([64 * j + 8 * col + row for j in range(x // 2)], axis=1)
    assert np.array_equal(_tv(atom.val_dst), exp)  # lane T holds column T/4, rows 2(T%4), 2(T%4)+1 of matrix j


def test_an_atom_layout_that_contradicts_its_table_is_refused():
    from flashsim.layout.atoms import _derived

    table = np.arange(32 * 4).reshape(4, 32).T.copy()
    assert str(_derived("ok", 32, 4, table)) == "(_32,_4):(_1,_32)"
    table[5, 3] += 1
    with pytest.raises(ArgumentError, match="no layout of shape"):
        _derived("bad", 32, 4, table)


FA2_MMA = TiledMMA(MMA_OPS["SM80_16x8x16_F32F16F16F32_TN"], Layout((S(4), S(1), S(1))), (S(64), S(16), S(16)))


def _coords(t):
    """Coordinates held by a partition of an identity tensor, one row per element: (N, 2)."""
    return evaluate(t.layout()) + np.array([int(x) for x in t.data.coord])


def test_tiled_mma_owns_every_C_element_once_and_replicates_A():
    M, N, K = (int(FA2_MMA.tile_size_mnk(i)) for i in range(3))
    c = evaluate(FA2_MMA.get_layoutC_TV())
    assert sorted(c.tolist()) == list(range(M * N))
    a = evaluate(FA2_MMA.get_layoutA_TV())
    assert sorted(set(a.tolist())) == list(range(M * K)) and len(a) == M * K


@pytest.mark.parametrize("op,side", [("SM75_U32x4_LDSM_N", "A"), ("SM75_U32x4_LDSM_N", "B"),
                                     ("SM75_U32x2_LDSM_N", "B"), ("SM75_U16x8_LDSM_T", "B")])
def test_ldmatrix_copy_feeds_each_register_the_element_the_mma_reads(op, side):
    """make_tiled_copy_A/B + retile_D: the element the copy writes into a register is the element the
    TiledMMA expects in that register, for every thread of the CTA."""
    cp = (make_tiled_copy_A if side == "A" else make_tiled_copy_B)(Copy_Atom(COPY_OPS[op], "half_t"), FA2_MMA)
    ident = make_identity_tensor((S(128), S(128)))
    for tid in (0, 1, 2, 5, 31, 32, 63, 77, 100, 127):
        thr, tcp = FA2_MMA.get_thread_slice(tid), cp.get_thread_slice(tid)
        part = thr.partition_A if side == "A" else thr.partition_B
        frag = (thr.partition_fragment_A if side == "A" else thr.partition_fragment_B)(ident)
        mma_coords = _coords(part(ident))             # mma element index -> (row, col)
        regs = evaluate(frag.layout())                 # mma element index -> register
        inv = np.empty(len(regs), int)
        inv[regs] = np.arange(len(regs))
        view = tcp.retile_D(frag)                      # copy element index -> register
        got = _coords(tcp.partition_D(ident))          # copy element index -> (row, col)
        assert np.array_equal(got, mma_coords[inv[evaluate(view.layout())]]), tid


def test_cp_async_tiled_copy_covers_the_tile_once():
    tc = make_tiled_copy(Copy_Atom(COPY_OPS["SM80_CP_ASYNC_CACHEGLOBAL"]("uint128_t"), "half_t"),
                         Layout((S(16), S(8)), (S(8), S(1))), Layout((S(1), S(8))))
    ident = make_identity_tensor((S(128), S(128)))
    seen = np.zeros((128, 128), int)
    for tid in range(128):
        c = _coords(tc.get_thread_slice(tid).partition_S(ident))
        seen[c[:, 0], c[:, 1]] += 1
        assert np.all(np.diff(c[:8, 1]) == 1) and np.all(c[:8, 0] == c[0, 0])  # 8 contiguous halves per cp.async
    assert np.all(seen == 1)


def test_fa2_structure_matches_its_static_asserts():
    """The CUTE_STATIC_ASSERTs of FlashAttention-2's copy() and gemm() (seed 000) hold on these partitions."""
    half = "half_t"
    atom = composition(Swizzle(3, 3, 3), Layout((S(8), S(64)), (S(64), S(1))))
    sQ = make_tensor(tile_to_shape(atom, (S(128), S(128))))
    sK = make_tensor(tile_to_shape(atom, (S(32), S(128))))
    thr = FA2_MMA.get_thread_slice(7)
    tSrQ, tSrK = thr.partition_fragment_A(sQ), thr.partition_fragment_B(sK)
    acc_s = partition_fragment_C(FA2_MMA, (S(128), S(32)))
    assert int(size(tSrQ, 1)) == int(size(acc_s, 1)) and int(size(tSrK, 1)) == int(size(acc_s, 2))
    assert int(size(tSrQ, 2)) == int(size(tSrK, 2))
    cq = make_tiled_copy_A(Copy_Atom(COPY_OPS["SM75_U32x4_LDSM_N"], half), FA2_MMA).get_thread_slice(7)
    ck = make_tiled_copy_B(Copy_Atom(COPY_OPS["SM75_U32x4_LDSM_N"], half), FA2_MMA).get_thread_slice(7)
    tSsQ, tSsK = cq.partition_S(sQ), ck.partition_S(sK)
    assert int(size(tSsQ, 1)) == int(size(cq.retile_D(tSrQ), 1))
    assert int(size(tSsK, 1)) == int(size(ck.retile_D(tSrK), 1))
    assert int(rank(tSsQ)) == 3 and str(acc_s.layout()) == "((_2,_2),_2,_4):((_1,_2),_4,_8)"


def test_tiled_copy_rejects_a_value_layout_the_atom_cannot_move():
    with pytest.raises(ArgumentError, match=r"val_layout=.*moves 8 half_t per thread"):
        make_tiled_copy(Copy_Atom(COPY_OPS["SM80_CP_ASYNC_CACHEGLOBAL"]("uint128_t"), "half_t"),
                        Layout((S(16), S(8)), (S(8), S(1))), Layout((S(1), S(4))))


def test_thread_index_out_of_range_is_named():
    with pytest.raises(ArgumentError, match=r"thr_idx=128: outside the 128 threads"):
        FA2_MMA.get_thread_slice(128)
