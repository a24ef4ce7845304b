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
