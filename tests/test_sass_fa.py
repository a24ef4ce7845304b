"""The four FlashAttention kernels from their cubins in the SASS interpreter, bit for bit against their
twins (which equal the H100 on 800 problems, traces/fa/fa_report.md), on small problems of each kernel's
domain (CPU only; tests/test_sass_gpu.py compares with the GPU itself)."""

from __future__ import annotations

import numpy as np
import pytest

from flashsim.kernels import problems, run_twin
from flashsim.gpu.fa_kernels import run_kernel

CASES = [
    dict(kernel="v5", seqlen_q=64, seqlen_k=48, headdim=32, kind="normal"),
    dict(kernel="v6", seqlen_q=64, seqlen_k=64, headdim=64, kind="nan_inf"),
    dict(kernel="kernel1", seqlen_q=64, seqlen_k=64, headdim=128, kind="large", dtype="bfloat16"),
    dict(kernel="fa2", seqlen_q=100, seqlen_k=33, headdim=64, kind="normal", dtype="float16", causal=True),
    dict(kernel="fa2", seqlen_q=129, seqlen_k=100, headdim=128, kind="normal", dtype="bfloat16",
         window_size=(3, 5), softcap=30.0, heads=2, heads_k=1),
    dict(kernel="fa2", seqlen_q=7, seqlen_k=160, headdim=40, kind="subnormal", dtype="float16", heads=3, heads_k=1),
]


def _params(over: dict) -> dict:
    rng = np.random.default_rng(0)
    p = problems.draw_params(problems.rng_pick(rng), over["kernel"])
    p.update(batch=1, seed=7, softmax_scale=None, dropout_p=0.0, return_attn_probs=False, alibi="none")
    if p["kernel"] != "fa2":
        p["heads"] = p["heads_k"] = 1
    else:
        p.update(heads=1, heads_k=1, causal=False, window_size=(-1, -1), softcap=0.0)
    p.update(over)
    return p


@pytest.mark.parametrize("over", CASES, ids=lambda c: f"{c['kernel']}-d{c['headdim']}-{c['kind']}")
def test_interpreter_equals_twin(over):
    case = problems.make_case(_params(over))
    kernel = case.params["kernel"]
    i_out, i_lse = run_kernel(kernel, case.q, case.k, case.v, backend="interp", **case.kwargs)
    t_out, t_lse = run_twin(kernel, case.q, case.k, case.v, **case.kwargs)
    np.testing.assert_array_equal(i_out.view(np.uint16), t_out.view(np.uint16), err_msg=case.describe())
    if t_lse is not None:
        np.testing.assert_array_equal(i_lse.view(np.uint32), t_lse.view(np.uint32), err_msg=case.describe())
