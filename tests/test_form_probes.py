"""The SASS forms of other compilers (gpu/kernels/probe_forms.cu built by NVRTC 13.0, by ptxas 13.0 from PTX and
by Triton's ptxas 12.8): the interpreter against the PTX ISA's pseudo-code on drawn cases, against the H100's
recorded outputs (traces/triton/form_probes.npz) on the very cubins the GPU ran, and, under --gpu, against
the GPU again."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashsim.gpu import form_probes as F
from flashsim.gpu import sass_probes as sp

BUILDS = [b for b in F.BUILDS if b != "ptxas128"] + (["ptxas128"] if __import__("importlib").util.find_spec("triton")
                                                     else [])
PAIRS = [(b, p) for b in BUILDS for p in F.PROBES]


def _ids(x):
    return f"{x[0]}-{x[1].name}"


@pytest.mark.parametrize("pair", PAIRS, ids=_ids)
def test_each_build_contains_the_forms_it_probes(pair):
    which, pr = pair
    assert not F.missing_forms(which, pr), F.forms(which, pr.name)


@pytest.mark.parametrize("pair", PAIRS, ids=_ids)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_interpreter_follows_the_ptx_isa(pair, data):
    which, pr = pair
    case = data.draw(sp.case_strategy(pr), label="case")
    msgs = sp.compare(case, F.run_interp(case, which), sp.reference(case))
    assert not msgs, "\n".join(msgs)


def test_the_h100_record():
    rep = json.loads(F.TRACE.with_suffix(".json").read_text())
    for which, r in rep["builds"].items():
        for name, e in r["probes"].items():
            assert e["equal"] and not e["forms_missing"] and not e["reference_mismatches"], (which, name, e)
            assert not e.get("driver_jit_mismatches"), (which, name)
    for which, e in rep["smem_sizes"].items():
        assert e["read"] == e["launched"], which  # %dynamic_smem_size is the launch's dynamic shared memory
    assert rep["ptxas128"].startswith("release 12.8") and rep["ptxas130"].startswith("release 13.0")


def test_the_recorded_cubins_replay_in_the_interpreter():
    import flashsim.cuda as fc

    recorded = F.replay(F.TRACE)
    assert set(recorded) == set(F.BUILDS)
    failures = []
    for which, (cubin, items) in recorded.items():
        mod = fc.RawModule(cubin=cubin)
        assert items
        for case, gpu_out in items:
            failures += sp.compare(case, F.run_interp(case, which, module=mod), gpu_out, f"the H100 ({which})")
    assert not failures, "\n".join(failures[:10])


@pytest.mark.parametrize("which", BUILDS)
def test_dynamic_smem_size_in_the_interpreter(which):
    assert F.smem_sizes(which, gpu=False) == list(F.SMEM_SIZES)


@pytest.mark.gpu
@pytest.mark.parametrize("pair", PAIRS, ids=_ids)
def test_gpu_and_interpreter_agree(pair):
    which, pr = pair
    for k in range(2):
        case = sp.make_case(pr, 777 + k)
        gpu = F.run_gpu(case, which)
        assert not sp.compare(case, F.run_interp(case, which), gpu, "the GPU")
        if which == "ptxas130":
            assert not sp.compare(case, F.run_gpu(case, "driver-jit"), gpu, "the driver's JIT")
