"""The bank report of kernel1 and fa2 (flashsim.kernels.banks) against Nsight Compute on the same launches
(traces/banks/fa/ncu_fa.json, recorded by python -m gpu.ncu_fa on the H100): wavefronts and conflicts per op
class must be equal."""

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from flashsim.attention import check_args
from flashsim.kernels import banks

NCU = Path(__file__).resolve().parents[1] / "traces" / "banks" / "fa" / "ncu_fa.json"
PREFIX = "smsp__sass_l1tex_data_"


def _launches():
    return [L for L in json.loads(NCU.read_text())["launches"] if L["kernel"] in ("kernel1", "fa2")]


@pytest.mark.parametrize("launch", _launches(), ids=lambda L: f"{L['kernel']}-{'-'.join(map(str, L['problem']))}")
def test_bank_report_totals_equal_nsight_compute(launch):
    b, sq, sk, h, d, dtype = launch["problem"]
    dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    q, k = np.zeros((b, sq, h, d), dt), np.zeros((b, sk, h, d), dt)
    rows = banks.ledger_for(launch["kernel"], check_args(q, k, k, **launch["masks"])).report()
    m = launch["metrics"]
    for op in ("ldsm", "st", "ld", "ldgsts"):
        wf = sum(r.wavefronts for r in rows if r.op == op)
        assert wf == m[f"{PREFIX}pipe_lsu_wavefronts_mem_shared_op_{op}"], op
        conflicts = m.get(f"{PREFIX}bank_conflicts_pipe_lsu_mem_shared_op_{op}")
        if conflicts is not None:  # ncu has an instruction-level conflict counter for ldsm and ldgsts only
            assert sum(r.conflicts for r in rows if r.op == op) == conflicts, op


def test_kernel1_conflicts_come_from_its_unswizzled_ldmatrix_reads():
    q = np.zeros((1, 128, 1, 128), np.float16)
    rows = {(r.tag, r.op): r for r in banks.ledger_for("kernel1", check_args(q, q, q)).report()}
    # 256-byte rows: the 8 row addresses of an 8x8 matrix share their banks, 8 wavefronts instead of 1
    assert rows[("mma_qk", "ldsm")].wavefronts == 8 * rows[("mma_qk", "ldsm")].ideal
    assert banks.ledger_for("fa2", check_args(q, q, q)).report()[0].conflicts == 0  # Swizzle<3,3,3>: none


@pytest.mark.parametrize("launch", [L for L in json.loads(NCU.read_text())["launches"] if L["kernel"] in ("v5", "v6")],
                         ids=lambda L: f"{L['kernel']}-{'-'.join(map(str, L['problem']))}")
def test_v5_v6_ldmatrix_report_equals_nsight_compute(launch):
    b, sq, sk, h, d, _ = launch["problem"]
    rows = banks.v5_ldsm_ledger(b, h, sq, sk, d, launch["kernel"] == "v6").report()
    m = launch["metrics"]
    assert sum(r.wavefronts for r in rows) == m[f"{PREFIX}pipe_lsu_wavefronts_mem_shared_op_ldsm"]
    assert sum(r.conflicts for r in rows) == m[f"{PREFIX}bank_conflicts_pipe_lsu_mem_shared_op_ldsm"]


def test_v6_remaining_conflicts_are_the_q_k_v_reads_at_head_dim_64():
    rows = {r.tag: r for r in banks.v5_ldsm_ledger(1, 1, 64, 64, 64, True).report()}
    # swizzle<3,3,4> xors bits 3-5 with bits 7-9 of the element offset: with 64-element rows, rows 2i and
    # 2i+1 get the same xor, so an 8x8 matrix's 8 rows land on 4 bank groups: 2 wavefronts, not 1
    assert rows["mma_pv:S"].conflicts == 0
    for tag in ("mma_qk:Q", "mma_qk:K", "mma_pv:V"):
        assert rows[tag].wavefronts == 2 * rows[tag].ideal
    rows128 = banks.v5_ldsm_ledger(1, 1, 64, 64, 128, True).report()
    assert sum(r.conflicts for r in rows128) == 0  # 128-element rows: every row its own xor
