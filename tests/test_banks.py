"""The bank accountant: wavefronts and conflicts as Nsight Compute counts them (phases, broadcast, ldmatrix
per matrix, cp.async as ldgsts), against a brute-force reference and directed cases; the check_banks suite."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashsim.errors import ArgumentError
from flashsim.smem import PAIR_BROADCAST, PHASES, SharedMemory, bank_table, wavefronts
from flashsim.warp import cp_async, ld_shared, ldmatrix, st_shared
from flashsim.gpu import check_banks

LANE = np.arange(32)


def reference(addr, width, op="ld", active=None, num=4):
    """Per phase, the most distinct 32-bit words any bank must serve; summed. Plain Python."""
    active = [True] * 32 if active is None else list(active)
    if op in ("ldsm", "stsm"):
        lpp, nbytes = 8, 16
        active = [a and lane < 8 * num for lane, a in enumerate(active)]
    else:
        lpp, nbytes = {1: 32, 2: 32, 4: 32, 8: 16, 16: 8}[width], max(width, 4)
    wf = ideal = 0
    for p in range(32 // lpp):
        banks: dict[int, set] = {}
        for lane in range(p * lpp, (p + 1) * lpp):
            if not active[lane]:
                continue
            first = int(addr[lane]) // 4 if width >= 4 or op in ("ldsm", "stsm") else int(addr[lane]) // 4
            for w in range(first, first + nbytes // 4 if width >= 4 or op in ("ldsm", "stsm") else first + 1):
                banks.setdefault(w % 32, set()).add(w)
        if banks:
            wf += max(len(s) for s in banks.values())
            ideal += 1
    return wf, ideal


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([("ld", 1), ("ld", 2), ("ld", 4), ("st", 8), ("ld", 16), ("ldgsts", 16), ("ldsm", 16),
                        ("stsm", 16)]),
       st.lists(st.integers(0, 255), min_size=32, max_size=32), st.integers(0, 2**32 - 1),
       st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 8, 64]))
def test_equals_the_brute_force_reference(kind, units, mask, num, spread):
    op, width = kind
    addr = np.array(units) * spread * width  # small spreads give many shared words and banks
    active = ((mask >> LANE) & 1).astype(bool)
    wf, ideal = wavefronts(addr, width=width, op=op, active=active, num=num, model=PHASES)  # the plain rule
    assert (int(wf), int(ideal)) == reference(addr, width, op, active, num)
    table = bank_table(addr, width=width, op=op, active=active, num=num)
    assert sum(p["wavefronts"] for p in table) == int(wf)


def test_directed_cases_by_hand():
    cases = [
        # (op, width, addresses, expected wavefronts, why)
        ("ld", 4, LANE * 4, 1, "32 consecutive words"),
        ("ld", 4, LANE * 8, 2, "stride 2 words: banks 0,2,..,30 twice"),
        ("ld", 4, LANE * 128, 32, "every lane in bank 0, distinct words"),
        ("ld", 4, LANE * 132, 1, "padding 33 words: banks all distinct"),
        ("ld", 4, 0 * LANE, 1, "broadcast of one word"),
        ("ld", 4, (LANE // 4) * 4, 1, "multicast: 8 words, 4 lanes each"),
        ("ld", 1, LANE, 1, "bytes 0..31 are words 0..7"),
        ("ld", 8, LANE * 8, 2, "64-bit: two half-warp phases"),
        ("ld", 8, 0 * LANE, 1, "64-bit broadcast: lanes pair up, one phase (measured on sm_90)"),
        ("ld", 16, LANE * 16, 4, "128-bit: four quarter-warp phases"),
        ("ld", 16, LANE * 32, 8, "128-bit, 32 B stride: lanes l and l+4 of a quarter share banks"),
        ("ld", 16, LANE * 128, 32, "128-bit, all in banks 0-3: 8 per quarter"),
        ("ld", 16, np.where(LANE < 8, LANE * 128, LANE * 16), 11, "8 + 1 + 1 + 1: phases are not merged"),
        ("ldsm", 16, LANE * 16, 4, "ldmatrix.x4 contiguous rows: 1 per matrix"),
        ("ldsm", 16, ((LANE % 16) * 128 + (LANE // 16) * 8) * 2, 32, "seed 001 16x128 f16 tile: 4 x 8-way"),
        ("ldgsts", 16, LANE * 16, 4, "cp.async 16 B: as a 128-bit store"),
        ("ldgsts", 4, LANE * 4, 4, "cp.async 4 B from 16 * lane: 4 source lines, 1 wavefront each (measured on sm_90)"),
    ]
    for op, width, addr, want, why in cases:
        wf, ideal = wavefronts(np.asarray(addr), width=width, op=op)
        assert int(wf) == want, why


def test_seed_001_tile_has_4x7_way_conflicts_and_its_swizzles_remove_them():
    q = (LANE % 16) * 128 + (LANE // 16) * 8
    wf, ideal = wavefronts(q * 2, op="ldsm")
    assert (int(wf), int(ideal), int(wf - ideal)) == (32, 4, 28)
    table = bank_table(q * 2, op="ldsm")
    assert [p["wavefronts"] for p in table] == [8, 8, 8, 8]  # each 8x8 matrix: 8-way, i.e. 7 extra
    from flashsim.swizzle import cute_swizzle, seed_swizzle

    assert int(wavefronts(seed_swizzle(q, 3, 3, 4) * 2, op="ldsm")[0]) == 4
    s = (LANE % 16) * 16 + (LANE // 16) * 8
    assert int(wavefronts(s * 2, op="ldsm")[0]) == 8  # rows 0-3 collide with rows 4-7
    assert int(wavefronts(seed_swizzle(s, 1, 3, 3) * 2, op="ldsm")[0]) == 4
    atom = (LANE % 16) * 64 + (LANE // 16) * 8
    assert int(wavefronts(atom * 2, op="ldsm")[0]) == 32
    assert int(wavefronts(cute_swizzle(atom, 3, 3, 3) * 2, op="ldsm")[0]) == 4


def test_pair_broadcast_model_is_a_named_alternative():
    for addr, width, phases, pair in [((LANE // 2) * 16, 16, 4, 2), (0 * LANE, 16, 4, 2), ((LANE % 4) * 16, 16, 4, 4),
                                      ((LANE // 2) * 8, 8, 2, 1), (LANE * 16, 16, 4, 4)]:
        assert int(wavefronts(addr, width=width, model=PHASES)[0]) == phases
        assert int(wavefronts(addr, width=width, model=PAIR_BROADCAST)[0]) == pair
        assert int(wavefronts(addr, width=width)[0]) == pair  # the sm_90 default packs pairs
    assert int(wavefronts((LANE // 2) * 16, width=16, op="st", model=PAIR_BROADCAST)[0]) == 4  # loads only


def test_batched_shapes_and_inactive_phases():
    addr = np.broadcast_to(LANE * 128, (3, 5, 32))
    wf, ideal = wavefronts(addr, width=16)
    assert wf.shape == (3, 5) and (wf == 32).all() and (ideal == 4).all()
    wf, ideal = wavefronts(LANE * 16, width=16, active=(LANE >= 8) & (LANE < 16))
    assert (int(wf), int(ideal)) == (1, 1)
    wf, ideal = wavefronts(LANE * 4, active=np.zeros(32, bool))
    assert (int(wf), int(ideal)) == (0, 0)


def test_the_ledger_attributes_wavefronts_to_tags():
    sm = SharedMemory(1, 8192, races=False)
    ldmatrix(sm, ((LANE % 16) * 128 + (LANE // 16) * 8) * 2, tag="Q ldmatrix")
    ldmatrix(sm, LANE * 16, tag="K ldmatrix")
    st_shared(sm, LANE * 8, np.zeros((32, 1), np.uint32), tag="C store")
    ld_shared(sm, LANE * 16, bits=128, tag="C store")
    cp_async(sm, np.zeros(1024, np.uint8), LANE * 16, LANE * 16, tag="gmem->smem")
    rows = {(r.tag, r.op): r for r in sm.ledger.report()}
    assert (rows[("Q ldmatrix", "ldsm")].wavefronts, rows[("Q ldmatrix", "ldsm")].conflicts) == (32, 28)
    assert rows[("K ldmatrix", "ldsm")].conflicts == 0
    assert rows[("C store", "st")].conflicts == 1 and rows[("C store", "ld")].wavefronts == 4
    assert rows[("gmem->smem", "ldgsts")].wavefronts == 4
    assert sm.ledger.report()[0].tag == "Q ldmatrix"  # worst first
    assert "Q ldmatrix" in sm.ledger.table().splitlines()[1]


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="op='lds'"):
        wavefronts(LANE * 4, op="lds")
    with pytest.raises(ArgumentError, match="width=3"):
        wavefronts(LANE * 4, width=3)
    with pytest.raises(ArgumentError, match="cp.async copies 4, 8 or 16"):
        wavefronts(LANE * 4, width=2, op="ldgsts")
    with pytest.raises(ArgumentError, match=r"addr=\(16,\)"):
        wavefronts(np.arange(16) * 4)
    with pytest.raises(ArgumentError, match="num=3"):
        wavefronts(LANE * 16, op="ldsm", num=3)


# ------------------------------------------------------------------------------- gpu/check_banks.py

def test_the_suite_covers_what_the_issue_asks():
    pats = check_banks.patterns()
    assert len(pats) >= 30
    kernels = {p.kernel for p in pats}
    for k in ("bank_ld32", "bank_ld64", "bank_ld128", "bank_st32", "bank_st64", "bank_st128", "bank_ldsm_x1",
              "bank_ldsm_x2", "bank_ldsm_x4", "bank_ldsm_x1_trans", "bank_ldsm_x2_trans", "bank_ldsm_x4_trans",
              "bank_ldgsts_cg16"):
        assert k in kernels, k
    names = {p.name for p in pats}
    for n in ("ld32_stride2", "ld32_padded33", "ld32_broadcast", "ldsm_x4_seed_Q_unswizzled", "ldsm_x4_atom8x64_Sw333",
              "ldsm_x4_seed_Q_swizzle334", "ldsm_x4_seed_S_swizzle133"):
        assert n in names
    by = {p.name: p for p in pats}
    assert by["ldsm_x4_seed_Q_unswizzled"].predict() == (32, 28)
    assert by["ldsm_x4_seed_Q_swizzle334"].predict() == (4, 0)
    assert by["ldsm_x4_atom8x64_Sw333"].predict() == (4, 0)


def test_every_bank_kernel_exists_in_probe_smem():
    src = (check_banks.Path(check_banks.__file__).parent / "kernels" / "probe_smem.cu").read_text()
    for k in check_banks.KERNELS:
        assert f"BANK_KERNEL({k})" in src or f"({k}," in src, k


def test_metric_choice_and_ncu_csv_parsing():
    listing = """Device NVIDIA H100 80GB HBM3 (GH100)
------------------------------------------------------- --------------------
Metric Name                                             Metric Description
smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld     # of shared memory wavefronts ...
smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ld # of bank conflicts ...
smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared           # of wavefronts
sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldgsts_cache_access  x
sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldgsts_cache_bypass  x
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld  hw
"""
    names = check_banks.parse_query_metrics(listing)
    assert "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld" in names and "Metric" not in names
    chosen = check_banks.choose_metrics(names, ["ld", "ldgsts", "stsm"])
    assert chosen["ld"]["wavefronts"] == ["smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld"]
    assert chosen["ldgsts"]["wavefronts"] == ["sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldgsts_cache_access",
                                              "sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldgsts_cache_bypass"]
    assert chosen["stsm"]["wavefronts"] == [] and chosen["stsm"]["total_wavefronts"]
    csv_text = ('==PROF== Connected to process 1\n'
                '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
                '"0","1","bank_ld32","smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld.sum","","1"\n'
                '"0","1","bank_ld32","smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum","","0"\n'
                '"1","1","bank_ld32","smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld.sum","","1,000"\n')
    launches = check_banks.results_by_launch(check_banks.parse_ncu_csv(csv_text))
    assert launches[0]["metrics"]["smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld"] == 1
    assert launches[1]["metrics"]["smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld"] == 1000
    pats = [p for p in check_banks.patterns() if p.name in ("ld32_stride32", "ld32_linear")]
    rows = check_banks.compare(pats, launches, chosen)
    assert [r.name for r in rows] == ["ld32_linear", "ld32_stride32"]
    assert [r.status for r in rows] == ["agree", "DIFFER"]  # 1000 measured where 32 are predicted


def test_check_banks_dry_run(tmp_path, capsys):
    assert check_banks.main(["--dry-run", "--out", str(tmp_path)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("check_banks: ") and "patterns" in last
    md = (tmp_path / "banks.md").read_text()
    assert "| ldsm_x4_seed_Q_unswizzled | bank_ldsm_x4 | 32 | 28 |" in md
    assert (tmp_path / "banks.json").is_file()


def test_check_banks_without_ncu_fails_clearly(tmp_path, capsys):
    assert check_banks.main(["--out", str(tmp_path), "--ncu", "/nonexistent/ncu"]) == 2
    captured = capsys.readouterr()
    assert "not found" in captured.err and "not measured" in captured.out.strip().splitlines()[-1]
