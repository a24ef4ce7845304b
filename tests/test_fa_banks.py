"""The bank report of kernel1, fa2 and v5/v6 (flashsim.kernels.banks) against Nsight Compute on the same
launches (traces/banks/fa/ncu_fa.json, recorded by python -m gpu.ncu_fa on the H100): per op class, the
executed warp instructions, the wavefronts and the bank conflicts must be equal.

What Nsight Compute measures per op class (the json's metrics):

- ldsm, ldgsts: instruction-level (``smsp__sass_...``) wavefronts and bank conflicts;
- ld, st: instruction-level wavefronts, but bank conflicts only from the L1 hardware counters
  ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}``, whose ``ld`` includes ldmatrix: the
  ld.shared conflicts are that minus the ldsm conflicts. The hardware counters are used only where their
  wavefronts equal the instruction-level ones (ld: ld + ldsm; st: st), i.e. nothing else was counted.
"""

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from flashsim.attention import check_args
from flashsim.kernels import banks

NCU = Path(__file__).resolve().parents[1] / "traces" / "banks" / "fa" / "ncu_fa.json"
PREFIX = "smsp__sass_l1tex_data_"
HW = "l1tex__data_"
LAUNCHES = json.loads(NCU.read_text())["launches"]
INSTR = {"ld": "shared_ld", "st": "shared_st", "ldsm": "ldsm", "ldgsts": "ldgsts"}


def _id(launch):
    return f"{launch['kernel']}-{'-'.join(map(str, launch['problem']))}"


def _report(launch):
    b, sq, sk, h, d, dtype = launch["problem"]
    if launch["kernel"] in ("v5", "v6"):
        return banks.v5_ledger(b, h, sq, sk, d, launch["kernel"] == "v6").report()
    dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    q, k = np.zeros((b, sq, h, d), dt), np.zeros((b, sk, h, d), dt)
    return banks.ledger_for(launch["kernel"], check_args(q, k, k, **launch["masks"])).report()


def _measured(m):
    """Per op: (warp instructions, wavefronts, bank conflicts) as Nsight Compute counted them."""
    wf = {op: m[f"{PREFIX}pipe_lsu_wavefronts_mem_shared_op_{op}"] for op in INSTR}
    # the hardware counters saw exactly the instructions the instruction-level ones did
    assert m[f"{HW}pipe_lsu_wavefronts_mem_shared_op_ld"] == wf["ld"] + wf["ldsm"]
    assert m[f"{HW}pipe_lsu_wavefronts_mem_shared_op_st"] == wf["st"]
    ldsm_conflicts = m[f"{PREFIX}bank_conflicts_pipe_lsu_mem_shared_op_ldsm"]
    conflicts = {
        "ld": m[f"{HW}bank_conflicts_pipe_lsu_mem_shared_op_ld"] - ldsm_conflicts,
        "st": m[f"{HW}bank_conflicts_pipe_lsu_mem_shared_op_st"],
        "ldsm": ldsm_conflicts,
        "ldgsts": m[f"{PREFIX}bank_conflicts_pipe_lsu_mem_shared_op_ldgsts"],
    }
    return {op: (m[f"smsp__sass_inst_executed_op_{INSTR[op]}"], wf[op], conflicts[op]) for op in INSTR}


def _totals(rows, op):
    mine = [r for r in rows if r.op == op]
    return sum(r.instructions for r in mine), sum(r.wavefronts for r in mine), sum(r.conflicts for r in mine)


@pytest.mark.parametrize("launch", LAUNCHES, ids=_id)
def test_bank_report_totals_equal_nsight_compute(launch):
    rows = _report(launch)
    for op, (instructions, wavefronts, conflicts) in _measured(launch["metrics"]).items():
        got = _totals(rows, op)
        assert got[0] == instructions, (op, "instructions")
        assert got[1] == wavefronts, (op, "wavefronts")
        assert got[2] == conflicts, (op, "conflicts")


@pytest.mark.parametrize("launch", [L for L in LAUNCHES if L["kernel"] in ("v5", "v6")], ids=_id)
def test_v5_v6_shared_load_conflicts_equal_nsight_compute(launch):
    """The MD_F records' LDS.64 from lane pairs (softmax w_prev, update_o w_prev/w_new) pack into one
    wavefront with an ideal of one: 0 conflicts, as the hardware counter says (flashsim.smem)."""
    assert _totals(_report(launch), "ld")[2] == _measured(launch["metrics"])["ld"][2]


def test_kernel1_conflicts_come_from_its_unswizzled_ldmatrix_reads():
    q = np.zeros((1, 128, 1, 128), np.float16)
    rows = {(r.tag, r.op): r for r in banks.ledger_for("kernel1", check_args(q, q, q)).report()}
    # 256-byte rows: the 8 row addresses of an 8x8 matrix share their banks, 8 wavefronts instead of 1
    assert rows[("mma_qk", "ldsm")].wavefronts == 8 * rows[("mma_qk", "ldsm")].ideal
    assert banks.ledger_for("fa2", check_args(q, q, q)).report()[0].conflicts == 0  # Swizzle<3,3,3>: none


def test_v6_remaining_conflicts_are_the_q_k_v_reads_at_head_dim_64():
    rows = {r.tag: r for r in banks.v5_ledger(1, 1, 64, 64, 64, True).report() if r.op == "ldsm"}
    # swizzle<3,3,4> xors bits 3-5 with bits 7-9 of the element offset: with 64-element rows, rows 2i and
    # 2i+1 get the same xor, so an 8x8 matrix's 8 rows land on 4 bank groups: 2 wavefronts, not 1
    assert rows["mma_pv:S"].conflicts == 0
    for tag in ("mma_qk:Q", "mma_qk:K", "mma_pv:V"):
        assert rows[tag].wavefronts == 2 * rows[tag].ideal
    rows128 = banks.v5_ledger(1, 1, 64, 64, 128, True).report()
    assert sum(r.conflicts for r in rows128 if r.op in ("ldsm", "st")) == 0  # 128-element rows: every row its own xor


def test_v5_store_conflicts_are_the_c_fragment_stores_and_v6_has_none():
    v5 = {(r.tag, r.op): r for r in banks.v5_ledger(1, 1, 64, 64, 64, False).report()}
    v6 = {(r.tag, r.op): r for r in banks.v5_ledger(1, 1, 64, 64, 64, True).report()}
    # store_c16 to a 16-wide (32-byte-row) tile: rows g and g+4 share banks, every STS.32 2-way in v5;
    # swizzle<1,3,3> moves rows 4-7 to the other 16 bytes
    for tag in ("store_s", "store_o"):
        assert v5[(tag, "st")].wavefronts == 2 * v5[(tag, "st")].ideal
        assert v6[(tag, "st")].conflicts == 0
    assert sum(r.conflicts for r in v5.values() if r.op == "st") == sum(
        v5[(t, "st")].conflicts for t in ("store_s", "store_o"))
    # the softmax's {m, l} stores come from lanes 0 and 16, one in each half-warp phase of a 64-bit
    # store: 2 wavefronts, no conflict; the 16-bit score loads and P stores are 1 wavefront each
    ml = v5[("softmax:ml", "st")]
    assert ml.wavefronts == 2 * ml.instructions and ml.conflicts == 0
    for key in (("softmax:QK", "ld"), ("softmax:S", "st"), ("update_o:O", "ld")):
        assert v5[key].wavefronts == v5[key].instructions == v6[key].wavefronts
