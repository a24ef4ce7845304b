"""Replay of H100 results through the SASS interpreter, bit for bit (no GPU needed).

traces/sass/sass_golden.npz (written by ``python -m flashsim.gpu.validate_sass --install`` on an H100) holds small
FlashAttention problems: their parameters, the cubins the GPU ran and the GPU's outputs. Each problem is
run by the interpreter twice: on the recorded cubin (the interpreter == the GPU on the very same code),
and on today's build of gpu/kernels (so a change to a kernel that changes its results fails here).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flashsim.kernels import problems

GOLDEN = Path(__file__).resolve().parents[1] / "traces" / "sass" / "sass_golden.npz"
pytestmark = pytest.mark.skipif(not GOLDEN.exists(), reason="no golden data yet: run python -m flashsim.gpu.validate_sass "
                                                            "--install on a GPU machine")


def _load():
    with np.load(GOLDEN) as z:
        return {k: z[k] for k in z.files}


def _cases():
    if not GOLDEN.exists():
        return []
    data = _load()
    keys = sorted({k.rsplit("/", 1)[0] for k in data if k.endswith("/params")})
    return keys


@pytest.fixture(scope="module")
def golden():
    return _load()


def _run(kernel, case, cubin=None):
    from flashsim.kernels import sources
    from flashsim.kernels.launch import run_kernel
    from flashsim.kernels.spec import get

    spec = get(kernel)
    opts = spec.build_options()
    key = (sources.source_hash(spec.source), tuple(opts))
    saved = sources._INTERP.pop(key, None)
    try:
        if cubin is not None:
            sources.interpreted_module(spec.source, options=opts, cubin=cubin)
        out, lse = run_kernel(kernel, case.q, case.k, case.v, backend="interp", **case.kwargs)[:2]
        sha = sources.interpreted_module(spec.source, options=opts).sha256
    finally:
        sources._INTERP.pop(key, None)
        if saved is not None:
            sources._INTERP[key] = saved
    return out, lse, sha


@pytest.mark.parametrize("key", _cases())
def test_interpreter_replays_the_gpu(golden, key):
    params = json.loads(str(golden[f"{key}/params"]))
    case = problems.make_case(params)
    assert problems.inputs_digest(case) == str(golden[f"{key}/inputs_sha256"]), "the problem generator changed"
    sha = str(golden[f"{key}/cubin_sha256"])
    cubin = golden[f"cubin/{sha}"].tobytes()
    want_out = golden[f"{key}/out"]
    want_lse = golden.get(f"{key}/lse")
    out, lse, got_sha = _run(params["kernel"], case, cubin)
    assert got_sha == sha
    np.testing.assert_array_equal(out.view(want_out.dtype), want_out, err_msg=f"{case.describe()} (recorded cubin)")
    if want_lse is not None:
        np.testing.assert_array_equal(lse.view(np.uint32), want_lse, err_msg=f"{case.describe()} LSE")
    # today's build of the source: its results must still be the GPU's
    out2, lse2, sha2 = _run(params["kernel"], case)
    note = "" if sha2 == sha else f" (the kernel's cubin changed: {sha2[:16]} vs recorded {sha[:16]})"
    np.testing.assert_array_equal(out2.view(want_out.dtype), want_out, err_msg=f"{case.describe()}{note}")
    if want_lse is not None:
        np.testing.assert_array_equal(lse2.view(np.uint32), want_lse, err_msg=f"{case.describe()} LSE{note}")
