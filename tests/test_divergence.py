"""The order in which a diverged warp runs its paths: the H200's logs of gpu/kernels/probe_paths.cu (traces/paths,
flashsim.divergence) replayed in the interpreter, both builds, bit for bit."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from flashsim import divergence as dv
from flashsim import fuzz as fz
from flashsim.sass import isa
from flashsim.sass import machine as M

RECORD = Path(__file__).resolve().parents[1] / "traces" / "paths" / dv.RECORD_NAME


@pytest.fixture(scope="module")
def record():
    return dv.load_record(RECORD)


def test_the_record_covers_every_case_in_both_builds(record):
    assert record["provenance"]["compute_capability"] == "9.0"
    assert sorted(record["builds"]) == sorted(fz.BUILDS)
    cases = {(c["kernel"], c["a"], c["b"]) for c in record["cases"]}
    assert cases == {(c.kernel, c.a, c.b) for c in dv.CASES}
    # every GPU log was the same in all of its launches, and the probe's kernels all diverge somewhere
    assert all(g is not None for c in record["cases"] for g in c["gpu"].values())
    kernels = {c.kernel for c in dv.CASES}
    assert kernels == set(dv.source().split("__global__ void ")[i].split("(")[0]
                          for i in range(1, dv.source().count("__global__ void ") + 1))


@pytest.mark.parametrize("which", fz.BUILDS)
def test_the_interpreter_runs_the_paths_in_the_gpus_order(record, which):
    rows = dv.compare(record, builds=[which])
    bad = [(r["case"], r.get("error", "")[:200]) for r in rows if not r["equal"]]
    assert not bad, (len(bad), bad[:5])


def test_the_probe_tells_the_smallest_group_rule_from_the_lowest_pc_rule(record, monkeypatch):
    # with lanes at the lowest PC always first, the H200's logs are not reproduced: the probe can fail
    monkeypatch.setattr(M.Machine, "_fewest_gate", lambda self, run: run)
    rows = dv.compare(record, builds=["nvrtc13"])
    bad = {r["case"].split("(")[0] for r in rows if not r["equal"]}
    assert {"paths_ifelse", "paths_nested", "paths_loops"} <= bad


def test_a_log_decodes_per_lane():
    out = np.full(dv.OUT_WORDS, 0xFFFFFFFF, np.uint32)
    out[0 * 32 + 3], out[1 * 32 + 3], out[0 * 32 + 4] = 0, 5, 1
    log = dv.decode_log(out)
    assert log[3] == [0, 5] and log[4] == [1] and log[0] == []


def test_a_bad_record_is_refused(tmp_path, record):
    with pytest.raises(ValueError, match="path"):
        dv.load_record(tmp_path / "missing")
    rec = json.loads(json.dumps({k: v for k, v in record.items()}, default=lambda b: None))
    which = next(iter(rec["builds"]))
    rec["builds"][which]["cubin"] = base64.b64encode(b"\0" * 64).decode()
    dv.write_record(rec, tmp_path)
    with pytest.raises(ValueError, match="sha256"):
        dv.load_record(tmp_path)


# --------------------------------------------------------------------------------------- NaN immediates
def _fsel():
    return isa.parse_instruction(0x2e0, {"opcode": "FSEL", "operands": "R17, R0, -QNAN, P0"})


def test_a_nan_immediate_takes_its_payload_from_the_encoding():
    # FSEL R17, R0, -QNAN, P0 as ptxas 13.0 encoded it (campaign seed 6, chunk 343 program 24)
    ins = isa.encoded_nan_immediates(_fsel(), 0xFC80000000000FFFFFDD800117808)
    assert ins.operands[2].value == 0xFFFFFDD8 and "nan_immediate" not in ins.attrs


@pytest.mark.parametrize("bits", [0x3F800000, 0x7FFFFDD8, 0xFF800000, 0xFF800001])
def test_a_nan_immediate_whose_encoding_disagrees_refuses_when_it_runs(bits):
    # not a NaN, the other sign, an infinity, a signalling NaN for a printed QNAN: the bits are not trusted
    from flashsim.sass.program import Program

    ins = isa.encoded_nan_immediates(_fsel(), bits << 32)
    assert "nan_immediate" in ins.attrs
    prog = Program(None, [ins], {})
    with pytest.raises(NotImplementedError, match=r"NaN immediate -QNAN .*pc=0x02e0 `FSEL R17, R0, -QNAN, P0`"):
        prog.compiled[0x2e0](None, None)


def test_packed_half_immediates_stay_as_printed():
    ins = isa.parse_instruction(0, {"opcode": "HFMA2", "operands": "R0, R1, -QNAN, -QNAN, R2"})
    assert isa.encoded_nan_immediates(ins, 0) is ins


# --------------------------------------------------------------------------------------- on the GPU
@pytest.mark.gpu
def test_the_gpu_gives_the_recorded_logs_and_the_interpreter_its_own(tmp_path, record):
    from flashsim.gpu import path_probes

    assert path_probes.main(["--out", str(tmp_path)]) == 0, (tmp_path / "path_probes.md").read_text()
    fresh = dv.load_record(tmp_path)
    for which in fz.BUILDS:
        if fresh["builds"][which]["sha256"] != record["builds"][which]["sha256"]:
            continue  # another compiler release: its own cubin, compared above with the interpreter
        assert [c["gpu"][which] for c in fresh["cases"]] == [c["gpu"][which] for c in record["cases"]], which


def test_the_smallest_group_gate_picks_per_warp_the_fewest_lanes_then_the_lowest_pc():
    rng = np.random.default_rng(7)

    class State:
        pass

    m = State()
    for _ in range(100):
        m.pc = rng.choice([0x10, 0x20, 0x30, 0x1230], size=(3, 4, 32)).astype(np.int64)
        run = rng.random((3, 4, 32)) < 0.7
        got = M.Machine._fewest_gate(m, run)
        for a in range(3):
            for w in range(4):
                r = run[a, w]
                if not r.any():
                    assert not got[a, w].any()
                    continue
                pcs, counts = np.unique(m.pc[a, w][r], return_counts=True)
                best = min(zip(counts, pcs))[1]
                np.testing.assert_array_equal(got[a, w], r & (m.pc[a, w] == best))
