"""Replay the H100 golden numerics data on the CPU models, bit for bit, and reject damaged files."""

import json
from pathlib import Path

import numpy as np
import pytest

from flashsim import TraceError
from flashsim.golden import REPLAYERS, load, replay_all

GOLDEN = Path(__file__).resolve().parent.parent / "traces" / "numerics"


def _results():
    return replay_all(GOLDEN)


@pytest.fixture(scope="module")
def results():
    return _results()


def test_every_golden_file_is_present():
    missing = [n for n in REPLAYERS if not (GOLDEN / n).exists()]
    assert not missing, f"golden files missing from {GOLDEN}: {missing}"


def test_golden_provenance_names_the_gpu():
    for name in REPLAYERS:
        _, prov = load(GOLDEN / name)
        for key in ("name", "compute_capability", "driver_release", "cuda_runtime_version", "nvrtc_version",
                    "cupy_version", "date", "seed", "sources"):
            assert key in prov, (name, key)
        assert prov["compute_capability"].startswith("9.0")


@pytest.mark.parametrize("family", ["mma", "fma.", "add.", "mul.", "max", "min", "cvt", "ex2", "lg2", "rcp", "tanh", "div"])
def test_replay_is_bit_exact(results, family):
    mine = [r for r in results if r.instruction.startswith(family)]
    assert mine, f"no golden data for {family}"
    bad = [(r.instruction, r.mismatches, r.cases, r.examples[:2]) for r in mine if r.mismatches]
    assert not bad, bad


def test_golden_sizes(results):
    mma = [r for r in results if r.instruction.startswith("mma")]
    assert len(mma) == 5 and all(r.cases >= 1000 * 128 for r in mma)


def test_damaged_files_are_reported(tmp_path):
    bad = tmp_path / "cvt.npz"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(TraceError, match=r"cvt\.npz: not a readable golden-data file"):
        load(bad)
    np.savez(tmp_path / "f32.npz", a=np.zeros(2, np.uint32))
    with pytest.raises(TraceError, match=r"f32\.npz: no provenance record"):
        load(tmp_path / "f32.npz")
    np.savez(tmp_path / "f32.npz", a=np.zeros(2, np.uint32), provenance=np.array(json.dumps({})))
    with pytest.raises(TraceError, match=r"f32\.npz: missing array 'b'"):
        REPLAYERS["f32.npz"](tmp_path / "f32.npz")
    truncated = tmp_path / "mma_k16.npz"
    truncated.write_bytes((GOLDEN / "mma_k16.npz").read_bytes()[:5000])
    with pytest.raises(TraceError, match="mma_k16.npz"):
        REPLAYERS["mma_k16.npz"](truncated)
    with pytest.raises(TraceError, match="no golden numerics files"):
        replay_all(tmp_path / "empty")


@pytest.mark.gpu
def test_update_golden(run_options, tmp_path):
    """`pytest --gpu --update-golden` re-runs the full validation and rewrites traces/numerics."""
    if not run_options.update_golden:
        pytest.skip("rewrites traces/numerics only under --update-golden")
    from flashsim.gpu import validate

    assert validate.main(["--out", str(tmp_path), "--install"]) == 0
