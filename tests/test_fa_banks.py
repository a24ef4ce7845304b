"""The bank counters of the FA kernels' own cubins run in the SASS interpreter (``flashsim.cuda.checking``)
against Nsight Compute on the same launches (traces/banks/fa/ncu_fa.json, recorded by python -m flashsim.gpu.ncu_fa
on the H100): per op class, the executed warp instructions, the wavefronts and the bank conflicts must
be equal.

What Nsight Compute measures per op class (the json's metrics):

- ldsm, ldgsts: instruction-level (``smsp__sass_...``) wavefronts and bank conflicts;
- ld, st: instruction-level wavefronts, but bank conflicts only from the L1 hardware counters
  ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}``, whose ``ld`` includes ldmatrix: the
  ld.shared conflicts are that minus the ldsm conflicts. The hardware counters are used only where their
  wavefronts equal the instruction-level ones (ld: ld + ldsm; st: st), i.e. nothing else was counted.

The interpreter's conflicts are wavefronts minus ideal wavefronts as Nsight Compute's source counters give
them (their "excessive" wavefronts). For ld/st they differ from the hardware bank-conflict counter in one
pattern, which is no bank conflict: a 64/128-bit access by a few lanes in different phases (v5/v6's
STS.64 of the {m, l} records by lanes 0 and 16: 2 wavefronts for 16 bytes, ideal 1, hardware conflicts 0).

Per instruction, the interpreter's counters are compared with Nsight Compute's source counters by
python -m flashsim.gpu.ncu_source (traces/sass/).
"""

import functools
import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from flashsim.check import bank_report

NCU = Path(__file__).resolve().parents[1] / "traces" / "banks" / "fa" / "ncu_fa.json"
PREFIX = "smsp__sass_l1tex_data_"
HW = "l1tex__data_"
LAUNCHES = json.loads(NCU.read_text())["launches"]
INSTR = {"ld": "shared_ld", "st": "shared_st", "ldsm": "ldsm", "ldgsts": "ldgsts"}


def _id(launch):
    return f"{launch['kernel']}-{'-'.join(map(str, launch['problem']))}"


@functools.lru_cache(maxsize=None)
def _report(kernel, problem, masks=()):
    b, sq, sk, h, d, dtype = problem
    dt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    q = rng.standard_normal((b, sq, h, d)).astype(dt)
    k, v = (rng.standard_normal((b, sk, h, d)).astype(dt) for _ in range(2))
    return bank_report(kernel, q, k, v, **dict(masks))


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


def _sites(launch):
    return _report(launch["kernel"], tuple(launch["problem"]), tuple(sorted(launch["masks"].items()))).bank_sites()


def _totals(sites, op):
    mine = [r for r in sites if r.op == op]
    return sum(r.executions for r in mine), sum(r.wavefronts for r in mine), sum(r.conflicts for r in mine)


def _sparse_excess(sites, op):
    """Excess wavefronts of 64/128-bit accesses whose active lanes ask for at most 128 bytes per wavefront
    of their ideal but fall in several phases: no bank conflict for the hardware counter."""
    return sum(r.conflicts for r in sites if r.op == op and r.sass.split()[0].split(".")[-1] in ("64", "128")
               and r.ideal < r.executions * (2 if "64" in r.sass.split()[0] else 4))


@pytest.mark.parametrize("launch", LAUNCHES, ids=_id)
def test_interpreted_bank_totals_equal_nsight_compute(launch):
    sites = _sites(launch)
    measured = _measured(launch["metrics"])
    for op, (instructions, wavefronts, conflicts) in measured.items():
        got = _totals(sites, op)
        if op == "ldgsts" and wavefronts == 0 and instructions > 0:
            # cp.async.cg (L1 bypass): executed, but its wavefronts are not counted by this counter on sm_90
            assert got[0] == instructions, (op, "instructions")
            continue
        excess = _sparse_excess(sites, op) if op in ("ld", "st") else 0
        assert got == (instructions, wavefronts, conflicts + excess), (op, got, (instructions, wavefronts, conflicts))


def _by_op(kernel, problem):
    sites = _report(kernel, problem).bank_sites()
    return {op: [s for s in sites if s.op == op] for op in ("ld", "st", "ldsm", "stsm", "ldgsts")}


def test_kernel1_conflicts_come_from_its_unswizzled_ldmatrix_reads():
    k1 = _by_op("kernel1", (1, 128, 128, 1, 128, "float16"))
    # 256-byte rows: the 8 row addresses of an 8x8 matrix share their banks: 8 wavefronts instead of 1
    worst = [s for s in k1["ldsm"] if s.wavefronts == 8 * s.ideal]
    assert worst and sum(s.conflicts for s in worst) == max(
        sum(s.conflicts for s in sites) for sites in k1.values())
    fa2 = _report("fa2", (1, 128, 128, 1, 128, "float16"))
    assert fa2.bank_totals()["fa2_hdim128_f16"]["conflicts"] == 0  # Swizzle<3,3,3>: none


def test_v6_remaining_conflicts_are_ldmatrix_reads_at_head_dim_64():
    # swizzle<3,3,4> xors bits 3-5 with bits 7-9 of the element offset: with 64-element rows, rows 2i and
    # 2i+1 get the same xor, so an 8x8 matrix's 8 rows land on 4 bank groups: 2 wavefronts, not 1
    v6 = _by_op("v6", (1, 64, 64, 1, 64, "float16"))
    conflicted = [s for s in v6["ldsm"] if s.conflicts]
    assert conflicted and all(s.wavefronts == 2 * s.ideal for s in conflicted)
    assert all(s.conflicts == 0 for op in ("ld", "ldgsts") for s in v6[op])
    # the stores' only excess: STS.64 of the {m, l} records by lanes 0 and 16 (two phases, 16 bytes)
    assert all(s.sass.startswith("STS.64") and s.wavefronts == 2 * s.ideal for s in v6["st"] if s.conflicts)
    v6_128 = _report("v6", (1, 64, 64, 1, 128, "float16")).bank_sites()
    assert sum(s.conflicts for s in v6_128 if s.op == "ldsm") == 0  # 128-element rows: every row its own xor


def test_v5_store_conflicts_are_two_way_and_v6_removes_them():
    v5 = _by_op("v5", (1, 64, 64, 1, 64, "float16"))
    v6 = _by_op("v6", (1, 64, 64, 1, 64, "float16"))
    # store_c16 to a 16-wide (32-byte-row) tile: rows g and g+4 share banks, every STS.32 2-way in v5;
    # swizzle<1,3,3> moves rows 4-7 to the other 16 bytes
    two_way = [s for s in v5["st"] if s.conflicts and s.sass.startswith("STS ")]
    assert two_way and all(s.wavefronts == 2 * s.ideal for s in two_way)
    assert sum(s.conflicts for s in v6["st"] if s.sass.startswith("STS ")) == 0
    assert len(v5["st"]) == len(v6["st"])
