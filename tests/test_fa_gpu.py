"""pytest --gpu: every FlashAttention CUDA kernel against its twin on hypothesis-drawn problems (shapes, GQA
ratios, masks, softcap, dtypes, value kinds), bit for bit, and against float64 with flash-attn's rule.

``FLASHSIM_FA_EXAMPLES`` sets the examples per kernel (default 25; gpu/validate_fa.py runs 200 per kernel
with a seeded generator over the same domain and writes the report)."""

import os

import pytest
from hypothesis import HealthCheck, given, settings

from flashsim.kernels import problems
from flashsim.strategies import fa_cases

EXAMPLES = int(os.environ.get("FLASHSIM_FA_EXAMPLES", "25"))


def _check(case):
    from gpu.fa_kernels import run_kernel
    from gpu.validate_fa import check_case

    res, _ = check_case(case, run_kernel)
    assert res["out_diff"] is None, f"{res['case']}: out differs {res['out_diff']}"
    assert res["lse_diff"] is None, f"{res['case']}: lse differs {res['lse_diff']}"
    assert res["rule"] is not False, f"{res['case']}: {res['rule_detail']}"  # None: non-finite inputs


def _test(kernel):
    @pytest.mark.gpu
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
    @given(case=fa_cases(kernel))
    def test(case):
        _check(case)

    test.__name__ = f"test_{kernel}_twin_is_bit_identical_to_the_gpu"
    return test


for _k in problems.KERNELS:
    globals()[f"test_{_k}_twin_is_bit_identical_to_the_gpu"] = _test(_k)
