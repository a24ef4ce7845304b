"""Replay of traces/fa/golden_fa.npz: every kernel's out (and LSE) recorded on the GPU by
``python -m flashsim.gpu.validate_fa --install``, reproduced by its twin bit for bit on the CPU."""

import json
from pathlib import Path

import numpy as np
import pytest

from flashsim.kernels import problems, run_twin
from golden_npz import load, problem_keys

GOLDEN = Path(__file__).resolve().parents[1] / "traces" / "fa" / "golden_fa.npz"


def _cases():
    return problem_keys(GOLDEN)


@pytest.fixture(scope="module")
def golden():
    return load(GOLDEN, "python -m flashsim.gpu.validate_fa --install")


def test_golden_covers_every_kernel(golden):
    """Every kernel's problems are in this record, but the split-KV configurations': the features' record
    (traces/fa2x, replayed by tests/test_fa2_features.py) holds them, with their combine kernel and KV caches."""
    kernels = {json.loads(str(golden[k]))["kernel"] for k in golden if k.endswith("/params")}
    features = load(GOLDEN.parents[1] / "fa2x" / "golden_fa2_features.npz", "python -m flashsim.gpu.validate_fa2_features")
    split = {json.loads(str(features[k]))["kernel"] for k in features if k.endswith("/params")} - kernels
    assert split == {"fa2_splitkv", "fa2_splitkv1"} and kernels | split == set(problems.KERNELS)
    prov = json.loads(str(golden["provenance"]))
    assert prov["compute_capability"] == "9.0"


@pytest.mark.parametrize("key", _cases())
def test_twin_reproduces_the_gpu(golden, key):
    params = json.loads(str(golden[f"{key}/params"]))
    params["window_size"] = tuple(params["window_size"])
    case = problems.make_case(params)
    assert problems.inputs_digest(case) == str(golden[f"{key}/inputs_sha256"]), (
        "the problem generator no longer reproduces the recorded inputs")
    out, lse = run_twin(params["kernel"], case.q, case.k, case.v, **case.kwargs)
    assert np.array_equal(out.view(np.uint16), golden[f"{key}/out"]), case.describe()
    if f"{key}/lse" in golden:
        assert np.array_equal(lse.view(np.uint32), golden[f"{key}/lse"]), case.describe()
