"""fa4h (gpu/kernels/fa4h.cu, seed 004's warp-specialised pipeline on sm_90): the H100's record replayed by the
twin and by the interpreter on the recorded cubin, the host side's sizes, and its refusals."""

import hashlib
import json

import ml_dtypes
import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.gpu import validate_fa4h as V
from flashsim.kernels.problems import make_case
from flashsim.kernels.spec import get


@pytest.fixture(scope="module")
def record():
    return json.loads(V.RECORD.read_text())


def _sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_the_record_is_an_h100_run_that_passed(record):
    assert record["device"]["name"].startswith("NVIDIA H100") and record["device"]["compute_capability"] == "9.0"
    s = record["summary"]
    assert s["problems"] >= 100 and s["failed"] == 0 and s["twin_equal"] == s["problems"]
    assert s["rule_checked"] >= 40 and s["rule_passed"] == s["rule_checked"]
    assert hashlib.sha256(V.recorded_cubin()).hexdigest() == record["cubin_sha256"]
    dims = {(r["params"]["headdim"], r["params"]["dtype"]) for r in record["problems"]}
    assert dims == {(d, t) for d in (64, 128, 192) for t in ("float16", "bfloat16")}


def test_the_twin_gives_the_h100s_bytes_on_every_recorded_problem(record):
    twin = get("fa4h").twin_module
    for row in record["problems"]:
        case = make_case(V._params(row["params"]))
        out, lse = twin.run(case.q, case.k, case.v, **case.kwargs)
        assert _sha(out.view(np.uint16)) == row["out_sha256"], row["describe"]
        assert _sha(lse.view(np.uint32)) == row["lse_sha256"], row["describe"]


def test_the_interpreter_gives_the_h100s_bytes_on_the_recorded_cubin(record):
    import flashsim.cuda as fc

    module = fc.RawModule(cubin=V.recorded_cubin())
    for row in record["problems"][:10]:
        got = V.replay_one(V._params(row["params"]), None, row.get("ctas"), module)
        assert (got["out_sha256"], got["lse_sha256"]) == (row["out_sha256"], row["lse_sha256"]), row["describe"]


@pytest.mark.parametrize("dqk, dv, want", [(64, 64, 2 * 8192 + 3 * 16384 + 80 + 1024),
                                           (128, 128, 2 * 16384 + 3 * 32768 + 80 + 1024),
                                           (192, 128, 2 * 24576 + 131072 + 80 + 1024)])
def test_shared_memory_is_the_kernels_plan(dqk, dv, want):
    # Smem<kQK, kV>::kBytes of fa4h.cu: the uneven 192/128 K/V region is 128 KiB, not 3 x 48 KiB
    assert get("fa4h").instance(dqk).smem_bytes == want and get("fa4h").instance(dqk).headdim_v == dv


def test_a_persistent_grid_is_one_cta_per_sm_or_per_tile():
    spec = get("fa4h")
    q = np.zeros((4, 4096, 16, 128), ml_dtypes.bfloat16)
    args = spec.check(q, q, q)
    assert spec.instance_for(args).grid(args) == (132, 1, 1) and spec.instance_for(args).work_tiles(args) == 2048
    small = np.zeros((1, 200, 2, 128), ml_dtypes.bfloat16)
    args = spec.check(small, small, small)
    assert spec.instance_for(args).grid(args) == (4, 1, 1)


def test_v_must_have_the_instances_head_dim():
    q = np.zeros((1, 64, 1, 192), np.float16)
    with pytest.raises(ArgumentError, match=r"^v=.*kernel 'fa4h' at head dim 192 takes v of head dim 128"):
        get("fa4h").instance_for(get("fa4h").check(q, q, q))
    with pytest.raises(ArgumentError, match=r"^headdim=96: kernel 'fa4h' is built for headdim 64 or 128 or 192"):
        get("fa4h").check(*(np.zeros((1, 64, 1, 96), np.float16),) * 3)


def test_the_validator_rejects_bad_arguments(capsys):
    for argv, words in ((["--problems", "5"], "give --out DIR"), (["--out", "x", "--problems", "0"], "--problems 0"),
                        (["--replay", "r.json", "--schedules", "-1"], "--schedules -1"),
                        (["--explore", "0"], "--explore 0"), (["--replay", "nope.json"], "--replay nope.json"),
                        (["--explore", "1", "--jobs", "0"], "--jobs 0"),
                        (["--explore", "1", "--first-seed", "-1"], "--first-seed -1"),
                        (["--explore", "1", "--deadline", "0"], "--deadline 0")):
        with pytest.raises(SystemExit) as e:
            V.main(argv)
        assert e.value.code == 2 and words in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ explored schedules
@pytest.fixture(scope="module")
def sweeps():
    files = sorted(V.RECORD.parent.glob("fa4h_explore_*.json"))
    assert files, "traces/fa4h/fa4h_explore_*.json missing"
    return [json.loads(f.read_text()) for f in files]


def test_the_correct_kernel_is_clean_over_a_thousand_explored_schedules(sweeps, record):
    """The recorded sweeps (validate_fa4h --explore, on the H100's host and here): every (problem, seed) run once,
    at least 1000 in all, none differing from the default schedule's bytes or reporting a race, a protocol finding
    or a deadlock; all of them on the recorded cubin, whose default runs gave the H100's bytes."""
    runs: set = set()
    defaults: dict = {}
    gpu_checked = set()
    for rec in sweeps:
        assert rec["cubin_sha256"] == record["cubin_sha256"] and rec["summary"]["bad"] == 0
        for row in rec["problems"]:
            key = json.dumps(row["problem"], sort_keys=True)
            assert not row["bad"] and not row["default_findings"] and row["runs"] == len(row["seeds"])
            new = {(key, s) for s in row["seeds"]}
            assert not new & runs, "a seed recorded twice"
            runs |= new
            assert defaults.setdefault(key, (row["out_sha256"], row["lse_sha256"])) == (row["out_sha256"], row["lse_sha256"])
            if "gpu_equal" in row:
                assert row["gpu_equal"] and (row["gpu_out_sha256"], row["gpu_lse_sha256"]) == defaults[key]
                gpu_checked.add(key)
    assert len(runs) >= 1000
    assert {json.dumps(V._jsonable(p), sort_keys=True) for p in V.EXPLORE} == set(defaults) == gpu_checked
    assert all(sum(1 for k, _ in runs if k == key) >= 300 for key in defaults)


def test_a_recorded_schedule_replays_to_the_recorded_bytes(sweeps):
    """One seeded schedule of the sweep, run again here: the same bytes as the recorded default run, and clean."""
    row = next(r for r in sweeps[0]["problems"] if r["problem"]["headdim"] == 64)
    got = V.replay_one(V._params(row["problem"]), row["seeds"][-1], 1)
    assert (got["out_sha256"], got["lse_sha256"], got["findings"]) == (row["out_sha256"], row["lse_sha256"], "")
